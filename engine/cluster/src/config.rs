//! The ownership layer's settings, and the durations derived from them.

use crate::partition::PARTITIONS;

/// How long a lease lasts by the store's clock unless configured otherwise. Colloquy's
/// role leads (`ConversationStore::lead`) already use 10 s; a dead node's partitions are
/// taken over within about this long.
pub const LEASE_TTL_MS: u64 = 10_000;

/// How often a node runs its [`plan`](crate::plan::plan): heartbeat, read the lease table,
/// renew, take and give back. Several ticks fit in a renewal period (a third of the TTL),
/// so a renewal that is lost is retried well before the lease runs out.
pub const TICK_MS: u64 = 1_000;

/// The bound assumed on how fast or slow a node's monotonic clock may run against the
/// store's, in parts per million: 1%. Quartz drifts by tens of ppm; the bound is wide to
/// cover virtual machines whose clocks are slewed or stall. A node that can drift further
/// can serve reads from a cache it no longer owns.
pub const MAX_DRIFT_PPM: u64 = 10_000;

/// Cut off each local validity on top of the drift, for what the drift bound does not
/// cover: the time between checking validity and answering a read.
pub const SAFETY_MARGIN_MS: u64 = 500;

/// At most this many partitions a node takes, and at most this many it gives back, per
/// tick: a joining node is filled gradually, and a node never drops more at once than the
/// others can pick up in a tick.
pub const MAX_MOVES_PER_TICK: usize = 64;

/// The settings of one deployment's ownership layer. Every node must use the same
/// `partitions`; the others may differ per node within reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OwnershipConfig {
    /// P: the number of partitions ([`PARTITIONS`] by default).
    pub partitions: u32,
    /// A lease's time to live by the store's clock. Node heartbeats live as long.
    pub lease_ttl_ms: u64,
    /// How often a node ticks.
    pub tick_ms: u64,
    /// The clock drift bound, in ppm (see [`MAX_DRIFT_PPM`]).
    pub max_drift_ppm: u64,
    /// Cut off each local validity besides the drift (see [`SAFETY_MARGIN_MS`]).
    pub safety_margin_ms: u64,
    /// At most this many partitions given back per tick, so a joining node is filled
    /// gradually (taking a free partition is never rationed: it serves no one meanwhile).
    pub max_moves_per_tick: usize,
}

impl Default for OwnershipConfig {
    fn default() -> Self {
        OwnershipConfig {
            partitions: PARTITIONS,
            lease_ttl_ms: LEASE_TTL_MS,
            tick_ms: TICK_MS,
            max_drift_ppm: MAX_DRIFT_PPM,
            safety_margin_ms: SAFETY_MARGIN_MS,
            max_moves_per_tick: MAX_MOVES_PER_TICK,
        }
    }
}

/// A setting that makes the protocol unsafe or unable to keep a lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No partitions.
    #[error("the number of partitions must be at least 1")]
    NoPartitions,
    /// The drift bound is 100% or more.
    #[error("the clock drift bound must be below 1,000,000 ppm")]
    DriftTooLarge,
    /// After the drift and the margin, a lease is not locally valid for longer than the
    /// renewal period plus a tick: a node would lose its leases between renewals.
    #[error(
        "a lease is locally valid for {validity_ms} ms, not longer than a renewal period plus a tick ({needed_ms} ms): raise the TTL or lower the margin"
    )]
    TtlTooShort {
        /// The local validity the settings give.
        validity_ms: u64,
        /// What it must exceed.
        needed_ms: u64,
    },
    /// A node could not take or give back anything.
    #[error("at least one partition must move per tick")]
    NoMoves,
}

impl OwnershipConfig {
    /// Checks the settings hang together (see [`ConfigError`]).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.partitions == 0 {
            return Err(ConfigError::NoPartitions);
        }
        if self.max_drift_ppm >= 1_000_000 {
            return Err(ConfigError::DriftTooLarge);
        }
        if self.max_moves_per_tick == 0 {
            return Err(ConfigError::NoMoves);
        }
        let needed_ms = self.renew_after_ms() + self.tick_ms;
        let validity_ms = self.local_validity_ms();
        if validity_ms <= needed_ms {
            return Err(ConfigError::TtlTooShort {
                validity_ms,
                needed_ms,
            });
        }
        Ok(())
    }

    /// A held lease is renewed once this long has passed, by the node's clock, since the
    /// request that last confirmed it was sent: a third of the TTL.
    pub fn renew_after_ms(&self) -> u64 {
        self.lease_ttl_ms / 3
    }

    /// A lease request unanswered for this long (by the node's clock) is given up on: the
    /// plan may send another for the partition. A late answer to it is still honoured.
    pub fn request_timeout_ms(&self) -> u64 {
        self.renew_after_ms().max(self.tick_ms)
    }

    /// How long, by the node's own monotonic clock, a lease counts as held after the
    /// request that confirmed it was *sent*: `TTL × (1 − drift) − margin`.
    ///
    /// Why this is safe: the store grants `expires_at = t + TTL` by its clock at a moment
    /// `t` after the node sent. If the node's clock runs at least `1 − drift` as fast as the
    /// store's, `TTL × (1 − drift)` local milliseconds after sending are at most `TTL`
    /// store milliseconds after sending, so the lease has not expired at the store and no
    /// other node can hold it yet.
    pub fn local_validity_ms(&self) -> u64 {
        // Rounded up, so the cut is never smaller than the bound.
        let drift = self
            .lease_ttl_ms
            .saturating_mul(self.max_drift_ppm)
            .div_ceil(1_000_000);
        self.lease_ttl_ms
            .saturating_sub(drift)
            .saturating_sub(self.safety_margin_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        let config = OwnershipConfig::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.renew_after_ms(), 3_333);
        // 10 s − 1% − 0.5 s.
        assert_eq!(config.local_validity_ms(), 9_400);
    }

    #[test]
    fn a_ttl_too_short_for_the_margin_is_refused() {
        let config = OwnershipConfig {
            lease_ttl_ms: 1_500,
            ..OwnershipConfig::default()
        };
        assert!(matches!(
            config.validate(),
            Err(ConfigError::TtlTooShort { .. })
        ));
    }
}
