//! Messages per second of request conversations per store backend, as ratios to the memory
//! store measured in the same run, just before each backend (the machines are shared, and
//! their other load drifts over a run). Run with
//! `cargo bench -p colloquy --bench stores`.
//!
//! A request conversation is three messages: `request` (sent with the start call), `agree`,
//! `inform`. Two workloads per backend, both with `--clients` (default 64) concurrent
//! clients each driving one conversation at a time:
//! - in-process: the clients call the [`Engine`] directly;
//! - HTTP: the clients are keep-alive HTTP/1.1 connections (reqwest) to the service
//!   (`colloquy_server::launch`) on 127.0.0.1, in the same process.
//!
//! Backends: memory; SQLite in a temporary file (WAL, group commit) with `synchronous =
//! FULL` (the default: on disk before the answer) and `NORMAL` (in the OS before the answer:
//! survives `kill -9`, not power loss); Redis, a `redis-server` this benchmark starts from
//! `PATH` with `appendfsync always` (the counterpart of FULL) and then `everysec` (of
//! NORMAL), or the one `COLLOQUY_BENCH_REDIS` names (as configured). Without either, Redis
//! is left out and the output says so. Postgres: the server `COLLOQUY_BENCH_POSTGRES` names
//! (a `postgres://` URL, as `--store` takes; each workload in a fresh database of its own,
//! `synchronous_commit = on`); without it Postgres is left out. This benchmark starts no
//! Postgres (that takes a `postgres` user and `initdb`), and measures no Postgres ceiling:
//! `http-bench --store` gives the figures pgbench reaches beside it (docs/scale.md).
//!
//! Arguments: `--conversations N` (in-process, per backend, five times that for the memory
//! reference; default 20 000), `--seconds S`
//! (HTTP, per backend; default 5), `--clients C`, `--backends LIST` (comma-separated among
//! `sqlite`, `redis`, `postgres`; default all; memory always runs, as the reference).
//!
//! Before the table, two **ceilings**: what each backend itself does on this machine with
//! the engine left out, as a ratio to a memory-store run made just before them. No backend
//! row can beat its ceiling, so a ceiling below a target says the target is out of reach
//! here whatever the engine does:
//! - SQLite: one thread writing, per message, the least any SQLite layout must (the
//!   conversation's version row, one event row, one inbox row, of the sizes a request
//!   conversation's commits have), as many messages a transaction as there are clients (the
//!   most they can have waiting), the store's cache size, `synchronous = NORMAL`, no
//!   checkpoints: the writer's share of a message with nothing else around it. Its second
//!   ratio also counts the engine's own work: with the memory store the engine keeps every
//!   core busy at `M` msg/s, so it spends at least `cores / M` CPU seconds a message, and a
//!   writer that needs `1 / C` more gives at most `cores / (cores / M + 1 / C)` msg/s (and
//!   never more than `C`, one writer's rate).
//! - Redis: a task per client on one multiplexed connection (as the store has) running a
//!   Lua script with the four writes a commit needs at least (event stream, version,
//!   wake-up, inbox).
//!
//! The SQLite-only column (Linux) is the CPU time of the store's writer, syncer and
//! checkpointer threads per message: steadier than messages per second on a shared, noisy
//! machine. The last columns are the 99th percentile and the longest time one message took
//! (one engine call in process, one HTTP request), in milliseconds: a store that stops
//! every commit for a while (a checkpoint on the writer thread did, for tens of
//! milliseconds) shows there first.

use std::collections::HashMap;
use std::net::TcpListener as StdListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use colloquy_core::store::{ConversationStore, MemoryStore};
use colloquy_core::{Engine, EngineConfig, SystemClock};
use colloquy_policy::{Catalog, TemplateCompiler};
use colloquy_protocol::message::{SendMessage, StartConversation};
use colloquy_server::ServiceOptions;
use colloquy_store::raw::fresh_postgres_database;
use colloquy_store::raw::{redis_ceiling, set_appendfsync, sqlite_ceiling};
use colloquy_store::{PostgresStore, RedisStore, SqliteStore, Synchronous};

#[path = "../../bench_support.rs"]
mod support;
use support::arg;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const REQUEST: &str = r#"{"performative":"request","content":{"action":"book-room","room":"4.12","from":"2026-12-01T09:00:00Z","minutes":60}}"#;
const AGREE: &str = r#"{"performative":"agree","content":{"eta_ms":500}}"#;
const INFORM: &str = r#"{"performative":"inform","content":{"done":true,"booking":"B-1042"}}"#;

/// CPU time (user + system, in clock ticks of 10 ms) each of this process's threads named
/// `colloquy-sqlite…` (the SQLite writer and, for `synchronous = FULL`, its WAL syncer) has
/// spent so far, by thread id; empty without Linux's `/proc`.
fn writer_ticks() -> HashMap<String, u64> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return HashMap::new();
    };
    tasks
        .flatten()
        .filter_map(|task| {
            let name = std::fs::read_to_string(task.path().join("comm")).ok()?;
            if !name.starts_with("colloquy-sqlite") {
                return None;
            }
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            // After the parenthesised name: state is field 3, utime 14, stime 15.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            let ticks =
                fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
            Some((task.file_name().to_string_lossy().into_owned(), ticks))
        })
        .collect()
}

/// What one workload measured.
#[derive(Clone, Copy)]
struct Measured {
    /// Messages per second.
    rate: f64,
    /// Writer CPU microseconds per message.
    writer_us: f64,
    /// 99th percentile of the time one message took, ms.
    p99_ms: f64,
    /// The longest, ms.
    max_ms: f64,
}

/// The time each message took, in microseconds, as the clients recorded them.
#[derive(Default)]
struct Latencies(Vec<u32>);

impl Latencies {
    fn record(&mut self, since: Instant) {
        self.0
            .push(u32::try_from(since.elapsed().as_micros()).unwrap_or(u32::MAX));
    }

    fn merge(all: Vec<Latencies>) -> Latencies {
        Latencies(all.into_iter().flat_map(|one| one.0).collect())
    }

    /// The 99th percentile and the maximum, in ms.
    fn p99_and_max(mut self) -> (f64, f64) {
        if self.0.is_empty() {
            return (0.0, 0.0);
        }
        self.0.sort_unstable();
        let p99 = self.0[(self.0.len() * 99 / 100).min(self.0.len() - 1)];
        let max = self.0[self.0.len() - 1];
        (f64::from(p99) / 1000.0, f64::from(max) / 1000.0)
    }
}

/// Writer CPU microseconds per message over a workload that began at `ticks`.
fn writer_us_per_message(ticks: HashMap<String, u64>, messages: usize) -> f64 {
    let spent: u64 = writer_ticks()
        .into_iter()
        .map(|(thread, now)| now.saturating_sub(ticks.get(&thread).copied().unwrap_or(0)))
        .sum();
    spent as f64 * 10_000.0 / messages.max(1) as f64
}

/// Whether `--backends` (default: all) names `backend`.
fn wanted(backend: &str) -> bool {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--backends") {
        Some(i) => args
            .get(i + 1)
            .is_some_and(|list| list.split(',').any(|name| name.trim() == backend)),
        None => true,
    }
}

fn catalog() -> Catalog {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    let templates = TemplateCompiler::new()
        .compile_dir(&dir)
        .expect("built-in templates compile");
    Catalog::new(templates.into_iter().map(Arc::new))
}

fn parse(json: &str) -> SendMessage {
    serde_json::from_str(json).expect("bench message parses")
}

fn start_request(participant: &str) -> StartConversation {
    StartConversation {
        template: "fipa-request".to_owned(),
        participants: vec![participant.to_owned()],
        message: Some(parse(REQUEST)),
        ..StartConversation::default()
    }
}

/// Messages/s with `clients` tasks sharing `conversations` conversations.
async fn in_process(
    store: Arc<dyn ConversationStore>,
    conversations: usize,
    clients: usize,
) -> Measured {
    let engine = Arc::new(Engine::new(
        Arc::new(catalog()),
        store,
        Arc::new(SystemClock),
        EngineConfig::default(),
    ));
    let next = Arc::new(AtomicUsize::new(0));
    let ticks = writer_ticks();
    let began = Instant::now();
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let (engine, next) = (engine.clone(), next.clone());
            tokio::spawn(async move {
                let initiator = format!("a{client}");
                let participant = format!("b{client}");
                let mut latencies = Latencies::default();
                while next.fetch_add(1, Ordering::Relaxed) < conversations {
                    let sent = Instant::now();
                    let view = engine
                        .start(&initiator, start_request(&participant))
                        .await
                        .expect("start");
                    latencies.record(sent);
                    for json in [AGREE, INFORM] {
                        let sent = Instant::now();
                        engine
                            .send(&view.id, &participant, parse(json))
                            .await
                            .expect("send");
                        latencies.record(sent);
                    }
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.push(task.await.expect("client"));
    }
    let (p99_ms, max_ms) = Latencies::merge(latencies).p99_and_max();
    Measured {
        rate: (conversations * 3) as f64 / began.elapsed().as_secs_f64(),
        writer_us: writer_us_per_message(ticks, conversations * 3),
        p99_ms,
        max_ms,
    }
}

/// Messages/s over HTTP for `seconds`, after a one-second warm-up.
async fn over_http(store: Arc<dyn ConversationStore>, seconds: u64, clients: usize) -> Measured {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let options = ServiceOptions {
        store: Some(store),
        ..ServiceOptions::default()
    };
    let service = colloquy_server::launch(catalog(), listener, options).expect("launch");
    let url = service.url();
    let counting = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let messages = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..clients)
        .map(|client| {
            let (url, counting, stop, messages) = (
                url.clone(),
                counting.clone(),
                stop.clone(),
                messages.clone(),
            );
            tokio::spawn(async move {
                let http = reqwest::Client::builder()
                    .pool_max_idle_per_host(1)
                    .tcp_nodelay(true)
                    .build()
                    .expect("client");
                let (initiator, participant) = (format!("a{client}"), format!("b{client}"));
                let mut latencies = Latencies::default();
                while !stop.load(Ordering::Relaxed) {
                    let counts = counting.load(Ordering::Relaxed);
                    let sent = Instant::now();
                    let view: serde_json::Value = http
                        .post(format!("{url}/v1/conversations"))
                        .header("X-Agent-Id", &initiator)
                        .json(&start_request(&participant))
                        .send()
                        .await
                        .and_then(|r| r.error_for_status())
                        .expect("start")
                        .json()
                        .await
                        .expect("view");
                    if counts {
                        latencies.record(sent);
                    }
                    let id = view["id"].as_str().expect("id").to_owned();
                    for json in [AGREE, INFORM] {
                        let sent = Instant::now();
                        http.post(format!("{url}/v1/conversations/{id}/messages"))
                            .header("X-Agent-Id", &participant)
                            .header("content-type", "application/json")
                            .body(json)
                            .send()
                            .await
                            .and_then(|r| r.error_for_status())
                            .expect("send");
                        if counts {
                            latencies.record(sent);
                        }
                    }
                    if counts {
                        messages.fetch_add(3, Ordering::Relaxed);
                    }
                }
                latencies
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let ticks = writer_ticks();
    counting.store(true, Ordering::Relaxed);
    let began = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let counted = messages.load(Ordering::Relaxed);
    let rate = counted as f64 / began.elapsed().as_secs_f64();
    let writer_us = writer_us_per_message(ticks, counted);
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.push(task.await.expect("client"));
    }
    drop(service);
    let (p99_ms, max_ms) = Latencies::merge(latencies).p99_and_max();
    Measured {
        rate,
        writer_us,
        p99_ms,
        max_ms,
    }
}

/// What a backend does alone, against the memory store in process.
struct Ceiling {
    name: &'static str,
    /// Messages/s of the backend alone.
    rate: f64,
    /// Messages/s of the memory store in process, just before.
    memory: f64,
    /// The most the engine on this backend could do, sharing the cores (SQLite only).
    with_engine: Option<f64>,
}

/// A `redis-server` for the run, stopped on drop.
struct RedisServer {
    child: Child,
    dir: PathBuf,
    url: String,
}

impl RedisServer {
    fn start() -> Option<RedisServer> {
        let port = StdListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .ok()?
            .port();
        let dir = std::env::temp_dir().join(format!("colloquy-bench-redis-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args([
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--save",
                "",
            ])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        Some(RedisServer {
            child,
            dir,
            url: format!("redis://127.0.0.1:{port}"),
        })
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Best effort: the process may have exited already.
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

async fn redis_store(url: &str, run: &str) -> Option<Arc<dyn ConversationStore>> {
    // The server may take a moment to accept connections.
    for _ in 0..50 {
        let prefix = format!("colloquy-bench:{run}:{}", uuid::Uuid::now_v7());
        if let Ok(store) = RedisStore::connect_with_prefix(url, &prefix).await {
            return Some(Arc::new(store));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// The Postgres store on a fresh database of the server `url` names; `None` when it cannot
/// be reached.
async fn postgres_store(url: &str) -> Option<Arc<dyn ConversationStore>> {
    let database = fresh_postgres_database(url).await;
    match PostgresStore::connect(&database).await {
        Ok(store) => Some(Arc::new(store)),
        Err(error) => {
            println!("postgres: {error}");
            None
        }
    }
}

fn sqlite_store(dir: &Path, run: &str, synchronous: Synchronous) -> Arc<dyn ConversationStore> {
    Arc::new(
        SqliteStore::open_with(dir.join(format!("{run}.db")), synchronous).expect("open SQLite"),
    )
}

/// One backend's figures (in-process, HTTP) and those of the memory-store run made just
/// before it, its reference.
struct Row {
    name: &'static str,
    reference: (Measured, Measured),
    measured: (Measured, Measured),
}

/// The memory store in process and over HTTP. The in-process run takes five times as many
/// conversations as the other backends': at its rate their count takes a fraction of a
/// second, and so short a run moves with every hiccup of a shared machine.
async fn memory_reference(
    conversations: usize,
    seconds: u64,
    clients: usize,
) -> (Measured, Measured) {
    (
        in_process(Arc::new(MemoryStore::new()), conversations * 5, clients).await,
        over_http(Arc::new(MemoryStore::new()), seconds, clients).await,
    )
}

fn main() {
    let conversations = arg("--conversations", 20_000);
    let seconds = arg("--seconds", 5) as u64;
    let clients = arg("--clients", 64);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let dir = std::env::temp_dir().join(format!("colloquy-bench-sqlite-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    let spawned = match std::env::var("COLLOQUY_BENCH_REDIS") {
        Ok(_) => None,
        Err(_) if wanted("redis") => RedisServer::start(),
        Err(_) => None,
    };
    let redis_url = std::env::var("COLLOQUY_BENCH_REDIS")
        .ok()
        .or_else(|| spawned.as_ref().map(|server| server.url.clone()))
        .filter(|_| wanted("redis"));
    let postgres_url = std::env::var("COLLOQUY_BENCH_POSTGRES")
        .ok()
        .filter(|url| !url.is_empty() && wanted("postgres"));

    let spawned = &spawned;
    let (rows, ceilings) = runtime.block_on(async {
        // Warm-up: code paths and allocator.
        in_process(Arc::new(MemoryStore::new()), 2_000, clients).await;
        let memory = in_process(Arc::new(MemoryStore::new()), conversations * 5, clients).await;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let mut ceilings: Vec<Ceiling> = Vec::new();
        if wanted("sqlite") {
            let rate = sqlite_ceiling(&dir, conversations * 3, clients);
            ceilings.push(Ceiling {
                name: "sqlite alone (one writer)",
                rate,
                memory: memory.rate,
                // The writer is this process's own thread, beside the engine's.
                with_engine: Some((cores / (cores / memory.rate + 1.0 / rate)).min(rate)),
            });
        }
        if let Some(url) = &redis_url {
            match redis_ceiling(url, conversations * 3, clients).await {
                Some(rate) => ceilings.push(Ceiling {
                    name: "redis alone",
                    rate,
                    memory: memory.rate,
                    // Already includes the server's share of the cores.
                    with_engine: None,
                }),
                None => println!("redis at {url} unreachable: its ceiling left out"),
            }
        }
        let mut rows: Vec<Row> = Vec::new();
        let sqlite_runs = [
            ("sqlite (synchronous=FULL)", Synchronous::Full),
            ("sqlite (synchronous=NORMAL)", Synchronous::Normal),
        ];
        for (name, synchronous) in sqlite_runs.into_iter().filter(|_| wanted("sqlite")) {
            let reference = memory_reference(conversations, seconds, clients).await;
            let run = format!("{synchronous:?}");
            let sqlite = (
                in_process(
                    sqlite_store(&dir, &format!("{run}-in"), synchronous),
                    conversations,
                    clients,
                )
                .await,
                over_http(
                    sqlite_store(&dir, &format!("{run}-http"), synchronous),
                    seconds,
                    clients,
                )
                .await,
            );
            rows.push(Row {
                name,
                reference,
                measured: sqlite,
            });
        }
        if let Some(url) = &redis_url {
            for (name, fsync) in [
                ("redis (appendfsync always)", "always"),
                ("redis (appendfsync everysec)", "everysec"),
            ] {
                if spawned.is_some() {
                    set_appendfsync(url, fsync).await;
                }
                match (
                    redis_store(url, "in-process").await,
                    redis_store(url, "http").await,
                ) {
                    (Some(a), Some(b)) => {
                        let reference = memory_reference(conversations, seconds, clients).await;
                        let redis = (
                            in_process(a, conversations, clients).await,
                            over_http(b, seconds, clients).await,
                        );
                        rows.push(Row {
                            name,
                            reference,
                            measured: redis,
                        });
                    }
                    _ => println!("redis at {url} unreachable: left out"),
                }
            }
        } else if wanted("redis") {
            println!("no redis-server on PATH and no COLLOQUY_BENCH_REDIS: redis left out");
        }
        if let Some(url) = &postgres_url {
            match (postgres_store(url).await, postgres_store(url).await) {
                (Some(a), Some(b)) => {
                    let reference = memory_reference(conversations, seconds, clients).await;
                    let postgres = (
                        in_process(a, conversations, clients).await,
                        over_http(b, seconds, clients).await,
                    );
                    rows.push(Row {
                        name: "postgres (synchronous_commit=on)",
                        reference,
                        measured: postgres,
                    });
                }
                _ => println!("postgres unreachable: left out"),
            }
        } else if wanted("postgres") {
            println!("no COLLOQUY_BENCH_POSTGRES: postgres left out");
        }
        (rows, ceilings)
    });
    let _ = std::fs::remove_dir_all(&dir);

    println!("ceilings: each backend alone, without the engine (see the bench's docs)");
    println!(
        "{:<32} {:>12} {:>10} {:>6} {:>18}",
        "backend", "msg/s", "memory", "ratio", "with the engine"
    );
    for ceiling in &ceilings {
        let with_engine = match ceiling.with_engine {
            Some(rate) => format!("{:.2}x", rate / ceiling.memory),
            None => "-".to_owned(),
        };
        println!(
            "{:<32} {:>12.0} {:>10.0} {:>5.2}x {with_engine:>18}",
            ceiling.name,
            ceiling.rate,
            ceiling.memory,
            ceiling.rate / ceiling.memory
        );
    }
    println!();
    println!(
        "request conversations (3 messages each), {clients} concurrent clients; \
         in-process {conversations} conversations, HTTP {seconds}s per backend"
    );
    println!(
        "(writer µs/msg: CPU time of the SQLite writer, syncer and checkpointer threads per \
         message; p99 and max: ms one message took; each in-process/HTTP)"
    );
    println!(
        "(each backend's ratios are to a memory-store run made just before it: the machine's \
         other load drifts over a run)"
    );
    println!(
        "{:<32} {:>12} {:>10} {:>6} {:>10} {:>10} {:>6} {:>13} {:>11} {:>13}",
        "backend",
        "in-process/s",
        "memory",
        "ratio",
        "HTTP msg/s",
        "memory",
        "ratio",
        "writer µs/msg",
        "p99 ms",
        "max ms"
    );
    for Row {
        name,
        reference: (memory_in, memory_http),
        measured: (inside, http),
    } in &rows
    {
        println!(
            "{name:<32} {:>12.0} {:>10.0} {:>5.2}x {:>10.0} {:>10.0} {:>5.2}x {:>6.1}/{:<6.1} {:>5.1}/{:<5.1} {:>6.1}/{:<6.1}",
            inside.rate,
            memory_in.rate,
            inside.rate / memory_in.rate,
            http.rate,
            memory_http.rate,
            http.rate / memory_http.rate,
            inside.writer_us,
            http.writer_us,
            inside.p99_ms,
            http.p99_ms,
            inside.max_ms,
            http.max_ms,
        );
    }
}
