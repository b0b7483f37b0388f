//! What a refused message leaves in its conversation: a compact `message_refused` event, so
//! that replay and shadow comparison see what a revision refused as well as what it accepted,
//! and a canary can count refusals per revision from the commits a store sees.
//!
//! Only refusals by the protocol's steps of [`on_message`](super::on_message) are recorded,
//! of a party's message to a conversation that exists: a stranger, an unknown conversation, a
//! retried or clashing message id, or a failure of the engine itself leaves no trace.

use colloquy_protocol::event::Refusal;
use colloquy_protocol::message::{AgentId, SendMessage};
use colloquy_protocol::performative::MAX_INTENT_NAME_LEN;
use colloquy_protocol::template::MAX_PARTICIPANTS;

use super::MAX_AGENT_ID_LEN;
use crate::conversation::Conversation;
use crate::error::EngineError;

/// Refusals recorded per conversation at most. Past it the conversation still refuses what
/// it refuses, unrecorded: a party retrying a refused message in a loop must not grow the
/// log without end (each refusal is a store write, kept as long as the conversation).
pub const MAX_RECORDED_REFUSALS: u32 = 64;

/// Longest performative a refusal keeps, in bytes; a longer one is cut at a character
/// boundary. No revision can know a name that long (intent names are at most
/// [`MAX_INTENT_NAME_LEN`] bytes, FIPA acts shorter), so a cut name is as unknown as the
/// whole one, and 64 refusals of a megabyte-long name do not cost 64 megabytes.
pub const MAX_RECORDED_PERFORMATIVE_BYTES: usize = 2 * MAX_INTENT_NAME_LEN;

/// Receivers a refusal keeps, at most: a message names each receiver once, and there are
/// never more participants than this. Each name is cut, as the performative is, at
/// [`MAX_AGENT_ID_LEN`] bytes (no party's id is longer).
pub const MAX_RECORDED_RECEIVERS: usize = MAX_PARTICIPANTS as usize;

/// The `message_refused` event's payload for `request`, sent by `sender` and refused with
/// `error`, or `None` when the refusal is not recorded: `error` is not one of the protocol's
/// refusals ([`is_recorded`]), `sender` is no party of `conversation`, or the conversation
/// holds [`MAX_RECORDED_REFUSALS`] already.
pub fn refusal(
    conversation: &Conversation,
    sender: &str,
    request: &SendMessage,
    error: &EngineError,
) -> Option<Refusal> {
    if !is_recorded(error)
        || conversation.role_of(sender).is_none()
        || conversation.refusals >= MAX_RECORDED_REFUSALS
    {
        return None;
    }
    Some(Refusal {
        message_id: request.message_id.as_deref().map(Into::into),
        sender: AgentId::from(sender),
        performative: cut(&request.performative, MAX_RECORDED_PERFORMATIVE_BYTES).to_owned(),
        to: request
            .to
            .iter()
            .take(MAX_RECORDED_RECEIVERS)
            .map(|receiver| AgentId::from(cut(receiver, MAX_AGENT_ID_LEN)))
            .collect(),
        code: error.code().to_owned(),
        pointer: error.pointer().map(str::to_owned),
    })
}

/// Whether a message refused with `error` is recorded in its conversation: the refusals of
/// the protocol's steps (the message on its own, how the threads take it, whether the
/// conversation admits it, the rules' and the hook's decision, routing). Not a caller who
/// is no party, a missing conversation or revision, a message id already taken (a retry, or
/// a clash), nor the engine's own failures (store, hook pool): those say nothing about what
/// the template allows.
pub fn is_recorded(error: &EngineError) -> bool {
    match error {
        EngineError::UnknownPerformative { .. }
        | EngineError::SchemaViolation { .. }
        | EngineError::Invalid { .. }
        | EngineError::OutOfProtocol(_)
        | EngineError::ConversationEnded(_)
        | EngineError::MessageLimit { .. }
        | EngineError::Rejected { .. }
        | EngineError::RuleTooCostly(_)
        | EngineError::HookFailed { .. }
        | EngineError::BadSignature(_) => true,
        EngineError::UnknownTemplate(_)
        | EngineError::RevisionGone { .. }
        | EngineError::UnknownConversation(_)
        | EngineError::DuplicateConversation(_)
        | EngineError::UnknownCommitment(_)
        | EngineError::NotAParty { .. }
        | EngineError::Forbidden(_)
        | EngineError::ContextTooLarge { .. }
        | EngineError::MessageIdTaken { .. }
        | EngineError::CommitmentClosed(..)
        | EngineError::HooksBusy(_)
        | EngineError::HookNeedsPool
        | EngineError::Store(_) => false,
    }
}

/// `text` cut to at most `max` bytes, at a character boundary.
fn cut(text: &str, max: usize) -> &str {
    &text[..text.floor_char_boundary(max)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_are_cut_at_a_character_boundary() {
        assert_eq!(cut("agree", MAX_RECORDED_PERFORMATIVE_BYTES), "agree");
        let long = "é".repeat(MAX_RECORDED_PERFORMATIVE_BYTES);
        let kept = cut(&long, MAX_RECORDED_PERFORMATIVE_BYTES);
        assert_eq!(kept.len(), MAX_RECORDED_PERFORMATIVE_BYTES);
        assert_eq!(
            cut("aé", 2),
            "a",
            "the two-byte `é` does not fit in 2 bytes after `a`"
        );
    }

    #[test]
    fn the_protocols_refusals_are_recorded_and_the_engines_failures_are_not() {
        assert!(is_recorded(&EngineError::OutOfProtocol("no".into())));
        assert!(is_recorded(&EngineError::invalid("/reply_by", "past")));
        assert!(!is_recorded(&EngineError::NotAParty {
            agent: "eve".into(),
            conversation: "c".into(),
        }));
        assert!(!is_recorded(&EngineError::MessageIdTaken {
            id: "m".into(),
            field: "content",
        }));
        assert!(!is_recorded(&EngineError::Store(
            crate::store::StoreError::Unavailable("down".into())
        )));
    }
}
