//! An in-memory [`LeaseStore`]: for one node on its own (it holds every partition) and for
//! tests. It is also the reference a real store's SQL is checked against: the model
//! (`tests/model.rs`) runs the cluster on it.
//!
//! Its clock is explicit: [`StoreClock::Manual`] for tests and simulations, which set
//! it; [`StoreClock::Monotonic`] for real use, milliseconds since the store was made.
//! Every operation also exists as a plain method taking the store time (`*_at`), which is
//! what the deterministic model calls.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use async_trait::async_trait;

use crate::lease::{
    ClusterView, Epoch, Fence, Fenced, Lease, LeaseError, LeaseStore, Member, NodeId,
};
use crate::partition::PartitionId;

/// The memory store's clock, in milliseconds.
#[derive(Debug)]
pub enum StoreClock {
    /// Set by the caller ([`MemoryLeaseStore::set_now`]).
    Manual(AtomicU64),
    /// Milliseconds since this instant.
    Monotonic(Instant),
}

impl StoreClock {
    fn now(&self) -> u64 {
        match self {
            StoreClock::Manual(now) => now.load(Ordering::Acquire),
            // Milliseconds since the store was made: u64 lasts 584 million years.
            StoreClock::Monotonic(start) => start.elapsed().as_millis() as u64,
        }
    }
}

#[derive(Debug, Default)]
struct Tables {
    leases: BTreeMap<PartitionId, Lease>,
    members: BTreeMap<NodeId, Member>,
}

/// The lease and membership tables in memory (see the module docs).
#[derive(Debug)]
pub struct MemoryLeaseStore {
    clock: StoreClock,
    tables: Mutex<Tables>,
}

impl MemoryLeaseStore {
    /// A store on the process's monotonic clock.
    pub fn new() -> Self {
        Self::with_clock(StoreClock::Monotonic(Instant::now()))
    }

    /// A store whose clock starts at `now` and moves only by [`set_now`](Self::set_now).
    pub fn with_manual_clock(now: u64) -> Self {
        Self::with_clock(StoreClock::Manual(AtomicU64::new(now)))
    }

    fn with_clock(clock: StoreClock) -> Self {
        MemoryLeaseStore {
            clock,
            tables: Mutex::new(Tables::default()),
        }
    }

    /// Sets a manual clock (it may not go back); does nothing to a monotonic one.
    pub fn set_now(&self, now: u64) {
        if let StoreClock::Manual(clock) = &self.clock {
            clock.fetch_max(now, Ordering::AcqRel);
        }
    }

    /// The store's clock.
    pub fn now(&self) -> u64 {
        self.clock.now()
    }

    fn tables(&self) -> MutexGuard<'_, Tables> {
        // A panic while the lock is held leaves the tables as consistent as between two
        // statements (each method changes one entry at a time), so poisoning is ignored.
        self.tables
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// [`LeaseStore::heartbeat`] at store time `now`.
    pub fn heartbeat_at(&self, now: u64, node: &NodeId, address: &str, ttl_ms: u64) -> ClusterView {
        let mut tables = self.tables();
        tables.members.insert(
            node.clone(),
            Member {
                node: node.clone(),
                address: Arc::from(address),
                expires_at: now.saturating_add(ttl_ms),
            },
        );
        Self::view_of(&tables, now)
    }

    /// The tables at store time `now`, without a heartbeat.
    pub fn view_at(&self, now: u64) -> ClusterView {
        Self::view_of(&self.tables(), now)
    }

    fn view_of(tables: &Tables, now: u64) -> ClusterView {
        ClusterView {
            now,
            members: tables
                .members
                .values()
                .filter(|member| now < member.expires_at)
                .cloned()
                .collect(),
            leases: tables.leases.values().cloned().collect(),
        }
    }

    /// [`LeaseStore::acquire`] at store time `now`.
    pub fn acquire_at(
        &self,
        now: u64,
        partition: PartitionId,
        node: &NodeId,
        address: &str,
        seen_epoch: Epoch,
        ttl_ms: u64,
    ) -> Option<Lease> {
        let mut tables = self.tables();
        let epoch = match tables.leases.get(&partition) {
            None if seen_epoch == Epoch(0) => Epoch(1),
            None => return None,
            Some(lease) if lease.epoch != seen_epoch => return None,
            Some(lease) if lease.owner == *node || !lease.is_live(now) => lease.epoch.next(),
            Some(_) => return None,
        };
        let lease = Lease {
            partition,
            owner: node.clone(),
            epoch,
            expires_at: now.saturating_add(ttl_ms),
            address: Arc::from(address),
        };
        tables.leases.insert(partition, lease.clone());
        Some(lease)
    }

    /// [`LeaseStore::renew`] at store time `now`.
    pub fn renew_at(
        &self,
        now: u64,
        node: &NodeId,
        leases: &[(PartitionId, Epoch)],
        ttl_ms: u64,
    ) -> Vec<PartitionId> {
        let mut tables = self.tables();
        let mut renewed = Vec::new();
        for (partition, epoch) in leases {
            if let Some(lease) = tables.leases.get_mut(partition)
                && lease.owner == *node
                && lease.epoch == *epoch
                && lease.is_live(now)
            {
                lease.expires_at = now.saturating_add(ttl_ms);
                renewed.push(*partition);
            }
        }
        renewed
    }

    /// [`LeaseStore::release`] at store time `now`.
    pub fn release_at(&self, now: u64, partition: PartitionId, node: &NodeId, epoch: Epoch) {
        let mut tables = self.tables();
        if let Some(lease) = tables.leases.get_mut(&partition)
            && lease.owner == *node
            && lease.epoch == epoch
            && lease.is_live(now)
        {
            lease.expires_at = now;
        }
    }

    /// [`LeaseStore::leave`].
    pub fn leave_now(&self, node: &NodeId) {
        self.tables().members.remove(node);
    }

    /// The fencing check a commit's transaction makes (see [`crate::lease`]), at store time
    /// `now`. A store that keeps conversations in memory beside these leases calls it
    /// under the same lock as the commit; the model does.
    pub fn check_fence(&self, now: u64, fence: &Fence) -> Result<(), Fenced> {
        match self.tables().leases.get(&fence.partition) {
            Some(lease)
                if lease.owner == fence.node
                    && lease.epoch == fence.epoch
                    && lease.is_live(now) =>
            {
                Ok(())
            }
            _ => Err(Fenced {
                partition: fence.partition,
                epoch: fence.epoch,
            }),
        }
    }
}

impl Default for MemoryLeaseStore {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl LeaseStore for MemoryLeaseStore {
    async fn heartbeat(
        &self,
        node: &NodeId,
        address: &str,
        ttl_ms: u64,
    ) -> Result<ClusterView, LeaseError> {
        Ok(self.heartbeat_at(self.now(), node, address, ttl_ms))
    }

    async fn acquire(
        &self,
        partition: PartitionId,
        node: &NodeId,
        address: &str,
        seen_epoch: Epoch,
        ttl_ms: u64,
    ) -> Result<Option<Lease>, LeaseError> {
        Ok(self.acquire_at(self.now(), partition, node, address, seen_epoch, ttl_ms))
    }

    async fn renew(
        &self,
        node: &NodeId,
        leases: &[(PartitionId, Epoch)],
        ttl_ms: u64,
    ) -> Result<Vec<PartitionId>, LeaseError> {
        Ok(self.renew_at(self.now(), node, leases, ttl_ms))
    }

    async fn release(
        &self,
        partition: PartitionId,
        node: &NodeId,
        epoch: Epoch,
    ) -> Result<(), LeaseError> {
        self.release_at(self.now(), partition, node, epoch);
        Ok(())
    }

    async fn leave(&self, node: &NodeId) -> Result<(), LeaseError> {
        self.leave_now(node);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;

    /// Runs a future that never waits (every memory store operation) to its end.
    fn ready<F: Future>(future: F) -> F::Output {
        match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(output) => output,
            Poll::Pending => unreachable!("the memory store never waits"),
        }
    }

    const P: PartitionId = PartitionId(7);

    fn node(name: &str) -> NodeId {
        NodeId::new(name)
    }

    fn fence(node: &NodeId, epoch: u64) -> Fence {
        Fence {
            partition: P,
            node: node.clone(),
            epoch: Epoch(epoch),
        }
    }

    fn acquire(store: &MemoryLeaseStore, node: &NodeId, seen: u64) -> Option<Lease> {
        ready(store.acquire(P, node, "addr", Epoch(seen), 100)).unwrap()
    }

    #[test]
    fn acquire_is_a_compare_and_set_that_starts_a_new_epoch() {
        let store = MemoryLeaseStore::with_manual_clock(1_000);
        let (a, b) = (node("a"), node("b"));
        // Free: the first owner is at epoch 1; a wrong seen epoch fails.
        assert_eq!(acquire(&store, &a, 3), None);
        let lease = acquire(&store, &a, 0).unwrap();
        assert_eq!((lease.epoch, lease.expires_at), (Epoch(1), 1_100));
        // Live for a: b cannot take it; a can again (adopting it after a lost answer),
        // as a new tenure.
        assert_eq!(acquire(&store, &b, 1), None);
        assert_eq!(acquire(&store, &a, 1).unwrap().epoch, Epoch(2));
        // Expired by the store's clock: b takes it at epoch 3.
        store.set_now(1_100);
        let taken = acquire(&store, &b, 2).unwrap();
        assert_eq!((taken.owner, taken.epoch), (b.clone(), Epoch(3)));
        // a's renewal and its commits are refused now; b's pass.
        assert_eq!(ready(store.renew(&a, &[(P, Epoch(2))], 100)), Ok(vec![]));
        assert!(store.check_fence(1_100, &fence(&a, 2)).is_err());
        assert!(store.check_fence(1_100, &fence(&b, 3)).is_ok());
    }

    #[test]
    fn renew_keeps_only_live_leases_and_release_fences_at_once() {
        let store = MemoryLeaseStore::with_manual_clock(0);
        let a = node("a");
        acquire(&store, &a, 0).unwrap();
        store.set_now(50);
        assert_eq!(ready(store.renew(&a, &[(P, Epoch(1))], 100)), Ok(vec![P]));
        store.set_now(149);
        assert!(store.check_fence(149, &fence(&a, 1)).is_ok());
        ready(store.release(P, &a, Epoch(1))).unwrap();
        assert!(store.check_fence(149, &fence(&a, 1)).is_err());
        assert_eq!(ready(store.renew(&a, &[(P, Epoch(1))], 100)), Ok(vec![]));
        // Taking one's own released lease back is a new tenure: a release of the old one
        // still on its way cannot end it.
        assert_eq!(acquire(&store, &a, 1).unwrap().epoch, Epoch(2));
        ready(store.release(P, &a, Epoch(1))).unwrap();
        assert!(store.check_fence(149, &fence(&a, 2)).is_ok());
    }

    #[test]
    fn membership_expires_by_the_store_clock() {
        let store = MemoryLeaseStore::with_manual_clock(0);
        let view = ready(store.heartbeat(&node("a"), "a:1", 100)).unwrap();
        assert_eq!(view.members.len(), 1);
        store.set_now(60);
        let view = ready(store.heartbeat(&node("b"), "b:1", 100)).unwrap();
        assert_eq!(view.members.len(), 2);
        store.set_now(100);
        let view = ready(store.heartbeat(&node("b"), "b:1", 100)).unwrap();
        assert_eq!(
            view.members
                .iter()
                .map(|m| m.node.as_str())
                .collect::<Vec<_>>(),
            ["b"]
        );
        ready(store.leave(&node("b"))).unwrap();
        assert!(store.view_at(100).members.is_empty());
    }
}
