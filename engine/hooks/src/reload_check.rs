//! The reload check a live catalog runs on each new revision: its hook module loaded and
//! link-checked before the revision serves.

use std::sync::Arc;

use colloquy_policy::CompiledTemplate;
use colloquy_policy::live::{Checked, CompileListener, TemplateCheck};

use crate::{HookRuntime, Preparation};

/// A reload check that loads and link-checks each new revision's hook module on `runtime`
/// before the catalog swaps it in: a module that would fail every call is refused at reload
/// time (and reported in `/v1/status`) instead of failing conversations later, and the first
/// conversation does not pay for compiling it. The compile runs on the runtime's background
/// compile thread ([`HookRuntime::prepare_in_background`]): meanwhile the revision waits
/// outside the catalog (its template's previous revision serves) and the rest of the reload
/// goes on; when it ends, the catalog reloads and the revision serves, or is refused.
pub fn hook_check(runtime: Arc<HookRuntime>) -> Box<TemplateCheck> {
    Box::new(
        move |template: &CompiledTemplate, listener: &CompileListener| match runtime
            .prepare_in_background(template, listener)
        {
            Preparation::Ready => Checked::Ready,
            Preparation::Compiling => Checked::Compiling,
            Preparation::Refused(failure) => {
                Checked::Refused(format!("hook module refused: {failure}"))
            }
        },
    )
}
