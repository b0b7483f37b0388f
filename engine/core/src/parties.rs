//! Which loaded conversations each agent may read: its initiator, its participants and its
//! observers (agents a rule escalated to), by agent.
//!
//! An agent's `GET /v1/conversations` reads its own entry here instead of walking every
//! conversation the engine holds. Before, any agent's listing cost a pass over all of them
//! (with a lock each): 90 ms per request at 100 000 live conversations, for an agent party to
//! none. Durable stores keep their own index of the parties of conversations not loaded here
//! ([`ConversationStore::conversations_of`](crate::store::ConversationStore::conversations_of));
//! this one covers what the engine has loaded, observers included.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;

use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::message::AgentId;
use dashmap::DashMap;

use crate::conversation::Conversation;
use crate::keyed::{Hasher, SHARDS};

/// Conversation ids by the agents that may read them.
#[derive(Debug)]
pub struct PartyIndex {
    by_agent: DashMap<AgentId, BTreeSet<Arc<str>>, Hasher>,
}

impl Default for PartyIndex {
    fn default() -> PartyIndex {
        PartyIndex {
            by_agent: DashMap::with_hasher_and_shard_amount(Hasher::default(), SHARDS),
        }
    }
}

impl PartyIndex {
    /// Indexes the readers `events` of conversation `id` add (see [`readers_added`]). For
    /// replayed logs and other nodes' commits.
    pub fn note(&self, id: &Arc<str>, events: &[ConversationEvent]) {
        self.add(id, &readers_added(events));
    }

    /// Indexes `readers` for conversation `id`.
    pub fn add(&self, id: &Arc<str>, readers: &[AgentId]) {
        for agent in readers {
            if let Some(mut ids) = self.by_agent.get_mut(&**agent) {
                ids.insert(id.clone());
                continue;
            }
            self.by_agent
                .entry(agent.clone())
                .or_default()
                .insert(id.clone());
        }
    }

    /// Forgets a conversation that is gone (retention removed it).
    pub fn forget(&self, conversation: &Conversation) {
        let id = &conversation.started.id;
        let started = &conversation.started;
        let readers = std::iter::once(&started.initiator)
            .chain(&started.participants)
            .chain(&conversation.observers);
        for agent in readers {
            self.forget_one(agent, id);
        }
    }

    /// Forgets `id` for `agent` alone: it turned out to be gone (removed through another
    /// engine node).
    ///
    /// Looked up by `&str`: `DashMap::entry` wanted an owned key, an `Arc<str>` allocated
    /// for each reader of each conversation retention removes.
    pub fn forget_one(&self, agent: &str, id: &str) {
        let emptied = match self.by_agent.get_mut(agent) {
            Some(mut ids) => {
                ids.remove(id);
                ids.is_empty()
            }
            None => false,
        };
        // Checked again under the shard's write lock: an `add` in between keeps the entry.
        if emptied {
            self.by_agent.remove_if(agent, |_, ids| ids.is_empty());
        }
    }

    /// The conversations `agent` may read with ids after `after`, in id order.
    pub fn of(&self, agent: &str, after: Option<&str>) -> Vec<Arc<str>> {
        let Some(ids) = self.by_agent.get(agent) else {
            return Vec::new();
        };
        let start = after.map_or(Bound::Unbounded, Bound::Excluded);
        ids.range::<str, _>((start, Bound::Unbounded))
            .cloned()
            .collect()
    }
}

/// The readers `events` add: the initiator and participants of a start, the agent of an
/// escalation. Empty (no allocation) for the other events, which are nearly all of them.
pub fn readers_added(events: &[ConversationEvent]) -> Vec<AgentId> {
    let mut readers = Vec::new();
    for event in events {
        match &event.kind {
            EventKind::Started(started) => {
                readers.push(started.initiator.clone());
                readers.extend(started.participants.iter().cloned());
            }
            EventKind::Escalated { to, .. } => readers.push(to.clone()),
            _ => {}
        }
    }
    readers
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fixtures::started;

    fn escalated(to: &str) -> ConversationEvent {
        ConversationEvent {
            seq: 2,
            at: 11,
            prev: None,
            kind: EventKind::Escalated {
                to: Arc::from(to),
                reason: "over the limit".into(),
            },
        }
    }

    #[test]
    fn starts_and_escalations_index_readers_in_id_order_after_a_cursor() {
        let index = PartyIndex::default();
        for id in ["c3", "c1", "c2"] {
            index.note(&Arc::from(id), &[started(id)]);
        }
        index.note(&Arc::from("c2"), &[escalated("finance")]);
        let ids = |agent: &str, after: Option<&str>| -> Vec<String> {
            index
                .of(agent, after)
                .iter()
                .map(|id| id.to_string())
                .collect()
        };
        assert_eq!(ids("alice", None), ["c1", "c2", "c3"]);
        assert_eq!(ids("bob", Some("c1")), ["c2", "c3"]);
        assert_eq!(ids("finance", None), ["c2"]);
        assert_eq!(ids("mallory", None), Vec::<String>::new());
        index.forget_one("bob", "c2");
        assert_eq!(ids("bob", None), ["c1", "c3"]);
        index.forget_one("finance", "c2");
        assert!(index.by_agent.get("finance").is_none(), "empty entries go");
    }
}
