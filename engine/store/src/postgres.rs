//! The Postgres store: conversations in the database a team already operates, backs up and
//! replicates; one engine node or several.
//!
//! # Client
//! `tokio-postgres` with `deadpool-postgres`'s pool: a maintained async client that
//! pipelines statements on one connection, caches prepared statements per connection, and
//! delivers `NOTIFY`s on a connection of our own. Not `sqlx`: its `sqlite` feature links a
//! second `libsqlite3-sys` beside rusqlite's, and the two cannot be in one binary. No TLS
//! connector is built in: `sslmode=disable` and `prefer` (plain text) are accepted, `require`
//! is refused with a clear error (`postgres/locator.rs`).
//!
//! # Commits: group commit
//! Commits go through one writer task (`postgres/writer.rs`) that takes every commit waiting
//! in its queue (up to [`writer::MAX_GROUP_COMMIT`]) and applies them in one transaction,
//! with `synchronous_commit = on` set on every connection: a commit is answered only after
//! its transaction's WAL is flushed, and one flush serves the whole batch. In the
//! transaction, in this order:
//! 1. the batch's conversations are locked (`SELECT … FOR UPDATE`, in id order) and their
//!    versions read; rows of new conversations are inserted (`ON CONFLICT DO NOTHING`);
//! 2. every commit is checked in queue order against the versions as the batch leaves them:
//!    a stale one is refused ([`StoreError::Conflict`], [`StoreError::Duplicate`]) before
//!    anything of it is written, so it fails alone and the rest of the batch goes on (no
//!    savepoints needed: nothing can change the locked rows meanwhile);
//! 3. the accepted commits' versions and wake-ups, events (one row per commit), party rows,
//!    inbox entries and change notices are written with one statement each (arrays
//!    `unnest`ed), sent as two pipelines (one round trip each: the inbox entries need the
//!    heads the first one moves), and the transaction commits.
//!
//! An SQL error fails the whole batch: every commit in it is answered
//! [`StoreError::Unavailable`] (nothing of it was written). So does Postgres not answering
//! within [`OPERATION_DEADLINE`]; the API answers 503 with `Retry-After`.
//!
//! # Inbox order
//! Each agent has an `inbox_heads` row holding its last sequence number. A batch adds all of
//! its entries for an agent with one upsert per agent (`head = head + n`, in agent order, so
//! batches of two nodes lock heads in one order) and numbers them `head - n + 1 ..= head` in
//! queue order. The row stays locked until the batch commits, so commits that deliver to
//! one agent are serialised on its head: sequences have no gaps, and seq n+1 never becomes
//! visible before seq n. Acknowledging deletes entries and leaves the head alone, so the
//! sequence goes on from it.
//!
//! # Other writes and reads
//! Everything but commits runs directly on a pooled connection, one statement or one short
//! transaction each, durable when it returns (`synchronous_commit = on`): deadline claims
//! (`FOR UPDATE SKIP LOCKED`, so each due wake-up is leased to one node, see
//! [`CLAIM_LEASE_MS`]), removal, acknowledgements, webhook cursors (`greatest`: they never
//! move back), remote tasks, push configs, the revision archive and the lead of roles
//! (a `leases` row with holder and expiry, compared with the database's clock, so the
//! nodes' clocks need not agree).
//!
//! # Several nodes
//! Every node follows every other node's commits, as on Redis: each batch writes a row per
//! commit into `changes` and sends one `NOTIFY`; each node reads the rows after its cursor
//! (`postgres/changes.rs`) and hands them to its engine through
//! [`ConversationStore::remote_changes`], skipping its own.
//!
//! The number of partitions the ownership layer spreads conversations over is recorded in
//! the `settings` table ([`PARTITIONS`]) when the schema is made (`postgres/schema.rs`), and
//! the store is that layer's lease table too (`postgres/leases.rs`: a
//! `colloquy_cluster::LeaseStore`). Its commits are not fenced yet, and no server runs
//! ownership on it yet (docs/scale.md).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use colloquy_core::store::{
    Activation, AgentKey, ArchivedRevision, CLAIM_LEASE_MS, Commit, ConversationStore, InboxEntry,
    PushConfig, RemoteChange, RemoteTask, StoreError,
};
use colloquy_protocol::event::ConversationEvent;
use colloquy_protocol::message::{AgentId, Message};
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::{broadcast, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_postgres::NoTls;

mod changes;
mod leases;
mod locator;
mod schema;
mod tls;
mod writer;

pub use locator::{Locator, PASSWORD_ENV, PASSWORD_FILE_ENV};
pub use writer::MAX_GROUP_COMMIT;

/// The number of partitions conversations are spread over, recorded in `settings` for the
/// ownership layer (a conversation's partition is a stable hash of its id modulo this).
/// Fixed once a database is made: changing it would move every conversation.
pub const PARTITIONS: u32 = 1024;
/// Pooled connections for reads and the writes outside commits (the writer takes one per
/// batch, the change follower has its own). Few: the server has few cores, and Postgres
/// gives each connection a process.
pub const POOL_SIZE: usize = 8;
/// How long one operation may take in all, connecting included: during an outage a request
/// gets its 503 within this instead of hanging (as the Redis store's `COMMAND_DEADLINE`).
pub const OPERATION_DEADLINE: Duration = Duration::from_secs(2);
/// How long `changes` rows are kept for followers (`postgres/changes.rs`).
pub const CHANGES_KEPT: Duration = Duration::from_secs(300);
/// The channel each commit batch NOTIFYs. Channels are per database, like the tables.
pub const CHANGES_CHANNEL: &str = "colloquy_changes";
/// The advisory lock a batch holds from inserting its `changes` rows to its commit, so
/// their sequence numbers are handed out in commit order (`postgres/changes.rs`).
pub(crate) const CHANGES_LOCK: i64 = 0x636f_6c6c_6f71_6368 & i64::MAX;
/// Remote change notices buffered before a slow engine lags (as the Redis store's).
pub const CHANGE_BUFFER: usize = 4096;
/// Inbox entries one acknowledgement transaction deletes at most: a large backlog is
/// deleted over several short transactions rather than one that holds the rows long.
const ACK_BATCH: i64 = 5000;

/// A [`ConversationStore`] in a Postgres database, shared by every engine node pointed at it.
pub struct PostgresStore {
    pool: Pool,
    writer: mpsc::UnboundedSender<writer::Job>,
    node: Arc<str>,
    changes: broadcast::Sender<RemoteChange>,
    /// Set by a partition owner: the follower reads the changes of these inboxes only.
    wanted: Arc<std::sync::OnceLock<colloquy_core::store::WantedAgents>>,
    follower: JoinHandle<()>,
    redacted: String,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("database", &self.redacted)
            .field("node", &self.node)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        // The writer stops when its queue closes, after answering what it holds.
        self.follower.abort();
    }
}

impl PostgresStore {
    /// Connects to the database at `url` (`postgres://USER@HOST:PORT/DB[?sslmode=…]`; the
    /// password from the environment, see [`Locator::parse`]), applies pending migrations
    /// and starts the writer and the change follower. Fails when the database cannot be
    /// reached now; errors name the URL without its password.
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::open(Locator::parse(url)?).await
    }

    /// [`PostgresStore::connect`] with the URL already parsed.
    pub async fn open(locator: Locator) -> Result<PostgresStore, StoreError> {
        let redacted = locator.redacted().to_owned();
        let unreachable = |error: String| {
            StoreError::Unavailable(format!("cannot use Postgres at {redacted}: {error}"))
        };
        let manager_config = || ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        };
        let manager = match &locator.tls {
            Some(tls) => {
                Manager::from_config(locator.config.clone(), tls.clone(), manager_config())
            }
            None => Manager::from_config(locator.config.clone(), NoTls, manager_config()),
        };
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(OPERATION_DEADLINE))
            .create_timeout(Some(locator::CONNECT_TIMEOUT))
            .recycle_timeout(Some(locator::CONNECT_TIMEOUT))
            .build()
            .map_err(|error| unreachable(error.to_string()))?;
        {
            let mut client = pool
                .get()
                .await
                .map_err(|error| unreachable(with_causes(&error)))?;
            schema::migrate(&mut client)
                .await
                .map_err(|error| unreachable(error.to_string()))?;
        }
        let partitions: u32 = {
            let client = pool
                .get()
                .await
                .map_err(|error| unreachable(error.to_string()))?;
            let value: String = client
                .query_one("SELECT value FROM settings WHERE name = 'partitions'", &[])
                .await
                .map_err(|error| unreachable(error.to_string()))?
                .get(0);
            value
                .parse()
                .map_err(|_| StoreError::Internal(format!("unreadable partition count {value}")))?
        };
        let node: Arc<str> = Arc::from(uuid::Uuid::now_v7().to_string());
        let (changes, _) = broadcast::channel(CHANGE_BUFFER);
        let (ready, following) = oneshot::channel();
        let wanted = Arc::new(std::sync::OnceLock::new());
        let follower = tokio::spawn(changes::follow(
            (locator.config.clone(), locator.tls.clone()),
            CHANGES_CHANNEL.to_owned(),
            node.clone(),
            (changes.clone(), wanted.clone()),
            ready,
        ));
        // A store that returned before the follower listened would miss other nodes'
        // commits in between: an inbox stream opened then would not wake up.
        if !matches!(
            tokio::time::timeout(OPERATION_DEADLINE, following).await,
            Ok(Ok(()))
        ) {
            follower.abort();
            return Err(unreachable(format!(
                "cannot listen for change notices within {OPERATION_DEADLINE:?}"
            )));
        }
        let (jobs, queue) = mpsc::unbounded_channel();
        tokio::spawn(
            writer::Writer {
                pool: pool.clone(),
                node: node.clone(),
                channel: CHANGES_CHANNEL.to_owned(),
                partitions,
            }
            .run(queue),
        );
        Ok(PostgresStore {
            pool,
            writer: jobs,
            node,
            changes,
            wanted,
            follower,
            redacted,
        })
    }

    /// This node's id in change notices and leases.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The partition count recorded in the database (`settings`).
    pub async fn partitions(&self) -> Result<u32, StoreError> {
        self.bounded(async {
            let client = self.client().await?;
            let value: String = client
                .query_one("SELECT value FROM settings WHERE name = 'partitions'", &[])
                .await
                .map_err(sql_error)?
                .get(0);
            value
                .parse()
                .map_err(|_| StoreError::Internal(format!("unreadable partition count {value}")))
        })
        .await
    }

    /// The schema version the database is at.
    pub async fn schema_version(&self) -> Result<usize, StoreError> {
        self.bounded(async {
            let client = self.client().await?;
            let version: i32 = client
                .query_one("SELECT max(version) FROM schema_version", &[])
                .await
                .map_err(sql_error)?
                .get(0);
            Ok(usize::try_from(version).unwrap_or(0))
        })
        .await
    }

    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        self.pool.get().await.map_err(pool_error)
    }

    /// `operation` bounded by [`OPERATION_DEADLINE`].
    async fn bounded<T>(
        &self,
        operation: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(OPERATION_DEADLINE, operation).await {
            Ok(result) => result,
            Err(_) => Err(StoreError::Unavailable(format!(
                "no answer from Postgres at {} within {OPERATION_DEADLINE:?}",
                self.redacted
            ))),
        }
    }

    /// Runs one statement that returns nothing.
    async fn execute(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        self.bounded(async {
            let client = self.client().await?;
            let statement = client.prepare_cached(sql).await.map_err(sql_error)?;
            client.execute(&statement, params).await.map_err(sql_error)
        })
        .await
    }

    /// Runs one query.
    async fn query(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<tokio_postgres::Row>, StoreError> {
        self.bounded(async {
            let client = self.client().await?;
            let statement = client.prepare_cached(sql).await.map_err(sql_error)?;
            client.query(&statement, params).await.map_err(sql_error)
        })
        .await
    }

    /// The JSON bodies in the first column of `rows`, decoded; `what` names one in an error.
    fn bodies<T: serde::de::DeserializeOwned>(
        rows: &[tokio_postgres::Row],
        what: &str,
    ) -> Result<Vec<T>, StoreError> {
        rows.iter()
            .map(|row| {
                serde_json::from_str(row.get::<_, &str>(0))
                    .map_err(|error| StoreError::Internal(format!("unreadable {what}: {error}")))
            })
            .collect()
    }

    /// One acknowledgement step: deletes `agent`'s entries up to `through`, at most
    /// [`ACK_BATCH`], and the shared messages no entry names any more. True when it got to
    /// `through`.
    async fn acknowledge_some(&self, agent: &str, through: i64) -> Result<bool, StoreError> {
        self.bounded(async {
            let mut client = self.client().await?;
            let transaction = client.transaction().await.map_err(sql_error)?;
            let oldest: Option<i64> = transaction
                .query_one("SELECT min(seq) FROM inbox WHERE agent = $1", &[&agent])
                .await
                .map_err(sql_error)?
                .get(0);
            let Some(oldest) = oldest else {
                return Ok(true);
            };
            let upto = through.min(oldest.saturating_add(ACK_BATCH - 1));
            let deleted = transaction
                .prepare_cached(
                    "DELETE FROM inbox WHERE agent = $1 AND seq <= $2
                     RETURNING conversation_id, shared_id",
                )
                .await
                .map_err(sql_error)?;
            let mut shared: Vec<(String, String)> = Vec::new();
            for row in transaction
                .query(&deleted, &[&agent, &upto])
                .await
                .map_err(sql_error)?
            {
                if let Some(message) = row.get::<_, Option<String>>(1) {
                    shared.push((row.get(0), message));
                }
            }
            shared.sort_unstable();
            shared.dedup();
            if !shared.is_empty() {
                let (conversations, messages): (Vec<String>, Vec<String>) =
                    shared.into_iter().unzip();
                let unnamed = transaction
                    .prepare_cached(
                        "DELETE FROM messages AS m
                         USING unnest($1::text[], $2::text[]) AS g(conversation_id, message_id)
                         WHERE m.conversation_id = g.conversation_id
                           AND m.message_id = g.message_id
                           AND NOT EXISTS (SELECT 1 FROM inbox AS i
                                           WHERE i.conversation_id = g.conversation_id
                                             AND i.shared_id = g.message_id)",
                    )
                    .await
                    .map_err(sql_error)?;
                transaction
                    .execute(&unnamed, &[&conversations, &messages])
                    .await
                    .map_err(sql_error)?;
            }
            transaction.commit().await.map_err(sql_error)?;
            Ok(upto >= through)
        })
        .await
    }
}

/// Creates an empty database on the server `url` names (connecting to `url`'s database to
/// do it) and returns the URL of the new one: each test gets a database of its own.
#[cfg(any(test, feature = "raw"))]
pub(crate) async fn create_test_database(url: &str) -> Result<String, StoreError> {
    let locator = Locator::parse(url)?;
    let (client, connection) = locator.config.connect(NoTls).await.map_err(sql_error)?;
    tokio::spawn(connection);
    let name = format!("colloquy_test_{}", uuid::Uuid::now_v7().simple());
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .map_err(sql_error)?;
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| StoreError::Internal("not a URL".to_owned()))?;
    let (authority, path) = rest
        .split_once('/')
        .ok_or_else(|| StoreError::Internal("no database in the URL".to_owned()))?;
    let query = path
        .split_once('?')
        .map_or(String::new(), |(_, query)| format!("?{query}"));
    Ok(format!("{scheme}://{authority}/{name}{query}"))
}

/// How many partitions each node address holds by a live lease, by the database's clock
/// (the crash tests watch a cluster rebalance through it).
#[cfg(feature = "raw")]
pub(crate) async fn live_leases_by_address(
    url: &str,
) -> Result<std::collections::BTreeMap<String, usize>, StoreError> {
    let locator = Locator::parse(url)?;
    let (client, connection) = locator.config.connect(NoTls).await.map_err(sql_error)?;
    tokio::spawn(connection);
    let rows = client
        .query(
            "SELECT address, count(*) FROM partition_leases
              WHERE owner IS NOT NULL
                AND expires_at > (extract(epoch FROM now()) * 1000)::bigint
              GROUP BY address",
            &[],
        )
        .await
        .map_err(sql_error)?;
    Ok(rows
        .iter()
        .map(|row| {
            let held: i64 = row.get(1);
            (row.get::<_, String>(0), usize::try_from(held).unwrap_or(0))
        })
        .collect())
}

/// `error` and what caused it, down the chain (a failed TLS handshake says why only in its
/// source: the certificate it did not trust).
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(inner) = cause {
        let said = inner.to_string();
        if !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        cause = inner.source();
    }
    text
}

/// Connection trouble, a server shutting down or short of resources, a deadlock or a
/// serialization failure (all worth retrying) is `Unavailable`; anything Postgres would
/// answer the same way again is `Internal`.
pub(crate) fn sql_error(error: tokio_postgres::Error) -> StoreError {
    let retry = match error.code() {
        None => true,
        Some(code) => matches!(&code.code()[..2], "08" | "40" | "53" | "57" | "58"),
    };
    let message = match error.as_db_error() {
        Some(db) => format!("Postgres: {db}"),
        None => format!("Postgres: {error}"),
    };
    if retry {
        StoreError::Unavailable(message)
    } else {
        StoreError::Internal(message)
    }
}

/// No connection could be had from the pool: Postgres is unreachable or overloaded.
pub(crate) fn pool_error(error: deadpool_postgres::PoolError) -> StoreError {
    StoreError::Unavailable(format!("Postgres: {error}"))
}

pub(crate) fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::Internal(error.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text)
        .map_err(|error| StoreError::Internal(format!("corrupt Postgres row: {error}")))
}

/// Postgres integers are signed; times and versions stay far below `i64::MAX`.
pub(crate) fn to_sql(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(crate) fn from_sql(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}

/// The events of log rows (each a commit's JSON array) after `after_seq`.
fn events_from(
    rows: &[tokio_postgres::Row],
    after_seq: u64,
) -> Result<Vec<ConversationEvent>, StoreError> {
    let mut events = Vec::new();
    for row in rows {
        if let Some(body) = row.get::<_, Option<&str>>(0) {
            let batch: Vec<ConversationEvent> = decode(body)?;
            events.extend(batch.into_iter().filter(|event| event.seq > after_seq));
        }
    }
    Ok(events)
}

/// The ids in the first column of `rows`.
fn ids(rows: &[tokio_postgres::Row]) -> Vec<Arc<str>> {
    rows.iter()
        .map(|row| Arc::from(row.get::<_, &str>(0)))
        .collect()
}

#[async_trait]
impl ConversationStore for PostgresStore {
    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        // Encoded here, on the caller's task: the one writer task only runs SQL.
        let commit = writer::Encoded::new(commit)?;
        let (reply, answer) = oneshot::channel();
        let stopped = || StoreError::Unavailable("the Postgres writer has stopped".to_owned());
        self.writer.send((commit, reply)).map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    async fn load(&self, id: &str) -> Result<Option<Vec<ConversationEvent>>, StoreError> {
        // No row: no conversation; a row with a NULL body: a conversation without events.
        let rows = self
            .query(
                "SELECT e.body FROM conversations AS c
                 LEFT JOIN events AS e ON e.conversation_id = c.id
                 WHERE c.id = $1 ORDER BY e.last_seq",
                &[&id],
            )
            .await?;
        if rows.is_empty() {
            return Ok(None);
        }
        events_from(&rows, 0).map(Some)
    }

    async fn events_after(
        &self,
        id: &str,
        after_seq: u64,
    ) -> Result<Vec<ConversationEvent>, StoreError> {
        let rows = self
            .query(
                "SELECT body FROM events WHERE conversation_id = $1 AND last_seq > $2
                 ORDER BY last_seq",
                &[&id, &to_sql(after_seq)],
            )
            .await?;
        events_from(&rows, after_seq)
    }

    async fn claim_due(&self, now: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError> {
        // Rows a writer or another claimer holds are skipped, not waited for: each due
        // wake-up goes to one claimer, and a commit in flight sets its own next wake-up.
        let rows = self
            .query(
                "UPDATE conversations SET wake_at = $2
                 WHERE id IN (SELECT id FROM conversations
                              WHERE wake_at IS NOT NULL AND wake_at <= $1
                              ORDER BY wake_at LIMIT $3
                              FOR UPDATE SKIP LOCKED)
                 RETURNING id",
                &[
                    &to_sql(now),
                    &to_sql(now.saturating_add(CLAIM_LEASE_MS)),
                    &to_sql(limit as u64),
                ],
            )
            .await?;
        Ok(ids(&rows))
    }

    async fn claim_due_in(
        &self,
        now: u64,
        limit: usize,
        partitions: &[colloquy_cluster::PartitionId],
    ) -> Result<Vec<Arc<str>>, StoreError> {
        let partitions: Vec<i32> = (partitions.iter())
            .map(|partition| i32::try_from(partition.0).unwrap_or(i32::MAX))
            .collect();
        let rows = self
            .query(
                "UPDATE conversations SET wake_at = $2
                 WHERE id IN (SELECT id FROM conversations
                              WHERE wake_at IS NOT NULL AND wake_at <= $1
                                AND (partition = ANY($4) OR partition IS NULL)
                              ORDER BY wake_at LIMIT $3
                              FOR UPDATE SKIP LOCKED)
                 RETURNING id",
                &[
                    &to_sql(now),
                    &to_sql(now.saturating_add(CLAIM_LEASE_MS)),
                    &to_sql(limit as u64),
                    &partitions,
                ],
            )
            .await?;
        Ok(ids(&rows))
    }

    async fn remove(&self, id: &str) -> Result<(), StoreError> {
        self.bounded(async {
            let mut client = self.client().await?;
            let transaction = client.transaction().await.map_err(sql_error)?;
            for statement in [
                "DELETE FROM conversations WHERE id = $1",
                "DELETE FROM events WHERE conversation_id = $1",
                "DELETE FROM parties WHERE conversation_id = $1",
            ] {
                let statement = transaction
                    .prepare_cached(statement)
                    .await
                    .map_err(sql_error)?;
                transaction
                    .execute(&statement, &[&id])
                    .await
                    .map_err(sql_error)?;
            }
            transaction.commit().await.map_err(sql_error)
        })
        .await
    }

    async fn inbox(
        &self,
        agent: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let rows = self
            .query(
                "SELECT i.seq, i.conversation_id, coalesce(i.message, m.body) FROM inbox AS i
                 LEFT JOIN messages AS m
                   ON m.conversation_id = i.conversation_id AND m.message_id = i.shared_id
                 WHERE i.agent = $1 AND i.seq > $2 ORDER BY i.seq LIMIT $3",
                &[&agent, &to_sql(after_seq), &to_sql(limit as u64)],
            )
            .await?;
        rows.iter()
            .map(|row| {
                let seq: i64 = row.get(0);
                let body: Option<&str> = row.get(2);
                let body = body.ok_or_else(|| {
                    StoreError::Internal(format!(
                        "inbox entry {seq} of `{agent}` names a message that is not stored"
                    ))
                })?;
                let message: Message = decode(body)?;
                Ok(InboxEntry {
                    seq: from_sql(seq),
                    conversation_id: Arc::from(row.get::<_, &str>(1)),
                    message: Arc::new(message),
                })
            })
            .collect()
    }

    async fn inbox_agents(&self) -> Result<Vec<AgentId>, StoreError> {
        // Every agent that ever had an entry has a head: listing them all is one index scan.
        let rows = self.query("SELECT agent FROM inbox_heads", &[]).await?;
        Ok(ids(&rows))
    }

    async fn inbox_head(&self, agent: &str) -> Result<u64, StoreError> {
        let rows = self
            .query("SELECT head FROM inbox_heads WHERE agent = $1", &[&agent])
            .await?;
        Ok(rows.first().map_or(0, |row| from_sql(row.get(0))))
    }

    async fn acknowledge(&self, agent: &str, through: u64) -> Result<(), StoreError> {
        while !self.acknowledge_some(agent, to_sql(through)).await? {}
        Ok(())
    }

    async fn webhook_cursor(&self, agent: &str) -> Result<u64, StoreError> {
        let rows = self
            .query(
                "SELECT through FROM webhook_cursors WHERE agent = $1",
                &[&agent],
            )
            .await?;
        Ok(rows.first().map_or(0, |row| from_sql(row.get(0))))
    }

    async fn advance_webhook_cursor(&self, agent: &str, seq: u64) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO webhook_cursors (agent, through) VALUES ($1, $2)
             ON CONFLICT (agent) DO UPDATE
             SET through = greatest(webhook_cursors.through, excluded.through)",
            &[&agent, &to_sql(seq)],
        )
        .await?;
        Ok(())
    }

    async fn remote_tasks(&self, agent: &str) -> Result<Vec<RemoteTask>, StoreError> {
        let rows = self
            .query("SELECT body FROM remote_tasks WHERE agent = $1", &[&agent])
            .await?;
        PostgresStore::bodies(&rows, "remote task")
    }

    async fn keep_remote_task(&self, agent: &str, task: &RemoteTask) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO remote_tasks (agent, conversation_id, message_id, body)
             VALUES ($1, $2, $3, $4)
             ON CONFLICT (agent, conversation_id, message_id) DO UPDATE SET body = excluded.body",
            &[
                &agent,
                &&*task.conversation_id,
                &&*task.message_id,
                &encode(task)?,
            ],
        )
        .await?;
        Ok(())
    }

    async fn forget_remote_task(
        &self,
        agent: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM remote_tasks
             WHERE agent = $1 AND conversation_id = $2 AND message_id = $3",
            &[&agent, &conversation_id, &message_id],
        )
        .await?;
        Ok(())
    }

    async fn push_configs(&self) -> Result<Vec<PushConfig>, StoreError> {
        let rows = self.query("SELECT body FROM push_configs", &[]).await?;
        PostgresStore::bodies(&rows, "push config")
    }

    async fn keep_push_config(&self, config: &PushConfig) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO push_configs (conversation_id, id, body) VALUES ($1, $2, $3)
             ON CONFLICT (conversation_id, id) DO UPDATE SET body = excluded.body",
            &[&&*config.conversation_id, &config.id, &encode(config)?],
        )
        .await?;
        Ok(())
    }

    async fn forget_push_config(&self, conversation_id: &str, id: &str) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM push_configs WHERE conversation_id = $1 AND id = $2",
            &[&conversation_id, &id],
        )
        .await?;
        Ok(())
    }

    async fn agent_keys(&self, agent: &str) -> Result<Vec<AgentKey>, StoreError> {
        let rows = self
            .query("SELECT body FROM agent_keys WHERE agent = $1", &[&agent])
            .await?;
        PostgresStore::bodies(&rows, "agent key")
    }

    async fn keep_agent_key(&self, key: &AgentKey) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO agent_keys (agent, kid, body) VALUES ($1, $2, $3)
             ON CONFLICT (agent, kid) DO UPDATE SET body = excluded.body",
            &[&&*key.agent, &key.kid, &encode(key)?],
        )
        .await?;
        Ok(())
    }

    async fn archive_revision(&self, revision: &ArchivedRevision) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO revisions (template, revision, body, first_seen) VALUES ($1, $2, $3, $4)
             ON CONFLICT (template, revision) DO NOTHING",
            &[
                &&*revision.template,
                &&*revision.revision,
                &encode(revision)?,
                &to_sql(revision.first_seen),
            ],
        )
        .await?;
        Ok(())
    }

    async fn archive_module(&self, sha256: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO modules (sha256, bytes) VALUES ($1, $2) ON CONFLICT (sha256) DO NOTHING",
            &[&sha256, &bytes],
        )
        .await?;
        Ok(())
    }

    async fn archived_revisions(
        &self,
        template: Option<&str>,
    ) -> Result<Vec<ArchivedRevision>, StoreError> {
        // The columns' "C" collation compares bytes, as `str`'s `Ord` does.
        let rows = self
            .query(
                "SELECT body FROM revisions WHERE $1::text IS NULL OR template = $1
                 ORDER BY first_seen, template, revision",
                &[&template],
            )
            .await?;
        PostgresStore::bodies(&rows, "archived revision")
    }

    async fn archived_revision(
        &self,
        template: &str,
        revision: &str,
    ) -> Result<Option<ArchivedRevision>, StoreError> {
        let rows = self
            .query(
                "SELECT body FROM revisions WHERE template = $1 AND revision = $2",
                &[&template, &revision],
            )
            .await?;
        Ok(PostgresStore::bodies(&rows, "archived revision")?
            .into_iter()
            .next())
    }

    async fn archived_module(&self, sha256: &str) -> Result<Option<Arc<[u8]>>, StoreError> {
        let rows = self
            .query("SELECT bytes FROM modules WHERE sha256 = $1", &[&sha256])
            .await?;
        Ok(rows.first().map(|row| Arc::from(row.get::<_, &[u8]>(0))))
    }

    async fn record_activation(&self, activation: &Activation) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO activations (template, body) VALUES ($1, $2)",
            &[&&*activation.template, &encode(activation)?],
        )
        .await?;
        Ok(())
    }

    async fn activations(
        &self,
        template: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Activation>, StoreError> {
        // The newest first down the primary key (or the template's index), turned around.
        let rows = self
            .query(
                "SELECT body FROM (SELECT seq, body FROM activations
                                   WHERE $1::text IS NULL OR template = $1
                                   ORDER BY seq DESC LIMIT $2) AS newest
                 ORDER BY seq",
                &[&template, &to_sql(limit as u64)],
            )
            .await?;
        PostgresStore::bodies(&rows, "activation")
    }

    async fn conversations_of(&self, agent: &str) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        let rows = self
            .query(
                "SELECT conversation_id FROM parties WHERE agent = $1 ORDER BY conversation_id",
                &[&agent],
            )
            .await?;
        Ok(Some(ids(&rows)))
    }

    async fn conversation_ids(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        let rows = self
            .query(
                "SELECT id FROM conversations WHERE $1::text IS NULL OR id > $1
                 ORDER BY id LIMIT $2",
                &[&after, &to_sql(limit as u64)],
            )
            .await?;
        Ok(Some(ids(&rows)))
    }

    async fn conversation_ids_before(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        let rows = self
            .query(
                "SELECT id FROM conversations WHERE $1::text IS NULL OR id < $1
                 ORDER BY id DESC LIMIT $2",
                &[&before, &to_sql(limit as u64)],
            )
            .await?;
        Ok(Some(ids(&rows)))
    }

    async fn lead(&self, role: &str, lease_ms: u64) -> Result<bool, StoreError> {
        // Taken when free or expired, kept (and extended) by its holder; the expiry is on
        // the database's clock, which every node shares.
        let rows = self
            .query(
                "INSERT INTO leases (role, holder, expires_at)
                 VALUES ($1, $2, clock_timestamp() + make_interval(secs => $3))
                 ON CONFLICT (role) DO UPDATE
                 SET holder = excluded.holder, expires_at = excluded.expires_at
                 WHERE leases.holder = excluded.holder OR leases.expires_at < clock_timestamp()
                 RETURNING holder",
                &[&role, &&*self.node, &(lease_ms as f64 / 1000.0)],
            )
            .await?;
        Ok(!rows.is_empty())
    }

    fn narrow_remote_changes(&self, wanted: colloquy_core::store::WantedAgents) {
        let _ = self.wanted.set(wanted);
    }

    fn remote_changes(&self) -> Option<broadcast::Receiver<RemoteChange>> {
        Some(self.changes.subscribe())
    }
}

#[cfg(test)]
mod tests;
