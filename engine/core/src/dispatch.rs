//! The conversation core: what a start, a message or a timer does to a conversation, and
//! what a refused message leaves in it ([`refusal`]).
//!
//! Every function here works on a [`Step`] and does no I/O, so the whole protocol logic is
//! testable with a fake clock. The rule that keeps conversations whole: **check everything
//! first, then emit**. A function either returns an error having emitted nothing, or emits
//! its events and succeeds; the engine commits the step only on success.

use std::sync::Arc;

use colloquy_policy::CompiledTemplate;
use colloquy_policy::compiled::StateId;
use colloquy_protocol::conversation::{Outcome, Violation, ViolationKind};
use colloquy_protocol::event::{EventKind, ThreadTransition};
use colloquy_protocol::hook::HookInput;
use colloquy_protocol::message::{AgentId, Content, ENGINE_PARTY, Message};
use colloquy_protocol::template::{CompleteWhen, FailurePolicy, HookEvent, Role};
use serde_json::{Value, json};

use crate::conversation::Conversation;
use crate::error::EngineError;
use crate::hooks::{CallSite, HookCaller, HookFailure, event_name};
use crate::rules::{DeadlineChange, Effects, Scope};
use crate::step::Step;

mod commitments;
mod message;
mod refusal;
mod start;
mod timers;

use commitments::*;
use timers::*;

pub use commitments::settle_commitment;
pub use message::on_message;
pub use refusal::{
    MAX_RECORDED_PERFORMATIVE_BYTES, MAX_RECORDED_RECEIVERS, MAX_RECORDED_REFUSALS, is_recorded,
    refusal,
};
pub use start::{MAX_AGENT_ID_LEN, on_start, prepare_start};
pub use timers::fire_due;

/// Runs the template's wasm hook at `event`, when the template lists it, adding its actions
/// to `effects` like a declarative rule's (`input` builds the event only when needed).
/// `Ok(None)`: it ran, or there is none. `Ok(Some(detail))`: it failed under `fail_open`; the
/// caller records a `hook_error` violation once it emits. `Err`: it failed under
/// `fail_closed`; the caller has emitted nothing yet and returns the error.
/// A call that could not finish where the step runs (`HookFailure::NeedsPool`) is
/// `Err(HookNeedsPool)` whatever the policy: the engine runs the step again on the hook pool.
fn run_hook<'a>(
    conversation: &Conversation,
    (hooks, site): (Option<&dyn HookCaller>, CallSite),
    event: HookEvent,
    input: impl FnOnce() -> HookInput<'a>,
    effects: &mut Effects,
) -> Result<Option<String>, EngineError> {
    let template = &conversation.template;
    let Some(spec) = template
        .hooks
        .as_ref()
        .filter(|spec| spec.events.contains(&event))
    else {
        return Ok(None);
    };
    let result = match hooks {
        Some(runtime) => runtime.call_at(site, template, event, &input()),
        None => Err(HookFailure::NoRuntime),
    };
    match result {
        Err(HookFailure::NeedsPool) => Err(EngineError::HookNeedsPool),
        Ok(output) => {
            if output.actions.is_empty() {
                return Ok(None);
            }
            let origin = HookOrigin(&spec.module);
            for action in output.actions {
                effects.add(&origin, action);
            }
            Ok(None)
        }
        Err(failure) => match spec.failure_policy {
            FailurePolicy::FailClosed => Err(EngineError::HookFailed {
                hook: spec.module.clone(),
                event: event_name(event),
                cause: failure.to_string(),
            }),
            FailurePolicy::FailOpen => Ok(Some(format!(
                "hook `{}` failed at {}: {failure}; carried on (fail_open)",
                spec.module,
                event_name(event)
            ))),
        },
    }
}

/// A hook as the origin of its actions ("hook `credit.wasm`"), written out only when an
/// action shows it.
struct HookOrigin<'a>(&'a str);

impl std::fmt::Display for HookOrigin<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "hook `{}`", self.0)
    }
}

/// Validates `value` against a compiled schema; the error names the first failing field.
pub fn validate(
    schema: &colloquy_policy::compiled::JsonSchema,
    value: &Value,
    base: &str,
) -> Result<(), EngineError> {
    // The common case, valid content, takes the fast boolean check; only a failure pays
    // for collecting the error with its location.
    if schema.validator.is_valid(value) {
        return Ok(());
    }
    match schema.validator.iter_errors(value).next() {
        None => Ok(()),
        Some(error) => {
            let mut pointer = format!("{base}{}", error.instance_path());
            // A missing property is reported at its object; point at the property itself.
            if let jsonschema::error::ValidationErrorKind::Required {
                property: Value::String(name),
            } = error.kind()
            {
                pointer.push('/');
                pointer.push_str(&name.replace('~', "~0").replace('/', "~1"));
            }
            Err(EngineError::SchemaViolation {
                pointer,
                message: schema_message(&error),
            })
        }
    }
}

/// Longest schema violation message that quotes the offending value; past it, the message
/// names the value instead of repeating it (the pointer says where it is).
const MAX_QUOTING_MESSAGE_BYTES: usize = 200;

/// What a schema violation says. jsonschema quotes the offending value, which may be most of
/// a megabyte of content: such a message would be echoed back whole and logged.
fn schema_message(error: &jsonschema::ValidationError<'_>) -> String {
    let quoting = error.to_string();
    if quoting.len() <= MAX_QUOTING_MESSAGE_BYTES {
        quoting
    } else {
        error.masked_with("the value").to_string()
    }
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Initiator => "initiator",
        Role::Participant => "participant",
    }
}

fn thread_transition(
    template: &CompiledTemplate,
    conversation: &Conversation,
    thread: usize,
    to: StateId,
    deadline: Option<u64>,
) -> ThreadTransition {
    let current = &conversation.threads[thread];
    let target = template.machine.state(to);
    ThreadTransition {
        participant: current.participant.clone(),
        from: template.machine.state(current.state).name.clone(),
        to: target.name.clone(),
        outcome: target.terminal,
        deadline,
    }
}

fn record_violation(
    step: &mut Step<'_>,
    kind: ViolationKind,
    agent: Option<AgentId>,
    message_id: Option<Arc<str>>,
    detail: String,
) {
    let at = step.now;
    let violation = Violation {
        kind,
        agent,
        message_id,
        detail,
        at,
    };
    step.emit(EventKind::ViolationRecorded(Box::new(violation)));
}

fn engine_message_id(step: &Step<'_>) -> Arc<str> {
    Arc::from(format!(
        "{}/engine/{}",
        step.conversation.id(),
        step.conversation.version + 1
    ))
}

/// Applies collected effects (a rejection has been handled by the caller).
pub fn apply_effects(step: &mut Step<'_>, effects: Effects, message: Option<&Message>) {
    let now = step.now;
    let mut vars = effects.vars;
    // Only what changes is recorded: a policy that restates a variable at every message
    // (a hook's `set_vars`, a rule's) costs no event and no store write.
    vars.retain(|name, value| step.conversation.vars.get(name) != Some(value));
    if !vars.is_empty() {
        step.emit(EventKind::VarsMerged { vars });
    }
    for send in effects.sends {
        let Some(performative) = step.conversation.template.performative(&send.performative) else {
            tracing::warn!(conversation = %step.conversation.id(), performative = %send.performative, "send action with unknown performative skipped");
            continue;
        };
        let reply = Message {
            id: engine_message_id(step),
            performative,
            sender: Arc::from(ENGINE_PARTY),
            receivers: send
                .to
                .iter()
                .map(|agent| Arc::from(agent.as_str()))
                .collect(),
            content: Content::from_value(&send.content),
            in_reply_to: message.map(|m| m.id.clone()),
            reply_by: None,
            sent_at: now,
            signature: None,
        };
        step.emit_message(Arc::new(reply), Vec::new());
    }
    if let Some(change) = effects.deadline {
        let deadline = match change {
            DeadlineChange::Set(ms) => now.saturating_add(ms),
            DeadlineChange::Extend(ms) => step
                .conversation
                .deadline
                .unwrap_or(now)
                .max(now)
                .saturating_add(ms),
        };
        step.emit(EventKind::DeadlineSet {
            deadline: Some(deadline),
        });
    }
    if let Some(retry) = effects.retry
        && !step.conversation.is_completed()
    {
        let attempt = step.conversation.retry.attempts + 1;
        if retry.max_attempts.is_none_or(|max| attempt <= max) {
            let factor = retry
                .backoff
                .unwrap_or(1.0)
                .max(0.0)
                .powi(attempt as i32 - 1);
            let delay = (retry.after_ms as f64 * factor).min(u64::MAX as f64) as u64;
            step.emit(EventKind::RetryScheduled {
                at: now.saturating_add(delay),
                attempt,
            });
        }
    }
    for (to, reason) in effects.escalations {
        let agent: AgentId = Arc::from(to.as_str());
        tracing::info!(conversation = %step.conversation.id(), to = %agent, %reason, "escalated");
        step.emit(EventKind::Escalated {
            to: agent.clone(),
            reason: reason.clone(),
        });
        if message.is_none() {
            let notice = Message {
                id: engine_message_id(step),
                performative: colloquy_protocol::Performative::Fipa(
                    colloquy_protocol::FipaAct::Inform,
                ),
                sender: Arc::from(ENGINE_PARTY),
                receivers: vec![agent],
                content: Content::from_value(&json!({ "escalation": { "reason": reason } })),
                in_reply_to: None,
                reply_by: None,
                sent_at: now,
                signature: None,
            };
            step.emit_message(Arc::new(notice), Vec::new());
        }
    }
    if let Some((outcome, reason)) = effects.complete
        && !step.conversation.is_completed()
    {
        release_all_open(step);
        step.emit(EventKind::Completed { outcome, reason });
    }
}

/// Completes the conversation if the template's completion condition holds.
pub fn check_completion(step: &mut Step<'_>) {
    let conversation = &*step.conversation;
    if conversation.is_completed() {
        return;
    }
    let mut terminal = conversation
        .threads
        .iter()
        .map(|t| conversation.thread_outcome(t).is_some());
    let complete = match conversation.template.outcome.complete_when {
        CompleteWhen::AllThreadsTerminal => terminal.all(|ended| ended),
        CompleteWhen::AnyThreadTerminal => terminal.any(|ended| ended),
    };
    if complete {
        let outcome = decide_outcome(step);
        release_all_open(step);
        step.emit(EventKind::Completed {
            outcome,
            reason: None,
        });
    }
}

/// The first outcome rule that holds; else `success` if any thread succeeded, else the
/// first ended thread's outcome, else `timeout`.
fn decide_outcome(step: &Step<'_>) -> Outcome {
    let conversation = &*step.conversation;
    let scope = Scope {
        conversation,
        message: None,
        timeout: None,
        now: step.now,
    };
    match scope.first_match(&conversation.template.outcome.rules) {
        Ok(Some(outcome)) => return *outcome,
        Ok(None) => {}
        // The conversation is over whatever the rules say: a rule too costly to evaluate
        // leaves the default below to decide.
        Err(error) => {
            tracing::warn!(conversation = %conversation.id(), %error, "outcome rules stopped");
        }
    }
    let outcomes: Vec<Outcome> = conversation
        .threads
        .iter()
        .filter_map(|t| conversation.thread_outcome(t))
        .collect();
    if outcomes.contains(&Outcome::Success) {
        Outcome::Success
    } else {
        outcomes.first().copied().unwrap_or(Outcome::Timeout)
    }
}

#[cfg(test)]
mod tests;
