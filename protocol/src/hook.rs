//! The hook ABI v1 payloads: the JSON event a wasm hook receives ([`HookInput`]) and the JSON
//! it answers with ([`HookOutput`]).
//!
//! These types are the payloads' single definition: the engine serializes [`HookInput`] and
//! parses [`HookOutput`], and [`hook_input_json_schema`] / [`hook_output_json_schema`] derive
//! the JSON Schemas published in `docs/`. The ABI around them (exports, memory, host imports)
//! is described in `docs/hook-abi.md` and `guest-sdk/wit/hooks.wit`.
//!
//! The input borrows from the engine's conversation ([`Cow`]), so building it costs no copy of
//! variables, parameters or content; deserializing it (in tests, in tools) yields owned data.

use std::borrow::Cow;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::action::Action;
use crate::conversation::Outcome;
use crate::template::HookEvent;

/// The ABI version this crate describes: what a module's `hooks_abi_version` export returns.
pub const HOOKS_ABI_VERSION: u32 = 1;

/// Every ABI version this engine speaks (named in the error for a module that speaks another).
pub const SUPPORTED_ABI_VERSIONS: &[u32] = &[HOOKS_ABI_VERSION];

/// The one import namespace of host functions (the WIT interface `colloquy:hooks/host`
/// lowered to a core module import, so `wasm-tools component new` can wrap the module).
pub const HOST_MODULE: &str = "colloquy:hooks/host@1.0.0";

/// The event a hook is called with.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct HookInput<'a> {
    /// Always [`HOOKS_ABI_VERSION`].
    pub abi_version: u32,
    /// Which lifecycle event: `on_start`, `on_message` or `on_timeout`.
    pub hook: HookEvent,
    /// The engine's clock (Unix milliseconds).
    pub now: u64,
    /// The conversation as it was before this event.
    pub conversation: HookConversation<'a>,
    /// For `on_message`: the message being handled, with its receivers before routing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<HookMessage<'a>>,
    /// For `on_timeout`: which deadline or retry came due.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HookTimeout<'a>>,
    /// The template's `spec.hooks.config`, as written (`null` when absent).
    #[serde(default)]
    pub config: Cow<'a, Value>,
}

/// A conversation as a hook sees it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct HookConversation<'a> {
    /// The conversation id.
    pub id: Cow<'a, str>,
    /// The template's name (unless the template's `hooks.reads` leaves out `template`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Cow<'a, str>>,
    /// The template revision the conversation is pinned to (as `template`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<Cow<'a, str>>,
    /// `active` or `completed`.
    pub status: HookStatus,
    /// The outcome, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The initiator (unless `hooks.reads` leaves out `parties`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiator: Option<Cow<'a, str>>,
    /// The participants, one thread each (as `initiator`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participants: Option<Vec<Cow<'a, str>>>,
    /// Each thread's state (unless `hooks.reads` leaves out `threads`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<Vec<HookThread<'a>>>,
    /// The variables hooks and declarative actions own (unless `hooks.reads` leaves out
    /// `vars`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vars: Option<Cow<'a, Map<String, Value>>>,
    /// The start parameters (unless `hooks.reads` leaves out `parameters`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Cow<'a, Value>>,
    /// The context snapshot (unless `hooks.reads` leaves out `context`; `null` reads as
    /// left out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Cow<'a, Value>>,
    /// The conversation deadline (Unix milliseconds), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
    /// Retries (`retry` actions) that have fired so far.
    pub retry_attempts: u32,
}

/// Whether a conversation still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookStatus {
    /// Still running.
    Active,
    /// Ended.
    Completed,
}

/// One participant thread.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct HookThread<'a> {
    /// The participant.
    pub participant: Cow<'a, str>,
    /// The thread's state name.
    pub state: Cow<'a, str>,
    /// The outcome, when the state is terminal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The thread's reply-by deadline (Unix milliseconds), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
}

/// The message an `on_message` hook handles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct HookMessage<'a> {
    /// The message id.
    pub id: Cow<'a, str>,
    /// The performative's name.
    pub performative: Cow<'a, str>,
    /// The sender.
    pub sender: Cow<'a, str>,
    /// Its receivers before routing rules and `route` actions.
    pub receivers: Vec<Cow<'a, str>>,
    /// The validated content.
    #[serde(default)]
    pub content: Cow<'a, Value>,
    /// The message it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<Cow<'a, str>>,
    /// Its reply-by (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_by: Option<u64>,
}

/// The deadline or retry an `on_timeout` hook handles.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct HookTimeout<'a> {
    /// `conversation` (the conversation deadline), `thread` (a participant's reply-by) or
    /// `retry` (a retry scheduled by a `retry` action).
    pub kind: Cow<'a, str>,
    /// The thread's participant, for `thread`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub participant: Option<Cow<'a, str>>,
    /// For `retry`: which retry this is (1 for the first); otherwise the retries so far.
    pub attempt: u32,
}

/// What a hook answers. `{}` and `{"actions": []}` both mean "carry on".
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookOutput {
    /// The actions, in order: the same vocabulary as a template's declarative rules
    /// (`eval_vars` excepted: it is CEL, for rules only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<Action>,
    /// Lines for the engine log (info level, tagged with the conversation and hook).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub log: Vec<String>,
}

/// The JSON Schema of [`HookInput`] (published as `docs/hook-input.schema.json`).
pub fn hook_input_json_schema() -> Value {
    let schema = schemars::schema_for!(HookInput<'static>);
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

/// The JSON Schema of [`HookOutput`] (published as `docs/hook-output.schema.json`).
pub fn hook_output_json_schema() -> Value {
    let schema = schemars::schema_for!(HookOutput);
    serde_json::to_value(schema).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_reads_actions_and_refuses_unknown_fields() {
        let output: HookOutput = serde_json::from_str(
            r#"{"actions":["continue",{"reject":{"reason":"too big"}}],"log":["hi"]}"#,
        )
        .expect("valid output");
        assert_eq!(output.actions.len(), 2);
        assert_eq!(output.log, ["hi"]);
        assert!(serde_json::from_str::<HookOutput>(r#"{"action":[]}"#).is_err());
        assert!(serde_json::from_str::<HookOutput>(r#"{"actions":[{"explode":{}}]}"#).is_err());
        assert_eq!(
            serde_json::from_str::<HookOutput>("{}").expect("empty"),
            HookOutput::default()
        );
    }

    #[test]
    fn schemas_name_the_payload_fields() {
        let input = hook_input_json_schema().to_string();
        for field in ["abi_version", "conversation", "retry_attempts", "timeout"] {
            assert!(input.contains(field), "input schema lacks {field}");
        }
        assert!(hook_output_json_schema().to_string().contains("actions"));
    }
}
