//! Replay against the recording's own revision finds nothing (determinism, hooks included);
//! a changed deadline is named at the input it precedes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use colloquy_core::clock::ManualClock;
use colloquy_core::hooks::HookCaller;
use colloquy_hooks::{HookRuntime, HookRuntimeConfig};
use colloquy_policy::TemplateCompiler;
use colloquy_protocol::message::{SendMessage, StartConversation};
use serde_json::json;

use super::*;
use crate::TEST_EPOCH_MS;
use crate::suite::load::{TemplateDirs, load};
use crate::suite::run::run_suite;

fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(future)
}

/// Every case of `test_file`, recorded by the runner, replayed against its own template.
fn replays_the_same(
    test_file: &Path,
    hooks: Option<Arc<dyn HookCaller>>,
    clock: &Arc<ManualClock>,
) {
    let suite = load(test_file, &mut TemplateDirs::default()).expect("loads");
    let reports = block_on(run_suite(&suite, clock, hooks.clone(), None));
    assert!(!reports.is_empty());
    for report in &reports {
        if report.events.is_empty() {
            continue; // a refused start recorded nothing
        }
        let verdict = block_on(replay(
            &report.events,
            &report.template,
            clock,
            hooks.clone(),
        ))
        .expect("replays");
        assert_eq!(
            verdict,
            Verdict::Same,
            "{} / {}: {verdict:#?}",
            report.template.name,
            report.name
        );
    }
}

#[test]
fn every_built_in_replays_against_itself_without_divergence() {
    let clock = Arc::new(ManualClock::new(TEST_EPOCH_MS));
    for name in [
        "fipa-request",
        "fipa-query",
        "fipa-contract-net",
        "a2a-task",
    ] {
        replays_the_same(
            &templates_dir().join(format!("{name}.test.yaml")),
            None,
            &clock,
        );
    }
}

/// The hooks (Rust, Python and TypeScript builds) read only the engine's clock: replayed,
/// they decide and stamp alike. Needs the example hooks built (`templates/examples/build.sh`).
#[test]
fn the_credit_example_replays_against_itself_with_every_hook_build() {
    let clock = Arc::new(ManualClock::new(TEST_EPOCH_MS));
    let hooks: Arc<dyn HookCaller> = Arc::new(
        HookRuntime::with_clock(HookRuntimeConfig::default(), clock.clone()).expect("runtime"),
    );
    replays_the_same(
        &templates_dir().join("examples/credit-assessment/credit-assessment.test.yaml"),
        Some(hooks),
        &clock,
    );
}

#[test]
fn a_shorter_reply_by_is_named_at_the_message_it_comes_before() {
    let dir = tempfile::tempdir().expect("temp dir");
    let live_path = dir.path().join("live.yaml");
    let live_source =
        std::fs::read_to_string(templates_dir().join("fipa-request.yaml")).expect("read");
    std::fs::write(&live_path, &live_source).expect("write");
    let candidate_path = dir.path().join("candidate.yaml");
    // The result is owed within 1 minute of agreeing instead of 5.
    let candidate_source = live_source.replacen(
        "{ performative: agree, from: participant, to: agreed, reply_by: { default_ms: 300000 } }",
        "{ performative: agree, from: participant, to: agreed, reply_by: { default_ms: 60000 } }",
        1,
    );
    assert_ne!(live_source, candidate_source);
    std::fs::write(&candidate_path, candidate_source).expect("write");
    let compiler = TemplateCompiler::new();
    let live = Arc::new(compiler.compile_file(&live_path).expect("compiles"));
    let candidate = Arc::new(compiler.compile_file(&candidate_path).expect("compiles"));

    // Recorded: bob agrees, and informs three minutes later.
    let clock = Arc::new(ManualClock::new(TEST_EPOCH_MS));
    let sandbox = Sandbox::new(Arc::new(Catalog::new([live.clone()])), clock.clone(), None);
    let log = block_on(async {
        let start = StartConversation {
            template: "fipa-request".into(),
            participants: vec!["bob".into()],
            conversation_id: Some("c1".into()),
            message: Some(SendMessage::new("request", json!({ "action": "x" })).with_id("m0")),
            ..StartConversation::default()
        };
        sandbox.start("alice", start).await.expect("starts");
        sandbox
            .send(
                "c1",
                "bob",
                SendMessage::new("agree", json!(null)).with_id("m1"),
            )
            .await
            .expect("agree");
        sandbox.advance("c1", 180_000).await.expect("advances");
        sandbox
            .send(
                "c1",
                "bob",
                SendMessage::new("inform", json!({ "done": true })).with_id("m2"),
            )
            .await
            .expect("inform");
        sandbox.events("c1").await.expect("events")
    });

    assert_eq!(
        block_on(replay(&log, &live, &clock, None)).expect("replays"),
        Verdict::Same
    );
    let Verdict::Diverged(divergence) =
        block_on(replay(&log, &candidate, &clock, None)).expect("replays")
    else {
        panic!("the candidate times bob out before his inform");
    };
    assert_eq!(divergence.step, 2, "{divergence:#?}");
    assert!(
        divergence.input.starts_with("inform from bob"),
        "{}",
        divergence.input
    );
    assert_eq!(divergence.kind, DivergenceKind::Thread);
    let thread = divergence
        .differences
        .iter()
        .find(|d| d.path == "threads.bob")
        .expect("bob's thread differs");
    assert_eq!(thread.expected, "agreed");
    assert_eq!(thread.got, "timed_out");
}

/// A one-step protocol under `enforce`; `answers` are the performatives bob may answer with.
fn errand(answers: &[&str]) -> String {
    let moves: String = answers
        .iter()
        .map(|answer| {
            format!("          - {{ performative: {answer}, from: participant, to: done }}\n")
        })
        .collect();
    format!(
        "apiVersion: colloquy.dev/v1\nkind: ConversationTemplate\nmetadata:\n  name: errand\n  version: 1.0.0\nspec:\n  roles:\n    participants: {{ min: 1, max: 1 }}\n  enforcement: enforce\n  thread:\n    initial: start\n    on_expiry: expired\n    states:\n      start:\n        transitions:\n          - {{ performative: request, from: initiator, to: asked }}\n      asked:\n        transitions:\n{moves}      done: {{ terminal: success }}\n      expired: {{ terminal: timeout }}\n"
    )
}

#[test]
fn a_message_the_recording_refused_and_the_candidate_accepts_is_a_divergence() {
    let compiler = TemplateCompiler::new();
    let live = Arc::new(
        compiler
            .compile_str(&errand(&["inform"]), None)
            .expect("compiles"),
    );
    let wider = Arc::new(
        compiler
            .compile_str(&errand(&["inform", "agree"]), None)
            .expect("compiles"),
    );
    // Recorded: bob's agree is refused (out of protocol), then he informs.
    let clock = Arc::new(ManualClock::new(TEST_EPOCH_MS));
    let sandbox = Sandbox::new(Arc::new(Catalog::new([live.clone()])), clock.clone(), None);
    let log = block_on(async {
        let start = StartConversation {
            template: "errand".into(),
            participants: vec!["bob".into()],
            conversation_id: Some("c1".into()),
            message: Some(SendMessage::new("request", json!({})).with_id("m0")),
            ..StartConversation::default()
        };
        sandbox.start("alice", start).await.expect("starts");
        let refused = sandbox
            .send(
                "c1",
                "bob",
                SendMessage::new("agree", json!({})).with_id("m1"),
            )
            .await;
        assert!(refused.is_err(), "agree is out of protocol");
        sandbox
            .send(
                "c1",
                "bob",
                SendMessage::new("inform", json!({})).with_id("m2"),
            )
            .await
            .expect("inform");
        sandbox.events("c1").await.expect("events")
    });
    assert!(
        log.iter()
            .any(|event| matches!(event.kind, EventKind::MessageRefused(_))),
        "the refusal is recorded"
    );
    assert_eq!(
        block_on(replay(&log, &live, &clock, None)).expect("replays"),
        Verdict::Same,
        "the live revision refuses it again"
    );
    let Verdict::Diverged(divergence) =
        block_on(replay(&log, &wider, &clock, None)).expect("replays")
    else {
        panic!("the wider candidate accepts bob's agree");
    };
    assert_eq!(
        divergence.kind,
        DivergenceKind::Accepted("out_of_protocol".into()),
        "{divergence:#?}"
    );
    assert_eq!(divergence.step, 1);
    assert!(
        divergence.input.starts_with("agree from bob"),
        "{}",
        divergence.input
    );
}
