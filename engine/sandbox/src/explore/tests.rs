//! The explorer on a template with a guard that never holds: it finds the stuck
//! conversation and the unreachable state, and its case reproduces the finding.

use std::sync::Arc;

use colloquy_core::clock::ManualClock;
use colloquy_policy::TemplateCompiler;

use super::*;
use crate::TEST_EPOCH_MS;

const GUARDED: &str = r#"
apiVersion: colloquy.dev/v1
kind: ConversationTemplate
metadata: { name: guarded, version: 1.0.0 }
spec:
  roles:
    initiator: {}
    participants: { min: 1, max: 1 }
  enforcement: report
  messages:
    request: { schema: { type: object } }
  thread:
    initial: start
    on_expiry: timed_out
    states:
      start:
        transitions:
          - { performative: request, from: initiator, to: waiting }
      waiting:
        transitions:
          - { performative: inform, from: participant, to: done, when: "content.code == 42" }
      done: { terminal: success }
      timed_out: { terminal: timeout }
"#;

fn explored(source: &str, depth: usize) -> Exploration {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("t.yaml");
    std::fs::write(&path, source).expect("write");
    let template = Arc::new(
        TemplateCompiler::new()
            .compile_file(&path)
            .expect("compiles"),
    );
    let clock = Arc::new(ManualClock::new(TEST_EPOCH_MS));
    let limits = Limits {
        participants: 2,
        depth,
        max_states: 10_000,
    };
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(explore(&template, limits, &clock, None))
}

#[test]
fn a_guard_that_never_holds_leaves_the_conversation_stuck() {
    let exploration = explored(GUARDED, 3);
    assert_eq!(exploration.participant_counts, [1]);
    assert!(!exploration.stopped_at_limit);
    let stuck = exploration
        .findings
        .iter()
        .find(|finding| finding.kind == FindingKind::Stuck)
        .expect("a stuck conversation is found");
    assert!(
        stuck.message.contains("bob in `waiting`"),
        "{}",
        stuck.message
    );
    let case = stuck.case.as_deref().expect("with its case");
    assert!(
        case.contains("message: { performative: request, content: {} }"),
        "{case}"
    );
    assert!(
        !case.contains("steps:"),
        "the shortest sequence is the start alone: {case}"
    );
    let unreached: Vec<&str> = exploration
        .findings
        .iter()
        .filter(|finding| finding.kind == FindingKind::Unreached)
        .map(|finding| finding.message.as_str())
        .collect();
    assert!(
        unreached
            .iter()
            .any(|message| message.contains("the state done")),
        "{unreached:?}"
    );
    assert!(
        exploration
            .findings
            .iter()
            .all(|finding| finding.kind != FindingKind::EngineBug),
        "{:#?}",
        exploration.findings
    );
}

#[test]
fn the_built_in_request_protocol_has_no_findings() {
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/fipa-request.yaml"),
    )
    .expect("read");
    let exploration = explored(&source, 6);
    assert!(
        exploration.findings.is_empty(),
        "{:#?}",
        exploration.findings
    );
    assert!(
        exploration.distinct_states > 10,
        "{}",
        exploration.distinct_states
    );
}
