//! The A2A benchmark: blocking `SendMessage` round trips against `colloquy serve` (memory
//! store, open development mode) with a local Rust SDK agent `bob` answering each task's
//! `request` with an `inform`, next to the A2A Python SDK's own server (a2a-sdk 1.3 on
//! uvicorn, `tests/a2a-bench/sdk_server.py`) answering the same message, in the same run.
//!
//! ```sh
//! cargo build --release -p colloquy --bin colloquy -p colloquy-tests --bin a2a-bench
//! bash tests/a2a-bench/run.sh            # the venv, then: a2a-bench --pin
//! ```
//!
//! `run.sh` creates the baseline's venv (`tests/a2a-bench/requirements.txt`) and passes
//! `--python` and `--sdk-server`; it builds nothing. Arguments go on to the binary.
//!
//! Why these figures: the issue asks for Colloquy's A2A rate against the A2A SDK's own
//! server *per core* (target: 20×). The two do not use the same number of cores (uvicorn
//! with one worker is one thread of Python; colloquy runs a tokio pool, and bob is a process
//! of its own), so the rate alone compares machines, not servers. Each server's CPU time
//! (user + system, all threads, from `/proc/PID/stat`) over the requests it answered gives
//! round trips per CPU-second: the per-core rate. For Colloquy it is given twice: the
//! engine alone, and the engine plus bob's process, since an A2A task on Colloquy needs its
//! participant to answer and the SDK server's executor answers inside its own process.
//!
//! How: this process is the load generator; colloquy, bob (this binary again, run as
//! `a2a-bench --agent URL`) and the SDK server are child processes. With `--pin` all
//! servers run on CPU 0 (colloquy with one tokio worker, bob with one) and the load on the
//! other CPUs, so each server side has one core, as Python's does anyway. Every connection
//! is a keep-alive HTTP/1.1 connection with one request in flight (closed loop), at each
//! connection count of `--connections` (default 16 and 64). Each server is warmed up, then
//! they take turns in four interleaved slices, so the shared machine's changing load
//! weighs on both alike. Every answer is checked: `result.task.status.state` must be
//! `TASK_STATE_COMPLETED`, else it counts as a failure (failures are not round trips).
//!
//! Streaming: `SendStreamingMessage` (server-sent events; the final event is the status
//! update to `TASK_STATE_COMPLETED`), `--streams` of them per server at `--stream-concurrency`
//! connections, interleaved in slices too. For Colloquy the figure the issue asks for is
//! the time from bob's `inform` to the client's final event: bob puts the Unix time in µs
//! at which it sends the inform into its content (`sent_us`), which comes back in the
//! artifact update, and the client subtracts it from the final event's arrival (both read
//! the same machine clock). The time from the client's request to its final event is given
//! for both servers, for comparison.
//!
//! Colloquy runs with `--retention 1s`, and each phase warms up for at least 2 s, so it is
//! measured in its steady state: removing completed conversations as fast as it completes
//! them. The SDK server's `InMemoryTaskStore` keeps every task; its memory growth is
//! reported beside colloquy's.
//!
//! bob answers each request in a task of its own (`tokio::spawn` in the handler), as an
//! agent serving many clients would; `--sequential-agent` makes it answer one message at a
//! time, as `Client::serve` runs handlers, which caps colloquy at one inform round trip per
//! request. The child processes, connections and `/proc` readings are
//! `colloquy_tests::bench`'s, as `http_bench.rs` uses them.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use colloquy_sdk::{Client, Handlers};
use colloquy_tests::bench::{self, connect, resident_bytes, spawn};
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::{Value, json};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Connection counts of the full-speed phase: a moderate load and a heavy one.
const CONNECTIONS: [usize; 2] = [16, 64];
/// Warm-up per server and connection count: past colloquy's 1 s retention, so completed
/// conversations are being removed when the measurement starts.
const WARMUP: Duration = Duration::from_secs(2);
/// Full-speed time per server and connection count, split into `SLICES`.
const MEASURE: Duration = Duration::from_secs(8);
/// Slices per server: they take turns, so the shared machine's load weighs on each alike.
const SLICES: u32 = 4;
/// Streams per server (the issue: "e.g. 2,000").
const STREAMS: usize = 2000;
/// Streams in flight at once: moderate, so the figure is the path's latency, not a queue's.
const STREAM_CONCURRENCY: usize = 8;
/// Completed conversations are removed after this (`colloquy serve --retention`).
const RETENTION: &str = "1s";
/// The state every answer must carry.
const COMPLETED: &str = "TASK_STATE_COMPLETED";

struct Options {
    colloquy: PathBuf,
    templates: PathBuf,
    python: PathBuf,
    sdk_server: PathBuf,
    pin: bool,
    measure: Duration,
    connections: Vec<usize>,
    streams: usize,
    stream_concurrency: usize,
    sequential_agent: bool,
}

/// What `--help` prints.
const USAGE: &str = "\
a2a-bench: A2A v1.0 SendMessage round trips against `colloquy serve` with a Rust SDK agent
answering, next to the A2A Python SDK's own server (a2a-sdk 1.3) in the same run (all child
processes; build first:
cargo build --release -p colloquy --bin colloquy -p colloquy-tests --bin a2a-bench;
tests/a2a-bench/run.sh makes the Python venv and runs this)

Usage: a2a-bench [OPTIONS]

Options:
  --pin                     servers on CPU 0, the load on the other CPUs (needs two CPUs)
  --seconds N               full-speed seconds per server and connection count (default 8)
  --connections LIST        connection counts, comma-separated (default 16,64)
  --streams N               SendStreamingMessage calls per server (default 2000)
  --stream-concurrency N    streams in flight at once (default 8)
  --sequential-agent        bob answers one message at a time (as Client::serve runs
                            handlers) instead of each in a task of its own
  --python PATH             the venv's python with a2a-sdk (default: python3)
  --sdk-server PATH         the baseline script (default: tests/a2a-bench/sdk_server.py)
  --colloquy PATH           the colloquy binary (default: beside this one)
  --templates DIR           colloquy's templates (default: the repository's templates/)
  -h, --help                print this text
";

/// The options, or `None` when the caller asked for `--help` (answered here).
fn options(args: Vec<String>) -> anyhow::Result<Option<Options>> {
    let dir = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .context("no directory for the binaries")?;
    let repository = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut options = Options {
        colloquy: dir.join("colloquy"),
        templates: repository.join("templates"),
        python: PathBuf::from("python3"),
        sdk_server: repository.join("tests/a2a-bench/sdk_server.py"),
        pin: false,
        measure: MEASURE,
        connections: CONNECTIONS.to_vec(),
        streams: STREAMS,
        stream_concurrency: STREAM_CONCURRENCY,
        sequential_agent: false,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |what: &str| args.next().with_context(|| format!("{arg} {what}"));
        match arg.as_str() {
            "--pin" => options.pin = true,
            "--seconds" => options.measure = Duration::from_secs(value("N")?.parse()?),
            "--connections" => {
                options.connections = value("LIST")?
                    .split(',')
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--streams" => options.streams = value("N")?.parse()?,
            "--stream-concurrency" => options.stream_concurrency = value("N")?.parse()?,
            "--sequential-agent" => options.sequential_agent = true,
            "--python" => options.python = value("PATH")?.into(),
            "--sdk-server" => options.sdk_server = value("PATH")?.into(),
            "--colloquy" => options.colloquy = value("PATH")?.into(),
            "--templates" => options.templates = value("DIR")?.into(),
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(None);
            }
            other => bail!("unknown argument {other}; see a2a-bench --help"),
        }
    }
    if options.connections.is_empty() || options.connections.contains(&0) {
        bail!("--connections: give counts above 0");
    }
    if options.streams == 0 || options.stream_concurrency == 0 {
        bail!("--streams and --stream-concurrency must be above 0");
    }
    Ok(Some(options))
}

/// Microseconds since the Unix epoch: the one clock bob and the load generator share.
fn unix_us() -> u64 {
    // A clock before 1970 reads as 0; the figures would show it.
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

/// `a2a-bench --agent URL [--sequential]`: bob, the participant of every task. Its
/// `inform` carries the time it was sent (`sent_us`) for the streaming figure.
async fn agent(url: &str, sequential: bool) -> anyhow::Result<()> {
    let bob = Client::connect(url, "bob", None).await?;
    let handlers = Handlers::new().on("fipa-request", "request", move |msg| async move {
        let inform = async move {
            msg.inform(json!({"ok": true, "sent_us": unix_us()}))
                .await
                .map(drop)
        };
        if sequential {
            return inform.await;
        }
        tokio::spawn(async move {
            if let Err(error) = inform.await {
                eprintln!("bob: inform failed: {error}");
            }
        });
        Ok(())
    });
    // The parent waits for a line with a URL before it sends anything; messages sent before
    // the inbox stream opens wait in the inbox (`serve` reads it from 0).
    println!("bob serving its inbox at {url}");
    bob.serve(handlers, 0).await?;
    Ok(())
}

/// CPU seconds the process `pid` has used so far, user plus system, all threads.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let (user, system) = bench::cpu_seconds(pid)?;
    Ok(user + system)
}

/// A server under measurement: where its A2A JSON-RPC endpoint is, and which processes do
/// its work.
struct Target {
    name: &'static str,
    addr: SocketAddr,
    path: &'static str,
    /// The server process.
    server: u32,
    /// The participant's process, if the server needs one (colloquy's bob).
    agent: Option<u32>,
}

/// Tells every request apart: message ids and JSON-RPC ids are unique across the run.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

fn a2a_request(target: &Target, method: &str) -> anyhow::Result<Request<Full<Bytes>>> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{"message":{{"messageId":"bench-{id}","role":"ROLE_USER","parts":[{{"text":"ping"}}]}}}}}}"#
    );
    Ok(Request::post(target.path)
        .header("host", target.addr.to_string())
        .header("content-type", "application/json")
        .header("a2a-version", "1.0")
        .body(Full::new(Bytes::from(body)))?)
}

/// The one field of a `SendMessage` answer that is checked; the rest is skipped unread.
#[derive(Deserialize)]
struct Answer {
    result: Option<AnswerResult>,
    error: Option<IgnoredAny>,
}

#[derive(Deserialize)]
struct AnswerResult {
    task: Option<AnswerTask>,
}

#[derive(Deserialize)]
struct AnswerTask {
    status: AnswerStatus,
}

#[derive(Deserialize)]
struct AnswerStatus {
    state: String,
}

/// One blocking `SendMessage`; `Ok(true)` when it answered a completed task.
async fn send_message(
    sender: &mut SendRequest<Full<Bytes>>,
    target: &Target,
) -> anyhow::Result<bool> {
    sender.ready().await?;
    let response = sender
        .send_request(a2a_request(target, "SendMessage")?)
        .await?;
    let ok = response.status().is_success();
    let bytes = response.into_body().collect().await?.to_bytes();
    let answer: Answer = match serde_json::from_slice(&bytes) {
        Ok(answer) => answer,
        Err(_) => return Ok(false),
    };
    let completed = answer
        .result
        .and_then(|result| result.task)
        .is_some_and(|task| task.status.state == COMPLETED);
    Ok(ok && answer.error.is_none() && completed)
}

/// What closed-loop runs recorded: each completed round trip's latency, failures, time.
#[derive(Default)]
struct Sample {
    latencies_us: Vec<u32>,
    failures: usize,
    seconds: f64,
}

impl Sample {
    fn add(&mut self, other: Sample) {
        self.latencies_us.extend(other.latencies_us);
        self.failures += other.failures;
        self.seconds += other.seconds;
    }
}

/// `p` (0 to 1) of `values` in ms; sorts them.
fn percentile_ms(values: &mut [u32], p: f64) -> f64 {
    values.sort_unstable();
    let index = ((values.len() as f64 * p) as usize).min(values.len().saturating_sub(1));
    values.get(index).copied().unwrap_or(0) as f64 / 1000.0
}

/// `SendMessage` as fast as `connections` keep-alive connections go, for `duration`.
async fn run(
    target: &Arc<Target>,
    connections: usize,
    duration: Duration,
) -> anyhow::Result<Sample> {
    let stop = Arc::new(AtomicBool::new(false));
    let begin = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..connections {
        let (stop, target) = (stop.clone(), target.clone());
        workers.push(tokio::spawn(async move {
            let mut sender = connect(target.addr).await?;
            let (mut latencies, mut failures) = (Vec::new(), 0);
            while !stop.load(Ordering::Relaxed) {
                let start = Instant::now();
                if send_message(&mut sender, &target).await? {
                    latencies.push(u32::try_from(start.elapsed().as_micros()).unwrap_or(u32::MAX));
                } else {
                    failures += 1;
                }
            }
            anyhow::Ok((latencies, failures))
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut sample = Sample::default();
    for worker in workers {
        let (latencies, failures) = worker.await??;
        sample.latencies_us.extend(latencies);
        sample.failures += failures;
    }
    sample.seconds = begin.elapsed().as_secs_f64();
    Ok(sample)
}

/// One server at one connection count, at full speed.
struct FullSpeed {
    requests_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    failures: usize,
    /// Server CPU µs per completed round trip: the server process alone.
    server_cpu_us: f64,
    /// The same with the participant's process (colloquy's bob), if any.
    with_agent_cpu_us: Option<f64>,
    /// Growth of the server's resident memory per round trip.
    rss_bytes_per_request: f64,
}

impl FullSpeed {
    /// Round trips per CPU-second of the whole server side (engine + agent for colloquy).
    fn per_core(&self) -> f64 {
        1e6 / self.with_agent_cpu_us.unwrap_or(self.server_cpu_us)
    }
}

/// Warms each target up at `connections`, then measures them in interleaved slices.
async fn full_speed(
    targets: &[Arc<Target>],
    connections: usize,
    options: &Options,
) -> anyhow::Result<Vec<FullSpeed>> {
    for target in targets {
        run(target, connections, WARMUP).await?;
    }
    let mut samples: Vec<Sample> = targets.iter().map(|_| Sample::default()).collect();
    let mut cpu = vec![(0.0, 0.0); targets.len()];
    let mut rss = vec![0.0; targets.len()];
    let slice = options.measure / SLICES;
    for _ in 0..SLICES {
        for (index, target) in targets.iter().enumerate() {
            let agent_cpu = || target.agent.map_or(Ok(0.0), cpu_seconds);
            let (server_before, agent_before) = (cpu_seconds(target.server)?, agent_cpu()?);
            let rss_before = resident_bytes(target.server)?;
            let sample = run(target, connections, slice).await?;
            cpu[index].0 += cpu_seconds(target.server)? - server_before;
            cpu[index].1 += agent_cpu()? - agent_before;
            rss[index] += resident_bytes(target.server)? - rss_before;
            samples[index].add(sample);
        }
    }
    let mut measured = Vec::new();
    for ((target, mut sample), ((server, agent), rss)) in
        targets.iter().zip(samples).zip(cpu.into_iter().zip(rss))
    {
        let requests = (sample.latencies_us.len() as f64).max(1.0);
        measured.push(FullSpeed {
            requests_per_s: sample.latencies_us.len() as f64 / sample.seconds,
            p50_ms: percentile_ms(&mut sample.latencies_us, 0.50),
            p99_ms: percentile_ms(&mut sample.latencies_us, 0.99),
            failures: sample.failures,
            server_cpu_us: server * 1e6 / requests,
            with_agent_cpu_us: target.agent.map(|_| (server + agent) * 1e6 / requests),
            rss_bytes_per_request: rss / requests,
        });
    }
    Ok(measured)
}

/// What one stream recorded: µs from request to final event, and from the participant's
/// inform to it (when the answer carried `sent_us`); `None`: no completed final event.
type StreamTimes = Option<(u32, Option<u32>)>;

/// The first `sent_us` anywhere in `value` (bob's inform content, in an artifact).
fn sent_us(value: &Value) -> Option<u64> {
    match value {
        Value::Object(map) => map
            .get("sent_us")
            // An integer, unless a JSON layer on the way made it a float.
            .and_then(|sent| sent.as_u64().or_else(|| sent.as_f64().map(|f| f as u64)))
            .or_else(|| map.values().find_map(sent_us)),
        Value::Array(items) => items.iter().find_map(sent_us),
        _ => None,
    }
}

/// The task state an event of a v1.0 stream carries, if any (`task` or `statusUpdate`).
fn event_state(result: &Value) -> Option<&str> {
    ["task", "statusUpdate"]
        .iter()
        .find_map(|kind| result.get(kind)?.get("status")?.get("state")?.as_str())
}

/// One `SendStreamingMessage`, read to the end of its stream (so the connection is reused).
async fn stream_once(
    sender: &mut SendRequest<Full<Bytes>>,
    target: &Target,
) -> anyhow::Result<StreamTimes> {
    sender.ready().await?;
    let start = Instant::now();
    let response = sender
        .send_request(a2a_request(target, "SendStreamingMessage")?)
        .await?;
    if !response.status().is_success() {
        response.into_body().collect().await?;
        return Ok(None);
    }
    let mut body = response.into_body();
    let mut pending: Vec<u8> = Vec::new();
    let (mut sent, mut done) = (None, None);
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        // Whole lines only; SSE separates lines with \n or \r\n (sse-starlette: \r\n).
        while let Some(end) = pending.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let Some(json) = line.strip_prefix(b"data:") else {
                continue;
            };
            let event: Value = serde_json::from_slice(json.trim_ascii())?;
            let Some(result) = event.get("result") else {
                continue;
            };
            sent = sent.or_else(|| sent_us(result));
            if done.is_none() && event_state(result) == Some(COMPLETED) {
                done = Some((start.elapsed(), unix_us()));
            }
        }
    }
    Ok(done.map(|(elapsed, arrived_us)| {
        let total = u32::try_from(elapsed.as_micros()).unwrap_or(u32::MAX);
        let from_inform =
            sent.map(|sent| u32::try_from(arrived_us.saturating_sub(sent)).unwrap_or(u32::MAX));
        (total, from_inform)
    }))
}

/// What the streams of one server recorded.
#[derive(Default)]
struct Streams {
    total_us: Vec<u32>,
    from_inform_us: Vec<u32>,
    failures: usize,
}

/// `count` streams at `concurrency` connections (closed loop).
async fn streams(
    target: &Arc<Target>,
    count: usize,
    concurrency: usize,
) -> anyhow::Result<Streams> {
    let left = Arc::new(AtomicU64::new(count as u64));
    let mut workers = Vec::new();
    for _ in 0..concurrency.min(count) {
        let (left, target) = (left.clone(), target.clone());
        workers.push(tokio::spawn(async move {
            let mut sender = connect(target.addr).await?;
            let mut recorded = Streams::default();
            while left
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                .is_ok()
            {
                match stream_once(&mut sender, &target).await? {
                    Some((total, from_inform)) => {
                        recorded.total_us.push(total);
                        recorded.from_inform_us.extend(from_inform);
                    }
                    None => recorded.failures += 1,
                }
            }
            anyhow::Ok(recorded)
        }));
    }
    let mut all = Streams::default();
    for worker in workers {
        let recorded = worker.await??;
        all.total_us.extend(recorded.total_us);
        all.from_inform_us.extend(recorded.from_inform_us);
        all.failures += recorded.failures;
    }
    Ok(all)
}

/// Every target's streams: a warm-up, then `options.streams` each in interleaved slices.
async fn streaming(targets: &[Arc<Target>], options: &Options) -> anyhow::Result<Vec<Streams>> {
    let concurrency = options.stream_concurrency;
    for target in targets {
        streams(target, (options.streams / 10).max(concurrency), concurrency).await?;
    }
    let mut recorded: Vec<Streams> = targets.iter().map(|_| Streams::default()).collect();
    let per_slice = options.streams.div_ceil(SLICES as usize);
    for _ in 0..SLICES {
        for (target, all) in targets.iter().zip(&mut recorded) {
            let slice = streams(target, per_slice, concurrency).await?;
            all.total_us.extend(slice.total_us);
            all.from_inform_us.extend(slice.from_inform_us);
            all.failures += slice.failures;
        }
    }
    Ok(recorded)
}

/// Everything the run measured: per connection count, each target's full speed; then each
/// target's streams; and each server's resident memory at the end.
struct Results {
    names: Vec<&'static str>,
    full_speed: Vec<(usize, Vec<FullSpeed>)>,
    streams: Vec<Streams>,
    rss_end: Vec<(f64, Option<f64>)>,
}

fn bench(options: &Options, runtime: &tokio::runtime::Runtime) -> anyhow::Result<Results> {
    let templates = options.templates.to_string_lossy();
    let colloquy = spawn(
        &options.colloquy,
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--store",
            "memory",
            "--retention",
            RETENTION,
            "--templates",
            &templates,
        ],
        options.pin,
    )?;
    let url = format!("http://{}", colloquy.addr);
    let mut agent_args = vec!["--agent", &url];
    if options.sequential_agent {
        agent_args.push("--sequential");
    }
    let bob = spawn(&std::env::current_exe()?, &agent_args, options.pin)?;
    let script = options.sdk_server.to_string_lossy();
    let python = spawn(&options.python, &[&script, "--port", "0"], options.pin)
        .context("starting the a2a-sdk server (is a2a-sdk in --python's environment?)")?;
    let targets = [
        Arc::new(Target {
            name: "colloquy",
            addr: colloquy.addr,
            path: "/a2a/bob",
            server: colloquy.pid(),
            agent: Some(bob.pid()),
        }),
        Arc::new(Target {
            name: "a2a-sdk",
            addr: python.addr,
            path: "/",
            server: python.pid(),
            agent: None,
        }),
    ];
    runtime.block_on(async {
        let mut full = Vec::new();
        for &connections in &options.connections {
            full.push((
                connections,
                full_speed(&targets, connections, options).await?,
            ));
        }
        let streams = streaming(&targets, options).await?;
        let rss_end = targets
            .iter()
            .map(|target| {
                Ok((
                    resident_bytes(target.server)?,
                    target.agent.map(resident_bytes).transpose()?,
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        anyhow::Ok(Results {
            names: targets.iter().map(|target| target.name).collect(),
            full_speed: full,
            streams,
            rss_end,
        })
    })
}

fn report(options: &Options, results: &mut Results) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "A2A v1.0 SendMessage (JSON-RPC, blocking): colloquy (memory store, retention \
         {RETENTION}) with the Rust SDK agent bob ({}) vs the a2a-sdk 1.3 server (uvicorn, one \
         process); servers {}; {}s per server per connection count, {SLICES} interleaved slices",
        if options.sequential_agent {
            "one message at a time"
        } else {
            "a task per message"
        },
        if options.pin {
            "pinned to CPU 0 (colloquy and bob one tokio worker each), load on the others"
        } else {
            "unpinned"
        },
        options.measure.as_secs(),
    )?;
    writeln!(
        out,
        "{:<26} {:>5} {:>13} {:>8} {:>8} {:>11} {:>12} {:>9} {:>9}",
        "",
        "conns",
        "round trips/s",
        "p50 ms",
        "p99 ms",
        "CPU µs/req",
        "per CPU-sec",
        "failures",
        "RSS B/req"
    )?;
    for (connections, measured) in &results.full_speed {
        for (name, m) in results.names.iter().zip(measured) {
            let rows: Vec<(String, f64)> = match m.with_agent_cpu_us {
                Some(both) => vec![
                    (format!("{name} engine+agent"), both),
                    (format!("{name} engine alone"), m.server_cpu_us),
                ],
                None => vec![(name.to_string(), m.server_cpu_us)],
            };
            for (row, (label, cpu_us)) in rows.into_iter().enumerate() {
                if row == 0 {
                    writeln!(
                        out,
                        "{label:<26} {connections:>5} {:>13.0} {:>8.2} {:>8.2} {cpu_us:>11.1} \
                         {:>12.0} {:>9} {:>9.0}",
                        m.requests_per_s,
                        m.p50_ms,
                        m.p99_ms,
                        1e6 / cpu_us,
                        m.failures,
                        m.rss_bytes_per_request
                    )?;
                } else {
                    writeln!(
                        out,
                        "{label:<26} {:>5} {:>13} {:>8} {:>8} {cpu_us:>11.1} {:>12.0}",
                        "",
                        "",
                        "",
                        "",
                        1e6 / cpu_us
                    )?;
                }
            }
        }
    }
    for (connections, measured) in &results.full_speed {
        let [colloquy, sdk] = &measured[..] else {
            bail!("two servers measured");
        };
        writeln!(
            out,
            "colloquy / a2a-sdk at {connections} connections: rate {:.1}x; per core {:.1}x \
             (engine+agent), {:.1}x (engine alone); target per core: 20x",
            colloquy.requests_per_s / sdk.requests_per_s,
            colloquy.per_core() / sdk.per_core(),
            sdk.server_cpu_us / colloquy.server_cpu_us,
        )?;
    }
    writeln!(
        out,
        "SendStreamingMessage, {} streams per server at {} connections, {SLICES} interleaved \
         slices:",
        options.streams, options.stream_concurrency
    )?;
    writeln!(
        out,
        "{:<26} {:>18} {:>18} {:>17} {:>17} {:>9}",
        "",
        "request→final p50",
        "request→final p99",
        "inform→final p50",
        "inform→final p99",
        "failures"
    )?;
    for (name, streams) in results.names.iter().zip(&mut results.streams) {
        let (total_p50, total_p99) = (
            percentile_ms(&mut streams.total_us, 0.50),
            percentile_ms(&mut streams.total_us, 0.99),
        );
        let from_inform = if streams.from_inform_us.is_empty() {
            ("—".to_owned(), "—".to_owned())
        } else {
            (
                format!("{:.2} ms", percentile_ms(&mut streams.from_inform_us, 0.50)),
                format!("{:.2} ms", percentile_ms(&mut streams.from_inform_us, 0.99)),
            )
        };
        writeln!(
            out,
            "{name:<26} {:>15.2} ms {:>15.2} ms {:>17} {:>17} {:>9}",
            total_p50, total_p99, from_inform.0, from_inform.1, streams.failures
        )?;
    }
    writeln!(
        out,
        "(inform→final: from bob's inform leaving bob to the client's final event, the task \
         completed; the a2a-sdk server has no separate participant)"
    )?;
    let rss: Vec<String> = results
        .names
        .iter()
        .zip(&results.rss_end)
        .map(|(name, (server, agent))| match agent {
            Some(agent) => format!(
                "{name} {:.1} MB (+ bob {:.1} MB)",
                server / 1e6,
                agent / 1e6
            ),
            None => format!("{name} {:.1} MB", server / 1e6),
        })
        .collect();
    writeln!(out, "resident memory at the end: {}", rss.join(", "))?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--agent") {
        let url = args.get(1).context("--agent URL")?.clone();
        let sequential = args.get(2).map(String::as_str) == Some("--sequential");
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?;
        return runtime.block_on(agent(&url, sequential));
    }
    let Some(options) = options(args)? else {
        return Ok(());
    };
    if options.pin {
        // The load generator stays off the servers' CPU (its children are pinned to CPU 0
        // by their own taskset).
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        if cpus < 2 {
            bail!("--pin needs at least two CPUs");
        }
        let status = Command::new("taskset")
            .args([
                "-a",
                "-p",
                "-c",
                &format!("1-{}", cpus - 1),
                &std::process::id().to_string(),
            ])
            .stdout(Stdio::null())
            .status()?;
        if !status.success() {
            bail!("taskset failed");
        }
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut results = bench(&options, &runtime)?;
    report(&options, &mut results)
}
