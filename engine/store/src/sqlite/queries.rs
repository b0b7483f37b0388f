//! The SQL of each store operation other than a commit, over one connection: the writer
//! runs the writes among them in its batches, the read connection the reads.

use super::writer::Recent;
use super::*;

/// The last sequence number of `agent`'s inbox (its newest entry, or what it acknowledged
/// when that was newer), 0 if it never had one.
/// The agents with entries in either inbox table. Each table is walked agent by agent down
/// its `(agent, seq)` index (a "skip scan": one index lookup per agent), not entry by entry.
pub(super) fn inbox_agents(connection: &Connection) -> Result<Vec<AgentId>, rusqlite::Error> {
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

pub(super) fn inbox_head(connection: &Connection, agent: &str) -> Result<u64, rusqlite::Error> {
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
pub(super) fn claim_due(
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

pub(super) fn remove(connection: &Connection, id: &str) -> Result<(), rusqlite::Error> {
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
pub(super) fn acknowledge(
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
pub(super) fn webhook_cursor(connection: &Connection, agent: &str) -> Result<u64, rusqlite::Error> {
    let through: Option<i64> = connection
        .prepare_cached("SELECT through FROM webhook_cursors WHERE agent = ?1")?
        .query_row(params![agent], |row| row.get(0))
        .optional()?;
    Ok(through.map(from_sql).unwrap_or(0))
}

/// Moves `agent`'s webhook cursor to `seq` unless it is further already.
pub(super) fn advance_webhook_cursor(
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
pub(super) fn keep_remote_task(
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
pub(super) fn remote_tasks(
    connection: &Connection,
    agent: &str,
) -> Result<Vec<RemoteTask>, rusqlite::Error> {
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
pub(super) fn to_sql(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

pub(super) fn from_sql(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
