//! Per-message cost of a wasm hook, against the same pipeline without a hook in the same
//! run. Run with `cargo bench -p colloquy-hooks --bench hooks` after
//! `templates/examples/build.sh` (it uses the C amount guard and the Rust credit policy).
//!
//! Six templates share one protocol (the initiator's `request` loops in state `open`), so
//! every message is parsed, schema-validated, run through the state machine and stored;
//! five of them also run an `on_message` hook: a trivial C hook (`trivial_hook.c`, answers
//! `{}`: the ABI round trip alone), a WAT hook that answers the credit policy's `set_vars`
//! without reading the event (`set_vars_hook.wat`: the least a hook with that answer costs),
//! the C amount guard (scans the event, answers `{}`) and the Rust credit-assessment policy
//! (the guest SDK reads the event, borrowing and parsing only the fields the hook asks for;
//! the hook reads three of them and answers `set_vars` on every request), twice:
//! `rust-hook` with the whole event, `rust-reads` with the event cut to the parts its
//! template's `hooks.reads` lists (`threads`), as the example ships. `py-reads` and
//! `js-reads` run the same policy written in Python (a componentize-py component) and in
//! TypeScript (a componentize-qjs component, QuickJS), as `rust-reads` runs the Rust build,
//! with their example templates' memory caps (`guest-sdk/python/build-examples.sh` and
//! `guest-sdk/js/build-examples.sh` build them; `templates/examples/build.sh` runs both).
//! One thread; the best of several interleaved rounds is reported. Each timed run starts a
//! fresh engine on an empty memory store, so no variant runs on a store the others filled.
//!
//! A second table times the hook calls alone (`HookRuntime::call` on a fixed event shaped
//! like the pipeline's: encode, copy in, run, parse the answer), without the engine around
//! them, so the hook's own cost is not lost in the pipeline's noise.
//!
//! A third table weighs each build of the credit policy as a binary form (core module or
//! component): how long it takes to compile, the size of its compiled code (the hook
//! cache's file), how long loading it from that cache takes, and what a new instance costs
//! (instantiating it and its first call, the slow one for an interpreter, as
//! `HookRuntime::warm` makes it) in time and in resident memory while it waits idle.
//! Arguments: `--messages N` per round and variant (default 200 000); `--calls-only` runs
//! the second table alone; `--forms-only` the third alone; `--only NAME[,NAME...]` runs
//! those variants (and the no-hook
//! baseline of the pipeline table); `--spaced-ms MS` (with `--calls-only`) waits MS
//! milliseconds before each call and times the calls alone (1 000 per round), as on a
//! lightly loaded engine where each call finds caches cold and the epoch ticker possibly
//! parked. `--rounds N` sets how many interleaved rounds run (the
//! best counts; more rounds ride out a noisy machine better), and `--compare PATH` adds a
//! variant `compare` running the module at PATH as `rust-reads` runs the credit policy (to
//! compare two builds of a hook, e.g. with two SDK versions, in one run). `--operators`
//! prints instead the wasm operators one call of each hook executes (wasmtime fuel): a
//! count that the machine's load does not move, for changes too small to time here.
//!
//! `hook_ceilings.sh` beside this file runs it with two builds of the credit policy that
//! skip reading the event: what the Rust SDK would cost if reading were free.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use colloquy_core::store::MemoryStore;
use colloquy_core::{Engine, EngineConfig, SystemClock};
use colloquy_hooks::{BinaryForm, HookRuntime, HookRuntimeConfig, operators};
use colloquy_policy::{Catalog, CompiledTemplate, TemplateCompiler};
use colloquy_protocol::hook::HookInput;
use colloquy_protocol::message::{SendMessage, StartConversation};
use colloquy_protocol::template::{ConversationPart, HookEvent};

#[path = "../../bench_support.rs"]
mod support;
use serde_json::json;
use support::arg;

/// The allocator the `colloquy` binary uses, so the figures are the server's.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Messages per conversation: long enough that starting one is noise, short enough that the
/// event log stays small.
const MESSAGES_PER_CONVERSATION: usize = 20;
/// Interleaved rounds by default (`--rounds N`); the fastest of each variant counts.
const ROUNDS: usize = 3;
/// Calls per round and variant with `--spaced-ms`.
const SPACED_CALLS: usize = 1_000;

/// Instances `HookRuntime::warm` makes per build in the forms table.
const WARMED_INSTANCES: usize = 16;

/// A hook variant: its module (under `templates/examples/`), its `config`, the extra
/// `hooks` settings (YAML, inside the flow mapping), and its memory cap (`None`: the
/// default).
#[derive(Clone, Copy)]
struct Hook {
    module: &'static str,
    config: &'static str,
    settings: &'static str,
    memory_bytes: Option<u64>,
}

impl Hook {
    const fn new(module: &'static str, config: &'static str, settings: &'static str) -> Hook {
        Hook {
            module,
            config,
            settings,
            memory_bytes: None,
        }
    }

    /// The credit policy's build at `module`, configured and cut as its example ships.
    const fn credit(module: &'static str, memory_bytes: Option<u64>) -> Hook {
        Hook {
            module,
            config: "{ max_amount: 100000 }",
            settings: ", reads: [threads]",
            memory_bytes,
        }
    }
}

fn template(name: &str, hook: Option<Hook>) -> CompiledTemplate {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/examples");
    let dir = std::env::temp_dir().join(format!("colloquy-bench-hooks-{name}"));
    std::fs::create_dir_all(&dir).expect("bench dir");
    let mut yaml = format!(
        r#"apiVersion: colloquy.dev/v1
kind: ConversationTemplate
metadata: {{ name: {name}, version: 1.0.0 }}
spec:
  roles: {{ participants: {{ min: 1, max: 1 }} }}
  messages:
    request:
      schema:
        type: object
        required: [amount, purpose]
        properties: {{ amount: {{ type: integer }}, purpose: {{ type: string }} }}
  thread:
    initial: open
    on_expiry: done
    states:
      open: {{ transitions: [{{ performative: request, from: initiator, to: open }}, {{ performative: inform, from: participant, to: done }}] }}
      done: {{ terminal: success }}
"#
    );
    if let Some(hook) = hook {
        let source: PathBuf = examples.join(hook.module);
        assert!(
            source.is_file(),
            "{} is missing: run templates/examples/build.sh first",
            source.display()
        );
        std::fs::copy(&source, dir.join("hook.wasm")).expect("copy module");
        let (config, settings) = (hook.config, hook.settings);
        let memory = hook
            .memory_bytes
            .map_or(String::new(), |bytes| format!(", memory_bytes: {bytes}"));
        yaml.push_str(&format!(
            // A generous budget: on a busy machine a descheduled call must not time out.
            "  hooks: {{ module: hook.wasm, events: [on_message], config: {config}, limits: {{ timeout_ms: 1000{memory} }}{settings} }}\n"
        ));
    }
    let file = dir.join("template.yaml");
    std::fs::write(&file, yaml).expect("write template");
    TemplateCompiler::new()
        .compile_file(&file)
        .unwrap_or_else(|diagnostics| panic!("{diagnostics}"))
}

async fn messages_per_second(engine: &Engine, template: &str, messages: usize) -> f64 {
    let request = SendMessage::new("request", json!({"amount": 1200, "purpose": "a new car"}));
    let began = Instant::now();
    let mut sent = 0;
    while sent < messages {
        let start = StartConversation {
            template: template.to_owned(),
            participants: vec!["bank".to_owned()],
            parameters: json!({}),
            ..StartConversation::default()
        };
        let view = engine.start("desk", start).await.expect("start");
        for _ in 0..MESSAGES_PER_CONVERSATION {
            engine
                .send(&view.id, "desk", request.clone())
                .await
                .expect("send");
        }
        sent += MESSAGES_PER_CONVERSATION;
    }
    sent as f64 / began.elapsed().as_secs_f64()
}

/// An `on_message` event like the pipeline's (the conversation after a few messages), with
/// only the parts the template's `hooks.reads` lists.
fn sample_input(template: &CompiledTemplate) -> HookInput<'static> {
    let mut input: HookInput<'static> = serde_json::from_value(json!({
        "abi_version": 1, "hook": "on_message", "now": 1767225600000u64,
        "conversation": {
            "id": "0197a5e2-3c4d-7e8f-9a0b-1c2d3e4f5a6b", "template": template.name,
            "revision": template.revision, "status": "active",
            "initiator": "desk", "participants": ["bank"],
            "threads": [{"participant": "bank", "state": "open"}],
            "vars": {"risk_route": "standard"}, "parameters": {}, "context": {},
            "retry_attempts": 0
        },
        "message": {
            "id": "0197a5e2-3c4d-7e8f-9a0b-1c2d3e4f5a6c", "performative": "request",
            "sender": "desk", "receivers": ["bank"],
            "content": {"amount": 1200, "purpose": "a new car"}
        },
        "config": template.hooks.as_ref().map(|spec| spec.config.clone())
    }))
    .expect("sample input");
    let reads = |part| {
        template
            .hooks
            .as_ref()
            .is_none_or(|spec| spec.event_carries(part))
    };
    let conversation = &mut input.conversation;
    if !reads(ConversationPart::Template) {
        conversation.template = None;
        conversation.revision = None;
    }
    if !reads(ConversationPart::Parties) {
        conversation.initiator = None;
        conversation.participants = None;
    }
    if !reads(ConversationPart::Threads) {
        conversation.threads = None;
    }
    if !reads(ConversationPart::Vars) {
        conversation.vars = None;
    }
    if !reads(ConversationPart::Parameters) {
        conversation.parameters = None;
    }
    if !reads(ConversationPart::Context) {
        conversation.context = None;
    }
    input
}

/// Hook calls per second on a fixed event, without the engine.
fn calls_per_second(runtime: &HookRuntime, template: &CompiledTemplate, calls: usize) -> f64 {
    let input = sample_input(template);
    let spaced_ms = arg("--spaced-ms", 0) as u64;
    if spaced_ms > 0 {
        // Calls far apart, as on a lightly loaded engine: only the calls are timed.
        let calls = calls.min(SPACED_CALLS);
        let mut calling = std::time::Duration::ZERO;
        for _ in 0..calls {
            std::thread::sleep(std::time::Duration::from_millis(spaced_ms));
            let began = Instant::now();
            let output = runtime
                .call(template, HookEvent::OnMessage, &input)
                .expect("hook call");
            calling += began.elapsed();
            std::hint::black_box(output);
        }
        return calls as f64 / calling.as_secs_f64();
    }
    let began = Instant::now();
    for _ in 0..calls {
        let output = runtime
            .call(template, HookEvent::OnMessage, &input)
            .expect("hook call");
        std::hint::black_box(output);
    }
    calls as f64 / began.elapsed().as_secs_f64()
}

/// `--operators`: the wasm operators one call of each hook executes (wasmtime fuel), on the
/// calls-only table's event. Steady where timings are not: for comparing two builds.
fn print_operators(variants: &[(&str, Option<Hook>)]) {
    println!("wasm operators per call (wasmtime fuel; the third call of one instance)");
    for (name, hook) in variants {
        if hook.is_none() {
            continue;
        }
        let template = template(name, *hook);
        let module = template.hook_module.as_ref().expect("a hook module");
        if BinaryForm::of(&module.bytes).is_ok_and(|form| form == BinaryForm::Component) {
            // Fuel counts a component's interpreter, not the policy: nothing to compare.
            println!("  {name:<10} (a component: not counted)");
            continue;
        }
        let input = sample_input(&template);
        let used = operators::per_call(&module.bytes, HookEvent::OnMessage, &input, 3)
            .unwrap_or_else(|failure| panic!("{name}: {failure}"));
        println!("  {name:<10} {:>9}", used[2]);
    }
}

fn main() {
    let messages = arg("--messages", 200_000);
    let mut variants = vec![
        ("no-hook", None),
        (
            "c-trivial",
            Some(Hook::new("../../target/hooks/trivial_hook.wasm", "{}", "")),
        ),
        // The credit policy's answer without reading the event: the least that answer costs.
        (
            "wat-answer",
            Some(Hook::new("../../target/hooks/set_vars_hook.wasm", "{}", "")),
        ),
        (
            "c-guard",
            Some(Hook::new(
                "amount-guard/amount_guard.wasm",
                "{ max_amount: 100000 }",
                "",
            )),
        ),
        (
            "rust-hook",
            Some(Hook::new(
                "credit-assessment/credit_assessment.wasm",
                "{ max_amount: 100000 }",
                "",
            )),
        ),
        // The same policy with the event cut to what it reads, as its template ships.
        (
            "rust-reads",
            Some(Hook::credit(
                "credit-assessment/credit_assessment.wasm",
                None,
            )),
        ),
        // The same policy in Python and in TypeScript, with their templates' memory caps.
        (
            "py-reads",
            Some(Hook::credit(
                "credit-assessment/credit_assessment_py.wasm",
                Some(32 << 20),
            )),
        ),
        (
            "js-reads",
            Some(Hook::credit(
                "credit-assessment/credit_assessment_js.wasm",
                Some(4 << 20),
            )),
        ),
    ];
    // Another build of a hook, run as `rust-reads` is: to compare SDK versions in one run.
    if let Some(path) = std::env::args().skip_while(|arg| arg != "--compare").nth(1) {
        let path: &'static str = Box::leak(path.into_boxed_str());
        variants.push(("compare", Some(Hook::credit(path, None))));
    }
    if std::env::args().any(|arg| arg == "--operators") {
        print_operators(&variants);
        return;
    }
    let only = std::env::args().skip_while(|arg| arg != "--only").nth(1);
    let skipped = |index: usize| {
        index > 0
            && only
                .as_deref()
                .is_some_and(|only| !only.split(',').any(|name| name == variants[index].0))
    };
    let forms_only = std::env::args().any(|arg| arg == "--forms-only");
    if forms_only {
        print_forms(&variants, &skipped);
        return;
    }
    let rounds = arg("--rounds", ROUNDS);
    let templates: Vec<Arc<CompiledTemplate>> = variants
        .iter()
        .map(|(name, hook)| Arc::new(template(name, *hook)))
        .collect();
    let runtime = Arc::new(
        HookRuntime::new(HookRuntimeConfig {
            cache_dir: None,
            ..HookRuntimeConfig::default()
        })
        .expect("hook runtime"),
    );
    for template in &templates {
        runtime.prepare(template).expect("hook loads");
    }
    let catalog = Arc::new(Catalog::new(templates.iter().cloned()));
    // A fresh engine and store for each timed run: the memory store keeps every
    // conversation, and a run after a million stored messages is slower than one on an
    // empty store (page faults, a larger map), which would favour whichever runs first.
    let fresh_engine = || {
        Engine::new(
            catalog.clone(),
            Arc::new(MemoryStore::new()),
            Arc::new(SystemClock),
            EngineConfig::default(),
        )
        .with_hooks(runtime.clone())
    };
    let tokio = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio");
    let mut best = vec![0.0f64; variants.len()];
    let mut best_calls = vec![0.0f64; variants.len()];
    for _ in 0..rounds {
        for index in 1..variants.len() {
            if skipped(index) {
                continue;
            }
            let rate = calls_per_second(&runtime, &templates[index], messages);
            best_calls[index] = best_calls[index].max(rate);
        }
    }
    if std::env::args().any(|arg| arg == "--calls-only") {
        for index in (1..variants.len()).filter(|&index| !skipped(index)) {
            println!(
                "  {:<10} {:>7.2} µs/call",
                variants[index].0,
                1e6 / best_calls[index]
            );
        }
        return;
    }
    tokio.block_on(async {
        // Warm-up: instances created, caches filled.
        for (index, (name, _)) in variants.iter().enumerate() {
            if !skipped(index) {
                messages_per_second(&fresh_engine(), name, 2_000).await;
            }
        }
        for _ in 0..rounds {
            for (index, (name, _)) in variants.iter().enumerate() {
                if skipped(index) {
                    continue;
                }
                let engine = fresh_engine();
                let rate = messages_per_second(&engine, name, messages).await;
                drop(engine);
                best[index] = best[index].max(rate);
            }
        }
    });
    let base_us = 1e6 / best[0];
    println!("hooks bench: {messages} messages per round, best of {rounds}, one thread");
    println!(
        "  {:<10} {:>12.0} msg/s  {:>7.2} µs/msg",
        variants[0].0, best[0], base_us
    );
    for index in (1..variants.len()).filter(|&index| !skipped(index)) {
        let us = 1e6 / best[index];
        println!(
            "  {:<10} {:>12.0} msg/s  {:>7.2} µs/msg  (+{:.2} µs, {:.0}% of no-hook throughput)",
            variants[index].0,
            best[index],
            us,
            us - base_us,
            100.0 * best[index] / best[0]
        );
    }
    println!("hook calls alone: {messages} calls per round, best of {rounds}");
    for index in (1..variants.len()).filter(|&index| !skipped(index)) {
        println!(
            "  {:<10} {:>12.0} calls/s {:>7.2} µs/call",
            variants[index].0,
            best_calls[index],
            1e6 / best_calls[index]
        );
    }
    print_forms(&variants, &skipped);
}

/// The forms table: each build of the credit policy (`*-reads`) compiled, loaded from the
/// cache, and instantiated ([`WARMED_INSTANCES`] idle instances, each called once).
fn print_forms(variants: &[(&str, Option<Hook>)], skipped: &dyn Fn(usize) -> bool) {
    println!(
        "binary forms: compile, compiled size, load from the cache, and a new instance \
         (instantiated and called once; resident memory per idle instance, of {WARMED_INSTANCES})"
    );
    println!(
        "  {:<10} {:<9} {:>8} {:>10} {:>10} {:>9} {:>11} {:>12}",
        "", "form", "wasm", "compile", "compiled", "load", "instance", "idle RSS"
    );
    for (index, (name, hook)) in variants.iter().enumerate() {
        let Some(hook) = hook else { continue };
        if skipped(index) || !name.ends_with("-reads") {
            continue;
        }
        let form = weigh(&template(name, Some(*hook)));
        println!(
            "  {name:<10} {:<9} {:>6.2}MB {:>8.0}ms {:>8.2}MB {:>7.1}ms {:>9.0}µs {:>10.2}MiB",
            form.form,
            form.wasm_bytes as f64 / 1e6,
            form.compile.as_secs_f64() * 1e3,
            form.compiled_bytes as f64 / 1e6,
            form.load.as_secs_f64() * 1e3,
            form.instance.as_secs_f64() * 1e6,
            form.idle_rss_bytes / f64::from(1 << 20),
        );
    }
}

/// What [`weigh`] measured of one hook.
struct Form {
    form: &'static str,
    wasm_bytes: usize,
    compile: Duration,
    compiled_bytes: u64,
    load: Duration,
    /// Instantiating and the first call, per instance.
    instance: Duration,
    /// Growth of this process's resident memory per idle instance.
    idle_rss_bytes: f64,
}

/// Compiles `template`'s hook into an empty cache, loads it again from there, and warms
/// [`WARMED_INSTANCES`] instances of it.
fn weigh(template: &CompiledTemplate) -> Form {
    let module = template.hook_module.as_ref().expect("a hook module");
    let cache = std::env::temp_dir().join(format!(
        "colloquy-bench-forms-{}-{}",
        template.name,
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&cache);
    let fresh_runtime = || {
        HookRuntime::new(HookRuntimeConfig {
            cache_dir: Some(cache.clone()),
            idle_instances_per_module: WARMED_INSTANCES,
            ..HookRuntimeConfig::default()
        })
        .expect("hook runtime")
    };
    let timed_prepare = |runtime: &HookRuntime| {
        let began = Instant::now();
        runtime.prepare(template).expect("hook loads");
        began.elapsed()
    };
    let compile = timed_prepare(&fresh_runtime());
    let compiled_bytes = std::fs::read_dir(&cache)
        .expect("the hook cache")
        .filter_map(|entry| entry.ok()?.metadata().ok())
        .map(|metadata| metadata.len())
        .sum();
    let runtime = fresh_runtime();
    let load = timed_prepare(&runtime);
    let input = sample_input(template);
    let rss_before = resident_bytes();
    let began = Instant::now();
    let warmed = runtime
        .warm(template, HookEvent::OnMessage, &input, WARMED_INSTANCES)
        .expect("instances warm");
    let instance = began.elapsed() / u32::try_from(warmed.max(1)).unwrap_or(1);
    let idle_rss_bytes = (resident_bytes() - rss_before) / warmed.max(1) as f64;
    drop(runtime);
    let _ = std::fs::remove_dir_all(&cache);
    Form {
        form: BinaryForm::of(&module.bytes).map_or("?", |form| match form {
            BinaryForm::Core => "core",
            BinaryForm::Component => "component",
        }),
        wasm_bytes: module.bytes.len(),
        compile,
        compiled_bytes,
        load,
        instance,
        idle_rss_bytes,
    }
}

/// This process's resident memory in bytes, from `/proc`.
fn resident_bytes() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: f64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|pages| pages.parse().ok())
        .expect("resident pages");
    pages * 4096.0
}
