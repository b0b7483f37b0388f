//! Leases in the store, and the small trait a store implements to keep them.
//!
//! One row per partition: `(partition, owner, epoch, expires_at, address)`, and one row per
//! live node: `(node, address, expires_at)`. Every time in them is the **store's** clock
//! (`now()` in the store's transaction), never a node's: a node compares readings of its
//! own monotonic clock only with each other ([`crate::local`]).
//!
//! # The fencing contract
//! A commit for a conversation of partition `p` carries a [`Fence`] `(p, node, epoch)`:
//! the lease the committing node believes it holds. The store checks, **in the same
//! transaction as the commit and before it applies anything**, that `p`'s lease row still
//! has that owner and that epoch and has not expired by the store's clock; the check must
//! lock the row (`SELECT … FOR SHARE`, or an `UPDATE` of it), so that an [`acquire`] by
//! another node waits for the commit or the commit waits for the acquire, never both
//! proceed. If the check fails, the transaction rolls back and the commit fails with
//! [`Fenced`]; the node then drops the partition and its cache of it
//! ([`crate::local::LocalLeases::fenced`]), and the caller is answered by the new owner. A
//! batch of commits across several partitions checks each partition in it (one `UPDATE …
//! WHERE partition = ANY(…)` counting the rows it matched). The per-conversation version
//! check stays as a second line of defence. It is not enough alone: a stale node's commit
//! at a version that happens to be current would pass it, and the new owner's cache would
//! silently fall behind an acknowledged write (the model checks exactly that, and fails
//! within seconds when the store skips this check). Fencing is also what stops a stale
//! node from firing a deadline or logging a refusal; local validity stops it answering
//! from a stale cache.
//!
//! [`acquire`]: LeaseStore::acquire

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::partition::PartitionId;

/// One engine node, **per process incarnation**: a restarted process gets a new id (for
/// example `host:port/uuid`), so that the commits a dead incarnation left on the wire can
/// never pass as the new one's. Ordered, for deterministic tie-breaks.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub Arc<str>);

impl NodeId {
    /// A node id from text.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        NodeId(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", &*self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A partition's fencing token: it grows by one with every successful acquire — a new
/// **tenure**, also when the same node takes its own lease again — and never goes back;
/// renewals keep it. `(node, epoch)` thus names one tenure, so a late release, renewal or
/// commit of an earlier tenure cannot touch a later one. 0: the partition never had an
/// owner. Temporal calls it the shard's `RangeID` (also bumped on every acquisition);
/// Restate and Orleans, the leader epoch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(pub u64);

impl Epoch {
    /// The next epoch (an owner change).
    pub fn next(self) -> Epoch {
        Epoch(self.0 + 1)
    }
}

/// A partition's lease row as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The partition.
    pub partition: PartitionId,
    /// Who holds or last held it.
    pub owner: NodeId,
    /// The fencing token of the owner's tenure.
    pub epoch: Epoch,
    /// When it runs out, in the store clock's milliseconds. A released lease has its expiry
    /// set to the moment of release.
    pub expires_at: u64,
    /// The owner's internal HTTP address, where other nodes forward its conversations.
    pub address: Arc<str>,
}

impl Lease {
    /// Whether the lease still holds at store time `now`.
    pub fn is_live(&self, now: u64) -> bool {
        now < self.expires_at
    }
}

/// A live node as the store's membership table holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The node.
    pub node: NodeId,
    /// Its internal HTTP address.
    pub address: Arc<str>,
    /// When its heartbeat runs out, in the store clock's milliseconds.
    pub expires_at: u64,
}

/// The lease and membership tables as of one moment of the store's clock, read in one
/// transaction.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterView {
    /// The store's clock when the view was read, in milliseconds.
    pub now: u64,
    /// The nodes whose heartbeat is live at `now`, in any order.
    pub members: Vec<Member>,
    /// Every partition that ever had an owner, live or not, in any order. A partition not
    /// listed is free, at epoch 0.
    pub leases: Vec<Lease>,
}

/// What a commit carries so the store can refuse one from a node that no longer owns its
/// partition (see the module docs for the contract).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The commit's partition.
    pub partition: PartitionId,
    /// The committing node.
    pub node: NodeId,
    /// The epoch it holds the partition at.
    pub epoch: Epoch,
}

/// A commit refused by fencing: `partition`'s lease is no longer the committer's at
/// `epoch`. The commit applied nothing.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("partition {partition} is no longer held at epoch {}", epoch.0)]
pub struct Fenced {
    /// The partition.
    pub partition: PartitionId,
    /// The epoch the committer believed it held.
    pub epoch: Epoch,
}

/// A lease operation that did not get an answer from the store.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LeaseError {
    /// The store could not be reached or the transaction failed; whether it applied is
    /// unknown. The node treats the request as unanswered (it stays safe: a lease only
    /// counts from an answer).
    #[error("lease store unavailable: {0}")]
    Unavailable(String),
}

/// What a store implements so nodes can share partitions. Each method is one transaction
/// of the store, judged by the store's clock (`now` below). Refusals are answers, not
/// errors: `Err` means the store did not answer.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Records that `node` is alive at `address` until `now + ttl_ms` (an upsert), then
    /// reads the view: `now`, the members live at `now` (this node included) and every
    /// lease row. The node's tick starts with it.
    async fn heartbeat(
        &self,
        node: &NodeId,
        address: &str,
        ttl_ms: u64,
    ) -> Result<ClusterView, LeaseError>;

    /// Takes `partition` for `node`, a compare-and-set on the epoch the node saw:
    /// succeeds only if the row is at `seen_epoch` (0 and no row: never owned) **and**
    /// it is free, expired at `now`, or already `node`'s (adopting a lease whose answer
    /// was lost). Then the row becomes `(node, seen_epoch + 1, now + ttl_ms, address)`:
    /// always a new epoch, also for the same owner (see [`Epoch`] for why). Returns the
    /// new lease, or `None` if the compare-and-set failed. SQL, over pre-created rows
    /// (owner NULL, epoch 0): `UPDATE partition_leases SET owner=$node, address=$addr,
    /// epoch=epoch+1, expires_at=now()+$ttl WHERE partition=$p AND epoch=$seen AND
    /// (owner=$node OR owner IS NULL OR expires_at<=now()) RETURNING …`.
    async fn acquire(
        &self,
        partition: PartitionId,
        node: &NodeId,
        address: &str,
        seen_epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, LeaseError>;

    /// Extends each of `leases` that is still `node`'s at that epoch **and live at `now`**
    /// to `now + ttl_ms`; returns the partitions it extended. One not returned is lost (or
    /// expired: the node may try [`acquire`](Self::acquire) again). One statement:
    /// `UPDATE … FROM unnest($ps, $epochs) … WHERE owner=$node AND expires_at>now()
    /// RETURNING partition`.
    async fn renew(
        &self,
        node: &NodeId,
        leases: &[(PartitionId, Epoch)],
        ttl_ms: u64,
    ) -> Result<Vec<PartitionId>, LeaseError>;

    /// Gives `partition` back if `node` holds it at `epoch` and it is live: its expiry
    /// becomes `now`, the owner and epoch stay (the epoch never goes back). A release of
    /// an earlier tenure, arriving late, does nothing. Commits fenced on it fail from
    /// now on. Releasing a lease one does not hold does nothing.
    async fn release(
        &self,
        partition: PartitionId,
        node: &NodeId,
        epoch: Epoch,
    ) -> Result<(), LeaseError>;

    /// [`acquire`](Self::acquire) of each of `wanted` (partition, seen epoch) in **one**
    /// transaction, so a node taking many partitions (a cold start, a dead node's share)
    /// waits for one commit instead of one per partition. Returns the leases it took; a
    /// partition not among them was refused. `Err`: the answer did not arrive, and which of
    /// them applied is unknown. The default sends them one at a time.
    async fn acquire_many(
        &self,
        node: &NodeId,
        address: &str,
        wanted: &[(PartitionId, Epoch)],
        ttl_ms: u64,
    ) -> Result<Vec<Lease>, LeaseError> {
        let mut taken = Vec::new();
        for &(partition, seen_epoch) in wanted {
            if let Some(lease) = self
                .acquire(partition, node, address, seen_epoch, ttl_ms)
                .await?
            {
                taken.push(lease);
            }
        }
        Ok(taken)
    }

    /// [`release`](Self::release) of each of `leases` (partition, epoch) in one
    /// transaction. The default sends them one at a time.
    async fn release_many(
        &self,
        node: &NodeId,
        leases: &[(PartitionId, Epoch)],
    ) -> Result<(), LeaseError> {
        for &(partition, epoch) in leases {
            self.release(partition, node, epoch).await?;
        }
        Ok(())
    }

    /// Removes `node` from the membership (a clean shutdown, after releasing its leases),
    /// so the others count it out at once rather than after its heartbeat runs out.
    async fn leave(&self, node: &NodeId) -> Result<(), LeaseError>;
}
