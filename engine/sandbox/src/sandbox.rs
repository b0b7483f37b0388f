//! A [`Sandbox`]: one engine in memory, on a clock that moves only when told, with every
//! hook call traced. What the template test runner, the explorer and replay drive.
//!
//! Nothing in it touches the network, a file or the wall clock: the store is the memory
//! store, time is a [`ManualClock`] (hooks read it too, through `now-ms`), and deadlines fire
//! only when [`Sandbox::advance`] moves the clock past them, one at a time, in order.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use colloquy_core::clock::ManualClock;
use colloquy_core::engine::{Engine, EngineConfig, TemplateSource};
use colloquy_core::error::EngineError;
use colloquy_core::hook_pool::HookPool;
use colloquy_core::hooks::{CallSite, HookCaller, HookFailure, event_name, latency::HookLatency};
use colloquy_core::rules::RuleLog;
use colloquy_core::store::memory::MemoryStore;
use colloquy_policy::CompiledTemplate;
use colloquy_protocol::conversation::{ConversationView, SendReceipt};
use colloquy_protocol::event::ConversationEvent;
use colloquy_protocol::hook::{HookInput, HookOutput};
use colloquy_protocol::message::{SendMessage, StartConversation};
use colloquy_protocol::template::HookEvent;

/// Where the test clock starts: 2026-01-01T00:00:00Z, in Unix milliseconds. Fixed, so a
/// test may name absolute times (a `reply_by`, a deadline it expects).
pub const TEST_EPOCH_MS: u64 = 1_767_225_600_000;

/// Wake-ups fired at one instant before [`Sandbox::advance`] gives up on it: a
/// conversation that keeps asking to be woken at the same time is an engine bug, not a
/// reason to hang a test run.
const MAX_WAKES_AT_ONE_INSTANT: usize = 64;

/// One hook call, as the sandbox saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct HookCall {
    /// The conversation.
    pub conversation_id: String,
    /// `on_start`, `on_message` or `on_timeout`.
    pub event: &'static str,
    /// What the hook answered, or why it failed.
    pub answer: Result<HookOutput, HookFailure>,
}

/// One in-memory engine on a manual clock.
pub struct Sandbox {
    engine: Engine,
    clock: Arc<ManualClock>,
    hooks: Option<Arc<TracedHooks>>,
    rules: Arc<RuleLog>,
}

impl Sandbox {
    /// An engine over `templates` whose clock is `clock`, set to [`TEST_EPOCH_MS`]; hooks run
    /// on `hooks` when given (its `now-ms` should read the same clock). Completed
    /// conversations are never removed.
    pub fn new(
        templates: Arc<dyn TemplateSource>,
        clock: Arc<ManualClock>,
        hooks: Option<Arc<dyn HookCaller>>,
    ) -> Sandbox {
        clock.set(TEST_EPOCH_MS);
        let config = EngineConfig {
            retention_ms: u64::MAX / 2,
            ..EngineConfig::default()
        };
        let rules = Arc::new(RuleLog::default());
        let mut engine = Engine::new(
            templates,
            Arc::new(MemoryStore::new()),
            clock.clone(),
            config,
        )
        .with_rule_log(rules.clone());
        let hooks = hooks.map(|inner| {
            Arc::new(TracedHooks {
                inner,
                calls: Mutex::default(),
            })
        });
        if let Some(hooks) = &hooks {
            engine = engine.with_hooks(hooks.clone());
        }
        Sandbox {
            engine,
            clock,
            hooks,
            rules,
        }
    }

    /// The engine, for what the sandbox does not wrap.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The clock's reading.
    pub fn now(&self) -> u64 {
        self.engine.now()
    }

    /// Starts a conversation (see [`Engine::start`]).
    pub async fn start(
        &self,
        initiator: &str,
        request: StartConversation,
    ) -> Result<ConversationView, EngineError> {
        self.engine.start(initiator, request).await
    }

    /// Sends a message (see [`Engine::send`]).
    pub async fn send(
        &self,
        conversation_id: &str,
        sender: &str,
        message: SendMessage,
    ) -> Result<SendReceipt, EngineError> {
        self.engine.send(conversation_id, sender, message).await
    }

    /// Moves the clock forward by `ms`, stopping at each deadline of `conversation_id` it
    /// passes to fire it, in order, as the scheduler would have.
    pub async fn advance(&self, conversation_id: &str, ms: u64) -> Result<(), EngineError> {
        let target = self.now().saturating_add(ms);
        let mut fired_at_now = 0;
        loop {
            let next = self.engine.next_wake(conversation_id).await?;
            match next {
                Some(at) if at <= target => {
                    if at <= self.now() {
                        fired_at_now += 1;
                        if fired_at_now > MAX_WAKES_AT_ONE_INSTANT {
                            return Err(EngineError::Store(
                                colloquy_core::store::StoreError::Internal(format!(
                                    "conversation `{conversation_id}` asked to be woken at {at} \
                                     more than {MAX_WAKES_AT_ONE_INSTANT} times"
                                )),
                            ));
                        }
                    } else {
                        fired_at_now = 0;
                        self.clock.set(at);
                    }
                    self.engine.run_due().await?;
                }
                _ => break,
            }
        }
        self.clock.set(target);
        self.engine.run_due().await?;
        Ok(())
    }

    /// The conversation as an administrator sees it.
    pub async fn view(&self, conversation_id: &str) -> Result<ConversationView, EngineError> {
        self.engine.view(conversation_id, None).await
    }

    /// Every event of the conversation.
    pub async fn events(
        &self,
        conversation_id: &str,
    ) -> Result<Vec<ConversationEvent>, EngineError> {
        self.engine.events(conversation_id, None, 0).await
    }

    /// The hook calls since the last take, oldest first.
    pub fn take_hook_calls(&self) -> Vec<HookCall> {
        self.hooks.as_ref().map_or_else(Vec::new, |hooks| {
            std::mem::take(&mut *hooks.calls.lock().unwrap_or_else(|p| p.into_inner()))
        })
    }

    /// The rules that fired so far (see [`RuleLog`]).
    pub fn rules_fired(&self) -> HashSet<usize> {
        self.rules.fired()
    }
}

/// A hook caller that traces every call of the one it wraps, and runs every call where it
/// may take its whole budget: a call tried inline and retried on the pool would be traced
/// twice, and a test must not depend on how busy the machine is.
struct TracedHooks {
    inner: Arc<dyn HookCaller>,
    calls: Mutex<Vec<HookCall>>,
}

impl HookCaller for TracedHooks {
    fn call_at(
        &self,
        _site: CallSite,
        template: &CompiledTemplate,
        event: HookEvent,
        input: &HookInput<'_>,
    ) -> Result<HookOutput, HookFailure> {
        let answer = self.inner.call_at(CallSite::Owned, template, event, input);
        self.calls
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(HookCall {
                conversation_id: input.conversation.id.to_string(),
                event: event_name(event),
                answer: answer.clone(),
            });
        answer
    }

    fn runs_inline(&self, _template: &CompiledTemplate) -> bool {
        false
    }

    fn pool(&self) -> &HookPool {
        self.inner.pool()
    }

    fn latency(&self) -> &HookLatency {
        self.inner.latency()
    }
}

/// A hook runtime whose hooks read `clock` through `now-ms`, when `needed` (some template
/// to run has hooks); `None` otherwise, so runs without hooks never reserve its pool.
pub fn hooks_on(
    clock: &Arc<ManualClock>,
    needed: bool,
) -> Result<Option<Arc<dyn HookCaller>>, colloquy_hooks::RuntimeError> {
    if !needed {
        return Ok(None);
    }
    let runtime = colloquy_hooks::HookRuntime::with_clock(
        colloquy_hooks::HookRuntimeConfig::default(),
        clock.clone(),
    )?;
    Ok(Some(Arc::new(runtime)))
}

/// What a caught panic says, for a report.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|text| (*text).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}
