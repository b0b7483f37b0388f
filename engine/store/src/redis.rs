//! The Redis store: several engine nodes share conversations, deadlines and inboxes.
//!
//! Every write is one Lua script, so Redis applies it atomically and in one order for all
//! nodes: the commit script checks the conversation's version, appends the events to the
//! conversation's stream, moves its wake-up in the deadline sorted set, appends inbox
//! entries (numbered by a per-agent counter) and publishes a change notice, or does
//! nothing at all. Deadlines are claimed by a script that leases the due members of the
//! sorted set (see [`CLAIM_LEASE_MS`]), so each is handed to one node.
//!
//! # Key layout (`P` is the prefix, `colloquy` by default)
//! | key | type | holds |
//! |---|---|---|
//! | `P:conv:{id}` | hash | `version`, `parties` (JSON list, for removal) |
//! | `P:log:{id}` | stream | events, an entry per commit: id `{last seq}-0`, field `b` = JSON array (older logs: an entry per event, field `e`) |
//! | `P:wake` | sorted set | conversation ids scored by next wake-up (ms) |
//! | `P:inbox-seq` | hash | agent → last inbox sequence number |
//! | `P:inbox:{agent}` | stream | entry id `{seq}-0`, fields `c` = conversation, and `m` = message JSON, or `r` = the key of a message sent to several agents |
//! | `P:msg:{conversation}:{message}` | string | the JSON of a message sent to several agents, stored once |
//! | `P:msg-refs` | hash | shared message key → inbox entries still naming it; the key goes with the last |
//! | `P:parties:{agent}` | set | ids of the conversations the agent is a party of |
//! | `P:changes` | pub/sub channel | one JSON notice per commit that added events |
//! | `P:lead:{role}` | string | the node leading `role` (webhook delivery), with the lease as its expiry |
//! | `P:webhook-cursor` | hash | agent → sequence number of the last inbox entry webhook delivery pushed |
//! | `P:remote-tasks:{agent}` | hash | `["{conversation}","{message}"]` (JSON) → the JSON of the task the remote A2A agent runs for that message |
//! | `P:ids` | sorted set | every conversation id, all scored 0 so they sort by id: an administrator's listing pages through it |
//! | `P:ids-built` | string | set once `P:ids` also holds the conversations created before it existed |
//! | `P:revisions:{template}` | hash | revision → the JSON of the archived revision (`redis/archive.rs`) |
//! | `P:revision-templates` | set | the templates with archived revisions |
//! | `P:module:{sha256}` | string | an archived hook module's bytes |
//! | `P:activations` | list | every activation's JSON, in the order recorded |
//! | `P:activations:{template}` | list | the template's activations, in the order recorded |
//!
//! A message is acknowledged when the script returned. For that to mean "durable", run
//! Redis with `appendonly yes` and `appendfsync always` (the tests do); with the default
//! snapshotting, a Redis crash loses the last seconds.
//!
//! Standalone Redis only: the scripts touch keys they compute (party sets on removal), which
//! Redis Cluster forbids.

use std::sync::Arc;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::{
    AsyncCommands as _, Client, Cmd, Pipeline, RedisError, RedisFuture, RedisResult, RetryMethod,
    Script, Value,
};
use async_trait::async_trait;
use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::message::{AgentId, Message};
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio::sync::{broadcast, oneshot};
use tokio::task::JoinHandle;

use colloquy_core::store::{
    Activation, AgentKey, ArchivedRevision, CLAIM_LEASE_MS, Commit, ConversationStore, InboxEntry,
    PushConfig, RemoteChange, RemoteTask, StoreError,
};

mod archive;
mod scripts;

use scripts::{
    ACK_SCRIPT, CLAIM_SCRIPT, COMMIT_SCRIPT, LEAD_SCRIPT, REMOVE_SCRIPT, WEBHOOK_CURSOR_SCRIPT,
};

/// Key prefix unless one is given: lets several deployments (or tests) share a Redis.
pub const DEFAULT_PREFIX: &str = "colloquy";
/// How long a command may wait for its answer. A request during an outage fails after this
/// (the API answers 503 with `Retry-After`) instead of hanging.
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one command may take in all, reconnecting included. During an outage the
/// connection manager reconnects with backoff (six tries, about 5 s) and every command waits
/// for that attempt before its own response timeout starts, so without this bound a command
/// took 7 s and a message (two commands) 15 s to fail; with it a request gets its 503 within
/// this, and an outage shorter than this is ridden out.
pub const COMMAND_DEADLINE: Duration = RESPONSE_TIMEOUT;
/// How long connecting may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest pause between reconnection attempts of the change-notice subscriber.
pub const MAX_RESUBSCRIBE_DELAY: Duration = Duration::from_secs(2);
/// Remote change notices buffered before a slow engine lags (and its streams re-read).
pub const CHANGE_BUFFER: usize = 4096;

/// Inbox entries one run of [`scripts::ACK_SCRIPT`] deletes at most.
const ACK_BATCH: usize = 1000;

/// The change notice published with each commit.
#[derive(Serialize, Deserialize)]
struct WireChange<'a> {
    /// The publishing node, so it can skip its own notices.
    #[serde(borrow)]
    node: &'a str,
    conversation: Arc<str>,
    version: u64,
    agents: Vec<AgentId>,
}

struct Keys {
    prefix: String,
}

impl Keys {
    fn conversation(&self, id: &str) -> String {
        format!("{}:conv:{id}", self.prefix)
    }
    fn log(&self, id: &str) -> String {
        format!("{}:log:{id}", self.prefix)
    }
    fn wake(&self) -> String {
        format!("{}:wake", self.prefix)
    }
    fn inbox_heads(&self) -> String {
        format!("{}:inbox-seq", self.prefix)
    }
    fn inbox(&self, agent: &str) -> String {
        format!("{}:inbox:{agent}", self.prefix)
    }
    fn message(&self, conversation: &str, message: &str) -> String {
        format!("{}:msg:{conversation}:{message}", self.prefix)
    }
    fn lead(&self, role: &str) -> String {
        format!("{}:lead:{role}", self.prefix)
    }
    fn webhook_cursors(&self) -> String {
        format!("{}:webhook-cursor", self.prefix)
    }
    fn remote_tasks(&self, agent: &str) -> String {
        format!("{}:remote-tasks:{agent}", self.prefix)
    }
    fn push_configs(&self) -> String {
        format!("{}:push-configs", self.prefix)
    }
    fn agent_keys(&self, agent: &str) -> String {
        format!("{}:agent-keys:{agent}", self.prefix)
    }
    /// The field of a record named by a conversation and an id (a remote task by its
    /// message, a push config by its id) in its hash: unambiguous whatever the ids hold.
    fn pair_field(conversation_id: &str, message_id: &str) -> String {
        serde_json::json!([conversation_id, message_id]).to_string()
    }
    fn ids(&self) -> String {
        format!("{}:ids", self.prefix)
    }
    fn ids_built(&self) -> String {
        format!("{}:ids-built", self.prefix)
    }
    fn message_refs(&self) -> String {
        format!("{}:msg-refs", self.prefix)
    }
    fn parties_prefix(&self) -> String {
        format!("{}:parties:", self.prefix)
    }
    fn parties(&self, agent: &str) -> String {
        format!("{}:parties:{agent}", self.prefix)
    }
    fn changes(&self) -> String {
        format!("{}:changes", self.prefix)
    }
}

/// The connection manager with every command bounded by [`COMMAND_DEADLINE`] in wall time.
#[derive(Clone)]
struct BoundedConnection(ConnectionManager);

impl BoundedConnection {
    async fn bounded<T>(operation: impl Future<Output = RedisResult<T>>) -> RedisResult<T> {
        match tokio::time::timeout(COMMAND_DEADLINE, operation).await {
            Ok(result) => result,
            // An I/O error, so `store_error` makes it `Unavailable` (a 503).
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from Redis within {COMMAND_DEADLINE:?}"),
            ))),
        }
    }
}

impl ConnectionLike for BoundedConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(BoundedConnection::bounded(self.0.req_packed_command(cmd)))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(BoundedConnection::bounded(
            self.0.req_packed_commands(pipeline, offset, count),
        ))
    }

    fn get_db(&self) -> i64 {
        self.0.get_db()
    }
}

/// A [`ConversationStore`] in Redis, shared by every engine node pointed at it.
pub struct RedisStore {
    connection: BoundedConnection,
    keys: Keys,
    node: Arc<str>,
    changes: broadcast::Sender<RemoteChange>,
    subscriber: JoinHandle<()>,
    commit_script: Script,
    claim_script: Script,
    remove_script: Script,
    ack_script: Script,
    lead_script: Script,
    webhook_cursor_script: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("prefix", &self.keys.prefix)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Drop for RedisStore {
    fn drop(&mut self) {
        self.subscriber.abort();
    }
}

impl RedisStore {
    /// The records kept as JSON in hash `key` (remote tasks, push configs), in no order;
    /// `what` names one in an error.
    async fn hash_records<T: serde::de::DeserializeOwned>(
        &self,
        key: String,
        what: &str,
    ) -> Result<Vec<T>, StoreError> {
        let mut connection = self.connection.clone();
        let bodies: Vec<String> = connection.hvals(key).await.map_err(store_error)?;
        bodies
            .iter()
            .map(|body| {
                serde_json::from_str(body)
                    .map_err(|error| StoreError::Internal(format!("unreadable {what}: {error}")))
            })
            .collect()
    }

    /// Keeps `record` as JSON at `field` of hash `key`, replacing what was there.
    async fn keep_hash_record<T: serde::Serialize>(
        &self,
        key: String,
        field: String,
        record: &T,
    ) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let body = serde_json::to_string(record)
            .map_err(|error| StoreError::Internal(format!("cannot encode a record: {error}")))?;
        let _: i64 = connection
            .hset(key, field, body)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    /// Forgets `field` of hash `key` (no error when it is not there).
    async fn forget_hash_record(&self, key: String, field: String) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let _: i64 = connection.hdel(key, field).await.map_err(store_error)?;
        Ok(())
    }

    /// Connects to the Redis at `url` with the [`DEFAULT_PREFIX`].
    pub async fn connect(url: &str) -> Result<RedisStore, StoreError> {
        RedisStore::connect_with_prefix(url, DEFAULT_PREFIX).await
    }

    /// Connects with every key under `prefix:`. Fails when Redis cannot be reached now;
    /// later outages make single operations fail with [`StoreError::Unavailable`] while
    /// the connection is re-established in the background.
    pub async fn connect_with_prefix(url: &str, prefix: &str) -> Result<RedisStore, StoreError> {
        let client = Client::open(url)
            .map_err(|error| StoreError::Unavailable(format!("bad Redis URL `{url}`: {error}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_max_delay(MAX_RESUBSCRIBE_DELAY);
        let connection = client
            .get_connection_manager_with_config(config)
            .await
            .map_err(|error| {
                StoreError::Unavailable(format!("cannot reach Redis at {url}: {error}"))
            })?;
        let keys = Keys {
            prefix: prefix.to_owned(),
        };
        let node: Arc<str> = Arc::from(uuid::Uuid::now_v7().to_string());
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let (subscribed, first_subscription) = oneshot::channel();
        let subscriber = tokio::spawn(follow_changes(
            client,
            keys.changes(),
            node.clone(),
            changes.clone(),
            subscribed,
        ));
        // A store that returned before its subscription was in place would miss the notices
        // of other nodes' commits in between: an inbox stream opened then would not wake up.
        if !matches!(
            tokio::time::timeout(CONNECT_TIMEOUT, first_subscription).await,
            Ok(Ok(()))
        ) {
            subscriber.abort();
            return Err(StoreError::Unavailable(format!(
                "cannot subscribe to change notices at {url} within {CONNECT_TIMEOUT:?}"
            )));
        }
        let store = RedisStore {
            connection: BoundedConnection(connection),
            keys,
            node,
            changes,
            subscriber,
            commit_script: Script::new(COMMIT_SCRIPT),
            claim_script: Script::new(CLAIM_SCRIPT),
            remove_script: Script::new(REMOVE_SCRIPT),
            ack_script: Script::new(ACK_SCRIPT),
            lead_script: Script::new(LEAD_SCRIPT),
            webhook_cursor_script: Script::new(WEBHOOK_CURSOR_SCRIPT),
        };
        store.build_id_index().await?;
        Ok(store)
    }

    /// Adds to the id index (`P:ids`) the conversations an engine created before the index
    /// existed, once per database: the commit script indexes every conversation since.
    async fn build_id_index(&self) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let built: bool = connection
            .exists(self.keys.ids_built())
            .await
            .map_err(store_error)?;
        if built {
            return Ok(());
        }
        let prefix = format!("{}:conv:", self.keys.prefix);
        let pattern = format!("{}*", glob_escape(&prefix));
        let mut cursor: u64 = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = ::redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut connection)
                .await
                .map_err(store_error)?;
            let ids: Vec<(u8, &str)> = keys
                .iter()
                .filter_map(|key| key.strip_prefix(&prefix))
                .map(|id| (0, id))
                .collect();
            if !ids.is_empty() {
                let () = connection
                    .zadd_multiple(self.keys.ids(), &ids)
                    .await
                    .map_err(store_error)?;
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        let () = connection
            .set(self.keys.ids_built(), 1)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    /// This node's id in change notices.
    pub fn node(&self) -> &str {
        &self.node
    }
}

/// `text` with Redis glob characters escaped, for a `SCAN MATCH` pattern.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

/// Listens to the change channel and passes other nodes' notices on; reconnects (with a
/// growing pause) whenever the subscription breaks, until the store is dropped. `subscribed`
/// is told once the first subscription is in place.
async fn follow_changes(
    client: Client,
    channel: String,
    node: Arc<str>,
    changes: broadcast::Sender<RemoteChange>,
    subscribed: oneshot::Sender<()>,
) {
    let mut subscribed = Some(subscribed);
    let mut delay = Duration::from_millis(50);
    loop {
        match client.get_async_pubsub().await {
            Ok(mut pubsub) => match pubsub.subscribe(&channel).await {
                Ok(()) => {
                    delay = Duration::from_millis(50);
                    if let Some(subscribed) = subscribed.take() {
                        let _ = subscribed.send(());
                    }
                    let mut messages = pubsub.on_message();
                    while let Some(message) = messages.next().await {
                        let Ok(payload) = message.get_payload::<String>() else {
                            continue;
                        };
                        match serde_json::from_str::<WireChange<'_>>(&payload) {
                            Ok(change) if change.node != &*node => {
                                // No receiver: no engine follows this store (yet).
                                let _ = changes.send(RemoteChange {
                                    conversation_id: change.conversation,
                                    version: change.version,
                                    agents: change.agents,
                                });
                            }
                            Ok(_) => {}
                            Err(error) => {
                                tracing::warn!(%error, "unreadable change notice on {channel}")
                            }
                        }
                    }
                    tracing::warn!("Redis change subscription ended; resubscribing");
                }
                Err(error) => tracing::warn!(%error, "cannot subscribe to Redis changes"),
            },
            Err(error) => tracing::debug!(%error, "cannot reach Redis for change notices"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RESUBSCRIBE_DELAY);
    }
}

/// Connection trouble (the write may or may not have happened: callers retry with the same
/// ids) is `Unavailable`; anything Redis would answer the same way again is `Internal`.
fn store_error(error: RedisError) -> StoreError {
    match error.retry_method() {
        RetryMethod::NoRetry => StoreError::Internal(format!("Redis: {error}")),
        _ => StoreError::Unavailable(format!("Redis: {error}")),
    }
}

fn encode<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::Internal(error.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text)
        .map_err(|error| StoreError::Internal(format!("corrupt Redis entry: {error}")))
}

/// One stream entry as XRANGE returns it: id and field/value pairs.
type StreamEntry = (String, Vec<(String, String)>);

fn field<'a>(entry: &'a StreamEntry, name: &str) -> Result<&'a str, StoreError> {
    optional_field(entry, name)
        .ok_or_else(|| StoreError::Internal(format!("stream entry {} has no `{name}`", entry.0)))
}

fn optional_field<'a>(entry: &'a StreamEntry, name: &str) -> Option<&'a str> {
    entry
        .1
        .iter()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.as_str())
}

fn entry_seq(entry: &StreamEntry) -> Result<u64, StoreError> {
    entry
        .0
        .split_once('-')
        .and_then(|(seq, _)| seq.parse().ok())
        .ok_or_else(|| StoreError::Internal(format!("unexpected stream id {}", entry.0)))
}

/// The events of log entries after `after_seq`: a commit's entry (field `b`, its id the
/// commit's last seq) holds all its events, an entry of an older log (field `e`) one.
fn events_from(
    entries: &[StreamEntry],
    after_seq: u64,
) -> Result<Vec<ConversationEvent>, StoreError> {
    let mut events = Vec::new();
    for entry in entries {
        if let Some(batch) = optional_field(entry, "b") {
            let batch: Vec<ConversationEvent> = decode(batch)?;
            events.extend(batch.into_iter().filter(|event| event.seq > after_seq));
        } else {
            events.push(decode(field(entry, "e")?)?);
        }
    }
    Ok(events)
}

#[async_trait]
impl ConversationStore for RedisStore {
    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let Commit {
            conversation_id: id,
            expected_version,
            events,
            deliveries,
            wake_at,
            ..
        } = commit;
        let new_version = expected_version + events.len() as u64;
        let parties: Vec<AgentId> = match events.first().map(|event| &event.kind) {
            Some(EventKind::Started(started)) if expected_version == 0 => {
                let mut parties = vec![started.initiator.clone()];
                parties.extend(started.participants.iter().cloned());
                parties.sort_unstable();
                parties.dedup();
                parties
            }
            _ => Vec::new(),
        };
        let notice = if events.is_empty() {
            String::new()
        } else {
            let mut agents: Vec<AgentId> = Vec::new();
            for delivery in &deliveries {
                if !agents.contains(&delivery.agent) {
                    agents.push(delivery.agent.clone());
                }
            }
            encode(&WireChange {
                node: &self.node,
                conversation: id.clone(),
                version: new_version,
                agents,
            })?
        };
        // Each message encoded once; one for several agents is stored once (see the script).
        let mut shared: Vec<(String, String, usize)> = Vec::new();
        let mut inline: Vec<(String, usize)> = Vec::with_capacity(deliveries.len());
        for (message, group) in colloquy_core::store::by_message(&deliveries) {
            let body = encode(&**message)?;
            if group.len() > 1 {
                shared.push((self.keys.message(&id, &message.id), body, group.len()));
                inline.extend(group.iter().map(|_| (String::new(), shared.len())));
            } else {
                inline.push((body, 0));
            }
        }
        let mut invocation = self.commit_script.prepare_invoke();
        invocation
            .key(self.keys.conversation(&id))
            .key(self.keys.log(&id))
            .key(self.keys.wake())
            .key(self.keys.inbox_heads());
        for delivery in &deliveries {
            invocation.key(self.keys.inbox(&delivery.agent));
        }
        for party in &parties {
            invocation.key(self.keys.parties(party));
        }
        for (key, _, _) in &shared {
            invocation.key(key);
        }
        invocation
            .key(self.keys.message_refs())
            .key(self.keys.ids());
        invocation
            .arg(&*id)
            .arg(expected_version)
            .arg(new_version)
            .arg(wake_at.map(|at| at.to_string()).unwrap_or_default())
            .arg(self.keys.changes())
            .arg(notice)
            .arg(events.len())
            .arg(deliveries.len())
            .arg(parties.len())
            .arg(encode(&parties)?);
        invocation.arg(encode(&events)?).arg(shared.len());
        for (_, body, receivers) in &shared {
            invocation.arg(body).arg(*receivers);
        }
        for (delivery, (body, shared)) in deliveries.iter().zip(&inline) {
            invocation.arg(&*delivery.agent).arg(body).arg(*shared);
        }
        let mut connection = self.connection.clone();
        let answer: Vec<u64> = invocation
            .invoke_async(&mut connection)
            .await
            .map_err(store_error)?;
        match answer.as_slice() {
            [1] => Ok(()),
            [2, _] => Err(StoreError::Duplicate(id)),
            [3, actual] => Err(StoreError::Conflict {
                id,
                expected: expected_version,
                actual: *actual,
            }),
            other => Err(StoreError::Internal(format!(
                "unexpected commit answer {other:?}"
            ))),
        }
    }

    async fn load(&self, id: &str) -> Result<Option<Vec<ConversationEvent>>, StoreError> {
        let mut connection = self.connection.clone();
        let (version, entries): (Option<u64>, Vec<StreamEntry>) = ::redis::pipe()
            .atomic()
            .hget(self.keys.conversation(id), "version")
            .xrange_all(self.keys.log(id))
            .query_async(&mut connection)
            .await
            .map_err(store_error)?;
        match version {
            None => Ok(None),
            Some(_) => events_from(&entries, 0).map(Some),
        }
    }

    async fn events_after(
        &self,
        id: &str,
        after_seq: u64,
    ) -> Result<Vec<ConversationEvent>, StoreError> {
        let mut connection = self.connection.clone();
        let entries: Vec<StreamEntry> = connection
            // Entries are keyed by their last seq: the one holding `after_seq + 1` is the
            // first whose id is at least that.
            .xrange(
                self.keys.log(id),
                format!("{}-0", after_seq.saturating_add(1)),
                "+",
            )
            .await
            .map_err(store_error)?;
        events_from(&entries, after_seq)
    }

    async fn claim_due(&self, now: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError> {
        let mut connection = self.connection.clone();
        let ids: Vec<String> = self
            .claim_script
            .key(self.keys.wake())
            .arg(now)
            .arg(limit)
            .arg(now.saturating_add(CLAIM_LEASE_MS))
            .invoke_async(&mut connection)
            .await
            .map_err(store_error)?;
        Ok(ids.into_iter().map(Arc::from).collect())
    }

    async fn remove(&self, id: &str) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let _: i64 = self
            .remove_script
            .key(self.keys.conversation(id))
            .key(self.keys.log(id))
            .key(self.keys.wake())
            .key(self.keys.ids())
            .arg(id)
            .arg(self.keys.parties_prefix())
            .invoke_async(&mut connection)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn inbox(
        &self,
        agent: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let mut connection = self.connection.clone();
        let entries: Vec<StreamEntry> = connection
            .xrange_count(
                self.keys.inbox(agent),
                format!("{}-0", after_seq.saturating_add(1)),
                "+",
                limit,
            )
            .await
            .map_err(store_error)?;
        // Entries naming a shared message (field `r`) read it in one MGET.
        let shared: Vec<&str> = entries
            .iter()
            .filter(|entry| optional_field(entry, "m").is_none())
            .map(|entry| field(entry, "r"))
            .collect::<Result<_, _>>()?;
        let mut bodies: std::vec::IntoIter<Option<String>> = if shared.is_empty() {
            Vec::new().into_iter()
        } else {
            let bodies: Vec<Option<String>> = ::redis::cmd("MGET")
                .arg(&shared)
                .query_async(&mut connection)
                .await
                .map_err(store_error)?;
            bodies.into_iter()
        };
        entries
            .iter()
            .map(|entry| {
                let message: Message = match optional_field(entry, "m") {
                    Some(body) => decode(body)?,
                    None => {
                        let body = bodies.next().flatten().ok_or_else(|| {
                            StoreError::Internal(format!(
                                "inbox entry names a message that is not stored: {}",
                                optional_field(entry, "r").unwrap_or_default()
                            ))
                        })?;
                        decode(&body)?
                    }
                };
                Ok(InboxEntry {
                    seq: entry_seq(entry)?,
                    conversation_id: Arc::from(field(entry, "c")?),
                    message: Arc::new(message),
                })
            })
            .collect()
    }

    async fn inbox_agents(&self) -> Result<Vec<AgentId>, StoreError> {
        // Every agent that ever had an entry has a head: a few bytes each, so listing them
        // all is cheaper than asking each stream whether it is empty.
        let mut connection = self.connection.clone();
        let agents: Vec<String> = connection
            .hkeys(self.keys.inbox_heads())
            .await
            .map_err(store_error)?;
        Ok(agents.into_iter().map(AgentId::from).collect())
    }

    async fn inbox_head(&self, agent: &str) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        let head: Option<u64> = connection
            .hget(self.keys.inbox_heads(), agent)
            .await
            .map_err(store_error)?;
        Ok(head.unwrap_or(0))
    }

    async fn acknowledge(&self, agent: &str, through: u64) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        loop {
            let deleted: usize = self
                .ack_script
                .key(self.keys.inbox(agent))
                .key(self.keys.message_refs())
                .arg(through)
                .arg(ACK_BATCH)
                .invoke_async(&mut connection)
                .await
                .map_err(store_error)?;
            if deleted < ACK_BATCH {
                return Ok(());
            }
        }
    }

    async fn webhook_cursor(&self, agent: &str) -> Result<u64, StoreError> {
        let mut connection = self.connection.clone();
        let cursor: Option<u64> = connection
            .hget(self.keys.webhook_cursors(), agent)
            .await
            .map_err(store_error)?;
        Ok(cursor.unwrap_or(0))
    }

    async fn advance_webhook_cursor(&self, agent: &str, seq: u64) -> Result<(), StoreError> {
        let mut connection = self.connection.clone();
        let _: i64 = self
            .webhook_cursor_script
            .key(self.keys.webhook_cursors())
            .arg(agent)
            .arg(seq)
            .invoke_async(&mut connection)
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn remote_tasks(&self, agent: &str) -> Result<Vec<RemoteTask>, StoreError> {
        self.hash_records(
            self.keys.remote_tasks(agent),
            &format!("remote task of `{agent}`"),
        )
        .await
    }

    async fn push_configs(&self) -> Result<Vec<PushConfig>, StoreError> {
        self.hash_records(self.keys.push_configs(), "push config")
            .await
    }

    async fn keep_push_config(&self, config: &PushConfig) -> Result<(), StoreError> {
        let field = Keys::pair_field(&config.conversation_id, &config.id);
        self.keep_hash_record(self.keys.push_configs(), field, config)
            .await
    }

    async fn agent_keys(&self, agent: &str) -> Result<Vec<AgentKey>, StoreError> {
        self.hash_records(self.keys.agent_keys(agent), "agent key")
            .await
    }

    async fn keep_agent_key(&self, key: &AgentKey) -> Result<(), StoreError> {
        self.keep_hash_record(self.keys.agent_keys(&key.agent), key.kid.clone(), key)
            .await
    }

    async fn forget_push_config(&self, conversation_id: &str, id: &str) -> Result<(), StoreError> {
        let field = Keys::pair_field(conversation_id, id);
        self.forget_hash_record(self.keys.push_configs(), field)
            .await
    }

    async fn keep_remote_task(&self, agent: &str, task: &RemoteTask) -> Result<(), StoreError> {
        let field = Keys::pair_field(&task.conversation_id, &task.message_id);
        self.keep_hash_record(self.keys.remote_tasks(agent), field, task)
            .await
    }

    async fn forget_remote_task(
        &self,
        agent: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        let field = Keys::pair_field(conversation_id, message_id);
        self.forget_hash_record(self.keys.remote_tasks(agent), field)
            .await
    }

    async fn archive_revision(&self, revision: &ArchivedRevision) -> Result<(), StoreError> {
        self.keep_revision(revision).await
    }

    async fn archive_module(&self, sha256: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.keep_module(sha256, bytes).await
    }

    async fn archived_revisions(
        &self,
        template: Option<&str>,
    ) -> Result<Vec<ArchivedRevision>, StoreError> {
        self.kept_revisions(template).await
    }

    async fn archived_revision(
        &self,
        template: &str,
        revision: &str,
    ) -> Result<Option<ArchivedRevision>, StoreError> {
        self.kept_revision(template, revision).await
    }

    async fn archived_module(&self, sha256: &str) -> Result<Option<Arc<[u8]>>, StoreError> {
        self.kept_module(sha256).await
    }

    async fn record_activation(&self, activation: &Activation) -> Result<(), StoreError> {
        self.append_activation(activation).await
    }

    async fn activations(
        &self,
        template: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Activation>, StoreError> {
        self.activation_history(template, limit).await
    }

    async fn lead(&self, role: &str, lease_ms: u64) -> Result<bool, StoreError> {
        let mut connection = self.connection.clone();
        let leads: i64 = self
            .lead_script
            .key(self.keys.lead(role))
            .arg(&*self.node)
            .arg(lease_ms)
            .invoke_async(&mut connection)
            .await
            .map_err(store_error)?;
        Ok(leads == 1)
    }

    async fn conversations_of(&self, agent: &str) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        let mut connection = self.connection.clone();
        let mut ids: Vec<String> = connection
            .smembers(self.keys.parties(agent))
            .await
            .map_err(store_error)?;
        ids.sort_unstable();
        Ok(Some(ids.into_iter().map(Arc::from).collect()))
    }

    async fn conversation_ids(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        let mut connection = self.connection.clone();
        // Equal scores sort by member: a lexicographic range, exclusive of `after`.
        let from = after.map_or_else(|| "-".to_owned(), |after| format!("({after}"));
        let ids: Vec<String> = ::redis::cmd("ZRANGEBYLEX")
            .arg(self.keys.ids())
            .arg(from)
            .arg("+")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut connection)
            .await
            .map_err(store_error)?;
        Ok(Some(ids.into_iter().map(Arc::from).collect()))
    }

    async fn conversation_ids_before(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        let mut connection = self.connection.clone();
        // The same lexicographic range, from the top down, exclusive of `before`.
        let to = before.map_or_else(|| "+".to_owned(), |before| format!("({before}"));
        let ids: Vec<String> = ::redis::cmd("ZREVRANGEBYLEX")
            .arg(self.keys.ids())
            .arg(to)
            .arg("-")
            .arg("LIMIT")
            .arg(0)
            .arg(limit)
            .query_async(&mut connection)
            .await
            .map_err(store_error)?;
        Ok(Some(ids.into_iter().map(Arc::from).collect()))
    }

    fn remote_changes(&self) -> Option<broadcast::Receiver<RemoteChange>> {
        Some(self.changes.subscribe())
    }
}

#[cfg(test)]
mod tests;
