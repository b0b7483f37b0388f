//! The SQLite store: the embedded default. One database file in WAL mode.
//!
//! Writes go through one writer thread that applies every commit waiting in its queue inside
//! one transaction (each commit under its own savepoint, so one stale version fails only that
//! commit) and then answers all of them: **group commit**, one fsync for a batch instead of
//! one per message. A commit is answered only after the transaction is durable
//! (`synchronous = FULL`; [`Synchronous::Normal`] trades power-loss durability for speed). Reads use a separate connection; WAL lets them run beside the
//! writer and see exactly what was committed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;

use async_trait::async_trait;
use colloquy_protocol::event::ConversationEvent;
use colloquy_protocol::message::Message;
use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use colloquy_protocol::event::EventKind;

use super::{CLAIM_LEASE_MS, Commit, ConversationStore, InboxEntry, StoreError};

/// Most commits applied in one transaction. Bounds the latency a large batch adds to the
/// first commit in it.
pub const MAX_GROUP_COMMIT: usize = 512;

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
];

/// How far a commit must get before it is acknowledged.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Synchronous {
    /// On disk: the WAL is fsynced at every (group) commit. Survives power loss. The default.
    #[default]
    Full,
    /// In the operating system: written to the WAL, fsynced at checkpoints. Survives the
    /// engine's crash (`kill -9`) but not the machine's; several times the throughput on
    /// disks with slow fsync. `sqlite:PATH?synchronous=normal`.
    Normal,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Full => "FULL",
            Synchronous::Normal => "NORMAL",
        }
    }
}

enum Job {
    Commit(Commit, oneshot::Sender<Result<(), StoreError>>),
    ClaimDue(
        u64,
        usize,
        oneshot::Sender<Result<Vec<Arc<str>>, StoreError>>,
    ),
    Remove(String, oneshot::Sender<Result<(), StoreError>>),
}

/// A [`ConversationStore`] in one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    writer: mpsc::Sender<Job>,
    reader: Arc<Mutex<Connection>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
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
        let path = path.as_ref().to_path_buf();
        if let Some(parent) = path.parent()
            && !parent.as_os_str().is_empty()
        {
            std::fs::create_dir_all(parent).map_err(|error| {
                StoreError::Unavailable(format!("cannot create {}: {error}", parent.display()))
            })?;
        }
        let mut writer = connect(&path, synchronous)?;
        migrate(&mut writer)?;
        let reader = connect(&path, synchronous)?;
        let (jobs, queue) = mpsc::channel();
        thread::Builder::new()
            .name("colloquy-sqlite-writer".to_owned())
            .spawn(move || write_loop(writer, queue))
            .map_err(|error| StoreError::Internal(format!("cannot start writer: {error}")))?;
        Ok(SqliteStore {
            path,
            writer: jobs,
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

fn connect(path: &Path, synchronous: Synchronous) -> Result<Connection, StoreError> {
    let connection = Connection::open(path).map_err(|error| {
        StoreError::Unavailable(format!("cannot open {}: {error}", path.display()))
    })?;
    connection
        .execute_batch(&format!(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = {};
             PRAGMA busy_timeout = 5000;
             PRAGMA foreign_keys = OFF;
             PRAGMA cache_size = -65536;
             PRAGMA wal_autocheckpoint = 16384;
             PRAGMA temp_store = MEMORY;",
            synchronous.pragma()
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

fn encode<T: serde::Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::Internal(error.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text)
        .map_err(|error| StoreError::Internal(format!("corrupt row: {error}")))
}

/// The writer thread: waits for a job, takes every job queued behind it, applies them in one
/// transaction, answers them all.
fn write_loop(mut connection: Connection, queue: mpsc::Receiver<Job>) {
    while let Ok(first) = queue.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_GROUP_COMMIT {
            match queue.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        apply_batch(&mut connection, batch);
    }
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
    Remove(
        oneshot::Sender<Result<(), StoreError>>,
        Result<(), StoreError>,
    ),
}

fn apply_batch(connection: &mut Connection, batch: Vec<Job>) {
    let mut answers = Vec::with_capacity(batch.len());
    let outcome = (|| -> Result<(), rusqlite::Error> {
        let transaction = connection.transaction()?;
        for job in batch {
            // Cached statements rather than `Transaction::savepoint`, which parses its SQL
            // every time: this runs once per commit on the one writer thread.
            transaction.prepare_cached("SAVEPOINT job")?.execute([])?;
            let answer = match job {
                Job::Commit(commit, reply) => {
                    let result = apply_commit(&transaction, commit);
                    Answer::Commit(reply, result)
                }
                Job::ClaimDue(now, limit, reply) => {
                    Answer::Claim(reply, claim_due(&transaction, now, limit))
                }
                Job::Remove(id, reply) => Answer::Remove(reply, remove(&transaction, &id)),
            };
            let failed = match &answer {
                Answer::Commit(_, result) | Answer::Remove(_, result) => result.is_err(),
                Answer::Claim(_, result) => result.is_err(),
            };
            if failed {
                transaction.prepare_cached("ROLLBACK TO job")?.execute([])?;
            }
            transaction.prepare_cached("RELEASE job")?.execute([])?;
            answers.push(answer);
        }
        transaction.commit()
    })();
    for answer in answers {
        // A dropped receiver means its caller went away; nothing to tell.
        match (answer, &outcome) {
            (Answer::Commit(reply, result), Ok(())) => drop(reply.send(result)),
            (Answer::Claim(reply, result), Ok(())) => drop(reply.send(result)),
            (Answer::Remove(reply, result), Ok(())) => drop(reply.send(result)),
            (Answer::Commit(reply, _), Err(error)) => drop(reply.send(Err(unavailable(error)))),
            (Answer::Claim(reply, _), Err(error)) => drop(reply.send(Err(unavailable(error)))),
            (Answer::Remove(reply, _), Err(error)) => drop(reply.send(Err(unavailable(error)))),
        }
    }
    if let Err(error) = outcome {
        tracing::error!(%error, "SQLite transaction failed; its commits were refused");
    }
}

fn unavailable(error: &rusqlite::Error) -> StoreError {
    StoreError::Unavailable(format!("SQLite write failed: {error}"))
}

fn apply_commit(connection: &Connection, commit: Commit) -> Result<(), StoreError> {
    let Commit {
        conversation_id,
        expected_version,
        events,
        deliveries,
        wake_at,
    } = commit;
    let new_version = expected_version + events.len() as u64;
    let wake = wake_at.map(to_sql);
    if expected_version == 0 {
        let inserted = connection
            .prepare_cached(
                "INSERT INTO conversations (id, version, wake_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO NOTHING",
            )
            .and_then(|mut insert| {
                insert.execute(params![&*conversation_id, to_sql(new_version), wake])
            })
            .map_err(internal)?;
        if inserted == 0 {
            return Err(StoreError::Duplicate(conversation_id));
        }
    } else {
        let updated = connection
            .prepare_cached(
                "UPDATE conversations SET version = ?1, wake_at = ?2 WHERE id = ?3 AND version = ?4",
            )
            .and_then(|mut update| {
                update.execute(params![
                    to_sql(new_version),
                    wake,
                    &*conversation_id,
                    to_sql(expected_version)
                ])
            })
            .map_err(internal)?;
        if updated == 0 {
            let actual: Option<i64> = connection
                .query_row(
                    "SELECT version FROM conversations WHERE id = ?1",
                    params![&*conversation_id],
                    |row| row.get(0),
                )
                .optional()
                .map_err(internal)?;
            return Err(StoreError::Conflict {
                id: conversation_id,
                expected: expected_version,
                actual: actual.map(from_sql).unwrap_or(0),
            });
        }
    }
    if expected_version == 0
        && let Some(EventKind::Started(started)) = events.first().map(|event| &event.kind)
    {
        let mut insert_party = connection
            .prepare_cached(
                "INSERT INTO parties (agent, conversation_id) VALUES (?1, ?2)
                 ON CONFLICT DO NOTHING",
            )
            .map_err(internal)?;
        for agent in std::iter::once(&started.initiator).chain(&started.participants) {
            insert_party
                .execute(params![&**agent, &*conversation_id])
                .map_err(internal)?;
        }
    }
    let mut insert_event = connection
        .prepare_cached("INSERT INTO events (conversation_id, seq, body) VALUES (?1, ?2, ?3)")
        .map_err(internal)?;
    for event in &events {
        insert_event
            .execute(params![
                &*conversation_id,
                to_sql(event.seq),
                encode(event)?
            ])
            .map_err(internal)?;
    }
    let mut next_seq = connection
        .prepare_cached(
            "INSERT INTO inbox_heads (agent, last_seq) VALUES (?1, 1)
             ON CONFLICT (agent) DO UPDATE SET last_seq = last_seq + 1
             RETURNING last_seq",
        )
        .map_err(internal)?;
    let mut insert_entry = connection
        .prepare_cached(
            "INSERT INTO inbox (agent, seq, conversation_id, message) VALUES (?1, ?2, ?3, ?4)",
        )
        .map_err(internal)?;
    for delivery in &deliveries {
        let seq: i64 = next_seq
            .query_row(params![&*delivery.agent], |row| row.get(0))
            .map_err(internal)?;
        insert_entry
            .execute(params![
                &*delivery.agent,
                seq,
                &*delivery.conversation_id,
                encode(&*delivery.message)?
            ])
            .map_err(internal)?;
    }
    Ok(())
}

/// Hands out due wake-ups by moving them [`CLAIM_LEASE_MS`] ahead: the claimer's commit
/// replaces the lease, and a claimer that died leaves it to fire again.
fn claim_due(connection: &Connection, now: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError> {
    let mut select = connection
        .prepare_cached(
            "SELECT id FROM conversations WHERE wake_at IS NOT NULL AND wake_at <= ?1
             ORDER BY wake_at LIMIT ?2",
        )
        .map_err(internal)?;
    let ids: Vec<String> = select
        .query_map(params![to_sql(now), limit as i64], |row| row.get(0))
        .map_err(internal)?
        .collect::<Result<_, _>>()
        .map_err(internal)?;
    let mut clear = connection
        .prepare_cached("UPDATE conversations SET wake_at = ?2 WHERE id = ?1")
        .map_err(internal)?;
    let lease = to_sql(now.saturating_add(CLAIM_LEASE_MS));
    for id in &ids {
        clear.execute(params![id, lease]).map_err(internal)?;
    }
    Ok(ids.into_iter().map(Arc::from).collect())
}

fn remove(connection: &Connection, id: &str) -> Result<(), StoreError> {
    connection
        .execute("DELETE FROM events WHERE conversation_id = ?1", params![id])
        .map_err(internal)?;
    connection
        .execute("DELETE FROM conversations WHERE id = ?1", params![id])
        .map_err(internal)?;
    connection
        .execute(
            "DELETE FROM parties WHERE conversation_id = ?1",
            params![id],
        )
        .map_err(internal)?;
    Ok(())
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
        self.submit(|reply| Job::Commit(commit, reply)).await
    }

    async fn load(&self, id: &str) -> Result<Option<Vec<ConversationEvent>>, StoreError> {
        let id = id.to_owned();
        self.read(move |connection| {
            let exists: Option<i64> = connection
                .query_row(
                    "SELECT version FROM conversations WHERE id = ?1",
                    params![id],
                    |row| row.get(0),
                )
                .optional()
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
                    "SELECT seq, conversation_id, message FROM inbox
                     WHERE agent = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
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
                    "SELECT conversation_id FROM parties WHERE agent = ?1 ORDER BY conversation_id",
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
}

fn read_events(
    connection: &Connection,
    id: &str,
    after_seq: u64,
) -> Result<Vec<ConversationEvent>, StoreError> {
    let mut select = connection
        .prepare_cached(
            "SELECT body FROM events WHERE conversation_id = ?1 AND seq > ?2 ORDER BY seq",
        )
        .map_err(internal)?;
    let rows = select
        .query_map(params![id, to_sql(after_seq)], |row| {
            row.get::<_, String>(0)
        })
        .map_err(internal)?;
    let mut events = Vec::new();
    for row in rows {
        events.push(decode(&row.map_err(internal)?)?);
    }
    Ok(events)
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::store::fixtures::{accepted, commit, started};

    fn temp_db(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "colloquy-sqlite-{}-{name}-{}",
            std::process::id(),
            uuid::Uuid::now_v7()
        ));
        dir.join("colloquy.db")
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
            let duplicate = store
                .commit(commit("c1", 0, vec![started("c1")], None))
                .await;
            assert!(
                matches!(duplicate, Err(StoreError::Duplicate(_))),
                "{duplicate:?}"
            );
            store
                .commit(commit("c1", 1, vec![accepted(2, "m1")], Some(50)))
                .await
                .expect("append");
            let stale = store
                .commit(commit("c1", 1, vec![accepted(2, "m2")], None))
                .await;
            assert!(
                matches!(
                    stale,
                    Err(StoreError::Conflict {
                        expected: 1,
                        actual: 2,
                        ..
                    })
                ),
                "{stale:?}"
            );
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
}
