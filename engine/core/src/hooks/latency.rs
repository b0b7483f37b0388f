//! How long hook calls take: a fixed-bucket histogram per lifecycle event and result, for
//! `/metrics` (`colloquy_hook_duration_seconds`). Lock-free: three atomic adds per call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use colloquy_protocol::template::HookEvent;

/// Bucket upper bounds in microseconds. A hook is budgeted in milliseconds (default 10 ms),
/// and a good one answers in a few microseconds: the buckets span both.
pub const BUCKETS_US: [u64; 10] = [5, 10, 25, 50, 100, 250, 1_000, 5_000, 10_000, 50_000];

const EVENTS: [HookEvent; 3] = [
    HookEvent::OnStart,
    HookEvent::OnMessage,
    HookEvent::OnTimeout,
];

#[derive(Debug, Default)]
struct Series {
    /// Counts per bucket of [`BUCKETS_US`], each call in the first bucket that holds it
    /// (made cumulative by [`HookLatency::snapshot`]); `count` is the `+Inf` bucket.
    buckets: [AtomicU64; BUCKETS_US.len()],
    count: AtomicU64,
    /// Nanoseconds: calls take microseconds, and a sum of whole microseconds per call would
    /// drop up to one per call (a third of a 2 µs call).
    sum_ns: AtomicU64,
}

/// Hook call durations by event and by whether the call succeeded.
#[derive(Debug, Default)]
pub struct HookLatency {
    /// Indexed by event (as in `EVENTS`) then by success (0) or failure (1).
    series: [[Series; 2]; 3],
}

/// One series as read for rendering.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LatencySnapshot {
    /// `on_start`, `on_message` or `on_timeout`.
    pub event: &'static str,
    /// `ok` or `failed`.
    pub result: &'static str,
    /// Cumulative counts per bucket of [`BUCKETS_US`].
    pub buckets: Vec<u64>,
    /// Calls observed.
    pub count: u64,
    /// Total duration, nanoseconds.
    pub sum_ns: u64,
}

impl HookLatency {
    /// Records one call.
    pub fn observe(&self, event: HookEvent, ok: bool, duration: Duration) {
        let index = EVENTS.iter().position(|known| *known == event).unwrap_or(0);
        let series = &self.series[index][usize::from(!ok)];
        let us = u64::try_from(duration.as_micros()).unwrap_or(u64::MAX);
        // One bucket per call, not every bucket above it: the hot path stays at three
        // atomic adds.
        if let Some(bucket) = BUCKETS_US.iter().position(|bound| us <= *bound) {
            series.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        }
        series.count.fetch_add(1, Ordering::Relaxed);
        let ns = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        series.sum_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Every series that has seen a call.
    pub fn snapshot(&self) -> Vec<LatencySnapshot> {
        let mut out = Vec::new();
        for (event, by_result) in EVENTS.iter().zip(&self.series) {
            for (result, series) in ["ok", "failed"].into_iter().zip(by_result) {
                let count = series.count.load(Ordering::Relaxed);
                if count == 0 {
                    continue;
                }
                out.push(LatencySnapshot {
                    event: super::event_name(*event),
                    result,
                    buckets: series
                        .buckets
                        .iter()
                        .scan(0, |below, bucket| {
                            *below += bucket.load(Ordering::Relaxed);
                            Some(*below)
                        })
                        .collect(),
                    count,
                    sum_ns: series.sum_ns.load(Ordering::Relaxed),
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_land_in_cumulative_buckets_by_event_and_result() {
        let latency = HookLatency::default();
        latency.observe(HookEvent::OnMessage, true, Duration::from_micros(7));
        latency.observe(HookEvent::OnMessage, true, Duration::from_micros(300));
        latency.observe(HookEvent::OnTimeout, false, Duration::from_millis(20));
        let snapshot = latency.snapshot();
        assert_eq!(snapshot.len(), 2);
        let message = &snapshot[0];
        assert_eq!(
            (message.event, message.result, message.count),
            ("on_message", "ok", 2)
        );
        assert_eq!(message.buckets, [0, 1, 1, 1, 1, 1, 2, 2, 2, 2]);
        assert_eq!(message.sum_ns, 307_000);
        let timeout = &snapshot[1];
        assert_eq!((timeout.event, timeout.result), ("on_timeout", "failed"));
        assert_eq!(timeout.buckets, [0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    }
}
