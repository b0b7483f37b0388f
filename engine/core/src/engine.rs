//! The [`Engine`]: the library API of the conversation core.
//!
//! It owns the live conversations (one async lock each, so one conversation's messages are
//! handled one at a time while different conversations run in parallel), runs each unit of
//! work as a [`Step`], and acknowledges nothing before the store accepted the step's commit.
//! A failed commit drops the live copy, so the next request reloads the truth from the store.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use colloquy_policy::{Catalog, CompiledTemplate};
use colloquy_protocol::conversation::{
    CommitmentState, CommitmentView, ConversationStatus, ConversationView, Outcome, SendReceipt,
    ThreadView, Violation, ViolationKind,
};
use colloquy_protocol::event::{ConversationEvent, EventKind, ThreadTransition};
use colloquy_protocol::message::{AgentId, ENGINE_PARTY, Message, SendMessage, StartConversation};
use futures_util::StreamExt as _;
use tokio::sync::{Mutex, broadcast};

use crate::clock::Clock;
use crate::conversation::Conversation;
use crate::dispatch;
use crate::error::EngineError;
use crate::hooks::{CallSite, HookCaller};
use crate::ids::{MAX_ID_LEN, is_id};
use crate::keyed::{self, ConversationMap};
use crate::parties::{self, PartyIndex};
use crate::sight::Sight;
use crate::step::Step;
use crate::store::{Commit, ConversationStore, StoreError};
use crate::wakeups::{Listener, Wakeups};

/// How long a completed conversation stays readable before retention removes it.
pub const DEFAULT_RETENTION_MS: u64 = 5 * 60 * 1000;
/// How long a message waits in an agent's inbox, unacknowledged, before it is dropped.
pub const DEFAULT_INBOX_TTL_MS: u64 = 7 * 24 * 60 * 60 * 1000;
/// How often a write that lost an optimistic-concurrency race is retried.
pub const MAX_COMMIT_ATTEMPTS: usize = 5;
/// Conversations woken at once by the scheduler. Each wake-up of a hooked conversation
/// waits on the hook pool, not on an async worker; this bounds how many wait.
pub const MAX_CONCURRENT_WAKES: usize = 256;
/// Conversations a scheduler pass takes off the deadline index at most.
pub const SCHEDULER_BATCH: usize = 1024;

/// Where the engine finds templates: the newest revision for new conversations, and the
/// exact revision running conversations are pinned to.
pub trait TemplateSource: Send + Sync + 'static {
    /// The revision new conversations of `name` use.
    fn latest(&self, name: &str) -> Option<Arc<CompiledTemplate>>;
    /// A specific revision.
    fn revision(&self, name: &str, revision: &str) -> Option<Arc<CompiledTemplate>>;
    /// The names new conversations can start, sorted.
    fn names(&self) -> Vec<Arc<str>>;
}

impl TemplateSource for Catalog {
    fn latest(&self, name: &str) -> Option<Arc<CompiledTemplate>> {
        Catalog::latest(self, name)
    }

    fn revision(&self, name: &str, revision: &str) -> Option<Arc<CompiledTemplate>> {
        Catalog::revision(self, name, revision)
    }

    fn names(&self) -> Vec<Arc<str>> {
        Catalog::names(self)
    }
}

/// Engine settings.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// How long completed conversations are kept (default 5 minutes).
    pub retention_ms: u64,
    /// Agents without an inbox: messages to them are recorded in their conversations (and
    /// streamed from there) but not kept in an inbox. For agents that only start
    /// conversations and follow them, which would otherwise leave every answer in an inbox
    /// nobody reads or acknowledges. Empty by default.
    pub inboxless: HashSet<AgentId>,
    /// How long an inbox entry waits for its agent to acknowledge it before it is dropped
    /// (default 7 days; see `inbox_expiry`). Counted from when its message was sent.
    pub inbox_ttl_ms: u64,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            retention_ms: DEFAULT_RETENTION_MS,
            inboxless: HashSet::new(),
            inbox_ttl_ms: DEFAULT_INBOX_TTL_MS,
        }
    }
}

type Slot = Arc<Mutex<Option<Conversation>>>;

/// The conversation engine.
pub struct Engine {
    pub(crate) templates: Arc<dyn TemplateSource>,
    pub(crate) store: Arc<dyn ConversationStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: EngineConfig,
    pub(crate) live: ConversationMap<Slot>,
    /// Who may read which loaded conversation, for agents' listings.
    pub(crate) parties: PartyIndex,
    /// Runs templates' wasm hooks; set by [`Engine::with_hooks`].
    pub(crate) hooks: Option<Arc<dyn HookCaller>>,
    pub(crate) notices: broadcast::Sender<Notice>,
    /// Rung per agent whose inbox grew, for inbox streams and long polls.
    pub(crate) inbox_wakeups: Wakeups,
    /// Rung per conversation that got events, for event streams.
    pub(crate) conversation_wakeups: Wakeups,
    /// Whether other engine nodes write to the store too (Redis), so a cached copy may be
    /// behind it.
    shared_store: bool,
    /// Inbox entries this engine dropped unacknowledged after the inbox TTL (`inbox_expiry`).
    pub(crate) inbox_entries_expired: std::sync::atomic::AtomicU64,
}

/// Published after every commit the store accepted: which conversation moved to which
/// version, and which agents got inbox entries. Subscribers (event and inbox streams) read
/// the details from the store; a lagging subscriber re-reads from its last position.
#[derive(Clone, Debug)]
pub struct Notice {
    /// The conversation.
    pub conversation_id: Arc<str>,
    /// Its version after the commit.
    pub version: u64,
    /// Agents whose inbox grew.
    pub agents: Arc<[AgentId]>,
}

/// Notices buffered per subscriber before it lags (and re-reads from the store).
pub const NOTICE_BUFFER: usize = 4096;

impl Engine {
    /// An engine over these templates, this store and this clock.
    pub fn new(
        templates: Arc<dyn TemplateSource>,
        store: Arc<dyn ConversationStore>,
        clock: Arc<dyn Clock>,
        config: EngineConfig,
    ) -> Engine {
        Engine {
            templates,
            shared_store: store.remote_changes().is_some(),
            store,
            clock,
            config,
            live: keyed::conversation_map(),
            parties: PartyIndex::default(),
            hooks: None,
            notices: broadcast::channel(NOTICE_BUFFER).0,
            inbox_entries_expired: std::sync::atomic::AtomicU64::new(0),
            inbox_wakeups: Wakeups::default(),
            conversation_wakeups: Wakeups::default(),
        }
    }

    /// The engine's clock reading.
    pub fn now(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Starts a conversation with `initiator` as the initiator; sends `request.message` as
    /// its opening act when present. Nothing is stored unless all of it succeeds.
    pub async fn start(
        &self,
        initiator: &str,
        request: StartConversation,
    ) -> Result<ConversationView, EngineError> {
        let template = self
            .templates
            .latest(&request.template)
            .ok_or_else(|| EngineError::UnknownTemplate(request.template.clone()))?;
        let id: Arc<str> = match &request.conversation_id {
            Some(id) => {
                check_id(id, "/conversation_id")?;
                Arc::from(id.as_str())
            }
            None => new_id(),
        };
        let opening_id = match &request.message {
            Some(message) => Some(message_id(message).map_err(|error| error.under("/message"))?),
            None => None,
        };
        let now = self.now();
        let started = dispatch::prepare_start(&template, id.clone(), initiator, &request, now)?;
        let slot: Slot = Arc::new(Mutex::new(None));
        let mut guard = slot.clone().lock_owned().await;
        match self.live.entry(id.clone()) {
            dashmap::Entry::Occupied(_) => {
                return Err(EngineError::DuplicateConversation(id.to_string()));
            }
            dashmap::Entry::Vacant(vacant) => {
                vacant.insert(slot);
            }
        }
        let result = async {
            let started = Arc::new(started);
            let opening = request.message.zip(opening_id);
            let initiator: Arc<str> = Arc::from(initiator);
            let retention_ms = self.config.retention_ms;
            // Tried where the request is handled first; again on the hook pool when a hook
            // could not finish there (so twice at most).
            let mut on_pool = false;
            let (conversation, stepped) = loop {
                let conversation = Conversation::new(template.clone(), started.clone());
                let (initiator, opening) = (initiator.clone(), opening.clone());
                let (conversation, stepped, needs_pool) = self
                    .run_step(&template, on_pool, move |hooks, site| {
                        let mut conversation = conversation;
                        let mut step = Step::with_hooks(&mut conversation, now, hooks, site);
                        let stepped = start_step(&mut step, &initiator, opening);
                        let needs_pool =
                            step.needs_pool || matches!(stepped, Err(EngineError::HookNeedsPool));
                        let stepped =
                            stepped.map(|messages| (messages, step.into_commit(retention_ms)));
                        (conversation, stepped, needs_pool)
                    })
                    .await?;
                if !needs_pool || on_pool {
                    break (conversation, stepped);
                }
                on_pool = true;
            };
            let (messages, commit) = stepped?;
            // Through `Engine::commit`, so streams hear of the opening message's delivery.
            self.commit(commit).await.map_err(|error| match error {
                StoreError::Duplicate(id) => EngineError::DuplicateConversation(id.to_string()),
                other => EngineError::Store(other),
            })?;
            Ok((conversation, messages))
        }
        .await;
        match result {
            Ok((conversation, messages)) => {
                let view = conversation.view(messages);
                *guard = Some(conversation);
                Ok(view)
            }
            Err(error) => {
                drop(guard);
                self.live.remove(&id);
                Err(error)
            }
        }
    }

    /// Sends a message from `sender` into a conversation. A retry with an already accepted
    /// `message_id` returns the first result and changes nothing.
    pub async fn send(
        &self,
        conversation_id: &str,
        sender: &str,
        message: SendMessage,
    ) -> Result<SendReceipt, EngineError> {
        let id = message_id(&message)?;
        // The receipt shows the threads the message went on, not every thread: the
        // initiator of a call for proposals to a thousand bidders would otherwise get a
        // thousand threads back with each award or rejection.
        let threads_of = |conversation: &Conversation, (_, handled): &(Sight, Handled)| {
            match handled {
                Handled::Fresh(parts) => conversation.thread_views_of(
                    std::iter::once(sender)
                        .chain(parts.receivers.iter().map(|receiver| &**receiver)),
                ),
                // Cut to the first acceptance's receivers below, once they are read.
                Handled::Duplicate(_) => conversation.thread_views(),
            }
        };
        let message = Arc::new(message);
        let work: Arc<Work<(Sight, Handled)>> = {
            let (id, message) = (id.clone(), message.clone());
            let sender: Arc<str> = Arc::from(sender);
            Arc::new(move |step: &mut Step<'_>| {
                let sight = Sight::of_sender(step.conversation, &sender);
                if let Some(seq) = step.conversation.accepted_seq(&id) {
                    if step.conversation.role_of(&sender).is_none() {
                        return Err(EngineError::NotAParty {
                            agent: sender.to_string(),
                            conversation: step.conversation.id().to_string(),
                        });
                    }
                    return Ok((sight, Handled::Duplicate(seq)));
                }
                dispatch::on_message(step, &sender, &message, id.clone())?;
                Ok((sight, Handled::Fresh(receipt_parts(&id, step.events()))))
            })
        };
        let (mut summary, (sight, handled)) = self
            .with_conversation(conversation_id, threads_of, work)
            .await?;
        let (duplicate, parts) = match handled {
            Handled::Fresh(parts) => (false, parts),
            Handled::Duplicate(seq) => {
                let events = self.store.events_after(conversation_id, seq - 1).await?;
                check_retry(&id, &events, sender, &message)?;
                let parts = receipt_parts(&id, &events);
                summary.threads.retain(|thread| {
                    *thread.participant == *sender || parts.receivers.contains(&thread.participant)
                });
                (true, parts)
            }
        };
        Ok(sight.receipt(SendReceipt {
            message_id: id,
            duplicate,
            receivers: parts.receivers,
            transitions: parts.transitions,
            violation: parts.violation,
            status: summary.status,
            outcome: summary.outcome,
            threads: summary.threads,
        }))
    }

    /// The conversation as `viewer` sees it; `None` reads as an administrator.
    pub async fn view(
        &self,
        conversation_id: &str,
        viewer: Option<&str>,
    ) -> Result<ConversationView, EngineError> {
        let slot = self.loaded_slot(conversation_id).await?;
        let guard = slot.lock().await;
        let conversation = guard
            .as_ref()
            .ok_or_else(|| EngineError::UnknownConversation(conversation_id.to_owned()))?;
        if let Some(viewer) = viewer
            && !conversation.can_read(viewer)
        {
            return Err(EngineError::NotAParty {
                agent: viewer.to_owned(),
                conversation: conversation_id.to_owned(),
            });
        }
        let messages = self.messages(conversation).await?;
        Ok(Sight::of(conversation, viewer).view(conversation.view(messages)))
    }

    /// The performatives `agent` may send next as the participant of its thread in the
    /// conversation: those of its state's transitions from the participant, in template
    /// order, each once (a transition's `when` guard is not evaluated). Empty when the
    /// conversation has ended or `agent` has no thread in it. What a bridge that answers
    /// for a remote agent (A2A) picks its reply from.
    pub async fn replies_open_to(
        &self,
        conversation_id: &str,
        agent: &str,
    ) -> Result<Vec<Arc<str>>, EngineError> {
        let slot = self.loaded_slot(conversation_id).await?;
        let guard = slot.lock().await;
        let conversation = guard
            .as_ref()
            .ok_or_else(|| EngineError::UnknownConversation(conversation_id.to_owned()))?;
        let Some(thread) = conversation.thread_index(agent) else {
            return Ok(Vec::new());
        };
        if conversation.is_completed() {
            return Ok(Vec::new());
        }
        let machine = &conversation.template.machine;
        let state = machine.state(conversation.threads[thread].state);
        let mut open: Vec<Arc<str>> = Vec::new();
        for transition in &state.transitions {
            if transition.from == colloquy_protocol::template::Role::Participant
                && !open
                    .iter()
                    .any(|known| **known == *transition.performative.name())
            {
                open.push(Arc::from(transition.performative.name()));
            }
        }
        Ok(open)
    }

    /// The conversation's events after `after_seq` that `viewer` may see (`None`: all of
    /// them, for an administrator); see [`Sight`].
    pub async fn events(
        &self,
        conversation_id: &str,
        viewer: Option<&str>,
        after_seq: u64,
    ) -> Result<Vec<ConversationEvent>, EngineError> {
        Ok(self
            .events_read(conversation_id, viewer, after_seq)
            .await?
            .0)
    }

    /// [`Engine::events`], with the seq of the last event read, seen or not: where the next
    /// read of a stream resumes, so it does not read again what it was not shown.
    pub async fn events_read(
        &self,
        conversation_id: &str,
        viewer: Option<&str>,
        after_seq: u64,
    ) -> Result<(Vec<ConversationEvent>, u64), EngineError> {
        let mut sight = self.sight(conversation_id, viewer).await?;
        let events = self.store.events_after(conversation_id, after_seq).await?;
        let read_to = events.last().map_or(after_seq, |event| event.seq);
        let seen = events
            .into_iter()
            .filter_map(|event| sight.event(event))
            .collect();
        Ok((seen, read_to))
    }

    /// What `viewer` may see of the conversation, once it is known to be a reader.
    async fn sight(
        &self,
        conversation_id: &str,
        viewer: Option<&str>,
    ) -> Result<Sight, EngineError> {
        let slot = self.loaded_slot(conversation_id).await?;
        let guard = slot.lock().await;
        match (guard.as_ref(), viewer) {
            (None, _) => Err(EngineError::UnknownConversation(conversation_id.to_owned())),
            (Some(conversation), Some(viewer)) if !conversation.can_read(viewer) => {
                Err(EngineError::NotAParty {
                    agent: viewer.to_owned(),
                    conversation: conversation_id.to_owned(),
                })
            }
            (Some(conversation), viewer) => Ok(Sight::of(conversation, viewer)),
        }
    }

    /// Commitments of live conversations where `agent` is debtor or creditor (a party of
    /// each: only the conversations the party index lists for it are read).
    pub async fn commitments_of(&self, agent: &str) -> Vec<CommitmentView> {
        let slots: Vec<Slot> = self
            .parties
            .of(agent, None)
            .iter()
            .filter_map(|id| self.live.get(id).map(|entry| entry.value().clone()))
            .collect();
        let mut found = Vec::new();
        for slot in slots {
            let guard = slot.lock().await;
            if let Some(conversation) = guard.as_ref() {
                found.extend(conversation.commitments_involving(agent));
            }
        }
        found
    }

    /// The creditor waives a commitment.
    pub async fn release_commitment(
        &self,
        commitment_id: &str,
        agent: &str,
    ) -> Result<CommitmentView, EngineError> {
        self.settle(commitment_id, agent, CommitmentState::Released)
            .await
    }

    /// The debtor withdraws from a commitment.
    pub async fn cancel_commitment(
        &self,
        commitment_id: &str,
        agent: &str,
    ) -> Result<CommitmentView, EngineError> {
        self.settle(commitment_id, agent, CommitmentState::Cancelled)
            .await
    }

    async fn settle(
        &self,
        commitment_id: &str,
        agent: &str,
        to: CommitmentState,
    ) -> Result<CommitmentView, EngineError> {
        let (conversation_id, _) = commitment_id
            .rsplit_once('/')
            .ok_or_else(|| EngineError::UnknownCommitment(commitment_id.to_owned()))?;
        let work: Arc<Work<CommitmentView>> = {
            let commitment_id: Arc<str> = Arc::from(commitment_id);
            let agent: Arc<str> = Arc::from(agent);
            Arc::new(move |step: &mut Step<'_>| {
                dispatch::settle_commitment(step, &commitment_id, &agent, to)?;
                let conversation = &*step.conversation;
                conversation
                    .commitments
                    .iter()
                    .find(|c| c.id == commitment_id)
                    .map(|c| conversation.commitment_view(c))
                    .ok_or_else(|| EngineError::UnknownCommitment(commitment_id.to_string()))
            })
        };
        let (_, view) = self
            .with_conversation(conversation_id, |_, _| Vec::new(), work)
            .await
            .map_err(|error| match error {
                EngineError::UnknownConversation(_) => {
                    EngineError::UnknownCommitment(commitment_id.to_owned())
                }
                other => other,
            })?;
        Ok(view)
    }

    /// One scheduler pass: fires every due deadline and retry, and removes conversations
    /// whose retention window has passed; returns once all of them are done. Returns how
    /// many conversations it looked at. Conversations are woken concurrently, so one whose
    /// `on_timeout` hook runs to its budget holds up no other.
    pub async fn run_due(&self) -> Result<usize, EngineError> {
        let now = self.now();
        let due = self.store.claim_due(now, SCHEDULER_BATCH).await?;
        futures_util::stream::iter(&due)
            .for_each_concurrent(MAX_CONCURRENT_WAKES, |id| self.wake_logged(id, now))
            .await;
        Ok(due.len())
    }

    /// Fires a claimed wake-up, logging a failure (the lease brings it back later).
    async fn wake_logged(&self, id: &str, now: u64) {
        let span = tracing::info_span!("conversation", id = %id);
        if let Err(error) = tracing::Instrument::instrument(self.wake(id, now), span).await {
            tracing::warn!(conversation = %id, %error, "scheduled wake-up failed");
        }
    }

    /// Fires a claimed wake-up. A lost race (another node, or a stale cached copy) is
    /// retried from a fresh load: the claim is this node's only chance to fire it soon.
    async fn wake(&self, id: &str, now: u64) -> Result<(), EngineError> {
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
    async fn wake_once(&self, id: &str, now: u64, on_pool: bool) -> Result<(), EngineError> {
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

    /// Deletes `agent`'s inbox entries up to and including `through`: the agent has handled
    /// them. Returns the inbox's head. Refused past the head, which would delete messages
    /// the agent has not been sent yet.
    pub async fn acknowledge_inbox(&self, agent: &str, through: u64) -> Result<u64, EngineError> {
        let head = self.store.inbox_head(agent).await?;
        if through > head {
            return Err(EngineError::invalid(
                "/through",
                format!(
                    "`{agent}`'s inbox ends at {head}; an acknowledgement cannot reach past \
                     its newest entry"
                ),
            ));
        }
        // Nothing to delete, nothing to remember (and no row for every name a caller tries).
        if through > 0 {
            self.store.acknowledge(agent, through).await?;
        }
        Ok(head)
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
                let due = match engine.store.claim_due(now, SCHEDULER_BATCH).await {
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

    /// The revision of template `name` new conversations start with now.
    pub fn latest_template(&self, name: &str) -> Option<Arc<CompiledTemplate>> {
        self.templates.latest(name)
    }

    /// The templates new conversations can start now, sorted.
    pub fn template_names(&self) -> Vec<Arc<str>> {
        self.templates.names()
    }

    /// Notices of every accepted commit, from now on: for whoever needs them all (webhook
    /// delivery). A stream about one agent or one conversation listens on its key instead
    /// ([`Engine::listen_inbox`], [`Engine::listen_conversation`]).
    pub fn subscribe(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    /// Rung whenever `agent`'s inbox grows, from now on.
    pub fn listen_inbox(&self, agent: &str) -> Listener {
        self.inbox_wakeups.listen(agent)
    }

    /// How many inbox streams and waiting long polls `agent` has open on this node.
    pub fn inbox_listeners(&self, agent: &str) -> usize {
        self.inbox_wakeups.listening(agent)
    }

    /// Rung whenever conversation `id` gets events, from now on.
    pub fn listen_conversation(&self, id: &str) -> Listener {
        self.conversation_wakeups.listen(id)
    }

    /// Wakes the streams of a conversation that got events and of the agents whose inboxes
    /// grew with them.
    pub(crate) fn ring(&self, conversation_id: &str, agents: &[AgentId]) {
        self.conversation_wakeups.ring(conversation_id);
        for agent in agents {
            self.inbox_wakeups.ring(agent);
        }
    }

    /// Commits to the store, then tells subscribers.
    pub(crate) async fn commit(&self, mut commit: Commit) -> Result<(), StoreError> {
        if !self.config.inboxless.is_empty() {
            let inboxless = &self.config.inboxless;
            commit
                .deliveries
                .retain(|delivery| !inboxless.contains(&delivery.agent));
        }
        let version = commit.expected_version + commit.events.len() as u64;
        let conversation_id = commit.conversation_id.clone();
        let mut agents: Vec<AgentId> = Vec::new();
        for delivery in &commit.deliveries {
            if !agents.contains(&delivery.agent) {
                agents.push(delivery.agent.clone());
            }
        }
        let changed = !commit.events.is_empty();
        let readers = parties::readers_added(&commit.events);
        self.store.commit(commit).await?;
        self.parties.add(&conversation_id, &readers);
        if changed {
            self.ring(&conversation_id, &agents);
        }
        if changed && self.notices.receiver_count() > 0 {
            // No receiver is not an error: nobody is streaming right now.
            let _ = self.notices.send(Notice {
                conversation_id,
                version,
                agents: agents.into(),
            });
        }
        Ok(())
    }

    /// This engine, running templates' wasm hooks on `hooks` (`colloquy_hooks::HookRuntime`).
    /// Without it, a template with a hook fails every hook call under its failure policy
    /// (`fail_closed` refuses the message): a policy written as a hook is never skipped
    /// silently.
    pub fn with_hooks(mut self, hooks: Arc<dyn HookCaller>) -> Engine {
        self.hooks = Some(hooks);
        self
    }

    /// What runs the engine's hooks, if anything does.
    pub fn hooks(&self) -> Option<&Arc<dyn HookCaller>> {
        self.hooks.as_ref()
    }

    /// Where the engine finds templates: the newest revision of each, and the revisions
    /// running conversations are pinned to.
    pub fn templates(&self) -> &Arc<dyn TemplateSource> {
        &self.templates
    }

    /// The store the engine commits to: what the bridges and the HTTP service read directly
    /// (inboxes, remote tasks, push configs, webhook cursors).
    pub fn store(&self) -> &Arc<dyn ConversationStore> {
        &self.store
    }

    /// How many conversations are loaded in memory.
    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    fn slot(&self, id: &str) -> Slot {
        if let Some(slot) = self.live.get(id) {
            return slot.clone();
        }
        self.live.entry(Arc::from(id)).or_default().clone()
    }

    /// The conversation's slot with the conversation loaded; a missing conversation leaves
    /// no trace (a message to an unknown conversation never creates one).
    pub(crate) async fn loaded_slot(&self, id: &str) -> Result<Slot, EngineError> {
        let slot = self.slot(id);
        let mut guard = slot.lock().await;
        if guard.is_none() {
            match self.load(id).await? {
                Some(conversation) => *guard = Some(conversation),
                None => {
                    drop(guard);
                    self.live.remove_if(id, |_, slot| {
                        slot.try_lock()
                            .map(|guard| guard.is_none())
                            .unwrap_or(false)
                    });
                    return Err(EngineError::UnknownConversation(id.to_owned()));
                }
            }
        }
        drop(guard);
        Ok(slot)
    }

    async fn load(&self, id: &str) -> Result<Option<Conversation>, EngineError> {
        let Some((conversation, events)) = self.replay_stored(id).await? else {
            return Ok(None);
        };
        self.parties.note(&conversation.started.id, &events);
        Ok(Some(conversation))
    }

    /// Conversation `id` replayed from the store's log, with the log, or `None` when the
    /// store has no such conversation. Neither cached nor indexed: [`Engine::load`] does
    /// that for the conversations the engine works on.
    pub(crate) async fn replay_stored(
        &self,
        id: &str,
    ) -> Result<Option<(Conversation, Vec<ConversationEvent>)>, EngineError> {
        let Some(events) = self.store.load(id).await? else {
            return Ok(None);
        };
        let Some(EventKind::Started(started)) = events.first().map(|event| &event.kind) else {
            return Err(EngineError::Store(StoreError::Internal(format!(
                "conversation `{id}` has no start event"
            ))));
        };
        let template = self
            .templates
            .revision(&started.template, &started.revision)
            .ok_or_else(|| EngineError::RevisionGone {
                name: started.template.to_string(),
                revision: started.revision.to_string(),
            })?;
        Ok(Conversation::replay(template, &events).map(|conversation| (conversation, events)))
    }

    /// Runs `work` on the loaded conversation after firing its due timers, and commits the
    /// result. Lost races with other writers are retried from a fresh load. So is a refusal
    /// decided on a cached copy that another node's commits have left behind: the version
    /// check catches a stale copy only when the work gets as far as a commit.
    ///
    /// The summary's threads are those `threads_of` picks, given the work's result.
    async fn with_conversation<R: Send + 'static>(
        &self,
        id: &str,
        threads_of: impl Fn(&Conversation, &R) -> Vec<ThreadView>,
        work: Arc<Work<R>>,
    ) -> Result<(Summary, R), EngineError> {
        let mut attempt = 0;
        let mut on_pool = false;
        loop {
            attempt += 1;
            let slot = self.loaded_slot(id).await?;
            let mut guard = slot.lock().await;
            // Owned by the work while it runs; work that never comes back (its caller gone,
            // the hook pool busy) leaves the slot empty, and the next request reloads the
            // conversation from the store.
            let Some(conversation) = guard.take() else {
                // Dropped by a failed commit between load and lock: load again.
                continue;
            };
            let now = self.now();
            let retention_ms = self.config.retention_ms;
            let work = work.clone();
            let Worked {
                conversation,
                timers,
                version,
                result,
                emitted,
                commit,
                needs_pool,
            } = self
                .run_step(
                    &conversation.template.clone(),
                    on_pool,
                    move |hooks, site| {
                        work_on(conversation, now, (hooks, site), retention_ms, &*work)
                    },
                )
                .await?;
            if needs_pool && !on_pool {
                // A hook could not finish on this worker; the work runs again on the hook
                // pool, on this copy if the work changed nothing.
                on_pool = true;
                if timers.is_none() && !emitted {
                    *guard = Some(conversation);
                }
                continue;
            }
            *guard = Some(conversation);
            if let Some(timers) = timers
                && let Err(error) = self.commit(timers).await
            {
                *guard = None;
                if matches!(error, StoreError::Conflict { .. }) && attempt < MAX_COMMIT_ATTEMPTS {
                    continue;
                }
                return Err(error.into());
            }
            let value = match result {
                Ok(value) => value,
                Err(error) => {
                    if emitted {
                        // Contract broken (emitted, then failed): never trust this copy.
                        tracing::error!(conversation = %id, %error, "step failed after emitting events; reloading");
                        *guard = None;
                    } else if self.shared_store
                        && decided_by_state(&error)
                        && attempt < MAX_COMMIT_ATTEMPTS
                        && !self.store.events_after(id, version).await?.is_empty()
                    {
                        *guard = None;
                        continue;
                    }
                    return Err(error);
                }
            };
            if emitted && let Err(error) = self.commit(commit).await {
                *guard = None;
                if matches!(error, StoreError::Conflict { .. }) && attempt < MAX_COMMIT_ATTEMPTS {
                    continue;
                }
                return Err(error.into());
            }
            let Some(conversation) = guard.as_ref() else {
                continue;
            };
            let summary = Summary {
                status: conversation.status,
                outcome: conversation.outcome,
                threads: threads_of(conversation, &value),
            };
            return Ok((summary, value));
        }
    }

    /// Runs `step`, synchronous work on a conversation it owns, where `template`'s steps
    /// belong, and tells it where that is. A template without a hook: here and now. One with
    /// a hook: here too, its calls held to [`colloquy_hooks::INLINE_SLICE`] on warm
    /// instances, while its module has not run past that too often; otherwise, or when
    /// `on_pool` (a step that could not finish here, run again), on the hook pool, so that
    /// its calls never hold an async worker for long (`crate::hook_pool`).
    async fn run_step<T: Send + 'static>(
        &self,
        template: &CompiledTemplate,
        on_pool: bool,
        step: impl FnOnce(Option<&dyn HookCaller>, CallSite) -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        match &self.hooks {
            Some(runtime)
                if template.hooks.is_some() && (on_pool || !runtime.runs_inline(template)) =>
            {
                let hooks = runtime.clone();
                runtime
                    .pool()
                    .run(&template.name, move || step(Some(&*hooks), CallSite::Owned))
                    .await
                    .map_err(EngineError::HooksBusy)
            }
            Some(runtime) if template.hooks.is_some() => {
                Ok(step(Some(&**runtime), CallSite::Inline))
            }
            hooks => Ok(step(hooks.as_deref(), CallSite::Owned)),
        }
    }

    async fn messages(&self, conversation: &Conversation) -> Result<Vec<Message>, EngineError> {
        let events = self.store.events_after(conversation.id(), 0).await?;
        Ok(events
            .into_iter()
            .filter_map(|event| match event.kind {
                EventKind::MessageAccepted { message, .. } => Some((*message).clone()),
                _ => None,
            })
            .collect())
    }
}

fn check_id(id: &str, pointer: &str) -> Result<(), EngineError> {
    if is_id(id) {
        Ok(())
    } else {
        Err(EngineError::invalid(
            pointer,
            format!("ids are 1 to {MAX_ID_LEN} characters of A-Z a-z 0-9 - _ . :"),
        ))
    }
}

/// Whether `error` was decided from the conversation's state, which another node may have
/// moved on, rather than from the request and the template alone.
fn decided_by_state(error: &EngineError) -> bool {
    !matches!(
        error,
        EngineError::UnknownPerformative { .. } | EngineError::SchemaViolation { .. }
    )
}

/// A fresh UUIDv7, formatted straight into its shared string: the id of a conversation or
/// message whose sender names none.
pub fn new_id() -> Arc<str> {
    let mut buffer = uuid::Uuid::encode_buffer();
    Arc::from(&*uuid::Uuid::now_v7().hyphenated().encode_lower(&mut buffer))
}

fn message_id(message: &SendMessage) -> Result<Arc<str>, EngineError> {
    match &message.message_id {
        Some(id) => {
            check_id(id, "/message_id")?;
            Ok(Arc::from(id.as_str()))
        }
        None => Ok(new_id()),
    }
}

/// A unit of work on a conversation, as [`Engine::with_conversation`] runs it: it may run
/// on a hook thread, so it owns what it reads.
type Work<R> = dyn Fn(&mut Step<'_>) -> Result<R, EngineError> + Send + Sync;

/// What a unit of work left, handed back from wherever it ran.
struct Worked<R> {
    conversation: Conversation,
    /// The commit of the timers that fell due before the work, when any fired.
    timers: Option<Commit>,
    /// The conversation's version the work started from.
    version: u64,
    result: Result<R, EngineError>,
    /// Whether the work emitted events (its commit is empty otherwise).
    emitted: bool,
    commit: Commit,
    /// A hook could not finish where the work ran: all of it is to be dropped and run again
    /// on the hook pool.
    needs_pool: bool,
}

/// Fires `conversation`'s due timers, then runs `work` on it: the synchronous half of
/// [`Engine::with_conversation`].
fn work_on<R>(
    mut conversation: Conversation,
    now: u64,
    (hooks, site): (Option<&dyn HookCaller>, CallSite),
    retention_ms: u64,
    work: &Work<R>,
) -> Worked<R> {
    let mut timers = Step::with_hooks(&mut conversation, now, hooks, site);
    dispatch::fire_due(&mut timers);
    let mut needs_pool = timers.needs_pool;
    let timers = (!timers.is_empty()).then(|| timers.into_commit(retention_ms));
    let version = conversation.version;
    let mut step = Step::with_hooks(&mut conversation, now, hooks, site);
    // After timers that need the pool, the work would run on a copy that is dropped anyway.
    let result = if needs_pool {
        Err(EngineError::HookNeedsPool)
    } else {
        work(&mut step)
    };
    needs_pool |= step.needs_pool || matches!(result, Err(EngineError::HookNeedsPool));
    let emitted = !step.is_empty();
    let commit = step.into_commit(retention_ms);
    Worked {
        conversation,
        timers,
        version,
        result,
        emitted,
        commit,
        needs_pool,
    }
}

/// A start's step: `on_start`, then the opening message if there is one. Returns the
/// messages it accepted.
fn start_step(
    step: &mut Step<'_>,
    initiator: &str,
    opening: Option<(SendMessage, Arc<str>)>,
) -> Result<Vec<Message>, EngineError> {
    dispatch::on_start(step)?;
    if let Some((message, message_id)) = opening {
        dispatch::on_message(step, initiator, &message, message_id)
            .map_err(|error| error.under("/message"))?;
    }
    Ok(step
        .events()
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::MessageAccepted { message, .. } => Some((**message).clone()),
            _ => None,
        })
        .collect())
}

/// What [`Engine::send`]'s work found.
enum Handled {
    /// Accepted now.
    Fresh(ReceiptParts),
    /// Accepted before, at this event seq.
    Duplicate(u64),
}

/// Where a conversation stands after a unit of work.
struct Summary {
    status: ConversationStatus,
    outcome: Option<Outcome>,
    threads: Vec<ThreadView>,
}

/// The message-specific half of a [`SendReceipt`].
#[derive(Default)]
struct ReceiptParts {
    receivers: Vec<AgentId>,
    transitions: Vec<ThreadTransition>,
    violation: Option<Violation>,
}

/// A message sent again under an accepted id must be a retry: the same sender, performative,
/// content, `in_reply_to` and `reply_by` as the message the id names (the first of
/// `events`). Receivers are not compared: routing may have changed them. Anything else is a
/// different message under a taken id, refused rather than answered with the first
/// message's receipt (which would tell its sender it was accepted, and lose it).
fn check_retry(
    id: &Arc<str>,
    events: &[ConversationEvent],
    sender: &str,
    retry: &SendMessage,
) -> Result<(), EngineError> {
    let Some(first) = events.iter().find_map(|event| match &event.kind {
        EventKind::MessageAccepted { message, .. } if message.id == *id => Some(message),
        _ => None,
    }) else {
        return Ok(());
    };
    let differs = if *first.sender != *sender {
        Some("sender")
    } else if first.performative.name() != retry.performative {
        Some("performative")
    } else if first.content.value() != retry.content {
        Some("content")
    } else if first.in_reply_to.as_deref() != retry.in_reply_to.as_deref() {
        Some("in_reply_to")
    } else if first.reply_by != retry.reply_by {
        Some("reply_by")
    } else {
        None
    };
    match differs {
        None => Ok(()),
        Some(field) => Err(EngineError::MessageIdTaken {
            id: id.to_string(),
            field,
        }),
    }
}

/// Reads what happened to message `id` from the events from its `message_accepted` on.
fn receipt_parts(id: &Arc<str>, events: &[ConversationEvent]) -> ReceiptParts {
    let mut parts = ReceiptParts::default();
    let mut iter = events.iter();
    for event in iter.by_ref() {
        if let EventKind::MessageAccepted {
            message,
            transitions,
        } = &event.kind
            && message.id == *id
        {
            parts.receivers = message.receivers.clone();
            parts.transitions = transitions.clone();
            break;
        }
    }
    for event in iter {
        match &event.kind {
            EventKind::ViolationRecorded(recorded)
                if recorded.message_id.as_deref() == Some(&**id)
                    && recorded.kind != ViolationKind::CommitmentViolated =>
            {
                parts.violation = Some((**recorded).clone());
                break;
            }
            EventKind::MessageAccepted { message, .. } if &*message.sender != ENGINE_PARTY => {
                break;
            }
            _ => {}
        }
    }
    parts
}
