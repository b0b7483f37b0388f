//! The event a hook is called with: the JSON of `docs/hook-input.schema.json`, typed.
//! Unknown fields are ignored, so a hook built against this SDK keeps working when a newer
//! engine adds some.

use serde::Deserialize;
use serde_json::{Map, Value};

use crate::action::Outcome;

/// Which lifecycle event a call is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookKind {
    /// The conversation starts.
    OnStart,
    /// A message arrives.
    OnMessage,
    /// A deadline passed or a retry came due.
    OnTimeout,
}

/// One call's event.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Event {
    /// The ABI version of the engine (1).
    pub abi_version: u32,
    /// Which lifecycle event.
    pub hook: HookKind,
    /// The engine's clock (Unix milliseconds).
    pub now: u64,
    /// The conversation before this event.
    pub conversation: Conversation,
    /// For `on_message`: the message.
    #[serde(default)]
    pub message: Option<Message>,
    /// For `on_timeout`: what came due.
    #[serde(default)]
    pub timeout: Option<Timeout>,
    /// The template's `spec.hooks.config`.
    #[serde(default)]
    pub config: Value,
}

/// The conversation.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Conversation {
    /// Its id.
    pub id: String,
    /// The template's name.
    pub template: String,
    /// The template revision it is pinned to.
    pub revision: String,
    /// `active` or `completed`.
    pub status: String,
    /// The outcome, once completed.
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// The initiator.
    pub initiator: String,
    /// The participants.
    pub participants: Vec<String>,
    /// Each participant's thread.
    pub threads: Vec<Thread>,
    /// Variables set by hooks and declarative actions.
    #[serde(default)]
    pub vars: Map<String, Value>,
    /// The start parameters.
    #[serde(default)]
    pub parameters: Value,
    /// The context snapshot.
    #[serde(default)]
    pub context: Value,
    /// The conversation deadline (Unix milliseconds).
    #[serde(default)]
    pub deadline: Option<u64>,
    /// Retries fired so far.
    #[serde(default)]
    pub retry_attempts: u32,
}

/// A participant thread.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Thread {
    /// The participant.
    pub participant: String,
    /// Its state's name.
    pub state: String,
    /// Its outcome, when terminal.
    #[serde(default)]
    pub outcome: Option<Outcome>,
    /// Its reply-by deadline.
    #[serde(default)]
    pub deadline: Option<u64>,
}

/// The message an `on_message` call handles.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Message {
    /// Its id.
    pub id: String,
    /// The performative.
    pub performative: String,
    /// The sender.
    pub sender: String,
    /// Receivers before routing.
    pub receivers: Vec<String>,
    /// The content.
    #[serde(default)]
    pub content: Value,
    /// The message it answers.
    #[serde(default)]
    pub in_reply_to: Option<String>,
    /// Its reply-by.
    #[serde(default)]
    pub reply_by: Option<u64>,
}

/// What an `on_timeout` call handles.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Timeout {
    /// `conversation`, `thread` or `retry`.
    pub kind: String,
    /// For `thread`: whose reply-by passed.
    #[serde(default)]
    pub participant: Option<String>,
    /// For `retry`: which retry (1 for the first); otherwise retries so far.
    pub attempt: u32,
}

impl Event {
    /// Parses an event from its JSON text.
    pub fn from_json(text: &[u8]) -> Result<Event, serde_json::Error> {
        serde_json::from_slice(text)
    }

    /// A variable of the conversation.
    pub fn var(&self, name: &str) -> Option<&Value> {
        self.conversation.vars.get(name)
    }

    /// A top-level field of the message content.
    pub fn content(&self, field: &str) -> Option<&Value> {
        self.message.as_ref()?.content.get(field)
    }

    /// A top-level field of the message content as text.
    pub fn content_str(&self, field: &str) -> Option<&str> {
        self.content(field)?.as_str()
    }

    /// A top-level field of the message content as a whole number (floats are truncated).
    pub fn content_u64(&self, field: &str) -> Option<u64> {
        as_u64(self.content(field)?)
    }

    /// A top-level field of `spec.hooks.config` as a whole number.
    pub fn config_u64(&self, field: &str) -> Option<u64> {
        as_u64(self.config.get(field)?)
    }

    /// A top-level field of `spec.hooks.config` as text.
    pub fn config_str(&self, field: &str) -> Option<&str> {
        self.config.get(field)?.as_str()
    }

    /// The thread of `participant`.
    pub fn thread(&self, participant: &str) -> Option<&Thread> {
        self.conversation
            .threads
            .iter()
            .find(|thread| thread.participant == participant)
    }
}

fn as_u64(value: &Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_f64().filter(|f| *f >= 0.0).map(|f| f as u64))
}
