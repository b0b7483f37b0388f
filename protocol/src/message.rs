//! Messages as agents send them ([`SendMessage`]) and as the engine records them ([`Message`]).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::performative::Performative;

/// An agent's identifier. Shared, because one id appears in many messages and threads.
pub type AgentId = Arc<str>;

/// A message as a sender submits it. The sender is not a field: it is whoever the caller is
/// (the bearer token over HTTP, the `sender` argument in the library API).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendMessage {
    /// Idempotency key: a retry with the same id returns the first result and changes nothing.
    /// The engine assigns a UUIDv7 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<String>,
    /// The performative's name: a FIPA act or an intent the template declares.
    pub performative: String,
    /// Receivers. Empty means "the other party of my thread": the initiator for a
    /// participant, every participant for the initiator.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<String>,
    /// The content, validated against the template's schema for this performative.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub content: Value,
    /// The id of the message this one answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    /// Latest time (Unix milliseconds) by which the sender wants a reply (FIPA `reply-by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_by: Option<u64>,
    /// The sender's signature: a detached compact JWS (`protected..signature`) over
    /// [`SendMessage::signed_fields`] in RFC 8785 form (`colloquy_trust::message`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

impl SendMessage {
    /// What a sender signs: the conversation, the message id, itself, and the message as it
    /// sends it (`to` as sent, before routing). Every key is there; absent values are null.
    pub fn signed_fields(&self, conversation_id: &str, sender: &str) -> Value {
        serde_json::json!({
            "conversation_id": conversation_id,
            "message_id": self.message_id,
            "sender": sender,
            "performative": self.performative,
            "to": self.to,
            "content": self.content,
            "in_reply_to": self.in_reply_to,
            "reply_by": self.reply_by,
        })
    }

    /// A message with this performative and content and every other field left default.
    pub fn new(performative: &str, content: Value) -> SendMessage {
        SendMessage {
            performative: performative.to_owned(),
            content,
            ..SendMessage::default()
        }
    }

    /// Sets the idempotency key.
    pub fn with_id(mut self, message_id: impl Into<String>) -> SendMessage {
        self.message_id = Some(message_id.into());
        self
    }

    /// Sets the receivers.
    pub fn to<I, S>(mut self, receivers: I) -> SendMessage
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.to = receivers.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the reply-by time (Unix milliseconds).
    pub fn reply_by(mut self, at_ms: u64) -> SendMessage {
        self.reply_by = Some(at_ms);
        self
    }

    /// Sets the message this one answers.
    pub fn in_reply_to(mut self, message_id: impl Into<String>) -> SendMessage {
        self.in_reply_to = Some(message_id.into());
        self
    }
}

/// A message as the engine accepted and recorded it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Unique within the conversation; the idempotency key.
    pub id: Arc<str>,
    /// The act.
    pub performative: Performative,
    /// Who sent it: an agent, or [`ENGINE_PARTY`] for messages the engine sends itself.
    pub sender: AgentId,
    /// Who it is delivered to, after routing.
    pub receivers: Vec<AgentId>,
    /// The validated content, kept as compact JSON text.
    #[serde(default, skip_serializing_if = "Content::is_null")]
    pub content: Content,
    /// The message this one answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<Arc<str>>,
    /// Reply-by time (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_by: Option<u64>,
    /// When the engine accepted it (Unix milliseconds).
    pub sent_at: u64,
    /// The sender's signature, when it signed, with what it signed that the record does not
    /// otherwise keep.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<Arc<MessageSignature>>,
}

/// A message's signature as the engine recorded it, after checking it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageSignature {
    /// The detached compact JWS the sender gave.
    pub jws: String,
    /// The receivers as the sender named them (before routing; empty: the default ones).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub to: Vec<String>,
}

impl Message {
    /// The fields its sender signed ([`SendMessage::signed_fields`]), rebuilt from the
    /// record, when it carries a signature.
    pub fn signed_fields(&self, conversation_id: &str) -> Option<Value> {
        let signature = self.signature.as_ref()?;
        Some(self.fields_to_sign(conversation_id, &signature.to))
    }

    /// The fields a signature over this message covers, `to` being the receivers as its
    /// sender named them ([`SendMessage::signed_fields`]).
    pub fn fields_to_sign(&self, conversation_id: &str, to: &[String]) -> Value {
        let sent = SendMessage {
            message_id: Some(self.id.to_string()),
            performative: self.performative.name().to_owned(),
            to: to.to_vec(),
            content: self.content.value(),
            in_reply_to: self.in_reply_to.as_deref().map(str::to_owned),
            reply_by: self.reply_by,
            signature: None,
        };
        sent.signed_fields(conversation_id, &self.sender)
    }
}

/// The sender name of messages the engine sends on a conversation's behalf: automatic
/// replies to late messages, messages sent by hooks and declarative actions.
pub const ENGINE_PARTY: &str = "colloquy:engine";

/// A request to start a conversation. The initiator is the caller.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartConversation {
    /// The template's name; the newest revision is used.
    pub template: String,
    /// The participants, one thread each.
    pub participants: Vec<String>,
    /// Start parameters, validated against the template's parameter schema.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub parameters: Value,
    /// Context snapshot, capped by the template (`spec.context`).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub context: Value,
    /// A client-chosen id; a duplicate is refused, never merged. A UUIDv7 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    /// Conversation deadline, milliseconds from now (the template's default when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<u64>,
    /// An opening message sent by the initiator in the same call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<SendMessage>,
}

/// A recorded message's content: validated JSON kept as compact text.
///
/// Recorded messages live in event logs, inboxes and stores for the conversation's whole
/// life; as text a small object takes its length in bytes, where a parsed
/// `serde_json::Value` map takes a B-tree node of several hundred. Parse it with
/// [`Content::value`] when you need to look inside.
#[derive(Clone)]
pub struct Content(Box<RawValue>);

impl Content {
    /// Content holding `value`.
    pub fn from_value(value: &Value) -> Content {
        // Serializing a `Value` cannot fail: its map keys are strings and it has no
        // non-finite numbers. `null` is the safe answer should that ever change.
        Content(serde_json::value::to_raw_value(value).unwrap_or_else(|_| null_raw()))
    }

    /// The JSON `null`.
    pub fn null() -> Content {
        Content(null_raw())
    }

    /// The content parsed.
    pub fn value(&self) -> Value {
        // The text was produced by serde_json from a `Value`, so it parses.
        serde_json::from_str(self.0.get()).unwrap_or(Value::Null)
    }

    /// The compact JSON text.
    pub fn as_json(&self) -> &str {
        self.0.get()
    }

    /// Whether the content is `null` (no content).
    pub fn is_null(&self) -> bool {
        self.0.get() == "null"
    }
}

fn null_raw() -> Box<RawValue> {
    // "null" is valid JSON.
    RawValue::from_string("null".to_owned()).unwrap_or_else(|_| unreachable!("null is JSON"))
}

impl Default for Content {
    fn default() -> Content {
        Content::null()
    }
}

impl From<Value> for Content {
    fn from(value: Value) -> Content {
        Content::from_value(&value)
    }
}

impl std::fmt::Debug for Content {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0.get())
    }
}

impl PartialEq for Content {
    fn eq(&self, other: &Content) -> bool {
        self.0.get() == other.0.get() || self.value() == other.value()
    }
}

impl PartialEq<Value> for Content {
    fn eq(&self, other: &Value) -> bool {
        self.value() == *other
    }
}

impl Serialize for Content {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Content, D::Error> {
        // Through `Value`, so it works from any serde format, not only JSON text.
        Value::deserialize(deserializer).map(|value| Content::from_value(&value))
    }
}
