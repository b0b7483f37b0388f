//! Reading many conversations at once: the listing behind `GET /v1/conversations` and the
//! template lookup the inbox streams use to label messages.
//!
//! Both read the conversations this engine holds in memory. With the memory store that is
//! every conversation (retention removes a conversation from both at once). An agent's
//! listing (or one filtered by participant) starts from the agent's entries in the engine's
//! [`PartyIndex`](crate::parties::PartyIndex), so it costs what the agent has, not what the
//! engine holds; with the memory store an administrator's unfiltered listing walks every
//! loaded conversation.
//!
//! A durable store also indexes each agent's conversations
//! (`ConversationStore::conversations_of`) and every conversation id
//! (`ConversationStore::conversation_ids`). An agent's listing loads from the first the
//! conversations this engine has not loaded since it started; an administrator's listing
//! pages through the second, a chunk at a time. So nothing is missing after a restart or on
//! another node. A conversation that is not loaded is replayed from its log for the listing
//! and not kept: paging through a large store does not load it all into memory.

use std::sync::Arc;

use colloquy_protocol::api::ConversationSummary;
use colloquy_protocol::conversation::{ConversationStatus, Outcome};

use crate::conversation::Conversation;
use crate::engine::Engine;
use crate::error::EngineError;

/// Largest page `list` returns; larger requested limits are cut to it.
pub const MAX_PAGE: usize = 500;
/// Ids an administrator's listing reads from a durable store's index at a time.
const STORE_CHUNK: usize = 256;

/// Which conversations to list.
#[derive(Clone, Debug, Default)]
pub struct ConversationFilter {
    /// Only those `agent` takes part in (initiator or participant).
    pub participant: Option<String>,
    /// Only active or only completed ones.
    pub status: Option<ConversationStatus>,
    /// Only those that ended with this outcome.
    pub outcome: Option<Outcome>,
    /// Only those of this template.
    pub template: Option<String>,
    /// Only ids after this one (the previous page's last id); before it when
    /// `newest_first`.
    pub after: Option<String>,
    /// Newest first: ids in descending order (UUIDv7 ids order by creation time).
    pub newest_first: bool,
    /// At most this many (cut to [`MAX_PAGE`]).
    pub limit: usize,
}

impl Engine {
    /// The conversations `viewer` may read (all of them for `None`, an administrator) that
    /// match `filter`, ordered by id (descending when `filter.newest_first`), plus whether
    /// more follow.
    pub async fn list(
        &self,
        viewer: Option<&str>,
        filter: &ConversationFilter,
    ) -> (Vec<ConversationSummary>, bool) {
        // An agent's listing reads its own index entries, not every conversation here.
        let indexed_for = filter.participant.as_deref().or(viewer);
        let limit = filter.limit.clamp(1, MAX_PAGE);
        let mut page = Vec::new();
        let mut after: Option<Arc<str>> = filter.after.as_deref().map(Arc::from);
        loop {
            let (ids, complete) = self
                .candidates(indexed_for, after.as_deref(), filter.newest_first)
                .await;
            for id in &ids {
                let Some(summary) = self.listed(id, viewer, filter, indexed_for).await else {
                    continue;
                };
                if page.len() == limit {
                    return (page, true);
                }
                page.push(summary);
            }
            match ids.last() {
                Some(last) if !complete => after = Some(last.clone()),
                _ => return (page, false),
            }
        }
    }

    /// The ids a listing looks at, after `after` and in order (before it and in reverse
    /// order when `newest_first`), and whether they are all of them. An administrator's
    /// listing over a durable store reads the store's index a chunk at a time (`false`: go on
    /// from the last id); the others get every candidate at once.
    async fn candidates(
        &self,
        indexed_for: Option<&str>,
        after: Option<&str>,
        newest_first: bool,
    ) -> (Vec<Arc<str>>, bool) {
        let mut ids: Vec<Arc<str>> = match indexed_for {
            Some(agent) => {
                let mut ids = self
                    .parties
                    .of(agent, if newest_first { None } else { after });
                match self.store.conversations_of(agent).await {
                    Ok(Some(indexed)) => ids.extend(indexed),
                    Ok(None) => {}
                    // The loaded conversations still list; the log says what is missing.
                    Err(error) => tracing::warn!(%agent, %error, "conversation index unreadable"),
                }
                ids
            }
            None => match if newest_first {
                self.store.conversation_ids_before(after, STORE_CHUNK).await
            } else {
                self.store.conversation_ids(after, STORE_CHUNK).await
            } {
                // Every stored conversation, loaded here or not, in id order.
                Ok(Some(ids)) => {
                    let complete = ids.len() < STORE_CHUNK;
                    return (ids, complete);
                }
                Ok(None) => self.live.iter().map(|entry| entry.key().clone()).collect(),
                Err(error) => {
                    tracing::warn!(%error, "conversation index unreadable; listing the loaded ones");
                    self.live.iter().map(|entry| entry.key().clone()).collect()
                }
            },
        };
        ids.retain(|id| {
            after.is_none_or(|after| {
                if newest_first {
                    &**id < after
                } else {
                    &**id > after
                }
            })
        });
        ids.sort_unstable();
        ids.dedup();
        if newest_first {
            ids.reverse();
        }
        (ids, true)
    }

    /// Conversation `id`'s summary if `viewer` may read it and it matches `filter`. One this
    /// engine has not loaded (indexed only in the store, or dropped from the cache after
    /// this node missed other nodes' commits) is replayed from the store for the listing
    /// alone: caching it would make a listing that pages through a large store load all of
    /// it into memory.
    async fn listed(
        &self,
        id: &str,
        viewer: Option<&str>,
        filter: &ConversationFilter,
        indexed_for: Option<&str>,
    ) -> Option<ConversationSummary> {
        let cached = self.live.get(id).map(|slot| slot.clone());
        if let Some(slot) = cached {
            let guard = slot.lock().await;
            if let Some(conversation) = guard.as_ref() {
                return summary(conversation, viewer, filter);
            }
        }
        match self.replay_stored(id).await {
            Ok(Some((conversation, _))) => summary(&conversation, viewer, filter),
            // Gone (retention, perhaps through another node) since it was indexed.
            Ok(None) => {
                if let Some(agent) = indexed_for {
                    self.parties.forget_one(agent, id);
                }
                None
            }
            Err(_) => None,
        }
    }

    /// The template name of a conversation, loading it if needed.
    pub async fn template_of(&self, conversation_id: &str) -> Result<Arc<str>, EngineError> {
        self.read_loaded(conversation_id, |conversation| {
            conversation.started.template.clone()
        })
        .await
    }

    /// Whether the conversation has completed, loading it if needed.
    pub async fn is_completed(&self, conversation_id: &str) -> Result<bool, EngineError> {
        self.read_loaded(conversation_id, Conversation::is_completed)
            .await
    }

    /// Reads the loaded conversation, loading it (replaying its log) if needed: not a view,
    /// which would also read and copy every message to answer one field.
    async fn read_loaded<R>(
        &self,
        conversation_id: &str,
        read: impl Fn(&Conversation) -> R,
    ) -> Result<R, EngineError> {
        // A second try covers a cached copy dropped between loading and locking it.
        for _ in 0..2 {
            let slot = self.loaded_slot(conversation_id).await?;
            let guard = slot.lock().await;
            if let Some(conversation) = guard.as_ref() {
                return Ok(read(conversation));
            }
        }
        Err(EngineError::UnknownConversation(conversation_id.to_owned()))
    }
}

/// `conversation`'s summary if `viewer` may read it and it matches `filter`.
fn summary(
    conversation: &Conversation,
    viewer: Option<&str>,
    filter: &ConversationFilter,
) -> Option<ConversationSummary> {
    let started = &conversation.started;
    let readable = viewer.is_none_or(|viewer| conversation.can_read(viewer));
    let party = filter.participant.as_deref().is_none_or(|agent| {
        &*started.initiator == agent || started.participants.iter().any(|p| &**p == agent)
    });
    let status = filter
        .status
        .is_none_or(|status| conversation.status == status);
    let template = filter
        .template
        .as_deref()
        .is_none_or(|name| &*started.template == name);
    let outcome = filter
        .outcome
        .is_none_or(|outcome| conversation.outcome == Some(outcome));
    (readable && party && status && template && outcome).then(|| ConversationSummary {
        id: started.id.clone(),
        template: started.template.clone(),
        revision: started.revision.clone(),
        initiator: started.initiator.clone(),
        participants: started.participants.clone(),
        status: conversation.status,
        outcome: conversation.outcome,
        deadline: conversation.deadline,
        version: conversation.version,
    })
}
