//! The backends below the store's layout, for the stores bench and the crash tests of the
//! `colloquy` binary (feature `raw`, off in every build but theirs): the least a store must
//! write per message in SQLite and in Redis (the ceilings the stores bench measures the
//! stores against), and the few direct reads and commands the crash tests make behind a
//! running server's back. Here so that SQL and Redis are named in this crate only.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// Sizes of what a request conversation's commit writes, in bytes: its events as JSON (663
/// on average over the three commits, measured in the stores bench's database) and the message
/// in the receiver's inbox (180).
const EVENTS_BYTES: usize = 663;
const MESSAGE_BYTES: usize = 180;
/// The commit-shaped Lua script of the Redis ceiling: the four writes any Redis layout
/// needs for a message.
const CEILING_SCRIPT: &str = "redis.call('XADD', KEYS[1], '*', 'e', ARGV[1]); \
    redis.call('HSET', KEYS[2], KEYS[1], ARGV[3]); \
    redis.call('ZADD', KEYS[3], ARGV[3], KEYS[1]); \
    redis.call('RPUSH', KEYS[4], ARGV[2]); return 1";

/// SQLite alone: messages/s of the least a store must write per message (see the module
/// docs), on this thread, in request conversations of three messages.
/// One transaction takes as many messages as the clients can have waiting at once (one
/// each), the three of a conversation together.
pub fn sqlite_ceiling(dir: &Path, messages: usize, clients: usize) -> f64 {
    let path = dir.join("ceiling.db");
    let connection = rusqlite::Connection::open(&path).expect("open ceiling database");
    connection
        .execute_batch(&format!(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             PRAGMA wal_autocheckpoint = 0;
             PRAGMA cache_size = -{};
             CREATE TABLE conversations (id TEXT PRIMARY KEY, version INTEGER NOT NULL)
                 WITHOUT ROWID;
             CREATE TABLE events (conversation_id TEXT NOT NULL, last_seq INTEGER NOT NULL,
                 body TEXT NOT NULL);
             CREATE UNIQUE INDEX events_by_conversation ON events (conversation_id, last_seq);
             CREATE TABLE inbox (agent TEXT NOT NULL, seq INTEGER NOT NULL,
                 conversation_id TEXT NOT NULL, message TEXT NOT NULL);",
            crate::sqlite::CACHE_KIB
        ))
        .expect("ceiling schema");
    let (events, message) = ("e".repeat(EVENTS_BYTES), "m".repeat(MESSAGE_BYTES));
    let ids: Vec<String> = (0..messages.div_ceil(3))
        .map(|_| uuid::Uuid::now_v7().to_string())
        .collect();
    let began = Instant::now();
    for (batch, chunk) in ids.chunks((clients / 3).max(1)).enumerate() {
        let transaction = connection.unchecked_transaction().expect("begin");
        for version in 1..=3_i64 {
            for (client, id) in chunk.iter().enumerate() {
                let sql = if version == 1 {
                    "INSERT INTO conversations (id, version) VALUES (?1, ?2)"
                } else {
                    "UPDATE conversations SET version = ?2 WHERE id = ?1"
                };
                transaction
                    .prepare_cached(sql)
                    .and_then(|mut statement| statement.execute(rusqlite::params![id, version]))
                    .expect("version row");
                transaction
                    .prepare_cached("INSERT INTO events VALUES (?1, ?2, ?3)")
                    .and_then(|mut statement| {
                        statement.execute(rusqlite::params![id, version, events])
                    })
                    .expect("event row");
                let seq = (batch * 3) as i64 + version;
                transaction
                    .prepare_cached("INSERT INTO inbox VALUES (?1, ?2, ?3, ?4)")
                    .and_then(|mut statement| {
                        statement.execute(rusqlite::params![format!("b{client}"), seq, id, message])
                    })
                    .expect("inbox row");
            }
        }
        transaction.commit().expect("commit");
    }
    (ids.len() * 3) as f64 / began.elapsed().as_secs_f64()
}

/// Redis alone: commit-shaped scripts per second from `clients` tasks sharing one
/// multiplexed connection, as the store's do; `None` when Redis cannot be reached.
pub async fn redis_ceiling(url: &str, messages: usize, clients: usize) -> Option<f64> {
    let client = ::redis::Client::open(url).ok()?;
    let connection = client.get_multiplexed_async_connection().await.ok()?;
    let prefix = format!("colloquy-bench:ceiling:{}", uuid::Uuid::now_v7());
    let script = Arc::new(::redis::Script::new(CEILING_SCRIPT));
    let (events, message) = ("e".repeat(EVENTS_BYTES), "m".repeat(MESSAGE_BYTES));
    let next = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|task| {
            let (mut connection, script, next, prefix) = (
                connection.clone(),
                script.clone(),
                next.clone(),
                prefix.clone(),
            );
            let (events, message) = (events.clone(), message.clone());
            tokio::spawn(async move {
                loop {
                    let sent = next.fetch_add(1, Ordering::Relaxed);
                    if sent >= messages {
                        break;
                    }
                    let answer: Result<i64, _> = script
                        .key(format!("{prefix}:c{task}"))
                        .key(format!("{prefix}:versions"))
                        .key(format!("{prefix}:wake"))
                        .key(format!("{prefix}:inbox:b{task}"))
                        .arg(&events)
                        .arg(&message)
                        .arg(sent)
                        .invoke_async(&mut connection)
                        .await;
                    answer.ok()?;
                }
                Some(())
            })
        })
        .collect();
    for task in tasks {
        task.await.ok()??;
    }
    Some(messages as f64 / began.elapsed().as_secs_f64())
}

/// Switches a benchmark's own Redis between fsync policies (best effort: an error leaves
/// the policy as it was, and the row says which was asked for).
pub async fn set_appendfsync(url: &str, policy: &str) {
    let Ok(client) = ::redis::Client::open(url) else {
        return;
    };
    if let Ok(mut connection) = client.get_multiplexed_async_connection().await {
        let result: Result<(), _> = ::redis::cmd("CONFIG")
            .arg("SET")
            .arg("appendfsync")
            .arg(policy)
            .query_async(&mut connection)
            .await;
        if let Err(error) = result {
            println!("could not set appendfsync {policy}: {error}");
        }
    }
}

/// Empties database `db` of the Redis at `redis` and returns its URL: a test that owns a
/// database sees no other run's leftovers.
pub async fn emptied_redis_database(redis: &str, db: u8) -> String {
    let url = format!("{redis}/{db}");
    let client = ::redis::Client::open(url.as_str()).expect("redis url");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let () = ::redis::cmd("FLUSHDB")
        .query_async(&mut connection)
        .await
        .expect("flushdb");
    url
}

/// A new, empty database on the Postgres server `url` names, as a URL: a test that owns a
/// database sees no other run's leftovers.
pub async fn fresh_postgres_database(url: &str) -> String {
    crate::postgres::create_test_database(url)
        .await
        .expect("create a database on the test Postgres")
}

/// How many partitions each node address (`http://host:port`) holds by a live lease on the
/// Postgres database `url` names.
pub async fn postgres_live_leases(url: &str) -> std::collections::BTreeMap<String, usize> {
    crate::postgres::live_leases_by_address(url)
        .await
        .expect("read the lease table")
}

/// Whether the Redis at `url` answers PING now.
pub async fn redis_answers(url: &str) -> bool {
    let Ok(client) = ::redis::Client::open(url) else {
        return false;
    };
    let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
        return false;
    };
    let pong: Result<String, _> = ::redis::cmd("PING").query_async(&mut connection).await;
    pong.is_ok_and(|pong| pong == "PONG")
}

/// How far `agent`'s pushes (webhook or A2A bridge) got, in the SQLite store at `db`, read
/// beside the running server; `None` until there is a cursor (or while the file is busy).
pub fn sqlite_push_cursor(db: &Path, agent: &str) -> Option<u64> {
    let connection =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .ok()?;
    connection
        .query_row(
            "SELECT through FROM webhook_cursors WHERE agent = ?1",
            [agent],
            |row| row.get::<_, i64>(0),
        )
        .ok()
        .and_then(|through| u64::try_from(through).ok())
}

/// Rewrites the stored log of conversation `id` in the SQLite store at `db`, behind the back
/// of a server that is not running: `edit` gets every event as JSON, in order. For the tests
/// that make a log look as an older engine wrote it, or as someone altered it.
pub fn sqlite_rewrite_log(db: &Path, id: &str, edit: impl Fn(&mut serde_json::Value)) {
    let connection = rusqlite::Connection::open(db).expect("open the SQLite store");
    let rows: Vec<(i64, String)> = {
        let mut select = connection
            .prepare("SELECT last_seq, body FROM events WHERE conversation_id = ?1")
            .expect("select events");
        select
            .query_map([id], |row| Ok((row.get(0)?, row.get(1)?)))
            .expect("read events")
            .map(|row| row.expect("an events row"))
            .collect()
    };
    for (last_seq, body) in rows {
        let body = edited(&body, &edit);
        connection
            .execute(
                "UPDATE events SET body = ?3 WHERE conversation_id = ?1 AND last_seq = ?2",
                rusqlite::params![id, last_seq, body],
            )
            .expect("rewrite events");
    }
}

/// [`sqlite_rewrite_log`] for the Redis store at `url` with key prefix `prefix`: the log
/// stream is written again, entry by entry under the same ids.
pub async fn redis_rewrite_log(
    url: &str,
    prefix: &str,
    id: &str,
    edit: impl Fn(&mut serde_json::Value),
) {
    let client = ::redis::Client::open(url).expect("redis url");
    let mut connection = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let key = format!("{prefix}:log:{id}");
    let entries: ::redis::streams::StreamRangeReply = ::redis::cmd("XRANGE")
        .arg(&key)
        .arg("-")
        .arg("+")
        .query_async(&mut connection)
        .await
        .expect("read the log");
    let () = ::redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut connection)
        .await
        .expect("drop the log");
    for entry in entries.ids {
        let mut add = ::redis::cmd("XADD");
        add.arg(&key).arg(&entry.id);
        for (field, value) in &entry.map {
            let text: String = ::redis::from_redis_value_ref(value).expect("a log field");
            add.arg(field).arg(match field.as_str() {
                "b" | "e" => edited(&text, &edit),
                _ => text,
            });
        }
        let _: String = add
            .query_async(&mut connection)
            .await
            .expect("write the log");
    }
}

/// A stored batch of events (a JSON array) or one event, with `edit` applied to each.
fn edited(text: &str, edit: &impl Fn(&mut serde_json::Value)) -> String {
    let mut value: serde_json::Value = serde_json::from_str(text).expect("stored events are JSON");
    match &mut value {
        serde_json::Value::Array(events) => events.iter_mut().for_each(edit),
        event => edit(event),
    }
    value.to_string()
}
