//! The SQLite store: the embedded default. One database file in WAL mode.
//!
//! Writes go through one writer thread that applies every commit waiting in its queue inside
//! one transaction and then answers all of them: **group commit**, one fsync for a batch
//! instead of one per message. A commit is answered only after the transaction is durable.
//! SQLite itself runs with `synchronous = NORMAL`; with [`Synchronous::Full`] (the default) a
//! second thread, the *syncer*, fsyncs the WAL after each batch and only then answers its
//! commits, while the writer already applies the next batch. [`Synchronous::Normal`] answers
//! right after the transaction (in the OS, not on disk). The WAL is checkpointed mostly on a
//! third thread, not inside the writer's commits (`sqlite/checkpoint.rs`). Reads use a separate
//! connection; WAL lets them run beside the writer. They see a batch as soon as the writer
//! committed it, which under `Full` can be up to one fsync before its commits are answered:
//! after a power loss (not after a crash of the engine) a reader may have seen a write that was
//! never acknowledged and is gone.
//!
//! Each dirty page costs one WAL frame per transaction, so the layout keeps the pages a
//! batch touches few: one `events` row per commit, appended; new inbox entries and party
//! rows appended to `inbox_recent` and `parties_recent` and moved into the tables clustered
//! by agent every [`RECENT_ROWS`] rows (reads look at both).
//!
//! The writer thread runs only SQL: callers encode events and messages to JSON before they
//! queue a commit. It keeps the version of every conversation it has seen and the last
//! sequence number of every inbox it has written in memory, so a stale or duplicate commit is
//! refused before any SQL runs and the transaction needs no savepoint per commit; an SQL
//! error fails the whole batch (every commit in it is answered
//! [`StoreError::Unavailable`]) and empties those maps, which refill from the tables.
//!
//! **One process owns the file.** Those in-memory versions are only right if nothing else
//! writes the database, so [`SqliteStore::open`] takes an exclusive advisory lock on a side
//! file (`PATH.lock`) for as long as the store lives; a second process (another `colloquy
//! serve` on the same file) gets a clear error instead of corrupting the version checks.
//! Several engine processes share a store through Redis.
//!
//! The revision archive (templates' revisions, hook modules and the history of activations)
//! lives in tables of its own, written through the same writer (`sqlite/archive.rs`).

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use colloquy_protocol::event::ConversationEvent;
use colloquy_protocol::event::EventKind;
use colloquy_protocol::message::{AgentId, Message};
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use colloquy_core::store::{
    Activation, AgentKey, ArchivedRevision, CLAIM_LEASE_MS, Commit, ConversationStore, InboxEntry,
    PushConfig, RemoteTask, StoreError,
};

mod archive;
mod checkpoint;
mod queries;
pub mod recorded;
mod schema;
mod writer;

use archive::ArchiveWrite;
use queries::*;
use schema::migrate;
use writer::{Writer, sync_loop};

/// Most commits applied in one transaction. Bounds the latency a large batch adds to the
/// first commit in it.
pub const MAX_GROUP_COMMIT: usize = 512;

/// Most conversations (and, separately, inboxes) the writer remembers; past that it forgets
/// them all after a transaction and reads them back from the tables as they come up.
const MAX_REMEMBERED: usize = 200_000;

/// What the writer remembers per conversation or inbox.
type Remembered<K> = HashMap<K, u64, colloquy_core::keyed::Hasher>;

/// How many rows `inbox_recent` (and, separately, `parties_recent`) collect before the writer
/// moves them into `inbox` (`parties`). Small enough that the index of recent inbox entries
/// is a few pages and a scan of recent parties is quick; large enough that each agent gets
/// several rows per move.
pub const RECENT_ROWS: usize = 2048;

/// Inbox entries one acknowledgement job deletes at most: a large backlog acknowledged at
/// once is deleted over several transactions, not in one that holds up every commit queued
/// behind it.
const ACK_BATCH: u64 = 10_000;

/// Page cache of each connection, in KiB (SQLite's `cache_size`, negative for KiB). The
/// writer's working set is the B-trees' inner pages and rightmost leaves, a few MiB; the OS
/// page cache holds the rest. Not larger: at the end of every write transaction SQLite
/// truncates the page cache past the database's end in a walk over the cache's hash
/// table, which grows with the cache. With 64 MiB that walk (`pcache1TruncateUnsafe`) was
/// the SQLite threads' hottest function in the stores bench (3.7% of all samples, against
/// 0.5% with 8 MiB), and 8 MiB took 5-10% off the writer's CPU time per message.
pub const CACHE_KIB: u32 = 8 * 1024;

/// How long [`SqliteStore::open`] waits for another process to let go of the file.
const LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// How far a commit must get before it is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// On disk: the WAL is fsynced after every (group) commit, before its commits are
    /// answered. Survives power loss. The default.
    #[default]
    Full,
    /// In the operating system: written to the WAL, fsynced at checkpoints. Survives the
    /// engine's crash (`kill -9`) but not the machine's; several times the throughput on
    /// disks with slow fsync. `sqlite:PATH?synchronous=normal`.
    Normal,
}

/// A commit with its JSON already encoded (by the caller, off the writer thread).
struct Encoded {
    conversation_id: Arc<str>,
    expected_version: u64,
    new_version: u64,
    wake_at: Option<i64>,
    /// The events as one JSON array, or `None` for a commit without events.
    events: Option<String>,
    /// The parties to index (each once), for a commit that starts the conversation.
    parties: Vec<AgentId>,
    /// Each delivered message once, as JSON, with its receivers.
    deliveries: Vec<(String, Vec<Receiver>)>,
}

/// An agent a message is delivered to, and the conversation it belongs to.
type Receiver = (AgentId, Arc<str>);

impl Encoded {
    fn new(commit: Commit) -> Result<Encoded, StoreError> {
        let Commit {
            conversation_id,
            expected_version,
            events,
            deliveries,
            wake_at,
            ..
        } = commit;
        let mut parties: Vec<AgentId> = Vec::new();
        if let Some(EventKind::Started(started)) = events.first().map(|event| &event.kind)
            && expected_version == 0
        {
            // An agent named twice (initiator and participant) is indexed once.
            for agent in std::iter::once(&started.initiator).chain(&started.participants) {
                if !parties.contains(agent) {
                    parties.push(agent.clone());
                }
            }
        }
        let deliveries = colloquy_core::store::by_message(&deliveries)
            .into_iter()
            .map(|(message, group)| {
                let receivers = group
                    .iter()
                    .map(|delivery| (delivery.agent.clone(), delivery.conversation_id.clone()))
                    .collect();
                Ok((encode(&**message)?, receivers))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Encoded {
            conversation_id,
            expected_version,
            new_version: expected_version + events.len() as u64,
            wake_at: wake_at.map(to_sql),
            events: if events.is_empty() {
                None
            } else {
                Some(encode(&events)?)
            },
            parties,
            deliveries,
        })
    }
}

enum Job {
    Commit(Encoded, oneshot::Sender<Result<(), StoreError>>),
    ClaimDue(
        u64,
        usize,
        oneshot::Sender<Result<Vec<Arc<str>>, StoreError>>,
    ),
    Remove(String, oneshot::Sender<Result<(), StoreError>>),
    /// Answers whether the acknowledgement is complete (see [`ACK_BATCH`]).
    Acknowledge(String, u64, oneshot::Sender<Result<bool, StoreError>>),
    AdvanceWebhookCursor(String, u64, oneshot::Sender<Result<(), StoreError>>),
    KeepRemoteTask(String, RemoteTask, oneshot::Sender<Result<(), StoreError>>),
    KeepPushConfig(PushConfig, oneshot::Sender<Result<(), StoreError>>),
    KeepAgentKey(AgentKey, oneshot::Sender<Result<(), StoreError>>),
    ForgetPushConfig(String, String, oneshot::Sender<Result<(), StoreError>>),
    Archive(ArchiveWrite, oneshot::Sender<Result<(), StoreError>>),
    /// The agent, the conversation and the message.
    ForgetRemoteTask(
        String,
        String,
        String,
        oneshot::Sender<Result<(), StoreError>>,
    ),
}

/// A [`ConversationStore`] in one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    writer: mpsc::Sender<Job>,
    /// Joined on drop, so the file (and its lock) is free when the store is gone.
    writer_thread: Option<thread::JoinHandle<()>>,
    reader: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl Drop for SqliteStore {
    fn drop(&mut self) {
        // Closing the queue stops the writer once it has answered what was queued.
        let (closed, _) = mpsc::channel();
        drop(std::mem::replace(&mut self.writer, closed));
        if let Some(writer) = self.writer_thread.take() {
            // A panicked writer has nothing left to clean up.
            let _ = writer.join();
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and runs pending migrations.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, Synchronous::Full)
    }

    /// Opens with a chosen durability level.
    pub fn open_with(
        path: impl AsRef<Path>,
        synchronous: Synchronous,
    ) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with_limits(path, synchronous, checkpoint::Limits::default())
    }

    fn open_with_limits(
        path: impl AsRef<Path>,
        synchronous: Synchronous,
        checkpoints: checkpoint::Limits,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|error| {
                StoreError::Unavailable(format!("cannot create {}: {error}", parent.display()))
            })?;
        }
        let lock = lock(&path, LOCK_TIMEOUT)?;
        // SQLite itself runs with `synchronous = NORMAL` (no fsync per transaction; the WAL
        // is synced before checkpoints, the database after them). For `Full` the syncer
        // thread fsyncs the WAL after every batch before answering it.
        let mut connection = connect(&path)?;
        migrate(&mut connection)?;
        let reader = connect(&path)?;
        let checkpointer =
            checkpoint::Checkpointer::start(&connection, connect(&path)?, &path, checkpoints)
                .map_err(|error| {
                    StoreError::Internal(format!("cannot start WAL checkpointer: {error}"))
                })?;
        let (syncer, syncer_thread) = match synchronous {
            Synchronous::Normal => (None, None),
            Synchronous::Full => {
                let mut wal_path = path.clone().into_os_string();
                wal_path.push("-wal");
                let wal_path = PathBuf::from(wal_path);
                let (answers, queue) = mpsc::channel();
                let syncer = thread::Builder::new()
                    .name("colloquy-sqlite-syncer".to_owned())
                    .spawn(move || sync_loop(&wal_path, queue))
                    .map_err(|error| {
                        StoreError::Internal(format!("cannot start WAL syncer: {error}"))
                    })?;
                (Some(answers), Some(syncer))
            }
        };
        let (jobs, queue) = mpsc::channel();
        let writer = Writer {
            connection,
            versions: Remembered::default(),
            inbox_heads: Remembered::default(),
            recent: None,
            syncer,
            syncer_thread,
            checkpointer,
            _lock: lock,
        };
        let writer_thread = thread::Builder::new()
            .name("colloquy-sqlite-writer".to_owned())
            .spawn(move || writer.run(queue))
            .map_err(|error| StoreError::Internal(format!("cannot start writer: {error}")))?;
        Ok(SqliteStore {
            path,
            writer: jobs,
            writer_thread: Some(writer_thread),
            reader: Arc::new(Mutex::new(reader)),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn submit<T>(
        &self,
        job: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Job,
    ) -> Result<T, StoreError> {
        let (reply, answer) = oneshot::channel();
        self.writer
            .send(job(reply))
            .map_err(|_| StoreError::Unavailable("the SQLite writer has stopped".to_owned()))?;
        answer
            .await
            .map_err(|_| StoreError::Unavailable("the SQLite writer has stopped".to_owned()))?
    }

    async fn read<T: Send + 'static>(
        &self,
        query: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || {
            // A panic inside a query leaves the connection usable; keep going.
            let connection = reader
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            query(&connection)
        })
        .await
        .map_err(|error| StoreError::Internal(format!("reader task failed: {error}")))?
    }
}

/// Takes the exclusive advisory lock on `PATH.lock`, waiting up to `timeout` for a process
/// that is going away (the lock goes with its holder, also on `kill -9`).
fn lock(path: &Path, timeout: Duration) -> Result<File, StoreError> {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    let lock_path = path.with_file_name(name);
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|error| {
            StoreError::Unavailable(format!("cannot open {}: {error}", lock_path.display()))
        })?;
    let began = Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(std::fs::TryLockError::WouldBlock) if began.elapsed() < timeout => {
                thread::sleep(Duration::from_millis(50));
            }
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Unavailable(format!(
                    "{} is in use by another process (another `colloquy serve`?): \
                     one process owns a SQLite store; share one through Redis instead",
                    path.display()
                )));
            }
            Err(std::fs::TryLockError::Error(error)) => {
                return Err(StoreError::Unavailable(format!(
                    "cannot lock {}: {error}",
                    lock_path.display()
                )));
            }
        }
    }
}

fn connect(path: &Path) -> Result<Connection, StoreError> {
    let connection = Connection::open(path).map_err(|error| {
        StoreError::Unavailable(format!("cannot open {}: {error}", path.display()))
    })?;
    connection
        .execute_batch(&format!(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA busy_timeout = 5000;
             PRAGMA foreign_keys = OFF;
             PRAGMA cache_size = -{CACHE_KIB};
             PRAGMA temp_store = MEMORY;"
        ))
        .map_err(internal)?;
    Ok(connection)
}

/// The JSON bodies `sql` selects (its one column), decoded; `what` names one in an error.
fn json_bodies<T: serde::de::DeserializeOwned>(
    connection: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    what: &str,
) -> Result<Vec<T>, StoreError> {
    let mut statement = connection.prepare_cached(sql).map_err(internal)?;
    let bodies = statement
        .query_map(params, |row| row.get::<_, String>(0))
        .map_err(internal)?
        .collect::<Result<Vec<String>, _>>()
        .map_err(internal)?;
    bodies
        .iter()
        .map(|body| {
            serde_json::from_str(body)
                .map_err(|error| StoreError::Internal(format!("unreadable {what}: {error}")))
        })
        .collect()
}

fn internal(error: rusqlite::Error) -> StoreError {
    StoreError::Internal(error.to_string())
}

fn encode<T: serde::Serialize + ?Sized>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::Internal(error.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text)
        .map_err(|error| StoreError::Internal(format!("corrupt row: {error}")))
}

#[async_trait]
impl ConversationStore for SqliteStore {
    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        // Encoded here, on the caller's thread: the one writer thread only runs SQL.
        let commit = Encoded::new(commit)?;
        self.submit(|reply| Job::Commit(commit, reply)).await
    }

    async fn load(&self, id: &str) -> Result<Option<Vec<ConversationEvent>>, StoreError> {
        let id = id.to_owned();
        self.read(move |connection| {
            let exists: Option<i64> = connection
                .prepare_cached("SELECT version FROM conversations WHERE id = ?1")
                .and_then(|mut select| select.query_row(params![id], |row| row.get(0)).optional())
                .map_err(internal)?;
            if exists.is_none() {
                return Ok(None);
            }
            read_events(connection, &id, 0).map(Some)
        })
        .await
    }

    async fn events_after(
        &self,
        id: &str,
        after_seq: u64,
    ) -> Result<Vec<ConversationEvent>, StoreError> {
        let id = id.to_owned();
        self.read(move |connection| read_events(connection, &id, after_seq))
            .await
    }

    async fn claim_due(&self, now: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError> {
        self.submit(|reply| Job::ClaimDue(now, limit, reply)).await
    }

    async fn remove(&self, id: &str) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.submit(|reply| Job::Remove(id, reply)).await
    }

    async fn inbox_agents(&self) -> Result<Vec<AgentId>, StoreError> {
        self.read(|connection| inbox_agents(connection).map_err(internal))
            .await
    }

    async fn inbox_head(&self, agent: &str) -> Result<u64, StoreError> {
        let agent = agent.to_owned();
        self.read(move |connection| inbox_head(connection, &agent).map_err(internal))
            .await
    }

    async fn webhook_cursor(&self, agent: &str) -> Result<u64, StoreError> {
        let agent = agent.to_owned();
        self.read(move |connection| webhook_cursor(connection, &agent).map_err(internal))
            .await
    }

    async fn advance_webhook_cursor(&self, agent: &str, seq: u64) -> Result<(), StoreError> {
        let agent = agent.to_owned();
        self.submit(|reply| Job::AdvanceWebhookCursor(agent, seq, reply))
            .await
    }

    async fn remote_tasks(&self, agent: &str) -> Result<Vec<RemoteTask>, StoreError> {
        let agent = agent.to_owned();
        self.read(move |connection| remote_tasks(connection, &agent).map_err(internal))
            .await
    }

    async fn keep_remote_task(&self, agent: &str, task: &RemoteTask) -> Result<(), StoreError> {
        let (agent, task) = (agent.to_owned(), task.clone());
        self.submit(|reply| Job::KeepRemoteTask(agent, task, reply))
            .await
    }

    async fn push_configs(&self) -> Result<Vec<PushConfig>, StoreError> {
        self.read(|connection| {
            json_bodies(
                connection,
                "SELECT body FROM push_configs",
                [],
                "push config",
            )
        })
        .await
    }

    async fn keep_push_config(&self, config: &PushConfig) -> Result<(), StoreError> {
        let config = config.clone();
        self.submit(|reply| Job::KeepPushConfig(config, reply))
            .await
    }

    async fn agent_keys(&self, agent: &str) -> Result<Vec<AgentKey>, StoreError> {
        let agent = agent.to_owned();
        self.read(move |connection| {
            json_bodies(
                connection,
                "SELECT body FROM agent_keys WHERE agent = ?1",
                [&agent],
                "agent key",
            )
        })
        .await
    }

    async fn keep_agent_key(&self, key: &AgentKey) -> Result<(), StoreError> {
        let key = key.clone();
        self.submit(|reply| Job::KeepAgentKey(key, reply)).await
    }

    async fn forget_push_config(&self, conversation_id: &str, id: &str) -> Result<(), StoreError> {
        let (conversation, id) = (conversation_id.to_owned(), id.to_owned());
        self.submit(|reply| Job::ForgetPushConfig(conversation, id, reply))
            .await
    }

    async fn forget_remote_task(
        &self,
        agent: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        let (agent, conversation, message) = (
            agent.to_owned(),
            conversation_id.to_owned(),
            message_id.to_owned(),
        );
        self.submit(|reply| Job::ForgetRemoteTask(agent, conversation, message, reply))
            .await
    }

    async fn archive_revision(&self, revision: &ArchivedRevision) -> Result<(), StoreError> {
        let write = ArchiveWrite::revision(revision)?;
        self.submit(|reply| Job::Archive(write, reply)).await
    }

    async fn archive_module(&self, sha256: &str, bytes: &[u8]) -> Result<(), StoreError> {
        let write = ArchiveWrite::Module {
            sha256: sha256.to_owned(),
            bytes: bytes.to_vec(),
        };
        self.submit(|reply| Job::Archive(write, reply)).await
    }

    async fn archived_revisions(
        &self,
        template: Option<&str>,
    ) -> Result<Vec<ArchivedRevision>, StoreError> {
        let template = template.map(str::to_owned);
        self.read(move |connection| archive::revisions(connection, template.as_deref()))
            .await
    }

    async fn archived_revision(
        &self,
        template: &str,
        revision: &str,
    ) -> Result<Option<ArchivedRevision>, StoreError> {
        let (template, revision) = (template.to_owned(), revision.to_owned());
        self.read(move |connection| archive::revision(connection, &template, &revision))
            .await
    }

    async fn archived_module(&self, sha256: &str) -> Result<Option<Arc<[u8]>>, StoreError> {
        let sha256 = sha256.to_owned();
        self.read(move |connection| archive::module(connection, &sha256))
            .await
    }

    async fn record_activation(&self, activation: &Activation) -> Result<(), StoreError> {
        let write = ArchiveWrite::activation(activation)?;
        self.submit(|reply| Job::Archive(write, reply)).await
    }

    async fn activations(
        &self,
        template: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Activation>, StoreError> {
        let template = template.map(str::to_owned);
        self.read(move |connection| archive::activations(connection, template.as_deref(), limit))
            .await
    }

    async fn acknowledge(&self, agent: &str, through: u64) -> Result<(), StoreError> {
        loop {
            let agent = agent.to_owned();
            let complete = self
                .submit(|reply| Job::Acknowledge(agent, through, reply))
                .await?;
            if complete {
                return Ok(());
            }
        }
    }

    async fn inbox(
        &self,
        agent: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let agent = agent.to_owned();
        self.read(move |connection| {
            let mut select = connection
                .prepare_cached(
                    "SELECT entries.seq, entries.conversation_id,
                            coalesce(messages.body, entries.message)
                     FROM (SELECT seq, conversation_id, message, message_row FROM inbox
                           WHERE agent = ?1 AND seq > ?2
                           UNION ALL
                           SELECT seq, conversation_id, message, message_row FROM inbox_recent
                           WHERE agent = ?1 AND seq > ?2
                           ORDER BY seq LIMIT ?3) AS entries
                     LEFT JOIN messages ON messages.rowid = entries.message_row
                     ORDER BY entries.seq",
                )
                .map_err(internal)?;
            let rows = select
                .query_map(params![agent, to_sql(after_seq), limit as i64], |row| {
                    Ok((
                        row.get::<_, i64>(0)?,
                        row.get::<_, String>(1)?,
                        row.get::<_, String>(2)?,
                    ))
                })
                .map_err(internal)?;
            let mut entries = Vec::new();
            for row in rows {
                let (seq, conversation_id, message) = row.map_err(internal)?;
                let message: Message = decode(&message)?;
                entries.push(InboxEntry {
                    seq: from_sql(seq),
                    conversation_id: Arc::from(conversation_id),
                    message: Arc::new(message),
                });
            }
            Ok(entries)
        })
        .await
    }

    async fn conversations_of(&self, agent: &str) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        let agent = agent.to_owned();
        self.read(move |connection| {
            let mut select = connection
                .prepare_cached(
                    "SELECT conversation_id FROM parties WHERE agent = ?1
                     UNION
                     SELECT conversation_id FROM parties_recent WHERE agent = ?1
                     ORDER BY conversation_id",
                )
                .map_err(internal)?;
            let ids = select
                .query_map(params![agent], |row| row.get::<_, String>(0))
                .map_err(internal)?
                .map(|row| row.map(Arc::from))
                .collect::<Result<Vec<Arc<str>>, _>>()
                .map_err(internal)?;
            Ok(Some(ids))
        })
        .await
    }

    async fn conversation_ids(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        let after = after.unwrap_or_default().to_owned();
        self.read(move |connection| {
            // The primary key's order: a range scan, however many conversations there are.
            let mut select = connection
                .prepare_cached("SELECT id FROM conversations WHERE id > ?1 ORDER BY id LIMIT ?2")
                .map_err(internal)?;
            let ids = select
                .query_map(params![after, to_sql(limit as u64)], |row| {
                    row.get::<_, String>(0)
                })
                .map_err(internal)?
                .map(|row| row.map(Arc::from))
                .collect::<Result<Vec<Arc<str>>, _>>()
                .map_err(internal)?;
            Ok(Some(ids))
        })
        .await
    }

    async fn conversation_ids_before(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        let before = before.map(str::to_owned);
        self.read(move |connection| {
            // The primary key backwards: a range scan too.
            let mut select = connection
                .prepare_cached(
                    "SELECT id FROM conversations WHERE ?1 IS NULL OR id < ?1 \
                     ORDER BY id DESC LIMIT ?2",
                )
                .map_err(internal)?;
            let ids = select
                .query_map(params![before, to_sql(limit as u64)], |row| {
                    row.get::<_, String>(0)
                })
                .map_err(internal)?
                .map(|row| row.map(Arc::from))
                .collect::<Result<Vec<Arc<str>>, _>>()
                .map_err(internal)?;
            Ok(Some(ids))
        })
        .await
    }
}

/// The events after `after_seq`: the rows of the commits that reach past it, decoded, less
/// the events at or before it in the first of them.
fn read_events(
    connection: &Connection,
    id: &str,
    after_seq: u64,
) -> Result<Vec<ConversationEvent>, StoreError> {
    let mut select = connection
        .prepare_cached(
            "SELECT body FROM events WHERE conversation_id = ?1 AND last_seq > ?2
             ORDER BY last_seq",
        )
        .map_err(internal)?;
    let rows = select
        .query_map(params![id, to_sql(after_seq)], |row| {
            row.get::<_, String>(0)
        })
        .map_err(internal)?;
    let mut events = Vec::new();
    for row in rows {
        let batch: Vec<ConversationEvent> = decode(&row.map_err(internal)?)?;
        events.extend(batch.into_iter().filter(|event| event.seq > after_seq));
    }
    Ok(events)
}

#[cfg(test)]
mod tests;
