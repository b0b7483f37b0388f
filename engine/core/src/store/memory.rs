//! The in-memory store: everything in process memory, gone at exit. For tests, benchmarks
//! and throwaway runs.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use colloquy_protocol::event::ConversationEvent;
use colloquy_protocol::message::AgentId;
use dashmap::mapref::entry::Entry;

use super::archive::{self, Activation, ArchivedRevision};
use super::{AgentKey, Commit, ConversationStore, InboxEntry, PushConfig, RemoteTask, StoreError};
use crate::keyed::{self, ConversationMap, Hasher};

/// Entries kept per inbox; older ones are dropped. Memory inboxes are a development aid:
/// durable stores keep everything until it is acknowledged.
pub const MEMORY_INBOX_CAPACITY: usize = 10_000;

#[derive(Debug, Default)]
struct Record {
    events: Vec<ConversationEvent>,
    wake_at: Option<u64>,
}

#[derive(Debug, Default)]
struct Inbox {
    next_seq: u64,
    entries: VecDeque<InboxEntry>,
    /// How far webhook delivery has got.
    webhook_cursor: u64,
    /// The tasks the agent (a remote A2A agent) is running.
    remote_tasks: Vec<RemoteTask>,
}

/// The revision archive (see [`super::archive`]).
#[derive(Debug, Default)]
struct Archive {
    /// By (template, revision).
    revisions: BTreeMap<(Arc<str>, Arc<str>), ArchivedRevision>,
    /// Module bytes by SHA-256.
    modules: HashMap<Arc<str>, Arc<[u8]>, Hasher>,
    /// Every activation, in the order recorded.
    activations: Vec<Activation>,
}

/// An in-process [`ConversationStore`].
#[derive(Debug)]
pub struct MemoryStore {
    conversations: ConversationMap<Record>,
    wakes: Mutex<BTreeSet<(u64, Arc<str>)>>,
    inboxes: Mutex<HashMap<Arc<str>, Inbox, Hasher>>,
    push_configs: Mutex<Vec<PushConfig>>,
    /// Agents' signing keys by agent and kid.
    agent_keys: Mutex<BTreeMap<(AgentId, String), AgentKey>>,
    archive: Mutex<Archive>,
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore {
            conversations: keyed::conversation_map(),
            wakes: Mutex::default(),
            inboxes: Mutex::default(),
            push_configs: Mutex::default(),
            agent_keys: Mutex::default(),
            archive: Mutex::default(),
        }
    }

    /// How many conversations it holds.
    pub fn len(&self) -> usize {
        self.conversations.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.conversations.is_empty()
    }

    fn wakes(&self) -> MutexGuard<'_, BTreeSet<(u64, Arc<str>)>> {
        // A panic while holding this lock leaves the set consistent (single insert/remove
        // calls), so a poisoned lock is safe to keep using.
        self.wakes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn inboxes(&self) -> MutexGuard<'_, HashMap<Arc<str>, Inbox, Hasher>> {
        self.inboxes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn push_configs_locked(&self) -> MutexGuard<'_, Vec<PushConfig>> {
        self.push_configs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn archive(&self) -> MutexGuard<'_, Archive> {
        // Each change under this lock is one insert or push: a panic leaves it consistent.
        self.archive
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[async_trait]
impl ConversationStore for MemoryStore {
    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        let Commit {
            conversation_id,
            expected_version,
            events,
            deliveries,
            wake_at,
            ..
        } = commit;
        let previous_wake = match self.conversations.entry(conversation_id.clone()) {
            Entry::Vacant(vacant) => {
                if expected_version != 0 {
                    return Err(StoreError::Conflict {
                        id: conversation_id,
                        expected: expected_version,
                        actual: 0,
                    });
                }
                let mut events = events;
                events.shrink_to_fit();
                vacant.insert(Record { events, wake_at });
                None
            }
            Entry::Occupied(mut occupied) => {
                let record = occupied.get_mut();
                let actual = record.events.len() as u64;
                if expected_version == 0 {
                    return Err(StoreError::Duplicate(conversation_id));
                }
                if actual != expected_version {
                    return Err(StoreError::Conflict {
                        id: conversation_id,
                        expected: expected_version,
                        actual,
                    });
                }
                // A conversation's log is kept until retention: doubling would leave up to
                // half of it as unused capacity all that time, and growing it exactly copies
                // the whole log on every commit (quadratic in a long conversation). A
                // quarter more each time keeps both small.
                let free = record.events.capacity() - record.events.len();
                if free < events.len() {
                    record
                        .events
                        .reserve_exact(events.len().max(record.events.len() / 4));
                }
                record.events.extend(events);
                std::mem::replace(&mut record.wake_at, wake_at)
            }
        };
        if previous_wake != wake_at {
            let mut wakes = self.wakes();
            if let Some(at) = previous_wake {
                wakes.remove(&(at, conversation_id.clone()));
            }
            if let Some(at) = wake_at {
                wakes.insert((at, conversation_id));
            }
        }
        if !deliveries.is_empty() {
            let mut inboxes = self.inboxes();
            for delivery in deliveries {
                let inbox = inboxes.entry(delivery.agent).or_default();
                inbox.next_seq += 1;
                if inbox.entries.len() == MEMORY_INBOX_CAPACITY {
                    inbox.entries.pop_front();
                }
                inbox.entries.push_back(InboxEntry {
                    seq: inbox.next_seq,
                    conversation_id: delivery.conversation_id,
                    message: delivery.message,
                });
            }
        }
        Ok(())
    }

    async fn inbox_agents(&self) -> Result<Vec<AgentId>, StoreError> {
        Ok(self
            .inboxes()
            .iter()
            .filter(|(_, inbox)| !inbox.entries.is_empty())
            .map(|(agent, _)| agent.clone())
            .collect())
    }

    async fn inbox_head(&self, agent: &str) -> Result<u64, StoreError> {
        Ok(self.inboxes().get(agent).map_or(0, |inbox| inbox.next_seq))
    }

    async fn acknowledge(&self, agent: &str, through: u64) -> Result<(), StoreError> {
        if let Some(inbox) = self.inboxes().get_mut(agent) {
            while inbox
                .entries
                .front()
                .is_some_and(|entry| entry.seq <= through)
            {
                inbox.entries.pop_front();
            }
        }
        Ok(())
    }

    async fn webhook_cursor(&self, agent: &str) -> Result<u64, StoreError> {
        Ok(self
            .inboxes()
            .get(agent)
            .map_or(0, |inbox| inbox.webhook_cursor))
    }

    async fn advance_webhook_cursor(&self, agent: &str, seq: u64) -> Result<(), StoreError> {
        let mut inboxes = self.inboxes();
        let inbox = inboxes.entry(Arc::from(agent)).or_default();
        inbox.webhook_cursor = inbox.webhook_cursor.max(seq);
        Ok(())
    }

    async fn remote_tasks(&self, agent: &str) -> Result<Vec<RemoteTask>, StoreError> {
        Ok(self
            .inboxes()
            .get(agent)
            .map(|inbox| inbox.remote_tasks.clone())
            .unwrap_or_default())
    }

    async fn keep_remote_task(&self, agent: &str, task: &RemoteTask) -> Result<(), StoreError> {
        let mut inboxes = self.inboxes();
        let tasks = &mut inboxes.entry(Arc::from(agent)).or_default().remote_tasks;
        tasks.retain(|kept| {
            (&kept.conversation_id, &kept.message_id) != (&task.conversation_id, &task.message_id)
        });
        tasks.push(task.clone());
        Ok(())
    }

    async fn forget_remote_task(
        &self,
        agent: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        if let Some(inbox) = self.inboxes().get_mut(agent) {
            inbox.remote_tasks.retain(|kept| {
                (&*kept.conversation_id, &*kept.message_id) != (conversation_id, message_id)
            });
        }
        Ok(())
    }

    async fn push_configs(&self) -> Result<Vec<PushConfig>, StoreError> {
        Ok(self.push_configs_locked().clone())
    }

    async fn keep_push_config(&self, config: &PushConfig) -> Result<(), StoreError> {
        let mut configs = self.push_configs_locked();
        configs.retain(|kept| {
            (&kept.conversation_id, &kept.id) != (&config.conversation_id, &config.id)
        });
        configs.push(config.clone());
        Ok(())
    }

    async fn forget_push_config(&self, conversation_id: &str, id: &str) -> Result<(), StoreError> {
        self.push_configs_locked()
            .retain(|kept| (&*kept.conversation_id, kept.id.as_str()) != (conversation_id, id));
        Ok(())
    }

    async fn agent_keys(&self, agent: &str) -> Result<Vec<AgentKey>, StoreError> {
        let keys = self
            .agent_keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        Ok((keys.values())
            .filter(|key| &*key.agent == agent)
            .cloned()
            .collect())
    }

    async fn keep_agent_key(&self, key: &AgentKey) -> Result<(), StoreError> {
        // One insert under the lock: a panic leaves the map consistent.
        self.agent_keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert((key.agent.clone(), key.kid.clone()), key.clone());
        Ok(())
    }

    async fn archive_revision(&self, revision: &ArchivedRevision) -> Result<(), StoreError> {
        self.archive()
            .revisions
            .entry((revision.template.clone(), revision.revision.clone()))
            .or_insert_with(|| revision.clone());
        Ok(())
    }

    async fn archive_module(&self, sha256: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.archive()
            .modules
            .entry(Arc::from(sha256))
            .or_insert_with(|| Arc::from(bytes));
        Ok(())
    }

    async fn archived_revisions(
        &self,
        template: Option<&str>,
    ) -> Result<Vec<ArchivedRevision>, StoreError> {
        let mut revisions: Vec<ArchivedRevision> = self
            .archive()
            .revisions
            .values()
            .filter(|kept| template.is_none_or(|template| &*kept.template == template))
            .cloned()
            .collect();
        revisions.sort_by(|a, b| a.listing_order().cmp(&b.listing_order()));
        Ok(revisions)
    }

    async fn archived_revision(
        &self,
        template: &str,
        revision: &str,
    ) -> Result<Option<ArchivedRevision>, StoreError> {
        let key = (Arc::from(template), Arc::from(revision));
        Ok(self.archive().revisions.get(&key).cloned())
    }

    async fn archived_module(&self, sha256: &str) -> Result<Option<Arc<[u8]>>, StoreError> {
        Ok(self.archive().modules.get(sha256).cloned())
    }

    async fn record_activation(&self, activation: &Activation) -> Result<(), StoreError> {
        self.archive().activations.push(activation.clone());
        Ok(())
    }

    async fn activations(
        &self,
        template: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Activation>, StoreError> {
        let history: Vec<Activation> = self
            .archive()
            .activations
            .iter()
            .filter(|kept| template.is_none_or(|template| &*kept.template == template))
            .cloned()
            .collect();
        Ok(archive::newest(history, limit))
    }

    async fn load(&self, id: &str) -> Result<Option<Vec<ConversationEvent>>, StoreError> {
        Ok(self
            .conversations
            .get(id)
            .map(|record| record.events.clone()))
    }

    async fn events_after(
        &self,
        id: &str,
        after_seq: u64,
    ) -> Result<Vec<ConversationEvent>, StoreError> {
        Ok(self
            .conversations
            .get(id)
            .map(|record| {
                let skip = usize::try_from(after_seq).unwrap_or(usize::MAX);
                record.events.iter().skip(skip).cloned().collect()
            })
            .unwrap_or_default())
    }

    async fn claim_due(&self, now: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError> {
        let claimed: Vec<(u64, Arc<str>)> = {
            let mut wakes = self.wakes();
            let mut due = Vec::new();
            // Taken off the front, where the due entries are: no search, no copies.
            while due.len() < limit && wakes.first().is_some_and(|(at, _)| *at <= now) {
                due.extend(wakes.pop_first());
            }
            due
        };
        for (at, id) in &claimed {
            if let Some(mut record) = self.conversations.get_mut(id)
                && record.wake_at == Some(*at)
            {
                record.wake_at = None;
            }
        }
        Ok(claimed.into_iter().map(|(_, id)| id).collect())
    }

    async fn remove(&self, id: &str) -> Result<(), StoreError> {
        if let Some((id, record)) = self.conversations.remove(id)
            && let Some(at) = record.wake_at
        {
            self.wakes().remove(&(at, id));
        }
        Ok(())
    }

    async fn inbox(
        &self,
        agent: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        let inboxes = self.inboxes();
        Ok(inboxes
            .get(agent)
            .map(|inbox| {
                inbox
                    .entries
                    .iter()
                    .filter(|entry| entry.seq > after_seq)
                    .take(limit)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::fixtures::{
        assert_a_message_to_several_reaches_each, assert_acknowledged_entries_go,
        assert_inbox_agents_are_listed, assert_remote_tasks_are_kept_replaced_and_forgotten,
        assert_webhook_cursors_only_advance,
    };

    #[tokio::test]
    async fn a_message_to_several_agents_reaches_each_inbox() {
        assert_a_message_to_several_reaches_each(&MemoryStore::new(), "c1").await;
    }

    #[tokio::test]
    async fn acknowledged_inbox_entries_go_and_the_sequence_goes_on() {
        let store = MemoryStore::new();
        assert_a_message_to_several_reaches_each(&store, "c1").await;
        // Each inbox holds its own handle on a shared message: nothing to check there.
        assert_acknowledged_entries_go(&store, "c1", |_| async {}).await;
    }

    #[tokio::test]
    async fn agents_with_inbox_entries_are_listed() {
        let store = MemoryStore::new();
        assert_inbox_agents_are_listed(&store, "c1").await;
        let mut listed = store.inbox_agents().await.expect("agents");
        listed.sort();
        assert_eq!(
            listed,
            ["bob", "dave"].map(Arc::from),
            "carol has nothing left"
        );
    }

    #[tokio::test]
    async fn webhook_cursors_only_advance() {
        assert_webhook_cursors_only_advance(&MemoryStore::new()).await;
    }

    #[tokio::test]
    async fn a_refusal_reads_back() {
        super::super::fixtures::assert_a_refusal_reads_back(&MemoryStore::new(), "c1").await;
    }

    #[tokio::test]
    async fn remote_tasks_are_kept_replaced_and_forgotten() {
        assert_remote_tasks_are_kept_replaced_and_forgotten(&MemoryStore::new()).await;
    }

    #[tokio::test]
    async fn the_archive_keeps_revisions_modules_and_activations() {
        super::super::fixtures::assert_the_archive_keeps_revisions_modules_and_activations(
            &MemoryStore::new(),
        )
        .await;
    }

    #[tokio::test]
    async fn push_configs_are_kept_replaced_and_forgotten() {
        super::super::fixtures::assert_push_configs_are_kept_replaced_and_forgotten(
            &MemoryStore::new(),
        )
        .await;
    }

    #[tokio::test]
    async fn agent_keys_are_kept_and_replaced() {
        super::super::fixtures::assert_agent_keys_are_kept_and_replaced(&MemoryStore::new()).await;
    }
}
