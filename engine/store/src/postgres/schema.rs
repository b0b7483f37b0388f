//! The database schema, as the migrations that build it, in order, and how they are applied.
//!
//! `schema_version` records each migration applied. [`migrate`] runs in one transaction
//! under a transaction-level advisory lock ([`MIGRATION_LOCK`]): two nodes starting at once
//! against an empty database queue on the lock, and the second finds everything applied.
//! An engine refuses a database migrated further than it knows.

use colloquy_core::store::StoreError;
use tokio_postgres::Client;

use super::{PARTITIONS, sql_error};

/// The advisory lock key migrations run under (any fixed number; "colloquy" in ASCII, cut
/// to 63 bits). Advisory locks are per database, so deployments in other databases of the
/// same server do not wait for each other.
pub(super) const MIGRATION_LOCK: i64 = 0x636f_6c6c_6f71_7579 & i64::MAX;

/// Schema migrations, in order; `schema_version` holds the numbers of those applied.
pub(super) const MIGRATIONS: &[&str] = &[
    // 1: everything a `ConversationStore` keeps.
    // - `conversations`: the version and the next wake-up (the deadline index), ms since the
    //   epoch on the engine's clock, as every store keeps them.
    // - `events`: one row per commit, its events as one JSON array, keyed by the commit's
    //   last sequence number (as SQLite keeps them).
    // - `inbox_heads`: each agent's last inbox sequence number, moved in the commit
    //   transaction; its row lock orders commits that deliver to one agent, so sequences
    //   have no gaps and a reader never sees seq n+1 before n (see `postgres.rs`).
    // - `inbox`: the entries; a message for one agent is inline (`message`), one for
    //   several is a row of `messages` (keyed by conversation and message id) that the
    //   entries name (`shared_id`), deleted with the last entry naming it.
    // - `changes`: one row per commit with events (`agents`: the receivers, a JSON array),
    //   for other nodes (`postgres/changes.rs`); trimmed after `CHANGES_KEPT`.
    // - `leases`: which node leads a role (webhook delivery), until when, on the
    //   database's clock.
    // - `settings`: facts about this database for other parts to read: the number of
    //   partitions conversations are spread over (for the ownership layer).
    "CREATE TABLE settings (
         name text PRIMARY KEY,
         value text NOT NULL
     );
     CREATE TABLE conversations (
         id text COLLATE \"C\" PRIMARY KEY,
         version bigint NOT NULL,
         wake_at bigint
     );
     CREATE INDEX conversations_wake ON conversations (wake_at) WHERE wake_at IS NOT NULL;
     CREATE TABLE events (
         conversation_id text NOT NULL,
         last_seq bigint NOT NULL,
         body text NOT NULL,
         PRIMARY KEY (conversation_id, last_seq)
     );
     CREATE TABLE parties (
         agent text NOT NULL,
         conversation_id text COLLATE \"C\" NOT NULL,
         PRIMARY KEY (agent, conversation_id)
     );
     CREATE INDEX parties_conversation ON parties (conversation_id);
     CREATE TABLE inbox_heads (
         agent text PRIMARY KEY,
         head bigint NOT NULL
     );
     CREATE TABLE messages (
         conversation_id text NOT NULL,
         message_id text NOT NULL,
         body text NOT NULL,
         PRIMARY KEY (conversation_id, message_id)
     );
     CREATE TABLE inbox (
         agent text NOT NULL,
         seq bigint NOT NULL,
         conversation_id text NOT NULL,
         message text,
         shared_id text,
         PRIMARY KEY (agent, seq)
     );
     CREATE INDEX inbox_shared ON inbox (conversation_id, shared_id) WHERE shared_id IS NOT NULL;
     CREATE TABLE webhook_cursors (
         agent text PRIMARY KEY,
         through bigint NOT NULL
     );
     CREATE TABLE remote_tasks (
         agent text NOT NULL,
         conversation_id text NOT NULL,
         message_id text NOT NULL,
         body text NOT NULL,
         PRIMARY KEY (agent, conversation_id, message_id)
     );
     CREATE TABLE push_configs (
         conversation_id text NOT NULL,
         id text NOT NULL,
         body text NOT NULL,
         PRIMARY KEY (conversation_id, id)
     );
     CREATE TABLE revisions (
         template text COLLATE \"C\" NOT NULL,
         revision text COLLATE \"C\" NOT NULL,
         body text NOT NULL,
         first_seen bigint NOT NULL,
         PRIMARY KEY (template, revision)
     );
     CREATE TABLE modules (
         sha256 text PRIMARY KEY,
         bytes bytea NOT NULL
     );
     CREATE TABLE activations (
         seq bigserial PRIMARY KEY,
         template text NOT NULL,
         body text NOT NULL
     );
     CREATE INDEX activations_by_template ON activations (template, seq);
     CREATE TABLE leases (
         role text PRIMARY KEY,
         holder text NOT NULL,
         expires_at timestamptz NOT NULL
     );
     CREATE TABLE changes (
         seq bigserial PRIMARY KEY,
         node text NOT NULL,
         conversation_id text NOT NULL,
         version bigint NOT NULL,
         agents text NOT NULL,
         at timestamptz NOT NULL DEFAULT now()
     );",
    // 2: agents' signing keys the server learnt (registered by the administrator, bound to
    //    a JWT by `cnf`), as JSON, one row per agent and kid; never deleted (revoked keys
    //    stay, for the audit records of what they signed).
    "CREATE TABLE agent_keys (
         agent text NOT NULL,
         kid text NOT NULL,
         body text NOT NULL,
         PRIMARY KEY (agent, kid)
     );",
    // 3: ownership (`colloquy_cluster`, `postgres/leases.rs`): one lease row per partition,
    //    pre-created free at epoch 0 for the partition count `settings` records, so an
    //    acquire is one compare-and-set UPDATE; and the live nodes. Times are milliseconds
    //    of the database's clock.
    "CREATE TABLE partition_leases (
         partition integer PRIMARY KEY,
         owner text,
         address text,
         epoch bigint NOT NULL DEFAULT 0,
         expires_at bigint NOT NULL DEFAULT 0
     );
     INSERT INTO partition_leases (partition)
         SELECT generate_series(0, (SELECT value::integer FROM settings
                                    WHERE name = 'partitions') - 1);
     CREATE TABLE members (
         node text PRIMARY KEY,
         address text NOT NULL,
         expires_at bigint NOT NULL
     );",
    // 4: each conversation's partition (`colloquy_cluster::partition_of`, computed by the
    //    writer when it creates the row), so a node claims the deadlines of the partitions
    //    it holds only. Rows from before have none, and any node claims them.
    "ALTER TABLE conversations ADD COLUMN partition integer;
     CREATE INDEX conversations_partition_wake ON conversations (partition, wake_at)
         WHERE wake_at IS NOT NULL;",
];

/// Applies the migrations this database lacks (see the module docs) and records
/// [`PARTITIONS`].
pub(super) async fn migrate(client: &mut Client) -> Result<(), StoreError> {
    let transaction = client.transaction().await.map_err(sql_error)?;
    transaction
        .execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(sql_error)?;
    transaction
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_version (
                 version integer PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await
        .map_err(sql_error)?;
    let applied: i32 = transaction
        .query_one("SELECT coalesce(max(version), 0) FROM schema_version", &[])
        .await
        .map_err(sql_error)?
        .get(0);
    let applied = usize::try_from(applied).unwrap_or(0);
    if applied > MIGRATIONS.len() {
        return Err(StoreError::Internal(format!(
            "database schema version {applied} is newer than this engine's {}",
            MIGRATIONS.len()
        )));
    }
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(applied) {
        transaction
            .batch_execute(migration)
            .await
            .map_err(sql_error)?;
        if index == 0 {
            // The partition count, before a later migration (3: the lease rows) reads it.
            record_partitions(&transaction).await?;
        }
        let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
        transaction
            .execute(
                "INSERT INTO schema_version (version) VALUES ($1)",
                &[&version],
            )
            .await
            .map_err(sql_error)?;
    }
    record_partitions(&transaction).await?;
    transaction.commit().await.map_err(sql_error)
}

/// Records the partition count. Recorded, not merely assumed: the ownership layer reads
/// it, and a database made with another count keeps that count.
async fn record_partitions(
    transaction: &tokio_postgres::Transaction<'_>,
) -> Result<(), StoreError> {
    transaction
        .execute(
            "INSERT INTO settings (name, value) VALUES ('partitions', $1)
             ON CONFLICT (name) DO NOTHING",
            &[&PARTITIONS.to_string()],
        )
        .await
        .map_err(sql_error)?;
    Ok(())
}
