//! What time does to a conversation: deadlines fired ([`fire_due`]), the conversation's own
//! expiry, and the message limit.

use std::sync::Arc;

use colloquy_protocol::conversation::{CommitmentState, ViolationKind};
use colloquy_protocol::event::EventKind;
use colloquy_protocol::template::HookEvent;

use crate::error::EngineError;
use crate::hooks::input::hook_input;
use crate::rules::{Effects, Scope, TimeoutInfo};
use crate::step::Step;

use super::*;

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
pub(super) fn expire(step: &mut Step<'_>) {
    cut_off(step, "conversation deadline passed");
}

/// Ends a conversation that still runs but records as many messages as its template's
/// `limits.max_messages`, as its deadline would: it can take no more messages, so it would
/// only wait (without a deadline, for ever).
pub(super) fn end_at_message_limit(step: &mut Step<'_>) {
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
pub(super) fn cut_off(step: &mut Step<'_>, reason: &str) {
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
