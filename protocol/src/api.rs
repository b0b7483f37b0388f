//! Bodies of the HTTP API under `/v1` that are not conversation views: listings, inbox
//! items and pages, health answers. Requests reuse [`crate::StartConversation`] and
//! [`crate::SendMessage`]; single conversations answer with [`crate::ConversationView`]
//! and messages with [`crate::SendReceipt`].

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::conversation::{CommitmentView, ConversationStatus, Outcome};
use crate::message::{AgentId, Message};

/// One line of `GET /v1/conversations`: a conversation without its log.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationSummary {
    /// The conversation id.
    pub id: Arc<str>,
    /// The template's name.
    pub template: Arc<str>,
    /// The template revision it is pinned to.
    pub revision: Arc<str>,
    /// Who started it.
    pub initiator: AgentId,
    /// The participants.
    pub participants: Vec<AgentId>,
    /// Whether it still runs.
    pub status: ConversationStatus,
    /// How it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<Outcome>,
    /// When it expires (Unix milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<u64>,
    /// The number of events in its log.
    pub version: u64,
}

/// A page of `GET /v1/conversations`, ordered by conversation id.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ConversationPage {
    /// The conversations on this page.
    pub conversations: Vec<ConversationSummary>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// `GET /v1/commitments`, a page at a time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommitmentList {
    /// The matching commitments on this page, ordered by conversation id, then id.
    pub commitments: Vec<CommitmentView>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A message in an agent's inbox. `seq` is the agent's own sequence: resume after it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InboxItem {
    /// Position in the agent's inbox, from 1 (the SSE event id).
    pub seq: u64,
    /// The conversation the message belongs to.
    pub conversation_id: Arc<str>,
    /// The conversation's template, when the conversation is still known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<Arc<str>>,
    /// The message.
    pub message: Message,
}

/// An answer of the long-poll inbox, `GET /v1/agents/{id}/inbox/poll`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InboxPage {
    /// Entries after the requested position, in order (empty when the wait ran out).
    pub items: Vec<InboxItem>,
    /// Pass as `after` next time: the last item's `seq`, or the requested `after` when empty.
    pub next_after: u64,
}

/// Body of `POST /v1/agents/{id}/inbox/ack`: the agent has handled its inbox up to and
/// including `through`, and those entries may go.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InboxAck {
    /// The `seq` of the last entry handled.
    pub through: u64,
}

/// Answer of `POST /v1/agents/{id}/inbox/ack`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InboxAcked {
    /// What was acknowledged (entries up to it are gone).
    pub through: u64,
    /// The `seq` of the newest entry the inbox has had: entries after `through` up to it are
    /// still there to read.
    pub head: u64,
}

/// `GET /readyz`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Readiness {
    /// `ready`.
    pub status: String,
    /// The templates new conversations can start, sorted.
    pub templates: Vec<String>,
}

/// How an agent of `GET /v1/agents` reaches the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    /// It calls the API with a bearer token (or names itself in open development mode).
    Token,
    /// A remote A2A agent the engine calls (it may have a token as well).
    A2a,
}

/// One agent of `GET /v1/agents`, with what this node knows of its inbox now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentInfo {
    /// The agent's id.
    pub id: AgentId,
    /// How it reaches the engine.
    pub kind: AgentKind,
    /// Whether messages to it are kept in an inbox (`inbox: false` in the agents file: not).
    pub inbox: bool,
    /// Whether its inbox is also pushed to a webhook.
    pub webhook: bool,
    /// Inbox streams and waiting long polls it has open on this node.
    pub inbox_streams: usize,
    /// The `seq` of the newest entry its inbox has had (0: none yet).
    pub inbox_head: u64,
    /// Entries kept in its inbox, not yet acknowledged (from the oldest kept to the head).
    pub unacknowledged: u64,
}

/// `GET /v1/agents`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentList {
    /// The agents the caller may see, by id: every agent of the agents file for the
    /// administrator, the caller alone for an agent.
    pub agents: Vec<AgentInfo>,
}
