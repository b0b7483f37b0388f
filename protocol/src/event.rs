//! The event log: every change to a conversation is one event, appended in order.
//!
//! Replaying a conversation's events rebuilds its state exactly; the log is what stores
//! persist and what subscribers stream.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::conversation::{CommitmentState, CommitmentView, Outcome, Violation};
use crate::message::{AgentId, Message};

/// One entry of a conversation's log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationEvent {
    /// Position in the log, from 1; also the conversation's version after this event.
    pub seq: u64,
    /// When it happened (Unix milliseconds, engine clock).
    pub at: u64,
    /// The chain hash of the event before (lowercase hex; 64 zeros before the first), so a
    /// removed, reordered or altered event breaks the chain (`colloquy_trust::chain`).
    /// `None` on events recorded before chains existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev: Option<Arc<str>>,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The conversation began. Always the first event.
    Started(Arc<Started>),
    /// A message was accepted (and, under `report`, possibly flagged by a later
    /// `violation_recorded`).
    MessageAccepted {
        /// The message as recorded, receivers after routing.
        message: Arc<Message>,
        /// The thread moves it caused.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        transitions: Vec<ThreadTransition>,
    },
    /// A party's message was refused. Never delivered, and nothing else changed: it is
    /// recorded so that what a revision refused can be compared with what another would have
    /// accepted (replay, shadow), and refusals counted per revision. Compact: who sent what
    /// and why, never the content. The engine records a bounded number per conversation.
    MessageRefused(Box<Refusal>),
    /// A thread's deadline or the conversation's deadline moved a thread.
    ThreadExpired(Box<ThreadTransition>),
    /// A thread's reply-by changed.
    ThreadDeadlineSet {
        /// The participant whose thread it is.
        participant: AgentId,
        /// The new deadline (Unix milliseconds), or none.
        deadline: Option<u64>,
    },
    /// A rule was broken.
    ///
    /// On the wire the violation sits under a `violation` key: inlined, its `at` would
    /// collide with the event's own `at`.
    #[serde(with = "nested_violation")]
    ViolationRecorded(Box<Violation>),
    /// A commitment came into being.
    CommitmentCreated(Box<CommitmentView>),
    /// A commitment moved.
    CommitmentMoved {
        /// Its id.
        id: Arc<str>,
        /// The new state.
        to: CommitmentState,
        /// The new deadline, if the move armed or disarmed it.
        deadline: Option<u64>,
        /// The message or cause that moved it.
        cause: Arc<str>,
    },
    /// Variables were merged into `vars`.
    VarsMerged {
        /// The merged keys and their new values.
        vars: Map<String, Value>,
    },
    /// The conversation deadline changed.
    DeadlineSet {
        /// The new deadline (Unix milliseconds), or none.
        deadline: Option<u64>,
    },
    /// A retry of `on_timeout` was scheduled.
    RetryScheduled {
        /// When it runs (Unix milliseconds).
        #[serde(rename = "retry_at")]
        at: u64,
        /// Which attempt it will be, from 1.
        attempt: u32,
    },
    /// A scheduled retry ran (its `on_timeout` rules were evaluated).
    RetryFired {
        /// Which attempt it was.
        attempt: u32,
    },
    /// The conversation was handed to an agent.
    Escalated {
        /// The agent.
        to: AgentId,
        /// Why.
        reason: String,
    },
    /// The conversation ended.
    Completed {
        /// How.
        outcome: Outcome,
        /// Why, when a rule, a hook or a deadline ended it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
}

/// The facts a conversation starts from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Started {
    /// The conversation id.
    pub id: Arc<str>,
    /// The template's name.
    pub template: Arc<str>,
    /// The template revision it is pinned to.
    pub revision: Arc<str>,
    /// Who started it.
    pub initiator: AgentId,
    /// One thread each.
    pub participants: Vec<AgentId>,
    /// Validated parameters.
    #[serde(default)]
    pub parameters: Value,
    /// The context snapshot after the size cap was applied.
    #[serde(default)]
    pub context: Value,
    /// The conversation deadline (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
    /// The W3C `traceparent` of the engine step that started it, when traces are exported:
    /// the conversation's later work (messages, deadlines, pushes) links to it, also on
    /// another node or after a restart (docs/observability.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Arc<str>>,
}

/// A message the engine refused, as its conversation records it: the request's facts as
/// sent (even a performative the template does not know) and the refusal's error code.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    /// The id the sender gave the message, if it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<Arc<str>>,
    /// Who sent it: a party of the conversation.
    pub sender: AgentId,
    /// The performative as sent.
    pub performative: String,
    /// The receivers as sent (none: the default receivers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<AgentId>,
    /// The refusal's error code (`out_of_protocol`, `schema_violation`, ...), as the sender
    /// was answered.
    pub code: String,
    /// Where in the request the refusal points, when it points anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
}

/// A thread moved from one state to another.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadTransition {
    /// The participant whose thread it is.
    pub participant: AgentId,
    /// The state before.
    pub from: Arc<str>,
    /// The state after.
    pub to: Arc<str>,
    /// The outcome, when `to` is terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The thread's new reply-by deadline (Unix milliseconds), if the move set one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
}

/// (De)serializes a violation event's payload as `{"violation": {...}}`.
mod nested_violation {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use crate::conversation::Violation;

    #[derive(Serialize)]
    struct Out<'a> {
        violation: &'a Violation,
    }

    #[derive(Deserialize)]
    struct In {
        violation: Box<Violation>,
    }

    #[allow(clippy::borrowed_box)] // the signature serde's `with` requires
    pub fn serialize<S: Serializer>(violation: &Box<Violation>, s: S) -> Result<S::Ok, S::Error> {
        Out { violation }.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Box<Violation>, D::Error> {
        Ok(In::deserialize(d)?.violation)
    }
}

#[cfg(test)]
mod wire_tests {
    use serde_json::json;

    use super::*;
    use crate::conversation::ViolationKind;

    fn refusal() -> Refusal {
        Refusal {
            message_id: Some("m2".into()),
            sender: "bob".into(),
            performative: "made-up".to_owned(),
            to: vec!["alice".into()],
            code: "unknown_performative".to_owned(),
            pointer: Some("/performative".to_owned()),
        }
    }

    /// A refusal is flat in its event, as `started` is, under the type `message_refused`;
    /// what it does not know it leaves out.
    #[test]
    fn a_refusal_is_written_flat_and_compact() {
        let event = ConversationEvent {
            seq: 3,
            at: 9,
            prev: None,
            kind: EventKind::MessageRefused(Box::new(refusal())),
        };
        assert_eq!(
            serde_json::to_value(&event).expect("serializes"),
            json!({
                "seq": 3, "at": 9, "type": "message_refused", "message_id": "m2",
                "sender": "bob", "performative": "made-up", "to": ["alice"],
                "code": "unknown_performative", "pointer": "/performative"
            })
        );
        let bare: ConversationEvent = serde_json::from_value(json!({
            "seq": 3, "at": 9, "type": "message_refused", "sender": "bob",
            "performative": "agree", "code": "out_of_protocol"
        }))
        .expect("optional fields may be absent");
        let EventKind::MessageRefused(bare) = bare.kind else {
            panic!("read as another kind: {bare:?}");
        };
        assert_eq!(
            (bare.message_id, bare.to, bare.pointer),
            (None, vec![], None)
        );
    }

    /// Every event must read back as written: the SSE streams and the stores depend on it.
    #[test]
    fn events_with_their_own_time_round_trip() {
        let events = [
            ConversationEvent {
                seq: 4,
                at: 10,
                prev: None,
                kind: EventKind::ViolationRecorded(Box::new(Violation {
                    kind: ViolationKind::LateMessage,
                    agent: Some("initech".into()),
                    message_id: Some("m1".into()),
                    detail: "late".into(),
                    at: 11,
                })),
            },
            ConversationEvent {
                seq: 5,
                at: 12,
                prev: None,
                kind: EventKind::RetryScheduled { at: 13, attempt: 1 },
            },
            ConversationEvent {
                seq: 6,
                at: 14,
                prev: None,
                kind: EventKind::MessageRefused(Box::new(refusal())),
            },
            ConversationEvent {
                seq: 7,
                at: 15,
                prev: None,
                kind: EventKind::MessageRefused(Box::new(Refusal {
                    message_id: None,
                    to: Vec::new(),
                    pointer: None,
                    ..refusal()
                })),
            },
        ];
        for event in events {
            let json = serde_json::to_string(&event).expect("serializes");
            let back: ConversationEvent = serde_json::from_str(&json).expect(&json);
            assert_eq!(back, event, "{json}");
        }
    }
}
