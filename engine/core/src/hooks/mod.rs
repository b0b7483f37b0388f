//! What the engine needs of a hook runtime, and what it gives one: the [`HookCaller`] trait
//! the engine calls templates' wasm hooks through (`colloquy-hooks` implements it with
//! wasmtime; the core never names wasm), the [`HookFailure`]s a call may end in, where a
//! call runs ([`CallSite`]), the JSON event a hook is given ([`input`]), and the call
//! durations `/metrics` reports ([`latency`]).

pub mod input;
pub mod latency;

use colloquy_policy::CompiledTemplate;
use colloquy_protocol::hook::{HookInput, HookOutput};
use colloquy_protocol::template::HookEvent;

use crate::hook_pool::HookPool;

/// Runs templates' hooks for an engine ([`crate::Engine::with_hooks`]).
pub trait HookCaller: Send + Sync + 'static {
    /// Calls `template`'s hook for `event` with `input`, as long as `site` allows: with the
    /// hook's whole budget where the thread may be held ([`CallSite::Owned`]), or a short
    /// slice on an async worker ([`CallSite::Inline`], [`HookFailure::NeedsPool`] past it).
    fn call_at(
        &self,
        site: CallSite,
        template: &CompiledTemplate,
        event: HookEvent,
        input: &HookInput<'_>,
    ) -> Result<HookOutput, HookFailure>;

    /// Whether `template`'s hook calls may be tried on an async worker now.
    fn runs_inline(&self, template: &CompiledTemplate) -> bool;

    /// The threads hooked conversations' steps run on when they may not run inline.
    fn pool(&self) -> &HookPool;

    /// Call durations per event and result, for `/metrics`.
    fn latency(&self) -> &latency::HookLatency;
}

/// Why a hook call failed. Each says what happened in words a template author can act on;
/// the engine applies the template's failure policy to any of them.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HookFailure {
    /// The engine was built without a hook runtime, so it cannot honour a template's hook.
    #[error("this engine has no hook runtime (see Engine::with_hooks)")]
    NoRuntime,
    /// The template was compiled from text without a file origin, so its module was not read.
    #[error("the hook module was not loaded (the template was compiled without a file path)")]
    NoModule,
    /// The bytes are not a valid wasm module.
    #[error("the module does not compile: {0}")]
    Compile(String),
    /// The module does not fit ABI v1 (an export missing or mistyped, a foreign import).
    #[error("the module does not fit hook ABI v1: {0}")]
    Link(String),
    /// The component does not fit the hooks world (a foreign import such as WASI, an
    /// export of the wrong type, none of the event exports).
    #[error("the component does not fit the `colloquy:hooks@1.0.0` world: {0}")]
    World(String),
    /// `hooks_abi_version` returned a version this engine does not speak.
    #[error("the module speaks hook ABI version {found}; this engine speaks {supported}")]
    AbiVersion {
        /// What the module returned.
        found: i64,
        /// What this engine speaks, e.g. `1`.
        supported: String,
    },
    /// The template lists an event whose export the module lacks.
    #[error("the template runs the hook at `{event}` but the module exports no `{export}`")]
    MissingEvent {
        /// The lifecycle event.
        event: &'static str,
        /// The export it needs.
        export: &'static str,
    },
    /// No instance could be created (the pool is full, or the module's initial memory is
    /// over the cap).
    #[error("cannot instantiate the module: {0}")]
    Instantiate(String),
    /// The call ran past the template's `timeout_ms`.
    #[error("the hook ran longer than its {ms} ms budget and was stopped")]
    Timeout {
        /// The budget.
        ms: u64,
    },
    /// The hook tried to grow its memory past the template's `memory_bytes`.
    #[error("the hook asked for {requested} bytes of memory, over its cap of {cap} bytes")]
    OutOfMemory {
        /// Bytes it asked for.
        requested: u64,
        /// The cap.
        cap: u64,
    },
    /// The hook trapped (`unreachable`, an out-of-bounds access, a division by zero, ...).
    #[error("the hook trapped: {0}")]
    Trap(String),
    /// The output is over the hook runtime's output limit.
    #[error("the hook returned {len} bytes, over the {max}-byte output limit")]
    OutputTooLarge {
        /// Bytes returned.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// A call tried on an async worker ran past the hook runtime's inline slice (or its module had before):
    /// the engine runs the step again on the hook pool. Never a caller's answer.
    #[error("the hook ran past its slice on an async worker; it runs on the hook pool")]
    NeedsPool,
    /// The output is not valid hook output JSON (malformed, an unknown action, ...).
    #[error("the hook returned invalid output: {0}")]
    BadOutput(String),
}

/// Where a hook call runs, which decides how long it may run there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallSite {
    /// On a thread that may be held for the whole budget (the hook pool, a test, a tool).
    Owned,
    /// On an async worker: at most the hook runtime's inline slice, or [`HookFailure::NeedsPool`].
    Inline,
}

/// The name of a lifecycle event in templates and logs.
pub fn event_name(event: HookEvent) -> &'static str {
    match event {
        HookEvent::OnStart => "on_start",
        HookEvent::OnMessage => "on_message",
        HookEvent::OnTimeout => "on_timeout",
    }
}
