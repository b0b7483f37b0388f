//! What the engine does for durable and shared stores.
//!
//! - **Following other nodes.** With Redis, several engine processes write the same
//!   conversations. Writes stay correct on their own (a stale cached copy fails the version
//!   check, is reloaded and the work retried), but reads and streams need to hear of other
//!   nodes' commits: [`Engine::follow_store`] catches cached conversations up with each
//!   remote commit and republishes it as a [`Notice`], so an inbox stream on node A wakes
//!   up for a message sent through node B.
//!
//!   With partition owners (a fencer in the engine's config) each conversation is cached
//!   on its owner only, which no other node commits to: the engine asks the store for the
//!   notices of the inboxes someone on this node waits on, and no others.
//! - **Conversations not loaded yet.** After a restart (or on another node) the engine has
//!   loaded only what it touched since. [`Engine::commitments`] asks the store which
//!   conversations an agent is a party of and loads them on demand.

use std::sync::{Arc, Weak};

use colloquy_protocol::conversation::CommitmentView;
use colloquy_protocol::message::AgentId;
use tokio::sync::broadcast::error::RecvError;
use tokio::task::JoinHandle;

use crate::engine::{Engine, Notice};
use crate::error::EngineError;
use crate::store::RemoteChange;

impl Engine {
    /// Starts following the commits other engine nodes make through the shared store, until
    /// the engine is dropped. `None` when the store has no other writers (memory, SQLite).
    pub fn follow_store(self: &Arc<Self>) -> Option<JoinHandle<()>> {
        let mut changes = self.store.remote_changes()?;
        if self.config.fencer.is_some() {
            // Partition owners: only inbox notices, for agents someone here waits on.
            let (streams, followed) = (self.inbox_wakeups.clone(), self.followed_inboxes.clone());
            self.store.narrow_remote_changes(Arc::new(move || {
                let mut wanted = streams.keys();
                wanted.extend(
                    (followed.read())
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .iter()
                        .cloned(),
                );
                wanted
            }));
        }
        let engine: Weak<Engine> = Arc::downgrade(self);
        Some(tokio::spawn(async move {
            loop {
                let received = changes.recv().await;
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                match received {
                    Ok(change) => {
                        engine
                            .remote_notices
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        engine.hear(change).await;
                    }
                    Err(RecvError::Lagged(missed)) => {
                        tracing::warn!(
                            missed,
                            "missed remote change notices; dropping cached conversations"
                        );
                        engine.forget_cached();
                        // Whatever streams missed, they read again.
                        engine.inbox_wakeups.ring_all();
                        engine.conversation_wakeups.ring_all();
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        }))
    }

    /// Notices of other nodes' commits this node has heard.
    pub fn remote_notices(&self) -> u64 {
        self.remote_notices
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Hears of other nodes' commits to `agents`' inboxes from now on, besides those of
    /// agents with an inbox stream open here: the agents this node delivers to (webhooks,
    /// A2A). Matters with partition owners only, where notices are narrowed to what is
    /// wanted.
    pub fn follow_inboxes(&self, agents: impl IntoIterator<Item = AgentId>) {
        (self.followed_inboxes.write())
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend(agents);
    }

    /// Brings a cached copy up to the remote version, then tells this node's subscribers.
    async fn hear(&self, change: RemoteChange) {
        let slot = self
            .live
            .get(&change.conversation_id)
            .map(|entry| entry.value().clone());
        if let Some(slot) = slot {
            let mut guard = slot.lock().await;
            if let Some(conversation) = guard.as_mut()
                && conversation.version < change.version
            {
                match self
                    .store
                    .events_after(&change.conversation_id, conversation.version)
                    .await
                {
                    Ok(events) => {
                        for event in &events {
                            conversation.apply(event);
                        }
                        self.parties.note(&change.conversation_id, &events);
                    }
                    Err(error) => {
                        // The next request loads it afresh instead.
                        tracing::debug!(conversation = %change.conversation_id, %error, "catch-up failed");
                        *guard = None;
                    }
                }
            }
        }
        self.ring(&change.conversation_id, &change.agents);
        if self.notices.receiver_count() > 0 {
            // No receiver is not an error: nobody is streaming right now.
            let _ = self.notices.send(Notice {
                conversation_id: change.conversation_id,
                version: change.version,
                agents: change.agents.into(),
            });
        }
    }

    /// Drops every cached conversation that is not in use, so the next access reloads it.
    fn forget_cached(&self) {
        for entry in self.live.iter() {
            if let Ok(mut guard) = entry.value().try_lock() {
                *guard = None;
            }
        }
    }

    /// A page of the commitments where `agent` is debtor or creditor and `keep` holds, in
    /// every conversation the store holds (also those this engine has not loaded since it
    /// started, which it loads now) or, with a store that keeps no party index (memory),
    /// every conversation the engine's party index lists. Ordered by conversation id, then
    /// commitment id; starts after the commitment `after`, takes at most `limit`, and says
    /// whether more follow. Only the conversations the page reaches are read.
    pub async fn commitments(
        &self,
        agent: &str,
        after: Option<&str>,
        limit: usize,
        keep: impl Fn(&CommitmentView) -> bool,
    ) -> Result<(Vec<CommitmentView>, bool), EngineError> {
        // Commitment ids are `<conversation id>/<n>`; conversation ids have no `/`.
        let after_conversation = after.map(|id| id.rsplit_once('/').map_or(id, |(c, _)| c));
        let mut ids = match self.store.conversations_of(agent).await? {
            Some(ids) => ids,
            None => self.parties.of(agent, None),
        };
        ids.sort_unstable();
        let start = after_conversation.map_or(0, |c| ids.partition_point(|id| &**id < c));
        let mut page = Vec::new();
        for id in &ids[start..] {
            let slot = match self.loaded_slot(id).await {
                Ok(slot) => slot,
                // Removed (retention) since the index was read.
                Err(EngineError::UnknownConversation(_)) => continue,
                Err(error) => return Err(error),
            };
            let guard = slot.lock().await;
            let Some(conversation) = guard.as_ref() else {
                continue;
            };
            let same_conversation = after_conversation == Some(&**id);
            let mut found: Vec<CommitmentView> = conversation
                .commitments_involving(agent)
                .filter(|c| !same_conversation || after.is_none_or(|after| &*c.id > after))
                .filter(|c| keep(c))
                .collect();
            found.sort_by(|a, b| a.id.cmp(&b.id));
            drop(guard);
            page.extend(found);
            if page.len() > limit {
                page.truncate(limit);
                return Ok((page, true));
            }
        }
        Ok((page, false))
    }
}
