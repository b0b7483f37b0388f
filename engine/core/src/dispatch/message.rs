//! What a message does ([`on_message`]), as the named steps it runs in: drafted, fitted to
//! the threads it concerns, admitted, decided by the rules and the hook, routed, emitted.

use std::sync::Arc;

use colloquy_policy::CompiledTemplate;
use colloquy_policy::compiled::{LatePolicy, State, StateId, Transition};
use colloquy_protocol::conversation::ViolationKind;
use colloquy_protocol::event::ThreadTransition;
use colloquy_protocol::message::{
    AgentId, Content, ENGINE_PARTY, Message, MessageSignature, SendMessage,
};
use colloquy_protocol::template::{
    Enforcement, HookEvent, LateAction, ReplyBySpec, Role, Signatures,
};
use serde_json::json;
use smallvec::SmallVec;

use crate::conversation::Conversation;
use crate::error::EngineError;
use crate::hooks::input::{MessageFacts, hook_input};
use crate::hooks::{CallSite, HookCaller};
use crate::rules::{Effects, Origin, Scope};
use crate::step::Step;

use super::*;

/// How one thread takes a message.
pub(super) enum Fit<'t> {
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
///
/// The steps, in the order they run, each a function of this module: `draft` (the message
/// on its own: a known performative from a party, its fields and content valid, who it
/// reaches), `fit_threads` (how each thread it concerns takes it), `admit` (whether the
/// conversation takes it at all), `decide` (the template's rules and hook), `route` (the
/// receivers the decision leaves), `Emission::plan` (every change it makes), `emit`. Every
/// step before `emit` only reads: a refusal anywhere leaves the conversation as it was.
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
    let draft = draft(&template, conversation, sender, request, id, now)?;
    let scope = Scope {
        conversation,
        message: Some(&draft.message),
        timeout: None,
        now,
    };
    let fits = fit_threads(&template, &scope, draft.role, &draft.threads)?;
    admit(&template, conversation, &fits, request, &draft.message)?;
    let moves = moves_of(&fits);
    let mut decision = decide(&template, &scope, hooks, &moves, &draft, request)?;
    let receivers = route(draft.receivers, &mut decision.effects)?;
    let emission = Emission::plan(
        &template,
        conversation,
        &fits,
        &moves,
        request.reply_by,
        now,
    );
    let message = Message {
        receivers,
        ..draft.message
    };
    emit(step, message, emission, decision, draft.role);
    Ok(())
}

/// A message as its request describes it, checked on its own, before any thread sees it.
struct Draft {
    /// The sender's role in the conversation.
    role: Role,
    /// The threads it concerns. A message usually concerns one, so they stay on the stack
    /// (this runs for every message).
    threads: SmallVec<[usize; 4]>,
    /// The message, its receivers still empty: [`route`] decides them.
    message: Message,
    /// Who it reaches before the template's rules route it.
    receivers: Vec<AgentId>,
}

/// Step 1: the message on its own. Its performative is the template's, its sender a party,
/// its `reply_by` in the future, its `in_reply_to` a message of this conversation, its
/// content valid against the performative's schema, and its `to` names threads the sender
/// may write to.
fn draft(
    template: &CompiledTemplate,
    conversation: &Conversation,
    sender: &str,
    request: &SendMessage,
    id: Arc<str>,
    now: u64,
) -> Result<Draft, EngineError> {
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
    let signature = signature(template, request)?;
    if let Some(schema) = template.content_schemas.get(&performative) {
        validate(schema, &request.content, "/content")?;
    }
    let (threads, receivers) = resolve_receivers(conversation, role, sender, &request.to)?;
    let sender = match role {
        Role::Initiator => conversation.initiator().clone(),
        Role::Participant => conversation.threads[threads[0]].participant.clone(),
    };
    let message = Message {
        id,
        performative,
        sender,
        receivers: Vec::new(),
        content: Content::from_value(&request.content),
        in_reply_to: request.in_reply_to.as_deref().map(Arc::from),
        reply_by: request.reply_by,
        sent_at: now,
        signature,
    };
    Ok(Draft {
        role,
        threads,
        message,
        receivers,
    })
}

/// The signature to record with the message: the one it carries (which the server checked
/// against the sender's keys before the engine saw it), with the receivers as sent. A
/// template with `signatures: required` refuses a message without one. A signed message
/// names its id, which the signature covers.
fn signature(
    template: &CompiledTemplate,
    request: &SendMessage,
) -> Result<Option<Arc<MessageSignature>>, EngineError> {
    match (&request.signature, template.signatures) {
        (None, Signatures::Required) => Err(EngineError::BadSignature(format!(
            "missing: template `{}` requires every message to carry its sender's signature",
            template.name
        ))),
        (None, Signatures::Optional) => Ok(None),
        (Some(_), _) if request.message_id.is_none() => Err(EngineError::BadSignature(
            "a signed message names its `message_id`, which the signature covers".to_owned(),
        )),
        (Some(jws), _) => Ok(Some(Arc::new(MessageSignature {
            jws: jws.clone(),
            to: request.to.clone(),
        }))),
    }
}

/// Step 2: how each thread the message concerns takes it ([`fit`]).
fn fit_threads<'t>(
    template: &'t CompiledTemplate,
    scope: &Scope<'_>,
    role: Role,
    threads: &[usize],
) -> Result<SmallVec<[Fit<'t>; 4]>, EngineError> {
    threads
        .iter()
        .map(|&thread| fit(template, scope, role, thread))
        .collect()
}

/// Step 3: whether the conversation takes the message at all. Not once it has ended (but
/// for a message every thread takes as late), not past its message limit, not out of
/// protocol where the template enforces the protocol, and not without a `reply_by` where a
/// move requires one.
fn admit(
    template: &CompiledTemplate,
    conversation: &Conversation,
    fits: &[Fit<'_>],
    request: &SendMessage,
    message: &Message,
) -> Result<(), EngineError> {
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
    if request.reply_by.is_none()
        && moves_of(fits)
            .iter()
            .any(|(_, t)| t.reply_by.as_ref().is_some_and(|spec| spec.required))
    {
        return Err(EngineError::invalid(
            "/reply_by",
            format!("`{}` here must carry a reply_by", message.performative),
        ));
    }
    Ok(())
}

/// The transitions the message makes, with the thread each moves.
fn moves_of<'t>(fits: &[Fit<'t>]) -> SmallVec<[(usize, &'t Transition); 4]> {
    fits.iter()
        .filter_map(|fit| match fit {
            Fit::Move { thread, transition } => Some((*thread, *transition)),
            _ => None,
        })
        .collect()
}

/// What the template's rules and hook decided of a message.
struct Decision {
    /// What the rules and the hook asked for (refusal, routing, variables, sends, ...).
    effects: Effects,
    /// The hook's failure under `fail_open`: recorded as a violation once the message is
    /// emitted.
    hook_error: Option<String>,
}

/// Step 4: the template's `on_message` rules, then its hook (unless a rule already refused
/// the message: that spares the call), then its routing rules. A message that moves no
/// thread (late, or out of protocol under `observe`) runs none of them.
fn decide(
    template: &CompiledTemplate,
    scope: &Scope<'_>,
    hooks: (Option<&dyn HookCaller>, CallSite),
    moves: &[(usize, &Transition)],
    draft: &Draft,
    request: &SendMessage,
) -> Result<Decision, EngineError> {
    let mut effects = Effects::default();
    let mut hook_error = None;
    if !moves.is_empty() {
        scope.run_rules(&template.on_message, &mut effects)?;
        if effects.reject.is_none() {
            let input = || {
                let facts = MessageFacts {
                    message: &draft.message,
                    receivers: &draft.receivers,
                    content: &request.content,
                };
                hook_input(
                    scope.conversation,
                    HookEvent::OnMessage,
                    scope.now,
                    Some(facts),
                    None,
                )
            };
            hook_error = run_hook(
                scope.conversation,
                hooks,
                HookEvent::OnMessage,
                input,
                &mut effects,
            )?;
        }
        scope.run_rules(&template.routing, &mut effects)?;
    }
    Ok(Decision {
        effects,
        hook_error,
    })
}

/// Step 5: the receivers as the decision leaves them. A rule's refusal refuses the message;
/// otherwise the rules may replace the receivers, add to them, and escalate to others.
fn route(mut receivers: Vec<AgentId>, effects: &mut Effects) -> Result<Vec<AgentId>, EngineError> {
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
    Ok(receivers)
}

/// Everything an admitted message changes in its threads, worked out before anything is
/// emitted.
struct Emission<'t> {
    /// Each moved thread, with the state it leaves (its commitments move from there).
    moved: SmallVec<[(usize, StateId); 4]>,
    /// The moves as events record them, with each target state's deadline.
    transitions: Vec<ThreadTransition>,
    /// Threads that take the message as late, with their policy.
    late: Vec<(usize, &'t LatePolicy)>,
    /// Out-of-protocol findings recorded (not refused) under `observe`.
    violations: Vec<(ViolationKind, String)>,
}

impl<'t> Emission<'t> {
    /// Step 6: the changes, from the threads' fits and the message's `reply_by`.
    fn plan(
        template: &CompiledTemplate,
        conversation: &Conversation,
        fits: &[Fit<'t>],
        moves: &[(usize, &Transition)],
        reply_by: Option<u64>,
        now: u64,
    ) -> Emission<'t> {
        let moved = moves
            .iter()
            .map(|(thread, _)| (*thread, conversation.threads[*thread].state))
            .collect();
        let transitions = moves
            .iter()
            .map(|(thread, transition)| {
                let deadline = arrival_deadline(
                    transition.reply_by.as_ref(),
                    template.machine.state(transition.to),
                    reply_by,
                    now,
                );
                thread_transition(template, conversation, *thread, transition.to, deadline)
            })
            .collect();
        let late = fits
            .iter()
            .filter_map(|fit| match fit {
                Fit::Late { thread, policy } => Some((*thread, *policy)),
                _ => None,
            })
            .collect();
        let violations = fits
            .iter()
            .filter_map(|fit| match fit {
                Fit::OutOfProtocol { kind, detail, .. } => Some((*kind, detail.clone())),
                _ => None,
            })
            .collect();
        Emission {
            moved,
            transitions,
            late,
            violations,
        }
    }
}

/// Step 7: the message emitted with its transitions, then what it causes: the hook's
/// failure and the protocol findings as violations, answers to late messages, the moved
/// threads' commitments, the decision's effects, and the conversation's end when it came.
fn emit(
    step: &mut Step<'_>,
    message: Message,
    emission: Emission<'_>,
    decision: Decision,
    role: Role,
) {
    let id = message.id.clone();
    let message = Arc::new(message);
    step.emit_message(message.clone(), emission.transitions);
    if let Some(detail) = decision.hook_error {
        record_violation(
            step,
            ViolationKind::HookError,
            None,
            Some(id.clone()),
            detail,
        );
    }
    for (kind, detail) in emission.violations {
        tracing::warn!(conversation = %step.conversation.id(), message = %id, "{detail}");
        record_violation(
            step,
            kind,
            Some(message.sender.clone()),
            Some(id.clone()),
            detail,
        );
    }
    for (thread, policy) in emission.late {
        answer_late(step, &message, thread, policy);
    }
    for (thread, left) in emission.moved {
        move_commitments(step, thread, left, &message, role);
        close_commitments_if_ended(step, thread);
    }
    apply_effects(step, decision.effects, Some(&message));
    check_completion(step);
    end_at_message_limit(step);
}

/// Who a message reaches, and which threads it belongs to.
pub(super) fn resolve_receivers(
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

pub(super) fn fit<'t>(
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
pub(super) fn arrival_deadline(
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

/// A message to a thread that ended by a deadline: flag it, and with `reject` answer it.
pub(super) fn answer_late(
    step: &mut Step<'_>,
    message: &Message,
    thread: usize,
    policy: &LatePolicy,
) {
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
            signature: None,
        };
        step.emit_message(Arc::new(answer), Vec::new());
    }
}
