//! Hot-reload benchmark (issue 4 §7): `cargo bench -p colloquy-core --bench reload`.
//!
//! 1. Reload latency: a watched template directory; each round rewrites the template file
//!    and measures from just before the write until an engine start returns the new
//!    revision (the watcher's debounce is part of it: at most `watcher::MAX_DELAY`).
//! 2. Reloads under load: workers run conversations (start with a request, then the
//!    participant's inform) without pause while the template is rewritten 100 times. Every
//!    call that fails is counted, and afterwards every conversation a worker started is
//!    read back: one that is not completed with both messages is counted as lost.
//!
//! Figures are printed, never asserted (STYLE 10). Targets: latency ≤ 250 ms; zero failed
//! and zero lost messages.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use colloquy_core::store::MemoryStore;
use colloquy_core::{Engine, EngineConfig, SystemClock};
use colloquy_policy::LiveCatalog;
use colloquy_policy::live::write_atomically;
use colloquy_policy::watcher;
use colloquy_protocol::conversation::ConversationStatus;
use colloquy_protocol::message::{SendMessage, StartConversation};
use serde_json::json;

/// Latency rounds.
const LATENCY_ROUNDS: usize = 30;
/// Reloads under load.
const LOAD_RELOADS: usize = 100;
/// Concurrent conversation workers during the load phase.
const WORKERS: usize = 8;
/// Pause between rounds so each write is its own debounce burst.
const BETWEEN_ROUNDS: Duration = Duration::from_millis(150);
/// Longest wait for one reload to show before the round counts as missed.
const ROUND_TIMEOUT: Duration = Duration::from_secs(5);

fn errand(done: &str) -> String {
    format!(
        "apiVersion: colloquy.dev/v1
kind: ConversationTemplate
metadata:
  name: errand
  version: 1.0.0
spec:
  roles:
    participants: {{ min: 1, max: 1 }}
  thread:
    initial: start
    on_expiry: expired
    states:
      start:
        transitions:
          - {{ performative: request, from: initiator, to: asked }}
      asked:
        transitions:
          - {{ performative: inform, from: participant, to: {done} }}
      {done}: {{ terminal: success }}
      expired: {{ terminal: timeout }}
"
    )
}

fn start_request() -> StartConversation {
    StartConversation {
        template: "errand".into(),
        participants: vec!["bob".into()],
        message: Some(SendMessage::new("request", json!({}))),
        ..StartConversation::default()
    }
}

/// Rewrites the template (round `n`) and returns how long until an engine start returned
/// the new revision, or `None` if it did not within [`ROUND_TIMEOUT`].
async fn edit_and_wait(
    engine: &Engine,
    live: &LiveCatalog,
    file: &Path,
    n: usize,
) -> Option<Duration> {
    let before = live.latest("errand").map(|t| t.revision.clone());
    let began = Instant::now();
    // Alternate plain writes and editors' atomic saves.
    let text = errand(&format!("done_{n}"));
    if n.is_multiple_of(2) {
        std::fs::write(file, text).expect("write the template");
    } else {
        write_atomically(file, text.as_bytes()).expect("save the template");
    }
    loop {
        if live.latest("errand").map(|t| t.revision.clone()) != before {
            let view = engine.start("alice", start_request()).await.expect("start");
            if Some(&view.revision) != before.as_ref() {
                return Some(began.elapsed());
            }
        }
        if began.elapsed() > ROUND_TIMEOUT {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

fn summary(label: &str, mut samples: Vec<Duration>, missed: usize) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    if samples.is_empty() {
        println!("{label}: no reload showed up ({missed} missed)");
        return;
    }
    println!(
        "{label}: n={} min {:.1} ms, median {:.1} ms, p95 {:.1} ms, max {:.1} ms, missed {missed}; target ≤ 250 ms (max/target = {:.2})",
        samples.len(),
        ms(samples[0]),
        ms(at(0.5)),
        ms(at(0.95)),
        ms(samples[samples.len() - 1]),
        ms(samples[samples.len() - 1]) / 250.0,
    );
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let dir = std::env::temp_dir().join(format!("colloquy-reload-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("bench directory");
    let file = dir.join("errand.yaml");
    std::fs::write(&file, errand("done")).expect("fixture");
    let live = Arc::new(LiveCatalog::open(&dir).unwrap_or_else(|d| panic!("{d}")));
    let _watcher = watcher::watch(live.clone()).expect("watching");
    let engine = Arc::new(Engine::new(
        live.clone(),
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
        EngineConfig::default(),
    ));
    println!(
        "debounce: quiet {:?}, at most {:?} after the first event",
        watcher::QUIET,
        watcher::MAX_DELAY
    );

    // 1. Latency on an idle engine.
    let mut samples = Vec::new();
    let mut missed = 0;
    for n in 0..LATENCY_ROUNDS {
        tokio::time::sleep(BETWEEN_ROUNDS).await;
        match edit_and_wait(&engine, &live, &file, n).await {
            Some(latency) => samples.push(latency),
            None => missed += 1,
        }
    }
    summary(
        "reload latency, idle (file write → new revision serving)",
        samples,
        missed,
    );

    // 2. 100 reloads under sustained load.
    let stop = Arc::new(AtomicBool::new(false));
    let messages = Arc::new(AtomicU64::new(0));
    let failures = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for worker in 0..WORKERS {
        let (engine, stop, messages, failures) = (
            engine.clone(),
            stop.clone(),
            messages.clone(),
            failures.clone(),
        );
        workers.push(tokio::spawn(async move {
            let mut started = Vec::new();
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let id = format!("w{worker}-{n}");
                let mut request = start_request();
                request.conversation_id = Some(id.clone());
                match engine.start("alice", request).await {
                    Ok(_) => {
                        messages.fetch_add(1, Ordering::Relaxed);
                        started.push(id.clone());
                    }
                    Err(error) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        eprintln!("start failed: {error}");
                        continue;
                    }
                }
                // Let a reload land between the two messages now and then.
                if n.is_multiple_of(4) {
                    tokio::task::yield_now().await;
                }
                match engine
                    .send(&id, "bob", SendMessage::new("inform", json!({})))
                    .await
                {
                    Ok(_) => {
                        messages.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(error) => {
                        failures.fetch_add(1, Ordering::Relaxed);
                        eprintln!("inform failed: {error}");
                    }
                }
            }
            started
        }));
    }
    let began = Instant::now();
    let mut samples = Vec::new();
    let mut missed = 0;
    for n in 0..LOAD_RELOADS {
        tokio::time::sleep(BETWEEN_ROUNDS).await;
        match edit_and_wait(&engine, &live, &file, LATENCY_ROUNDS + n).await {
            Some(latency) => samples.push(latency),
            None => missed += 1,
        }
    }
    stop.store(true, Ordering::Relaxed);
    let elapsed = began.elapsed();
    let mut started = Vec::new();
    for worker in workers {
        started.extend(worker.await.expect("worker"));
    }
    let mut lost = 0;
    let mut revisions = std::collections::HashSet::new();
    for id in &started {
        match engine.view(id, None).await {
            Ok(view)
                if view.status == ConversationStatus::Completed && view.messages.len() == 2 =>
            {
                revisions.insert(view.revision.clone());
            }
            _ => lost += 1,
        }
    }
    summary("reload latency under load", samples, missed);
    let total = messages.load(Ordering::Relaxed);
    println!(
        "under load: {} reloads in {:.1} s, {WORKERS} workers, {total} messages accepted ({:.0}/s), {} conversations over {} revisions; failed {}, lost {lost} (target 0 and 0)",
        LOAD_RELOADS,
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        started.len(),
        revisions.len(),
        failures.load(Ordering::Relaxed),
    );
    let _ = std::fs::remove_dir_all(&dir);
}
