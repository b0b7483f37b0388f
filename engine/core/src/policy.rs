//! The engine following a policy manager: a [`LiveCatalog`] is a [`TemplateSource`], so an
//! engine built on one sees every reload at once (embedded: the same object the manager
//! swaps; remote: a mirror kept by [`colloquy_policy::follower`]). New conversations read
//! the newest snapshot; running ones look up the revision they are pinned to, which the
//! live catalog keeps.

use std::sync::Arc;

use colloquy_policy::{CompiledTemplate, LiveCatalog};

use crate::engine::TemplateSource;

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

    fn starting(&self, name: &str) -> Vec<Arc<CompiledTemplate>> {
        let snapshot = self.snapshot();
        let ramped = (snapshot.candidates.get(name))
            .filter(|candidate| candidate.ramp_percent() > 0)
            .map(|candidate| candidate.template.clone());
        snapshot
            .catalog
            .latest(name)
            .into_iter()
            .chain(ramped)
            .collect()
    }
}
