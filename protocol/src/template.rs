//! The template format, v1 (`apiVersion: colloquy.dev/v1`, `kind: ConversationTemplate`).
//!
//! These types are the format's single definition: the policy manager deserializes YAML into
//! them, and [`template_json_schema`] derives the JSON Schema editors complete against. The
//! reference with worked examples is `docs/templates.md`.
//!
//! Unknown fields are errors. The structs do not carry `#[serde(deny_unknown_fields)]`
//! because the compiler collects *every* unknown field in one pass (serde would stop at the
//! first); the schema still says `additionalProperties: false`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::action::Action;
use crate::conversation::{CommitmentState, Outcome};

/// The only `apiVersion` this version of Colloquy reads.
pub const API_VERSION_V1: &str = "colloquy.dev/v1";
/// The only `kind`.
pub const KIND: &str = "ConversationTemplate";
/// Default cap on a conversation's context snapshot, in bytes of compact JSON.
pub const DEFAULT_CONTEXT_MAX_BYTES: usize = 1024;
/// Default memory cap of a hook instance.
pub const DEFAULT_HOOK_MEMORY_BYTES: u64 = 16 * 1024 * 1024;
/// Default time budget of one hook call.
pub const DEFAULT_HOOK_TIMEOUT_MS: u64 = 10;

/// A conversation template.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Template {
    /// Format version: `colloquy.dev/v1`.
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    /// Always `ConversationTemplate`.
    pub kind: String,
    /// Name, version and description.
    pub metadata: Metadata,
    /// The protocol.
    pub spec: Spec,
}

/// Who the template is.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Metadata {
    /// Unique name conversations start it by (lowercase letters, digits, `-`).
    pub name: String,
    /// The author's version label, e.g. `1.2.0`.
    pub version: String,
    /// What the protocol is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// The protocol.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Spec {
    /// Who takes part.
    pub roles: Roles,
    /// What happens to a message the state machine does not allow.
    #[serde(default)]
    pub enforcement: Enforcement,
    /// Whether each message of a party must carry its sender's signature.
    #[serde(default)]
    pub signatures: Signatures,
    /// Performatives beyond the 22 FIPA acts that this protocol uses.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intents: Vec<String>,
    /// JSON Schema for the start parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<SchemaSpec>,
    /// Per performative: a JSON Schema for message content.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub messages: BTreeMap<String, SchemaSpec>,
    /// The per-participant thread state machine.
    pub thread: ThreadSpec,
    /// When the conversation as a whole is over, and with which outcome.
    #[serde(default)]
    pub outcome: OutcomeSpec,
    /// Default deadlines.
    #[serde(default)]
    pub deadlines: DeadlineSpec,
    /// Which messages create and move commitments.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub commitments: Vec<CommitmentSpec>,
    /// Rules over each message, evaluated after the state machine: route or reject.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routing: Vec<Rule>,
    /// A WebAssembly module run at lifecycle events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hooks: Option<HookSpec>,
    /// Declarative lifecycle rules (the same actions a hook returns).
    #[serde(default)]
    pub actions: ActionsSpec,
    /// The context snapshot cap.
    #[serde(default)]
    pub context: ContextSpec,
    /// Bounds on a conversation's size.
    #[serde(default)]
    pub limits: LimitsSpec,
}

/// The two roles of a FIPA interaction protocol.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Roles {
    /// The agent that starts the conversation.
    #[serde(default)]
    pub initiator: RoleSpec,
    /// The agents it talks to, one thread each.
    pub participants: ParticipantsSpec,
}

/// A role's description.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct RoleSpec {
    /// What this role does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// Most participants any conversation may have, whatever its template says: each one is a
/// thread, and a message to all of them is a delivery each, so without a cap one start or
/// one call for proposals could hold the engine for seconds.
pub const MAX_PARTICIPANTS: u32 = 1_000;

/// How many participants a conversation has.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ParticipantsSpec {
    /// At least this many (default 1).
    #[serde(default = "one")]
    pub min: u32,
    /// At most this many (when absent, [`MAX_PARTICIPANTS`], which is also the highest
    /// allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<u32>,
    /// What this role does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

fn one() -> u32 {
    1
}

/// A role in a transition or commitment rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// The conversation's initiator.
    Initiator,
    /// The thread's participant.
    Participant,
}

/// What happens to a message the state machine does not allow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Enforcement {
    /// Store it, record an `out_of_protocol` violation, log a warning; states do not move.
    #[default]
    Report,
    /// Refuse it (HTTP 409); nothing is stored.
    Enforce,
}

/// Whether parties sign their messages: a detached JWS (ES256 or EdDSA) by a key of the
/// sender's over the RFC 8785 form of what it sends (`docs/security.md`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Signatures {
    /// A signature is checked when a message carries one; none is asked for.
    #[default]
    Optional,
    /// Every message of a party carries its sender's signature, with a client-chosen
    /// conversation id and message id; one without is refused (422 `bad_signature`). A party
    /// that cannot sign (a remote A2A agent) cannot take part.
    Required,
}

/// A JSON Schema (draft 2020-12 unless `$schema` says otherwise).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct SchemaSpec {
    /// What the value means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The schema.
    pub schema: Value,
}

/// The per-participant thread state machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ThreadSpec {
    /// The state every thread starts in.
    pub initial: String,
    /// The terminal state a still-open thread moves to when the conversation deadline passes.
    pub on_expiry: String,
    /// The states, by name.
    pub states: BTreeMap<String, StateSpec>,
}

/// One state of the thread machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct StateSpec {
    /// What this state means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Moves out of this state, tried in order; the first that matches wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transitions: Vec<TransitionSpec>,
    /// Makes the state terminal, with this outcome. Terminal states have no transitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<Outcome>,
    /// The state to move to when the thread's reply-by passes here. A message that moves a
    /// thread here sets that reply-by from its own `reply_by` even when its transition has no
    /// `reply_by` (a proposal's `reply_by` is how long the offer stands). Without it, reply-by
    /// is advisory in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_deadline: Option<String>,
    /// What a message arriving in this (terminal) state after a deadline gets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<LateSpec>,
}

/// A move of the thread machine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TransitionSpec {
    /// The performative that triggers it.
    pub performative: String,
    /// Who must send it.
    pub from: Role,
    /// The state it leads to.
    pub to: String,
    /// A CEL guard over `message`, `content`, `parameters`, `vars`, `context`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Sets the thread's deadline on arrival in `to`. Without it, the deadline is the
    /// message's own `reply_by` when `to` has an `on_deadline`, and none otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply_by: Option<ReplyBySpec>,
}

/// Where a thread's deadline comes from after a transition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ReplyBySpec {
    /// Used when the message carries no `reply_by` (milliseconds from now).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_ms: Option<u64>,
    /// Refuse the message when it carries no `reply_by`.
    #[serde(default)]
    pub required: bool,
}

/// What a late message gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LateSpec {
    /// `flag` records a `late_message` violation; `reject` also answers the sender.
    pub action: LateAction,
    /// With `reject`: the performative of the automatic answer (e.g. `reject-proposal`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// With `reject`: the reason put in the answer's content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// See [`LateSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum LateAction {
    /// Record a violation only.
    Flag,
    /// Record a violation and answer with `reply`.
    Reject,
}

/// When the conversation is over, and how it ended.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct OutcomeSpec {
    /// When the conversation completes.
    #[serde(default)]
    pub complete_when: CompleteWhen,
    /// Tried in order once it completes; the first whose `when` holds gives the outcome.
    /// Without a match: `success` if any thread succeeded, else the first thread's outcome.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<OutcomeRule>,
}

/// See [`OutcomeSpec::complete_when`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompleteWhen {
    /// Every thread is terminal (FIPA 1:N protocols).
    #[default]
    AllThreadsTerminal,
    /// Some thread is terminal.
    AnyThreadTerminal,
}

/// A conversation outcome rule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct OutcomeRule {
    /// CEL over `threads` (list of `{participant, state, outcome}`), `vars`, `parameters`.
    /// Absent: always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// The outcome.
    pub outcome: Outcome,
}

/// Default deadlines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct DeadlineSpec {
    /// Conversation deadline, from start, when the caller gives none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_ms: Option<u64>,
}

/// A commitment rule: which message creates a commitment, who owes it, what moves it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CommitmentSpec {
    /// The rule's name, shown on every commitment it creates.
    pub name: String,
    /// What is promised.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Who owes it.
    pub debtor: Role,
    /// To whom.
    pub creditor: Role,
    /// The message that creates it (one per thread the message reaches).
    pub created_by: TriggerSpec,
    /// Its state on creation (default `pending`).
    #[serde(default = "pending")]
    pub initial: CommitmentState,
    /// Moves, tried in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub transitions: Vec<CommitmentTransitionSpec>,
    /// When an unfinished commitment becomes `violated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<CommitmentDeadlineSpec>,
}

fn pending() -> CommitmentState {
    CommitmentState::Pending
}

/// A performative sent by a role.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct TriggerSpec {
    /// The performative.
    pub performative: String,
    /// Who sends it.
    pub from: Role,
}

/// A commitment move.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CommitmentTransitionSpec {
    /// The performative that moves it.
    pub performative: String,
    /// Who must send it (either party when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Role>,
    /// The states it moves from (every non-terminal state when empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub states: Vec<CommitmentState>,
    /// Only when the commitment's thread is in one of these thread states before the message
    /// (any state when empty). Tells "failure" to a cancel apart from "failure" of the action.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thread_states: Vec<String>,
    /// The state it moves to.
    pub to: CommitmentState,
}

/// A commitment deadline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct CommitmentDeadlineSpec {
    /// Milliseconds after the commitment enters one of `armed_in`.
    pub after_ms: u64,
    /// The states in which the clock runs (default: `active`).
    #[serde(default = "active_only")]
    pub armed_in: Vec<CommitmentState>,
    /// Use the arming message's `reply_by` instead of `after_ms` when it has one.
    #[serde(default)]
    pub from_reply_by: bool,
}

fn active_only() -> Vec<CommitmentState> {
    vec![CommitmentState::Active]
}

/// A rule over a message or a lifecycle event: when its CEL condition holds, its actions run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Rule {
    /// A name for logs and diagnostics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Only for these performatives (every one when empty; message rules only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub performatives: Vec<String>,
    /// CEL condition; absent means always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// The actions, in order.
    pub then: Vec<Action>,
}

/// Declarative lifecycle rules.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ActionsSpec {
    /// When a conversation starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_start: Vec<Rule>,
    /// For every accepted message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_message: Vec<Rule>,
    /// When the conversation deadline passes, a thread times out, or a retry comes due.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub on_timeout: Vec<Rule>,
}

/// A WebAssembly hook module.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct HookSpec {
    /// Path of the `.wasm` file, relative to the template file.
    pub module: String,
    /// Which lifecycle events call it.
    pub events: Vec<HookEvent>,
    /// Resource limits.
    #[serde(default)]
    pub limits: HookLimits,
    /// What a failing hook (trap, timeout, out of memory, bad output) does to the message.
    #[serde(default)]
    pub failure_policy: FailurePolicy,
    /// Free-form configuration passed to every call (e.g. an amount limit).
    #[serde(default, skip_serializing_if = "Value::is_null")]
    pub config: Value,
    /// The optional parts of the conversation the hook reads, and so the only ones its
    /// event carries; absent, the event carries all of them. A smaller event is quicker to
    /// write and, above all, to parse inside the hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reads: Option<Vec<ConversationPart>>,
}

impl HookSpec {
    /// Whether the hook's event carries `part` (see [`HookSpec::reads`]).
    pub fn event_carries(&self, part: ConversationPart) -> bool {
        self.reads
            .as_ref()
            .is_none_or(|parts| parts.contains(&part))
    }
}

/// An optional part of the conversation in a hook's event (see [`HookSpec::reads`]). The
/// id, status, outcome, deadline and retry count are always there, as are the message,
/// the timeout and the config.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ConversationPart {
    /// `template` and `revision`.
    Template,
    /// `initiator` and `participants`.
    Parties,
    /// `threads`.
    Threads,
    /// `vars`.
    Vars,
    /// `parameters`.
    Parameters,
    /// `context`.
    Context,
}

/// A lifecycle event a hook can run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    /// The conversation starts.
    OnStart,
    /// A message is accepted.
    OnMessage,
    /// A deadline passes or a retry comes due.
    OnTimeout,
}

/// Hook resource limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct HookLimits {
    /// Linear memory cap, bytes.
    #[serde(default = "default_hook_memory")]
    pub memory_bytes: u64,
    /// Time budget per call, milliseconds.
    #[serde(default = "default_hook_timeout")]
    pub timeout_ms: u64,
}

impl Default for HookLimits {
    fn default() -> HookLimits {
        HookLimits {
            memory_bytes: DEFAULT_HOOK_MEMORY_BYTES,
            timeout_ms: DEFAULT_HOOK_TIMEOUT_MS,
        }
    }
}

fn default_hook_memory() -> u64 {
    DEFAULT_HOOK_MEMORY_BYTES
}

fn default_hook_timeout() -> u64 {
    DEFAULT_HOOK_TIMEOUT_MS
}

/// See [`HookSpec::failure_policy`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Refuse the message with an error naming the hook and the cause.
    #[default]
    FailClosed,
    /// Carry on and record a `hook_error` violation.
    FailOpen,
}

/// Bounds on a conversation's size.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct LimitsSpec {
    /// The most messages one conversation records (every message: the parties', late ones,
    /// those recorded with a violation, and the engine's own). The message that reaches it
    /// ends the conversation as its deadline would (open threads move to `on_expiry`); a
    /// late reply past it is refused (409 `message_limit`). Guards against agents that
    /// answer each other for ever. None when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_messages: Option<u32>,
}

/// The context snapshot cap.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct ContextSpec {
    /// Largest context, in bytes of compact JSON.
    #[serde(default = "default_context_max")]
    pub max_bytes: usize,
    /// What happens above it.
    #[serde(default)]
    pub on_overflow: ContextOverflow,
}

impl Default for ContextSpec {
    fn default() -> ContextSpec {
        ContextSpec {
            max_bytes: DEFAULT_CONTEXT_MAX_BYTES,
            on_overflow: ContextOverflow::default(),
        }
    }
}

fn default_context_max() -> usize {
    DEFAULT_CONTEXT_MAX_BYTES
}

/// See [`ContextSpec::on_overflow`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextOverflow {
    /// Refuse the start.
    #[default]
    Reject,
    /// Drop the largest top-level fields until it fits, listing them under `_dropped`.
    Compact,
}

/// The JSON Schema of the template format, for editors.
pub fn template_json_schema() -> Value {
    let schema = schemars::schema_for!(Template);
    serde_json::to_value(schema).unwrap_or(Value::Null)
}
