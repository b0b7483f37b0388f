//! The runner against the built-in templates, and its diagnostics for broken test files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use colloquy_core::clock::ManualClock;

use super::load::{TemplateDirs, load};
use super::run::{CaseReport, run_suite};
use crate::TEST_EPOCH_MS;

fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

/// Runs one test file without hooks.
fn run(path: &Path) -> Vec<CaseReport> {
    let suite = load(path, &mut TemplateDirs::default()).expect("loads");
    let clock = Arc::new(ManualClock::new(TEST_EPOCH_MS));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(run_suite(&suite, &clock, None, None))
}

/// Writes `files` into a fresh folder beside a copy of the built-in `fipa-request`.
fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        templates_dir().join("fipa-request.yaml"),
        dir.path().join("fipa-request.yaml"),
    )
    .expect("copy");
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).expect("write");
    }
    dir
}

fn diagnostics(dir: &tempfile::TempDir, name: &str) -> String {
    load(&dir.path().join(name), &mut TemplateDirs::default())
        .expect_err("refused")
        .to_string()
}

const HEAD: &str =
    "apiVersion: colloquy.dev/v1\nkind: TemplateTest\ntemplate: fipa-request\ncases:\n";
const START: &str = "    start:\n      initiator: alice\n      participants: [bob]\n      \
                     message: { performative: request, content: { action: x } }\n";

#[test]
fn every_built_in_suite_passes_and_reaches_everything() {
    for name in [
        "fipa-request",
        "fipa-query",
        "fipa-contract-net",
        "a2a-task",
    ] {
        let reports = run(&templates_dir().join(format!("{name}.test.yaml")));
        assert!(reports.len() > 10, "{name}: {} cases", reports.len());
        let failures: Vec<_> = reports.iter().flat_map(|r| &r.failures).collect();
        assert!(failures.is_empty(), "{name}: {failures:#?}");
        let mut coverage = crate::coverage::Coverage::default();
        for report in &reports {
            coverage.add(&report.template, &report.events, &report.rules_fired);
        }
        assert_eq!(coverage.percent(), 100.0, "{name}: {coverage:#?}");
    }
}

#[test]
fn a_changed_template_fails_the_case_that_covers_it() {
    // fipa-request with an answer straight away leading to `failed` instead of `done`.
    let dir = folder(&[(
        "t.test.yaml",
        &format!(
            "{HEAD}  - name: inform\n{START}    steps:\n      - send: {{ from: bob, performative: inform }}\n        \
             expect:\n          threads: {{ bob: done }}\n"
        ),
    )]);
    let template = dir.path().join("fipa-request.yaml");
    let source = std::fs::read_to_string(&template).expect("read");
    let changed = source.replacen(
        "{ performative: inform, from: participant, to: done }",
        "{ performative: inform, from: participant, to: failed }",
        1,
    );
    assert_ne!(
        source, changed,
        "the template still has its agree transition"
    );
    std::fs::write(&template, changed).expect("write");
    let reports = run(&dir.path().join("t.test.yaml"));
    let failure = &reports[0].failures[0];
    assert_eq!(failure.step, "steps[0]");
    assert_eq!(failure.difference.path, "threads.bob");
    assert_eq!(failure.difference.expected, "done");
    assert_eq!(failure.difference.got, "failed");
    assert!(failure.at.ends_with("t.test.yaml:13:22"), "{}", failure.at);
}

#[test]
fn a_misspelt_key_is_placed_and_named() {
    let dir = folder(&[(
        "t.test.yaml",
        &format!("{HEAD}  - name: typo\n{START}    stpes: []\n"),
    )]);
    let text = diagnostics(&dir, "t.test.yaml");
    assert!(text.contains("t.test.yaml:10:5: error"), "{text}");
    assert!(text.contains("unknown field `stpes`"), "{text}");
}

#[test]
fn an_unknown_template_lists_the_ones_there() {
    let dir = folder(&[(
        "t.test.yaml",
        &format!(
            "apiVersion: colloquy.dev/v1\nkind: TemplateTest\ntemplate: fipa-requets\ncases:\n  - name: x\n{START}"
        ),
    )]);
    let text = diagnostics(&dir, "t.test.yaml");
    assert!(
        text.contains("t.test.yaml:3:1: error: template: no template named `fipa-requets`"),
        "{text}"
    );
    assert!(text.contains("the directory has: fipa-request"), "{text}");
}

#[test]
fn unknown_performatives_strangers_and_bad_durations_are_each_placed() {
    let dir = folder(&[(
        "t.test.yaml",
        &format!(
            "{HEAD}  - name: x\n{START}    steps:\n      - send: {{ from: bob, performative: agre }}\n      \
             - send: {{ from: mallory, performative: agree }}\n"
        ),
    )]);
    let text = diagnostics(&dir, "t.test.yaml");
    assert!(
        text.contains("t.test.yaml:11:28: error: cases[0].steps[0].send.performative: the template `fipa-request` knows no performative `agre`"),
        "{text}"
    );
    assert!(
        text.contains("t.test.yaml:12:17: error: cases[0].steps[1].send.from: `mallory` is not a party to the conversation"),
        "{text}"
    );
    let dir = folder(&[(
        "t.test.yaml",
        &format!("{HEAD}  - name: x\n{START}    steps:\n      - advance: 5 minutes\n"),
    )]);
    let text = diagnostics(&dir, "t.test.yaml");
    assert!(text.contains("`5 minutes` is not a duration"), "{text}");
    assert!(text.contains("t.test.yaml:11:"), "{text}");
}

#[test]
fn a_step_must_send_or_advance() {
    let dir = folder(&[(
        "t.test.yaml",
        &format!("{HEAD}  - name: x\n{START}    steps:\n      - expect: {{ status: active }}\n"),
    )]);
    let text = diagnostics(&dir, "t.test.yaml");
    assert!(
        text.contains("cases[0].steps[0]: a step needs `send` or `advance`"),
        "{text}"
    );
}

#[test]
fn template_loaders_skip_test_files() {
    let dir = folder(&[("t.test.yaml", "not: a template\n")]);
    let templates = colloquy_policy::TemplateCompiler::new()
        .compile_dir(dir.path())
        .expect("the test file is not read as a template");
    assert_eq!(templates.len(), 1);
}
