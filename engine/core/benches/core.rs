//! Throughput and memory of the conversation core, against a `serde_json` baseline measured
//! in the same run. Run with `cargo bench -p colloquy-core --bench core` (release mode).
//!
//! - baseline: `serde_json` parse + serialize of the same messages;
//! - request: start + request, agree, inform (3 messages per conversation), each message
//!   parsed from JSON, schema-validated, run through the state machine and commitments, and
//!   appended to the in-memory store;
//! - contract-net: cfp to 3 participants, 3 proposals, 1 accept, 2 rejects, 1 inform
//!   (8 messages per conversation);
//! - chain: what hashing each event into the log's hash chain costs (the engine does it as
//!   it emits each event, inside the request figure), per event and as a share of a request
//!   message's time in the core, over the logs the request conversations recorded;
//! - memory: heap bytes per idle conversation (a request awaiting its answer) with N live,
//!   and per completed conversation (kept until retention removes it).
//!
//! All on one thread (a current-thread Tokio runtime), so the figures are per core.
//! Arguments: `--conversations N` (default 50 000) and `--idle N` (default 1 000 000).

#![allow(unsafe_code)] // the counting allocator wraps the system allocator

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use colloquy_core::store::MemoryStore;
use colloquy_core::{Engine, EngineConfig, SystemClock};
use colloquy_policy::{Catalog, TemplateCompiler};
use colloquy_protocol::message::{SendMessage, StartConversation};
use mimalloc::MiMalloc;

#[path = "../../bench_support.rs"]
mod support;
use support::arg;

/// Counts live heap bytes, for the memory figure, over mimalloc (the allocator the
/// `colloquy` binary uses).
struct CountingAllocator;

static LIVE_BYTES: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE_BYTES.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { MiMalloc.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE_BYTES.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { MiMalloc.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE_BYTES.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { MiMalloc.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: CountingAllocator = CountingAllocator;

const REQUEST: &str = r#"{"performative":"request","content":{"action":"book-room","room":"4.12","from":"2026-12-01T09:00:00Z","minutes":60}}"#;
const AGREE: &str = r#"{"performative":"agree","content":{"eta_ms":500}}"#;
const INFORM: &str = r#"{"performative":"inform","content":{"done":true,"booking":"B-1042"}}"#;
const CFP: &str =
    r#"{"performative":"cfp","content":{"task":"deliver","weight_kg":12,"to":"Lyon"}}"#;
const PROPOSE: &str = r#"{"performative":"propose","content":{"price":118.5,"days":2}}"#;
const ACCEPT: &str = r#"{"performative":"accept-proposal","to":["p1"],"content":{"ref":"p1"}}"#;
const REJECT_2: &str =
    r#"{"performative":"reject-proposal","to":["p2"],"content":{"reason":"price"}}"#;
const REJECT_3: &str =
    r#"{"performative":"reject-proposal","to":["p3"],"content":{"reason":"price"}}"#;

fn engine() -> Arc<Engine> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    let templates = TemplateCompiler::new()
        .compile_dir(&dir)
        .expect("built-in templates compile");
    let catalog = Catalog::new(templates.into_iter().map(Arc::new));
    Arc::new(Engine::new(
        Arc::new(catalog),
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
        EngineConfig::default(),
    ))
}

fn parse(json: &str) -> SendMessage {
    serde_json::from_str(json).expect("bench message parses")
}

fn start(template: &str, participants: &[&str]) -> StartConversation {
    StartConversation {
        template: template.to_owned(),
        participants: participants.iter().map(|p| (*p).to_owned()).collect(),
        ..StartConversation::default()
    }
}

fn baseline(messages: usize) -> f64 {
    let corpus = [REQUEST, AGREE, INFORM, CFP, PROPOSE, ACCEPT];
    let began = Instant::now();
    for i in 0..messages {
        let message: SendMessage = serde_json::from_str(corpus[i % corpus.len()]).expect("parse");
        black_box(serde_json::to_vec(&message).expect("serialize"));
    }
    messages as f64 / began.elapsed().as_secs_f64()
}

async fn request_conversations(engine: &Engine, conversations: usize) -> f64 {
    let began = Instant::now();
    for i in 0..conversations {
        let initiator = format!("a{}", i % 1000);
        let participant = format!("b{}", i % 1000);
        let view = engine
            .start(&initiator, start("fipa-request", &[&participant]))
            .await
            .expect("start");
        for (sender, json) in [
            (&initiator, REQUEST),
            (&participant, AGREE),
            (&participant, INFORM),
        ] {
            black_box(
                engine
                    .send(&view.id, sender, parse(json))
                    .await
                    .expect("send"),
            );
        }
    }
    (conversations * 3) as f64 / began.elapsed().as_secs_f64()
}

/// The logs of `conversations` request conversations (start, request, agree, inform).
async fn request_logs(
    conversations: usize,
) -> Vec<Vec<colloquy_protocol::event::ConversationEvent>> {
    let engine = engine();
    let mut logs = Vec::with_capacity(conversations);
    for i in 0..conversations {
        let (initiator, participant) = (format!("a{i}"), format!("b{i}"));
        let view = engine
            .start(&initiator, start("fipa-request", &[&participant]))
            .await
            .expect("start");
        for (sender, json) in [
            (&initiator, REQUEST),
            (&participant, AGREE),
            (&participant, INFORM),
        ] {
            engine
                .send(&view.id, sender, parse(json))
                .await
                .expect("send");
        }
        logs.push(engine.events(&view.id, None, 0).await.expect("log"));
    }
    logs
}

/// Events hashed into their chains per second, as the engine does it when it emits them:
/// each event's chain hash is computed when the next one needs it as its `prev`.
fn chain_rate(logs: &[Vec<colloquy_protocol::event::ConversationEvent>]) -> f64 {
    let began = Instant::now();
    let mut events = 0;
    for log in logs {
        let mut tail = colloquy_core::chain::ChainTail::default();
        for event in log {
            black_box(tail.head());
            tail.follow(event);
            events += 1;
        }
        black_box(tail.head());
    }
    events as f64 / began.elapsed().as_secs_f64()
}

async fn contract_net_conversations(engine: &Engine, conversations: usize) -> f64 {
    let began = Instant::now();
    for _ in 0..conversations {
        let view = engine
            .start("m", start("fipa-contract-net", &["p1", "p2", "p3"]))
            .await
            .expect("start");
        let steps = [
            ("m", CFP),
            ("p1", PROPOSE),
            ("p2", PROPOSE),
            ("p3", PROPOSE),
            ("m", ACCEPT),
            ("m", REJECT_2),
            ("m", REJECT_3),
            ("p1", INFORM),
        ];
        for (sender, json) in steps {
            black_box(
                engine
                    .send(&view.id, sender, parse(json))
                    .await
                    .expect("send"),
            );
        }
    }
    (conversations * 8) as f64 / began.elapsed().as_secs_f64()
}

async fn idle_memory(idle: usize) -> f64 {
    let engine = engine();
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    for i in 0..idle {
        let initiator = format!("a{}", i % 1000);
        let participant = format!("b{}", i % 1000);
        let mut request = start("fipa-request", &[&participant]);
        request.message = Some(parse(REQUEST));
        black_box(engine.start(&initiator, request).await.expect("start"));
    }
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    assert_eq!(engine.live_count(), idle);
    (after - before) as f64 / idle as f64
}

/// Heap bytes still held per request conversation after it completed: what the engine and
/// the memory store keep until retention removes it.
async fn completed_memory(conversations: usize) -> f64 {
    let engine = engine();
    let before = LIVE_BYTES.load(Ordering::Relaxed);
    black_box(request_conversations(&engine, conversations).await);
    let after = LIVE_BYTES.load(Ordering::Relaxed);
    (after - before) as f64 / conversations as f64
}

fn main() {
    let conversations = arg("--conversations", 50_000);
    let idle = arg("--idle", 1_000_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");

    let warmup = engine();
    runtime.block_on(request_conversations(&warmup, 2_000));
    drop(warmup);

    let base = baseline(conversations * 3);
    let request = runtime.block_on(request_conversations(&engine(), conversations));
    let contract_net = runtime.block_on(contract_net_conversations(&engine(), conversations / 2));
    println!("baseline serde_json parse+serialize: {base:>12.0} msg/s");
    println!(
        "core, request conversations:        {request:>12.0} msg/s  ({:.3}x baseline)",
        request / base
    );
    println!(
        "core, contract-net (3 participants): {contract_net:>12.0} msg/s  ({:.3}x baseline)",
        contract_net / base
    );
    let logs = runtime.block_on(request_logs(conversations / 5));
    let events: usize = logs.iter().map(Vec::len).sum();
    let events_per_message = events as f64 / (logs.len() * 3) as f64;
    let chain = chain_rate(&logs);
    println!(
        "chain hashing: {chain:>12.0} events/s  ({:.2} µs per event, {events_per_message:.1} \
         events per request message: {:.1}% of a request message's time in the core)",
        1e6 / chain,
        100.0 * events_per_message * request / chain
    );
    let completed = runtime.block_on(completed_memory(conversations));
    println!(
        "memory: {completed:.0} bytes per completed request conversation (kept until retention)"
    );
    if idle > 0 {
        let bytes = runtime.block_on(idle_memory(idle));
        println!("memory: {bytes:.0} bytes per idle request conversation ({idle} live)");
    }
}
