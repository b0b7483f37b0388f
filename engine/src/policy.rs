//! The engine following a policy manager: a [`LiveCatalog`] is a [`TemplateSource`], so an
//! engine built on one sees every reload at once (embedded: the same object the manager
//! swaps; remote: a mirror kept by [`colloquy_policy::follower`]). New conversations read
//! the newest snapshot; running ones look up the revision they are pinned to, which the
//! live catalog keeps.

use std::sync::Arc;

use colloquy_policy::live::TemplateCheck;
use colloquy_policy::{CompiledTemplate, LiveCatalog};

use crate::engine::TemplateSource;
use crate::runtime::HookRuntime;

impl TemplateSource for LiveCatalog {
    fn latest(&self, name: &str) -> Option<Arc<CompiledTemplate>> {
        LiveCatalog::latest(self, name)
    }

    fn revision(&self, name: &str, revision: &str) -> Option<Arc<CompiledTemplate>> {
        LiveCatalog::revision(self, name, revision)
    }

    fn names(&self) -> Vec<Arc<str>> {
        self.snapshot().catalog.names()
    }
}

/// A reload check that loads and link-checks each new revision's hook module on `runtime`
/// before the catalog swaps it in: a module that would fail every call is refused at reload
/// time (and reported in `/v1/status`) instead of failing conversations later, and the first
/// conversation does not pay for compiling it.
pub fn hook_check(runtime: Arc<HookRuntime>) -> Box<TemplateCheck> {
    Box::new(move |template: &CompiledTemplate| {
        runtime
            .prepare(template)
            .map_err(|failure| format!("hook module refused: {failure}"))
    })
}
