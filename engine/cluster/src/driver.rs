//! The tick, driven against a [`LeaseStore`]: the only code here that awaits. A server
//! runs [`tick`] every [`tick_ms`](crate::OwnershipConfig::tick_ms) on one task and
//! [`leave`] at shutdown; everything it decides comes from [`plan`] and [`LocalLeases`].
//!
//! A tick sends at most three requests after its heartbeat, one at a time: every release
//! in one, every acquire in one, every renewal in one (a store answers each in one
//! transaction, so a node taking 512 partitions waits for one commit, not 512). Each is
//! stamped with the node's clock just before it is sent: a lease counts from that stamp.
//! On the first store error the tick stops; what it did not send is planned again on the
//! next tick, and what it sent without an answer is marked unanswered (the lease, if
//! held, lapses on its own clock).

use std::collections::BTreeSet;

use crate::lease::{Epoch, LeaseError, LeaseStore};
use crate::local::LocalLeases;
use crate::partition::PartitionId;
use crate::plan::{Action, plan};

/// What one tick did.
#[derive(Debug, Default)]
pub struct TickOutcome {
    /// Partitions this node no longer holds: the server drops its cache of their
    /// conversations (and their in-flight work fails fencing anyway).
    pub dropped: Vec<PartitionId>,
    /// Why the tick stopped early, if it did.
    pub error: Option<LeaseError>,
}

/// One tick: heartbeat and view, [`LocalLeases::observe`], [`plan`], then each action
/// sent and its answer taken in. `now` reads the node's monotonic clock in milliseconds.
pub async fn tick<S>(store: &S, local: &mut LocalLeases, now: impl Fn() -> u64) -> TickOutcome
where
    S: LeaseStore + ?Sized,
{
    let mut outcome = TickOutcome::default();
    let ttl = local.config().lease_ttl_ms;
    let me = local.me().clone();
    let address = local.address().to_owned();
    let view = match store.heartbeat(&me, &address, ttl).await {
        Ok(view) => view,
        Err(error) => {
            outcome.error = Some(error);
            return outcome;
        }
    };
    outcome.dropped = local.observe(&view);
    let mut releases = Vec::new();
    let mut acquires = Vec::new();
    let mut renewals = Vec::new();
    for action in plan(&view, local, now()) {
        match action {
            Action::Release { partition, epoch } => releases.push((partition, epoch)),
            Action::Acquire {
                partition,
                seen_epoch,
            } => acquires.push((partition, seen_epoch)),
            Action::Renew { leases } => renewals = leases,
        }
    }
    // In this order, each only if the one before was answered.
    let dropped = &mut outcome.dropped;
    let sent = async {
        release(store, local, &releases, &now, dropped).await?;
        acquire(store, local, &acquires, &now, dropped).await?;
        renew(store, local, renewals, &now, dropped).await
    };
    outcome.error = sent.await.err();
    outcome
}

/// Gives `leases` back in one request; the node stops serving them before it is sent.
async fn release<S>(
    store: &S,
    local: &mut LocalLeases,
    leases: &[(PartitionId, Epoch)],
    now: &impl Fn() -> u64,
    dropped: &mut Vec<PartitionId>,
) -> Result<(), LeaseError>
where
    S: LeaseStore + ?Sized,
{
    if leases.is_empty() {
        return Ok(());
    }
    let me = local.me().clone();
    let tickets: Vec<_> = leases
        .iter()
        .map(|(partition, _)| (local.release(*partition, now()), *partition))
        .collect();
    dropped.extend(leases.iter().map(|(partition, _)| *partition));
    let answer = store.release_many(&me, leases).await;
    for (ticket, partition) in tickets {
        match answer {
            Ok(()) => local.released(ticket, partition),
            Err(_) => local.unanswered(ticket, partition),
        }
    }
    answer
}

/// Takes `wanted` (partition, epoch seen) in one request.
async fn acquire<S>(
    store: &S,
    local: &mut LocalLeases,
    wanted: &[(PartitionId, Epoch)],
    now: &impl Fn() -> u64,
    dropped: &mut Vec<PartitionId>,
) -> Result<(), LeaseError>
where
    S: LeaseStore + ?Sized,
{
    if wanted.is_empty() {
        return Ok(());
    }
    let me = local.me().clone();
    let address = local.address().to_owned();
    let ttl = local.config().lease_ttl_ms;
    let ticket = local.sent(wanted.iter().map(|(partition, _)| *partition), now());
    match store.acquire_many(&me, &address, wanted, ttl).await {
        Ok(taken) => {
            let mut refused: BTreeSet<PartitionId> =
                wanted.iter().map(|(partition, _)| *partition).collect();
            for lease in &taken {
                if refused.remove(&lease.partition) {
                    dropped.extend(local.acquired(ticket, lease));
                }
            }
            for partition in refused {
                dropped.extend(local.refused(ticket, partition));
            }
            Ok(())
        }
        Err(error) => {
            for (partition, _) in wanted {
                local.unanswered(ticket, *partition);
            }
            Err(error)
        }
    }
}

/// Extends the held `leases` in one request.
async fn renew<S>(
    store: &S,
    local: &mut LocalLeases,
    leases: Vec<(PartitionId, Epoch)>,
    now: &impl Fn() -> u64,
    dropped: &mut Vec<PartitionId>,
) -> Result<(), LeaseError>
where
    S: LeaseStore + ?Sized,
{
    if leases.is_empty() {
        return Ok(());
    }
    let me = local.me().clone();
    let ttl = local.config().lease_ttl_ms;
    let ticket = local.sent(leases.iter().map(|(partition, _)| *partition), now());
    match store.renew(&me, &leases, ttl).await {
        Ok(renewed) => {
            for (partition, epoch) in leases {
                if renewed.contains(&partition) {
                    local.renewed(ticket, partition, epoch);
                } else {
                    dropped.extend(local.refused(ticket, partition));
                }
            }
            Ok(())
        }
        Err(error) => {
            for (partition, _) in leases {
                local.unanswered(ticket, partition);
            }
            Err(error)
        }
    }
}

/// A clean shutdown: gives back every lease this node holds and leaves the membership,
/// so the others take over at once instead of after the TTL. Stops at the first error
/// (the rest runs out by the TTL).
pub async fn leave<S>(
    store: &S,
    local: &mut LocalLeases,
    now: impl Fn() -> u64,
) -> Result<(), LeaseError>
where
    S: LeaseStore + ?Sized,
{
    let me = local.me().clone();
    let held: Vec<_> = local
        .held()
        .iter()
        .map(|(partition, held)| (*partition, held.epoch))
        .collect();
    release(store, local, &held, &now, &mut Vec::new()).await?;
    store.leave(&me).await
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::pin::pin;
    use std::task::{Context, Poll, Waker};

    use super::*;
    use crate::config::OwnershipConfig;
    use crate::lease::NodeId;
    use crate::memory::MemoryLeaseStore;

    /// Runs a future that never waits (the memory store's) to its end.
    fn ready<F: Future>(future: F) -> F::Output {
        match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(output) => output,
            Poll::Pending => unreachable!("the memory store never waits"),
        }
    }

    fn node(name: &str, config: &OwnershipConfig) -> LocalLeases {
        LocalLeases::new(NodeId::new(name), format!("{name}:8080"), config.clone())
    }

    #[test]
    fn nodes_share_the_partitions_and_a_leaving_node_hands_over_at_once() {
        let config = OwnershipConfig {
            partitions: 16,
            max_moves_per_tick: 4,
            ..OwnershipConfig::default()
        };
        let store = MemoryLeaseStore::with_manual_clock(0);
        let mut a = node("a", &config);
        let mut b = node("b", &config);
        let mut now = 0;
        let run = |nodes: &mut [&mut LocalLeases], ticks: u32, now: &mut u64| {
            for _ in 0..ticks {
                *now += config.tick_ms;
                store.set_now(*now);
                for local in nodes.iter_mut() {
                    let clock = *now;
                    let outcome = ready(tick(&store, local, || clock));
                    assert!(outcome.error.is_none());
                }
            }
        };
        // Alone, a takes everything in its first tick: free partitions are not rationed.
        run(&mut [&mut a], 1, &mut now);
        assert_eq!(a.held().len(), 16);
        // b joins: a gives back four per tick, b takes them.
        run(&mut [&mut a, &mut b], 4, &mut now);
        assert_eq!((a.held().len(), b.held().len()), (8, 8));
        // Many ticks later nothing has moved and every lease stays valid.
        run(&mut [&mut a, &mut b], 30, &mut now);
        assert_eq!((a.held().len(), b.held().len()), (8, 8));
        for partition in 0..16 {
            let valid = [&a, &b]
                .iter()
                .filter(|local| local.valid_epoch(PartitionId(partition), now).is_some())
                .count();
            assert_eq!(valid, 1, "p{partition}");
        }
        // a leaves cleanly: b takes all within four ticks, not a TTL.
        let clock = now;
        ready(leave(&store, &mut a, || clock)).unwrap();
        run(&mut [&mut b], 2, &mut now);
        assert_eq!(b.held().len(), 16);
    }
}
