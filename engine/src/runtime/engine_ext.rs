//! [`Engine::with_hooks`]: gives an engine a hook runtime, without touching `Engine::new`.

use std::sync::Arc;

use super::HookRuntime;
use crate::conversation::Conversation;
use crate::engine::Engine;
use crate::step::Step;

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

    /// A step on `conversation` that runs hooks on this engine's runtime.
    pub(crate) fn step<'a>(&'a self, conversation: &'a mut Conversation, now: u64) -> Step<'a> {
        let mut step = Step::new(conversation, now);
        step.hooks = self.hooks.as_deref();
        step
    }
}
