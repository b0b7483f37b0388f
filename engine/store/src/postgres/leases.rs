//! The ownership layer's lease table in Postgres: [`colloquy_cluster::LeaseStore`] for
//! [`PostgresStore`], one statement (so one transaction) per method, every time judged by
//! the database's clock (`now()`, in milliseconds), never a node's. The protocol is
//! `colloquy_cluster`'s (docs/scale.md, "Ownership"); this is its SQL.
//!
//! `partition_leases` holds one row per partition, created free (owner NULL, epoch 0) by
//! migration 3 for the partition count `settings` records, so taking a partition is one
//! compare-and-set `UPDATE` and no row is ever inserted under contention. `members` holds
//! each live node's heartbeat.
//!
//! [`PostgresStore::check_fence`] is the fencing check alone; the writer runs the same
//! check in every commit's own transaction (`writer.rs`).

use async_trait::async_trait;
use colloquy_cluster::{
    ClusterView, Epoch, Fence, Fenced, Lease, LeaseError, LeaseStore, Member, NodeId, PartitionId,
};

use super::PostgresStore;

/// The database's clock in milliseconds, as every statement here reads it.
const NOW_MS: &str = "(extract(epoch FROM now()) * 1000)::bigint";

fn unavailable(error: colloquy_core::store::StoreError) -> LeaseError {
    LeaseError::Unavailable(error.to_string())
}

fn lease_of(row: &tokio_postgres::Row) -> Lease {
    Lease {
        partition: PartitionId(u32::try_from(row.get::<_, i32>("partition")).unwrap_or(0)),
        owner: NodeId::new(row.get::<_, String>("owner")),
        epoch: Epoch(u64::try_from(row.get::<_, i64>("epoch")).unwrap_or(0)),
        expires_at: u64::try_from(row.get::<_, i64>("expires_at")).unwrap_or(0),
        address: row.get::<_, String>("address").into(),
    }
}

fn millis(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

fn partition_number(partition: PartitionId) -> i32 {
    i32::try_from(partition.0).unwrap_or(i32::MAX)
}

/// (partition, epoch) pairs as the two arrays `unnest` reads.
fn columns(pairs: &[(PartitionId, Epoch)]) -> (Vec<i32>, Vec<i64>) {
    pairs
        .iter()
        .map(|(partition, epoch)| (partition_number(*partition), millis(epoch.0)))
        .unzip()
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn heartbeat(
        &self,
        node: &NodeId,
        address: &str,
        ttl_ms: u64,
    ) -> Result<ClusterView, LeaseError> {
        // One statement: the upsert and the reads see the same `now()`.
        let rows = self
            .query(
                &format!(
                    "WITH beat AS (
                         INSERT INTO members (node, address, expires_at)
                         VALUES ($1, $2, {NOW_MS} + $3)
                         ON CONFLICT (node) DO UPDATE
                             SET address = excluded.address, expires_at = excluded.expires_at
                         RETURNING node, address, expires_at
                     )
                     SELECT 'member' AS kind, node AS owner, address, expires_at,
                            0 AS partition, 0::bigint AS epoch, {NOW_MS} AS now
                       FROM members WHERE node <> $1 AND expires_at > {NOW_MS}
                     UNION ALL
                     SELECT 'member', node, address, expires_at, 0, 0, {NOW_MS} FROM beat
                     UNION ALL
                     SELECT 'lease', owner, address, expires_at, partition, epoch, {NOW_MS}
                       FROM partition_leases WHERE owner IS NOT NULL"
                ),
                &[&node.as_str(), &address, &millis(ttl_ms)],
            )
            .await
            .map_err(unavailable)?;
        let mut view = ClusterView::default();
        for row in &rows {
            view.now = u64::try_from(row.get::<_, i64>("now")).unwrap_or(0);
            if row.get::<_, &str>("kind") == "member" {
                view.members.push(Member {
                    node: NodeId::new(row.get::<_, String>("owner")),
                    address: row.get::<_, String>("address").into(),
                    expires_at: u64::try_from(row.get::<_, i64>("expires_at")).unwrap_or(0),
                });
            } else {
                view.leases.push(lease_of(row));
            }
        }
        Ok(view)
    }

    async fn acquire(
        &self,
        partition: PartitionId,
        node: &NodeId,
        address: &str,
        seen_epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, LeaseError> {
        let rows = self
            .query(
                &format!(
                    "UPDATE partition_leases
                        SET owner = $2, address = $3, epoch = epoch + 1,
                            expires_at = {NOW_MS} + $5
                      WHERE partition = $1 AND epoch = $4
                        AND (owner = $2 OR owner IS NULL OR expires_at <= {NOW_MS})
                  RETURNING partition, owner, address, epoch, expires_at"
                ),
                &[
                    &partition_number(partition),
                    &node.as_str(),
                    &address,
                    &millis(seen_epoch.0),
                    &millis(ttl_ms),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows.first().map(lease_of))
    }

    async fn acquire_many(
        &self,
        node: &NodeId,
        address: &str,
        wanted: &[(PartitionId, Epoch)],
        ttl_ms: u64,
    ) -> Result<Vec<Lease>, LeaseError> {
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        let (partitions, epochs) = columns(wanted);
        // `acquire`'s compare-and-set for each row, in one statement. The rows are locked
        // first, in partition order, skipping those another transaction holds: two nodes
        // taking overlapping sets row by row, each in its own preference order, deadlocked
        // (one tick failed after Postgres's `deadlock_timeout`). A skipped partition is not
        // taken this tick, as if another node had won it.
        let rows = self
            .query(
                &format!(
                    "WITH locked AS MATERIALIZED (
                         SELECT lease.partition, lease.epoch
                           FROM partition_leases AS lease
                           JOIN unnest($3::integer[], $4::bigint[]) AS wanted (partition, epoch)
                             ON lease.partition = wanted.partition
                            AND lease.epoch = wanted.epoch
                          WHERE lease.owner = $1 OR lease.owner IS NULL
                             OR lease.expires_at <= {NOW_MS}
                          ORDER BY lease.partition
                            FOR UPDATE OF lease SKIP LOCKED
                     )
                     UPDATE partition_leases AS lease
                        SET owner = $1, address = $2, epoch = lease.epoch + 1,
                            expires_at = {NOW_MS} + $5
                       FROM locked
                      WHERE lease.partition = locked.partition AND lease.epoch = locked.epoch
                        AND (lease.owner = $1 OR lease.owner IS NULL
                             OR lease.expires_at <= {NOW_MS})
                  RETURNING lease.partition, lease.owner, lease.address, lease.epoch,
                            lease.expires_at"
                ),
                &[
                    &node.as_str(),
                    &address,
                    &partitions,
                    &epochs,
                    &millis(ttl_ms),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows.iter().map(lease_of).collect())
    }

    async fn renew(
        &self,
        node: &NodeId,
        leases: &[(PartitionId, Epoch)],
        ttl_ms: u64,
    ) -> Result<Vec<PartitionId>, LeaseError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        let (partitions, epochs) = columns(leases);
        // Locked in partition order, as the writer's fence check locks them (`FOR SHARE …
        // ORDER BY partition`), so a renewal and a commit batch never wait on each other in
        // a cycle.
        let rows = self
            .query(
                &format!(
                    "WITH locked AS MATERIALIZED (
                         SELECT lease.partition, lease.epoch
                           FROM partition_leases AS lease
                           JOIN unnest($2::integer[], $3::bigint[]) AS held (partition, epoch)
                             ON lease.partition = held.partition AND lease.epoch = held.epoch
                          WHERE lease.owner = $1 AND lease.expires_at > {NOW_MS}
                          ORDER BY lease.partition
                            FOR UPDATE OF lease
                     )
                     UPDATE partition_leases AS lease
                        SET expires_at = {NOW_MS} + $4
                       FROM locked
                      WHERE lease.partition = locked.partition AND lease.epoch = locked.epoch
                        AND lease.owner = $1 AND lease.expires_at > {NOW_MS}
                  RETURNING lease.partition"
                ),
                &[&node.as_str(), &partitions, &epochs, &millis(ttl_ms)],
            )
            .await
            .map_err(unavailable)?;
        Ok(rows
            .iter()
            .map(|row| PartitionId(u32::try_from(row.get::<_, i32>(0)).unwrap_or(0)))
            .collect())
    }

    async fn release(
        &self,
        partition: PartitionId,
        node: &NodeId,
        epoch: Epoch,
    ) -> Result<(), LeaseError> {
        self.execute(
            &format!(
                "UPDATE partition_leases SET expires_at = {NOW_MS}
                  WHERE partition = $1 AND owner = $2 AND epoch = $3
                    AND expires_at > {NOW_MS}"
            ),
            &[
                &partition_number(partition),
                &node.as_str(),
                &millis(epoch.0),
            ],
        )
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    async fn release_many(
        &self,
        node: &NodeId,
        leases: &[(PartitionId, Epoch)],
    ) -> Result<(), LeaseError> {
        if leases.is_empty() {
            return Ok(());
        }
        let (partitions, epochs) = columns(leases);
        // Locked in partition order, as `renew` does.
        self.execute(
            &format!(
                "WITH locked AS MATERIALIZED (
                     SELECT lease.partition, lease.epoch
                       FROM partition_leases AS lease
                       JOIN unnest($2::integer[], $3::bigint[]) AS held (partition, epoch)
                         ON lease.partition = held.partition AND lease.epoch = held.epoch
                      WHERE lease.owner = $1 AND lease.expires_at > {NOW_MS}
                      ORDER BY lease.partition
                        FOR UPDATE OF lease
                 )
                 UPDATE partition_leases AS lease SET expires_at = {NOW_MS}
                   FROM locked
                  WHERE lease.partition = locked.partition AND lease.epoch = locked.epoch
                    AND lease.owner = $1 AND lease.expires_at > {NOW_MS}"
            ),
            &[&node.as_str(), &partitions, &epochs],
        )
        .await
        .map_err(unavailable)?;
        Ok(())
    }

    async fn leave(&self, node: &NodeId) -> Result<(), LeaseError> {
        self.execute("DELETE FROM members WHERE node = $1", &[&node.as_str()])
            .await
            .map_err(unavailable)?;
        Ok(())
    }
}

impl PostgresStore {
    /// The fencing check: whether `fence`'s node still holds its partition at its epoch,
    /// live by the database's clock. A commit runs it in its own transaction with the row
    /// locked (`FOR SHARE`), so an acquire cannot slip in between check and commit; here it
    /// runs alone, for the tests and for callers that only ask.
    pub async fn check_fence(&self, fence: &Fence) -> Result<Result<(), Fenced>, LeaseError> {
        let rows = self
            .query(
                &format!(
                    "SELECT 1 FROM partition_leases
                      WHERE partition = $1 AND owner = $2 AND epoch = $3
                        AND expires_at > {NOW_MS}"
                ),
                &[
                    &partition_number(fence.partition),
                    &fence.node.as_str(),
                    &millis(fence.epoch.0),
                ],
            )
            .await
            .map_err(unavailable)?;
        Ok(if rows.is_empty() {
            Err(Fenced {
                partition: fence.partition,
                epoch: fence.epoch,
            })
        } else {
            Ok(())
        })
    }
}
