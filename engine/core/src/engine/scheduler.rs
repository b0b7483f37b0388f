//! The scheduler: conversations whose deadlines are due, woken and stepped (each claimed
//! by one node of a shared store).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt as _;

use crate::dispatch;
use crate::error::EngineError;
use crate::step::Step;
use crate::store::StoreError;

use super::*;

impl Engine {
    /// One scheduler pass: fires every due deadline and retry, and removes conversations
    /// whose retention window has passed; returns once all of them are done. Returns how
    /// many conversations it looked at. Conversations are woken concurrently, so one whose
    /// `on_timeout` hook runs to its budget holds up no other.
    pub async fn run_due(&self) -> Result<usize, EngineError> {
        let now = self.now();
        let due = self.claim(now).await?;
        futures_util::stream::iter(&due)
            .for_each_concurrent(MAX_CONCURRENT_WAKES, |id| self.wake_logged(id, now))
            .await;
        Ok(due.len())
    }

    /// Claims the wake-ups due at `now` this node fires: with ownership, those of the
    /// partitions it holds (others' would fail their fences, and wait out the claim's lease
    /// before their owner could fire them); else all.
    async fn claim(&self, now: u64) -> Result<Vec<Arc<str>>, StoreError> {
        match &self.config.fencer {
            Some(fencer) => {
                let owned = fencer.owned();
                if owned.is_empty() {
                    return Ok(Vec::new());
                }
                self.store.claim_due_in(now, SCHEDULER_BATCH, &owned).await
            }
            None => self.store.claim_due(now, SCHEDULER_BATCH).await,
        }
    }

    /// Fires a claimed wake-up, logging a failure (the lease brings it back later). While
    /// traces are exported, the wake-up is an engine step of its own (a trace of its own:
    /// no request caused it) linked to the step its conversation started in.
    pub(super) async fn wake_logged(&self, id: &str, now: u64) {
        let span = tracing::info_span!("conversation", id = %id);
        let step_span = tracing::debug_span!(
            parent: &span,
            "engine step",
            colloquy.step = "deadline",
            colloquy.conversation.id = %id,
            colloquy.template = tracing::field::Empty,
            colloquy.template.revision = tracing::field::Empty,
        );
        if crate::trace_origins::exporting()
            && let Some(origin) = self.trace_origins.origin(id)
        {
            crate::trace_origins::link(&step_span, origin);
        }
        let woken = tracing::Instrument::instrument(self.wake(id, now), step_span);
        if let Err(error) = tracing::Instrument::instrument(woken, span).await {
            tracing::warn!(conversation = %id, %error, "scheduled wake-up failed");
        }
    }

    /// Fires a claimed wake-up. A lost race (another node, or a stale cached copy) is
    /// retried from a fresh load: the claim is this node's only chance to fire it soon.
    pub(super) async fn wake(&self, id: &str, now: u64) -> Result<(), EngineError> {
        let mut attempt = 0;
        let mut on_pool = false;
        loop {
            attempt += 1;
            match self.wake_once(id, now, on_pool).await {
                Err(EngineError::HookNeedsPool) if !on_pool => on_pool = true,
                Err(EngineError::Store(StoreError::Conflict { .. }))
                    if attempt < MAX_COMMIT_ATTEMPTS => {}
                other => return other,
            }
        }
    }

    /// One try at firing a wake-up, on the hook pool when `on_pool` (or when its template's
    /// hook must run there).
    pub(super) async fn wake_once(
        &self,
        id: &str,
        now: u64,
        on_pool: bool,
    ) -> Result<(), EngineError> {
        let slot = self.loaded_slot(id).await?;
        let mut guard = slot.lock().await;
        let Some(conversation) = guard.as_mut() else {
            return Ok(());
        };
        if let Some(completed_at) = conversation.completed_at
            && now >= completed_at.saturating_add(self.config.retention_ms)
        {
            self.store.remove(id).await?;
            self.parties.forget(conversation);
            *guard = None;
            drop(guard);
            self.live.remove(id);
            tracing::debug!(conversation = %id, "removed after retention");
            return Ok(());
        }
        let template = conversation.template.clone();
        // Owned by the step while it runs; a step that never comes back leaves the slot
        // empty, and the next request reloads the conversation from the store.
        let Some(mut conversation) = guard.take() else {
            return Ok(());
        };
        let retention_ms = self.config.retention_ms;
        let (conversation, commit, needs_pool) = self
            .run_step(&template, on_pool, move |hooks, site| {
                let mut step = Step::with_hooks(&mut conversation, now, hooks, site);
                dispatch::fire_due(&mut step);
                let needs_pool = step.needs_pool;
                // Even with nothing fired, the commit puts the conversation back on the
                // deadline index: claiming took it off.
                let commit = step.into_commit(retention_ms);
                (conversation, commit, needs_pool)
            })
            .await?;
        if needs_pool {
            // What it did is dropped (reloaded); `wake` runs it again on the hook pool.
            return Err(EngineError::HookNeedsPool);
        }
        *guard = Some(conversation);
        if let Err(error) = self.commit(commit).await {
            *guard = None;
            return Err(error.into());
        }
        Ok(())
    }

    /// Fires due deadlines every `period` until the returned task is aborted. Each claimed
    /// conversation is woken by a task of its own (at most [`MAX_CONCURRENT_WAKES`] at
    /// once), and the next pass does not wait for them: a wake-up whose `on_timeout` hook
    /// runs to its budget delays neither other conversations' deadlines nor later passes.
    pub fn spawn_scheduler(self: &Arc<Self>, period: Duration) -> tokio::task::JoinHandle<()> {
        let engine = Arc::clone(self);
        tokio::spawn(async move {
            let mut ticker = tokio::time::interval(period);
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let wakes = Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_WAKES));
            loop {
                ticker.tick().await;
                let now = engine.now();
                let due = match engine.claim(now).await {
                    Ok(due) => due,
                    Err(error) => {
                        tracing::warn!(%error, "scheduler pass failed");
                        continue;
                    }
                };
                for id in due {
                    // Never closed, so acquiring only waits.
                    let Ok(permit) = wakes.clone().acquire_owned().await else {
                        return;
                    };
                    let engine = engine.clone();
                    tokio::spawn(async move {
                        engine.wake_logged(&id, now).await;
                        drop(permit);
                    });
                }
            }
        })
    }
}
