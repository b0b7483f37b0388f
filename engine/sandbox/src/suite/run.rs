//! Running a test file's cases: each in a fresh [`Sandbox`], step by step, every
//! expectation compared, every difference placed at its file:line:col.

use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;

use colloquy_core::clock::ManualClock;
use colloquy_core::error::EngineError;
use colloquy_core::hooks::HookCaller;
use colloquy_policy::{Catalog, CompiledTemplate};
use colloquy_protocol::conversation::ConversationView;
use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::message::{SendMessage, StartConversation};
use futures_util::FutureExt as _;
use serde_json::{Map, Value, json};

use super::compare::{Difference, compare};
use super::file::{Case, Expect, Message, Refused, ReplyBy};
use super::load::Suite;
use crate::sandbox::{HookCall, Sandbox};

/// What one case did against one template.
#[derive(Debug)]
pub struct CaseReport {
    /// The test file.
    pub file: PathBuf,
    /// The case's name.
    pub name: String,
    /// The template it ran against.
    pub template: Arc<CompiledTemplate>,
    /// Where the case is written (`file:line:col`).
    pub at: String,
    /// Why it failed; empty when it passed.
    pub failures: Vec<Failure>,
    /// Every event of its conversation, for coverage.
    pub events: Vec<ConversationEvent>,
    /// The rules that fired, for coverage.
    pub rules_fired: HashSet<usize>,
}

impl CaseReport {
    /// Whether every expectation held.
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// One expectation that did not hold.
#[derive(Clone, Debug)]
pub struct Failure {
    /// Where the expectation is written (`file:line:col`).
    pub at: String,
    /// Which step: `start`, `steps[2]`, or `expect` for the case's own.
    pub step: String,
    /// The difference.
    pub difference: Difference,
}

/// Runs every case of `suite` against each of its templates, in order; with `filter`,
/// only the cases whose name or template name contains it. Hooks run on `hooks`, whose
/// `now-ms` reads `clock`.
pub async fn run_suite(
    suite: &Suite,
    clock: &Arc<ManualClock>,
    hooks: Option<Arc<dyn HookCaller>>,
    filter: Option<&str>,
) -> Vec<CaseReport> {
    let mut reports = Vec::new();
    for template in &suite.templates {
        for (index, case) in suite.file.cases.iter().enumerate() {
            if let Some(filter) = filter
                && !case.name.contains(filter)
                && !template.name.contains(filter)
            {
                continue;
            }
            let sandbox = Sandbox::new(
                Arc::new(Catalog::new([template.clone()])),
                clock.clone(),
                hooks.clone(),
            );
            let mut run = CaseRun {
                suite,
                sandbox: &sandbox,
                key: format!("cases[{index}]"),
                conversation_id: case
                    .start
                    .conversation_id
                    .clone()
                    .unwrap_or_else(|| format!("case-{}", index + 1)),
                failures: Vec::new(),
                seen_seq: 0,
                hook_calls: Vec::new(),
            };
            let outcome = AssertUnwindSafe(run.run(case, template))
                .catch_unwind()
                .await;
            if let Err(panic) = outcome {
                let message = crate::sandbox::panic_text(&*panic);
                run.fail(
                    &run.key.clone(),
                    "engine",
                    "",
                    json!("no panic"),
                    json!(message),
                    Some("the engine panicked: a bug in Colloquy, please report it".into()),
                );
            }
            let events = sandbox
                .events(&run.conversation_id)
                .await
                .unwrap_or_default();
            reports.push(CaseReport {
                file: suite.path.clone(),
                name: case.name.clone(),
                template: template.clone(),
                at: suite.position(&run.key),
                failures: run.failures,
                events,
                rules_fired: sandbox.rules_fired(),
            });
        }
    }
    reports
}

/// One case on its way.
struct CaseRun<'a> {
    suite: &'a Suite,
    sandbox: &'a Sandbox,
    /// `cases[N]`, the case's path in the file.
    key: String,
    conversation_id: String,
    failures: Vec<Failure>,
    /// The last event seq a step's expectations have seen.
    seen_seq: u64,
    /// Every hook call so far.
    hook_calls: Vec<HookCall>,
}

impl CaseRun<'_> {
    async fn run(&mut self, case: &Case, template: &CompiledTemplate) {
        let start = &case.start;
        let request = StartConversation {
            template: template.name.to_string(),
            participants: start.participants.clone(),
            parameters: start.parameters.clone(),
            context: start.context.clone(),
            conversation_id: Some(self.conversation_id.clone()),
            deadline_ms: start.deadline_ms,
            message: start
                .message
                .as_ref()
                .map(|message| self.message(message, 0)),
        };
        let key = format!("{}.start", self.key);
        let started = self.sandbox.start(&start.initiator, request).await;
        let accepted = self.check_refusal(&key, "start", started.err(), start.refused.as_ref());
        if !accepted {
            if !case.steps.is_empty() {
                self.fail(
                    &key,
                    "start",
                    "",
                    json!("a conversation"),
                    json!("none"),
                    Some(format!(
                        "the start was refused, so its {} steps did not run",
                        case.steps.len()
                    )),
                );
            }
            return;
        }
        self.check_step(&key, "start", start.expect.as_ref()).await;
        for (index, step) in case.steps.iter().enumerate() {
            let key = format!("{}.steps[{index}]", self.key);
            let name = format!("steps[{index}]");
            if let Some(message) = &step.send {
                let sender = message.from.as_deref().unwrap_or_default();
                let sent = self
                    .sandbox
                    .send(
                        &self.conversation_id,
                        sender,
                        self.message(message, index + 1),
                    )
                    .await;
                self.check_refusal(&key, &name, sent.err(), step.refused.as_ref());
            } else if let Some(advance) = step.advance
                && let Err(error) = self
                    .sandbox
                    .advance(&self.conversation_id, advance.ms)
                    .await
            {
                self.check_refusal(&key, &name, Some(error), None);
            }
            self.check_step(&key, &name, step.expect.as_ref()).await;
        }
        if let Some(expect) = &case.expect {
            let Some(view) = self.view(&format!("{}.expect", self.key), "expect").await else {
                return;
            };
            let events = self
                .sandbox
                .events(&self.conversation_id)
                .await
                .unwrap_or_default();
            let observed = observed(&view, &events, &self.hook_calls);
            self.compare(&format!("{}.expect", self.key), "expect", expect, &observed);
        }
    }

    /// The engine's form of a test message; `n` numbers its default id.
    fn message(&self, message: &Message, n: usize) -> SendMessage {
        SendMessage {
            message_id: Some(
                message
                    .message_id
                    .clone()
                    .unwrap_or_else(|| format!("msg-{n}")),
            ),
            performative: message.performative.clone(),
            to: message.to.clone(),
            content: message.content.clone(),
            in_reply_to: message.in_reply_to.clone(),
            signature: None,
            reply_by: message.reply_by.map(|reply_by| match reply_by {
                ReplyBy::After(after) => self.sandbox.now().saturating_add(after.ms),
                ReplyBy::At(at) => at,
            }),
        }
    }

    /// Compares the engine's answer with the refusal the step expects (or its absence).
    /// Returns whether the engine accepted.
    fn check_refusal(
        &mut self,
        key: &str,
        step: &str,
        error: Option<EngineError>,
        expected: Option<&Refused>,
    ) -> bool {
        let accepted = error.is_none();
        match (error, expected) {
            (None, None) => {}
            (None, Some(refused)) => self.fail(
                &format!("{key}.refused"),
                step,
                "refused",
                refusal_json(refused),
                json!("accepted"),
                Some("the engine accepted what the test expects it to refuse".into()),
            ),
            (Some(error), None) => self.fail(
                key,
                step,
                "",
                json!("accepted"),
                json!({ "code": error.code(), "pointer": error.pointer(), "message": error.to_string() }),
                Some(format!("refused: {error}")),
            ),
            (Some(error), Some(refused)) => {
                let got = json!({ "code": error.code(), "pointer": error.pointer() });
                let mut differences = Vec::new();
                compare("refused", &refusal_json(refused), &got, &mut differences);
                for difference in differences {
                    let at = format!("{key}.{}", difference.path);
                    self.push(&at, step, difference);
                }
            }
        }
        accepted
    }

    /// Takes the step's hook calls and compares the step's expectations.
    async fn check_step(&mut self, key: &str, step: &str, expect: Option<&Expect>) {
        let calls = self.sandbox.take_hook_calls();
        self.hook_calls.extend(calls.iter().cloned());
        let events = self
            .sandbox
            .events(&self.conversation_id)
            .await
            .unwrap_or_default();
        let fresh: Vec<ConversationEvent> = events
            .iter()
            .filter(|event| event.seq > self.seen_seq)
            .cloned()
            .collect();
        self.seen_seq = events.last().map_or(self.seen_seq, |event| event.seq);
        let Some(expect) = expect else {
            return;
        };
        let key = format!("{key}.expect");
        let Some(view) = self.view(&key, step).await else {
            return;
        };
        let observed = observed(&view, &fresh, &calls);
        self.compare(&key, step, expect, &observed);
    }

    async fn view(&mut self, key: &str, step: &str) -> Option<ConversationView> {
        match self.sandbox.view(&self.conversation_id).await {
            Ok(view) => Some(view),
            Err(error) => {
                self.fail(
                    key,
                    step,
                    "",
                    json!("a conversation"),
                    json!(error.to_string()),
                    Some("the conversation cannot be read".into()),
                );
                None
            }
        }
    }

    fn compare(&mut self, key: &str, step: &str, expect: &Expect, observed: &Value) {
        let mut differences = Vec::new();
        compare("", &expectation(expect), observed, &mut differences);
        for difference in differences {
            let at = format!("{key}.{}", difference.path);
            self.push(&at, step, difference);
        }
    }

    fn fail(
        &mut self,
        key: &str,
        step: &str,
        path: &str,
        expected: Value,
        got: Value,
        note: Option<String>,
    ) {
        self.push(
            key,
            step,
            Difference {
                path: path.to_owned(),
                expected,
                got,
                note,
            },
        );
    }

    fn push(&mut self, key: &str, step: &str, difference: Difference) {
        self.failures.push(Failure {
            at: self.suite.position(key),
            step: step.to_owned(),
            difference,
        });
    }
}

fn refusal_json(refused: &Refused) -> Value {
    let mut map = Map::new();
    if let Some(code) = &refused.code {
        map.insert("code".into(), json!(code));
    }
    if let Some(pointer) = &refused.pointer {
        map.insert("pointer".into(), json!(pointer));
    }
    Value::Object(map)
}

/// The keys an expectation writes, as JSON.
fn expectation(expect: &Expect) -> Value {
    let mut map = Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            map.insert(key.to_owned(), value);
        }
    };
    put("status", expect.status.clone().map(Value::String));
    put("outcome", expect.outcome.clone());
    put(
        "threads",
        expect.threads.as_ref().map(|threads| json!(threads)),
    );
    put("vars", expect.vars.clone());
    put("commitments", expect.commitments.clone().map(Value::Array));
    put("violations", expect.violations.clone().map(Value::Array));
    put("messages", expect.messages.clone().map(Value::Array));
    put("hooks", expect.hooks.clone().map(Value::Array));
    Value::Object(map)
}

/// The conversation in the expectation vocabulary: state from `view`; messages and
/// violations from `events`; hook calls from `calls`.
pub fn observed(
    view: &ConversationView,
    events: &[ConversationEvent],
    calls: &[HookCall],
) -> Value {
    let threads: Map<String, Value> = view
        .threads
        .iter()
        .map(|thread| (thread.participant.to_string(), json!(thread.state)))
        .collect();
    let mut messages = Vec::new();
    let mut violations = Vec::new();
    for event in events {
        match &event.kind {
            EventKind::MessageAccepted { message, .. } => {
                let mut shown = json!({
                    "id": message.id,
                    "from": message.sender,
                    "to": message.receivers,
                    "performative": message.performative,
                    "content": message.content.value(),
                    "sent_at": message.sent_at,
                });
                if let Some(in_reply_to) = &message.in_reply_to {
                    shown["in_reply_to"] = json!(in_reply_to);
                }
                if let Some(reply_by) = message.reply_by {
                    shown["reply_by"] = json!(reply_by);
                }
                messages.push(shown);
            }
            EventKind::ViolationRecorded(violation) => {
                violations.push(serde_json::to_value(violation).unwrap_or(Value::Null));
            }
            _ => {}
        }
    }
    let hooks: Vec<Value> = calls
        .iter()
        .map(|call| match &call.answer {
            // Both lists written out, empty or not, so `actions: []` can be expected.
            Ok(answer) => json!({
                "event": call.event,
                "answer": { "actions": answer.actions, "log": answer.log },
            }),
            Err(failure) => json!({ "event": call.event, "error": failure.to_string() }),
        })
        .collect();
    json!({
        "status": view.status,
        "outcome": view.outcome,
        "threads": threads,
        "vars": view.vars,
        "commitments": view.commitments,
        "violations": violations,
        "messages": messages,
        "hooks": hooks,
    })
}
