//! Where conversations live: the [`ConversationStore`] trait and its backends.
//!
//! A store keeps each conversation's ordered event log, a deadline index ("wake this
//! conversation at t") and per-agent inboxes. Writes are [`Commit`]s: a batch of events,
//! the inbox deliveries they cause and the conversation's next wake-up, applied atomically
//! only if the conversation is still at the version the writer read (optimistic
//! concurrency). That is all SQLite (one transaction) and Redis (one Lua script) need to
//! give several engine nodes one consistent view.
//!
//! # Backends
//! - [`memory::MemoryStore`]: in-process, for tests and throwaway runs.

pub mod memory;

use std::sync::Arc;

use async_trait::async_trait;
use colloquy_protocol::event::ConversationEvent;
use colloquy_protocol::message::{AgentId, Message};

pub use memory::MemoryStore;

/// A batch of changes to one conversation, applied all or nothing.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The conversation.
    pub conversation_id: Arc<str>,
    /// The version (number of events) the writer read; 0 creates the conversation.
    pub expected_version: u64,
    /// New events, numbered from `expected_version + 1`.
    pub events: Vec<ConversationEvent>,
    /// Messages to append to receivers' inboxes.
    pub deliveries: Vec<Delivery>,
    /// When the conversation next needs the scheduler (a deadline, a retry, retention);
    /// `None` removes it from the deadline index.
    pub wake_at: Option<u64>,
}

/// One message for one agent's inbox.
#[derive(Clone, Debug)]
pub struct Delivery {
    /// The receiver.
    pub agent: AgentId,
    /// The conversation the message belongs to.
    pub conversation_id: Arc<str>,
    /// The message.
    pub message: Arc<Message>,
}

/// A message in an agent's inbox, numbered by a per-agent sequence.
#[derive(Clone, Debug, PartialEq)]
pub struct InboxEntry {
    /// Position in the agent's inbox, from 1; resume after it.
    pub seq: u64,
    /// The conversation it belongs to.
    pub conversation_id: Arc<str>,
    /// The message.
    pub message: Arc<Message>,
}

/// Why a store operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The conversation was created already (only from commits with `expected_version` 0).
    #[error("conversation `{0}` already exists")]
    Duplicate(Arc<str>),
    /// Someone else wrote first; reload and retry.
    #[error("conversation `{id}` is at version {actual}, not {expected}")]
    Conflict {
        /// The conversation.
        id: Arc<str>,
        /// The version the writer read.
        expected: u64,
        /// The version the store has.
        actual: u64,
    },
    /// The backend cannot be reached; the write did not happen.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The backend failed in an unexpected way.
    #[error("store failure: {0}")]
    Internal(String),
}

/// A durable home for conversations. See the module docs for the contract.
#[async_trait]
pub trait ConversationStore: Send + Sync + 'static {
    /// Applies a commit if the conversation is at `expected_version` (0: does not exist yet).
    async fn commit(&self, commit: Commit) -> Result<(), StoreError>;

    /// The conversation's whole event log, or `None` if it does not exist.
    async fn load(&self, id: &str) -> Result<Option<Vec<ConversationEvent>>, StoreError>;

    /// The events after `after_seq`, in order.
    async fn events_after(
        &self,
        id: &str,
        after_seq: u64,
    ) -> Result<Vec<ConversationEvent>, StoreError>;

    /// Takes up to `limit` conversations whose wake-up time is at or before `now` off the
    /// deadline index and returns their ids. Each entry is handed out once, also across
    /// engine nodes sharing the store.
    async fn claim_due(&self, now: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError>;

    /// Deletes a conversation, its log and its wake-up (retention).
    async fn remove(&self, id: &str) -> Result<(), StoreError>;

    /// Up to `limit` inbox entries of `agent` after `after_seq`, in order.
    async fn inbox(
        &self,
        agent: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError>;
}
