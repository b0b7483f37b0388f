//! Views of a conversation: its status, threads, commitments and violations.

use std::sync::Arc;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::ThreadTransition;
use crate::message::{AgentId, Message};

/// How a thread or a conversation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The participant did what was asked (FIPA inform-done / inform-result).
    Success,
    /// The participant tried and failed (FIPA failure).
    Failure,
    /// The participant declined (FIPA refuse).
    Refused,
    /// The initiator turned a proposal down (FIPA reject-proposal), or let it lapse
    /// unanswered past its reply-by.
    Rejected,
    /// The initiator cancelled and the participant confirmed.
    Cancelled,
    /// A deadline passed while an answer was still owed.
    Timeout,
    /// The participant never answered a call before its reply-by (contract-net silence).
    NoReply,
    /// One side did not understand the other (FIPA not-understood).
    NotUnderstood,
    /// Handed to an agent outside the protocol (a hook's or rule's `escalate`).
    Escalated,
}

impl Outcome {
    /// The outcome's name as written in templates and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::Failure => "failure",
            Outcome::Refused => "refused",
            Outcome::Rejected => "rejected",
            Outcome::Cancelled => "cancelled",
            Outcome::Timeout => "timeout",
            Outcome::NoReply => "no_reply",
            Outcome::NotUnderstood => "not_understood",
            Outcome::Escalated => "escalated",
        }
    }
}

/// Whether a conversation still runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConversationStatus {
    /// Messages are accepted.
    Active,
    /// Ended with an outcome; later messages are absorbed.
    Completed,
}

/// The life of a commitment (an observable promise one party owes another).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CommitmentState {
    /// Offered or asked for, not yet binding (a request before agree, a proposal before accept).
    Pending,
    /// Binding: the debtor owes it.
    Active,
    /// Done.
    Fulfilled,
    /// Not done: failed, or its deadline passed.
    Violated,
    /// Withdrawn by the debtor.
    Cancelled,
    /// Waived by the creditor (reject-proposal, cancel, or an explicit release).
    Released,
}

impl CommitmentState {
    /// Terminal states absorb every later move.
    pub fn is_terminal(self) -> bool {
        !matches!(self, CommitmentState::Pending | CommitmentState::Active)
    }

    /// The state's name as written in templates and on the wire.
    pub fn name(self) -> &'static str {
        match self {
            CommitmentState::Pending => "pending",
            CommitmentState::Active => "active",
            CommitmentState::Fulfilled => "fulfilled",
            CommitmentState::Violated => "violated",
            CommitmentState::Cancelled => "cancelled",
            CommitmentState::Released => "released",
        }
    }
}

/// One initiator ↔ participant thread of a conversation (FIPA 1:N protocols run one per
/// participant).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadView {
    /// The participant at the other end from the initiator.
    pub participant: AgentId,
    /// The thread's state in the template's state machine.
    pub state: Arc<str>,
    /// Set once the thread reached a terminal state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// When the thread's current reply-by passes (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
}

/// A commitment as both of its parties see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommitmentView {
    /// Unique id: `<conversation id>/<n>`.
    pub id: Arc<str>,
    /// The conversation it belongs to.
    pub conversation_id: Arc<str>,
    /// The template rule that created it.
    pub name: Arc<str>,
    /// Who owes it.
    pub debtor: AgentId,
    /// To whom.
    pub creditor: AgentId,
    /// Where it stands.
    pub state: CommitmentState,
    /// When an unfinished commitment becomes violated (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
    /// The message that created it.
    pub created_by: Arc<str>,
}

/// What kind of rule a message or a party broke.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// A performative the protocol does not allow here, by this sender (recorded under
    /// `enforcement: report`, refused under `enforce`).
    OutOfProtocol,
    /// A reply that arrived after its thread's deadline had passed.
    LateMessage,
    /// A message to a thread or conversation that had already ended.
    AfterEnd,
    /// A commitment that was not kept.
    CommitmentViolated,
    /// A hook failed and the template's policy is `fail_open`.
    HookError,
}

/// A recorded breach of the protocol.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Violation {
    /// What was broken.
    pub kind: ViolationKind,
    /// The agent responsible, when one is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentId>,
    /// The offending message, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_id: Option<Arc<str>>,
    /// A sentence for humans.
    pub detail: String,
    /// When it was recorded (Unix milliseconds).
    pub at: u64,
}

/// A conversation as its parties see it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationView {
    /// The conversation id.
    pub id: Arc<str>,
    /// The template's name.
    pub template: Arc<str>,
    /// The template revision the conversation is pinned to.
    pub revision: Arc<str>,
    /// Who started it.
    pub initiator: AgentId,
    /// The participants, one thread each.
    pub participants: Vec<AgentId>,
    /// Whether it still runs.
    pub status: ConversationStatus,
    /// How it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// One per participant.
    pub threads: Vec<ThreadView>,
    /// Variables owned by hooks and declarative actions.
    pub vars: Value,
    /// The validated start parameters.
    pub parameters: Value,
    /// The (possibly compacted) context snapshot.
    pub context: Value,
    /// When the conversation expires (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
    /// Every accepted message, in order.
    pub messages: Vec<Message>,
    /// Every commitment, in creation order.
    pub commitments: Vec<CommitmentView>,
    /// Every recorded violation, in order.
    pub violations: Vec<Violation>,
    /// The number of events in the conversation's log.
    pub version: u64,
}

/// What the engine did with a sent message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SendReceipt {
    /// The message id (assigned when the sender gave none).
    pub message_id: Arc<str>,
    /// True when this id had been accepted before: nothing was added, and `transitions` and
    /// `violation` are those of the first time.
    pub duplicate: bool,
    /// Who the message was delivered to, after routing.
    pub receivers: Vec<AgentId>,
    /// The thread moves it caused.
    pub transitions: Vec<ThreadTransition>,
    /// The violation it was recorded with (`enforcement: report`, late messages).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub violation: Option<Violation>,
    /// The conversation's status now.
    pub status: ConversationStatus,
    /// Its outcome, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// The threads the message went on (the sender's own, and its receivers'), now. Not every
    /// thread: a reply to one of a thousand bidders carries one.
    pub threads: Vec<ThreadView>,
}

/// A move a party of a conversation may make now: a performative its protocol state lets it
/// send, and to whom. `GET /v1/conversations/{id}/moves` answers these, so an agent (or a
/// model behind the MCP surface) knows what it may say before it says it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpenMove {
    /// The performative.
    pub performative: String,
    /// Who it may go to: the other party of each thread whose state allows it (for the
    /// initiator, the participants of those threads; for a participant, the initiator).
    pub to: Vec<AgentId>,
    /// The CEL guard (`when`) the message must satisfy, as written in the template: the move
    /// is open only to messages it holds for (their content, the conversation's `vars`, …),
    /// which cannot be known before the message is written. `None`: unguarded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
}
