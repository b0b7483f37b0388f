//! A conversation's state, rebuilt from (and only changed by) its events.
//!
//! [`Conversation::apply`] is the one mutator: the live engine calls it for each event it
//! emits, and a store reload calls it for each stored event, so both paths reach the same
//! state. Nothing here does I/O.

use std::collections::HashMap;
use std::sync::Arc;

use colloquy_policy::CompiledTemplate;
use colloquy_policy::compiled::StateId;
use colloquy_protocol::conversation::{
    CommitmentState, CommitmentView, ConversationStatus, ConversationView, Outcome, ThreadView,
    Violation,
};
use colloquy_protocol::event::{ConversationEvent, EventKind, Started, ThreadTransition};
use colloquy_protocol::message::{AgentId, Message};
use colloquy_protocol::template::Role;
use serde_json::{Map, Value};

use crate::keyed::Hasher;

/// Live state of one conversation.
#[derive(Debug)]
pub struct Conversation {
    /// The compiled template revision the conversation is pinned to.
    pub template: Arc<CompiledTemplate>,
    /// The facts it started from (id, initiator, participants, parameters, context).
    pub started: Arc<Started>,
    /// Active or completed.
    pub status: ConversationStatus,
    /// Set on completion.
    pub outcome: Option<Outcome>,
    /// One per participant, in `started.participants` order.
    pub threads: Vec<Thread>,
    /// Thread indexes by participant, for conversations with more than
    /// [`INDEXED_FROM`] participants: several lookups per message would otherwise each scan
    /// a thousand names.
    #[allow(
        clippy::box_collection,
        reason = "one pointer in every conversation instead of a map's 32 bytes; most have none"
    )]
    thread_by_participant: Option<Box<HashMap<AgentId, usize, Hasher>>>,
    /// Variables owned by hooks and declarative actions.
    pub vars: Map<String, Value>,
    /// Conversation deadline.
    pub deadline: Option<u64>,
    /// Commitments, in creation order.
    pub commitments: Vec<Commitment>,
    /// Recorded violations, in order.
    pub violations: Vec<Violation>,
    /// Agents added by routing or escalation: they may read the conversation.
    pub observers: Vec<AgentId>,
    /// Accepted message ids and the seq of their `message_accepted` event (idempotency).
    pub accepted: AcceptedIds,
    /// Scheduled `on_timeout` retries.
    pub retry: RetryState,
    /// How many `message_refused` events the log holds: recording stops at
    /// [`crate::dispatch::MAX_RECORDED_REFUSALS`].
    pub refusals: u32,
    /// When it completed.
    pub completed_at: Option<u64>,
    /// Number of events applied; the store's optimistic-concurrency version.
    pub version: u64,
    /// Where the log's hash chain stands: the next event's `prev`.
    pub chain: crate::chain::ChainTail,
    /// The engine's key for the messages it sends in this conversation
    /// ([`crate::EngineConfig::message_signer`]).
    pub signer: Option<Arc<colloquy_trust::jws::Signer>>,
    /// Where the rules that fire are recorded, when the engine keeps a rule log (template
    /// tests and the explorer measure coverage with it); `None` in a server.
    pub rule_log: Option<Arc<crate::rules::RuleLog>>,
}

/// One initiator ↔ participant thread.
#[derive(Clone, Debug, PartialEq)]
pub struct Thread {
    /// The participant.
    pub participant: AgentId,
    /// Current state.
    pub state: StateId,
    /// Current reply-by deadline.
    pub deadline: Option<u64>,
}

/// A commitment's live state.
#[derive(Clone, Debug, PartialEq)]
pub struct Commitment {
    /// `<conversation id>/<n>`.
    pub id: Arc<str>,
    /// Index of its rule in the template's `commitments`.
    pub rule: usize,
    /// Index of its thread.
    pub thread: usize,
    /// Where it stands.
    pub state: CommitmentState,
    /// When it becomes violated, while armed.
    pub deadline: Option<u64>,
    /// The message that created it.
    pub created_by: Arc<str>,
}

/// `on_timeout` retry bookkeeping.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RetryState {
    /// When the next retry runs.
    pub next_at: Option<u64>,
    /// How many retries have run.
    pub attempts: u32,
}

impl Conversation {
    /// A conversation in its initial state: every thread at the machine's initial state.
    pub fn new(template: Arc<CompiledTemplate>, started: Arc<Started>) -> Conversation {
        let initial = template.machine.initial;
        let threads = started
            .participants
            .iter()
            .map(|participant| Thread {
                participant: participant.clone(),
                state: initial,
                deadline: None,
            })
            .collect();
        let thread_by_participant = (started.participants.len() > INDEXED_FROM).then(|| {
            let mut index =
                HashMap::with_capacity_and_hasher(started.participants.len(), Hasher::default());
            for (position, participant) in started.participants.iter().enumerate() {
                // The first thread of a name wins, as the scan below finds it.
                index.entry(participant.clone()).or_insert(position);
            }
            Box::new(index)
        });
        Conversation {
            deadline: started.deadline,
            template,
            started,
            status: ConversationStatus::Active,
            outcome: None,
            threads,
            thread_by_participant,
            vars: Map::new(),
            commitments: Vec::new(),
            violations: Vec::new(),
            observers: Vec::new(),
            accepted: AcceptedIds::default(),
            retry: RetryState::default(),
            refusals: 0,
            completed_at: None,
            version: 0,
            chain: crate::chain::ChainTail::Empty,
            signer: None,
            rule_log: None,
        }
    }

    /// Rebuilds a conversation from its log. The first event must be `started`.
    pub fn replay(
        template: Arc<CompiledTemplate>,
        events: &[ConversationEvent],
    ) -> Option<Conversation> {
        let (first, rest) = events.split_first()?;
        let EventKind::Started(started) = &first.kind else {
            return None;
        };
        let mut conversation = Conversation::new(template, started.clone());
        conversation.version = first.seq;
        conversation.chain.follow(first);
        for event in rest {
            conversation.apply(event);
        }
        Some(conversation)
    }

    /// The conversation id.
    pub fn id(&self) -> &Arc<str> {
        &self.started.id
    }

    /// The initiator.
    pub fn initiator(&self) -> &AgentId {
        &self.started.initiator
    }

    /// The template's `limits.max_messages`, when the conversation has recorded that many
    /// messages: it takes no more.
    pub fn at_message_limit(&self) -> Option<u32> {
        self.template
            .max_messages
            .filter(|&limit| self.accepted.len() >= limit as usize)
    }

    /// Whether the conversation has ended.
    pub fn is_completed(&self) -> bool {
        self.status == ConversationStatus::Completed
    }

    /// The role `agent` plays, if it is a party.
    pub fn role_of(&self, agent: &str) -> Option<Role> {
        if &*self.started.initiator == agent {
            Some(Role::Initiator)
        } else if self.thread_index(agent).is_some() {
            Some(Role::Participant)
        } else {
            None
        }
    }

    /// Whether `agent` may read the conversation: a party or an observer.
    pub fn can_read(&self, agent: &str) -> bool {
        self.role_of(agent).is_some() || self.observers.iter().any(|observer| &**observer == agent)
    }

    /// The index of `participant`'s thread.
    pub fn thread_index(&self, participant: &str) -> Option<usize> {
        match &self.thread_by_participant {
            Some(index) => index.get(participant).copied(),
            None => self
                .threads
                .iter()
                .position(|thread| &*thread.participant == participant),
        }
    }

    /// Whether a thread's state is terminal.
    pub fn thread_outcome(&self, thread: &Thread) -> Option<Outcome> {
        self.template.machine.state(thread.state).terminal
    }

    /// The agent playing `role` in thread `thread`.
    pub fn party(&self, role: Role, thread: usize) -> &AgentId {
        match role {
            Role::Initiator => &self.started.initiator,
            Role::Participant => &self.threads[thread].participant,
        }
    }

    /// The seq of the `message_accepted` event of message `id`, if it was accepted.
    pub fn accepted_seq(&self, id: &str) -> Option<u64> {
        self.accepted.get(id)
    }

    /// Applies one event. Events come from this engine or from the store, so they refer to
    /// threads, states and commitments that exist; anything else is ignored rather than
    /// trusted.
    pub fn apply(&mut self, event: &ConversationEvent) {
        self.version = event.seq;
        self.chain.follow(event);
        match &event.kind {
            EventKind::Started(_) => {}
            EventKind::MessageAccepted {
                message,
                transitions,
            } => {
                self.accepted.insert(message.id.clone(), event.seq);
                for receiver in &message.receivers {
                    if self.role_of(receiver).is_none()
                        && &**receiver != colloquy_protocol::message::ENGINE_PARTY
                        && !self.observers.contains(receiver)
                    {
                        push_compact(&mut self.observers, receiver.clone());
                    }
                }
                for transition in transitions {
                    self.apply_transition(transition);
                }
            }
            // Refused, so never delivered and nothing moved: only counted, for the cap.
            EventKind::MessageRefused(_) => self.refusals = self.refusals.saturating_add(1),
            EventKind::ThreadExpired(transition) => self.apply_transition(transition),
            EventKind::ThreadDeadlineSet {
                participant,
                deadline,
            } => {
                if let Some(index) = self.thread_index(participant) {
                    self.threads[index].deadline = *deadline;
                }
            }
            EventKind::ViolationRecorded(violation) => {
                push_compact(&mut self.violations, (**violation).clone());
            }
            EventKind::CommitmentCreated(view) => {
                let rule = self
                    .template
                    .commitments
                    .iter()
                    .position(|rule| rule.name == view.name);
                let thread = self
                    .thread_index(&view.debtor)
                    .or_else(|| self.thread_index(&view.creditor));
                if let (Some(rule), Some(thread)) = (rule, thread) {
                    push_compact(
                        &mut self.commitments,
                        Commitment {
                            id: view.id.clone(),
                            rule,
                            thread,
                            state: view.state,
                            deadline: view.deadline,
                            created_by: view.created_by.clone(),
                        },
                    );
                }
            }
            EventKind::CommitmentMoved {
                id, to, deadline, ..
            } => {
                if let Some(commitment) = self.commitments.iter_mut().find(|c| c.id == *id) {
                    commitment.state = *to;
                    commitment.deadline = *deadline;
                }
            }
            EventKind::VarsMerged { vars } => {
                for (key, value) in vars {
                    self.vars.insert(key.clone(), value.clone());
                }
            }
            EventKind::DeadlineSet { deadline } => self.deadline = *deadline,
            EventKind::RetryScheduled { at, .. } => self.retry.next_at = Some(*at),
            EventKind::RetryFired { attempt } => {
                self.retry.next_at = None;
                self.retry.attempts = *attempt;
            }
            EventKind::Escalated { to, .. } => {
                if !self.observers.contains(to) {
                    push_compact(&mut self.observers, to.clone());
                }
            }
            EventKind::Completed { outcome, .. } => {
                self.status = ConversationStatus::Completed;
                self.outcome = Some(*outcome);
                self.completed_at = Some(event.at);
            }
        }
    }

    fn apply_transition(&mut self, transition: &ThreadTransition) {
        let Some(index) = self.thread_index(&transition.participant) else {
            return;
        };
        let Some(state) = self.template.machine.id_of(&transition.to) else {
            return;
        };
        let thread = &mut self.threads[index];
        thread.state = state;
        thread.deadline = transition.deadline;
    }

    /// When the scheduler next needs to look at this conversation: the earliest pending
    /// deadline or retry, or, once completed, the end of its retention window.
    pub fn next_wake(&self, retention_ms: u64) -> Option<u64> {
        if let Some(completed_at) = self.completed_at {
            return Some(completed_at.saturating_add(retention_ms));
        }
        let threads = self
            .threads
            .iter()
            .filter(|thread| self.thread_outcome(thread).is_none())
            .filter_map(|thread| thread.deadline);
        let commitments = self
            .commitments
            .iter()
            .filter(|commitment| !commitment.state.is_terminal())
            .filter_map(|commitment| commitment.deadline);
        self.deadline
            .into_iter()
            .chain(threads)
            .chain(commitments)
            .chain(self.retry.next_at)
            .min()
    }

    /// The thread as the API shows it.
    pub fn thread_view(&self, thread: &Thread) -> ThreadView {
        ThreadView {
            participant: thread.participant.clone(),
            state: self.template.machine.state(thread.state).name.clone(),
            outcome: self.thread_outcome(thread),
            deadline: thread.deadline,
        }
    }

    /// Every thread as the API shows it.
    pub fn thread_views(&self) -> Vec<ThreadView> {
        self.threads
            .iter()
            .map(|thread| self.thread_view(thread))
            .collect()
    }

    /// Views of the threads of `agents` that are participants, in thread order.
    pub fn thread_views_of<'a>(
        &self,
        agents: impl IntoIterator<Item = &'a str>,
    ) -> Vec<ThreadView> {
        let mut indexes: Vec<usize> = agents
            .into_iter()
            .filter_map(|agent| self.thread_index(agent))
            .collect();
        indexes.sort_unstable();
        indexes.dedup();
        indexes
            .into_iter()
            .map(|index| self.thread_view(&self.threads[index]))
            .collect()
    }

    /// A commitment as both parties see it.
    pub fn commitment_view(&self, commitment: &Commitment) -> CommitmentView {
        let rule = &self.template.commitments[commitment.rule];
        CommitmentView {
            id: commitment.id.clone(),
            conversation_id: self.started.id.clone(),
            name: rule.name.clone(),
            debtor: self.party(rule.debtor, commitment.thread).clone(),
            creditor: self.party(rule.creditor, commitment.thread).clone(),
            state: commitment.state,
            deadline: commitment.deadline,
            created_by: commitment.created_by.clone(),
        }
    }

    /// The commitments `agent` owes or is owed, as both parties see them.
    pub fn commitments_involving<'a>(
        &'a self,
        agent: &'a str,
    ) -> impl Iterator<Item = CommitmentView> + 'a {
        self.commitments
            .iter()
            .map(|c| self.commitment_view(c))
            .filter(move |view| &*view.debtor == agent || &*view.creditor == agent)
    }

    /// The whole conversation as the API shows it; `messages` come from the event log.
    pub fn view(&self, messages: Vec<Message>) -> ConversationView {
        ConversationView {
            id: self.started.id.clone(),
            template: self.started.template.clone(),
            revision: self.started.revision.clone(),
            initiator: self.started.initiator.clone(),
            participants: self.started.participants.clone(),
            status: self.status,
            outcome: self.outcome,
            threads: self.thread_views(),
            vars: Value::Object(self.vars.clone()),
            parameters: self.started.parameters.clone(),
            context: self.started.context.clone(),
            deadline: self.deadline,
            messages,
            commitments: self
                .commitments
                .iter()
                .map(|c| self.commitment_view(c))
                .collect(),
            violations: self.violations.clone(),
            version: self.version,
        }
    }
}

/// Ids of accepted messages with the seq of their `message_accepted` event: a short list
/// while the conversation is short (most hold a handful of messages), a hash map past
/// [`INDEXED_FROM`] ids, so that a long-running conversation does not compare every id it
/// ever accepted for each new message (40 000 messages into one conversation, that scan had
/// become most of a message's cost).
#[derive(Clone, Debug, PartialEq)]
pub enum AcceptedIds {
    /// Up to [`INDEXED_FROM`] ids, in acceptance order.
    Few(Vec<(Arc<str>, u64)>),
    /// More.
    Many(HashMap<Arc<str>, u64, Hasher>),
}

/// How many accepted ids (or participants) a conversation lists before it indexes them.
pub const INDEXED_FROM: usize = 32;

impl Default for AcceptedIds {
    fn default() -> AcceptedIds {
        AcceptedIds::Few(Vec::new())
    }
}

impl AcceptedIds {
    /// The seq of message `id`'s acceptance, if it was accepted.
    pub fn get(&self, id: &str) -> Option<u64> {
        match self {
            AcceptedIds::Few(list) => list
                .iter()
                .rev()
                .find(|(known, _)| &**known == id)
                .map(|(_, seq)| *seq),
            AcceptedIds::Many(index) => index.get(id).copied(),
        }
    }

    /// How many messages were accepted.
    pub fn len(&self) -> usize {
        match self {
            AcceptedIds::Few(list) => list.len(),
            AcceptedIds::Many(index) => index.len(),
        }
    }

    /// Whether none was.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records message `id` as accepted at `seq`.
    pub fn insert(&mut self, id: Arc<str>, seq: u64) {
        match self {
            AcceptedIds::Few(list) if list.len() < INDEXED_FROM => push_compact(list, (id, seq)),
            AcceptedIds::Few(list) => {
                let mut index: HashMap<Arc<str>, u64, Hasher> = list.drain(..).collect();
                index.insert(id, seq);
                *self = AcceptedIds::Many(index);
            }
            AcceptedIds::Many(index) => {
                index.insert(id, seq);
            }
        }
    }
}

/// Grows small vectors one slot at a time. Most conversations hold one or two commitments
/// and a handful of messages; the default growth (to 4, then doubling) would reserve room
/// that a million idle conversations pay for. Past 8 elements, growth is amortized again.
fn push_compact<T>(vec: &mut Vec<T>, item: T) {
    if vec.len() == vec.capacity() && vec.len() < 8 {
        vec.reserve_exact(1);
    }
    vec.push(item);
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use colloquy_policy::TemplateCompiler;
    use colloquy_protocol::message::{SendMessage, StartConversation};
    use serde_json::json;

    use super::*;
    use crate::dispatch;
    use crate::step::Step;

    #[test]
    fn accepted_ids_are_found_before_and_after_they_are_indexed() {
        let mut accepted = AcceptedIds::default();
        for n in 0..100u64 {
            accepted.insert(Arc::from(format!("m{n}")), n + 2);
            assert_eq!(accepted.get(&format!("m{n}")), Some(n + 2));
            assert_eq!(accepted.get("m0"), Some(2));
            assert_eq!(accepted.get("unknown"), None);
        }
        assert!(matches!(&accepted, AcceptedIds::Many(index) if index.len() == 100));
    }

    fn builtin(file: &str) -> Arc<CompiledTemplate> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../templates")
            .join(file);
        match TemplateCompiler::new().compile_file(&path) {
            Ok(template) => Arc::new(template),
            Err(diagnostics) => panic!("{diagnostics}"),
        }
    }

    /// Runs one unit of work on `live` and appends its events to `log`.
    fn step(
        live: &mut Conversation,
        log: &mut Vec<ConversationEvent>,
        now: u64,
        work: impl FnOnce(&mut Step<'_>),
    ) {
        let mut step = Step::new(live, now);
        work(&mut step);
        log.extend(step.events().iter().cloned());
    }

    fn send(step: &mut Step<'_>, sender: &str, message: SendMessage, id: &str) {
        if let Err(error) = dispatch::on_message(step, sender, &message, Arc::from(id)) {
            panic!("{sender} {}: {error}", message.performative);
        }
    }

    #[test]
    fn threads_are_found_by_participant_with_few_or_many_participants() {
        let template = builtin("fipa-contract-net.yaml");
        for count in [3, INDEXED_FROM + 1, 1000] {
            let participants: Vec<String> = (0..count).map(|n| format!("p{n}")).collect();
            let request = StartConversation {
                template: "fipa-contract-net".to_owned(),
                participants: participants.clone(),
                ..StartConversation::default()
            };
            let started = dispatch::prepare_start(&template, Arc::from("c1"), "m", &request, 1_000)
                .expect("start");
            let conversation = Conversation::new(template.clone(), Arc::new(started));
            assert_eq!(
                conversation.thread_by_participant.is_some(),
                count > INDEXED_FROM
            );
            for (position, participant) in participants.iter().enumerate() {
                assert_eq!(conversation.thread_index(participant), Some(position));
                assert_eq!(conversation.role_of(participant), Some(Role::Participant));
            }
            assert_eq!(conversation.thread_index("m"), None);
            assert_eq!(conversation.role_of("m"), Some(Role::Initiator));
            assert_eq!(conversation.role_of("stranger"), None);
        }
    }

    #[test]
    fn replaying_the_log_rebuilds_the_live_state() {
        let template = builtin("fipa-contract-net.yaml");
        let request = StartConversation {
            template: "fipa-contract-net".to_owned(),
            participants: vec!["p1".into(), "p2".into(), "p3".into()],
            ..StartConversation::default()
        };
        let started = dispatch::prepare_start(&template, Arc::from("c1"), "m", &request, 1_000)
            .expect("start");
        let mut live = Conversation::new(template.clone(), Arc::new(started));
        let mut log = Vec::new();
        step(&mut live, &mut log, 1_000, |s| {
            dispatch::on_start(s).expect("on_start")
        });
        step(&mut live, &mut log, 1_000, |s| {
            send(
                s,
                "m",
                SendMessage::new("cfp", json!({"task": "x"})).reply_by(5_000),
                "m1",
            );
        });
        step(&mut live, &mut log, 2_000, |s| {
            send(
                s,
                "p1",
                SendMessage::new("propose", json!({"price": 3})),
                "p1-1",
            );
            send(s, "p2", SendMessage::new("refuse", json!({})), "p2-1");
        });
        // p3 stays silent past the cfp's reply-by; its late proposal is answered.
        step(&mut live, &mut log, 6_000, dispatch::fire_due);
        step(&mut live, &mut log, 6_500, |s| {
            send(
                s,
                "p3",
                SendMessage::new("propose", json!({"price": 1})),
                "p3-1",
            );
            send(
                s,
                "m",
                SendMessage::new("accept-proposal", json!({})).to(["p1"]),
                "m2",
            );
        });

        assert_eq!(live.version, log.len() as u64);
        let replayed = Conversation::replay(template, &log).expect("replay");
        assert_eq!(replayed.version, live.version);
        assert_eq!(replayed.thread_views(), live.thread_views());
        assert_eq!(replayed.commitments, live.commitments);
        assert_eq!(replayed.violations, live.violations);
        assert_eq!(replayed.accepted, live.accepted);
        assert_eq!(replayed.status, live.status);
        assert_eq!(replayed.deadline, live.deadline);
        let states: Vec<_> = live
            .thread_views()
            .iter()
            .map(|t| t.state.to_string())
            .collect();
        assert_eq!(states, ["contracted", "refused", "no_reply"]);
        assert_eq!(live.commitments[0].state, CommitmentState::Active);
        assert_eq!(live.violations.len(), 1, "the late proposal is flagged");
    }

    #[test]
    fn small_vectors_grow_one_slot_at_a_time_then_amortized() {
        let mut vec: Vec<u64> = Vec::new();
        for n in 1..=8 {
            push_compact(&mut vec, n);
            assert_eq!(vec.capacity(), n as usize);
        }
        push_compact(&mut vec, 9);
        assert!(vec.capacity() >= 16, "amortized growth past 8 elements");
    }
}
