//! WebAssembly hooks end to end: the example policies in six languages (built from source
//! by `templates/examples/build.sh`; Python and TypeScript as components) driving real
//! conversations, and hostile modules (built from WAT here) and components (built from
//! Python and JavaScript fixtures) failing under their template's policy while other
//! conversations flow.
//!
//! Why one file of 1,100 lines: the hook builds, hostile fixtures and servers defined
//! at the top serve every scenario; each test reads alone.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use colloquy_core::listing::ConversationFilter;
use colloquy_core::store::MemoryStore;
use colloquy_core::{Engine, EngineConfig, ErrorKind, ManualClock};
use colloquy_hooks::{HookFailure, HookRuntime, HookRuntimeConfig};
use colloquy_policy::{Catalog, CompiledTemplate, TemplateCompiler};
use colloquy_protocol::conversation::{ConversationStatus, ViolationKind};
use colloquy_protocol::hook::{HookOutput, hook_input_json_schema, hook_output_json_schema};
use colloquy_tests::{Harness, T0, builtin_templates, msg, templates_dir};
use serde_json::{Value, json};

use crate::support::{assert_unchanged, expect_error, performatives, state, violations_of};

/// One runtime for every test of the binary: compiling a module once, one pooling
/// allocator's reservation, and an AOT cache kept between runs.
fn runtime() -> Arc<HookRuntime> {
    static RUNTIME: OnceLock<Arc<HookRuntime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            // Under the build directory when cargo was told one (CI keeps it between runs
            // of fresh clones), so the Python components compile once, not once a run.
            let cache_dir = std::env::var_os("CARGO_TARGET_DIR")
                .map(|dir| PathBuf::from(dir).join("e2e-hook-cache"))
                .unwrap_or_else(|| scratch_root().join("aot-cache"));
            let config = HookRuntimeConfig {
                cache_dir: Some(cache_dir),
                ..HookRuntimeConfig::default()
            };
            Arc::new(HookRuntime::new(config).expect("hook runtime"))
        })
        .clone()
}

fn scratch_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/e2e-hooks")
}

/// An engine with hooks over the built-in templates plus `extra`.
fn harness(extra: Vec<CompiledTemplate>) -> Harness {
    let catalog = Catalog::new(builtin_templates().into_iter().chain(extra).map(Arc::new));
    let clock = Arc::new(ManualClock::new(T0));
    let store = Arc::new(MemoryStore::new());
    let engine = Engine::new(
        Arc::new(catalog),
        store.clone(),
        clock.clone(),
        EngineConfig::default(),
    )
    .with_hooks(runtime());
    Harness {
        engine: Arc::new(engine),
        clock,
        store,
    }
}

/// An example template, whose module `templates/examples/build.sh` builds from source.
fn example(dir: &str, file: &str, module: &str) -> CompiledTemplate {
    let dir = templates_dir().join("examples").join(dir);
    assert!(
        dir.join(module).is_file(),
        "{} is missing: run templates/examples/build.sh (scripts/test.sh does) to build the \
         example hooks from source",
        dir.join(module).display()
    );
    TemplateCompiler::new()
        .compile_file(&dir.join(file))
        .unwrap_or_else(|diagnostics| panic!("{file} does not compile:\n{diagnostics}"))
}

// --- the examples ---------------------------------------------------------------------

#[tokio::test]
async fn rust_credit_assessment_marks_pending_refuses_routes_and_escalates() {
    credit_assessment_scenario("credit-assessment", "credit_assessment.wasm").await;
}

#[tokio::test]
async fn python_credit_assessment_behaves_as_the_rust_one() {
    credit_assessment_scenario("credit-assessment-py", "credit_assessment_py.wasm").await;
}

#[tokio::test]
async fn typescript_credit_assessment_behaves_as_the_rust_one() {
    credit_assessment_scenario("credit-assessment-js", "credit_assessment_js.wasm").await;
}

/// The credit policy's scenario, run against each build of it (Rust, Python, TypeScript):
/// the template `name` (in `credit-assessment/<name>.yaml`) differs from the Rust one only
/// in its name and hook file.
pub(crate) async fn credit_assessment_scenario(name: &str, module: &str) {
    let h = harness(vec![example(
        "credit-assessment",
        &format!("{name}.yaml"),
        module,
    )]);
    let params = json!({"applicant_id": "A-17", "income_source": "salary"});
    let view = h.start(name, "desk", &["risk"], params).await;
    assert_eq!(view.vars["status"], "pending");
    assert_eq!(view.vars["started_at"], T0);

    // Over the limit from `hooks.config`: refused, nothing stored.
    let error = expect_error(
        h.send(
            &view.id,
            "desk",
            msg("request", json!({"amount": 90000, "purpose": "house"})),
        )
        .await,
        "rejected",
        ErrorKind::Unprocessable,
    );
    assert!(
        error.to_string().contains("exceeds the limit of 50000"),
        "{error}"
    );
    assert_unchanged(&h, &view).await;

    // A crypto purpose is routed to the special-risk assessor as well.
    let receipt = h
        .ok(
            &view.id,
            "desk",
            msg(
                "request",
                json!({"amount": 20000, "purpose": "Crypto mining rig"}),
            ),
        )
        .await;
    let receivers: Vec<&str> = receipt.receivers.iter().map(|r| &**r).collect();
    assert_eq!(receivers, ["risk", "special-risk-assessment"]);
    assert_eq!(h.view(&view.id).await.vars["risk_route"], "special");

    // The assessor stays silent: reply-by (30 s), then retries at +1 s, +2 s, +4 s, then
    // escalation to human review with the reason.
    h.advance(30_000).await;
    assert_eq!(h.view(&view.id).await.vars["status"], "pending");
    for delay in [1_000, 2_000, 4_000] {
        h.advance(delay - 1).await;
        let before = h.view(&view.id).await.version;
        h.advance(1).await;
        assert!(
            h.view(&view.id).await.version > before,
            "retry after {delay} ms"
        );
    }
    let view = h.view(&view.id).await;
    assert_eq!(view.vars["status"], "escalated");
    let escalation = view
        .messages
        .iter()
        .find(|m| m.receivers.iter().any(|r| &**r == "human-review"))
        .expect("human-review was told");
    assert!(
        escalation
            .content
            .value()
            .to_string()
            .contains("max_retries_exceeded"),
        "{:?}",
        escalation.content.value()
    );
    assert!(view.violations.is_empty(), "{:?}", view.violations);

    // Escalated to, human review now reads the conversation and lists it; a stranger lists
    // nothing.
    let listed = |agent: &'static str| {
        let engine = h.engine.clone();
        async move {
            let filter = ConversationFilter {
                limit: 10,
                ..ConversationFilter::default()
            };
            let (page, _) = engine.list(Some(agent), &filter).await;
            page.iter().map(|c| c.id.to_string()).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed("human-review").await, [view.id.to_string()]);
    assert_eq!(listed("desk").await, [view.id.to_string()]);
    assert_eq!(listed("mallory").await, Vec::<String>::new());
}

/// The credit hook allocates from the guest SDK's call arena, which starts over after every
/// call of a reused instance: each of many calls in a row must answer its own event, never
/// one built from an earlier call's memory.
#[tokio::test]
async fn rust_credit_assessment_answers_each_of_many_calls_on_reused_instances() {
    let h = harness(vec![example(
        "credit-assessment",
        "credit-assessment.yaml",
        "credit_assessment.wasm",
    )]);
    let params = json!({"applicant_id": "A-17", "income_source": "salary"});
    for round in 0..150u64 {
        let view = h
            .start("credit-assessment", "desk", &["risk"], params.clone())
            .await;
        assert_eq!(view.vars["status"], "pending", "round {round}");
        match round % 3 {
            0 => {
                let amount = 50_001 + round * 7;
                let error = expect_error(
                    h.send(
                        &view.id,
                        "desk",
                        msg("request", json!({"amount": amount, "purpose": "boat"})),
                    )
                    .await,
                    "rejected",
                    ErrorKind::Unprocessable,
                );
                let expected = format!("amount {amount} exceeds the limit of 50000");
                assert!(
                    error.to_string().contains(&expected),
                    "round {round}: {error}"
                );
            }
            1 => {
                // A long purpose, so the event outgrows the earlier calls' blocks.
                let purpose = format!("crypto {}", "x".repeat(round as usize % 90));
                let receipt = h
                    .ok(
                        &view.id,
                        "desk",
                        msg("request", json!({"amount": round, "purpose": purpose})),
                    )
                    .await;
                let receivers: Vec<&str> = receipt.receivers.iter().map(|r| &**r).collect();
                assert_eq!(
                    receivers,
                    ["risk", "special-risk-assessment"],
                    "round {round}"
                );
                assert_eq!(h.view(&view.id).await.vars["risk_route"], "special");
            }
            _ => {
                let receipt = h
                    .ok(
                        &view.id,
                        "desk",
                        msg("request", json!({"amount": round, "purpose": "car"})),
                    )
                    .await;
                let receivers: Vec<&str> = receipt.receivers.iter().map(|r| &**r).collect();
                assert_eq!(receivers, ["risk"], "round {round}");
                assert_eq!(h.view(&view.id).await.vars["risk_route"], "standard");
            }
        }
    }
}

#[tokio::test]
async fn c_amount_guard_refuses_amounts_over_the_limit() {
    let h = harness(vec![example(
        "amount-guard",
        "amount-guard.yaml",
        "amount_guard.wasm",
    )]);
    let view = h.start("amount-guard", "buyer", &["bank"], json!({})).await;
    let error = expect_error(
        h.send(&view.id, "buyer", msg("request", json!({"amount": 1500})))
            .await,
        "rejected",
        ErrorKind::Unprocessable,
    );
    assert!(
        error
            .to_string()
            .contains("amount 1500 is over the limit of 1000"),
        "{error}"
    );
    assert_unchanged(&h, &view).await;
    h.ok(&view.id, "buyer", msg("request", json!({"amount": 999})))
        .await;
    h.ok(&view.id, "bank", msg("inform", json!({"paid": true})))
        .await;
    let view = h.view(&view.id).await;
    assert_eq!(state(&view.threads, "bank"), "paid");
    assert_eq!(view.status, ConversationStatus::Completed);
}

#[tokio::test]
async fn wat_auto_responder_answers_at_once() {
    let h = harness(vec![example(
        "auto-responder",
        "auto-responder.yaml",
        "auto_responder.wasm",
    )]);
    let view = h
        .start("auto-responder", "carol", &["desk"], json!({}))
        .await;
    h.ok(&view.id, "carol", msg("query-ref", json!({"q": "open?"})))
        .await;
    let view = h.view(&view.id).await;
    assert_eq!(performatives(&view), ["query-ref", "inform"]);
    let reply = &view.messages[1];
    assert_eq!(&*reply.sender, "colloquy:engine");
    assert_eq!(reply.receivers.len(), 1);
    assert_eq!(&*reply.receivers[0], "carol");
    assert_eq!(
        reply.content.value()["auto_reply"],
        "the desk is closed; we answer tomorrow"
    );
}

#[tokio::test]
async fn zig_lowest_price_wins_at_the_deadline() {
    let h = harness(vec![example(
        "lowest-price",
        "lowest-price.yaml",
        "lowest_price.wasm",
    )]);
    let view = h
        .start("lowest-price", "buyer", &["s1", "s2", "s3"], json!({}))
        .await;
    h.ok(&view.id, "buyer", msg("cfp", json!({"item": "bolts"})))
        .await;
    for (seller, price) in [("s1", 120), ("s2", 95), ("s3", 101)] {
        h.ok(&view.id, seller, msg("propose", json!({"price": price})))
            .await;
    }
    let before = h.view(&view.id).await;
    assert_eq!(before.vars["lowest_bidder"], "s2");
    assert_eq!(before.vars["lowest_price"], 95);
    h.advance(60_000).await;
    let view = h.view(&view.id).await;
    assert_eq!(view.vars["awarded_to"], "s2");
    let award = view.messages.last().expect("award");
    assert_eq!(award.performative.name(), "accept-proposal");
    assert_eq!(&*award.receivers[0], "s2");
    assert_eq!(view.status, ConversationStatus::Completed);
}

// --- hostile modules ------------------------------------------------------------------

/// A core module speaking ABI v1 whose `message` runs `body` and then returns `output`.
fn module(version: i32, body: &str, output: &str, extra: &str) -> Vec<u8> {
    let escaped: String = output.bytes().map(|byte| format!("\\{byte:02x}")).collect();
    let text = format!(
        r#"(module
  {extra}
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 0) "{escaped}")
  (func (export "hooks_abi_version") (result i32) (i32.const {version}))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $at i32)
    (local.set $at (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get 3)))
    (if (i32.gt_u (global.get $heap) (i32.mul (memory.size) (i32.const 65536)))
      (then (drop (memory.grow (i32.add (i32.div_u (local.get 3) (i32.const 65536)) (i32.const 1))))))
    (local.get $at))
  (func (export "message") (param i32 i32) (result i32)
    {body}
    (i32.store (i32.const 2048) (i32.const 0))
    (i32.store (i32.const 2052) (i32.const {len}))
    (i32.const 2048))
  (func (export "cabi_post_message") (param i32) (global.set $heap (i32.const 4096))))"#,
        len = output.len()
    );
    wat::parse_str(&text).unwrap_or_else(|error| panic!("fixture WAT: {error}\n{text}"))
}

/// A fipa-request variant named `name` whose hook is `bytes`, compiled from a file so the
/// compiler reads the module.
fn hostile(name: &str, bytes: &[u8], policy: &str, limits: &str) -> CompiledTemplate {
    hooked(
        name,
        bytes,
        &format!("failure_policy: {policy}\n    limits: {limits}"),
    )
    .unwrap_or_else(|diagnostics| panic!("{name} does not compile:\n{diagnostics}"))
}

/// A fipa-request variant named `name` whose `on_message` hook is `bytes`, with `settings`
/// (YAML lines) added to its `hooks` section.
fn hooked(
    name: &str,
    bytes: &[u8],
    settings: &str,
) -> Result<CompiledTemplate, colloquy_policy::Diagnostics> {
    // One directory per call: tests run in parallel and reuse fixture names.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = scratch_root().join(format!("{}-{call}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::write(dir.join("hook.wasm"), bytes).expect("write module");
    let yaml = std::fs::read_to_string(templates_dir().join("fipa-request.yaml"))
        .expect("fipa-request.yaml")
        .replace("name: fipa-request", &format!("name: {name}"));
    let yaml = format!(
        "{yaml}\n  hooks:\n    module: hook.wasm\n    events: [on_message]\n    {settings}\n"
    );
    let file = dir.join(format!("{name}.yaml"));
    std::fs::write(&file, yaml).expect("write template");
    TemplateCompiler::new().compile_file(&file)
}

const DEFAULT_LIMITS: &str = "{ memory_bytes: 1048576, timeout_ms: 20 }";

/// Every hostile fixture with the words its failure must carry.
fn hostile_fixtures() -> Vec<(&'static str, Vec<u8>, &'static str)> {
    let ok = r#"{"actions":["continue"]}"#;
    vec![
        (
            "hostile-loop",
            module(1, "(loop $spin (br $spin))", ok, ""),
            "longer than its 20 ms budget",
        ),
        (
            "hostile-memory",
            module(
                1,
                "(loop $grow (drop (memory.grow (i32.const 16))) (br $grow))",
                ok,
                "",
            ),
            "over its cap of 1048576 bytes",
        ),
        (
            "hostile-trap",
            module(1, "unreachable", ok, ""),
            "the hook trapped: wasm trap: wasm `unreachable` instruction executed",
        ),
        (
            "hostile-no-realloc",
            wat::parse_str(
                r#"(module (memory (export "memory") 1)
                     (func (export "hooks_abi_version") (result i32) (i32.const 1))
                     (func (export "message") (param i32 i32) (result i32) (i32.const 0)))"#,
            )
            .expect("WAT"),
            "no `cabi_realloc` export",
        ),
        (
            "hostile-abi-version",
            module(2, "", ok, ""),
            "speaks hook ABI version 2; this engine speaks 1",
        ),
        (
            "hostile-garbage",
            module(1, "", "this is not JSON", ""),
            "invalid output",
        ),
        (
            "hostile-unknown-action",
            module(1, "", r#"{"actions":[{"launch_missiles":{}}]}"#, ""),
            "unknown variant `launch_missiles`",
        ),
        (
            "hostile-enormous",
            enormous(),
            "over the 1048576-byte output limit",
        ),
        (
            "hostile-import",
            module(
                1,
                "",
                ok,
                r#"(import "wasi_snapshot_preview1" "fd_write" (func (param i32 i32 i32 i32) (result i32)))"#,
            ),
            "it imports `wasi_snapshot_preview1::fd_write`",
        ),
    ]
}

/// A module claiming a 2 MiB output. The length is checked before any byte is read, so the
/// claim alone is refused (its 1 MiB cap could not hold the bytes anyway).
fn enormous() -> Vec<u8> {
    wat::parse_str(
        r#"(module
  (memory (export "memory") 1)
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
  (func (export "message") (param i32 i32) (result i32)
    (i32.store (i32.const 2048) (i32.const 0))
    (i32.store (i32.const 2052) (i32.const 2097152))
    (i32.const 2048)))"#,
    )
    .expect("WAT")
}

#[tokio::test]
async fn hostile_hooks_fail_closed_with_their_cause_and_others_keep_flowing() {
    let fixtures = hostile_fixtures();
    let templates = fixtures
        .iter()
        .map(|(name, bytes, _)| hostile(name, bytes, "fail_closed", DEFAULT_LIMITS))
        .collect();
    let h = harness(templates);
    // A healthy conversation on a template without a hook, interleaved with every failure.
    let healthy = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    for (name, _, cause) in &fixtures {
        let view = h.start(name, "alice", &["bob"], json!({})).await;
        let error = expect_error(
            h.send(&view.id, "alice", msg("request", json!({"n": 1})))
                .await,
            "hook_failed",
            ErrorKind::Unprocessable,
        );
        let text = error.to_string();
        assert!(
            text.contains("hook `hook.wasm` failed at on_message") && text.contains(cause),
            "{name}: {text}"
        );
        assert_unchanged(&h, &view).await;
        // The engine is fine: the next message of another conversation goes through.
        h.ok(
            &healthy.id,
            "alice",
            msg("query-if", json!({"alive": name})),
        )
        .await;
    }
    assert_eq!(h.view(&healthy.id).await.messages.len(), fixtures.len());
}

#[tokio::test]
async fn hostile_hooks_fail_open_with_a_hook_error_violation() {
    let fixtures = hostile_fixtures();
    let templates = fixtures
        .iter()
        .map(|(name, bytes, _)| hostile(name, bytes, "fail_open", DEFAULT_LIMITS))
        .collect();
    let h = harness(templates);
    for (name, _, cause) in &fixtures {
        let view = h.start(name, "alice", &["bob"], json!({})).await;
        let receipt = h
            .ok(&view.id, "alice", msg("request", json!({"n": 1})))
            .await;
        assert_eq!(receipt.transitions.len(), 1, "{name}: the message moved on");
        let view = h.view(&view.id).await;
        let errors = violations_of(&view, ViolationKind::HookError);
        assert_eq!(errors.len(), 1, "{name}: {:?}", view.violations);
        assert!(
            errors[0].detail.contains(cause) && errors[0].detail.contains("fail_open"),
            "{name}: {}",
            errors[0].detail
        );
        assert_eq!(
            errors[0].message_id,
            view.messages.last().map(|m| m.id.clone())
        );
    }
}

// --- the quick starts of docs/hooks-python.md and docs/hooks-js.md -----------------------

/// The quick start's template (`guest-sdk/<kit>/examples/quickstart/<file>`) beside its hook
/// as the doc builds it (`my_hook.wasm`; templates/examples/build.sh builds it to
/// `target/hooks/<language>/quickstart.wasm`), in a scratch directory.
fn quick_start(kit: &str, language: &str, file: &str) -> CompiledTemplate {
    let source = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../guest-sdk")
        .join(kit)
        .join("examples/quickstart");
    let dir = scratch_root().join(format!("{}-quick-start-{language}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::copy(source.join(file), dir.join(file)).expect("the quick start's template");
    std::fs::write(
        dir.join("my_hook.wasm"),
        built_fixture(language, "quickstart.wasm"),
    )
    .expect("the quick start's hook");
    TemplateCompiler::new()
        .compile_file(&dir.join(file))
        .unwrap_or_else(|diagnostics| panic!("{file} does not compile:\n{diagnostics}"))
}

#[tokio::test]
async fn the_python_quick_start_runs_as_its_doc_says() {
    let h = harness(vec![quick_start("python", "python", "triage.yaml")]);
    let view = h.start("triage", "alice", &["support"], json!({})).await;
    let error = expect_error(
        h.send(&view.id, "alice", msg("request", json!({"urgent": true})))
            .await,
        "rejected",
        ErrorKind::Unprocessable,
    );
    assert!(
        error
            .to_string()
            .contains("a request needs a ticket number"),
        "{error}"
    );
    let receipt = h
        .ok(
            &view.id,
            "alice",
            msg("request", json!({"ticket": "T-1", "urgent": true})),
        )
        .await;
    let receivers: Vec<&str> = receipt.receivers.iter().map(|r| &**r).collect();
    assert_eq!(receivers, ["support", "on-call"]);
    assert_eq!(h.view(&view.id).await.vars["priority"], "high");
}

#[tokio::test]
async fn the_typescript_quick_start_runs_as_its_doc_says() {
    let h = harness(vec![quick_start("js", "js", "my-hook.yaml")]);
    let view = h.start("my-hook", "alice", &["bob"], json!({})).await;
    assert_eq!(view.vars["opened_at"], T0);
    let error = expect_error(
        h.send(&view.id, "alice", msg("request", json!({"amount": 5000})))
            .await,
        "rejected",
        ErrorKind::Unprocessable,
    );
    assert!(
        error
            .to_string()
            .contains("amount 5000 is over the limit of 1000"),
        "{error}"
    );
    h.ok(&view.id, "alice", msg("request", json!({"amount": 10})))
        .await;
    assert_eq!(h.view(&view.id).await.vars["last_amount"], 10);
}

// --- hostile components (Python and JavaScript) ------------------------------------------

/// The languages with hostile component fixtures: the directory under `target/hooks/` their
/// builds are in (guest-sdk/<language>/build-examples.sh), what their exception behaviour
/// is called, and a memory cap the interpreter starts under with room to spare.
const COMPONENT_LANGUAGES: [(&str, &str, &str); 2] = [
    (
        "python",
        "raise",
        "{ memory_bytes: 67108864, timeout_ms: 50 }",
    ),
    ("js", "throw", "{ memory_bytes: 33554432, timeout_ms: 50 }"),
];

/// A fixture component built from source (tests/fixtures/hooks/<language>/).
fn built_fixture(language: &str, file: &str) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../target/hooks")
        .join(language)
        .join(file);
    std::fs::read(&path).unwrap_or_else(|error| {
        panic!(
            "{}: {error}: run templates/examples/build.sh (scripts/test.sh does) to build the \
             fixtures from source",
            path.display()
        )
    })
}

/// Each hostile behaviour of a fixture (picked by `hooks.config.behaviour`) with the words
/// its failure must carry.
fn component_behaviours(raise: &'static str) -> [(&'static str, &'static str); 5] {
    [
        ("loop", "longer than its 50 ms budget"),
        ("memory_bomb", "bytes of memory, over its cap of"),
        (raise, "the hook trapped"),
        ("not_json", "invalid output"),
        ("too_big", "over the 1048576-byte output limit"),
    ]
}

/// A template running the `language` fixture's `hostile` component with `behaviour`.
fn hostile_component(
    language: &str,
    behaviour: &str,
    policy: &str,
    limits: &str,
) -> CompiledTemplate {
    let name = format!("hostile-{language}-{}", behaviour.replace('_', "-"));
    // The memory bomb must be stopped by its memory cap, and the oversized answer by the
    // output limit. On a loaded machine, growing to the cap (page faults included), or
    // building and copying out a megabyte of JSON in the JS interpreter, can take more than
    // 50 ms of the budget, and the budget would stop it first (CI saw both): their budget
    // does not race what the test is about.
    let limits = if behaviour == "memory_bomb" || behaviour == "too_big" {
        limits.replace("timeout_ms: 50", "timeout_ms: 1000")
    } else {
        limits.to_owned()
    };
    hooked(
        &name,
        &built_fixture(language, "hostile.wasm"),
        &format!(
            "failure_policy: {policy}\n    limits: {limits}\n    config: {{ behaviour: {behaviour} }}"
        ),
    )
    .unwrap_or_else(|diagnostics| panic!("{name} does not compile:\n{diagnostics}"))
}

#[tokio::test]
async fn hostile_python_and_javascript_hooks_are_contained_and_others_keep_flowing() {
    for (language, raise, limits) in COMPONENT_LANGUAGES {
        let behaviours = component_behaviours(raise);
        let templates = behaviours
            .iter()
            .map(|(behaviour, _)| hostile_component(language, behaviour, "fail_closed", limits))
            .chain([hostile_component(language, "ok", "fail_closed", limits)])
            .collect();
        let h = harness(templates);
        let healthy = h.start("fipa-request", "alice", &["bob"], json!({})).await;
        let calm = format!("hostile-{language}-ok");
        for (behaviour, cause) in behaviours {
            let name = format!("hostile-{language}-{}", behaviour.replace('_', "-"));
            let view = h.start(&name, "alice", &["bob"], json!({})).await;
            let error = expect_error(
                h.send(&view.id, "alice", msg("request", json!({"n": 1})))
                    .await,
                "hook_failed",
                ErrorKind::Unprocessable,
            );
            let text = error.to_string();
            assert!(text.contains(cause), "{language} {behaviour}: {text}");
            assert_unchanged(&h, &view).await;
            // The engine, and the very module on a fresh instance, carry on.
            h.ok(
                &healthy.id,
                "alice",
                msg("query-if", json!({"alive": behaviour})),
            )
            .await;
            let calm = h.start(&calm, "alice", &["bob"], json!({})).await;
            h.ok(&calm.id, "alice", msg("request", json!({"n": 2})))
                .await;
        }
    }
}

#[tokio::test]
async fn a_failing_python_or_javascript_hook_fails_open_with_a_violation() {
    for (language, raise, limits) in COMPONENT_LANGUAGES {
        let behaviours = component_behaviours(raise);
        let templates = behaviours
            .iter()
            .map(|(behaviour, _)| hostile_component(language, behaviour, "fail_open", limits))
            .collect();
        let h = harness(templates);
        for (behaviour, cause) in behaviours {
            let name = format!("hostile-{language}-{}", behaviour.replace('_', "-"));
            let view = h.start(&name, "alice", &["bob"], json!({})).await;
            let receipt = h
                .ok(&view.id, "alice", msg("request", json!({"n": 1})))
                .await;
            assert_eq!(receipt.transitions.len(), 1, "{language} {behaviour}");
            let view = h.view(&view.id).await;
            let errors = violations_of(&view, ViolationKind::HookError);
            assert_eq!(
                errors.len(),
                1,
                "{language} {behaviour}: {:?}",
                view.violations
            );
            assert!(
                errors[0].detail.contains(cause),
                "{language} {behaviour}: {}",
                errors[0].detail
            );
        }
    }
}

#[tokio::test]
async fn components_importing_wasi_are_refused_with_the_flag_that_drops_it() {
    for (language, _, limits) in COMPONENT_LANGUAGES {
        let name = format!("wasi-{language}");
        let template = hooked(
            &name,
            &built_fixture(language, "wasi.wasm"),
            &format!("failure_policy: fail_closed\n    limits: {limits}"),
        )
        .unwrap_or_else(|diagnostics| panic!("{name}: {diagnostics}"));
        assert!(
            matches!(runtime().prepare(&template), Err(HookFailure::World(_))),
            "{language}: refused at load"
        );
        let h = harness(vec![template]);
        let view = h.start(&name, "alice", &["bob"], json!({})).await;
        let error = expect_error(
            h.send(&view.id, "alice", msg("request", json!({"n": 1})))
                .await,
            "hook_failed",
            ErrorKind::Unprocessable,
        );
        let text = error.to_string();
        assert!(
            text.contains("imports `wasi:") && text.contains("--stub-wasi"),
            "{language}: {text}"
        );
        assert_unchanged(&h, &view).await;
    }
}

#[tokio::test]
async fn a_trapped_instance_is_replaced_and_the_module_keeps_working() {
    // Traps from its second call on: an instance that survived its trap would trap at every
    // later call, a fresh one answers once more.
    let extra = "(global $calls (mut i32) (i32.const 0))";
    let body = "(global.set $calls (i32.add (global.get $calls) (i32.const 1)))
                (if (i32.ge_u (global.get $calls) (i32.const 2)) (then unreachable))";
    let bytes = module(
        1,
        body,
        r#"{"actions":[{"set_vars":{"seen":true}}]}"#,
        extra,
    );
    let h = harness(vec![hostile(
        "flaky",
        &bytes,
        "fail_closed",
        DEFAULT_LIMITS,
    )]);
    for round in 0..2 {
        let view = h.start("flaky", "alice", &["bob"], json!({})).await;
        h.ok(&view.id, "alice", msg("request", json!({"round": round})))
            .await;
        assert_eq!(h.view(&view.id).await.vars["seen"], true);
        let view = h.start("flaky", "alice", &["bob"], json!({})).await;
        expect_error(
            h.send(&view.id, "alice", msg("request", json!({"round": round})))
                .await,
            "hook_failed",
            ErrorKind::Unprocessable,
        );
    }
    let trap = hostile(
        "trap-then",
        &module(1, "unreachable", "{}", ""),
        "fail_closed",
        DEFAULT_LIMITS,
    );
    let h = harness(vec![trap]);
    let view = h.start("trap-then", "alice", &["bob"], json!({})).await;
    for _ in 0..3 {
        expect_error(
            h.send(&view.id, "alice", msg("request", json!({}))).await,
            "hook_failed",
            ErrorKind::Unprocessable,
        );
    }
}

#[tokio::test]
async fn restating_a_variable_records_no_event() {
    // Answers the same `set_vars` at every message: only the first changes anything.
    let bytes = module(1, "", r#"{"actions":[{"set_vars":{"seen":true}}]}"#, "");
    let h = harness(vec![hostile(
        "restates",
        &bytes,
        "fail_closed",
        DEFAULT_LIMITS,
    )]);
    let view = h.start("restates", "alice", &["bob"], json!({})).await;
    h.ok(&view.id, "alice", msg("request", json!({}))).await;
    h.ok(&view.id, "bob", msg("agree", json!({}))).await;
    h.ok(&view.id, "bob", msg("inform", json!({"done": true})))
        .await;
    assert_eq!(h.view(&view.id).await.vars, json!({"seen": true}));
    let events = h.engine.events(&view.id, None, 0).await.expect("events");
    let merges = events
        .iter()
        .filter(|event| {
            matches!(
                event.kind,
                colloquy_protocol::event::EventKind::VarsMerged { .. }
            )
        })
        .count();
    assert_eq!(merges, 1, "three hook answers, one change");
}

/// A module whose `message` answers `set_vars {"event": <the event it was given>}`.
fn echo_module() -> Vec<u8> {
    let prefix = r#"{"actions":[{"set_vars":{"event":"#;
    let suffix = "}}]}";
    let escape = |text: &str| -> String { text.bytes().map(|b| format!("\\{b:02x}")).collect() };
    let text = format!(
        r#"(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 0) "{prefix}")
  (data (i32.const 64) "{suffix}")
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $at i32)
    (local.set $at (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get 3)))
    (local.get $at))
  (func (export "message") (param $ptr i32) (param $len i32) (result i32)
    ;; The answer at 16384: prefix, the event, suffix.
    (memory.copy (i32.const 16384) (i32.const 0) (i32.const {plen}))
    (memory.copy (i32.add (i32.const 16384) (i32.const {plen})) (local.get $ptr) (local.get $len))
    (memory.copy (i32.add (i32.add (i32.const 16384) (i32.const {plen})) (local.get $len))
      (i32.const 64) (i32.const {slen}))
    (i32.store (i32.const 2048) (i32.const 16384))
    (i32.store (i32.const 2052) (i32.add (local.get $len) (i32.const {total})))
    (i32.const 2048))
  (func (export "cabi_post_message") (param i32) (global.set $heap (i32.const 4096))))"#,
        prefix = escape(prefix),
        suffix = escape(suffix),
        plen = prefix.len(),
        slen = suffix.len(),
        total = prefix.len() + suffix.len(),
    );
    wat::parse_str(&text).unwrap_or_else(|error| panic!("echo WAT: {error}\n{text}"))
}

#[tokio::test]
async fn hooks_reads_limits_the_event_to_the_parts_listed() {
    let everything = hooked("echo-all", &echo_module(), "limits: { timeout_ms: 50 }")
        .expect("echo-all compiles");
    let threads_only = hooked("echo-threads", &echo_module(), "reads: [threads, vars]")
        .expect("echo-threads compiles");
    let h = harness(vec![everything, threads_only]);
    let keys = |event: &Value| -> Vec<String> {
        let mut keys: Vec<String> = event["conversation"]
            .as_object()
            .expect("conversation")
            .keys()
            .cloned()
            .collect();
        keys.sort();
        keys
    };

    let params = json!({"topic": "rooms"});
    // The event the hook of `template` saw for a request with `content`.
    let echoed = async |template: &str, content: Value| -> Value {
        let view = h.start(template, "alice", &["bob"], params.clone()).await;
        h.ok(&view.id, "alice", msg("request", content)).await;
        h.view(&view.id).await.vars["event"].clone()
    };

    let event = echoed("echo-all", json!({"n": 1})).await;
    assert_eq!(
        keys(&event),
        [
            "context",
            "deadline",
            "id",
            "initiator",
            "parameters",
            "participants",
            "retry_attempts",
            "revision",
            "status",
            "template",
            "threads",
            "vars"
        ],
        "{event}"
    );
    assert_eq!(event["conversation"]["parameters"], params);

    let event = echoed("echo-threads", json!({"n": 2})).await;
    assert_eq!(
        keys(&event),
        [
            "deadline",
            "id",
            "retry_attempts",
            "status",
            "threads",
            "vars"
        ],
        "{event}"
    );
    assert_eq!(event["conversation"]["threads"][0]["participant"], "bob");
    assert_eq!(event["message"]["content"], json!({"n": 2}));
    assert_eq!(event["hook"], "on_message");
}

#[test]
fn hooks_reads_with_an_unknown_part_is_a_template_error() {
    let error = hooked("echo-bad", &echo_module(), "reads: [threads, everything]")
        .expect_err("an unknown part is refused");
    let text = error.to_string();
    assert!(text.contains("everything"), "{text}");
    assert!(
        text.contains("threads") && text.contains("parties"),
        "{text}"
    );
}

#[tokio::test]
async fn an_engine_without_a_hook_runtime_refuses_rather_than_skips() {
    let template = hostile(
        "no-runtime",
        &module(1, "", "{}", ""),
        "fail_closed",
        DEFAULT_LIMITS,
    );
    let h = Harness::with(vec![template]);
    let view = h.start("no-runtime", "alice", &["bob"], json!({})).await;
    let error = expect_error(
        h.send(&view.id, "alice", msg("request", json!({}))).await,
        "hook_failed",
        ErrorKind::Unprocessable,
    );
    assert!(error.to_string().contains("no hook runtime"), "{error}");
}

#[test]
fn a_rebuilt_module_makes_a_new_revision() {
    let first = hostile(
        "rev",
        &module(1, "", "{}", ""),
        "fail_closed",
        DEFAULT_LIMITS,
    );
    let second = hostile(
        "rev",
        &module(1, "", "{ }", ""),
        "fail_closed",
        DEFAULT_LIMITS,
    );
    assert_ne!(first.revision, second.revision);
    let module = second.hook_module.as_ref().expect("module read");
    assert_eq!(module.sha256.len(), 64);
}

// --- the ABI's published artefacts ----------------------------------------------------

#[test]
fn published_hook_schemas_match_the_protocol_types() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs");
    for (file, schema) in [
        ("hook-input.schema.json", hook_input_json_schema()),
        ("hook-output.schema.json", hook_output_json_schema()),
    ] {
        let published: Value = std::fs::read_to_string(docs.join(file))
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or(Value::Null);
        if std::env::var_os("COLLOQUY_BLESS").is_some() && published != schema {
            let text = serde_json::to_string_pretty(&schema).expect("JSON") + "\n";
            std::fs::write(docs.join(file), text).expect("write schema");
            continue;
        }
        assert_eq!(
            published, schema,
            "docs/{file} is stale: rerun this test with COLLOQUY_BLESS=1 to regenerate it"
        );
    }
}

#[test]
fn guest_sdk_actions_parse_as_protocol_actions() {
    use colloquy_guest::{Action, Outcome};
    let actions = vec![
        Action::Continue,
        Action::reject("no"),
        Action::set_var("status", "pending"),
        Action::send("inform", "carol", json!({"hi": 1})),
        Action::route_to(["risk"]),
        Action::SetDeadline { in_ms: 5 },
        Action::ExtendDeadline { by_ms: 5 },
        Action::retry(1000, 2.0, 3),
        Action::complete(Outcome::Escalated, "handed over"),
        Action::escalate("human-review", "why"),
        Action::Log {
            level: colloquy_guest::LogLevel::Warn,
            message: "careful".into(),
        },
    ];
    let json = json!({ "actions": actions });
    let parsed: HookOutput = serde_json::from_value(json).expect("protocol reads SDK output");
    assert_eq!(parsed.actions.len(), actions.len());
}
