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
//! - [`memory::MemoryStore`]: in-process, for tests and throwaway runs. It lives here, beside
//!   the trait, as its reference implementation: the core's own tests run on it, and it
//!   needs no I/O.
//! - `colloquy_store::SqliteStore`: the embedded default, one SQLite file, group commit.
//! - `colloquy_store::RedisStore`: several engine nodes sharing one Redis.
//!
//! `colloquy_store::open` turns a `--store` spec (`memory`, `sqlite:PATH`, `redis://…`)
//! into a store. `fixtures` (feature `fixtures`) is the contract every backend's tests run.
//!
//! # The revision archive
//! Beside the conversations a store keeps the revision archive ([`archive`]): each revision
//! of each template with the YAML and hook module it was compiled from, and the history of
//! which revision was active when. Its writes are durable when they return, like commits;
//! conversation retention and removal never touch it.
//!
//! # Deadlines across crashes and nodes
//! [`ConversationStore::claim_due`] hands each due entry to one caller. The durable stores
//! *lease* it rather than delete it: the entry moves to `now + CLAIM_LEASE_MS`, and the
//! claimer's next commit of that conversation replaces it with the real next wake-up. A
//! node that dies between claiming and committing therefore delays the deadline by the
//! lease instead of losing it; the version check makes sure a timer that did fire is not
//! fired again by the next claimer.

pub mod archive;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod keys;
pub mod memory;

use std::sync::Arc;

use async_trait::async_trait;
use colloquy_protocol::event::ConversationEvent;
use colloquy_protocol::message::{AgentId, Message};

pub use archive::{Activation, ArchivedRevision};
pub use keys::{AgentKey, KeySource};
pub use memory::MemoryStore;

/// How long a durable store keeps a claimed wake-up before handing it out again, in case
/// the node that claimed it died before committing. Long enough for any wake-up to commit
/// under load, short enough that a lost node delays a deadline by seconds, not minutes.
pub const CLAIM_LEASE_MS: u64 = 15_000;

/// A batch of changes to one conversation, applied all or nothing.
#[derive(Clone, Debug)]
pub struct Commit {
    /// The conversation.
    pub conversation_id: Arc<str>,
    /// Its template's name: stores ignore it; [`crate::metrics::MeteredStore`] labels its
    /// counts with it.
    pub template: Arc<str>,
    /// The version (number of events) the writer read; 0 creates the conversation.
    pub expected_version: u64,
    /// New events, numbered from `expected_version + 1`.
    pub events: Vec<ConversationEvent>,
    /// Messages to append to receivers' inboxes.
    pub deliveries: Vec<Delivery>,
    /// When the conversation next needs the scheduler (a deadline, a retry, retention);
    /// `None` removes it from the deadline index.
    pub wake_at: Option<u64>,
    /// The lease this node holds the conversation's partition by, when nodes share the
    /// store's partitions (`colloquy_cluster`): a store with a lease table refuses the
    /// commit ([`StoreError::Fenced`]) unless the lease is still the node's at that epoch,
    /// checked in the commit's own transaction. Stores without one (memory, SQLite, Redis)
    /// ignore it. Set by the engine ([`crate::engine::EngineConfig::fencer`]).
    pub fence: Option<colloquy_cluster::Fence>,
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

/// A commit's deliveries grouped by message, in order: each message once, with the
/// deliveries that carry it. A durable store writes a message sent to several agents once
/// and has their inbox entries name it, so a message to a thousand participants is not
/// stored (and encoded) a thousand times.
pub fn by_message(deliveries: &[Delivery]) -> Vec<(&Arc<Message>, &[Delivery])> {
    let mut groups: Vec<(&Arc<Message>, &[Delivery])> = Vec::new();
    let mut start = 0;
    for end in 1..=deliveries.len() {
        if end == deliveries.len()
            || !Arc::ptr_eq(&deliveries[end].message, &deliveries[start].message)
        {
            groups.push((&deliveries[start].message, &deliveries[start..end]));
            start = end;
        }
    }
    groups
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

/// A task a remote A2A agent is still running for a message it was sent (`colloquy_server::a2a`): the
/// bridge asks about it until it ends, and a `cancel` in its conversation becomes the
/// agent's `tasks/cancel`. Kept in the store, so an engine restarted on it, or the node that
/// takes over the agent's delivery, goes on following the task.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteTask {
    /// The conversation.
    pub conversation_id: Arc<str>,
    /// The message the agent runs the task for.
    pub message_id: Arc<str>,
    /// The agent's id for the task.
    pub task_id: String,
    /// The initiator's `cancel`, once the agent has been asked to cancel the task and said
    /// it is winding down: the task's end answers that message (`canceled` confirms it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel: Option<Arc<str>>,
    /// The task waits for the initiator's input (A2A `input-required`, asked in the
    /// conversation as a `query-ref`): it is not polled, and the initiator's next message
    /// in the conversation is sent into it instead of starting a new task.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub awaits_input: bool,
}

/// Where an A2A client wants a task's updates pushed (A2A's `TaskPushNotificationConfig`),
/// and how far they have been pushed. Kept in the store, so an engine restarted on it goes
/// on pushing from there.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PushConfig {
    /// The conversation (the task).
    pub conversation_id: Arc<str>,
    /// The config's id, unique within the task.
    pub id: String,
    /// Who set it: updates show the task as this agent sees it.
    pub owner: Arc<str>,
    /// Where updates are POSTed.
    pub url: String,
    /// Sent back in `X-A2A-Notification-Token`, for the receiver to check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The `Authorization` scheme (`Bearer`, …) and credentials to send.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authentication: Option<PushAuthentication>,
    /// How many of the conversation's messages the pushed updates cover (the cursor).
    #[serde(default)]
    pub delivered: u64,
}

/// A push config's `authentication`: `Authorization: {scheme} {credentials}`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PushAuthentication {
    /// `Bearer`, `Basic`, …
    pub scheme: String,
    /// The token or credentials.
    #[serde(default)]
    pub credentials: String,
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
    /// The node no longer holds the conversation's partition at the epoch it committed
    /// with (another node took it over): the write did not happen, and the node's copy of
    /// the conversation may be stale.
    #[error("store refused a fenced commit: {0}")]
    Fenced(colloquy_cluster::Fenced),
    /// The backend cannot be reached; the write did not happen.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The backend failed in an unexpected way.
    #[error("store failure: {0}")]
    Internal(String),
}

/// A commit another engine node made, heard through the store (Redis pub/sub). The engine
/// drops its cached copy of an older version and passes the news on to its subscribers.
#[derive(Clone, Debug, PartialEq)]
pub struct RemoteChange {
    /// The conversation.
    pub conversation_id: Arc<str>,
    /// Its version after the commit.
    pub version: u64,
    /// Agents whose inbox grew.
    pub agents: Vec<AgentId>,
}

/// The agents whose inboxes a node wants to hear of ([`ConversationStore::narrow_remote_changes`]).
pub type WantedAgents = Arc<dyn Fn() -> Vec<AgentId> + Send + Sync>;

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
    /// deadline index and returns their ids. Each entry is handed out to one caller, also
    /// across engine nodes sharing the store; durable stores lease it for
    /// [`CLAIM_LEASE_MS`] rather than delete it (see the module docs).
    async fn claim_due(&self, now: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError>;

    /// [`claim_due`](Self::claim_due) of the conversations in `partitions` only: with
    /// ownership, each node fires the deadlines of the partitions it holds (their commits
    /// pass its fence). A store that does not know conversations' partitions claims from
    /// all (the default).
    async fn claim_due_in(
        &self,
        now: u64,
        limit: usize,
        _partitions: &[colloquy_cluster::PartitionId],
    ) -> Result<Vec<Arc<str>>, StoreError> {
        self.claim_due(now, limit).await
    }

    /// Deletes a conversation, its log and its wake-up (retention). The revision archive
    /// stays as it is, also the revision the conversation started on.
    async fn remove(&self, id: &str) -> Result<(), StoreError>;

    /// Up to `limit` inbox entries of `agent` after `after_seq`, in order.
    async fn inbox(
        &self,
        agent: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError>;

    /// The agents whose inboxes hold entries, in no particular order (a store may also list
    /// agents whose entries are all acknowledged). For the sweep that drops entries nobody
    /// fetched within the inbox TTL ([`crate::Engine::expire_inboxes`]).
    async fn inbox_agents(&self) -> Result<Vec<AgentId>, StoreError>;

    /// The sequence number of `agent`'s newest inbox entry; 0 when it has none. Stays put
    /// when entries are acknowledged: the next entry is numbered after it.
    async fn inbox_head(&self, agent: &str) -> Result<u64, StoreError>;

    /// Deletes `agent`'s inbox entries numbered `through` or lower: the agent has handled
    /// them. A message shared with other agents goes once none of their entries names it.
    /// The sequence goes on from [`inbox_head`](Self::inbox_head) (also when every entry was
    /// acknowledged), so positions clients hold keep their meaning. The caller checks that
    /// `through` is at most the head.
    async fn acknowledge(&self, agent: &str, through: u64) -> Result<(), StoreError>;

    /// How far webhook delivery has got through `agent`'s inbox: the sequence number of the
    /// last entry it pushed (or gave up on), 0 before the first. Kept with the inbox, so an
    /// engine restarted on the store, or the node that takes over the lead of webhook
    /// delivery, goes on after it instead of pushing every unacknowledged entry again.
    async fn webhook_cursor(&self, agent: &str) -> Result<u64, StoreError>;

    /// Records that webhook delivery has got through `agent`'s inbox up to `seq`. The cursor
    /// never moves back: a lower `seq` (from a node that has just lost the lead) changes
    /// nothing.
    async fn advance_webhook_cursor(&self, agent: &str, seq: u64) -> Result<(), StoreError>;

    /// The tasks remote A2A agent `agent` is still running ([`RemoteTask`]), in no
    /// particular order.
    async fn remote_tasks(&self, agent: &str) -> Result<Vec<RemoteTask>, StoreError>;

    /// Records `task` of `agent`, replacing the record for the same conversation and
    /// message.
    async fn keep_remote_task(&self, agent: &str, task: &RemoteTask) -> Result<(), StoreError>;

    /// Forgets `agent`'s task for `message_id` of `conversation_id` (it ended, or there is
    /// nothing left to answer with it). Forgetting one that is not recorded is no error.
    async fn forget_remote_task(
        &self,
        agent: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError>;

    /// Every push config ([`PushConfig`]), in no particular order: few (one or two per task
    /// whose client asked), read when a task's configs are listed and when push delivery
    /// starts.
    async fn push_configs(&self) -> Result<Vec<PushConfig>, StoreError>;

    /// Records `config`, replacing the one with the same conversation and id.
    async fn keep_push_config(&self, config: &PushConfig) -> Result<(), StoreError>;

    /// Forgets the push config `id` of `conversation_id`; forgetting one that is not
    /// recorded is no error.
    async fn forget_push_config(&self, conversation_id: &str, id: &str) -> Result<(), StoreError>;

    /// Keeps `revision` in the archive (see [`archive`]). Idempotent: a (template, revision)
    /// already kept stays as first kept, whatever this one holds (its `first_seen` too).
    /// Durable before it returns, like a commit.
    async fn archive_revision(&self, revision: &ArchivedRevision) -> Result<(), StoreError>;

    /// Keeps a hook module's bytes under `sha256` (lowercase hex), which the caller computed:
    /// the store does not check it. Idempotent: a hash already kept keeps its bytes. Durable
    /// before it returns.
    async fn archive_module(&self, sha256: &str, bytes: &[u8]) -> Result<(), StoreError>;

    /// Every kept revision of `template` (of all templates when `None`), oldest `first_seen`
    /// first ([`ArchivedRevision::listing_order`]: then by template and revision).
    async fn archived_revisions(
        &self,
        template: Option<&str>,
    ) -> Result<Vec<ArchivedRevision>, StoreError>;

    /// The kept revision `revision` of `template`, or `None`.
    async fn archived_revision(
        &self,
        template: &str,
        revision: &str,
    ) -> Result<Option<ArchivedRevision>, StoreError>;

    /// The bytes kept under `sha256` by [`archive_module`](Self::archive_module), or `None`.
    async fn archived_module(&self, sha256: &str) -> Result<Option<Arc<[u8]>>, StoreError>;

    /// Appends `activation` to the history of activations, after every one recorded before.
    /// Durable before it returns.
    async fn record_activation(&self, activation: &Activation) -> Result<(), StoreError>;

    /// The history of `template` (of all templates when `None`), oldest first, in the order
    /// the activations were recorded; the newest `limit` of them when there are more.
    async fn activations(
        &self,
        template: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Activation>, StoreError>;

    /// Every key kept for `agent` ([`keys`]), revoked and lapsed ones too, in no
    /// particular order.
    async fn agent_keys(&self, agent: &str) -> Result<Vec<AgentKey>, StoreError>;

    /// Keeps `key`, replacing the one `agent` had under the same kid. The caller decides
    /// what may replace what (`colloquy_server`'s key registry: a kid keeps its key
    /// material). Durable before it returns.
    async fn keep_agent_key(&self, key: &AgentKey) -> Result<(), StoreError>;

    /// The ids of the conversations `agent` is a party of (initiator or participant), in id
    /// order, or `None` when the store keeps no such index. Durable stores keep one, because
    /// after a restart (or on another node) the engine has not loaded those conversations;
    /// the memory store does not, because the engine holding it has every conversation
    /// loaded.
    async fn conversations_of(&self, _agent: &str) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        Ok(None)
    }

    /// Up to `limit` ids of the stored conversations after `after` (all from the first when
    /// `None`), in id order, or `None` when the store keeps no such index: the memory store,
    /// whose engine has every conversation loaded. Durable stores answer it for an
    /// administrator's listing, which must also show the conversations this engine has not
    /// loaded (since a restart, or because another node runs them).
    async fn conversation_ids(
        &self,
        _after: Option<&str>,
        _limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        Ok(None)
    }

    /// [`conversation_ids`](Self::conversation_ids) the other way: up to `limit` ids before
    /// `before` (all from the last when `None`), newest first, for a listing of the newest
    /// conversations first. `None` where `conversation_ids` is.
    async fn conversation_ids_before(
        &self,
        _before: Option<&str>,
        _limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        Ok(None)
    }

    /// Takes or keeps, for `lease_ms`, the lead of `role`: work that one engine node of
    /// those sharing the store should do, not each of them (webhook delivery). True while
    /// this node leads; it must ask again before the lease runs out to keep it. A store only
    /// this process writes to always answers true.
    async fn lead(&self, _role: &str, _lease_ms: u64) -> Result<bool, StoreError> {
        Ok(true)
    }

    /// Narrows [`remote_changes`](Self::remote_changes) to the commits that put entries in
    /// an inbox of an agent `wanted` lists (called again at every read, so the list follows
    /// the streams opened and closed). For a node whose conversations are owned by
    /// partitions: it caches only the conversations it owns, which no other node commits
    /// to, so what it needs to hear of is inboxes, and only those someone on this node
    /// waits on. A store that cannot narrow ignores it and sends every notice.
    fn narrow_remote_changes(&self, _wanted: WantedAgents) {}

    /// Commits other engine nodes made, from now on, or `None` for a store only this
    /// process writes to.
    fn remote_changes(&self) -> Option<tokio::sync::broadcast::Receiver<RemoteChange>> {
        None
    }
}
