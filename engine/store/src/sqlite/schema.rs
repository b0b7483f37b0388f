//! The database schema, as the migrations that build it, in order.

use super::*;

/// Schema migrations, in order; `PRAGMA user_version` records how many have run.
pub(super) const MIGRATIONS: &[&str] = &[
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
    // 9: the revision archive (`sqlite/archive.rs`): each template revision once, as JSON
    //    (`first_seen` beside it for the listing's order); hook modules once per SHA-256
    //    (a rowid table: modules are large, and a WITHOUT ROWID table keeps each row whole
    //    in its B-tree); the history of activations in the order recorded (AUTOINCREMENT:
    //    a number is never used twice). Retention (`queries::remove`) touches none of them.
    "CREATE TABLE revisions (
         template TEXT NOT NULL,
         revision TEXT NOT NULL,
         body TEXT NOT NULL,
         first_seen INTEGER NOT NULL,
         PRIMARY KEY (template, revision)
     );
     CREATE TABLE modules (
         sha256 TEXT PRIMARY KEY,
         bytes BLOB NOT NULL
     );
     CREATE TABLE activations (
         seq INTEGER PRIMARY KEY AUTOINCREMENT,
         template TEXT NOT NULL,
         body TEXT NOT NULL
     );
     CREATE INDEX activations_by_template ON activations (template, seq);",
    // 10: agents' signing keys the server learnt (registered by the administrator, bound to
    //     a JWT by `cnf`), as JSON, one row per agent and kid; never deleted (revoked keys
    //     stay, for the audit records of what they signed).
    "CREATE TABLE agent_keys (
         agent TEXT NOT NULL,
         kid TEXT NOT NULL,
         body TEXT NOT NULL,
         PRIMARY KEY (agent, kid)
     ) WITHOUT ROWID;",
];

pub(super) fn migrate(connection: &mut Connection) -> Result<(), StoreError> {
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
