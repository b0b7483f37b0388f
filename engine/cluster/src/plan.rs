//! What a node does on one tick: pure, no I/O.
//!
//! Input: the store's [`ClusterView`] (read with this tick's heartbeat), this node's
//! [`LocalLeases`] (after [`LocalLeases::observe`] of that view) and its monotonic clock.
//! Output: [`Action`]s for the driver to send. Every node runs the same function on
//! (nearly) the same view, so they converge without talking to each other:
//!
//! - **Targets.** The live members, sorted by id, share the P partitions: each gets
//!   `⌊P/N⌋`, and the first `P mod N` one more. Targets add up to P, so whenever a
//!   partition is free some node is below its target, and at rest shares differ by one.
//! - **Renew** each held lease a third of the TTL (by the node's clock) after the request
//!   that last confirmed it was sent; **re-take** at the same epoch one the store shows
//!   expired but still this node's.
//! - **Take** every free or expired partition it can while below target, never one whose
//!   lease is live for another node (the store's compare-and-set would refuse it anyway).
//!   Takes are not rationed: a free partition serves no one until it is taken, and a
//!   cold start or a dead node's share is one batched request (see the driver). Each node prefers partitions in its own order (rendezvous hashing: the highest
//!   `fnv1a64(node ‖ partition)` first, ties by partition id), so nodes that see the same
//!   free partitions mostly reach for different ones.
//! - **Give back** the excess above target, least preferred first, at most
//!   `max_moves_per_tick` per tick, so a joining node is filled gradually and the
//!   partitions in flight at any moment stay few.
//! - **Adopt or release** leases the store shows as this node's that it does not know it
//!   holds (the answer to an acquire was lost): adopt while below target, else release.

use std::collections::{BTreeMap, BTreeSet};

use crate::lease::{ClusterView, Epoch, Lease, NodeId};
use crate::local::LocalLeases;
use crate::partition::{PartitionId, fnv1a64};

/// One lease request for the driver to send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// [`LeaseStore::acquire`](crate::LeaseStore::acquire) with the epoch the view showed.
    Acquire {
        /// The partition.
        partition: PartitionId,
        /// The epoch of its row in the view (0: no row).
        seen_epoch: Epoch,
    },
    /// [`LeaseStore::renew`](crate::LeaseStore::renew) of these held leases.
    Renew {
        /// The partitions and the epochs they are held at, in partition order.
        leases: Vec<(PartitionId, Epoch)>,
    },
    /// [`LeaseStore::release`](crate::LeaseStore::release). The driver first calls
    /// [`LocalLeases::release`], which stops serving the partition.
    Release {
        /// The partition.
        partition: PartitionId,
        /// The epoch it is held at.
        epoch: Epoch,
    },
}

/// How many partitions `me` should hold among the view's live members (see the module
/// docs). A node missing from the view counts itself in.
pub fn target_share(view: &ClusterView, me: &NodeId, partitions: u32) -> u32 {
    let mut members: BTreeSet<&NodeId> = view.members.iter().map(|member| &member.node).collect();
    members.insert(me);
    // Nodes number in the tens: the count fits a u32. `me` is in the set, so it has a rank.
    let count = members.len() as u32;
    let rank = members.iter().position(|node| *node == me).unwrap_or(0) as u32;
    partitions / count + u32::from(rank < partitions % count)
}

/// How much `node` prefers `partition`: rendezvous hashing, higher first.
fn preference(node: &NodeId, partition: PartitionId) -> u64 {
    let mut bytes = Vec::with_capacity(node.as_str().len() + 5);
    bytes.extend_from_slice(node.as_str().as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&partition.0.to_le_bytes());
    fnv1a64(&bytes)
}

/// The actions of one tick at local time `now` (see the module docs). Deterministic: the
/// same inputs give the same actions in the same order (releases, then acquires, then one
/// renewal).
pub fn plan(view: &ClusterView, local: &LocalLeases, now: u64) -> Vec<Action> {
    let config = local.config();
    let me = local.me();
    let leases: BTreeMap<PartitionId, &Lease> = view
        .leases
        .iter()
        .map(|lease| (lease.partition, lease))
        .collect();
    let target = target_share(view, me, config.partitions) as usize;
    let moves = config.max_moves_per_tick;

    let mut renew = Vec::new();
    let mut acquire = Vec::new();
    let mut release = Vec::new();
    // Partitions this node holds or is about to hold, and those of them it may give back.
    let mut owned = 0usize;
    let mut releasable = Vec::new();

    for (&partition, held) in local.held() {
        owned += 1;
        if local.is_pending(partition, now) {
            continue;
        }
        match leases.get(&partition) {
            Some(lease) if lease.owner == *me && lease.epoch == held.epoch => {
                if !lease.is_live(view.now) {
                    acquire.push(Action::Acquire {
                        partition,
                        seen_epoch: lease.epoch,
                    });
                    continue;
                }
                if now.saturating_sub(held.confirmed_at) >= config.renew_after_ms() {
                    renew.push((partition, held.epoch));
                }
                releasable.push(partition);
            }
            // Another owner or a later epoch: `observe` drops it. An older row: a view
            // older than the answer, renewed on the next tick.
            _ => {}
        }
    }

    // Answers on their way for partitions not held yet count as held: they probably are.
    let (mut orphans, mut free) = (Vec::new(), Vec::new());
    for index in 0..config.partitions {
        let partition = PartitionId(index);
        if local.held().contains_key(&partition) {
            continue;
        }
        if local.is_pending(partition, now) {
            owned += 1;
            continue;
        }
        match leases.get(&partition) {
            Some(lease) if lease.is_live(view.now) => {
                if lease.owner == *me {
                    orphans.push((partition, lease.epoch));
                }
            }
            Some(lease) => free.push((partition, lease.epoch)),
            None => free.push((partition, Epoch(0))),
        }
    }

    let by_preference = |a: &(PartitionId, Epoch), b: &(PartitionId, Epoch)| {
        preference(me, b.0)
            .cmp(&preference(me, a.0))
            .then(a.0.cmp(&b.0))
    };
    orphans.sort_by(by_preference);
    for (partition, epoch) in orphans {
        if owned < target {
            owned += 1;
            acquire.push(Action::Acquire {
                partition,
                seen_epoch: epoch,
            });
        } else {
            release.push(Action::Release { partition, epoch });
        }
    }

    if owned < target {
        free.sort_by(by_preference);
        acquire.extend(
            free.into_iter()
                .take(target - owned)
                .map(|(partition, seen_epoch)| Action::Acquire {
                    partition,
                    seen_epoch,
                }),
        );
    } else if owned > target {
        // Least preferred first.
        releasable.sort_by(|a, b| preference(me, *a).cmp(&preference(me, *b)).then(a.cmp(b)));
        for partition in releasable.into_iter().take((owned - target).min(moves)) {
            let epoch = local.held()[&partition].epoch;
            renew.retain(|(renewing, _)| *renewing != partition);
            release.push(Action::Release { partition, epoch });
        }
    }

    let mut actions = release;
    actions.extend(acquire);
    if !renew.is_empty() {
        actions.push(Action::Renew { leases: renew });
    }
    actions
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::config::OwnershipConfig;
    use crate::lease::Member;

    fn config(partitions: u32, moves: usize) -> OwnershipConfig {
        OwnershipConfig {
            partitions,
            max_moves_per_tick: moves,
            ..OwnershipConfig::default()
        }
    }

    fn member(name: &str) -> Member {
        Member {
            node: NodeId::new(name),
            address: Arc::from(name),
            expires_at: u64::MAX,
        }
    }

    fn lease(partition: u32, owner: &str, epoch: u64, expires_at: u64) -> Lease {
        Lease {
            partition: PartitionId(partition),
            owner: NodeId::new(owner),
            epoch: Epoch(epoch),
            expires_at,
            address: Arc::from(owner),
        }
    }

    fn view(now: u64, members: &[&str], leases: Vec<Lease>) -> ClusterView {
        ClusterView {
            now,
            members: members.iter().map(|name| member(name)).collect(),
            leases,
        }
    }

    fn acquired(actions: &[Action]) -> Vec<u32> {
        let mut partitions: Vec<u32> = actions
            .iter()
            .filter_map(|action| match action {
                Action::Acquire { partition, .. } => Some(partition.0),
                _ => None,
            })
            .collect();
        partitions.sort_unstable();
        partitions
    }

    #[test]
    fn targets_add_up_to_the_partitions_and_differ_by_at_most_one() {
        let names = ["a", "b", "c"];
        let view = view(0, &names, Vec::new());
        let shares: Vec<u32> = names
            .iter()
            .map(|name| target_share(&view, &NodeId::new(*name), 1024))
            .collect();
        assert_eq!(shares, [342, 341, 341]);
        // A node that does not see itself yet counts itself in.
        assert_eq!(target_share(&view, &NodeId::new("d"), 1024), 256);
    }

    #[test]
    fn a_node_takes_free_and_expired_partitions_up_to_its_share_never_a_live_one() {
        let local = LocalLeases::new(NodeId::new("a"), "a", config(8, 1));
        let leases = vec![lease(0, "b", 4, 2_000), lease(1, "b", 2, 1_000)];
        // Alone with b: a's share is 4, all taken in one tick (moves ration only
        // give-backs); p0 is live for b.
        let actions = plan(&view(1_000, &["a", "b"], leases), &local, 0);
        let taken = acquired(&actions);
        assert_eq!(taken.len(), 4);
        assert!(!taken.contains(&0), "{actions:?}");
        // The expired p1 is taken with the epoch seen, free ones with 0.
        for action in &actions {
            if let Action::Acquire {
                partition,
                seen_epoch,
            } = action
            {
                let expected = if partition.0 == 1 { 2 } else { 0 };
                assert_eq!(seen_epoch.0, expected);
            }
        }
        // The same inputs give the same plan.
        let again = plan(
            &view(
                1_000,
                &["a", "b"],
                vec![lease(0, "b", 4, 2_000), lease(1, "b", 2, 1_000)],
            ),
            &local,
            0,
        );
        assert_eq!(actions, again);
    }

    /// Holds `partitions` for `local` as if granted at local time 0.
    fn hold(local: &mut LocalLeases, partitions: impl IntoIterator<Item = u32>) -> Vec<Lease> {
        partitions
            .into_iter()
            .map(|partition| {
                let granted = lease(partition, local.me().as_str(), 1, 10_000);
                let ticket = local.sent([granted.partition], 0);
                local.acquired(ticket, &granted);
                granted
            })
            .collect()
    }

    #[test]
    fn a_node_gives_back_its_excess_gradually_when_one_joins_and_renews_the_rest() {
        let mut local = LocalLeases::new(NodeId::new("a"), "a", config(8, 2));
        let leases = hold(&mut local, 0..8);
        // b joined: a's share is 4; it releases 2 this tick and renews the others, which
        // are due (a third of the TTL since they were confirmed).
        let now = local.config().renew_after_ms();
        let actions = plan(&view(5_000, &["a", "b"], leases), &local, now);
        let released: Vec<_> = actions
            .iter()
            .filter(|action| matches!(action, Action::Release { .. }))
            .collect();
        assert_eq!(released.len(), 2, "{actions:?}");
        let Some(Action::Renew { leases: renewed }) = actions.last() else {
            panic!("no renewal: {actions:?}");
        };
        assert_eq!(renewed.len(), 6);
        assert!(acquired(&actions).is_empty());
    }

    #[test]
    fn leases_not_yet_due_are_not_renewed() {
        let mut local = LocalLeases::new(NodeId::new("a"), "a", config(2, 2));
        let leases = hold(&mut local, 0..2);
        let actions = plan(&view(1_000, &["a"], leases), &local, 1_000);
        assert!(actions.is_empty(), "{actions:?}");
    }

    #[test]
    fn a_lease_whose_answer_was_lost_is_adopted_below_target_and_released_above() {
        let local = LocalLeases::new(NodeId::new("a"), "a", config(4, 4));
        // The store shows p2 as a's, live; a does not know.
        let orphan = vec![lease(2, "a", 5, 10_000)];
        let actions = plan(&view(1_000, &["a"], orphan.clone()), &local, 0);
        assert!(actions.contains(&Action::Acquire {
            partition: PartitionId(2),
            seen_epoch: Epoch(5),
        }));
        // With four nodes a's share is one. Holding p0 already, p2 is excess: released.
        let mut local = local;
        let mut leases = hold(&mut local, [0]);
        leases.extend(orphan);
        let actions = plan(&view(1_000, &["a", "b", "c", "d"], leases), &local, 0);
        assert!(
            actions.contains(&Action::Release {
                partition: PartitionId(2),
                epoch: Epoch(5),
            }),
            "{actions:?}"
        );
    }

    #[test]
    fn an_expired_lease_still_held_is_taken_again() {
        let mut local = LocalLeases::new(NodeId::new("a"), "a", config(1, 1));
        let mut leases = hold(&mut local, [0]);
        leases[0].expires_at = 500;
        let actions = plan(&view(1_000, &["a"], leases), &local, 100);
        assert_eq!(
            actions,
            [Action::Acquire {
                partition: PartitionId(0),
                seen_epoch: Epoch(1),
            }]
        );
    }
}
