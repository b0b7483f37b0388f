//! Commitments moved by messages and settled by their debtors' moves, deadlines and ends.

use std::sync::Arc;

use smallvec::SmallVec;

use colloquy_policy::compiled::StateId;
use colloquy_protocol::conversation::{CommitmentState, ViolationKind};
use colloquy_protocol::event::EventKind;
use colloquy_protocol::message::Message;
use colloquy_protocol::template::Role;

use crate::error::EngineError;
use crate::step::Step;

use super::*;

/// Creates and moves the commitments of `thread` for an in-protocol message.
pub(super) fn move_commitments(
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
        let id = numbered_id(conversation.id(), conversation.commitments.len() + 1);
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

/// `{prefix}/{n}` (a commitment's id: its conversation's, then its number), built on the
/// stack and copied once into its shared string. `format!` went through the formatting
/// machinery into a `String` of its own, which `Arc::from` then copied again.
pub(super) fn numbered_id(prefix: &str, n: usize) -> Arc<str> {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = n;
    loop {
        start -= 1;
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    // A conversation id (at most `MAX_ID_LEN`, 128 bytes) with its number fits on the stack;
    // anything longer spills to the heap, as correct.
    let mut id: SmallVec<[u8; 160]> = SmallVec::new();
    id.extend_from_slice(prefix.as_bytes());
    id.push(b'/');
    id.extend_from_slice(&digits[start..]);
    // ASCII digits after a `str`: UTF-8 throughout.
    Arc::from(std::str::from_utf8(&id).unwrap_or(prefix))
}

/// The deadline a commitment has after entering `state`: kept if already running and still
/// armed, started if newly armed, none otherwise.
pub(super) fn armed_deadline(
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

pub(super) fn move_commitment(
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
pub(super) fn close_commitments_if_ended(step: &mut Step<'_>, thread: usize) {
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

/// A conversation ended by an action releases whatever is still owed in it.
pub(super) fn release_all_open(step: &mut Step<'_>) {
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
