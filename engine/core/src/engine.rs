//! The [`Engine`]: the library API of the conversation core.
//!
//! It owns the live conversations (one async lock each, so one conversation's messages are
//! handled one at a time while different conversations run in parallel), runs each unit of
//! work as a [`Step`], and acknowledges nothing before the store accepted the step's commit.
//! A failed commit drops the live copy, so the next request reloads the truth from the store.

use std::collections::HashSet;
use std::sync::Arc;

use colloquy_policy::{Catalog, CompiledTemplate};
use colloquy_protocol::conversation::{ConversationView, SendReceipt};
use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::message::{AgentId, Message, SendMessage, StartConversation};
use tokio::sync::{Mutex, broadcast};
use tracing::Instrument as _;

use crate::clock::Clock;
use crate::conversation::Conversation;
use crate::dispatch;
use crate::error::EngineError;
use crate::hooks::HookCaller;
use crate::ids::{MAX_ID_LEN, is_id};
use crate::keyed::{self, ConversationMap};
use crate::parties::{self, PartyIndex};
use crate::sight::Sight;
use crate::step::Step;
use crate::store::{Commit, ConversationStore, StoreError};
use crate::trace_origins;
use crate::wakeups::{Listener, Wakeups};

mod audit;
mod commitments;
mod moves;
mod scheduler;
mod work;

use work::*;

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
    /// Every revision a new conversation of `name` may start on now (the active one, and a
    /// candidate a ramp gives starts to), without counting as a start as [`latest`] may: for
    /// checks made before a start (can its parties take part?).
    ///
    /// [`latest`]: TemplateSource::latest
    fn starting(&self, name: &str) -> Vec<Arc<CompiledTemplate>> {
        self.latest(name).into_iter().collect()
    }
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
    /// The engine's key, which signs the messages the engine sends itself (automatic replies,
    /// escalation notices, hook and rule `send` actions) as a party signs its own; `None`
    /// leaves them unsigned. `colloquy serve` gives it its `--audit-key`.
    pub message_signer: Option<Arc<colloquy_trust::jws::Signer>>,
    /// When nodes share the store's partitions: the fence each commit carries
    /// ([`Commit::fence`]); `None`, commits carry none.
    pub fencer: Option<Arc<dyn Fencer>>,
}

/// The fence of a commit to a conversation: the lease this node holds its partition by
/// (`colloquy_server::ownership`). A conversation whose partition the node does not hold
/// gets a fence at epoch 0, which no lease has, so its commit is refused.
pub trait Fencer: Send + Sync + 'static {
    /// The fence for a commit to `conversation_id` now.
    fn fence(&self, conversation_id: &str) -> colloquy_cluster::Fence;

    /// The partitions this node holds now: the scheduler fires their deadlines only.
    fn owned(&self) -> Vec<colloquy_cluster::PartitionId>;

    /// Whether this node holds `conversation_id`'s partition now (its cached copy is kept
    /// current only then).
    fn holds(&self, conversation_id: &str) -> bool {
        self.fence(conversation_id).epoch != colloquy_cluster::Epoch::default()
    }

    /// The store refused a commit by `fenced`: this node lost the partition at that epoch
    /// (or earlier) and must stop serving it before its next tick finds out.
    fn lost(&self, fenced: &colloquy_cluster::Fenced);
}

impl std::fmt::Debug for dyn Fencer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Fencer")
    }
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            retention_ms: DEFAULT_RETENTION_MS,
            inboxless: HashSet::new(),
            inbox_ttl_ms: DEFAULT_INBOX_TTL_MS,
            message_signer: None,
            fencer: None,
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
    /// Notices of other nodes' commits heard (see `cluster.rs`).
    pub(crate) remote_notices: std::sync::atomic::AtomicU64,
    /// Agents whose inboxes this node follows besides its open streams (webhook and A2A
    /// delivery): see [`Engine::follow_inboxes`].
    pub(crate) followed_inboxes: Arc<std::sync::RwLock<std::collections::BTreeSet<AgentId>>>,
    /// Given to every conversation, to record the rules that fire (see
    /// [`Engine::with_rule_log`]).
    rule_log: Option<Arc<crate::rules::RuleLog>>,
    /// The trace each recent conversation started in, while traces are exported.
    trace_origins: crate::trace_origins::TraceOrigins,
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
            remote_notices: std::sync::atomic::AtomicU64::new(0),
            followed_inboxes: Arc::default(),
            inbox_wakeups: Wakeups::default(),
            conversation_wakeups: Wakeups::default(),
            rule_log: None,
            trace_origins: crate::trace_origins::TraceOrigins::default(),
        }
    }

    /// The trace each recent conversation started in (empty unless traces are exported).
    pub fn trace_origins(&self) -> &crate::trace_origins::TraceOrigins {
        &self.trace_origins
    }

    /// Records every rule that fires in this engine's conversations in `log`, for coverage
    /// (template tests, the explorer). Costs a lock per fired rule: not for servers.
    pub fn with_rule_log(mut self, log: Arc<crate::rules::RuleLog>) -> Engine {
        self.rule_log = Some(log);
        self
    }

    /// When the conversation next needs the scheduler (a deadline, a retry), as its loaded
    /// state says; `None` when nothing is pending. Completed conversations answer with
    /// their removal after retention.
    pub async fn next_wake(&self, conversation_id: &str) -> Result<Option<u64>, EngineError> {
        let slot = self.loaded_slot(conversation_id).await?;
        let guard = slot.lock().await;
        let conversation = guard
            .as_ref()
            .ok_or_else(|| EngineError::UnknownConversation(conversation_id.to_owned()))?;
        Ok(conversation.next_wake(self.config.retention_ms))
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
        let mut started = dispatch::prepare_start(&template, id.clone(), initiator, &request, now)?;
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
        // The engine step of a trace: the hook calls and the store commit are its children.
        let step_span = tracing::debug_span!(
            "engine step",
            colloquy.step = "start",
            colloquy.conversation.id = %id,
            colloquy.template = %template.name,
            colloquy.template.revision = %template.revision,
        );
        // Kept in the `started` event, so the conversation's later work links to this step
        // wherever and whenever it runs.
        if trace_origins::exporting() {
            started.trace =
                trace_origins::traceparent(&trace_origins::context_of(&step_span)).map(Arc::from);
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
                let mut conversation = Conversation::new(template.clone(), started.clone());
                conversation.rule_log = self.rule_log.clone();
                conversation.signer = self.config.message_signer.clone();
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
            // Remembered before the commit wakes the pushes of the opening message, which
            // are children of it; forgotten again if the commit fails.
            let remembered = crate::trace_origins::exporting()
                && self
                    .trace_origins
                    .remember(&id, trace_origins::context_of(&tracing::Span::current()));
            // Through `Engine::commit`, so streams hear of the opening message's delivery.
            let committed = self.commit(commit).await;
            if committed.is_err() && remembered {
                self.trace_origins.forget(&id);
            }
            committed.map_err(|error| match error {
                StoreError::Duplicate(id) => EngineError::DuplicateConversation(id.to_string()),
                other => EngineError::Store(other),
            })?;
            Ok((conversation, messages))
        }
        .instrument(step_span)
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
    /// `message_id` returns the first result and changes nothing. A party's message the
    /// protocol refuses is recorded as a `message_refused` event of the conversation (up to
    /// [`dispatch::MAX_RECORDED_REFUSALS`] of them), delivered to nobody, and refused.
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
        // A party's message the protocol refuses is recorded in the conversation, then
        // refused as before.
        let refused = |conversation: &Conversation, error: &EngineError| {
            dispatch::refusal(conversation, sender, &message, error)
        };
        // The template is recorded once the conversation is loaded (`run_step`).
        let step_span = tracing::debug_span!(
            "engine step",
            colloquy.step = "message",
            colloquy.conversation.id = %conversation_id,
            colloquy.template = tracing::field::Empty,
            colloquy.template.revision = tracing::field::Empty,
        );
        if crate::trace_origins::exporting()
            && let Some(origin) = self.trace_origins.origin(conversation_id)
        {
            trace_origins::link(&step_span, origin);
        }
        let (mut summary, (sight, handled)) = self
            .with_conversation(conversation_id, threads_of, refused, work)
            .instrument(step_span)
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

    /// The revision of template `name` new conversations start with now.
    pub fn latest_template(&self, name: &str) -> Option<Arc<CompiledTemplate>> {
        self.templates.latest(name)
    }

    /// Every revision a new conversation of `name` may start on now
    /// ([`TemplateSource::starting`]); looking does not count as a start.
    pub fn starting_templates(&self, name: &str) -> Vec<Arc<CompiledTemplate>> {
        self.templates.starting(name)
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
        if let Some(fencer) = &self.config.fencer {
            commit.fence = Some(fencer.fence(&conversation_id));
        }
        if let Err(error) = self.store.commit(commit).await {
            if let StoreError::Fenced(fenced) = &error {
                // Another node owns it now: this copy may be behind what it commits.
                self.live.remove(&*conversation_id);
                if let Some(fencer) = &self.config.fencer {
                    fencer.lost(fenced);
                }
            }
            return Err(error);
        }
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

    /// Whether this node may cache conversation `id`: always, unless partitions have owners
    /// and this node does not hold `id`'s now.
    fn owns(&self, id: &str) -> bool {
        (self.config.fencer.as_ref()).is_none_or(|fencer| fencer.holds(id))
    }

    fn slot(&self, id: &str) -> Slot {
        if let Some(slot) = self.live.get(id) {
            return slot.clone();
        }
        self.live.entry(Arc::from(id)).or_default().clone()
    }

    /// The conversation's slot with the conversation loaded; a missing conversation leaves
    /// no trace (a message to an unknown conversation never creates one).
    ///
    /// With partition owners, a conversation another node owns is read from the store into
    /// a slot of its own and not cached: nothing here would keep a copy current (its owner
    /// commits, and this node hears of no commits but inbox ones). Work on such a slot
    /// fails fencing at its commit, as any work here on another node's conversation does.
    pub(crate) async fn loaded_slot(&self, id: &str) -> Result<Slot, EngineError> {
        if !self.owns(id) {
            return match self.load(id).await? {
                Some(conversation) => Ok(Arc::new(Mutex::new(Some(conversation)))),
                None => Err(EngineError::UnknownConversation(id.to_owned())),
            };
        }
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
        self.remember_origin(&conversation.started);
        Ok(Some(conversation))
    }

    /// Drops the cached copies of the conversations `evicted` picks (their partitions moved
    /// to another node): read again from the store if this engine works on them again. A
    /// step already running on one finishes with its own copy.
    pub fn evict(&self, evicted: impl Fn(&str) -> bool) {
        self.live.retain(|id, _| !evicted(id));
    }

    /// Remembers where a conversation loaded from the store started (its `started` event's
    /// `trace`), when this engine did not know: after a restart, or on another node. The
    /// work that loaded it (the engine step of a message or a deadline) links to it too,
    /// as the step of a conversation whose origin was known does before loading.
    fn remember_origin(&self, started: &colloquy_protocol::event::Started) {
        if !trace_origins::exporting() {
            return;
        }
        let Some(origin) = (started.trace.as_deref()).and_then(trace_origins::parse_traceparent)
        else {
            return;
        };
        if self.trace_origins.remember(&started.id, origin.clone()) {
            trace_origins::link(&tracing::Span::current(), origin);
        }
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
        Ok(
            Conversation::replay(template, &events).map(|mut conversation| {
                conversation.rule_log = self.rule_log.clone();
                conversation.signer = self.config.message_signer.clone();
                (conversation, events)
            }),
        )
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

#[cfg(test)]
mod tests;
