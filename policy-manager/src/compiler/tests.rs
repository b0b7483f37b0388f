//! Compiler tests: valid templates resolve as written; each broken fixture under
//! `fixtures/broken/` yields the diagnostics in its snapshot (`src/snapshots/`); directories
//! compile all or nothing; the committed format schema is current.

use std::fs;
use std::path::{Path, PathBuf};

use colloquy_protocol::action::Action;
use colloquy_protocol::conversation::{CommitmentState, Outcome};
use colloquy_protocol::performative::{FipaAct, Performative};
use colloquy_protocol::template::{Enforcement, Role};
use serde_json::json;

use super::*;
use crate::compiled::CompiledAction;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles a fixture with a relative origin, so diagnostics (and snapshots) carry the same
/// path on every machine. `cargo test` runs in the package directory, so the relative path
/// also resolves hook modules.
fn compile_fixture(relative: &str) -> Result<CompiledTemplate, Diagnostics> {
    let source = fs::read_to_string(manifest_dir().join(relative)).expect("fixture exists");
    TemplateCompiler::new().compile_str(&source, Some(Path::new(relative)))
}

fn inform() -> Performative {
    Performative::Fipa(FipaAct::Inform)
}

#[test]
fn minimal_template_compiles_and_resolves() {
    let source = fs::read_to_string(manifest_dir().join("fixtures/valid/minimal.yaml"))
        .expect("fixture exists");
    let template = TemplateCompiler::new()
        .compile_str(&source, Some(Path::new("fixtures/valid/minimal.yaml")))
        .unwrap_or_else(|diagnostics| panic!("{diagnostics}"));

    assert_eq!(&*template.name, "minimal");
    assert!(template.hook_module.is_none());
    assert_eq!(&*template.revision, &*revision(&source, None));
    assert!(template.revision.starts_with("sha256:"));
    assert_eq!(template.revision.len(), "sha256:".len() + 16);
    assert_eq!(
        template.source_path.as_deref(),
        Some(Path::new("fixtures/valid/minimal.yaml"))
    );
    assert_eq!(
        (template.min_participants, template.max_participants),
        (1, Some(1))
    );
    assert_eq!(template.enforcement, Enforcement::Report);

    let machine = &template.machine;
    let names: Vec<&str> = machine.states.iter().map(|state| &*state.name).collect();
    assert_eq!(names, ["asked", "done", "expired", "refused", "start"]);
    let id = |name: &str| machine.id_of(name).expect("state exists");
    assert_eq!(machine.initial, id("start"));
    assert_eq!(machine.on_expiry, id("expired"));
    let asked = machine.state(id("asked"));
    assert_eq!(asked.terminal, None);
    assert_eq!(asked.on_deadline, Some(id("expired")));
    assert_eq!(asked.transitions.len(), 2);
    assert_eq!(asked.transitions[0].performative, inform());
    assert_eq!(asked.transitions[0].from, Role::Participant);
    assert_eq!(asked.transitions[0].to, id("done"));
    assert_eq!(
        asked.transitions[1].performative,
        Performative::Fipa(FipaAct::Refuse)
    );
    assert_eq!(asked.transitions[1].to, id("refused"));
    assert_eq!(machine.state(id("done")).terminal, Some(Outcome::Success));
    assert_eq!(
        machine.state(id("expired")).terminal,
        Some(Outcome::Timeout)
    );
}

#[test]
fn full_template_resolves_every_section() {
    let template = compile_fixture("fixtures/valid/full.yaml")
        .unwrap_or_else(|diagnostics| panic!("{diagnostics}"));
    let quote = Performative::Intent("quote".into());
    let quote_request = Performative::Intent("quote-request".into());

    assert_eq!(template.enforcement, Enforcement::Enforce);
    assert_eq!(template.intents, [quote_request.clone(), quote.clone()]);
    assert_eq!(template.performative("quote"), Some(quote.clone()));
    assert_eq!(template.performative("unheard-of"), None);

    let parameters = template
        .parameters_schema
        .as_ref()
        .expect("parameters schema");
    assert!(parameters.validator.is_valid(&json!({"limit": 10})));
    assert!(!parameters.validator.is_valid(&json!({"limit": "ten"})));
    let request_schema = &template.content_schemas[&quote_request];
    assert!(!request_schema.validator.is_valid(&json!({})));
    assert!(request_schema.validator.is_valid(&json!({"item": "bolts"})));
    assert!(template.content_schemas.contains_key(&inform()));

    let machine = &template.machine;
    let asked = machine.state(machine.id_of("asked").expect("state exists"));
    let guard = asked.transitions[0].guard.as_ref().expect("guarded");
    assert_eq!(&*guard.source, "content.price <= parameters.limit");
    assert!(asked.transitions[1].guard.is_none());
    let start = machine.state(machine.initial);
    assert_eq!(
        start.transitions[0]
            .reply_by
            .as_ref()
            .and_then(|r| r.default_ms),
        Some(60000)
    );
    let late = machine
        .state(machine.on_expiry)
        .late
        .as_ref()
        .expect("late policy");
    assert_eq!(
        late.reply,
        Some(Performative::Fipa(FipaAct::RejectProposal))
    );

    assert_eq!(template.outcome.rules.len(), 2);
    assert!(template.outcome.rules[0].0.is_some());
    assert!(template.outcome.rules[1].0.is_none());
    assert_eq!(template.outcome.rules[1].1, Outcome::Failure);
    assert_eq!(template.conversation_deadline_ms, Some(600_000));

    let commitment = &template.commitments[0];
    assert_eq!(&*commitment.name, "deliver-quote");
    assert_eq!(commitment.created_by, quote_request);
    assert_eq!(commitment.initial, CommitmentState::Pending);
    assert_eq!(commitment.transitions[0].performative, quote);
    assert_eq!(commitment.transitions[1].from, None);
    let deadline = commitment.deadline.as_ref().expect("deadline");
    assert_eq!(deadline.armed_in, [CommitmentState::Pending]);

    assert_eq!(&*template.routing[0].name, "copy-auditor");
    assert_eq!(
        template.routing[0].performatives,
        std::slice::from_ref(&quote)
    );
    assert_eq!(&*template.routing[1].name, "spec.routing[1]");
    assert!(matches!(
        template.routing[1].then[..],
        [CompiledAction::Literal(Action::Continue)]
    ));
    assert!(matches!(
        &template.on_start[0].then[..],
        [CompiledAction::Literal(Action::SetVars(_)), CompiledAction::EvalVars(vars)]
            if vars.len() == 1 && vars[0].0 == "started"
    ));
    assert!(matches!(
        &template.on_message[0].then[..],
        [
            CompiledAction::EvalVars(_),
            CompiledAction::Literal(Action::Log(_))
        ]
    ));
    assert!(matches!(
        &template.on_timeout[0].then[..],
        [CompiledAction::Literal(Action::Retry(retry))] if retry.max_attempts == Some(3)
    ));
    assert_eq!(
        template.hooks.as_ref().map(|h| h.module.as_str()),
        Some("hooks/noop.wasm")
    );
    // The module is read, and its bytes are part of the revision.
    let module = template.hook_module.as_ref().expect("hook module read");
    // fixtures/valid/hooks/noop.wasm: the empty module of noop.wat beside it.
    assert_eq!(&module.bytes[..], b"\0asm\x01\0\0\0");
    assert!(template.revision.len() == "sha256:".len() + 16);
    assert_eq!(template.context.max_bytes, 2048);
}

/// Every broken fixture, with a fragment its diagnostics must contain (so a snapshot accepted
/// without reading still cannot hide a missing check).
const BROKEN: &[(&str, &str)] = &[
    (
        "action-misplaced",
        "`route` is not allowed in spec.actions.on_start",
    ),
    (
        "bad-api-version",
        "unsupported apiVersion `colloquy.dev/v2`",
    ),
    ("cel-unknown-variable", "unknown variable `contnet`"),
    ("commitment-issues", "debtor and creditor are the same role"),
    ("dangling-state", "state `refsued` does not exist"),
    ("dead-end-state", "state `waiting` is a dead end"),
    ("duplicate-keys", "duplicate key `done`"),
    (
        "hook-issues",
        "hook module `hooks/policy.wat` is not a .wasm file",
    ),
    (
        "hook-outside-directory",
        "hook module `../valid/hooks/noop.wasm` is outside the template's directory",
    ),
    ("invalid-cel-syntax", "invalid CEL expression"),
    ("invalid-json-schema", "invalid JSON Schema"),
    (
        "late-misuse",
        "`action: reject` needs a `reply` performative",
    ),
    ("malformed-yaml", "did not find expected"),
    ("many-errors", "unknown field `owner`"),
    (
        "participants-over-cap",
        "max (50000) is over the engine's cap of 1000",
    ),
    ("shadowed-transition", "this transition can never fire"),
    ("unknown-fields", "unknown field `code`"),
    ("unknown-performative", "unknown performative `requets`"),
    (
        "unreachable-terminal",
        "terminal state `failed` is unreachable",
    ),
    ("wrong-type", "invalid type: string \"many\", expected u32"),
];

fn check_broken(name: &str) {
    let (_, expected) = BROKEN
        .iter()
        .find(|(fixture, _)| *fixture == name)
        .expect("fixture is listed");
    let diagnostics = match compile_fixture(&format!("fixtures/broken/{name}.yaml")) {
        Ok(template) => panic!("{name} compiled, as {}", template.name),
        Err(diagnostics) => diagnostics,
    };
    let rendered = diagnostics.to_string();
    assert!(
        rendered.contains(expected),
        "{name}: no `{expected}` in\n{rendered}"
    );
    for diagnostic in &diagnostics.list {
        assert!(
            diagnostic.line.is_some(),
            "{name}: no line for {diagnostic}"
        );
    }
    insta::with_settings!({ snapshot_path => "../snapshots", prepend_module_to_snapshot => false }, {
        insta::assert_snapshot!(name, rendered);
    });
}

macro_rules! broken_fixture_tests {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(
            #[test]
            fn $test() {
                check_broken($name);
            }
        )*

        #[test]
        fn every_broken_fixture_has_a_test() {
            let tested = [$($name),*];
            let mut on_disk: Vec<String> = fs::read_dir(manifest_dir().join("fixtures/broken"))
                .expect("fixtures/broken exists")
                .map(|entry| entry.expect("readable entry").path())
                .filter_map(|path| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .collect();
            on_disk.sort();
            assert_eq!(on_disk, tested, "fixtures/broken and the tests disagree");
            let listed: Vec<&str> = BROKEN.iter().map(|(name, _)| *name).collect();
            assert_eq!(listed, tested, "BROKEN and the tests disagree");
        }
    };
}

broken_fixture_tests! {
    broken_action_misplaced => "action-misplaced",
    broken_bad_api_version => "bad-api-version",
    broken_cel_unknown_variable => "cel-unknown-variable",
    broken_commitment_issues => "commitment-issues",
    broken_dangling_state => "dangling-state",
    broken_dead_end_state => "dead-end-state",
    broken_duplicate_keys => "duplicate-keys",
    broken_hook_issues => "hook-issues",
    broken_hook_outside_directory => "hook-outside-directory",
    broken_invalid_cel_syntax => "invalid-cel-syntax",
    broken_invalid_json_schema => "invalid-json-schema",
    broken_late_misuse => "late-misuse",
    broken_malformed_yaml => "malformed-yaml",
    broken_many_errors => "many-errors",
    broken_participants_over_cap => "participants-over-cap",
    broken_shadowed_transition => "shadowed-transition",
    broken_unknown_fields => "unknown-fields",
    broken_unknown_performative => "unknown-performative",
    broken_unreachable_terminal => "unreachable-terminal",
    broken_wrong_type => "wrong-type",
}

#[test]
fn every_unknown_field_is_reported_with_its_own_position() {
    let diagnostics = compile_fixture("fixtures/broken/unknown-fields.yaml")
        .expect_err("unknown fields are errors");
    let unknown: Vec<(&str, Option<usize>)> = diagnostics
        .list
        .iter()
        .filter(|d| d.message.starts_with("unknown field"))
        .map(|d| (d.path.as_str(), d.line))
        .collect();
    assert_eq!(
        unknown,
        [
            ("metadata.labels", Some(6)),
            ("spec.thread.states.start.transitions[0].guard", Some(16)),
            ("spec.thread.states.start.on_timeout", Some(17)),
            ("spec.actions.on_message[0].then[0].reject.code", Some(22)),
            ("spec.hook", Some(23)),
        ]
    );
}

#[test]
fn diagnostics_without_origin_have_no_file() {
    let source = "apiVersion: colloquy.dev/v9\nkind: ConversationTemplate\n";
    let diagnostics = TemplateCompiler::new()
        .compile_str(source, None)
        .expect_err("incomplete template");
    assert!(diagnostics.list.iter().all(|d| d.file.is_none()));
    assert!(
        diagnostics
            .to_string()
            .starts_with("1:1: error: missing field `metadata`")
    );
}

#[test]
fn missing_files_are_diagnostics_not_panics() {
    let compiler = TemplateCompiler::new();
    let missing = manifest_dir().join("fixtures/no-such-file.yaml");
    let diagnostics = compiler
        .compile_file(&missing)
        .expect_err("file is missing");
    assert_eq!(diagnostics.list.len(), 1);
    assert!(
        diagnostics.list[0]
            .message
            .starts_with("cannot read template")
    );
    let diagnostics = compiler.compile_dir(&missing).expect_err("dir is missing");
    assert!(
        diagnostics.list[0]
            .message
            .starts_with("cannot read template directory")
    );
}

#[test]
fn odd_input_is_refused_without_panicking() {
    let compiler = TemplateCompiler::new();
    for source in [
        "",
        "---\n---\n",
        "[1, 2]",
        "a: *nowhere",
        "{{{{",
        "\t- x",
        "apiVersion: [1",
    ] {
        let diagnostics = compiler.compile_str(source, None).expect_err(source);
        assert!(!diagnostics.list.is_empty(), "{source:?}");
    }
}

#[test]
fn deeply_nested_expressions_are_refused_not_fatal() {
    // In debug builds the CEL parser overflows a 2 MiB stack (this test thread's) at about 15
    // nested parentheses; the compiler's own thread has room up to the parser's limit.
    let source = fs::read_to_string(manifest_dir().join("fixtures/valid/minimal.yaml"))
        .expect("fixture exists")
        + &format!(
            "  routing:\n    - when: \"{}1{}\"\n      then: [continue]\n",
            "(".repeat(2000),
            ")".repeat(2000)
        );
    let diagnostics = TemplateCompiler::new()
        .compile_str(&source, None)
        .expect_err("too deep");
    assert!(
        diagnostics.to_string().contains("Recursion limit"),
        "{diagnostics}"
    );
    assert!(diagnostics.list.len() <= 4, "{diagnostics}");
    let shallow = source
        .replace(&"(".repeat(1990), "")
        .replace(&")".repeat(1990), "");
    TemplateCompiler::new()
        .compile_str(&shallow, None)
        .unwrap_or_else(|d| panic!("{d}"));
}

#[test]
fn comprehensions_nested_four_deep_are_refused_naming_the_rule() {
    let source = fs::read_to_string(manifest_dir().join("fixtures/valid/minimal.yaml"))
        .expect("fixture exists")
        + "  routing:\n    - name: quartic\n      when: \"content.a.all(w, content.a.all(x, \
           content.a.all(y, content.a.all(z, w + x + y + z > 0))))\"\n      then: [continue]\n";
    let diagnostics = TemplateCompiler::new()
        .compile_str(&source, None)
        .expect_err("four nested loops");
    let text = diagnostics.to_string();
    assert!(text.contains("spec.routing[0].when"), "{text}");
    assert!(text.contains("comprehensions 4 deep"), "{text}");
    let three = source.replace(", content.a.all(z, w + x + y + z > 0))", ", w + x + y > 0)");
    TemplateCompiler::new()
        .compile_str(&three, None)
        .unwrap_or_else(|d| panic!("{d}"));
}

/// A directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|elapsed| elapsed.as_nanos())
            .unwrap_or_default();
        let dir = std::env::temp_dir().join(format!(
            "colloquy-policy-{test}-{}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    fn write(&self, name: &str, contents: &str) {
        fs::write(self.0.join(name), contents).expect("write temp file");
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// `spec.limits.max_messages` is absent (unbounded) by default, taken as written, and must
/// be positive.
#[test]
fn the_message_limit_is_optional_and_positive() {
    let minimal = minimal_named("limited");
    let compiler = TemplateCompiler::new();
    let unbounded = compiler.compile_str(&minimal, None).expect("compiles");
    assert_eq!(unbounded.max_messages, None);
    let with = |limit: u32| minimal.clone() + &format!("  limits: {{ max_messages: {limit} }}\n");
    let bounded = compiler.compile_str(&with(40), None).expect("compiles");
    assert_eq!(bounded.max_messages, Some(40));
    let diagnostics = compiler.compile_str(&with(0), None).expect_err("zero");
    assert!(
        diagnostics
            .to_string()
            .contains("spec.limits.max_messages: must be greater than 0"),
        "{diagnostics}"
    );
}

fn minimal_named(name: &str) -> String {
    fs::read_to_string(manifest_dir().join("fixtures/valid/minimal.yaml"))
        .expect("fixture exists")
        .replace("name: minimal", &format!("name: {name}"))
}

#[test]
fn compile_dir_reads_yaml_and_yml_sorted_by_name_and_skips_the_rest() {
    let dir = TempDir::new("ok");
    dir.write("b.yaml", &minimal_named("zeta"));
    dir.write("c.yml", &minimal_named("alpha"));
    dir.write("notes.txt", "not a template");
    fs::create_dir(dir.0.join("nested")).expect("subdir");
    fs::write(dir.0.join("nested/broken.yaml"), "{{{").expect("nested file");
    let templates = TemplateCompiler::new()
        .compile_dir(&dir.0)
        .unwrap_or_else(|d| panic!("{d}"));
    let names: Vec<&str> = templates.iter().map(|t| &*t.name).collect();
    assert_eq!(names, ["alpha", "zeta"]);
    assert_eq!(
        templates[0].source_path.as_deref(),
        Some(dir.0.join("c.yml").as_path())
    );
}

#[test]
fn compile_dir_is_all_or_nothing_and_reports_every_file() {
    let dir = TempDir::new("broken");
    dir.write("a.yaml", &minimal_named("good"));
    dir.write(
        "b.yaml",
        &minimal_named("bad").replace("to: done", "to: gone"),
    );
    dir.write("c.yaml", "apiVersion: [");
    let diagnostics = TemplateCompiler::new()
        .compile_dir(&dir.0)
        .expect_err("two files broken");
    let mut files: Vec<PathBuf> = diagnostics
        .list
        .iter()
        .filter_map(|d| d.file.clone())
        .collect();
    files.dedup();
    assert_eq!(files, [dir.0.join("b.yaml"), dir.0.join("c.yaml")]);
    assert!(
        diagnostics.list[0]
            .message
            .contains("state `gone` does not exist")
    );
}

#[test]
fn compile_dir_refuses_duplicate_names() {
    let dir = TempDir::new("duplicate");
    dir.write("a.yaml", &minimal_named("same"));
    dir.write("b.yaml", &minimal_named("same"));
    let diagnostics = TemplateCompiler::new()
        .compile_dir(&dir.0)
        .expect_err("duplicate name");
    assert_eq!(diagnostics.list.len(), 1);
    let diagnostic = &diagnostics.list[0];
    assert_eq!(
        diagnostic.file.as_deref(),
        Some(dir.0.join("b.yaml").as_path())
    );
    assert_eq!(diagnostic.path, "metadata.name");
    assert_eq!(diagnostic.line, Some(5));
    assert!(
        diagnostic.message.contains("already used by"),
        "{diagnostic}"
    );
}

#[test]
fn compile_dir_of_an_empty_directory_is_empty() {
    let dir = TempDir::new("empty");
    let templates = TemplateCompiler::new()
        .compile_dir(&dir.0)
        .unwrap_or_else(|d| panic!("{d}"));
    assert!(templates.is_empty());
}

/// `value` with every object's keys in sorted order, whether or not serde_json's
/// `preserve_order` feature is on in this build, so the committed file does not depend on
/// which crates were built together.
fn sorted_keys(value: serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<_> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            serde_json::Value::Object(
                entries
                    .into_iter()
                    .map(|(key, value)| (key, sorted_keys(value)))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.into_iter().map(sorted_keys).collect())
        }
        other => other,
    }
}

/// The committed `docs/template.schema.json` must match the format types.
#[test]
fn committed_template_schema_is_current() {
    let path = manifest_dir().join("../docs/template.schema.json");
    let generated = serde_json::to_string_pretty(&sorted_keys(template_json_schema()))
        .expect("a JSON value serializes")
        + "\n";
    if std::env::var_os("UPDATE_TEMPLATE_SCHEMA").is_some_and(|value| value == "1") {
        fs::write(&path, &generated).expect("write docs/template.schema.json");
        return;
    }
    let committed = fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/template.schema.json is out of date with colloquy_protocol::template; \
         rerun with `UPDATE_TEMPLATE_SCHEMA=1 cargo test -p colloquy-policy` and commit it"
    );
}

#[test]
fn the_format_schema_rejects_unknown_fields() {
    let schema = template_json_schema();
    assert_eq!(schema["additionalProperties"], json!(false));
    let definitions = schema["$defs"].as_object().expect("$defs");
    for (name, definition) in definitions {
        if definition["type"] == json!("object") {
            assert_eq!(definition["additionalProperties"], json!(false), "{name}");
        }
    }
}

/// Flow collections nested past what the YAML scanner handles in linear time are refused
/// before it runs, at their position (the scanner took 19 s on 200 KB of `[`, and only then
/// said "recursion limit exceeded").
#[test]
fn deeply_nested_collections_are_refused_before_parsing() {
    let source = fs::read_to_string(manifest_dir().join("fixtures/valid/minimal.yaml"))
        .expect("fixture exists");
    let depth = 300;
    let deep = format!("{source}\nx: {}{}\n", "[".repeat(depth), "]".repeat(depth));
    let diagnostics = TemplateCompiler::new()
        .compile_str(&deep, None)
        .expect_err("refused");
    assert_eq!(diagnostics.list.len(), 1, "{diagnostics}");
    let refusal = &diagnostics.list[0];
    assert!(
        refusal.message.contains("nested more than 256 deep"),
        "{diagnostics}"
    );
    assert_eq!(refusal.line, Some(source.lines().count() + 2));
    assert_eq!(refusal.column, Some("x: ".len() + 257));
}

#[test]
fn a_hook_budget_over_the_operators_ceiling_is_refused() {
    let source = fs::read_to_string(manifest_dir().join("fixtures/valid/minimal.yaml"))
        .expect("fixture exists")
        + "  hooks:\n    module: hook.wasm\n    events: [on_message]\n    \
           limits: { timeout_ms: 4000 }\n";
    let diagnostics = TemplateCompiler::new()
        .compile_str(&source, None)
        .expect_err("over the default ceiling");
    let text = diagnostics.to_string();
    assert!(
        text.contains("spec.hooks.limits.timeout_ms: timeout_ms 4000 is out of range"),
        "{text}"
    );
    assert!(
        text.contains("between 1 and 1000, this server's ceiling")
            && text.contains("--max-hook-timeout-ms"),
        "{text}"
    );
    let raised = TemplateCompiler::new().with_max_hook_timeout_ms(5_000);
    raised
        .compile_str(&source, None)
        .unwrap_or_else(|diagnostics| panic!("within a raised ceiling: {diagnostics}"));
    // No ceiling goes past the format's own minute.
    let diagnostics = TemplateCompiler::new()
        .with_max_hook_timeout_ms(u64::MAX)
        .compile_str(&source.replace("4000", "60001"), None)
        .expect_err("over the format's limit");
    assert!(
        diagnostics.to_string().contains("between 1 and 60000"),
        "{diagnostics}"
    );
}

/// The issue's template: valid, 133 KB, but a list of 10,000 strings anchored in a message
/// schema and referenced 500 times in its `examples`, five million strings once expanded.
fn alias_bomb(name: &str) -> String {
    let strings: Vec<String> = (0..10_000).map(|i| format!("item-{i:06}")).collect();
    let aliases = vec!["*big"; 500].join(", ");
    format!(
        "{}  messages:\n    request:\n      schema:\n        type: object\n        \
         x-strings: &big [{}]\n        examples: [{aliases}]\n",
        minimal_named(name),
        strings.join(", ")
    )
}

#[test]
fn alias_amplification_is_refused_before_it_is_built_naming_the_limit() {
    let bomb = alias_bomb("bomb");
    assert!((130_000..140_000).contains(&bomb.len()), "{}", bomb.len());
    let bomb_lines = bomb.lines().count();
    let diagnostics = TemplateCompiler::new()
        .compile_str(&bomb, Some(Path::new("bomb.yaml")))
        .expect_err("refused");
    assert_eq!(diagnostics.count(), 1, "{diagnostics}");
    let refused = &diagnostics.list[0];
    assert!(
        refused
            .message
            .contains(&format!("more than {MAX_EXPANDED_NODES} nodes (the limit)")),
        "{refused}"
    );
    assert_eq!(refused.line, Some(bomb_lines), "placed at the alias");
    // Watched files are compiled by the same code: the directory is refused the same way.
    let dir = TempDir::new("bomb");
    dir.write("bomb.yaml", &bomb);
    let diagnostics = TemplateCompiler::new()
        .compile_dir(&dir.0)
        .expect_err("refused");
    assert!(
        diagnostics.list[0].message.contains("(the limit)"),
        "{diagnostics}"
    );
    // A few aliases of the same anchor are what anchors are for.
    let modest = bomb.replace(&vec!["*big"; 500].join(", "), "*big, *big");
    TemplateCompiler::new()
        .compile_str(&modest, None)
        .unwrap_or_else(|d| panic!("{d}"));
}

#[test]
fn a_template_file_past_the_size_limit_is_not_read_whole() {
    let dir = TempDir::new("huge");
    let padding = "# padding\n".repeat(MAX_SOURCE_BYTES as usize / 10 + 1);
    dir.write("huge.yaml", &format!("{padding}{}", minimal_named("huge")));
    let diagnostics = TemplateCompiler::new()
        .compile_dir(&dir.0)
        .expect_err("refused");
    assert!(
        diagnostics.list[0]
            .message
            .contains(&format!("larger than {MAX_SOURCE_BYTES} bytes")),
        "{diagnostics}"
    );
}

#[test]
fn a_file_that_is_not_a_template_is_not_quoted_past_its_start() {
    let dir = TempDir::new("passwd");
    let lines: Vec<String> = (0..200)
        .map(|i| format!("user{i}:x:{i}:{i}:secret-{i:04}-hunter2:/home/user{i}:/bin/sh"))
        .collect();
    dir.write("passwd.yaml", &lines.join("\n"));
    let diagnostics = TemplateCompiler::new()
        .compile_dir(&dir.0)
        .expect_err("not a template");
    let text = diagnostics.to_string();
    assert!(
        text.contains("user0:x:0:0"),
        "the start says what is at fault: {text}"
    );
    assert!(!text.contains("secret-0001"), "{text}");
    assert!(text.len() < 400, "{text}");

    // Lines ending in `:` read as keys: one sentence, not an unknown field per line.
    let shadow: Vec<String> = (0..200)
        .map(|i| format!("user{i}:$6$salt$SECRET{i:04}:19000:0:99999:7:::"))
        .collect();
    dir.write("passwd.yaml", &shadow.join("\n"));
    let diagnostics = TemplateCompiler::new()
        .compile_dir(&dir.0)
        .expect_err("not a template");
    let text = diagnostics.to_string();
    assert!(text.contains("this file is not a template"), "{text}");
    assert!(!text.contains("SECRET0000"), "{text}");
    assert!(diagnostics.count() <= 2, "{text}");
}
