//! Replaying a recorded conversation against a template revision: would it have ended the
//! same way? The groundwork of `colloquy templates replay` (issue 39): this module re-drives
//! one conversation's log; reading logs from a store and the command are not built yet.
//!
//! What is re-driven is what the parties did: the start (its participants, parameters,
//! context and deadline as recorded) and every message of a real party, each at its recorded
//! time, with the clock advanced to it first so the candidate's own deadlines fire as it
//! passes them. Recorded expiries are never injected, and messages the engine sent itself
//! (automatic replies, a hook's) are outputs to compare, not inputs.
//!
//! Before each input, and once after the last, the two logs are compared as digests — the
//! threads' states, status and outcome, commitments, violations, variables and the engine's
//! own messages — so the first divergence is named at the input it precedes. A replay
//! against the conversation's own revision must find none: that is the determinism check (a
//! hook reading the wall clock or randomness shows up there).

use std::sync::Arc;

use colloquy_core::clock::ManualClock;
use colloquy_core::hooks::HookCaller;
use colloquy_policy::{Catalog, CompiledTemplate};
use colloquy_protocol::event::{ConversationEvent, EventKind, Refusal, Started};
use colloquy_protocol::message::{ENGINE_PARTY, Message, SendMessage, StartConversation};
use serde_json::{Map, Value, json};

use crate::sandbox::Sandbox;
use crate::suite::compare::{Difference, compare};

/// How a replay went.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// The candidate did what the recording did, input for input.
    Same,
    /// It did not; the first divergence.
    Diverged(Divergence),
}

/// The first point where the candidate's conversation differs from the recorded one.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Divergence {
    /// Which input it showed at (0: the start; the last input + 1: after the last).
    pub step: usize,
    /// What that input is, e.g. `inform from bob at 1767225780000`.
    pub input: String,
    /// What differs.
    pub kind: DivergenceKind,
    /// How: paths into the digest, the recorded value as `expected`, the candidate's as `got`.
    pub differences: Vec<Difference>,
}

/// What kind of divergence.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DivergenceKind {
    /// The candidate refused an input the recording accepted (with the refusal's code).
    Refused(String),
    /// The candidate accepted a message the recording refused (with the recorded code).
    Accepted(String),
    /// A thread's state.
    Thread,
    /// The status or the outcome.
    Outcome,
    /// A violation recorded on one side only.
    Violation,
    /// A commitment.
    Commitment,
    /// Variables or the engine's own messages: an action.
    Action,
    /// A hook call failed in the replay.
    HookFailure(String),
}

impl DivergenceKind {
    /// Its name in reports and totals: `refused`, `accepted`, `thread`, `outcome`, `violation`,
    /// `commitment`, `action`, `hook_failure`.
    pub fn name(&self) -> &'static str {
        match self {
            DivergenceKind::Refused(_) => "refused",
            DivergenceKind::Accepted(_) => "accepted",
            DivergenceKind::Thread => "thread",
            DivergenceKind::Outcome => "outcome",
            DivergenceKind::Violation => "violation",
            DivergenceKind::Commitment => "commitment",
            DivergenceKind::Action => "action",
            DivergenceKind::HookFailure(_) => "hook_failure",
        }
    }
}

/// How many inputs a replay of `log` re-drives: its real parties' messages, the opening one
/// included.
pub fn recorded_inputs(log: &[ConversationEvent]) -> usize {
    match log.first().map(|event| &event.kind) {
        Some(EventKind::Started(started)) => inputs(log, started).len(),
        _ => 0,
    }
}

/// What replaying many recorded conversations found: the report of `colloquy templates
/// replay --format json` and of `POST /v1/templates/{name}/replay`.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ReplayReport {
    /// Whose conversations.
    pub template: String,
    /// The candidate they were replayed against.
    pub candidate: CandidateRef,
    /// Conversations replayed.
    pub conversations: usize,
    /// Of them, the same input for input.
    pub same: usize,
    /// Of them, diverged.
    pub diverged: usize,
    /// Divergences by [`DivergenceKind::name`].
    pub by_kind: std::collections::BTreeMap<String, usize>,
    /// Real parties' messages re-driven.
    pub inputs_replayed: usize,
    /// How long it took.
    pub seconds: f64,
    /// Each divergence, with its conversation.
    pub divergences: Vec<ReplayedDivergence>,
    /// Why nothing was replayed, when nothing was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A candidate's name and revision.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct CandidateRef {
    /// `metadata.name`.
    pub name: String,
    /// Its revision.
    pub revision: String,
}

/// One conversation's divergence in a [`ReplayReport`].
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ReplayedDivergence {
    /// The conversation.
    pub conversation_id: String,
    /// Where and how it diverged first.
    pub divergence: Divergence,
}

impl ReplayReport {
    /// An empty report of `template`'s conversations against `candidate`.
    pub fn new(template: &str, candidate: &CompiledTemplate) -> ReplayReport {
        ReplayReport {
            template: template.to_owned(),
            candidate: CandidateRef {
                name: candidate.name.to_string(),
                revision: candidate.revision.to_string(),
            },
            conversations: 0,
            same: 0,
            diverged: 0,
            by_kind: std::collections::BTreeMap::new(),
            inputs_replayed: 0,
            seconds: 0.0,
            divergences: Vec::new(),
            note: None,
        }
    }

    /// Counts one conversation's replay.
    pub fn add(&mut self, conversation_id: &str, log: &[ConversationEvent], verdict: Verdict) {
        self.conversations += 1;
        self.inputs_replayed += recorded_inputs(log);
        match verdict {
            Verdict::Same => self.same += 1,
            Verdict::Diverged(divergence) => {
                self.diverged += 1;
                *self
                    .by_kind
                    .entry(divergence.kind.name().to_owned())
                    .or_insert(0) += 1;
                self.divergences.push(ReplayedDivergence {
                    conversation_id: conversation_id.to_owned(),
                    divergence,
                });
            }
        }
    }

    /// When nothing was replayed: says why it may be (retention removed the logs).
    pub fn note_if_empty(&mut self, store: &str, since: u64) {
        if self.conversations == 0 {
            self.note = Some(format!(
                "no conversations of `{}` in {store}{}: completed conversations are removed \
                 with their logs after the server's --retention (5 minutes by default); serve \
                 with --retention 7d to replay last week's",
                self.template,
                if since > 0 {
                    format!(" since {since}")
                } else {
                    String::new()
                },
            ));
        }
    }
}

/// Why a log cannot be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The log does not begin with `started`.
    #[error("the log does not begin with a `started` event")]
    NoStart,
}

/// Replays `log` against `candidate` in a fresh sandbox on `clock`, hooks on `hooks`.
pub async fn replay(
    log: &[ConversationEvent],
    candidate: &Arc<CompiledTemplate>,
    clock: &Arc<ManualClock>,
    hooks: Option<Arc<dyn HookCaller>>,
) -> Result<Verdict, ReplayError> {
    let mut twin = Twin::start(log, candidate, clock, hooks).await?;
    Ok(twin.finish().await)
}

/// A conversation re-driven on a candidate revision as its log grows: [`replay`] hands it
/// a whole recorded log; a shadow twin (`colloquy_server::rollout`) the events of each live
/// commit as they are acknowledged. It stops at its first divergence.
pub struct Twin {
    sandbox: Sandbox,
    clock: Arc<ManualClock>,
    id: String,
    parties: Vec<String>,
    /// The live (recorded) log so far.
    recorded: Vec<ConversationEvent>,
    /// The real parties' messages re-driven after the start (step 0) so far.
    steps: usize,
    /// The twin's own time: the clock may be shared by other twins in between.
    now: u64,
    divergence: Option<Divergence>,
}

impl Twin {
    /// Starts the twin from the first events of a log (`started`, and with it the opening
    /// message when the initiator sent one), then follows the rest of `first`.
    pub async fn start(
        first: &[ConversationEvent],
        candidate: &Arc<CompiledTemplate>,
        clock: &Arc<ManualClock>,
        hooks: Option<Arc<dyn HookCaller>>,
    ) -> Result<Twin, ReplayError> {
        let Some(EventKind::Started(started)) = first.first().map(|event| &event.kind) else {
            return Err(ReplayError::NoStart);
        };
        let started_at = first[0].at;
        let opening = inputs(first, started)
            .into_iter()
            .next()
            .filter(|input| input.is_opening);
        let sandbox = Sandbox::new(
            Arc::new(Catalog::new([candidate.clone()])),
            clock.clone(),
            hooks,
        );
        clock.set(started_at);
        let id = started.id.to_string();
        let parties: Vec<String> = std::iter::once(&started.initiator)
            .chain(started.participants.iter())
            .map(|party| party.to_string())
            .collect();
        let party_names: Vec<&str> = parties.iter().map(String::as_str).collect();
        let request = StartConversation {
            template: candidate.name.to_string(),
            participants: started.participants.iter().map(|p| p.to_string()).collect(),
            parameters: started.parameters.clone(),
            context: started.context.clone(),
            conversation_id: Some(id.clone()),
            deadline_ms: started.deadline.map(|at| at.saturating_sub(started_at)),
            message: opening
                .as_ref()
                .map(|input| resend(&input.message, &party_names)),
        };
        let mut twin = Twin {
            sandbox,
            clock: clock.clone(),
            id,
            parties,
            recorded: Vec::new(),
            steps: 0,
            now: started_at,
            divergence: None,
        };
        let opening_seq = opening.as_ref().map(|input| input.seq);
        if let Err(error) = twin.sandbox.start(&started.initiator, request).await {
            twin.divergence = Some(Divergence {
                step: 0,
                input: describe_start(started, opening.as_ref().map(|input| &*input.message)),
                kind: DivergenceKind::Refused(error.code().to_owned()),
                differences: vec![refusal(&error)],
            });
        }
        twin.now = twin.sandbox.now();
        let rest = first
            .iter()
            .position(|event| Some(event.seq) == opening_seq)
            .map_or(1, |at| at + 1);
        twin.recorded.extend_from_slice(&first[..rest]);
        twin.follow(&first[rest..]).await;
        Ok(twin)
    }

    /// Follows the live conversation's next events: each real party's message is re-driven
    /// at its time, after the twin's own deadlines up to then fired and the two logs were
    /// compared.
    pub async fn follow(&mut self, events: &[ConversationEvent]) {
        for event in events {
            if self.divergence.is_none()
                && let EventKind::MessageAccepted { message, .. } = &event.kind
                && &*message.sender != ENGINE_PARTY
            {
                self.steps += 1;
                let input = Input {
                    seq: event.seq,
                    at: event.at,
                    message: message.clone(),
                    is_opening: false,
                };
                self.drive(&input).await;
            } else if self.divergence.is_none()
                && let EventKind::MessageRefused(refusal) = &event.kind
                && redriven(&refusal.code)
            {
                self.steps += 1;
                self.drive_refused(event.at, refusal).await;
            }
            self.recorded.push(event.clone());
        }
    }

    /// One input: the clock to its time, the comparison, then the message itself.
    async fn drive(&mut self, input: &Input) {
        let step = self.steps;
        self.clock.set(self.now);
        // A recorded time before the clock (never, in a well-formed log) is taken as now.
        let _ = self
            .sandbox
            .advance(&self.id, input.at.saturating_sub(self.now))
            .await;
        let recorded: Vec<&ConversationEvent> = self.recorded.iter().collect();
        if let Some(divergence) =
            diverges(&self.sandbox, &self.id, &recorded, step, &describe(input)).await
        {
            self.divergence = Some(divergence);
            return;
        }
        let parties: Vec<&str> = self.parties.iter().map(String::as_str).collect();
        if let Err(error) = self
            .sandbox
            .send(
                &self.id,
                &input.message.sender,
                resend(&input.message, &parties),
            )
            .await
        {
            self.divergence = Some(Divergence {
                step,
                input: describe(input),
                kind: DivergenceKind::Refused(error.code().to_owned()),
                differences: vec![refusal(&error)],
            });
        }
        self.now = self.sandbox.now();
    }

    /// A message the recording refused: the clock to its time, the comparison, then the
    /// message (without its content, which is never recorded): the candidate must refuse
    /// it too.
    async fn drive_refused(&mut self, at: u64, refusal: &Refusal) {
        let step = self.steps;
        let input = format!(
            "{} from {} at {at}, refused ({})",
            refusal.performative, refusal.sender, refusal.code
        );
        self.clock.set(self.now);
        let _ = self
            .sandbox
            .advance(&self.id, at.saturating_sub(self.now))
            .await;
        let recorded: Vec<&ConversationEvent> = self.recorded.iter().collect();
        if let Some(divergence) = diverges(&self.sandbox, &self.id, &recorded, step, &input).await {
            self.divergence = Some(divergence);
            return;
        }
        let message = SendMessage {
            message_id: refusal.message_id.as_ref().map(|id| id.to_string()),
            performative: refusal.performative.clone(),
            to: refusal.to.iter().map(|to| to.to_string()).collect(),
            content: Value::Null,
            in_reply_to: None,
            signature: None,
            reply_by: None,
        };
        if self
            .sandbox
            .send(&self.id, &refusal.sender, message)
            .await
            .is_ok()
        {
            self.divergence = Some(Divergence {
                step,
                input,
                kind: DivergenceKind::Accepted(refusal.code.clone()),
                differences: vec![Difference {
                    path: "accepted".into(),
                    expected: json!({ "code": refusal.code }),
                    got: json!(true),
                    note: Some("the candidate accepted what the recording refused".into()),
                }],
            });
        }
        self.now = self.sandbox.now();
    }

    /// The live conversation is over (or the recording ends): the twin's clock goes to the
    /// last event's time and the two logs are compared a last time.
    pub async fn finish(&mut self) -> Verdict {
        if self.divergence.is_none() {
            let end = self.recorded.last().map_or(self.now, |event| event.at);
            self.clock.set(self.now);
            let _ = self
                .sandbox
                .advance(&self.id, end.saturating_sub(self.now))
                .await;
            self.now = self.sandbox.now();
            let recorded: Vec<&ConversationEvent> = self.recorded.iter().collect();
            self.divergence = diverges(
                &self.sandbox,
                &self.id,
                &recorded,
                self.steps + 1,
                "the end of the recording",
            )
            .await;
        }
        self.verdict()
    }

    /// The first divergence so far, if any.
    pub fn divergence(&self) -> Option<&Divergence> {
        self.divergence.as_ref()
    }

    /// `same` so far, or the first divergence.
    pub fn verdict(&self) -> Verdict {
        match &self.divergence {
            Some(divergence) => Verdict::Diverged(divergence.clone()),
            None => Verdict::Same,
        }
    }

    /// Whether the live conversation has ended (its log holds `completed`).
    pub fn ended(&self) -> bool {
        self.recorded
            .iter()
            .any(|event| matches!(event.kind, EventKind::Completed { .. }))
    }
}

/// Whether a recorded refusal is re-driven: only those its content (never recorded) cannot
/// have decided — a move the protocol does not allow, an unknown performative, a message
/// after the end or past the limit.
fn redriven(code: &str) -> bool {
    matches!(
        code,
        "out_of_protocol" | "unknown_performative" | "conversation_ended" | "message_limit"
    )
}

/// One input: a real party's message.
struct Input {
    seq: u64,
    at: u64,
    message: Arc<Message>,
    /// The start's opening message.
    is_opening: bool,
}

/// The real parties' messages of `log`, in order; the first is the opening when the
/// initiator sent it with the start.
fn inputs(log: &[ConversationEvent], started: &Started) -> Vec<Input> {
    let started_at = log.first().map_or(0, |event| event.at);
    let mut inputs = Vec::new();
    for event in log {
        if let EventKind::MessageAccepted { message, .. } = &event.kind
            && &*message.sender != ENGINE_PARTY
        {
            let is_opening = inputs.is_empty()
                && event.at == started_at
                && message.sender == started.initiator
                && log[1..]
                    .iter()
                    .take_while(|e| e.seq < event.seq)
                    .all(|e| !matches!(e.kind, EventKind::MessageAccepted { .. }));
            inputs.push(Input {
                seq: event.seq,
                at: event.at,
                message: message.clone(),
                is_opening,
            });
        }
    }
    inputs
}

/// The recorded message as it was sent: its receivers, but those routing added (agents
/// outside the conversation), are its `to`.
fn resend(message: &Message, parties: &[&str]) -> SendMessage {
    SendMessage {
        message_id: Some(message.id.to_string()),
        performative: message.performative.name().to_owned(),
        to: message
            .receivers
            .iter()
            .filter(|receiver| parties.contains(&&***receiver))
            .map(|receiver| receiver.to_string())
            .collect(),
        content: message.content.value(),
        in_reply_to: message.in_reply_to.as_ref().map(|id| id.to_string()),
        signature: None,
        reply_by: message.reply_by,
    }
}

/// Compares the candidate's log so far with the recorded one.
async fn diverges(
    sandbox: &Sandbox,
    id: &str,
    recorded: &[&ConversationEvent],
    step: usize,
    input: &str,
) -> Option<Divergence> {
    for call in sandbox.take_hook_calls() {
        if let Err(failure) = call.answer {
            return Some(Divergence {
                step,
                input: input.to_owned(),
                kind: DivergenceKind::HookFailure(call.event.to_owned()),
                differences: vec![Difference {
                    path: "hooks".into(),
                    expected: json!("no failure"),
                    got: json!(failure.to_string()),
                    note: None,
                }],
            });
        }
    }
    let replayed = sandbox.events(id).await.unwrap_or_default();
    let live = digest(recorded.iter().copied());
    let candidate = digest(replayed.iter());
    if live == candidate {
        return None;
    }
    let mut differences = Vec::new();
    compare("", &live, &candidate, &mut differences);
    // What only the candidate has (a thread that moved, a variable set) compares too.
    let mut reverse = Vec::new();
    compare("", &candidate, &live, &mut reverse);
    for difference in reverse {
        if !differences
            .iter()
            .any(|known| known.path == difference.path)
        {
            differences.push(Difference {
                path: difference.path,
                expected: difference.got,
                got: difference.expected,
                note: difference.note,
            });
        }
    }
    // Named by the most telling part that differs: a thread's move explains a commitment's.
    let differs = |part: &str| {
        differences
            .iter()
            .any(|d| d.path.split(['.', '[']).next() == Some(part))
    };
    let kind = if differs("threads") {
        DivergenceKind::Thread
    } else if differs("status") || differs("outcome") {
        DivergenceKind::Outcome
    } else if differs("violations") {
        DivergenceKind::Violation
    } else if differs("commitments") {
        DivergenceKind::Commitment
    } else {
        DivergenceKind::Action
    };
    Some(Divergence {
        step,
        input: input.to_owned(),
        kind,
        differences,
    })
}

/// What a log has done so far, as the replay compares it: the thread states reached (the
/// initial one is the template's, the same on both sides unless a move changes it), status
/// and outcome, commitments in creation order, violations, variables, and the engine's own
/// messages.
fn digest<'a>(events: impl Iterator<Item = &'a ConversationEvent>) -> Value {
    let mut threads = Map::new();
    let mut status = "active";
    let mut outcome = Value::Null;
    let mut commitments: Vec<(String, Value)> = Vec::new();
    let mut violations = Vec::new();
    let mut vars = Map::new();
    let mut engine_messages = Vec::new();
    for event in events {
        match &event.kind {
            EventKind::MessageAccepted {
                message,
                transitions,
            } => {
                for moved in transitions {
                    threads.insert(moved.participant.to_string(), json!(moved.to));
                }
                if &*message.sender == ENGINE_PARTY {
                    engine_messages.push(json!({
                        "performative": message.performative,
                        "to": message.receivers,
                        "content": message.content.value(),
                    }));
                }
            }
            EventKind::ThreadExpired(moved) => {
                threads.insert(moved.participant.to_string(), json!(moved.to));
            }
            EventKind::ViolationRecorded(violation) => violations.push(json!({
                "kind": violation.kind,
                "agent": violation.agent,
                "message_id": violation.message_id,
            })),
            EventKind::CommitmentCreated(commitment) => commitments.push((
                commitment.id.to_string(),
                json!({ "name": commitment.name, "debtor": commitment.debtor, "state": commitment.state }),
            )),
            EventKind::CommitmentMoved { id, to, .. } => {
                if let Some((_, commitment)) = commitments.iter_mut().find(|(known, _)| **known == **id) {
                    commitment["state"] = json!(to);
                }
            }
            EventKind::VarsMerged { vars: merged } => {
                for (key, value) in merged {
                    vars.insert(key.clone(), value.clone());
                }
            }
            EventKind::Completed { outcome: ended, .. } => {
                status = "completed";
                outcome = json!(ended);
            }
            _ => {}
        }
    }
    json!({
        "status": status,
        "outcome": outcome,
        "threads": threads,
        "commitments": commitments.into_iter().map(|(_, c)| c).collect::<Vec<_>>(),
        "violations": violations,
        "vars": vars,
        "engine_messages": engine_messages,
    })
}

fn refusal(error: &colloquy_core::error::EngineError) -> Difference {
    Difference {
        path: "accepted".into(),
        expected: json!(true),
        got: json!({ "code": error.code(), "pointer": error.pointer(), "message": error.to_string() }),
        note: Some("the candidate refused what the recording accepted".into()),
    }
}

fn describe(input: &Input) -> String {
    format!(
        "{} from {} at {} (message {})",
        input.message.performative, input.message.sender, input.at, input.message.id
    )
}

fn describe_start(started: &Started, opening: Option<&Message>) -> String {
    match opening {
        Some(message) => format!(
            "the start by {}, with {}",
            started.initiator, message.performative
        ),
        None => format!("the start by {}", started.initiator),
    }
}

#[cfg(test)]
mod tests;
