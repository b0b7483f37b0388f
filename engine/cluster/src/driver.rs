//! The tick, driven against a [`LeaseStore`]: the only code here that awaits. A server
//! runs [`tick`] every [`tick_ms`](crate::OwnershipConfig::tick_ms) on one task and
//! [`leave`] at shutdown; everything it decides comes from [`plan`] and [`LocalLeases`].
//!
//! Requests go one at a time, each stamped with the node's clock just before it is sent:
//! a lease counts from that stamp. On the first store error the tick stops; what it did
//! not send is planned again on the next tick, and what it sent without an answer is
//! marked unanswered (the lease, if held, lapses on its own clock).

use crate::lease::{LeaseError, LeaseStore};
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
    for action in plan(&view, local, now()) {
        let result = match action {
            Action::Release { partition, epoch } => {
                let ticket = local.release(partition, now());
                outcome.dropped.push(partition);
                store
                    .release(partition, &me, epoch)
                    .await
                    .map(|()| local.released(ticket, partition))
                    .inspect_err(|_| local.unanswered(ticket, partition))
            }
            Action::Acquire {
                partition,
                seen_epoch,
            } => {
                let ticket = local.sent([partition], now());
                match store
                    .acquire(partition, &me, &address, seen_epoch, ttl)
                    .await
                {
                    Ok(Some(lease)) => {
                        outcome.dropped.extend(local.acquired(ticket, &lease));
                        Ok(())
                    }
                    Ok(None) => {
                        outcome.dropped.extend(local.refused(ticket, partition));
                        Ok(())
                    }
                    Err(error) => {
                        local.unanswered(ticket, partition);
                        Err(error)
                    }
                }
            }
            Action::Renew { leases } => {
                let ticket = local.sent(leases.iter().map(|(partition, _)| *partition), now());
                match store.renew(&me, &leases, ttl).await {
                    Ok(renewed) => {
                        for (partition, epoch) in leases {
                            if renewed.contains(&partition) {
                                local.renewed(ticket, partition, epoch);
                            } else {
                                outcome.dropped.extend(local.refused(ticket, partition));
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
        };
        if let Err(error) = result {
            outcome.error = Some(error);
            break;
        }
    }
    outcome
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
    for (partition, epoch) in held {
        let ticket = local.release(partition, now());
        store.release(partition, &me, epoch).await?;
        local.released(ticket, partition);
    }
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
        // Alone, a takes everything, four per tick.
        run(&mut [&mut a], 1, &mut now);
        assert_eq!(a.held().len(), 4);
        run(&mut [&mut a], 3, &mut now);
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
