//! Inbox expiry: entries nobody fetched and acknowledged within the inbox TTL are dropped.
//!
//! An inbox entry stays until its agent acknowledges it, and outlives its conversation
//! (retention removes the conversation, not what was delivered from it). An agent that never
//! comes back, or reads without acknowledging, would otherwise keep its inbox growing for as
//! long as messages reach it. Once a minute ([`SWEEP_PERIOD`]) the engine drops, agent by
//! agent and oldest first, the entries whose message was sent more than
//! [`EngineConfig::inbox_ttl_ms`](crate::EngineConfig::inbox_ttl_ms) ago (default 7 days), as
//! if the agent had acknowledged them: the sequence goes on, so positions clients hold keep
//! their meaning. Of the nodes sharing a store, the one holding the [`SWEEP_ROLE`] lead
//! sweeps (leased for three sweep periods, so another takes over when it dies); dropping is
//! an acknowledgement, which never moves back, so two sweeps at once would do no harm
//! either, beyond the doubled work and count.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::engine::Engine;
use crate::error::EngineError;

/// How often the engine sweeps inboxes for expired entries.
pub const SWEEP_PERIOD: Duration = Duration::from_secs(60);
/// The lead ([`crate::store::ConversationStore::lead`]) of the node that sweeps.
pub const SWEEP_ROLE: &str = "inbox-expiry";
/// Inbox entries read at a time while looking for the end of the expired ones.
const BATCH: usize = 256;

impl Engine {
    /// Drops every inbox entry whose message was sent more than the inbox TTL ago. Returns
    /// how many it dropped. An agent whose inbox cannot be read or acknowledged now is left
    /// for the next sweep (and logged); the others are swept all the same.
    pub async fn expire_inboxes(&self) -> Result<u64, EngineError> {
        let Some(cutoff) = self.now().checked_sub(self.config.inbox_ttl_ms) else {
            return Ok(0);
        };
        let mut dropped = 0;
        for agent in self.store.inbox_agents().await? {
            match self.expire_inbox(&agent, cutoff).await {
                Ok(0) => {}
                Ok(count) => {
                    tracing::info!(%agent, count, "dropped inbox entries older than the inbox TTL");
                    self.inbox_entries_expired
                        .fetch_add(count, Ordering::Relaxed);
                    dropped += count;
                }
                Err(error) => {
                    tracing::warn!(%agent, %error, "cannot expire inbox entries; will try again");
                }
            }
        }
        Ok(dropped)
    }

    /// Drops `agent`'s entries sent at or before `cutoff`, from the oldest up to the first
    /// one sent after it.
    async fn expire_inbox(&self, agent: &str, cutoff: u64) -> Result<u64, EngineError> {
        let mut after = 0;
        let mut dropped = 0;
        loop {
            let entries = self.store.inbox(agent, after, BATCH).await?;
            let expired = entries
                .iter()
                .take_while(|entry| entry.message.sent_at <= cutoff)
                .count();
            let Some(last) = entries[..expired].last() else {
                return Ok(dropped);
            };
            self.store.acknowledge(agent, last.seq).await?;
            dropped += expired as u64;
            after = last.seq;
            if expired < BATCH {
                return Ok(dropped);
            }
        }
    }

    /// Inbox entries this engine has dropped unacknowledged after the inbox TTL, for
    /// `/metrics`.
    pub fn inbox_entries_expired(&self) -> u64 {
        self.inbox_entries_expired.load(Ordering::Relaxed)
    }

    /// Sweeps inboxes every `period` ([`SWEEP_PERIOD`] in `colloquy serve`) while this node
    /// holds the [`SWEEP_ROLE`] lead, until the task is aborted.
    pub fn spawn_inbox_expiry(
        self: &std::sync::Arc<Self>,
        period: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let engine = std::sync::Arc::clone(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let lease_ms = u64::try_from(period.as_millis().saturating_mul(3)).unwrap_or(u64::MAX);
            loop {
                ticker.tick().await;
                match engine.store.lead(SWEEP_ROLE, lease_ms).await {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(error) => {
                        tracing::warn!(%error, "cannot tell which node sweeps inboxes; will try again");
                        continue;
                    }
                }
                if let Err(error) = engine.expire_inboxes().await {
                    tracing::warn!(%error, "inbox expiry sweep failed");
                }
            }
        })
    }
}
