//! Events and commits the store backends' unit tests write: one conversation of
//! `fipa-request` between alice and bob, its first message delivered to bob.

use std::sync::Arc;

use colloquy_protocol::event::{ConversationEvent, EventKind, Started};
use colloquy_protocol::message::{Content, Message};
use colloquy_protocol::performative::{FipaAct, Performative};

use super::{Commit, Delivery};

/// The `started` event (seq 1) of conversation `id`.
pub fn started(id: &str) -> ConversationEvent {
    ConversationEvent {
        seq: 1,
        at: 10,
        kind: EventKind::Started(Arc::new(Started {
            id: Arc::from(id),
            template: Arc::from("fipa-request"),
            revision: Arc::from("sha256:0"),
            initiator: Arc::from("alice"),
            participants: vec![Arc::from("bob")],
            parameters: serde_json::json!({}),
            context: serde_json::Value::Null,
            deadline: None,
        })),
    }
}

/// alice's request to bob, with message id `id`.
pub fn message(id: &str) -> Arc<Message> {
    Arc::new(Message {
        id: Arc::from(id),
        performative: Performative::Fipa(FipaAct::Request),
        sender: Arc::from("alice"),
        receivers: vec![Arc::from("bob")],
        content: Content::from_value(&serde_json::json!({"action": "x"})),
        in_reply_to: None,
        reply_by: None,
        sent_at: 11,
    })
}

/// The `message_accepted` event at `seq` of message `id`.
pub fn accepted(seq: u64, id: &str) -> ConversationEvent {
    ConversationEvent {
        seq,
        at: 11,
        kind: EventKind::MessageAccepted {
            message: message(id),
            transitions: Vec::new(),
        },
    }
}

/// A commit of `events` to conversation `id` at version `expected`, delivering every
/// accepted message to bob.
pub fn commit(
    id: &str,
    expected: u64,
    events: Vec<ConversationEvent>,
    wake: Option<u64>,
) -> Commit {
    let deliveries = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::MessageAccepted { message, .. } => Some(Delivery {
                agent: Arc::from("bob"),
                conversation_id: Arc::from(id),
                message: message.clone(),
            }),
            _ => None,
        })
        .collect();
    Commit {
        conversation_id: Arc::from(id),
        expected_version: expected,
        events,
        deliveries,
        wake_at: wake,
    }
}
