//! The conversation core: what a start, a message or a timer does to a conversation.
//!
//! Every function here works on a [`Step`] and does no I/O, so the whole protocol logic is
//! testable with a fake clock. The rule that keeps conversations whole: **check everything
//! first, then emit**. A function either returns an error having emitted nothing, or emits
//! its events and succeeds; the engine commits the step only on success.

use std::sync::Arc;

use colloquy_policy::CompiledTemplate;
use colloquy_policy::compiled::{LatePolicy, State, StateId, Transition};
use colloquy_protocol::conversation::{CommitmentState, Outcome, Violation, ViolationKind};
use colloquy_protocol::event::{EventKind, Started, ThreadTransition};
use colloquy_protocol::hook::HookInput;
use colloquy_protocol::message::{
    AgentId, Content, ENGINE_PARTY, Message, SendMessage, StartConversation,
};
use colloquy_protocol::template::{
    CompleteWhen, ContextOverflow, Enforcement, FailurePolicy, HookEvent, LateAction,
    MAX_PARTICIPANTS, ReplyBySpec, Role,
};
use serde_json::{Map, Value, json};
use smallvec::SmallVec;

use crate::conversation::Conversation;
use crate::error::EngineError;
use crate::hooks::input::{MessageFacts, hook_input};
use crate::hooks::{CallSite, HookCaller, HookFailure, event_name};
use crate::rules::{DeadlineChange, Effects, Origin, Scope, TimeoutInfo};
use crate::step::Step;

/// Longest agent id accepted.
pub const MAX_AGENT_ID_LEN: usize = 256;

/// Checks a start request and builds the conversation's first event. Emits nothing; the
/// caller creates the conversation from the returned facts and then calls [`on_start`].
pub fn prepare_start(
    template: &CompiledTemplate,
    id: Arc<str>,
    initiator: &str,
    request: &StartConversation,
    now: u64,
) -> Result<Started, EngineError> {
    check_agent_id(initiator, "/initiator")?;
    let participants = check_participants(template, initiator, &request.participants)?;
    let parameters = match &request.parameters {
        Value::Null => Value::Object(Map::new()),
        object @ Value::Object(_) => object.clone(),
        other => return Err(not_an_object("/parameters", "parameters", other)),
    };
    if !matches!(request.context, Value::Null | Value::Object(_)) {
        return Err(not_an_object("/context", "context", &request.context));
    }
    if let Some(schema) = &template.parameters_schema {
        validate(schema, &parameters, "/parameters")?;
    }
    let context = cap_context(template, &request.context)?;
    if request.deadline_ms == Some(0) {
        return Err(EngineError::invalid(
            "/deadline_ms",
            "`deadline_ms` is 0: the conversation would be over as it starts; it is the \
             time it may run, in milliseconds",
        ));
    }
    let deadline = request
        .deadline_ms
        .or(template.conversation_deadline_ms)
        .map(|ms| now.saturating_add(ms));
    Ok(Started {
        id,
        template: template.name.clone(),
        revision: template.revision.clone(),
        initiator: Arc::from(initiator),
        participants,
        parameters,
        context,
        deadline,
    })
}

/// A start's `parameters` and `context` are objects (CEL reads their fields by name; the
/// template format defines nothing else), or absent.
fn not_an_object(pointer: &str, field: &str, value: &Value) -> EngineError {
    let kind = match value {
        Value::Null | Value::Object(_) => "an object",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    };
    EngineError::invalid(
        pointer,
        format!("`{field}` must be a JSON object (or absent), not {kind}"),
    )
}

/// Emits the `started` event and runs the `on_start` rules.
pub fn on_start(step: &mut Step<'_>) -> Result<(), EngineError> {
    let template = step.conversation.template.clone();
    let mut effects = Effects::default();
    Scope {
        conversation: step.conversation,
        message: None,
        timeout: None,
        now: step.now,
    }
    .run_rules(&template.on_start, &mut effects)?;
    let hook_error = if effects.reject.is_none() {
        let input = || hook_input(step.conversation, HookEvent::OnStart, step.now, None, None);
        run_hook(
            step.conversation,
            (step.hooks, step.site),
            HookEvent::OnStart,
            input,
            &mut effects,
        )?
    } else {
        None
    };
    if let Some((rule, reason)) = effects.reject.take() {
        return Err(EngineError::Rejected { rule, reason });
    }
    let started = step.conversation.started.clone();
    step.emit(EventKind::Started(started));
    if let Some(detail) = hook_error {
        record_violation(step, ViolationKind::HookError, None, None, detail);
    }
    apply_effects(step, effects, None);
    check_completion(step);
    Ok(())
}

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

fn check_agent_id(agent: &str, pointer: &str) -> Result<(), EngineError> {
    match agent_id_problem(agent) {
        Some(problem) => Err(EngineError::invalid(pointer, problem)),
        None => Ok(()),
    }
}

/// What is wrong with `agent` as an agent id, if anything.
fn agent_id_problem(agent: &str) -> Option<String> {
    if agent.is_empty() || agent.len() > MAX_AGENT_ID_LEN || agent.chars().any(char::is_control) {
        return Some(format!(
            "agent ids are 1 to {MAX_AGENT_ID_LEN} printable characters"
        ));
    }
    if agent == ENGINE_PARTY {
        return Some(format!("`{ENGINE_PARTY}` is reserved"));
    }
    None
}

fn check_participants(
    template: &CompiledTemplate,
    initiator: &str,
    participants: &[String],
) -> Result<Vec<AgentId>, EngineError> {
    let count = participants.len();
    let min = template.min_participants as usize;
    // The compiler keeps a template's max within the engine's cap.
    let max = template.max_participants.unwrap_or(MAX_PARTICIPANTS) as usize;
    if count < min || count > max {
        let range = if max == min {
            format!("exactly {min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(EngineError::invalid(
            "/participants",
            format!(
                "template `{}` takes {range} participants, got {count}",
                template.name
            ),
        ));
    }
    let mut seen: Vec<AgentId> = Vec::with_capacity(count);
    for (index, participant) in participants.iter().enumerate() {
        // Built only for an error: this runs on every start.
        let pointer = || format!("/participants/{index}");
        if let Some(problem) = agent_id_problem(participant) {
            return Err(EngineError::invalid(&pointer(), problem));
        }
        if participant == initiator {
            return Err(EngineError::invalid(
                &pointer(),
                "the initiator cannot be a participant",
            ));
        }
        if seen.iter().any(|known| &**known == participant) {
            return Err(EngineError::invalid(
                &pointer(),
                format!("`{participant}` is listed twice"),
            ));
        }
        seen.push(Arc::from(participant.as_str()));
    }
    Ok(seen)
}

fn cap_context(template: &CompiledTemplate, context: &Value) -> Result<Value, EngineError> {
    let max = template.context.max_bytes;
    let size = json_size(context);
    if size <= max {
        return Ok(context.clone());
    }
    match (template.context.on_overflow, context) {
        (ContextOverflow::Compact, Value::Object(fields)) => Ok(compact(fields, max)),
        _ => Err(EngineError::ContextTooLarge { size, max }),
    }
}

fn json_size(value: &Value) -> usize {
    serde_json::to_vec(value)
        .map(|bytes| bytes.len())
        .unwrap_or(usize::MAX)
}

/// Drops the largest top-level fields until the object (with its `_dropped` list) fits.
fn compact(fields: &Map<String, Value>, max: usize) -> Value {
    let mut kept = fields.clone();
    let mut by_size: Vec<(usize, String)> = fields
        .iter()
        .map(|(key, value)| (json_size(value), key.clone()))
        .collect();
    by_size.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut dropped = Vec::new();
    for (_, key) in by_size {
        let mut candidate = kept.clone();
        candidate.insert("_dropped".to_owned(), json!(dropped));
        if json_size(&Value::Object(candidate)) <= max {
            break;
        }
        kept.remove(&key);
        dropped.push(key);
    }
    kept.insert("_dropped".to_owned(), json!(dropped));
    if json_size(&Value::Object(kept.clone())) > max {
        // Even the list of dropped names does not fit: keep only that it was compacted.
        return json!({ "_dropped": "*" });
    }
    Value::Object(kept)
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

/// How one thread takes a message.
enum Fit<'t> {
    /// A transition of the thread's state matches.
    Move {
        thread: usize,
        transition: &'t Transition,
    },
    /// The thread ended by a deadline and its state has a late-message policy.
    Late {
        thread: usize,
        policy: &'t LatePolicy,
    },
    /// The protocol does not allow it.
    OutOfProtocol { kind: ViolationKind, detail: String },
}

/// Handles a message from `sender`. The caller has checked it is not a duplicate.
pub fn on_message(
    step: &mut Step<'_>,
    sender: &str,
    request: &SendMessage,
    id: Arc<str>,
) -> Result<(), EngineError> {
    let template = step.conversation.template.clone();
    let hooks = (step.hooks, step.site);
    let conversation = &*step.conversation;
    let now = step.now;
    let performative = template
        .performative(&request.performative)
        .ok_or_else(|| EngineError::UnknownPerformative {
            name: request.performative.clone(),
            template: template.name.to_string(),
            pointer: "/performative".to_owned(),
        })?;
    let role = conversation
        .role_of(sender)
        .ok_or_else(|| EngineError::NotAParty {
            agent: sender.to_owned(),
            conversation: conversation.id().to_string(),
        })?;
    if let Some(at) = request.reply_by
        && at <= now
    {
        return Err(EngineError::invalid(
            "/reply_by",
            format!(
                "`reply_by` {at} is not in the future (the engine's clock reads {now}): it is \
                 a time in Unix milliseconds, not a duration"
            ),
        ));
    }
    if let Some(answered) = request.in_reply_to.as_deref()
        && conversation.accepted_seq(answered).is_none()
    {
        return Err(EngineError::invalid(
            "/in_reply_to",
            format!("`in_reply_to`: no message `{answered}` in this conversation"),
        ));
    }
    if let Some(schema) = template.content_schemas.get(&performative) {
        validate(schema, &request.content, "/content")?;
    }
    let (threads, mut receivers) = resolve_receivers(conversation, role, sender, &request.to)?;
    let sender_id = match role {
        Role::Initiator => conversation.initiator().clone(),
        Role::Participant => conversation.threads[threads[0]].participant.clone(),
    };
    let message = Message {
        id: id.clone(),
        performative,
        sender: sender_id,
        receivers: Vec::new(),
        content: Content::from_value(&request.content),
        in_reply_to: request.in_reply_to.as_deref().map(Arc::from),
        reply_by: request.reply_by,
        sent_at: now,
    };

    let scope = Scope {
        conversation,
        message: Some(&message),
        timeout: None,
        now,
    };
    // Per-thread work lists: a message usually concerns one thread, so they stay on the
    // stack (this runs for every message).
    let fits: SmallVec<[Fit<'_>; 4]> = threads
        .iter()
        .map(|&thread| fit(&template, &scope, role, thread))
        .collect::<Result<_, _>>()?;
    let all_late = fits.iter().all(|fit| matches!(fit, Fit::Late { .. }));
    if conversation.is_completed() && !all_late {
        return Err(EngineError::ConversationEnded(
            conversation.id().to_string(),
        ));
    }
    if let Some(limit) = conversation.at_message_limit() {
        return Err(EngineError::MessageLimit {
            conversation: conversation.id().to_string(),
            limit,
        });
    }
    if template.enforcement == Enforcement::Enforce
        && let Some(Fit::OutOfProtocol { detail, .. }) = fits
            .iter()
            .find(|fit| matches!(fit, Fit::OutOfProtocol { .. }))
    {
        return Err(EngineError::OutOfProtocol(detail.clone()));
    }
    let moves: SmallVec<[(usize, &Transition); 4]> = fits
        .iter()
        .filter_map(|fit| match fit {
            Fit::Move { thread, transition } => Some((*thread, *transition)),
            _ => None,
        })
        .collect();
    if request.reply_by.is_none()
        && moves
            .iter()
            .any(|(_, t)| t.reply_by.as_ref().is_some_and(|spec| spec.required))
    {
        return Err(EngineError::invalid(
            "/reply_by",
            format!("`{}` here must carry a reply_by", message.performative),
        ));
    }
    let mut effects = Effects::default();
    let mut hook_error = None;
    if !moves.is_empty() {
        scope.run_rules(&template.on_message, &mut effects)?;
        // The hook runs after the protocol check and before routing; a rule that already
        // refused the message spares it the call.
        if effects.reject.is_none() {
            let input = || {
                let facts = MessageFacts {
                    message: &message,
                    receivers: &receivers,
                    content: &request.content,
                };
                hook_input(conversation, HookEvent::OnMessage, now, Some(facts), None)
            };
            hook_error = run_hook(
                conversation,
                hooks,
                HookEvent::OnMessage,
                input,
                &mut effects,
            )?;
        }
        scope.run_rules(&template.routing, &mut effects)?;
    }
    if let Some((rule, reason)) = effects.reject.take() {
        return Err(EngineError::Rejected { rule, reason });
    }
    if let Some(replacement) = effects.route_replace.take() {
        receivers = replacement
            .iter()
            .map(|agent| Arc::from(agent.as_str()))
            .collect();
    }
    for agent in effects.route_add.drain(..) {
        if !receivers.iter().any(|known| **known == *agent) {
            receivers.push(Arc::from(agent.as_str()));
        }
    }
    for (to, _) in &effects.escalations {
        if !receivers.iter().any(|known| **known == **to) {
            receivers.push(Arc::from(to.as_str()));
        }
    }

    // Everything is checked: from here on, emit.
    let pre_states: SmallVec<[StateId; 4]> = moves
        .iter()
        .map(|(thread, _)| conversation.threads[*thread].state)
        .collect();
    let transitions: Vec<ThreadTransition> = moves
        .iter()
        .map(|(thread, transition)| {
            let deadline = arrival_deadline(
                transition.reply_by.as_ref(),
                template.machine.state(transition.to),
                request.reply_by,
                now,
            );
            thread_transition(&template, conversation, *thread, transition.to, deadline)
        })
        .collect();
    let late: Vec<(usize, &LatePolicy)> = fits
        .iter()
        .filter_map(|fit| match fit {
            Fit::Late { thread, policy } => Some((*thread, *policy)),
            _ => None,
        })
        .collect();
    let violations: Vec<(ViolationKind, String)> = fits
        .iter()
        .filter_map(|fit| match fit {
            Fit::OutOfProtocol { kind, detail, .. } => Some((*kind, detail.clone())),
            _ => None,
        })
        .collect();
    let message = Arc::new(Message {
        receivers,
        ..message
    });
    step.emit_message(message.clone(), transitions);
    if let Some(detail) = hook_error {
        record_violation(
            step,
            ViolationKind::HookError,
            None,
            Some(id.clone()),
            detail,
        );
    }

    for (kind, detail) in violations {
        tracing::warn!(conversation = %step.conversation.id(), message = %id, "{detail}");
        record_violation(
            step,
            kind,
            Some(message.sender.clone()),
            Some(id.clone()),
            detail,
        );
    }
    for (thread, policy) in late {
        answer_late(step, &message, thread, policy);
    }
    for ((thread, _), pre_state) in moves.iter().zip(pre_states) {
        move_commitments(step, *thread, pre_state, &message, role);
        close_commitments_if_ended(step, *thread);
    }
    apply_effects(step, effects, Some(&message));
    check_completion(step);
    end_at_message_limit(step);
    Ok(())
}

/// Who a message reaches, and which threads it belongs to.
fn resolve_receivers(
    conversation: &Conversation,
    role: Role,
    sender: &str,
    to: &[String],
) -> Result<(SmallVec<[usize; 4]>, Vec<AgentId>), EngineError> {
    match role {
        Role::Initiator => {
            if to.is_empty() {
                let threads: SmallVec<[usize; 4]> = (0..conversation.threads.len()).collect();
                let receivers = conversation
                    .threads
                    .iter()
                    .map(|thread| thread.participant.clone())
                    .collect();
                return Ok((threads, receivers));
            }
            let mut threads = SmallVec::<[usize; 4]>::with_capacity(to.len());
            for (index, receiver) in to.iter().enumerate() {
                let thread = conversation.thread_index(receiver).ok_or_else(|| {
                    EngineError::invalid(
                        &format!("/to/{index}"),
                        format!("`{receiver}` is not a participant of this conversation"),
                    )
                })?;
                if threads.contains(&thread) {
                    // As in a start's participants: a receiver is named once.
                    return Err(EngineError::invalid(
                        &format!("/to/{index}"),
                        format!("`{receiver}` is listed twice"),
                    ));
                }
                threads.push(thread);
            }
            let receivers = threads
                .iter()
                .map(|&thread| conversation.threads[thread].participant.clone())
                .collect();
            Ok((threads, receivers))
        }
        Role::Participant => {
            let initiator = conversation.initiator();
            if let Some((index, other)) = to
                .iter()
                .enumerate()
                .find(|(_, receiver)| **receiver != **initiator)
            {
                return Err(EngineError::invalid(
                    &format!("/to/{index}"),
                    format!(
                        "a participant talks only to the initiator `{initiator}`, not `{other}`"
                    ),
                ));
            }
            if to.len() > 1 {
                // Everything in `to` is the initiator (checked above): as for the initiator's
                // messages, a receiver is named once.
                return Err(EngineError::invalid(
                    "/to/1",
                    format!("`{initiator}` is listed twice"),
                ));
            }
            // A participant always has a thread: that is what makes it a participant.
            let thread = conversation.thread_index(sender).unwrap_or_default();
            Ok((smallvec::smallvec![thread], vec![initiator.clone()]))
        }
    }
}

fn fit<'t>(
    template: &'t CompiledTemplate,
    scope: &Scope<'_>,
    role: Role,
    thread: usize,
) -> Result<Fit<'t>, EngineError> {
    let conversation = scope.conversation;
    let current = &conversation.threads[thread];
    let state = template.machine.state(current.state);
    let message = scope.message.map(|message| &message.performative);
    let name = message.map(|p| p.name()).unwrap_or_default();
    let who = role_name(role);
    if state.terminal.is_some() {
        if let Some(policy) = &state.late
            && role == Role::Participant
        {
            return Ok(Fit::Late { thread, policy });
        }
        return Ok(Fit::OutOfProtocol {
            kind: ViolationKind::AfterEnd,
            detail: format!(
                "`{name}` from the {who} after the thread with `{}` ended in state `{}`",
                current.participant, state.name
            ),
        });
    }
    let mut found = None;
    for transition in &state.transitions {
        if Some(&transition.performative) != message || transition.from != role {
            continue;
        }
        let origin = Origin::Guard {
            state: &state.name,
            performative: name,
        };
        if transition
            .guard
            .as_ref()
            .map_or(Ok(true), |guard| scope.holds(guard, &origin))?
        {
            found = Some(transition);
            break;
        }
    }
    Ok(match found {
        Some(transition) => Fit::Move { thread, transition },
        None => Fit::OutOfProtocol {
            kind: ViolationKind::OutOfProtocol,
            detail: format!(
                "`{name}` from the {who} is not allowed in state `{}` of the thread with `{}`",
                state.name, current.participant
            ),
        },
    })
}

/// The deadline a thread has on arrival in `target` by a transition whose `reply_by` spec is
/// `spec`, for a message that carries `reply_by`:
///
/// - a terminal state has none;
/// - a transition with `reply_by` sets the message's own, else now + its `default_ms`;
/// - a state with `on_deadline` takes the message's own even without one: that state says
///   what happens when the sender's reply-by passes (in a contract-net, a proposal's
///   `reply_by` is how long the offer stands, and `proposed` lapses at it);
/// - otherwise none: the deadline is cleared.
fn arrival_deadline(
    spec: Option<&ReplyBySpec>,
    target: &State,
    reply_by: Option<u64>,
    now: u64,
) -> Option<u64> {
    if target.terminal.is_some() {
        return None;
    }
    match spec {
        Some(spec) => reply_by.or_else(|| spec.default_ms.map(|ms| now.saturating_add(ms))),
        None if target.on_deadline.is_some() => reply_by,
        None => None,
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

/// A message to a thread that ended by a deadline: flag it, and with `reject` answer it.
fn answer_late(step: &mut Step<'_>, message: &Message, thread: usize, policy: &LatePolicy) {
    let state = step.conversation.threads[thread].state;
    let state_name = step.conversation.template.machine.state(state).name.clone();
    let detail = format!(
        "`{}` from `{}` arrived after the thread ended in state `{state_name}`",
        message.performative, message.sender
    );
    tracing::warn!(conversation = %step.conversation.id(), message = %message.id, "{detail}");
    record_violation(
        step,
        ViolationKind::LateMessage,
        Some(message.sender.clone()),
        Some(message.id.clone()),
        detail,
    );
    if policy.action == LateAction::Reject
        && let Some(reply) = &policy.reply
    {
        let answer = Message {
            id: engine_message_id(step),
            performative: reply.clone(),
            sender: Arc::from(ENGINE_PARTY),
            receivers: vec![message.sender.clone()],
            content: Content::from_value(&json!({
                "reason": policy.reason.clone().unwrap_or_else(|| "late".to_owned())
            })),
            in_reply_to: Some(message.id.clone()),
            reply_by: None,
            sent_at: step.now,
        };
        step.emit_message(Arc::new(answer), Vec::new());
    }
}

fn engine_message_id(step: &Step<'_>) -> Arc<str> {
    Arc::from(format!(
        "{}/engine/{}",
        step.conversation.id(),
        step.conversation.version + 1
    ))
}

/// Creates and moves the commitments of `thread` for an in-protocol message.
fn move_commitments(
    step: &mut Step<'_>,
    thread: usize,
    pre_state: StateId,
    message: &Message,
    role: Role,
) {
    let template = step.conversation.template.clone();
    let existing = step.conversation.commitments.len();
    for index in 0..existing {
        let commitment = &step.conversation.commitments[index];
        if commitment.thread != thread || commitment.state.is_terminal() {
            continue;
        }
        let rule = &template.commitments[commitment.rule];
        let found = rule.transitions.iter().find(|transition| {
            transition.performative == message.performative
                && transition.from.is_none_or(|from| from == role)
                && (transition.states.is_empty() || transition.states.contains(&commitment.state))
                && (transition.thread_states.is_empty()
                    || transition.thread_states.contains(&pre_state))
        });
        if let Some(transition) = found {
            let deadline = armed_deadline(
                rule.deadline.as_ref(),
                transition.to,
                commitment.deadline,
                message.reply_by,
                step.now,
            );
            move_commitment(step, index, transition.to, deadline, message.id.clone());
        }
    }
    for rule in &template.commitments {
        if rule.created_by != message.performative || rule.created_from != role {
            continue;
        }
        let conversation = &*step.conversation;
        let id: Arc<str> = Arc::from(format!(
            "{}/{}",
            conversation.id(),
            conversation.commitments.len() + 1
        ));
        let deadline = armed_deadline(
            rule.deadline.as_ref(),
            rule.initial,
            None,
            message.reply_by,
            step.now,
        );
        let view = colloquy_protocol::conversation::CommitmentView {
            id,
            conversation_id: conversation.id().clone(),
            name: rule.name.clone(),
            debtor: conversation.party(rule.debtor, thread).clone(),
            creditor: conversation.party(rule.creditor, thread).clone(),
            state: rule.initial,
            deadline,
            created_by: message.id.clone(),
        };
        step.emit(EventKind::CommitmentCreated(Box::new(view)));
    }
}

/// The deadline a commitment has after entering `state`: kept if already running and still
/// armed, started if newly armed, none otherwise.
fn armed_deadline(
    spec: Option<&colloquy_policy::compiled::CommitmentDeadline>,
    state: CommitmentState,
    current: Option<u64>,
    reply_by: Option<u64>,
    now: u64,
) -> Option<u64> {
    let spec = spec?;
    if state.is_terminal() || !spec.armed_in.contains(&state) {
        return None;
    }
    current.or_else(|| match reply_by {
        Some(at) if spec.from_reply_by => Some(at),
        _ => Some(now.saturating_add(spec.after_ms)),
    })
}

fn move_commitment(
    step: &mut Step<'_>,
    index: usize,
    to: CommitmentState,
    deadline: Option<u64>,
    cause: Arc<str>,
) {
    let commitment = &step.conversation.commitments[index];
    let id = commitment.id.clone();
    let debtor = {
        let rule = &step.conversation.template.commitments[commitment.rule];
        step.conversation
            .party(rule.debtor, commitment.thread)
            .clone()
    };
    step.emit(EventKind::CommitmentMoved {
        id: id.clone(),
        to,
        deadline,
        cause: cause.clone(),
    });
    if to == CommitmentState::Violated {
        record_violation(
            step,
            ViolationKind::CommitmentViolated,
            Some(debtor),
            None,
            format!("commitment `{id}` was violated ({cause})"),
        );
    }
}

/// When a thread ends, what it still owes lapses: pending offers are released, active
/// commitments are violated. Without this, ended threads would leak open commitments.
fn close_commitments_if_ended(step: &mut Step<'_>, thread: usize) {
    let conversation = &*step.conversation;
    let state = conversation.threads[thread].state;
    let state_name = conversation.template.machine.state(state).name.clone();
    if conversation
        .template
        .machine
        .state(state)
        .terminal
        .is_none()
    {
        return;
    }
    let open: Vec<(usize, CommitmentState)> = conversation
        .commitments
        .iter()
        .enumerate()
        .filter(|(_, c)| c.thread == thread && !c.state.is_terminal())
        .map(|(index, c)| (index, c.state))
        .collect();
    for (index, state) in open {
        let to = match state {
            CommitmentState::Active => CommitmentState::Violated,
            _ => CommitmentState::Released,
        };
        move_commitment(
            step,
            index,
            to,
            None,
            Arc::from(format!("thread ended in `{state_name}`")),
        );
    }
}

/// Fires every timer of the conversation that is due at `step.now`: thread reply-bys,
/// commitment deadlines, retries and the conversation deadline. Each fires once: firing
/// clears or moves what made it due, in the same events.
pub fn fire_due(step: &mut Step<'_>) {
    if step.conversation.is_completed() {
        return;
    }
    let template = step.conversation.template.clone();
    let now = step.now;
    let mut timeouts: Vec<TimeoutInfo> = Vec::new();

    // Commitment deadlines first: a commitment whose own deadline passed is violated, even
    // when its thread ends at the same instant (which would otherwise release it).
    for index in 0..step.conversation.commitments.len() {
        let commitment = &step.conversation.commitments[index];
        if commitment.state.is_terminal() || commitment.deadline.is_none_or(|at| at > now) {
            continue;
        }
        move_commitment(
            step,
            index,
            CommitmentState::Violated,
            None,
            Arc::from("deadline passed"),
        );
    }

    for thread in 0..step.conversation.threads.len() {
        let current = &step.conversation.threads[thread];
        let Some(deadline) = current.deadline else {
            continue;
        };
        let state = template.machine.state(current.state);
        if deadline > now || state.terminal.is_some() {
            continue;
        }
        let participant = current.participant.clone();
        match state.on_deadline {
            Some(to) => {
                let transition = thread_transition(&template, step.conversation, thread, to, None);
                step.emit(EventKind::ThreadExpired(Box::new(transition)));
                close_commitments_if_ended(step, thread);
            }
            None => step.emit(EventKind::ThreadDeadlineSet {
                participant: participant.clone(),
                deadline: None,
            }),
        }
        timeouts.push(TimeoutInfo {
            kind: "thread",
            participant: Some(participant.to_string()),
            attempt: step.conversation.retry.attempts,
        });
    }

    if let Some(at) = step.conversation.retry.next_at
        && at <= now
    {
        let attempt = step.conversation.retry.attempts + 1;
        step.emit(EventKind::RetryFired { attempt });
        timeouts.push(TimeoutInfo {
            kind: "retry",
            participant: None,
            attempt,
        });
    }

    let conversation_due = step.conversation.deadline.is_some_and(|at| at <= now);
    if conversation_due {
        timeouts.push(TimeoutInfo {
            kind: "conversation",
            participant: None,
            attempt: step.conversation.retry.attempts,
        });
    }

    let mut effects = Effects::default();
    for timeout in &timeouts {
        let ran = Scope {
            conversation: step.conversation,
            message: None,
            timeout: Some(timeout),
            now,
        }
        .run_rules(&template.on_timeout, &mut effects);
        // Time cannot be refused: a rule too costly to evaluate is skipped, with the rest.
        if let Err(error) = ran {
            tracing::warn!(conversation = %step.conversation.id(), %error, "on_timeout rules stopped");
        }
    }
    // A failing `on_timeout` hook is recorded under either policy: time cannot be refused,
    // and the deadline's own effects (expiry, a fired retry) stand.
    let mut hook_errors = Vec::new();
    for timeout in &timeouts {
        let input = || {
            hook_input(
                step.conversation,
                HookEvent::OnTimeout,
                now,
                None,
                Some(timeout),
            )
        };
        let run = run_hook(
            step.conversation,
            (step.hooks, step.site),
            HookEvent::OnTimeout,
            input,
            &mut effects,
        );
        match run {
            Err(EngineError::HookNeedsPool) => {
                // Dropped by the engine, which runs the step again on the hook pool.
                step.needs_pool = true;
                return;
            }
            Ok(None) => {}
            Ok(Some(detail)) => hook_errors.push(detail),
            Err(error) => hook_errors.push(error.to_string()),
        }
    }
    for detail in hook_errors {
        record_violation(step, ViolationKind::HookError, None, None, detail);
    }
    // Rejecting a timer makes no sense (the compiler refuses it); ignore it if a hook does.
    effects.reject = None;
    apply_effects(step, effects, None);

    if !step.conversation.is_completed() && step.conversation.deadline.is_some_and(|at| at <= now) {
        expire(step);
    }
    check_completion(step);
    end_at_message_limit(step);
}

/// The conversation deadline passed: every open thread goes to the template's expiry state.
fn expire(step: &mut Step<'_>) {
    cut_off(step, "conversation deadline passed");
}

/// Ends a conversation that still runs but records as many messages as its template's
/// `limits.max_messages`, as its deadline would: it can take no more messages, so it would
/// only wait (without a deadline, for ever).
fn end_at_message_limit(step: &mut Step<'_>) {
    if let Some(limit) = step.conversation.at_message_limit()
        && !step.conversation.is_completed()
    {
        cut_off(
            step,
            &format!("message limit of {limit} reached (spec.limits.max_messages)"),
        );
    }
}

/// Moves every open thread to the template's expiry state and completes the conversation
/// with `reason` (its outcome by the template's rules), clearing its deadline.
fn cut_off(step: &mut Step<'_>, reason: &str) {
    let template = step.conversation.template.clone();
    let to = template.machine.on_expiry;
    for thread in 0..step.conversation.threads.len() {
        if step
            .conversation
            .thread_outcome(&step.conversation.threads[thread])
            .is_some()
        {
            continue;
        }
        let transition = thread_transition(&template, step.conversation, thread, to, None);
        step.emit(EventKind::ThreadExpired(Box::new(transition)));
        close_commitments_if_ended(step, thread);
    }
    step.emit(EventKind::DeadlineSet { deadline: None });
    if !step.conversation.is_completed() {
        let outcome = decide_outcome(step);
        step.emit(EventKind::Completed {
            outcome,
            reason: Some(reason.to_owned()),
        });
    }
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

/// A conversation ended by an action releases whatever is still owed in it.
fn release_all_open(step: &mut Step<'_>) {
    let open: Vec<usize> = step
        .conversation
        .commitments
        .iter()
        .enumerate()
        .filter(|(_, c)| !c.state.is_terminal())
        .map(|(index, _)| index)
        .collect();
    for index in open {
        move_commitment(
            step,
            index,
            CommitmentState::Released,
            None,
            Arc::from("conversation completed"),
        );
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

/// Releases (creditor) or cancels (debtor) a commitment by hand.
pub fn settle_commitment(
    step: &mut Step<'_>,
    commitment_id: &str,
    agent: &str,
    to: CommitmentState,
) -> Result<(), EngineError> {
    let conversation = &*step.conversation;
    let index = conversation
        .commitments
        .iter()
        .position(|c| &*c.id == commitment_id)
        .ok_or_else(|| EngineError::UnknownCommitment(commitment_id.to_owned()))?;
    let view = conversation.commitment_view(&conversation.commitments[index]);
    let (allowed, who) = match to {
        CommitmentState::Released => (&*view.creditor == agent, "its creditor"),
        _ => (&*view.debtor == agent, "its debtor"),
    };
    if !allowed {
        if conversation.can_read(agent) {
            return Err(EngineError::Forbidden(format!(
                "only {who} may {} commitment `{commitment_id}`",
                if to == CommitmentState::Released {
                    "release"
                } else {
                    "cancel"
                }
            )));
        }
        return Err(EngineError::NotAParty {
            agent: agent.to_owned(),
            conversation: conversation.id().to_string(),
        });
    }
    if view.state.is_terminal() {
        return Err(EngineError::CommitmentClosed(
            commitment_id.to_owned(),
            view.state.name(),
        ));
    }
    let cause = Arc::from(format!("{} by {agent}", to.name()));
    move_commitment(step, index, to, None, cause);
    Ok(())
}

#[cfg(test)]
mod tests;
