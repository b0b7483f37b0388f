//! Unit tests of the runtime's own machinery: link checks, instance reuse, the AOT cache.
//! Hostile modules against the whole pipeline are in `tests/tests/e2e/hooks.rs`.

use std::path::PathBuf;

use colloquy_policy::{CompiledTemplate, TemplateCompiler};
use colloquy_protocol::hook::HookOutput;
use serde_json::json;

use super::*;

const TEMPLATE: &str = r#"
apiVersion: colloquy.dev/v1
kind: ConversationTemplate
metadata: { name: unit, version: 1.0.0 }
spec:
  roles: { participants: { min: 1 } }
  thread:
    initial: open
    on_expiry: done
    states:
      open: { transitions: [{ performative: inform, from: initiator, to: done }] }
      done: { terminal: success }
  hooks: { module: hook.wasm, events: [on_message] }
"#;

pub(super) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "colloquy-runtime-unit-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

fn template(name: &str, wat: &str) -> CompiledTemplate {
    template_from_bytes(name, &wat::parse_str(wat).expect("WAT"))
}

/// The unit template with `bytes` as its hook.
pub(super) fn template_from_bytes(name: &str, bytes: &[u8]) -> CompiledTemplate {
    let dir = scratch(name);
    std::fs::write(dir.join("hook.wasm"), bytes).expect("module");
    std::fs::write(dir.join("unit.yaml"), TEMPLATE).expect("template");
    TemplateCompiler::new()
        .compile_file(&dir.join("unit.yaml"))
        .unwrap_or_else(|diagnostics| panic!("{diagnostics}"))
}

/// Answers `{"actions":["continue"]}`.
const GOOD: &str = r#"(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{\"actions\":[\"continue\"]}")
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
  (func (export "message") (param i32 i32) (result i32)
    (i32.store (i32.const 2048) (i32.const 0))
    (i32.store (i32.const 2052) (i32.const 24))
    (i32.const 2048)))"#;

pub(super) fn runtime(cache_dir: Option<PathBuf>) -> HookRuntime {
    HookRuntime::new(HookRuntimeConfig {
        cache_dir,
        max_instances: 16,
        idle_instances_per_module: 2,
        ..HookRuntimeConfig::default()
    })
    .expect("runtime")
}

fn input() -> serde_json::Value {
    json!({
        "abi_version": 1, "hook": "on_message", "now": 1,
        "conversation": {"id": "c", "template": "unit", "revision": "r", "status": "active",
            "initiator": "a", "participants": ["b"], "threads": [], "vars": {},
            "parameters": {}, "context": {}, "retry_attempts": 0},
        "config": null
    })
}

pub(super) fn call(
    runtime: &HookRuntime,
    template: &CompiledTemplate,
) -> Result<HookOutput, HookFailure> {
    let value = input();
    let input: HookInput<'_> = serde_json::from_value(value).expect("input");
    runtime.call(template, HookEvent::OnMessage, &input)
}

#[test]
fn a_call_round_trips_and_its_instance_is_reused() {
    let runtime = runtime(None);
    let template = template("reuse", GOOD);
    for _ in 0..3 {
        let output = call(&runtime, &template).expect("call");
        assert_eq!(output.actions.len(), 1);
    }
    let module = runtime.module(&template).expect("loaded");
    // Without reuse, each call would have left a new instance behind (up to two idle).
    assert_eq!(module.idle_count(), 1, "one instance served every call");
}

#[test]
fn prepare_reports_an_event_the_module_lacks() {
    let runtime = runtime(None);
    let mut template = template("lacks", GOOD);
    if let Some(spec) = template.hooks.as_mut() {
        spec.events.push(HookEvent::OnTimeout);
    }
    assert_eq!(
        runtime.prepare(&template),
        Err(HookFailure::MissingEvent {
            event: "on_timeout",
            export: "timeout"
        })
    );
}

#[test]
fn a_background_prepare_answers_compiling_then_tells_its_listener() {
    let runtime = Arc::new(runtime(None));
    let good = template("background", GOOD);
    let foreign = template(
        "background-foreign",
        &GOOD.replacen("(module", r#"(module (import "env" "abort" (func))"#, 1),
    );
    let (told, heard) = std::sync::mpsc::channel::<String>();
    let listener: CompileListener = Arc::new(move |sha256: &str| {
        // The test may have given up waiting: nobody to tell.
        let _ = told.send(sha256.to_owned());
    });
    assert_eq!(
        runtime.prepare_in_background(&good, &listener),
        Preparation::Compiling
    );
    // Queued behind the first (one compile thread); asked for again while it waits or
    // compiles, it is not compiled twice.
    assert_eq!(
        runtime.prepare_in_background(&foreign, &listener),
        Preparation::Compiling
    );
    let again = runtime.prepare_in_background(&foreign, &listener);
    assert!(
        matches!(
            again,
            Preparation::Compiling | Preparation::Refused(HookFailure::Link(_))
        ),
        "{again:?}"
    );
    let wait = Duration::from_secs(60);
    let mut ended = vec![
        heard.recv_timeout(wait).expect("first compile ended"),
        heard.recv_timeout(wait).expect("second compile ended"),
    ];
    ended.sort();
    let mut expected = vec![
        good.hook_module
            .as_ref()
            .expect("module")
            .sha256
            .to_string(),
        foreign
            .hook_module
            .as_ref()
            .expect("module")
            .sha256
            .to_string(),
    ];
    expected.sort();
    assert_eq!(ended, expected);

    assert_eq!(
        runtime.prepare_in_background(&good, &listener),
        Preparation::Ready
    );
    assert!(matches!(
        runtime.prepare_in_background(&foreign, &listener),
        Preparation::Refused(HookFailure::Link(_))
    ));
    // Whether the module fits is the template's business: the same module, one more event.
    let mut lacking = template("background-lacks", GOOD);
    if let Some(spec) = lacking.hooks.as_mut() {
        spec.events.push(HookEvent::OnTimeout);
    }
    assert_eq!(
        runtime.prepare_in_background(&lacking, &listener),
        Preparation::Refused(HookFailure::MissingEvent {
            event: "on_timeout",
            export: "timeout"
        })
    );
}

#[test]
fn foreign_imports_and_missing_memory_are_refused_at_load() {
    let runtime = runtime(None);
    let foreign = template(
        "foreign",
        &GOOD.replacen("(module", r#"(module (import "env" "abort" (func))"#, 1),
    );
    match call(&runtime, &foreign) {
        Err(HookFailure::Link(detail)) => assert!(detail.contains("`env::abort`"), "{detail}"),
        other => panic!("expected a link failure, got {other:?}"),
    }
    let no_memory = template(
        "no-memory",
        r#"(module (func (export "hooks_abi_version") (result i32) (i32.const 1)))"#,
    );
    assert_eq!(
        call(&runtime, &no_memory),
        Err(HookFailure::Link("no `memory` export".into()))
    );
}

#[test]
fn the_aot_cache_is_written_and_a_bad_file_is_replaced() {
    let dir = scratch("aot");
    let template = template("aot-module", GOOD);
    call(&runtime(Some(dir.clone())), &template).expect("first call compiles");
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("cache dir")
        .map(|entry| entry.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().and_then(|n| n.to_str()).unwrap_or("");
    let sha = &template.hook_module.as_ref().expect("module").sha256;
    assert!(
        name.starts_with(&**sha) && name.ends_with(".cwasm"),
        "{name}"
    );
    // A second runtime reads it back; a corrupted file is recompiled and rewritten.
    call(&runtime(Some(dir.clone())), &template).expect("from the cache");
    std::fs::write(&files[0], b"garbage").expect("corrupt");
    call(&runtime(Some(dir.clone())), &template).expect("recompiled");
    assert_ne!(std::fs::read(&files[0]).expect("rewritten"), b"garbage");
}

#[cfg(unix)]
#[test]
fn a_cache_directory_others_can_write_is_not_used() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("aot-shared");
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let template = template("aot-shared-module", GOOD);
    call(&runtime(Some(dir.clone())), &template).expect("compiles without the cache");
    let files = std::fs::read_dir(&dir).expect("dir").count();
    assert_eq!(
        files, 0,
        "nothing is cached in (or loaded from) a shared directory"
    );
    // A missing directory is created private and used.
    let fresh = scratch("aot-fresh").join("cache");
    call(&runtime(Some(fresh.clone())), &template).expect("compiles");
    let mode = std::fs::metadata(&fresh)
        .expect("created")
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "created for this user only: {mode:o}");
    assert_eq!(std::fs::read_dir(&fresh).expect("dir").count(), 1);
}

#[test]
fn operators_counts_what_a_call_executes() {
    let wasm = wat::parse_str(GOOD).expect("WAT");
    let value = input();
    let input: HookInput<'_> = serde_json::from_value(value).expect("input");
    let used = operators::per_call(&wasm, HookEvent::OnMessage, &input, 3).expect("counted");
    // `cabi_realloc` has one operator before its end, `message` seven (four constants, two
    // stores, the returned constant); wasmtime 48 charges 10 for the pair, every call.
    assert_eq!(used, vec![10, 10, 10]);
    let missing = operators::per_call(&wasm, HookEvent::OnTimeout, &input, 1);
    assert!(
        matches!(missing, Err(HookFailure::MissingEvent { .. })),
        "{missing:?}"
    );
}

/// A module whose `message` answers `output` (laid out at 64 KiB) and that has a
/// `cabi_post_message`, as the SDK's modules do.
fn answering_with_post(output: &str) -> String {
    let escaped = output.replace('\\', "\\\\").replace('"', "\\\"");
    let pages = (65_536 + output.len()).div_ceil(65_536);
    format!(
        r#"(module
  (memory (export "memory") {pages})
  (data (i32.const 65536) "{escaped}")
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
  (func (export "message") (param i32 i32) (result i32)
    (i32.store (i32.const 2048) (i32.const 65536))
    (i32.store (i32.const 2052) (i32.const {len}))
    (i32.const 2048))
  (func (export "cabi_post_message") (param i32)))"#,
        len = output.len()
    )
}

#[test]
fn reading_the_answer_is_not_charged_to_the_hooks_budget() {
    // An answer of nearly 1 MiB takes the host milliseconds to read, far more than the
    // hook's 1 ms budget, while the hook itself only returns a pointer. The host reads it
    // between `message` and `cabi_post_message`; were that time the hook's, the budget would
    // stop the post-return call. (On a VM whose fresh memory takes milliseconds to touch,
    // reading an ordinary answer did that to the credit policy: see `budget`.)
    let vars: Vec<String> = (0..19_000)
        .map(|index| format!(r#""v{index:05}":"{}""#, "x".repeat(40)))
        .collect();
    let output = format!(r#"{{"actions":[{{"set_vars":{{{}}}}}]}}"#, vars.join(","));
    assert!(output.len() <= MAX_OUTPUT_BYTES, "{} bytes", output.len());
    let runtime = runtime(None);
    let mut template = template("host-time", &answering_with_post(&output));
    if let Some(spec) = template.hooks.as_mut() {
        spec.limits.timeout_ms = 1;
    }
    for _ in 0..3 {
        let output = call(&runtime, &template).expect("the hook keeps within its budget");
        assert_eq!(output.actions.len(), 1);
    }
}

/// Loops for ever at `message`.
const SPIN: &str = r#"(module
  (memory (export "memory") 1)
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
  (func (export "message") (param i32 i32) (result i32) (loop $forever (br $forever)) (i32.const 0)))"#;

/// Hooks whose budget is longer than the ticker's window (2 s against 1 s) are stopped batch
/// after batch, on threads that call again and again as the hook pool's do. The second
/// batch, started after the ticker had parked, used to run for ever: the period forgot its
/// budget before the first tick came.
#[test]
fn hooks_with_budgets_longer_than_the_tickers_window_are_stopped_batch_after_batch() {
    let runtime = Arc::new(
        HookRuntime::new(HookRuntimeConfig {
            cache_dir: None,
            max_timeout: Duration::from_secs(2),
            ..HookRuntimeConfig::default()
        })
        .expect("runtime"),
    );
    let mut template = template("spin-batches", SPIN);
    if let Some(spec) = template.hooks.as_mut() {
        spec.limits.timeout_ms = 2000;
    }
    let template = Arc::new(template);
    let threads = 2;
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let starts: Vec<_> = (0..threads)
        .map(|_| {
            let (start_tx, start_rx) = std::sync::mpsc::channel::<()>();
            let (runtime, template, done_tx) = (runtime.clone(), template.clone(), done_tx.clone());
            std::thread::spawn(move || {
                while start_rx.recv().is_ok() {
                    let _ = done_tx.send(call(&runtime, &template));
                }
            });
            start_tx
        })
        .collect();
    for batch in 0..2 {
        for start in &starts {
            start.send(()).expect("the thread waits");
        }
        for _ in 0..threads {
            // Budget 2 s, and 1 s more at most in wall time: 15 s is a hang, not a slow call.
            let result = done_rx
                .recv_timeout(Duration::from_secs(15))
                .unwrap_or_else(|_| panic!("a spinning hook of batch {batch} was never stopped"));
            assert!(
                matches!(result, Err(HookFailure::Timeout { ms: 2000 })),
                "{result:?}"
            );
        }
        // Long enough for the ticker to park between batches.
        std::thread::sleep(ticker::IDLE_BEFORE_PARKING * 3);
    }
}

/// A call tried inline (on an async worker) never instantiates: with no idle instance it
/// goes to the pool, which makes one. A quick module's calls then stay inline.
#[test]
fn an_async_worker_runs_calls_on_warm_instances_only() {
    let runtime = runtime(None);
    let quick = template("inline-quick", GOOD);
    let value = input();
    let input: HookInput<'_> = serde_json::from_value(value).expect("input");
    assert!(
        !runtime.runs_inline(&quick),
        "not loaded yet: loading is the pool's"
    );
    runtime.prepare(&quick).expect("loads");
    assert!(runtime.runs_inline(&quick));
    assert_eq!(
        runtime.call_at(CallSite::Inline, &quick, HookEvent::OnMessage, &input),
        Err(HookFailure::NeedsPool),
        "no warm instance yet"
    );
    runtime
        .call_at(CallSite::Owned, &quick, HookEvent::OnMessage, &input)
        .expect("the pool's call instantiates");
    for _ in 0..3 {
        runtime
            .call_at(CallSite::Inline, &quick, HookEvent::OnMessage, &input)
            .expect("a quick hook answers inline");
    }
    assert!(runtime.runs_inline(&quick));
}

/// A call tried inline is held to the slice; after a few that run past it, the module's
/// calls move to the pool for good, where a call gets its whole budget.
#[test]
fn a_module_whose_calls_run_past_the_inline_slice_moves_to_the_pool() {
    let runtime = runtime(None);
    // Quick at an instance's first call (which the pool makes), loops from its second on.
    let late_spinner = GOOD.replacen(
        "(func (export \"message\") (param i32 i32) (result i32)",
        "(global $calls (mut i32) (i32.const 0))
  (func (export \"message\") (param i32 i32) (result i32)
    (global.set $calls (i32.add (global.get $calls) (i32.const 1)))
    (if (i32.ge_u (global.get $calls) (i32.const 2)) (then (loop $spin (br $spin))))",
        1,
    );
    let mut template = template("inline-late-spin", &late_spinner);
    if let Some(spec) = template.hooks.as_mut() {
        spec.limits.timeout_ms = 50;
    }
    let value = input();
    let input: HookInput<'_> = serde_json::from_value(value).expect("input");
    runtime.prepare(&template).expect("loads");
    // Overruns whose thread the OS kept from a core (a busy machine) count apart.
    let most = module::INLINE_OVERRUNS + module::STARVED_OVERRUNS - 1;
    let mut overruns = 0;
    while runtime.runs_inline(&template) {
        overruns += 1;
        assert!(overruns <= most, "still inline after {most} overruns");
        runtime
            .call_at(CallSite::Owned, &template, HookEvent::OnMessage, &input)
            .expect("a fresh instance's first call answers");
        let started = Instant::now();
        assert_eq!(
            runtime.call_at(CallSite::Inline, &template, HookEvent::OnMessage, &input),
            Err(HookFailure::NeedsPool)
        );
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "stopped at the slice, not the budget"
        );
    }
    assert!(
        overruns >= module::INLINE_OVERRUNS.min(module::STARVED_OVERRUNS),
        "pooled after {overruns} overruns"
    );
    runtime
        .call_at(CallSite::Owned, &template, HookEvent::OnMessage, &input)
        .expect("a fresh instance's first call answers");
    assert_eq!(
        runtime.call_at(CallSite::Inline, &template, HookEvent::OnMessage, &input),
        Err(HookFailure::NeedsPool),
        "not even tried inline"
    );
    assert_eq!(
        runtime.call_at(CallSite::Owned, &template, HookEvent::OnMessage, &input),
        Err(HookFailure::Timeout { ms: 50 }),
        "the pool gives it its whole budget"
    );
}

/// Overruns of calls whose thread the OS kept from a core move a module to the pool only
/// when they come in a row: an answer inline starts their count again.
#[test]
fn starved_overruns_move_a_module_only_when_they_come_in_a_row() {
    let runtime = runtime(None);
    let template = template("inline-starved", GOOD);
    let value = input();
    let input: HookInput<'_> = serde_json::from_value(value).expect("input");
    runtime.prepare(&template).expect("loads");
    runtime
        .call_at(CallSite::Owned, &template, HookEvent::OnMessage, &input)
        .expect("the pool's call makes a warm instance");
    let module = runtime.module(&template).expect("loaded");
    for _ in 0..3 {
        for _ in 1..module::STARVED_OVERRUNS {
            module.overran_inline(true);
        }
        runtime
            .call_at(CallSite::Inline, &template, HookEvent::OnMessage, &input)
            .expect("answers inline");
    }
    assert!(runtime.runs_inline(&template));
    for _ in 0..module::STARVED_OVERRUNS {
        module.overran_inline(true);
    }
    assert!(
        !runtime.runs_inline(&template),
        "pooled after a run of them"
    );
}

/// Warming makes idle instances, up to what the runtime keeps, each having answered once:
/// a call tried inline then finds one, where it would otherwise go to the pool.
#[test]
fn warming_makes_idle_instances_that_inline_calls_find() {
    let runtime = runtime(None);
    let warmed = template("warmed", GOOD);
    let value = input();
    let input: HookInput<'_> = serde_json::from_value(value).expect("input");
    assert_eq!(
        runtime.warm(&warmed, HookEvent::OnMessage, &input, 5),
        Ok(2),
        "as many as the runtime keeps idle"
    );
    let module = runtime.module(&warmed).expect("loaded");
    assert_eq!(module.idle_count(), 2);
    runtime
        .call_at(CallSite::Inline, &warmed, HookEvent::OnMessage, &input)
        .expect("a warm instance answers inline");
    assert_eq!(module.idle_count(), 2, "the instance went back");
    let trapping = template(
        "warmed-trap",
        &GOOD.replacen(
            "(i32.store (i32.const 2048)",
            "unreachable (i32.store (i32.const 2048)",
            1,
        ),
    );
    assert!(matches!(
        runtime.warm(&trapping, HookEvent::OnMessage, &input, 1),
        Err(HookFailure::Trap(_))
    ));
    let module = runtime.module(&trapping).expect("loaded");
    assert_eq!(
        module.idle_count(),
        0,
        "an instance that failed is not kept"
    );
}
