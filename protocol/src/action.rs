//! The action vocabulary shared by declarative template rules and wasm hooks.
//!
//! A rule's `then:` list and a hook's output are both lists of [`Action`]s, executed by the
//! engine's one action executor. In YAML and JSON an action is a single-key map named after
//! the action (`- reject: {reason: too big}`), or a bare name for `continue`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::conversation::Outcome;

/// One step a rule or a hook asks the engine to take.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(deny_unknown_fields)]
pub enum Action {
    /// Carry on; the same as returning no action.
    Continue,
    /// Refuse the message (or the start): the sender gets an error with this reason and the
    /// conversation is left unchanged.
    Reject(RejectAction),
    /// Merge these values into the conversation's `vars` (top-level keys replace).
    SetVars(Map<String, Value>),
    /// Merge the values of these CEL expressions into `vars` (declarative rules only).
    EvalVars(BTreeMap<String, String>),
    /// Send a message as the engine party ([`crate::message::ENGINE_PARTY`]).
    Send(SendAction),
    /// Change who receives the message being processed.
    Route(RouteAction),
    /// Set the conversation deadline to this many milliseconds from now.
    SetDeadline(DeadlineAction),
    /// Push the conversation deadline back by this many milliseconds.
    ExtendDeadline(ExtendAction),
    /// Run `on_timeout` again later; with a backoff factor and an attempt cap.
    Retry(RetryAction),
    /// End the conversation now with an outcome.
    Complete(CompleteAction),
    /// Hand the conversation to an agent outside the protocol, with a reason; it receives the
    /// current message (if any) and is added as an observer.
    Escalate(EscalateAction),
    /// Write a line to the engine log, tagged with the conversation id.
    Log(LogAction),
}

/// `reject`: refuse with a reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RejectAction {
    /// Why; shown to the sender.
    pub reason: String,
}

/// `send`: a message from the engine party.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SendAction {
    /// The performative.
    pub performative: String,
    /// Receivers (agent ids).
    pub to: Vec<String>,
    /// The content.
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub content: Value,
}

/// `route`: change the receivers of the message being processed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RouteAction {
    /// Agent ids.
    pub to: Vec<String>,
    /// `add` (default) keeps the original receivers; `replace` drops them.
    #[serde(default)]
    pub mode: RouteMode,
}

/// How [`RouteAction`] treats the original receivers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RouteMode {
    /// Keep them and add the new ones.
    #[default]
    Add,
    /// Deliver only to the new ones.
    Replace,
}

/// `set_deadline`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct DeadlineAction {
    /// Milliseconds from now.
    pub in_ms: u64,
}

/// `extend_deadline`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ExtendAction {
    /// Milliseconds to add to the current deadline (or to now, when there is none).
    pub by_ms: u64,
}

/// `retry`: run `on_timeout` again after a delay.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RetryAction {
    /// Delay before the first retry.
    pub after_ms: u64,
    /// Each further retry waits this many times longer (1.0 when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<f64>,
    /// No retry is scheduled once this many have run; rules see the count as `retry.attempt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
}

/// `complete`: end the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CompleteAction {
    /// The outcome.
    pub outcome: Outcome,
    /// Why, for the log and the event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `escalate`: hand over to an agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct EscalateAction {
    /// The agent to hand over to.
    pub to: String,
    /// Why.
    pub reason: String,
}

/// `log`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LogAction {
    /// `debug`, `info` (default), `warn` or `error`.
    #[serde(default)]
    pub level: LogLevel,
    /// The line.
    pub message: String,
}

/// Log levels a rule or hook may use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum LogLevel {
    Debug,
    #[default]
    Info,
    Warn,
    Error,
}
