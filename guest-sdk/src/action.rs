//! The actions a hook returns: the JSON of `docs/hook-output.schema.json`, typed. The same
//! vocabulary as a template's declarative rules (`eval_vars` aside: it is CEL, for rules).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// One step the hook asks the engine to take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Carry on (the same as returning nothing).
    Continue,
    /// Refuse the message or the start; the sender gets the reason.
    Reject {
        /// Why.
        reason: String,
    },
    /// Merge these values into the conversation's variables.
    SetVars(Map<String, Value>),
    /// Send a message as the engine party (`colloquy:engine`).
    Send {
        /// The performative.
        performative: String,
        /// Receivers.
        to: Vec<String>,
        /// Content.
        #[serde(default, skip_serializing_if = "Value::is_null")]
        content: Value,
    },
    /// Change the receivers of the message being handled.
    Route {
        /// Agents.
        to: Vec<String>,
        /// Add to the receivers, or replace them.
        #[serde(default)]
        mode: RouteMode,
    },
    /// Set the conversation deadline to this many milliseconds from now.
    SetDeadline {
        /// Milliseconds from now.
        in_ms: u64,
    },
    /// Push the conversation deadline back.
    ExtendDeadline {
        /// Milliseconds.
        by_ms: u64,
    },
    /// Run `on_timeout` again later.
    Retry {
        /// Delay before the first retry.
        after_ms: u64,
        /// Each further retry waits this many times longer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backoff: Option<f64>,
        /// Retries stop after this many.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_attempts: Option<u32>,
    },
    /// End the conversation.
    Complete {
        /// The outcome.
        outcome: Outcome,
        /// Why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Hand the conversation to an agent, with a reason.
    Escalate {
        /// The agent.
        to: String,
        /// Why.
        reason: String,
    },
    /// A line for the engine log.
    Log {
        /// Its level.
        #[serde(default)]
        level: LogLevel,
        /// The line.
        message: String,
    },
}

/// How [`Action::Route`] treats the original receivers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RouteMode {
    /// Keep them and add the new ones.
    #[default]
    Add,
    /// Deliver only to the new ones.
    Replace,
}

/// Log levels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LogLevel {
    /// Debug.
    Debug,
    /// Info.
    #[default]
    Info,
    /// Warn.
    Warn,
    /// Error.
    Error,
}

/// How a conversation or thread ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Done.
    Success,
    /// Tried and failed.
    Failure,
    /// Refused.
    Refused,
    /// Rejected.
    Rejected,
    /// Cancelled.
    Cancelled,
    /// Ran out of time.
    Timeout,
    /// Nobody answered.
    NoReply,
    /// Not understood.
    NotUnderstood,
    /// Handed to an agent outside the protocol.
    Escalated,
}

impl Action {
    /// `reject` with a reason.
    pub fn reject(reason: impl Into<String>) -> Action {
        Action::Reject {
            reason: reason.into(),
        }
    }

    /// `set_vars` with one variable.
    pub fn set_var(name: impl Into<String>, value: impl Into<Value>) -> Action {
        let mut vars = Map::new();
        vars.insert(name.into(), value.into());
        Action::SetVars(vars)
    }

    /// `route` adding receivers.
    pub fn route_to<S: Into<String>>(agents: impl IntoIterator<Item = S>) -> Action {
        Action::Route {
            to: agents.into_iter().map(Into::into).collect(),
            mode: RouteMode::Add,
        }
    }

    /// `send` a message as the engine party.
    pub fn send(performative: impl Into<String>, to: impl Into<String>, content: Value) -> Action {
        Action::Send {
            performative: performative.into(),
            to: vec![to.into()],
            content,
        }
    }

    /// `retry` after `after_ms`, each further retry `backoff` times longer, at most
    /// `max_attempts` retries.
    pub fn retry(after_ms: u64, backoff: f64, max_attempts: u32) -> Action {
        Action::Retry {
            after_ms,
            backoff: Some(backoff),
            max_attempts: Some(max_attempts),
        }
    }

    /// `escalate` to an agent.
    pub fn escalate(to: impl Into<String>, reason: impl Into<String>) -> Action {
        Action::Escalate {
            to: to.into(),
            reason: reason.into(),
        }
    }

    /// `complete` with an outcome.
    pub fn complete(outcome: Outcome, reason: impl Into<String>) -> Action {
        Action::Complete {
            outcome,
            reason: Some(reason.into()),
        }
    }
}

/// What a hook call returns.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Output {
    /// The actions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    /// Lines for the engine log.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<String>,
}
