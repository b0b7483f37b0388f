//! One node's own view of its leases, by its own monotonic clock, and routing.
//!
//! The store says who owns what by *its* clock; a node cannot read that clock when it
//! serves a read. So a node keeps its own **local validity** per lease: from the moment it
//! *sent* the request that the store then granted (acquire or renew) — not from when the
//! answer came back, which may be arbitrarily later — for
//! [`OwnershipConfig::local_validity_ms`]: the TTL less the drift bound and a safety
//! margin. Within it, the store's lease has not expired, so no other node can have taken
//! the partition, and the node may serve reads and refusals from its cache. Outside it the
//! node neither serves nor forwards the partition's conversations until a renewal is
//! answered (writes would be fenced anyway; reads would not).
//!
//! A node drops a partition, and the server drops its cached conversations of it, when the
//! store says it is lost: a renewal or re-acquire refused, a view showing another owner or
//! a later epoch, a commit [`Fenced`](crate::lease::Fenced), or when it gives it back. The
//! cache survives a mere lapse of local validity: if the store then renews the lease at the
//! same epoch, nobody else can have written in between.
//!
//! Everything here is pure: the caller passes its monotonic clock's reading (`now`, in
//! milliseconds since any fixed origin) and the store's answers.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::OwnershipConfig;
use crate::lease::{ClusterView, Epoch, Lease, NodeId};
use crate::partition::{PartitionId, partition_of};

/// A lease this node holds, as it knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The epoch the store granted; commits are fenced on it.
    pub epoch: Epoch,
    /// Until when (local clock) the lease counts as held.
    pub valid_until: u64,
    /// When (local clock) the request that last extended it was sent.
    pub confirmed_at: u64,
}

/// Where a request for a conversation goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// This node owns it with a locally valid lease: serve it, from the cache if loaded.
    Serve {
        /// The partition.
        partition: PartitionId,
        /// The epoch to fence this node's commits with.
        epoch: Epoch,
    },
    /// Another node owned it at the last view: forward the request to its internal
    /// address. A forwarded request is never forwarded again: the receiving node serves it
    /// or answers [`Route::Unavailable`].
    Forward(Arc<str>),
    /// Nobody can serve it right now (the partition is changing hands, or this node's lease
    /// lapsed and its renewal is on the way). Retry after this long (ms); a server waits and
    /// routes again for a while before it answers 503 with `Retry-After`.
    Unavailable {
        /// Milliseconds until it is worth asking again.
        retry_after_ms: u64,
    },
}

/// One lease request, so that an answer is taken in only if it answers the partition's
/// latest request. An answer that comes back after the node sent another request for the
/// partition, gave it back, or lost it, is ignored: counted from its own send time it
/// might still look valid, but the node may have released the lease since (the model found
/// that in a first version, which matched answers by partition).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Ticket(u64);

/// A lease request on its way to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Pending {
    ticket: Ticket,
    /// When it was sent (local clock).
    sent_at: u64,
}

/// Another node's lease as of the last view: where to forward.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Owner {
    node: NodeId,
    address: Arc<str>,
}

/// A node's local view of its leases (see the module docs).
#[derive(Clone, Debug)]
pub struct LocalLeases {
    me: NodeId,
    address: Arc<str>,
    config: OwnershipConfig,
    held: BTreeMap<PartitionId, Held>,
    pending: BTreeMap<PartitionId, Pending>,
    owners: BTreeMap<PartitionId, Owner>,
    next_ticket: u64,
}

impl LocalLeases {
    /// A node that holds nothing yet.
    pub fn new(me: NodeId, address: impl Into<Arc<str>>, config: OwnershipConfig) -> Self {
        LocalLeases {
            me,
            address: address.into(),
            config,
            held: BTreeMap::new(),
            pending: BTreeMap::new(),
            owners: BTreeMap::new(),
            next_ticket: 0,
        }
    }

    /// This node.
    pub fn me(&self) -> &NodeId {
        &self.me
    }

    /// This node's internal address.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// The settings.
    pub fn config(&self) -> &OwnershipConfig {
        &self.config
    }

    /// The leases this node holds (locally valid or not), by partition.
    pub fn held(&self) -> &BTreeMap<PartitionId, Held> {
        &self.held
    }

    /// Whether a lease request for `partition` is on its way and not yet given up on.
    pub fn is_pending(&self, partition: PartitionId, now: u64) -> bool {
        self.pending.get(&partition).is_some_and(|pending| {
            now.saturating_sub(pending.sent_at) < self.config.request_timeout_ms()
        })
    }

    /// The lease on `partition`, if it is locally valid at `now`.
    pub fn valid(&self, partition: PartitionId, now: u64) -> Option<&Held> {
        self.held
            .get(&partition)
            .filter(|held| now < held.valid_until)
    }

    /// The epoch `partition` is held at if the lease is locally valid at `now`.
    pub fn valid_epoch(&self, partition: PartitionId, now: u64) -> Option<Epoch> {
        self.valid(partition, now).map(|held| held.epoch)
    }

    /// Takes in a fresh view of the store: where other nodes' partitions are, and which of
    /// this node's the store shows lost. Returns the partitions dropped (drop their cache).
    pub fn observe(&mut self, view: &ClusterView) -> Vec<PartitionId> {
        self.owners.clear();
        let mut dropped = Vec::new();
        for lease in &view.leases {
            if lease.owner != self.me && lease.is_live(view.now) {
                self.owners.insert(
                    lease.partition,
                    Owner {
                        node: lease.owner.clone(),
                        address: lease.address.clone(),
                    },
                );
            }
            // A view older than an answer already taken in shows an older epoch: ignored.
            if let Some(held) = self.held.get(&lease.partition)
                && (lease.epoch > held.epoch
                    || (lease.epoch == held.epoch && lease.owner != self.me))
            {
                self.held.remove(&lease.partition);
                self.pending.remove(&lease.partition);
                dropped.push(lease.partition);
            }
        }
        dropped
    }

    /// Records that a request for these partitions (an acquire: one; a renewal: several)
    /// is sent at `now`. Its answers are taken in with the ticket returned.
    pub fn sent(&mut self, partitions: impl IntoIterator<Item = PartitionId>, now: u64) -> Ticket {
        self.next_ticket += 1;
        let ticket = Ticket(self.next_ticket);
        for partition in partitions {
            self.pending.insert(
                partition,
                Pending {
                    ticket,
                    sent_at: now,
                },
            );
        }
        ticket
    }

    /// Takes the pending request `ticket` for `partition` off the books, with its send
    /// time; `None` if a later request or a drop superseded it.
    fn answered(&mut self, ticket: Ticket, partition: PartitionId) -> Option<u64> {
        match self.pending.get(&partition).copied() {
            Some(pending) if pending.ticket == ticket => {
                self.pending.remove(&partition);
                Some(pending.sent_at)
            }
            _ => None,
        }
    }

    /// The store granted acquire `ticket`. Returns the partitions dropped: the same one, if
    /// it was held at another epoch (its cache is stale).
    pub fn acquired(&mut self, ticket: Ticket, lease: &Lease) -> Vec<PartitionId> {
        let Some(sent_at) = self.answered(ticket, lease.partition) else {
            return Vec::new();
        };
        let valid_until = sent_at.saturating_add(self.config.local_validity_ms());
        let mut dropped = Vec::new();
        match self.held.get_mut(&lease.partition) {
            Some(held) if held.epoch == lease.epoch => {
                held.valid_until = held.valid_until.max(valid_until);
                held.confirmed_at = held.confirmed_at.max(sent_at);
                return dropped;
            }
            Some(_) => dropped.push(lease.partition),
            None => {}
        }
        self.held.insert(
            lease.partition,
            Held {
                epoch: lease.epoch,
                valid_until,
                confirmed_at: sent_at,
            },
        );
        dropped
    }

    /// The store renewed `partition` on request `ticket`. Only ever extends a lease still
    /// held at that epoch.
    pub fn renewed(&mut self, ticket: Ticket, partition: PartitionId, epoch: Epoch) {
        let Some(sent_at) = self.answered(ticket, partition) else {
            return;
        };
        let valid_until = sent_at.saturating_add(self.config.local_validity_ms());
        if let Some(held) = self.held.get_mut(&partition)
            && held.epoch == epoch
        {
            held.valid_until = held.valid_until.max(valid_until);
            held.confirmed_at = held.confirmed_at.max(sent_at);
        }
    }

    /// The store refused request `ticket` (a renewal or an acquire) for `partition`: if
    /// held, it is lost. Returns the partitions dropped.
    pub fn refused(&mut self, ticket: Ticket, partition: PartitionId) -> Vec<PartitionId> {
        if self.answered(ticket, partition).is_none() {
            return Vec::new();
        }
        self.held
            .remove(&partition)
            .map(|_| partition)
            .into_iter()
            .collect()
    }

    /// Request `ticket` for `partition` got no answer (the store was unavailable): it may
    /// be sent again. The lease, if held, stays as it was: it only counts from answers.
    pub fn unanswered(&mut self, ticket: Ticket, partition: PartitionId) {
        self.answered(ticket, partition);
    }

    /// The store answered release `ticket` of `partition`.
    pub fn released(&mut self, ticket: Ticket, partition: PartitionId) {
        self.answered(ticket, partition);
    }

    /// This node gives `partition` back (a [`plan`](crate::plan::plan)'s `Release`): it
    /// stops serving it now, before the release is even sent, and ignores any answer still
    /// on its way for it. Send the release with the ticket returned.
    pub fn release(&mut self, partition: PartitionId, now: u64) -> Ticket {
        self.held.remove(&partition);
        self.sent([partition], now)
    }

    /// A commit fenced at `epoch`: the partition is lost if held at that epoch or earlier.
    /// Returns whether it was dropped.
    pub fn fenced(&mut self, partition: PartitionId, epoch: Epoch) -> bool {
        if self
            .held
            .get(&partition)
            .is_some_and(|held| held.epoch <= epoch)
        {
            self.held.remove(&partition);
            true
        } else {
            false
        }
    }

    /// Forgets everything (the node restarts with a new [`NodeId`] anyway).
    pub fn clear(&mut self) {
        self.held.clear();
        self.pending.clear();
        self.owners.clear();
    }

    /// Where a request for `conversation_id` goes at local time `now`.
    pub fn route(&self, conversation_id: &str, now: u64) -> Route {
        let partition = partition_of(conversation_id, self.config.partitions);
        self.route_partition(partition, now)
    }

    /// [`route`](Self::route) for a partition.
    pub fn route_partition(&self, partition: PartitionId, now: u64) -> Route {
        if let Some(epoch) = self.valid_epoch(partition, now) {
            return Route::Serve { partition, epoch };
        }
        if !self.held.contains_key(&partition)
            && let Some(owner) = self.owners.get(&partition)
            && owner.node != self.me
        {
            return Route::Forward(owner.address.clone());
        }
        Route::Unavailable {
            retry_after_ms: self.config.tick_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::Member;

    fn config() -> OwnershipConfig {
        OwnershipConfig {
            partitions: 4,
            ..OwnershipConfig::default()
        }
    }

    fn lease(partition: u32, owner: &str, epoch: u64) -> Lease {
        Lease {
            partition: PartitionId(partition),
            owner: NodeId::new(owner),
            epoch: Epoch(epoch),
            expires_at: 1_000_000,
            address: Arc::from(format!("{owner}:8080")),
        }
    }

    #[test]
    fn a_lease_counts_from_when_the_request_was_sent_not_answered() {
        let mut local = LocalLeases::new(NodeId::new("a"), "a:8080", config());
        let ticket = local.sent([PartitionId(1)], 1_000);
        assert!(local.is_pending(PartitionId(1), 1_000));
        // The answer comes 5 s later; the lease counts from 1 s.
        assert!(local.acquired(ticket, &lease(1, "a", 3)).is_empty());
        let validity = local.config().local_validity_ms();
        assert_eq!(local.valid_epoch(PartitionId(1), 6_000), Some(Epoch(3)));
        assert_eq!(
            local.valid_epoch(PartitionId(1), 1_000 + validity - 1),
            Some(Epoch(3))
        );
        assert_eq!(local.valid_epoch(PartitionId(1), 1_000 + validity), None);
        // A renewal sent later extends it from its own send time.
        let ticket = local.sent([PartitionId(1)], 4_000);
        local.renewed(ticket, PartitionId(1), Epoch(3));
        assert_eq!(
            local.valid_epoch(PartitionId(1), 4_000 + validity - 1),
            Some(Epoch(3))
        );
    }

    #[test]
    fn an_answer_to_a_superseded_request_is_ignored() {
        let mut local = LocalLeases::new(NodeId::new("a"), "a:8080", config());
        let first = local.sent([PartitionId(0)], 0);
        // Given up on and sent again, then given back before either answer came.
        let second = local.sent([PartitionId(0)], 2_000);
        local.release(PartitionId(0), 3_000);
        assert!(local.acquired(first, &lease(0, "a", 1)).is_empty());
        assert!(local.acquired(second, &lease(0, "a", 2)).is_empty());
        assert!(local.held().is_empty());
    }

    #[test]
    fn losing_a_partition_drops_it() {
        let mut local = LocalLeases::new(NodeId::new("a"), "a:8080", config());
        for partition in 0..3 {
            let ticket = local.sent([PartitionId(partition)], 0);
            local.acquired(ticket, &lease(partition, "a", 1));
        }
        // A renewal refused, a commit fenced, a view showing a later owner.
        let ticket = local.sent([PartitionId(0)], 10);
        assert_eq!(local.refused(ticket, PartitionId(0)), [PartitionId(0)]);
        assert!(local.fenced(PartitionId(1), Epoch(1)));
        let view = ClusterView {
            now: 0,
            members: Vec::new(),
            leases: vec![lease(2, "b", 2)],
        };
        assert_eq!(local.observe(&view), [PartitionId(2)]);
        assert!(local.held().is_empty());
    }

    #[test]
    fn routing_serves_what_is_valid_forwards_what_another_owns_and_waits_otherwise() {
        let mut local = LocalLeases::new(NodeId::new("a"), "a:8080", config());
        let ours = partition_of("mine", 4);
        let theirs = PartitionId((ours.0 + 1) % 4);
        let ticket = local.sent([ours], 0);
        local.acquired(ticket, &lease(ours.0, "a", 7));
        local.observe(&ClusterView {
            now: 0,
            members: vec![Member {
                node: NodeId::new("b"),
                address: Arc::from("b:8080"),
                expires_at: 10,
            }],
            leases: vec![lease(ours.0, "a", 7), lease(theirs.0, "b", 2)],
        });
        assert_eq!(
            local.route("mine", 100),
            Route::Serve {
                partition: ours,
                epoch: Epoch(7)
            }
        );
        assert_eq!(
            local.route_partition(theirs, 100),
            Route::Forward(Arc::from("b:8080"))
        );
        // Past local validity, not even forwarded: the renewal is on its way.
        let lapsed = local.config().local_validity_ms();
        assert!(matches!(
            local.route("mine", lapsed),
            Route::Unavailable { .. }
        ));
        let free = PartitionId((ours.0 + 2) % 4);
        assert!(matches!(
            local.route_partition(free, 100),
            Route::Unavailable { .. }
        ));
    }
}
