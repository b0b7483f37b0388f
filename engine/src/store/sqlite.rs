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

use super::{
    CLAIM_LEASE_MS, Commit, ConversationStore, InboxEntry, PushConfig, RemoteTask, StoreError,
};

mod checkpoint;

/// Most commits applied in one transaction. Bounds the latency a large batch adds to the
/// first commit in it.
pub const MAX_GROUP_COMMIT: usize = 512;

/// Most conversations (and, separately, inboxes) the writer remembers; past that it forgets
/// them all after a transaction and reads them back from the tables as they come up.
const MAX_REMEMBERED: usize = 200_000;

/// What the writer remembers per conversation or inbox.
type Remembered<K> = HashMap<K, u64, crate::keyed::Hasher>;

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

/// Schema migrations, in order; `PRAGMA user_version` records how many have run.
const MIGRATIONS: &[&str] = &[
    // 1: conversations with their version and next wake-up, the event log, inboxes.
    "CREATE TABLE conversations (
         id TEXT PRIMARY KEY,
         version INTEGER NOT NULL,
         wake_at INTEGER
     ) WITHOUT ROWID;
     CREATE INDEX conversations_wake ON conversations (wake_at) WHERE wake_at IS NOT NULL;
     CREATE TABLE events (
         conversation_id TEXT NOT NULL,
         seq INTEGER NOT NULL,
         body TEXT NOT NULL,
         PRIMARY KEY (conversation_id, seq)
     ) WITHOUT ROWID;
     CREATE TABLE inbox_heads (
         agent TEXT PRIMARY KEY,
         last_seq INTEGER NOT NULL
     ) WITHOUT ROWID;
     CREATE TABLE inbox (
         agent TEXT NOT NULL,
         seq INTEGER NOT NULL,
         conversation_id TEXT NOT NULL,
         message TEXT NOT NULL,
         PRIMARY KEY (agent, seq)
     ) WITHOUT ROWID;
     CREATE TABLE parties (
         agent TEXT NOT NULL,
         conversation_id TEXT NOT NULL,
         PRIMARY KEY (agent, conversation_id)
     ) WITHOUT ROWID;
     CREATE INDEX parties_conversation ON parties (conversation_id);",
    // 2: fewer pages written per transaction (each dirty page is a WAL frame).
    // - One `events` row per commit: its events as one JSON array, keyed by the
    //   conversation and the commit's last seq. A rowid table, so rows are appended in
    //   commit order (a batch dirties the pages it adds, not a page per active
    //   conversation), with an index for reads.
    // - New inbox entries and party rows go to `inbox_recent` and `parties_recent`, appended
    //   in commit order; the writer moves them into `inbox` and `parties` (clustered by
    //   agent) in bulk every `RECENT_ROWS` rows, so a batch does not dirty a page per agent.
    //   Reads look at both.
    // - Inbox sequences continue from the newest entry of each inbox (`max(seq)` over both
    //   tables; inboxes are never trimmed, and trimming must keep each agent's newest
    //   entry), so the separate heads table goes.
    "CREATE TABLE event_log (
         conversation_id TEXT NOT NULL,
         last_seq INTEGER NOT NULL,
         body TEXT NOT NULL
     );
     INSERT INTO event_log (conversation_id, last_seq, body)
         SELECT conversation_id, seq, '[' || body || ']' FROM events
         ORDER BY conversation_id, seq;
     DROP TABLE events;
     ALTER TABLE event_log RENAME TO events;
     CREATE UNIQUE INDEX events_by_conversation ON events (conversation_id, last_seq);
     DROP TABLE inbox_heads;
     CREATE TABLE inbox_recent (
         agent TEXT NOT NULL,
         seq INTEGER NOT NULL,
         conversation_id TEXT NOT NULL,
         message TEXT NOT NULL
     );
     CREATE INDEX inbox_recent_agent ON inbox_recent (agent, seq);
     CREATE TABLE parties_recent (
         agent TEXT NOT NULL,
         conversation_id TEXT NOT NULL
     );",
    // 3: a message delivered to several agents is stored once, in `messages`, and their
    //    inbox rows name it by rowid (`message_row`, with an empty `message`); a message for
    //    one agent stays in its inbox row. Before, a message to a thousand participants was
    //    written a thousand times.
    "CREATE TABLE messages (body TEXT NOT NULL);
     ALTER TABLE inbox ADD COLUMN message_row INTEGER;
     ALTER TABLE inbox_recent ADD COLUMN message_row INTEGER;",
    // 4: acknowledged inbox entries are deleted. `inbox_acks` keeps how far each agent has
    //    acknowledged, so its sequence goes on from there when the acknowledged entries
    //    were its newest; the partial indexes find, for a shared message, whether an entry
    //    still names it (only entries of shared messages are indexed).
    "CREATE TABLE inbox_acks (
         agent TEXT PRIMARY KEY,
         through INTEGER NOT NULL
     ) WITHOUT ROWID;
     CREATE INDEX inbox_message_row ON inbox (message_row) WHERE message_row IS NOT NULL;
     CREATE INDEX inbox_recent_message_row ON inbox_recent (message_row)
         WHERE message_row IS NOT NULL;",
    // 5: how far webhook delivery has got through each agent's inbox, so a restart goes on
    //    from there instead of pushing every unacknowledged entry again.
    "CREATE TABLE webhook_cursors (
         agent TEXT PRIMARY KEY,
         through INTEGER NOT NULL
     ) WITHOUT ROWID;",
    // 6: the tasks remote A2A agents are still running, so a restart goes on following them.
    "CREATE TABLE remote_tasks (
         agent TEXT NOT NULL,
         conversation_id TEXT NOT NULL,
         message_id TEXT NOT NULL,
         task_id TEXT NOT NULL,
         cancel_message_id TEXT,
         PRIMARY KEY (agent, conversation_id, message_id)
     ) WITHOUT ROWID;",
    // 7: where A2A clients want their tasks' updates pushed, and how far they have been.
    "CREATE TABLE push_configs (
         conversation_id TEXT NOT NULL,
         id TEXT NOT NULL,
         body TEXT NOT NULL,
         PRIMARY KEY (conversation_id, id)
     ) WITHOUT ROWID;",
    // 8: remote tasks that wait for the initiator's input (not polled; the next message
    //    goes into them).
    "ALTER TABLE remote_tasks ADD COLUMN awaits_input INTEGER NOT NULL DEFAULT 0;",
];

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
        let deliveries = super::by_message(&deliveries)
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
    ForgetPushConfig(String, String, oneshot::Sender<Result<(), StoreError>>),
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

fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
    let applied: usize = connection
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .map_err(internal)?;
    if applied > MIGRATIONS.len() {
        return Err(StoreError::Internal(format!(
            "database schema version {applied} is newer than this engine's {}",
            MIGRATIONS.len()
        )));
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(applied) {
        let transaction = connection.transaction().map_err(internal)?;
        transaction.execute_batch(migration).map_err(internal)?;
        transaction
            .pragma_update(None, "user_version", index + 1)
            .map_err(internal)?;
        transaction.commit().map_err(internal)?;
    }
    Ok(())
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

/// The writer thread's state: its connection and what it remembers of the tables.
struct Writer {
    connection: Connection,
    /// Conversation id → version (0: does not exist), as of the writer's last statement.
    versions: Remembered<Arc<str>>,
    /// Agent → last inbox sequence number written.
    inbox_heads: Remembered<AgentId>,
    /// Rows in the recent tables; `None`: count them.
    recent: Option<Recent>,
    /// For [`Synchronous::Full`]: where committed batches go to wait for their fsync.
    syncer: Option<mpsc::Sender<Vec<Answer>>>,
    /// Joined when the writer stops.
    syncer_thread: Option<thread::JoinHandle<()>>,
    /// Decides when the WAL is checkpointed, and mostly does it on its own thread.
    checkpointer: checkpoint::Checkpointer,
    /// Held for as long as the writer runs; see the module docs.
    _lock: File,
}

/// Rows waiting in `inbox_recent` and `parties_recent`.
#[derive(Clone, Copy, Debug, Default)]
struct Recent {
    inbox: usize,
    parties: usize,
}

impl Recent {
    fn count(connection: &Connection) -> Result<Recent, rusqlite::Error> {
        let rows = |table: &str| -> Result<usize, rusqlite::Error> {
            let rows: i64 =
                connection.query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                    row.get(0)
                })?;
            Ok(usize::try_from(rows).unwrap_or(0))
        };
        Ok(Recent {
            inbox: rows("inbox_recent")?,
            parties: rows("parties_recent")?,
        })
    }

    /// Moves the recent rows into the tables clustered by agent once there are enough.
    fn settle(&mut self, connection: &Connection) -> Result<(), rusqlite::Error> {
        if self.inbox >= RECENT_ROWS {
            move_recent_inbox(connection)?;
            self.inbox = 0;
        }
        if self.parties >= RECENT_ROWS {
            connection.execute_batch(
                "INSERT OR IGNORE INTO parties (agent, conversation_id)
                     SELECT agent, conversation_id FROM parties_recent
                     ORDER BY agent, conversation_id;
                 DELETE FROM parties_recent;",
            )?;
            self.parties = 0;
        }
        Ok(())
    }
}

/// Moves every row of `inbox_recent` into `inbox`, clustered by agent.
fn move_recent_inbox(connection: &Connection) -> Result<(), rusqlite::Error> {
    connection.execute_batch(
        "INSERT INTO inbox (agent, seq, conversation_id, message, message_row)
             SELECT agent, seq, conversation_id, message, message_row FROM inbox_recent
             ORDER BY agent, seq;
         DELETE FROM inbox_recent;",
    )
}

enum Answer {
    Commit(
        oneshot::Sender<Result<(), StoreError>>,
        Result<(), StoreError>,
    ),
    Claim(
        oneshot::Sender<Result<Vec<Arc<str>>, StoreError>>,
        Result<Vec<Arc<str>>, StoreError>,
    ),
    /// A job whose answer is only that it was applied: a removal, a webhook cursor.
    Done(
        oneshot::Sender<Result<(), StoreError>>,
        Result<(), StoreError>,
    ),
    Acknowledge(
        oneshot::Sender<Result<bool, StoreError>>,
        Result<bool, StoreError>,
    ),
}

impl Writer {
    /// Waits for a job, takes every job queued behind it, applies them in one transaction,
    /// answers them all.
    fn run(mut self, queue: mpsc::Receiver<Job>) {
        while let Ok(first) = queue.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_GROUP_COMMIT {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.apply_batch(batch);
        }
        // Let the syncer answer what it holds, then stop.
        self.syncer = None;
        if let Some(syncer) = self.syncer_thread.take() {
            // A panicked syncer has nothing left to clean up.
            let _ = syncer.join();
        }
    }

    fn apply_batch(&mut self, batch: Vec<Job>) {
        let mut answers = Vec::with_capacity(batch.len());
        let Writer {
            connection,
            versions,
            inbox_heads,
            recent,
            ..
        } = self;
        let outcome = (|| -> Result<Recent, rusqlite::Error> {
            let transaction = connection.transaction()?;
            let mut counts = match *recent {
                Some(counts) => counts,
                None => Recent::count(&transaction)?,
            };
            for job in batch {
                answers.push(match job {
                    Job::Commit(commit, reply) => {
                        let result =
                            apply_commit(&transaction, versions, inbox_heads, &mut counts, commit)?;
                        Answer::Commit(reply, result)
                    }
                    Job::ClaimDue(now, limit, reply) => {
                        Answer::Claim(reply, Ok(claim_due(&transaction, now, limit)?))
                    }
                    Job::Remove(id, reply) => {
                        remove(&transaction, &id)?;
                        versions.insert(Arc::from(id), 0);
                        Answer::Done(reply, Ok(()))
                    }
                    Job::Acknowledge(agent, through, reply) => {
                        let complete = acknowledge(&transaction, &agent, through, &mut counts)?;
                        Answer::Acknowledge(reply, Ok(complete))
                    }
                    Job::AdvanceWebhookCursor(agent, seq, reply) => {
                        advance_webhook_cursor(&transaction, &agent, seq)?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::KeepRemoteTask(agent, task, reply) => {
                        keep_remote_task(&transaction, &agent, &task)?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::KeepPushConfig(config, reply) => {
                        let body = serde_json::to_string(&config).unwrap_or_default();
                        transaction
                            .prepare_cached(
                                "INSERT OR REPLACE INTO push_configs (conversation_id, id, body)
                                 VALUES (?1, ?2, ?3)",
                            )?
                            .execute(params![&*config.conversation_id, config.id, body])?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::ForgetPushConfig(conversation, id, reply) => {
                        transaction
                            .prepare_cached(
                                "DELETE FROM push_configs WHERE conversation_id = ?1 AND id = ?2",
                            )?
                            .execute(params![conversation, id])?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::ForgetRemoteTask(agent, conversation, message, reply) => {
                        transaction
                            .prepare_cached(
                                "DELETE FROM remote_tasks
                                 WHERE agent = ?1 AND conversation_id = ?2 AND message_id = ?3",
                            )?
                            .execute(params![agent, conversation, message])?;
                        Answer::Done(reply, Ok(()))
                    }
                });
            }
            counts.settle(&transaction)?;
            transaction.commit()?;
            Ok(counts)
        })();
        *recent = outcome.as_ref().ok().copied();
        let outcome = outcome.map(|_| ());
        if outcome.is_err() || versions.len() > MAX_REMEMBERED {
            // Rolled back: what the maps say of this batch never happened.
            versions.clear();
        }
        if outcome.is_err() || inbox_heads.len() > MAX_REMEMBERED {
            inbox_heads.clear();
        }
        match outcome {
            Ok(()) => match &self.syncer {
                // Answered once the WAL is on disk.
                Some(syncer) => {
                    if let Err(mpsc::SendError(answers)) = syncer.send(answers) {
                        send_answers(answers, Some("the WAL syncer has stopped"));
                    }
                }
                None => send_answers(answers, None),
            },
            Err(error) => {
                tracing::error!(%error, "SQLite transaction failed; its commits were refused");
                send_answers(answers, Some(&format!("SQLite write failed: {error}")));
                return;
            }
        }
        self.checkpointer.after_commit(&self.connection);
    }
}

/// Answers every job of a batch: with its result, or all with
/// [`StoreError::Unavailable`] for `failure`.
fn send_answers(answers: Vec<Answer>, failure: Option<&str>) {
    let refused = || StoreError::Unavailable(failure.unwrap_or_default().to_owned());
    for answer in answers {
        // A dropped receiver means its caller went away; nothing to tell.
        match (answer, failure) {
            (Answer::Commit(reply, result), None) => drop(reply.send(result)),
            (Answer::Claim(reply, result), None) => drop(reply.send(result)),
            (Answer::Done(reply, result), None) => drop(reply.send(result)),
            (Answer::Acknowledge(reply, result), None) => drop(reply.send(result)),
            (Answer::Commit(reply, _), Some(_)) => drop(reply.send(Err(refused()))),
            (Answer::Claim(reply, _), Some(_)) => drop(reply.send(Err(refused()))),
            (Answer::Done(reply, _), Some(_)) => drop(reply.send(Err(refused()))),
            (Answer::Acknowledge(reply, _), Some(_)) => drop(reply.send(Err(refused()))),
        }
    }
}

/// The WAL syncer of [`Synchronous::Full`]: takes the answers of every batch the writer has
/// committed (with `synchronous = NORMAL`: written to the WAL, not yet synced), syncs the
/// WAL file once for all of them and answers them. The writer meanwhile applies the next
/// batch, so the fsync no longer stalls it.
fn sync_loop(wal_path: &Path, queue: mpsc::Receiver<Vec<Answer>>) {
    let mut wal: Option<File> = None;
    while let Ok(mut answers) = queue.recv() {
        while let Ok(more) = queue.try_recv() {
            answers.extend(more);
        }
        let synced = match &wal {
            Some(file) => file.sync_data(),
            None => match File::options().write(true).open(wal_path) {
                Ok(file) => file.sync_data().map(|()| wal = Some(file)),
                // No WAL yet: the batch wrote nothing (every commit in it was refused).
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(error) => Err(error),
            },
        };
        match synced {
            Ok(()) => send_answers(answers, None),
            Err(error) => {
                tracing::error!(%error, "cannot sync the SQLite WAL; its commits were refused");
                send_answers(answers, Some(&format!("cannot sync the WAL: {error}")));
            }
        }
    }
}

/// The stored version of a conversation, 0 if there is none.
fn stored_version(connection: &Connection, id: &str) -> Result<u64, rusqlite::Error> {
    let version: Option<i64> = connection
        .prepare_cached("SELECT version FROM conversations WHERE id = ?1")?
        .query_row(params![id], |row| row.get(0))
        .optional()?;
    Ok(version.map(from_sql).unwrap_or(0))
}

/// Applies one commit. The outer error is an SQL failure, which fails the whole batch; the
/// inner one refuses this commit, before any of its statements ran.
fn apply_commit(
    connection: &Connection,
    versions: &mut Remembered<Arc<str>>,
    inbox_heads: &mut Remembered<AgentId>,
    recent: &mut Recent,
    commit: Encoded,
) -> Result<Result<(), StoreError>, rusqlite::Error> {
    let id = &commit.conversation_id;
    let known = versions.get(&**id).copied();
    if commit.expected_version == 0 {
        if known.is_some_and(|version| version != 0) {
            return Ok(Err(StoreError::Duplicate(id.clone())));
        }
        let inserted = connection
            .prepare_cached(
                "INSERT INTO conversations (id, version, wake_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO NOTHING",
            )?
            .execute(params![&**id, to_sql(commit.new_version), commit.wake_at])?;
        if inserted == 0 {
            versions.insert(id.clone(), stored_version(connection, id)?);
            return Ok(Err(StoreError::Duplicate(id.clone())));
        }
        let mut insert_party = connection.prepare_cached(
            "INSERT INTO parties_recent (agent, conversation_id) VALUES (?1, ?2)",
        )?;
        for agent in &commit.parties {
            insert_party.execute(params![&**agent, &**id])?;
            recent.parties += 1;
        }
    } else {
        let actual = match known {
            Some(version) => version,
            None => stored_version(connection, id)?,
        };
        if actual != commit.expected_version {
            versions.insert(id.clone(), actual);
            return Ok(Err(StoreError::Conflict {
                id: id.clone(),
                expected: commit.expected_version,
                actual,
            }));
        }
        let updated = connection
            .prepare_cached("UPDATE conversations SET version = ?1, wake_at = ?2 WHERE id = ?3")?
            .execute(params![to_sql(commit.new_version), commit.wake_at, &**id])?;
        if updated == 0 {
            // The map said it exists and the table says it does not: something else wrote
            // the file. Nothing of this commit ran; forget what was remembered.
            versions.remove(&**id);
            return Ok(Err(StoreError::Internal(format!(
                "conversation `{id}` vanished from the database"
            ))));
        }
    }
    versions.insert(id.clone(), commit.new_version);
    if let Some(events) = &commit.events {
        connection
            .prepare_cached(
                "INSERT INTO events (conversation_id, last_seq, body) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![&**id, to_sql(commit.new_version), events])?;
    }
    if !commit.deliveries.is_empty() {
        let mut insert_entry = connection.prepare_cached(
            "INSERT INTO inbox_recent (agent, seq, conversation_id, message, message_row)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (message, receivers) in &commit.deliveries {
            // Inline for one receiver (the common case: no extra row); stored once and
            // named for several.
            let (inline, row) = if receivers.len() > 1 {
                connection
                    .prepare_cached("INSERT INTO messages (body) VALUES (?1)")?
                    .execute(params![message])?;
                ("", Some(connection.last_insert_rowid()))
            } else {
                (message.as_str(), None)
            };
            for (agent, conversation_id) in receivers {
                let seq = match inbox_heads.get(&**agent) {
                    Some(head) => head + 1,
                    None => inbox_head(connection, agent)? + 1,
                };
                insert_entry.execute(params![
                    &**agent,
                    to_sql(seq),
                    &**conversation_id,
                    inline,
                    row
                ])?;
                inbox_heads.insert(agent.clone(), seq);
                recent.inbox += 1;
            }
        }
    }
    Ok(Ok(()))
}

/// The last sequence number of `agent`'s inbox (its newest entry, or what it acknowledged
/// when that was newer), 0 if it never had one.
/// The agents with entries in either inbox table. Each table is walked agent by agent down
/// its `(agent, seq)` index (a "skip scan": one index lookup per agent), not entry by entry.
fn inbox_agents(connection: &Connection) -> Result<Vec<AgentId>, rusqlite::Error> {
    let mut agents = std::collections::BTreeSet::new();
    for table in ["inbox", "inbox_recent"] {
        let mut select = connection.prepare_cached(&format!(
            "WITH RECURSIVE agents (agent) AS (
                 SELECT min(agent) FROM {table}
                 UNION ALL
                 SELECT (SELECT min(agent) FROM {table} WHERE agent > agents.agent)
                 FROM agents WHERE agents.agent IS NOT NULL)
             SELECT agent FROM agents WHERE agent IS NOT NULL"
        ))?;
        for agent in select.query_map([], |row| row.get::<_, String>(0))? {
            agents.insert(agent?);
        }
    }
    Ok(agents.into_iter().map(AgentId::from).collect())
}

fn inbox_head(connection: &Connection, agent: &str) -> Result<u64, rusqlite::Error> {
    let head: Option<i64> = connection
        .prepare_cached(
            "SELECT max(coalesce((SELECT max(seq) FROM inbox WHERE agent = ?1), 0),
                        coalesce((SELECT max(seq) FROM inbox_recent WHERE agent = ?1), 0),
                        coalesce((SELECT through FROM inbox_acks WHERE agent = ?1), 0))",
        )?
        .query_row(params![agent], |row| row.get(0))?;
    Ok(head.map(from_sql).unwrap_or(0))
}

/// Hands out due wake-ups by moving them [`CLAIM_LEASE_MS`] ahead: the claimer's commit
/// replaces the lease, and a claimer that died leaves it to fire again.
fn claim_due(
    connection: &Connection,
    now: u64,
    limit: usize,
) -> Result<Vec<Arc<str>>, rusqlite::Error> {
    let mut select = connection.prepare_cached(
        "SELECT id FROM conversations WHERE wake_at IS NOT NULL AND wake_at <= ?1
         ORDER BY wake_at LIMIT ?2",
    )?;
    let ids: Vec<String> = select
        .query_map(params![to_sql(now), limit as i64], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let mut clear =
        connection.prepare_cached("UPDATE conversations SET wake_at = ?2 WHERE id = ?1")?;
    let lease = to_sql(now.saturating_add(CLAIM_LEASE_MS));
    for id in &ids {
        clear.execute(params![id, lease])?;
    }
    Ok(ids.into_iter().map(Arc::from).collect())
}

fn remove(connection: &Connection, id: &str) -> Result<(), rusqlite::Error> {
    for statement in [
        "DELETE FROM events WHERE conversation_id = ?1",
        "DELETE FROM conversations WHERE id = ?1",
        "DELETE FROM parties WHERE conversation_id = ?1",
        "DELETE FROM parties_recent WHERE conversation_id = ?1",
    ] {
        connection.prepare_cached(statement)?.execute(params![id])?;
    }
    Ok(())
}

/// Deletes `agent`'s inbox entries up to `through`, at most [`ACK_BATCH`] of them, and the
/// shared messages no entry names any more, and records how far it got so the sequence goes
/// on after it. True when it got to `through`; the caller sends the rest as another job.
fn acknowledge(
    connection: &Connection,
    agent: &str,
    through: u64,
    recent: &mut Recent,
) -> Result<bool, rusqlite::Error> {
    let oldest: Option<i64> = connection
        .prepare_cached(
            "SELECT min(coalesce((SELECT min(seq) FROM inbox WHERE agent = ?1), ?2),
                        coalesce((SELECT min(seq) FROM inbox_recent WHERE agent = ?1), ?2))",
        )?
        .query_row(params![agent, to_sql(through)], |row| row.get(0))?;
    // Sequences have no gaps but those acknowledgements left below the oldest entry, so
    // this bounds the entries deleted.
    let upto = oldest.map_or(through, |oldest| {
        through.min(from_sql(oldest).saturating_add(ACK_BATCH - 1))
    });
    let complete = upto == through;
    let through = to_sql(upto);
    let shared: Vec<i64> = connection
        .prepare_cached(
            "SELECT message_row FROM inbox
             WHERE agent = ?1 AND seq <= ?2 AND message_row IS NOT NULL
             UNION
             SELECT message_row FROM inbox_recent
             WHERE agent = ?1 AND seq <= ?2 AND message_row IS NOT NULL",
        )?
        .query_map(params![agent, through], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    connection
        .prepare_cached("DELETE FROM inbox WHERE agent = ?1 AND seq <= ?2")?
        .execute(params![agent, through])?;
    let recent_deleted = connection
        .prepare_cached("DELETE FROM inbox_recent WHERE agent = ?1 AND seq <= ?2")?
        .execute(params![agent, through])?;
    recent.inbox = recent.inbox.saturating_sub(recent_deleted);
    let mut unnamed = connection.prepare_cached(
        "DELETE FROM messages WHERE rowid = ?1
             AND NOT EXISTS (SELECT 1 FROM inbox WHERE message_row = ?1)
             AND NOT EXISTS (SELECT 1 FROM inbox_recent WHERE message_row = ?1)",
    )?;
    for row in shared {
        unnamed.execute(params![row])?;
    }
    connection
        .prepare_cached(
            "INSERT INTO inbox_acks (agent, through) VALUES (?1, ?2)
             ON CONFLICT (agent) DO UPDATE SET through = max(through, excluded.through)",
        )?
        .execute(params![agent, through])?;
    Ok(complete)
}

/// How far webhook delivery has got through `agent`'s inbox, 0 before the first push.
fn webhook_cursor(connection: &Connection, agent: &str) -> Result<u64, rusqlite::Error> {
    let through: Option<i64> = connection
        .prepare_cached("SELECT through FROM webhook_cursors WHERE agent = ?1")?
        .query_row(params![agent], |row| row.get(0))
        .optional()?;
    Ok(through.map(from_sql).unwrap_or(0))
}

/// Moves `agent`'s webhook cursor to `seq` unless it is further already.
fn advance_webhook_cursor(
    connection: &Connection,
    agent: &str,
    seq: u64,
) -> Result<(), rusqlite::Error> {
    connection
        .prepare_cached(
            "INSERT INTO webhook_cursors (agent, through) VALUES (?1, ?2)
             ON CONFLICT (agent) DO UPDATE SET through = max(through, excluded.through)",
        )?
        .execute(params![agent, to_sql(seq)])?;
    Ok(())
}

/// Records `agent`'s `task`, replacing the record for the same conversation and message.
fn keep_remote_task(
    connection: &Connection,
    agent: &str,
    task: &RemoteTask,
) -> Result<(), rusqlite::Error> {
    connection
        .prepare_cached(
            "INSERT OR REPLACE INTO remote_tasks
                 (agent, conversation_id, message_id, task_id, cancel_message_id, awaits_input)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            agent,
            &*task.conversation_id,
            &*task.message_id,
            task.task_id,
            task.cancel.as_deref(),
            task.awaits_input
        ])?;
    Ok(())
}

/// `agent`'s remote tasks.
fn remote_tasks(connection: &Connection, agent: &str) -> Result<Vec<RemoteTask>, rusqlite::Error> {
    connection
        .prepare_cached(
            "SELECT conversation_id, message_id, task_id, cancel_message_id, awaits_input
             FROM remote_tasks WHERE agent = ?1",
        )?
        .query_map(params![agent], |row| {
            Ok(RemoteTask {
                conversation_id: Arc::from(row.get::<_, String>(0)?),
                message_id: Arc::from(row.get::<_, String>(1)?),
                task_id: row.get(2)?,
                cancel: row.get::<_, Option<String>>(3)?.map(Arc::from),
                awaits_input: row.get(4)?,
            })
        })?
        .collect()
}

/// SQLite integers are signed; times and versions stay far below `i64::MAX`.
fn to_sql(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn from_sql(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
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
            let mut statement = connection
                .prepare_cached("SELECT body FROM push_configs")
                .map_err(internal)?;
            let bodies = statement
                .query_map([], |row| row.get::<_, String>(0))
                .map_err(internal)?
                .collect::<Result<Vec<String>, _>>()
                .map_err(internal)?;
            bodies
                .iter()
                .map(|body| {
                    serde_json::from_str(body).map_err(|error| {
                        StoreError::Internal(format!("unreadable push config: {error}"))
                    })
                })
                .collect()
        })
        .await
    }

    async fn keep_push_config(&self, config: &PushConfig) -> Result<(), StoreError> {
        let config = config.clone();
        self.submit(|reply| Job::KeepPushConfig(config, reply))
            .await
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
mod tests {

    use super::*;
    use crate::store::Delivery;
    use crate::store::fixtures::{
        accepted, assert_a_large_acknowledgement_leaves_the_rest,
        assert_a_message_to_several_reaches_each, assert_acknowledged_entries_go,
        assert_conversation_ids_page_in_order, assert_inbox_agents_are_listed,
        assert_refuses_stale_writes, assert_remote_tasks_are_kept_replaced_and_forgotten,
        assert_webhook_cursors_only_advance, commit, message, remote_task, started,
    };

    fn temp_db(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "colloquy-sqlite-{}-{name}-{}",
            std::process::id(),
            uuid::Uuid::now_v7()
        ));
        dir.join("colloquy.db")
    }

    /// A message to several agents is one `messages` row that their inbox rows name, and
    /// reads the same from each inbox, before and after the rows move to `inbox` and across
    /// a reopen; a message to one agent stays in its row.
    #[tokio::test]
    async fn a_message_to_several_agents_is_stored_once() {
        let path = temp_db("shared");
        {
            let store = SqliteStore::open(&path).expect("open");
            assert_a_message_to_several_reaches_each(&store, "c1").await;
        }
        let connection = Connection::open(&path).expect("open the file");
        let count = |sql: &str| -> i64 {
            connection
                .query_row(sql, [], |row| row.get(0))
                .expect("count")
        };
        assert_eq!(count("SELECT count(*) FROM messages"), 1);
        assert_eq!(
            count("SELECT count(*) FROM inbox_recent WHERE message = '' AND message_row = 1"),
            3
        );
        assert_eq!(
            count("SELECT count(*) FROM inbox_recent WHERE message <> '' AND message_row IS NULL"),
            1
        );
        // Moved in bulk into `inbox` (as every RECENT_ROWS rows), still read through.
        move_recent_inbox(&connection).expect("settle");
        drop(connection);
        let store = SqliteStore::open(&path).expect("reopen");
        let carol = store.inbox("carol", 0, 10).await.expect("inbox");
        assert_eq!(carol.len(), 1);
        assert_eq!(&*carol[0].message.id, "to-all");
        assert_eq!(carol[0].message.receivers.len(), 3);
        let bob = store.inbox("bob", 1, 10).await.expect("inbox");
        assert_eq!(&*bob[0].message.id, "to-bob");
    }

    /// Acknowledged entries are deleted from both inbox tables, a shared message with the
    /// last entry naming it, and an inbox emptied by acknowledgements goes on numbering
    /// from its head after a reopen.
    #[tokio::test]
    async fn acknowledged_entries_and_unnamed_shared_messages_are_deleted() {
        let path = temp_db("ack");
        {
            let store = SqliteStore::open(&path).expect("open");
            assert_a_message_to_several_reaches_each(&store, "c1").await;
        }
        // The entries so far in `inbox` (moved as every RECENT_ROWS rows); later ones stay
        // in `inbox_recent`.
        let connection = Connection::open(&path).expect("open the file");
        move_recent_inbox(&connection).expect("settle");
        let messages = || -> i64 {
            connection
                .query_row("SELECT count(*) FROM messages", [], |row| row.get(0))
                .expect("count")
        };
        let store = SqliteStore::open(&path).expect("reopen");
        assert_acknowledged_entries_go(&store, "c1", |stored| {
            let rows = messages();
            async move { assert_eq!(rows, i64::from(stored), "shared message rows") }
        })
        .await;
        store.acknowledge("bob", 3).await.expect("ack");
        drop(store);
        let count = |sql: &str| -> i64 {
            connection
                .query_row(sql, [], |row| row.get(0))
                .expect("count")
        };
        assert_eq!(count("SELECT count(*) FROM inbox"), 0);
        assert_eq!(count("SELECT count(*) FROM inbox_recent"), 0);
        let store = SqliteStore::open(&path).expect("reopen");
        assert_eq!(store.inbox_head("bob").await.expect("head"), 3);
        store
            .commit(commit("c1", 4, vec![accepted(5, "after-reopen")], None))
            .await
            .expect("commit");
        let bob = store.inbox("bob", 0, 10).await.expect("inbox");
        assert_eq!(bob.iter().map(|entry| entry.seq).collect::<Vec<_>>(), [4]);
    }

    /// An acknowledgement of more entries than one job deletes takes several, and leaves the
    /// rest.
    #[tokio::test]
    async fn a_large_acknowledgement_runs_in_batches() {
        let store = SqliteStore::open(temp_db("ack-batches")).expect("open");
        assert_a_large_acknowledgement_leaves_the_rest(&store, "c1", ACK_BATCH).await;
    }

    #[tokio::test]
    async fn conversation_ids_page_in_order() {
        let store = SqliteStore::open(temp_db("ids")).expect("open");
        assert_conversation_ids_page_in_order(&store).await;
    }

    /// A restarted engine's webhook delivery goes on where the last one got.
    #[tokio::test]
    async fn webhook_cursors_only_advance_and_survive_a_reopen() {
        let path = temp_db("webhook-cursors");
        {
            let store = SqliteStore::open(&path).expect("open");
            assert_webhook_cursors_only_advance(&store).await;
        }
        let store = SqliteStore::open(&path).expect("reopen");
        assert_eq!(store.webhook_cursor("bob").await.expect("cursor"), 3);
    }

    #[tokio::test]
    async fn agents_with_inbox_entries_are_listed_also_after_a_reopen() {
        let path = temp_db("inbox-agents");
        {
            let store = SqliteStore::open(&path).expect("open");
            assert_inbox_agents_are_listed(&store, "c1").await;
        }
        let store = SqliteStore::open(&path).expect("reopen");
        let mut listed = store.inbox_agents().await.expect("agents");
        listed.sort();
        assert_eq!(listed, ["bob", "dave"].map(AgentId::from));
    }

    #[tokio::test]
    async fn push_configs_are_kept_replaced_forgotten_and_survive_a_reopen() {
        let path = temp_db("push-configs");
        {
            let store = SqliteStore::open(&path).expect("open");
            super::super::fixtures::assert_push_configs_are_kept_replaced_and_forgotten(&store)
                .await;
        }
        let store = SqliteStore::open(&path).expect("reopen");
        let mut configs = store.push_configs().await.expect("configs");
        configs.sort_by(|a, b| a.conversation_id.cmp(&b.conversation_id));
        assert_eq!(
            configs,
            [
                super::super::fixtures::push_config("c1", "p1", 3),
                super::super::fixtures::push_config("c2", "p1", 0),
            ]
        );
    }

    #[tokio::test]
    async fn remote_tasks_are_kept_replaced_forgotten_and_survive_a_reopen() {
        let path = temp_db("remote-tasks");
        {
            let store = SqliteStore::open(&path).expect("open");
            assert_remote_tasks_are_kept_replaced_and_forgotten(&store).await;
        }
        let store = SqliteStore::open(&path).expect("reopen");
        let mut tasks = store.remote_tasks("bob").await.expect("tasks");
        tasks.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        assert_eq!(
            tasks,
            vec![
                RemoteTask {
                    cancel: Some(Arc::from("m9")),
                    ..remote_task("c1", "m1", "t-2")
                },
                RemoteTask {
                    awaits_input: true,
                    ..remote_task("c2", "m1", "t-3")
                }
            ]
        );
    }

    #[tokio::test]
    async fn commits_are_durable_across_reopen_and_versions_are_checked() {
        let path = temp_db("durable");
        {
            let store = SqliteStore::open(&path).expect("open");
            store
                .commit(commit("c1", 0, vec![started("c1")], Some(100)))
                .await
                .expect("create");
            store
                .commit(commit("c1", 1, vec![accepted(2, "m1")], Some(50)))
                .await
                .expect("append");
            assert_refuses_stale_writes(&store, "c1", 2).await;
        }
        let store = SqliteStore::open(&path).expect("reopen");
        let events = store.load("c1").await.expect("load").expect("exists");
        assert_eq!(events.len(), 2);
        assert_eq!(events[1], accepted(2, "m1"));
        assert_eq!(store.events_after("c1", 1).await.expect("after").len(), 1);
        assert!(store.load("nope").await.expect("load").is_none());
        let inbox = store.inbox("bob", 0, 10).await.expect("inbox");
        assert_eq!(inbox.len(), 1);
        assert_eq!(inbox[0].seq, 1);
        assert_eq!(&*inbox[0].message.id, "m1");
        assert!(store.inbox("bob", 1, 10).await.expect("inbox").is_empty());
    }

    #[tokio::test]
    async fn due_wake_ups_are_claimed_once() {
        let store = SqliteStore::open(temp_db("claim")).expect("open");
        store
            .commit(commit("early", 0, vec![started("early")], Some(100)))
            .await
            .expect("c");
        store
            .commit(commit("late", 0, vec![started("late")], Some(500)))
            .await
            .expect("c");
        assert_eq!(
            store.claim_due(99, 10).await.expect("claim"),
            Vec::<Arc<str>>::new()
        );
        assert_eq!(
            store.claim_due(100, 10).await.expect("claim"),
            vec![Arc::from("early")]
        );
        assert!(
            store.claim_due(200, 10).await.expect("claim").is_empty(),
            "claimed once"
        );
        store.remove("late").await.expect("remove");
        // The claimer committed: its commit replaced the lease with the next wake-up.
        store
            .commit(commit("early", 1, Vec::new(), Some(2_000)))
            .await
            .expect("commit");
        assert!(store.claim_due(1_000, 10).await.expect("claim").is_empty());
        assert!(store.load("late").await.expect("load").is_none());
        assert_eq!(
            store.claim_due(2_000, 10).await.expect("claim"),
            vec![Arc::from("early")]
        );
    }

    #[tokio::test]
    async fn a_claim_whose_claimer_died_is_handed_out_again_after_the_lease() {
        let store = SqliteStore::open(temp_db("lease")).expect("open");
        store
            .commit(commit("c", 0, vec![started("c")], Some(100)))
            .await
            .expect("c");
        assert_eq!(store.claim_due(100, 10).await.expect("claim").len(), 1);
        // No commit follows (the node died): the entry comes back after the lease only.
        let lease_end = 100 + CLAIM_LEASE_MS;
        assert!(
            store
                .claim_due(lease_end - 1, 10)
                .await
                .expect("claim")
                .is_empty()
        );
        assert_eq!(
            store.claim_due(lease_end, 10).await.expect("claim"),
            vec![Arc::from("c")]
        );
    }

    #[tokio::test]
    async fn parties_are_indexed_for_commitment_lookups() {
        let store = SqliteStore::open(temp_db("parties")).expect("open");
        store
            .commit(commit("b-conv", 0, vec![started("b-conv")], None))
            .await
            .expect("c");
        store
            .commit(commit("a-conv", 0, vec![started("a-conv")], None))
            .await
            .expect("c");
        let ids = |list: Option<Vec<Arc<str>>>| list.expect("indexed");
        assert_eq!(
            ids(store.conversations_of("bob").await.expect("query")),
            vec![Arc::from("a-conv"), Arc::from("b-conv")]
        );
        assert_eq!(
            ids(store.conversations_of("alice").await.expect("query")).len(),
            2
        );
        assert!(ids(store.conversations_of("carol").await.expect("query")).is_empty());
        store.remove("a-conv").await.expect("remove");
        assert_eq!(
            ids(store.conversations_of("bob").await.expect("query")),
            vec![Arc::from("b-conv")]
        );
    }

    #[tokio::test]
    async fn concurrent_commits_are_grouped_and_all_answered() {
        let store = Arc::new(SqliteStore::open(temp_db("group")).expect("open"));
        let mut tasks = Vec::new();
        for n in 0..64 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                let id = format!("c{n}");
                store.commit(commit(&id, 0, vec![started(&id)], None)).await
            }));
        }
        for task in tasks {
            task.await.expect("task").expect("commit");
        }
        for n in 0..64 {
            assert!(store.load(&format!("c{n}")).await.expect("load").is_some());
        }
    }

    /// Stores `events` (and bob's inbox entries for the accepted messages) the way schema
    /// version 1 did: one row per event, inbox heads in their own table.
    fn write_version_1(path: &Path, id: &str, events: &[ConversationEvent]) {
        std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
        let connection = Connection::open(path).expect("open");
        connection.execute_batch(MIGRATIONS[0]).expect("schema 1");
        connection
            .pragma_update(None, "user_version", 1)
            .expect("version");
        connection
            .execute(
                "INSERT INTO conversations (id, version, wake_at) VALUES (?1, ?2, 100)",
                params![id, events.len() as i64],
            )
            .expect("conversation");
        let mut inbox = 0;
        for event in events {
            connection
                .execute(
                    "INSERT INTO events (conversation_id, seq, body) VALUES (?1, ?2, ?3)",
                    params![id, event.seq as i64, encode(event).expect("json")],
                )
                .expect("event");
            if let EventKind::MessageAccepted { message, .. } = &event.kind {
                inbox += 1;
                connection
                    .execute(
                        "INSERT INTO inbox (agent, seq, conversation_id, message)
                         VALUES ('bob', ?1, ?2, ?3)",
                        params![inbox, id, encode(&**message).expect("json")],
                    )
                    .expect("inbox");
            }
        }
        connection
            .execute(
                "INSERT INTO inbox_heads (agent, last_seq) VALUES ('bob', ?1)",
                params![inbox],
            )
            .expect("head");
    }

    #[tokio::test]
    async fn a_version_1_database_is_migrated_with_its_events_and_inbox_sequences() {
        let path = temp_db("migrate");
        let old = vec![started("c1"), accepted(2, "m1"), accepted(3, "m2")];
        write_version_1(&path, "c1", &old);
        let store = SqliteStore::open(&path).expect("open and migrate");
        assert_eq!(store.load("c1").await.expect("load"), Some(old.clone()));
        assert_eq!(
            store.events_after("c1", 2).await.expect("after"),
            old[2..].to_vec()
        );
        // The version, the wake-up and the inbox sequence carry over.
        let stale = store
            .commit(commit("c1", 2, vec![accepted(3, "x")], None))
            .await;
        assert!(
            matches!(stale, Err(StoreError::Conflict { actual: 3, .. })),
            "{stale:?}"
        );
        assert_eq!(
            store.claim_due(100, 10).await.expect("claim"),
            vec![Arc::from("c1")]
        );
        store
            .commit(commit("c1", 3, vec![accepted(4, "m3")], None))
            .await
            .expect("append");
        let inbox = store.inbox("bob", 0, 10).await.expect("inbox");
        assert_eq!(
            inbox.iter().map(|entry| entry.seq).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(&*inbox[2].message.id, "m3");
        let version: usize = store
            .reader
            .lock()
            .expect("reader")
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .expect("user_version");
        assert_eq!(version, MIGRATIONS.len());
    }

    #[tokio::test]
    async fn versions_and_inbox_sequences_are_checked_and_continued_after_a_restart() {
        let path = temp_db("restart");
        {
            let store = SqliteStore::open(&path).expect("open");
            store
                .commit(commit(
                    "c1",
                    0,
                    vec![started("c1"), accepted(2, "m1")],
                    None,
                ))
                .await
                .expect("create");
            store
                .commit(commit("c1", 2, vec![accepted(3, "m2")], None))
                .await
                .expect("append");
        }
        let store = SqliteStore::open(&path).expect("reopen");
        assert_refuses_stale_writes(&store, "c1", 3).await;
        // Refused commits left nothing behind; the next one continues the inbox.
        store
            .commit(commit("c1", 3, vec![accepted(4, "m4")], None))
            .await
            .expect("append after restart");
        let inbox = store.inbox("bob", 0, 10).await.expect("inbox");
        assert_eq!(
            inbox
                .iter()
                .map(|entry| (entry.seq, entry.message.id.to_string()))
                .collect::<Vec<_>>(),
            vec![
                (1, "m1".to_owned()),
                (2, "m2".to_owned()),
                (3, "m4".to_owned())
            ]
        );
        assert_eq!(store.inbox_head("bob").await.expect("head"), 3);
        assert_eq!(store.inbox_head("nobody").await.expect("head"), 0);
        assert_eq!(
            store.load("c1").await.expect("load").expect("exists").len(),
            4
        );
        assert_eq!(
            store
                .events_after("c1", 1)
                .await
                .expect("after")
                .iter()
                .map(|event| event.seq)
                .collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
    }

    #[tokio::test]
    async fn recent_inbox_entries_and_parties_are_moved_in_bulk_and_read_throughout() {
        let path = temp_db("recent");
        let conversations = RECENT_ROWS / 2 + 10;
        {
            let store = Arc::new(SqliteStore::open(&path).expect("open"));
            let tasks: Vec<_> = (0..conversations)
                .map(|n| {
                    let store = store.clone();
                    tokio::spawn(async move {
                        let id = format!("c{n:05}");
                        store
                            .commit(commit(&id, 0, vec![started(&id), accepted(2, &id)], None))
                            .await
                    })
                })
                .collect();
            for task in tasks {
                task.await.expect("task").expect("commit");
            }
            // Past the threshold: the parties (alice, bob per conversation) moved at least once.
            let moved: i64 = store
                .reader
                .lock()
                .expect("reader")
                .query_row("SELECT count(*) FROM parties", [], |row| row.get(0))
                .expect("count");
            assert!(moved >= RECENT_ROWS as i64, "{moved}");
            // One large commit fills bob's inbox past the threshold too.
            let deliveries = (0..RECENT_ROWS)
                .map(|n| Delivery {
                    agent: Arc::from("bob"),
                    conversation_id: Arc::from("c00000"),
                    message: message(&format!("bulk{n}")),
                })
                .collect();
            store
                .commit(Commit {
                    conversation_id: Arc::from("c00000"),
                    template: Arc::from("fixture"),
                    expected_version: 2,
                    events: Vec::new(),
                    deliveries,
                    wake_at: None,
                })
                .await
                .expect("bulk deliveries");
        }
        let store = SqliteStore::open(&path).expect("reopen");
        store
            .commit(commit("c00001", 2, vec![accepted(3, "last")], None))
            .await
            .expect("append");
        let total = conversations + RECENT_ROWS + 1;
        let mut seen = Vec::new();
        let mut after = 0;
        loop {
            let page = store.inbox("bob", after, 500).await.expect("inbox");
            let Some(last) = page.last() else { break };
            after = last.seq;
            seen.extend(page.into_iter().map(|entry| entry.seq));
        }
        assert_eq!(seen, (1..=total as u64).collect::<Vec<_>>());
        let last = store
            .inbox("bob", total as u64 - 1, 10)
            .await
            .expect("inbox");
        assert_eq!(&*last[0].message.id, "last");
        let listed = store
            .conversations_of("alice")
            .await
            .expect("query")
            .expect("indexed");
        assert_eq!(listed.len(), conversations);
        assert!(
            listed.windows(2).all(|pair| pair[0] < pair[1]),
            "in id order"
        );
        store.remove("c00000").await.expect("remove");
        store
            .remove(&listed[conversations - 1])
            .await
            .expect("remove");
        let listed = store
            .conversations_of("bob")
            .await
            .expect("query")
            .expect("indexed");
        assert_eq!(listed.len(), conversations - 2);
        assert_eq!(&*listed[0], "c00001");
    }

    /// Under steady commits the WAL is checkpointed and starts again from its beginning, so
    /// it stays within the force size however much is written, even while a slow disk holds
    /// up the background passes (each commit here is a transaction
    /// of a few pages: without checkpoints the WAL would hold thousands of frames), and
    /// everything written is in the database after a reopen.
    #[tokio::test]
    async fn the_wal_is_checkpointed_and_restarted_under_steady_writes() {
        let path = temp_db("checkpoint");
        let limits = checkpoint::Limits {
            background: 64,
            finish: 16,
            passes: 3,
            force: 512,
        };
        let conversations = 2_000;
        {
            let store =
                SqliteStore::open_with_limits(&path, Synchronous::Normal, limits).expect("open");
            for n in 0..conversations {
                let id = format!("c{n}");
                store
                    .commit(commit(&id, 0, vec![started(&id)], None))
                    .await
                    .expect("commit");
            }
            let mut wal = path.clone().into_os_string();
            wal.push("-wal");
            // The WAL file keeps its largest size when it starts again: its high-water mark.
            let bytes = std::fs::metadata(&wal).expect("the WAL").len();
            let frames = bytes.saturating_sub(32) / (4096 + 24);
            // Past the force size the writer checkpoints (waiting for a background pass under
            // way), so the WAL ends at most one commit's few pages past it.
            assert!(
                frames <= limits.force + 64,
                "the WAL grew to {frames} frames for {conversations} commits"
            );
        }
        let store = SqliteStore::open(&path).expect("reopen");
        let ids = store
            .conversation_ids(None, 2 * conversations)
            .await
            .expect("ids")
            .expect("listed");
        assert_eq!(ids.len(), conversations);
        let last = format!("c{}", conversations - 1);
        assert_eq!(
            store.load(&last).await.expect("load").expect("stored"),
            vec![started(&last)]
        );
    }

    #[tokio::test]
    async fn a_removed_conversation_can_be_created_again() {
        let store = SqliteStore::open(temp_db("recreate")).expect("open");
        store
            .commit(commit("c", 0, vec![started("c")], None))
            .await
            .expect("create");
        store.remove("c").await.expect("remove");
        let stale = store
            .commit(commit("c", 1, vec![accepted(2, "m")], None))
            .await;
        assert!(
            matches!(stale, Err(StoreError::Conflict { actual: 0, .. })),
            "{stale:?}"
        );
        store
            .commit(commit("c", 0, vec![started("c")], None))
            .await
            .expect("create again");
        assert_eq!(
            store.load("c").await.expect("load").expect("exists").len(),
            1
        );
    }

    #[tokio::test]
    async fn a_second_store_on_the_same_file_is_refused_until_the_first_is_dropped() {
        let path = temp_db("lock");
        let first = SqliteStore::open(&path).expect("open");
        let refused = lock(&path, Duration::ZERO);
        assert!(
            matches!(&refused, Err(StoreError::Unavailable(reason)) if reason.contains("in use")),
            "{refused:?}"
        );
        drop(first);
        let second = SqliteStore::open(&path).expect("reopen after drop");
        assert!(second.load("c").await.expect("load").is_none());
    }
}
