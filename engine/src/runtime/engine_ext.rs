//! [`Engine::with_hooks`]: gives an engine a hook runtime, without touching `Engine::new`.

use std::sync::Arc;

use super::HookRuntime;
use crate::engine::Engine;

impl Engine {
    /// This engine, running templates' wasm hooks on `runtime`. Without it, a template with
    /// a hook fails every hook call under its failure policy (`fail_closed` refuses the
    /// message): a policy written as a hook is never skipped silently.
    pub fn with_hooks(mut self, runtime: Arc<HookRuntime>) -> Engine {
        self.hooks = Some(runtime);
        self
    }

    /// The engine's hook runtime, if it has one.
    pub fn hook_runtime(&self) -> Option<&Arc<HookRuntime>> {
        self.hooks.as_ref()
    }
}
