//! `colloquy templates explore`: a breadth-first model checker over a template's
//! conversations.
//!
//! From every opening the template allows, it tries every input — every performative the
//! template names, from every party (the initiator to each participant and to all), with
//! content from the message schema ([`instance`]), and a clock advance to the next pending
//! deadline — up to a depth, each sequence run for real in a fresh [`Sandbox`] (hooks
//! included). Conversations that end up alike (the same thread and commitment states,
//! variables, status and pending deadlines, relative to the clock, whichever participant
//! is in which) are explored once, so the search is over the template's states, not over
//! every ordering of its messages or naming of its participants. It
//! reports, each with the shortest sequence that shows it, as a test case to paste:
//! - a stuck conversation: active, with no allowed message for anyone and no deadline
//!   pending but the conversation's own;
//! - states, transitions, rules and commitment states that no sequence reaches;
//! - outcome rules whose conditions never hold, so the default decides every outcome;
//! - engine bugs: an internal error, a panic, a hook failure, a broken invariant (a gap in
//!   event versions, a commitment left open after its debtor's thread ended).

pub mod instance;

use std::collections::{HashSet, VecDeque};
use std::fmt::Write as _;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Instant;

use colloquy_core::clock::ManualClock;
use colloquy_core::error::{EngineError, ErrorKind};
use colloquy_core::hooks::HookCaller;
use colloquy_policy::{Catalog, CompiledTemplate};
use colloquy_protocol::conversation::{ConversationStatus, ConversationView};
use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::message::{SendMessage, StartConversation};
use futures_util::FutureExt as _;
use serde_json::{Value, json};

use crate::coverage::{Kind, TemplateCoverage};
use crate::sandbox::Sandbox;
use crate::suite::load::performatives;

/// How far to search.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Conversations with 1 to this many participants (clamped to the template's roles).
    pub participants: usize,
    /// Inputs after the start, at most.
    pub depth: usize,
    /// Sequences run, at most, across all participant counts.
    pub max_states: usize,
}

/// What kind of finding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Active, and nothing anyone may send or any deadline moves it.
    Stuck,
    /// Something of the template no sequence reaches.
    Unreached,
    /// Outcome rules whose conditions never hold.
    DefaultOutcomeOnly,
    /// An engine bug: an internal error, a panic, or a broken invariant.
    EngineBug,
    /// A hook call failed.
    HookFailure,
}

/// One finding, with the shortest sequence that shows it (when one does).
#[derive(Clone, Debug, serde::Serialize)]
pub struct Finding {
    /// What kind.
    pub kind: FindingKind,
    /// What was found.
    pub message: String,
    /// Where in the template, `file:line:col`, when it is about one place.
    pub at: Option<String>,
    /// The sequence as a test case, ready to paste under `cases:`.
    pub case: Option<String>,
}

/// What the search did and found.
#[derive(Debug, serde::Serialize)]
pub struct Exploration {
    /// The template.
    pub template: String,
    /// The participant counts searched.
    pub participant_counts: Vec<usize>,
    /// Sequences run (each a conversation driven from its start).
    pub sequences: usize,
    /// Distinct conversation states reached.
    pub distinct_states: usize,
    /// How long it took.
    pub seconds: f64,
    /// Whether it stopped at `max_states` before exhausting the depth.
    pub stopped_at_limit: bool,
    /// The findings, engine bugs first.
    pub findings: Vec<Finding>,
    /// What the sequences reached.
    #[serde(skip)]
    pub coverage: TemplateCoverage,
}

/// One input after the start.
#[derive(Clone, Debug)]
enum Input {
    Send {
        from: String,
        performative: String,
        to: Vec<String>,
        content: Value,
        /// The reply-by the sender asks for, this far ahead.
        reply_by: Option<u64>,
    },
    /// Moves the clock to the next pending deadline, this far ahead.
    Advance(u64),
}

/// How a conversation starts.
#[derive(Clone, Debug)]
struct Opening {
    participants: Vec<String>,
    parameters: Value,
    message: Option<(String, Value)>,
}

/// A sequence: an opening and the inputs after it.
#[derive(Clone, Debug)]
struct Sequence {
    opening: Arc<Opening>,
    inputs: Vec<Input>,
}

/// The initiator's name in sequences.
const INITIATOR: &str = "alice";
/// Participants' names in sequences, in order; more are numbered.
const PARTICIPANTS: &[&str] = &["bob", "carol", "dave", "erin", "frank"];
/// The reply-by the explorer asks for on messages whose move may arm a deadline only
/// through it (see [`Search::inputs`]).
const ASKED_REPLY_BY_MS: u64 = 60_000;
/// The conversation id of every sequence.
const CONVERSATION: &str = "explored";

/// Searches `template`'s conversations within `limits`; hooks run on `hooks`, which read
/// `clock`.
pub async fn explore(
    template: &Arc<CompiledTemplate>,
    limits: Limits,
    clock: &Arc<ManualClock>,
    hooks: Option<Arc<dyn HookCaller>>,
) -> Exploration {
    let began = Instant::now();
    let most = template
        .max_participants
        .map_or(limits.participants, |max| {
            limits.participants.min(max as usize)
        });
    let least = (template.min_participants as usize).max(1);
    let counts: Vec<usize> = (least..=most.max(least)).collect();
    let mut search = Search {
        template: template.clone(),
        clock: clock.clone(),
        hooks,
        limits,
        sequences: 0,
        seen: HashSet::new(),
        findings: Vec::new(),
        found: HashSet::new(),
        coverage: TemplateCoverage::of(template),
        completions: 0,
    };
    let mut stopped = false;
    for count in &counts {
        if !search.breadth_first(*count).await {
            stopped = true;
            break;
        }
    }
    search.report_unreached();
    let mut findings = search.findings;
    findings.sort_by_key(|finding| match finding.kind {
        FindingKind::EngineBug => 0,
        FindingKind::HookFailure => 1,
        FindingKind::Stuck => 2,
        FindingKind::DefaultOutcomeOnly => 3,
        FindingKind::Unreached => 4,
    });
    Exploration {
        template: template.name.to_string(),
        participant_counts: counts,
        sequences: search.sequences,
        distinct_states: search.seen.len(),
        seconds: began.elapsed().as_secs_f64(),
        stopped_at_limit: stopped,
        findings,
        coverage: search.coverage,
    }
}

/// The search's state.
struct Search {
    template: Arc<CompiledTemplate>,
    clock: Arc<ManualClock>,
    hooks: Option<Arc<dyn HookCaller>>,
    limits: Limits,
    sequences: usize,
    /// Fingerprints of the conversation states reached.
    seen: HashSet<String>,
    findings: Vec<Finding>,
    /// Findings already reported, by kind and message, so each is reported once.
    found: HashSet<String>,
    coverage: TemplateCoverage,
    /// Sequences that completed the conversation.
    completions: usize,
}

/// What running a sequence left.
struct Ran {
    /// `None` when the last input was refused (nothing changed).
    view: Option<ConversationView>,
    /// Whether the last input was a message accepted with no violation.
    allowed: bool,
    /// The next deadline, relative to the clock, that is not the conversation's own.
    next_deadline: Option<u64>,
}

impl Search {
    /// Searches conversations with `count` participants. Returns `false` when it stopped at
    /// the state limit.
    async fn breadth_first(&mut self, count: usize) -> bool {
        let participants: Vec<String> = (0..count)
            .map(|index| {
                PARTICIPANTS
                    .get(index)
                    .map_or_else(|| format!("p{}", index + 1), |name| (*name).to_owned())
            })
            .collect();
        let mut queue: VecDeque<Sequence> = VecDeque::new();
        for opening in self.openings(&participants) {
            let root = Sequence {
                opening: Arc::new(opening),
                inputs: Vec::new(),
            };
            let Some(ran) = self.run(&root).await else {
                continue;
            };
            if let Some(view) = &ran.view
                && self.seen.insert(fingerprint(view, self.clock.as_ref()))
            {
                queue.push_back(root);
            }
        }
        while let Some(node) = queue.pop_front() {
            if node.inputs.len() >= self.limits.depth {
                continue;
            }
            // Replayed once to learn its deadlines and whether it is still active.
            let Some(parent) = self.run(&node).await else {
                continue;
            };
            let Some(view) = parent.view else { continue };
            if view.status != ConversationStatus::Active {
                continue;
            }
            let mut anything_allowed = false;
            for input in self.inputs(&node, &view, parent.next_deadline) {
                if self.sequences >= self.limits.max_states {
                    return false;
                }
                let mut child = node.clone();
                child.inputs.push(input);
                let Some(ran) = self.run(&child).await else {
                    continue;
                };
                anything_allowed |= ran.allowed;
                if let Some(view) = &ran.view
                    && self.seen.insert(fingerprint(view, self.clock.as_ref()))
                {
                    queue.push_back(child);
                }
            }
            if !anything_allowed && parent.next_deadline.is_none() {
                let states: Vec<String> = view
                    .threads
                    .iter()
                    .map(|thread| format!("{} in `{}`", thread.participant, thread.state))
                    .collect();
                self.finding(
                    FindingKind::Stuck,
                    format!(
                        "stuck: active with {}, but no one may send anything and no deadline \
                         but the conversation's is pending",
                        states.join(", ")
                    ),
                    None,
                    Some(&node),
                );
            }
        }
        true
    }

    /// Every way the template lets a conversation with these participants start.
    fn openings(&self, participants: &[String]) -> Vec<Opening> {
        let spec = &self.template.source.spec;
        let parameters = spec.parameters.as_ref().map_or(Value::Null, |parameters| {
            instance::minimal_instance(&parameters.schema)
        });
        let mut openings = vec![Opening {
            participants: participants.to_vec(),
            parameters: parameters.clone(),
            message: None,
        }];
        let initial = spec.thread.states.get(&spec.thread.initial);
        let mut opening_acts: Vec<&str> = initial
            .into_iter()
            .flat_map(|state| &state.transitions)
            .filter(|transition| transition.from == colloquy_protocol::template::Role::Initiator)
            .map(|transition| transition.performative.as_str())
            .collect();
        opening_acts.dedup();
        for performative in opening_acts {
            openings.push(Opening {
                participants: participants.to_vec(),
                parameters: parameters.clone(),
                message: Some((performative.to_owned(), self.content(performative))),
            });
        }
        openings
    }

    /// Every input to try after `node`.
    fn inputs(&self, node: &Sequence, view: &ConversationView, next: Option<u64>) -> Vec<Input> {
        let mut inputs = Vec::new();
        let acts: Vec<String> = performatives(&self.template)
            .into_iter()
            .map(str::to_owned)
            .collect();
        let participants = &node.opening.participants;
        for performative in &acts {
            let content = self.content(performative);
            // Also with a reply-by, when the act leads into a state with a deadline that no
            // default reply-by arms: only the sender's reply-by can.
            let reply_bys: &[Option<u64>] = if self.arms_only_by_request(performative) {
                &[None, Some(ASKED_REPLY_BY_MS)]
            } else {
                &[None]
            };
            for reply_by in reply_bys {
                let mut targets = vec![Vec::new()];
                if participants.len() > 1 {
                    targets.extend(participants.iter().map(|p| vec![p.clone()]));
                }
                for to in targets {
                    inputs.push(Input::Send {
                        from: INITIATOR.to_owned(),
                        performative: performative.clone(),
                        to,
                        content: content.clone(),
                        reply_by: *reply_by,
                    });
                }
                for participant in participants {
                    inputs.push(Input::Send {
                        from: participant.clone(),
                        performative: performative.clone(),
                        to: Vec::new(),
                        content: content.clone(),
                        reply_by: *reply_by,
                    });
                }
            }
        }
        let conversation_deadline = view
            .deadline
            .map(|deadline| deadline.saturating_sub(self.clock_now()));
        if let Some(ahead) = next.or(conversation_deadline) {
            inputs.push(Input::Advance(ahead.max(1)));
        }
        inputs
    }

    /// Whether some transition on `performative` leads into a state with an `on_deadline`
    /// without a default reply-by of its own.
    fn arms_only_by_request(&self, performative: &str) -> bool {
        let states = &self.template.source.spec.thread.states;
        states
            .values()
            .flat_map(|state| &state.transitions)
            .any(|transition| {
                transition.performative == performative
                    && transition
                        .reply_by
                        .as_ref()
                        .is_none_or(|reply_by| reply_by.default_ms.is_none())
                    && states
                        .get(&transition.to)
                        .is_some_and(|to| to.on_deadline.is_some())
            })
    }

    fn clock_now(&self) -> u64 {
        use colloquy_core::clock::Clock as _;
        self.clock.now_ms()
    }

    /// Content for `performative`: from its schema, or none.
    fn content(&self, performative: &str) -> Value {
        self.template
            .source
            .spec
            .messages
            .get(performative)
            .map_or(Value::Null, |spec| instance::minimal_instance(&spec.schema))
    }

    /// Runs `sequence` in a fresh sandbox, records what it reached and what went wrong.
    /// `None` when it could not even start.
    async fn run(&mut self, sequence: &Sequence) -> Option<Ran> {
        self.sequences += 1;
        let sandbox = Sandbox::new(
            Arc::new(Catalog::new([self.template.clone()])),
            self.clock.clone(),
            self.hooks.clone(),
        );
        let outcome = AssertUnwindSafe(drive(&sandbox, &self.template, sequence))
            .catch_unwind()
            .await;
        let calls = sandbox.take_hook_calls();
        for call in calls.iter().filter(|call| call.answer.is_err()) {
            if let Err(failure) = &call.answer {
                self.finding(
                    FindingKind::HookFailure,
                    format!("the hook failed at {}: {failure}", call.event),
                    None,
                    Some(sequence),
                );
            }
        }
        let last = match outcome {
            Ok(last) => last,
            Err(panic) => {
                let text = crate::sandbox::panic_text(&*panic);
                self.finding(
                    FindingKind::EngineBug,
                    format!("the engine panicked: {text}"),
                    None,
                    Some(sequence),
                );
                return None;
            }
        };
        let Driven::Ran { last } = last else {
            return None;
        };
        let refused = match &last {
            Err(error) if is_bug(error) => {
                self.finding(
                    FindingKind::EngineBug,
                    format!("the engine failed ({}): {error}", error.code()),
                    None,
                    Some(sequence),
                );
                return None;
            }
            Err(_) => true,
            Ok(()) => false,
        };
        let events = sandbox.events(CONVERSATION).await.unwrap_or_default();
        let view = sandbox.view(CONVERSATION).await.ok()?;
        self.coverage.add_conversation(&self.template, &events);
        self.coverage.add_rules(&sandbox.rules_fired());
        self.check_invariants(&view, &events, sequence);
        if view.status == ConversationStatus::Completed
            && events
                .last()
                .is_some_and(|event| matches!(event.kind, EventKind::Completed { .. }))
        {
            self.completions += 1;
        }
        // Allowed: a message accepted with no violation recorded against it.
        let last_id = format!("msg-{}", sequence.inputs.len());
        let last_input_violated = events.iter().any(|event| {
            matches!(&event.kind, EventKind::ViolationRecorded(violation)
                if violation.message_id.as_deref() == Some(last_id.as_str()))
        });
        let allowed = !refused
            && matches!(sequence.inputs.last(), Some(Input::Send { .. }))
            && !last_input_violated;
        let next_deadline = next_thread_deadline(&sandbox, &view).await;
        Some(Ran {
            view: (!refused).then_some(view),
            allowed,
            next_deadline,
        })
    }

    /// Event versions without gaps; no commitment left open after its debtor's thread ended.
    fn check_invariants(
        &mut self,
        view: &ConversationView,
        events: &[ConversationEvent],
        sequence: &Sequence,
    ) {
        let gap = events
            .iter()
            .enumerate()
            .find(|(index, event)| event.seq != *index as u64 + 1);
        if let Some((index, event)) = gap {
            self.finding(
                FindingKind::EngineBug,
                format!(
                    "event {} has seq {}: the log has a gap",
                    index + 1,
                    event.seq
                ),
                None,
                Some(sequence),
            );
        } else if view.version != events.len() as u64 {
            self.finding(
                FindingKind::EngineBug,
                format!(
                    "the conversation's version is {} but its log holds {} events",
                    view.version,
                    events.len()
                ),
                None,
                Some(sequence),
            );
        }
        for commitment in &view.commitments {
            if commitment.state.is_terminal() {
                continue;
            }
            // The thread between debtor and creditor: the participant's, whichever owes.
            let thread = view.threads.iter().find(|thread| {
                thread.participant == commitment.debtor || thread.participant == commitment.creditor
            });
            if let Some(thread) = thread.filter(|thread| thread.outcome.is_some()) {
                let thread = thread.state.to_string();
                self.finding(
                    FindingKind::EngineBug,
                    format!(
                        "commitment `{}` is left `{}` though its thread ended in `{thread}`",
                        commitment.name,
                        commitment.state.name()
                    ),
                    None,
                    Some(sequence),
                );
            }
        }
    }

    /// Reports what no sequence reached, and outcome rules whose conditions never held.
    fn report_unreached(&mut self) {
        let file = self
            .template
            .source_path
            .as_ref()
            .map(|path| path.display().to_string())
            .unwrap_or_default();
        let unreached: Vec<(Kind, String, String, Option<String>)> = self
            .coverage
            .items
            .iter()
            .filter(|item| !item.reached)
            .map(|item| {
                let at = item
                    .line
                    .zip(item.column)
                    .map(|(line, column)| format!("{file}:{line}:{column}"));
                (item.kind, item.path.clone(), item.label.clone(), at)
            })
            .collect();
        let conditional: Vec<&String> = unreached
            .iter()
            .filter(|(kind, path, _, _)| {
                *kind == Kind::Rule && path.starts_with("spec.outcome.rules")
            })
            .map(|(_, path, _, _)| path)
            .collect();
        let outcome_rules = &self.template.outcome.rules;
        let conditions = outcome_rules.iter().filter(|rule| rule.0.is_some()).count();
        if self.completions > 0 && conditions > 0 && conditional.len() >= conditions {
            self.finding(
                FindingKind::DefaultOutcomeOnly,
                format!(
                    "no outcome rule's condition held in any of {} completed conversations: \
                     the default decides every outcome",
                    self.completions
                ),
                None,
                None,
            );
        }
        for (kind, _, label, at) in unreached {
            let noun = match kind {
                Kind::State => "state",
                Kind::Transition => "transition",
                Kind::Rule => "rule",
                Kind::CommitmentState => "commitment state",
            };
            self.finding(
                FindingKind::Unreached,
                format!(
                    "no sequence up to depth {} reaches the {noun} {label}",
                    self.limits.depth
                ),
                at,
                None,
            );
        }
    }

    fn finding(
        &mut self,
        kind: FindingKind,
        message: String,
        at: Option<String>,
        sequence: Option<&Sequence>,
    ) {
        if !self.found.insert(format!("{kind:?}{message}")) {
            return;
        }
        let case = sequence.map(|sequence| as_case(&message, sequence));
        self.findings.push(Finding {
            kind,
            message,
            at,
            case,
        });
    }
}

/// How far a sequence got.
enum Driven {
    /// The start was refused.
    NotStarted,
    /// It started; the last input's result.
    Ran { last: Result<(), EngineError> },
}

/// Runs a sequence's start and inputs.
async fn drive(sandbox: &Sandbox, template: &CompiledTemplate, sequence: &Sequence) -> Driven {
    let opening = &sequence.opening;
    let request = StartConversation {
        template: template.name.to_string(),
        participants: opening.participants.clone(),
        parameters: opening.parameters.clone(),
        context: Value::Null,
        conversation_id: Some(CONVERSATION.to_owned()),
        deadline_ms: None,
        message: opening
            .message
            .as_ref()
            .map(|(performative, content)| SendMessage {
                message_id: Some("msg-0".into()),
                performative: performative.clone(),
                to: Vec::new(),
                content: content.clone(),
                in_reply_to: None,
                signature: None,
                reply_by: None,
            }),
    };
    if sandbox.start(INITIATOR, request).await.is_err() {
        return Driven::NotStarted;
    }
    let mut last = Ok(());
    for (index, input) in sequence.inputs.iter().enumerate() {
        last = match input {
            Input::Send {
                from,
                performative,
                to,
                content,
                reply_by,
            } => sandbox
                .send(
                    CONVERSATION,
                    from,
                    SendMessage {
                        message_id: Some(format!("msg-{}", index + 1)),
                        performative: performative.clone(),
                        to: to.clone(),
                        content: content.clone(),
                        in_reply_to: None,
                        signature: None,
                        reply_by: reply_by.map(|ms| sandbox.now().saturating_add(ms)),
                    },
                )
                .await
                .map(drop),
            Input::Advance(ms) => sandbox.advance(CONVERSATION, *ms).await,
        };
    }
    Driven::Ran { last }
}

/// Whether an error is the engine's fault rather than a refusal of the input.
fn is_bug(error: &EngineError) -> bool {
    matches!(error.kind(), ErrorKind::Internal | ErrorKind::Unavailable)
}

/// The next deadline of the conversation, relative to the clock, that is not its own
/// conversation-wide deadline (a thread's reply-by, a commitment's, a retry).
async fn next_thread_deadline(sandbox: &Sandbox, view: &ConversationView) -> Option<u64> {
    if view.status != ConversationStatus::Active {
        return None;
    }
    let next = sandbox.engine().next_wake(CONVERSATION).await.ok()??;
    if Some(next) == view.deadline {
        return None;
    }
    Some(next.saturating_sub(sandbox.now()))
}

/// What makes two conversations behave alike from here on: status, outcome, thread and
/// commitment states, variables, and pending deadlines relative to the clock.
///
/// Participants are interchangeable (templates name roles, not agents), so each
/// participant's part — its thread and the commitments it owes or is owed — is written
/// without its name, and the parts are sorted: conversations that differ only by which
/// participant did what are one state (symmetry reduction). Variables keep any names they
/// hold, so a template that remembers who did what keeps those states apart.
fn fingerprint(view: &ConversationView, clock: &ManualClock) -> String {
    use colloquy_core::clock::Clock as _;
    let now = clock.now_ms();
    let relative = |deadline: Option<u64>| deadline.map(|at| at.saturating_sub(now));
    let mut parts: Vec<String> = view
        .threads
        .iter()
        .map(|thread| {
            let mut commitments: Vec<String> = view
                .commitments
                .iter()
                .filter(|c| c.debtor == thread.participant || c.creditor == thread.participant)
                .map(|c| {
                    json!([
                        c.name,
                        c.debtor == thread.participant,
                        c.state,
                        relative(c.deadline)
                    ])
                    .to_string()
                })
                .collect();
            commitments.sort();
            json!([thread.state, relative(thread.deadline), commitments]).to_string()
        })
        .collect();
    parts.sort();
    json!([
        view.status,
        view.outcome,
        parts,
        view.vars,
        relative(view.deadline)
    ])
    .to_string()
}

/// A sequence as a test case, to paste under a test file's `cases:`.
fn as_case(name: &str, sequence: &Sequence) -> String {
    let opening = &sequence.opening;
    let mut case = String::new();
    let name = name.replace('"', "'");
    let _ = writeln!(case, "- name: \"explore: {name}\"");
    let _ = writeln!(case, "  start:");
    let _ = writeln!(case, "    initiator: {INITIATOR}");
    let _ = writeln!(
        case,
        "    participants: [{}]",
        opening.participants.join(", ")
    );
    if !opening.parameters.is_null() {
        let _ = writeln!(case, "    parameters: {}", opening.parameters);
    }
    if let Some((performative, content)) = &opening.message {
        let _ = writeln!(
            case,
            "    message: {}",
            message(None, performative, &[], content)
        );
    }
    if !sequence.inputs.is_empty() {
        let _ = writeln!(case, "  steps:");
    }
    for input in &sequence.inputs {
        match input {
            Input::Send {
                from,
                performative,
                to,
                content,
                reply_by,
            } => {
                let mut line = message(Some(from), performative, to, content);
                if let Some(ms) = reply_by {
                    line.truncate(line.len() - 2);
                    line.push_str(&format!(", reply_by: {ms}ms }}"));
                }
                let _ = writeln!(case, "    - send: {line}");
            }
            Input::Advance(ms) => {
                let _ = writeln!(case, "    - advance: {ms}ms");
            }
        }
    }
    case
}

/// A message in flow style.
fn message(from: Option<&str>, performative: &str, to: &[String], content: &Value) -> String {
    let mut fields = Vec::new();
    if let Some(from) = from {
        fields.push(format!("from: {from}"));
    }
    fields.push(format!("performative: {performative}"));
    if !to.is_empty() {
        fields.push(format!("to: [{}]", to.join(", ")));
    }
    if !content.is_null() {
        fields.push(format!("content: {content}"));
    }
    format!("{{ {} }}", fields.join(", "))
}

#[cfg(test)]
mod tests;
