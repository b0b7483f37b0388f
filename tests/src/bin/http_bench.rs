//! The HTTP benchmark: request conversations against `colloquy serve` (memory store, token
//! auth), next to an axum JSON echo server measured in the same run. `--store SPEC` adds
//! colloquy on a durable store (SQLite, Postgres, Redis), reported against the memory store
//! of the same run.
//!
//! ```sh
//! cargo build --release -p colloquy --bin colloquy -p colloquy-tests --bin bench-echo --bin http-bench
//! target/release/http-bench --pin
//! ```
//!
//! This process is the load generator; each server runs as a child process (with `--pin`,
//! servers on CPU 0 and the load on the other CPUs, one server thread). Every connection is
//! a keep-alive HTTP/1.1 connection with one request in flight. All servers run at once;
//! each is warmed up, then they take turns at full speed (closed loop; four slices each,
//! interleaved, so the shared machine's changing load weighs on every server alike), then
//! each runs alone open-loop, paced at half its full-speed rate, with latencies counted from
//! each request's scheduled time (no coordinated omission). A request conversation is three messages, each one request: `request` (in the
//! start call), `agree`, `inform`; the echo server answers one JSON body per request.
//!
//! With `--retention S`, colloquy runs with `--retention Ss` and warms up for at least S + 1
//! seconds, so it is measured in its steady state: removing completed conversations as fast
//! as it completes them, and reusing their memory. With the default retention (5 minutes),
//! every conversation of the run stays in memory and the server's heap grows by about 1 KB
//! per request; on a fresh process the kernel zeroes each new page on first touch.
//!
//! With `--hook`, another server runs the same conversations with the credit-assessment
//! policy as `fipa-request`'s `on_message` hook, so every message calls it: the cost of a
//! hook as the HTTP service sees it. `--hook rust,python,js` runs one server per build of
//! the policy (the Rust core module, `templates/examples/build.sh`; the Python component,
//! `guest-sdk/python/build-examples.sh`; the TypeScript one on QuickJS,
//! `guest-sdk/js/build-examples.sh`), each with its example template's memory cap; an item
//! `NAME=PATH` runs the hook file at PATH under that name. Each hooked server is reported
//! against the colloquy without a hook of the same run: its rate as a share of that one's,
//! and the server CPU it adds per request, twice: at full speed, and with both servers paced
//! at one common rate (half the slowest hooked server's full speed), where neither is
//! saturated. At full speed the slower server also loses batching (fewer requests per
//! wake-up, more wake-ups of the clients), which its CPU per request counts; at a common
//! rate both batch alike, so the difference is the hook's. Beside these, the load generator
//! times each hook's call in process (`HookRuntime::call` on events like the served ones),
//! so the served cost is given as a multiple of the in-process cost of the same run.
//!
//! Figure, 2026-12-04: `--pin --retention 1` at c29eeb4 gave a server CPU ratio
//! (echo/colloquy) of 0.42–0.47 over three runs, and 0.45–0.48 with issue 37's four hot-path
//! commits on top, on a shared two-core VM under a concurrent build (load average 4–5).
//!
//! Figure, 2026-12-05: `--store sqlite:PATH --store postgres://…` (Postgres 15 on loopback,
//! fsync on, `synchronous_commit = on`, its own processes unpinned on the same two cores)
//! gave rates of 0.47x (SQLite) and 0.22x (Postgres) the memory store's in one run, 0.46x and
//! 0.16x in a run before the Postgres writer pipelined its statements; pgbench alone on the
//! same cluster appended 4.7k messages/s at one per transaction (64 clients) and 21.8k/s at
//! 32 per transaction (one client): docs/stores.md.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use colloquy_hooks::{HookRuntime, HookRuntimeConfig};
use colloquy_policy::{CompiledTemplate, TemplateCompiler};
use colloquy_protocol::hook::HookInput;
use colloquy_protocol::template::HookEvent;
use colloquy_tests::bench::{Process as Server, connect, cpu_seconds, resident_bytes, spawn};
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use serde::Deserialize;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Keep-alive connections, as the issue asks.
const CONNECTIONS: usize = 64;
const WARMUP: Duration = Duration::from_secs(2);
const MEASURE: Duration = Duration::from_secs(8);

struct Options {
    colloquy: PathBuf,
    echo: PathBuf,
    pin: bool,
    measure: Duration,
    /// Also measure colloquy with each of these hooks on every message (one server each).
    hooks: Vec<HookChoice>,
    /// `colloquy serve --retention`, in whole seconds; `None`: the server's default.
    retention_s: Option<u64>,
    /// Also measure colloquy with a candidate of `fipa-request` in shadow, one server per
    /// sample share.
    shadows: Vec<f64>,
    /// Also measure these variants of colloquy (another binary, more flags), one server each.
    variants: Vec<Variant>,
}

/// A variant of the colloquy server `--variant` measures beside the plain one: another build
/// (the one before a change, say) and/or more `serve` flags.
struct Variant {
    /// Its name in the report.
    name: String,
    /// Its binary (`None`: the same as the plain server's).
    colloquy: Option<PathBuf>,
    /// Flags added to `serve`'s; `{sink}` stands for the URL of [`serve_sink`]'s receiver.
    args: Vec<String>,
}

/// `--variant NAME=[PATH][:ARGS]`: ARGS comma-separated.
fn variant(spec: &str) -> anyhow::Result<Variant> {
    let (name, rest) = spec
        .split_once('=')
        .context("--variant NAME=[PATH][:ARGS]")?;
    let (path, args) = rest.split_once(':').unwrap_or((rest, ""));
    Ok(Variant {
        name: name.to_owned(),
        colloquy: (!path.is_empty()).then(|| PathBuf::from(path)),
        args: args
            .split(',')
            .filter(|arg| !arg.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

/// `--store SPEC`: colloquy on that store, named by its kind (`sqlite`, `postgres`, …).
fn store_variant(spec: &str) -> Variant {
    let kind = spec
        .split_once(':')
        .map_or(spec, |(kind, _)| kind)
        .trim_end_matches("ql");
    Variant {
        name: kind.to_owned(),
        colloquy: None,
        args: vec!["--store".to_owned(), spec.to_owned()],
    }
}

/// The placeholder of `--variant`'s flags for the discarding OTLP receiver's URL.
const SINK: &str = "{sink}";

/// An HTTP receiver on a loopback port of this process that reads and discards every
/// request's body and answers 200 with none: the collector of a variant that exports
/// traces (`--otlp-endpoint {sink}`), costing the servers nothing of their own CPU.
async fn serve_sink() -> anyhow::Result<SocketAddr> {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = service_fn(|request: Request<hyper::body::Incoming>| async move {
                let _ = request.into_body().collect().await;
                Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(Bytes::new())))
            });
            tokio::spawn(
                http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service),
            );
        }
    });
    Ok(addr)
}

impl Options {
    /// The warm-up: long enough, with a retention shorter than the default, for the server
    /// to remove completed conversations as fast as it completes them (its steady state).
    fn warmup(&self) -> Duration {
        match self.retention_s {
            Some(seconds) => WARMUP.max(Duration::from_secs(seconds + 1)),
            None => WARMUP,
        }
    }
}

/// A build of the credit policy `--hook` measures.
struct HookChoice {
    /// Its name in the report (`rust`, `python`, `js`, or the caller's).
    name: String,
    /// The hook file.
    module: PathBuf,
    /// `limits` (memory cap, timeout), as the policy's example template sets them (`None`:
    /// the defaults).
    limits: Option<(u64, u64)>,
}

/// The builds `--hook` knows by name: the hook file and the example template beside it
/// (under `templates/examples/credit-assessment/`), and what builds it.
const KNOWN_HOOKS: [(&str, &str, &str, &str); 3] = [
    (
        "rust",
        "credit_assessment.wasm",
        "credit-assessment.yaml",
        "templates/examples/build.sh",
    ),
    (
        "python",
        "credit_assessment_py.wasm",
        "credit-assessment-py.yaml",
        "guest-sdk/python/build-examples.sh",
    ),
    (
        "js",
        "credit_assessment_js.wasm",
        "credit-assessment-js.yaml",
        "guest-sdk/js/build-examples.sh",
    ),
];

/// `--hook`'s list: `rust`, `python`, `js`, or `NAME=PATH`, comma-separated.
fn hook_choices(list: &str) -> anyhow::Result<Vec<HookChoice>> {
    let examples =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates/examples/credit-assessment");
    let mut choices = Vec::new();
    for item in list.split(',').filter(|item| !item.is_empty()) {
        let (name, path) = match item.split_once('=') {
            Some((name, path)) => (name, Some(PathBuf::from(path))),
            None => (item, None),
        };
        let known = KNOWN_HOOKS.iter().find(|(known, ..)| *known == name);
        let module = match (path, known) {
            (Some(path), _) => path,
            (None, Some((_, file, _, builder))) => {
                let module = examples.join(file);
                if !module.is_file() {
                    bail!(
                        "{} is missing: build it with {builder}, or name a file: --hook {name}=PATH",
                        module.display()
                    );
                }
                module
            }
            (None, None) => {
                bail!("--hook: unknown hook `{name}`; known: rust, python, js (or NAME=PATH)")
            }
        };
        // The example template's limits, read from its text (its own hook file need not
        // exist).
        let limits = known.and_then(|(_, _, template, _)| {
            let text = std::fs::read_to_string(examples.join(template)).ok()?;
            let compiled = TemplateCompiler::new().compile_str(&text, None).ok()?;
            compiled
                .hooks
                .map(|spec| (spec.limits.memory_bytes, spec.limits.timeout_ms))
        });
        choices.push(HookChoice {
            name: name.to_owned(),
            module,
            limits,
        });
    }
    Ok(choices)
}

/// What `--help` prints.
const USAGE: &str = "\
http-bench: request conversations against `colloquy serve`, next to an axum JSON echo server
measured in the same run (both child processes; build them first:
cargo build --release -p colloquy --bin colloquy -p colloquy-tests --bin bench-echo --bin http-bench)

Usage: http-bench [OPTIONS]

Options:
  --pin                servers on CPU 0, the load on the other CPUs (needs two CPUs)
  --hook [LIST]        also measure colloquy with the credit policy as a hook on every
                       message, one server per item of LIST (default: rust): rust, python,
                       js (the builds beside templates/examples/credit-assessment/*.yaml),
                       or NAME=PATH for any hook file; comma-separated
  --shadow [LIST]      also measure colloquy with a candidate of fipa-request staged in
                       shadow (the same protocol, a new revision, so every twin runs to the
                       end), one server per sample share in LIST (default: 1.0,0.1)
  --variant NAME=[PATH][:ARGS]
                       also measure a variant of colloquy: the binary at PATH (e.g. the build
                       before a change) and/or with more `serve` flags ARGS, comma-separated,
                       where {sink} is the URL of an OTLP/HTTP receiver in this process that
                       discards what it gets (e.g. traced=:--otlp-endpoint,{sink}); repeatable
  --store SPEC         also measure colloquy on the store SPEC (`sqlite:PATH`,
                       `postgres://USER@HOST:PORT/DB`, `redis://HOST:PORT`), one server each,
                       reported as a variant against colloquy on the memory store; repeatable
  --retention SECONDS  run colloquy with --retention SECONDSs and warm up past it
  --seconds N          measure for N seconds (default 8)
  --colloquy PATH      the colloquy binary (default: beside this one)
  --echo PATH          the bench-echo binary (default: beside this one)
  -h, --help           print this text
";

/// The options, or `None` when the caller asked for `--help` (answered here).
fn options() -> anyhow::Result<Option<Options>> {
    let dir = std::env::current_exe()?
        .parent()
        .map(Path::to_path_buf)
        .context("no directory for the binaries")?;
    let mut options = Options {
        colloquy: dir.join("colloquy"),
        echo: dir.join("bench-echo"),
        pin: false,
        measure: MEASURE,
        hooks: Vec::new(),
        retention_s: None,
        shadows: Vec::new(),
        variants: Vec::new(),
    };
    let mut args = std::env::args().skip(1).peekable();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--pin" => options.pin = true,
            "--hook" => {
                let list = match args.next_if(|next| !next.starts_with('-')) {
                    Some(list) => list,
                    None => "rust".to_owned(),
                };
                options.hooks.extend(hook_choices(&list)?);
            }
            "--shadow" => {
                let list = match args.next_if(|next| !next.starts_with('-')) {
                    Some(list) => list,
                    None => "1.0,0.1".to_owned(),
                };
                for sample in list.split(',').filter(|item| !item.is_empty()) {
                    let sample: f64 = sample.parse().context("--shadow: a share from 0 to 1")?;
                    if !(0.0..=1.0).contains(&sample) {
                        bail!("--shadow: {sample} is not a share from 0 to 1");
                    }
                    options.shadows.push(sample);
                }
            }
            "--variant" => options.variants.push(variant(
                &args.next().context("--variant NAME=[PATH][:ARGS]")?,
            )?),
            "--store" => {
                let spec = args.next().context("--store SPEC")?;
                options.variants.push(store_variant(&spec));
            }
            "--colloquy" => options.colloquy = args.next().context("--colloquy PATH")?.into(),
            "--echo" => options.echo = args.next().context("--echo PATH")?.into(),
            "--retention" => {
                options.retention_s = Some(args.next().context("--retention SECONDS")?.parse()?)
            }
            "--seconds" => {
                options.measure = Duration::from_secs(args.next().context("--seconds N")?.parse()?)
            }
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(None);
            }
            other => bail!("unknown argument {other}; see http-bench --help"),
        }
    }
    Ok(Some(options))
}

async fn post(
    sender: &mut SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    path: &str,
    token: Option<&str>,
    body: Bytes,
) -> anyhow::Result<Bytes> {
    sender.ready().await?;
    let mut request = Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = sender.send_request(request.body(Full::new(body))?).await?;
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!("{path}: {status}: {}", String::from_utf8_lossy(&bytes));
    }
    Ok(bytes)
}

#[derive(Clone, Copy, PartialEq)]
enum Workload {
    Echo,
    Conversations,
}

#[derive(Deserialize)]
struct Started {
    id: String,
}

const REQUEST: &str = r#"{"template":"fipa-request","participants":["bob"],"message":{"performative":"request","content":{"action":"book-room","room":"Lovelace"}}}"#;
const AGREE: &str = r#"{"performative":"agree","content":{}}"#;
const INFORM: &str = r#"{"performative":"inform","content":{"done":true,"booking":"LV-0412"}}"#;

/// One unit of work: a conversation (three requests) or three echoes. Returns the latency
/// of each request, measured from `scheduled` for the first one.
async fn unit(
    sender: &mut SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    workload: Workload,
    latencies: &mut Vec<u32>,
    scheduled: Instant,
) -> anyhow::Result<()> {
    let mut record = |since: Instant| {
        latencies.push(u32::try_from(since.elapsed().as_micros()).unwrap_or(u32::MAX));
    };
    match workload {
        Workload::Echo => {
            for (i, body) in [REQUEST, AGREE, INFORM].into_iter().enumerate() {
                let start = if i == 0 { scheduled } else { Instant::now() };
                post(
                    sender,
                    addr,
                    "/echo",
                    None,
                    Bytes::from_static(body.as_bytes()),
                )
                .await?;
                record(start);
            }
        }
        Workload::Conversations => {
            let started = post(
                sender,
                addr,
                "/v1/conversations",
                Some("alice-token"),
                Bytes::from_static(REQUEST.as_bytes()),
            )
            .await?;
            record(scheduled);
            let id = serde_json::from_slice::<Started>(&started)?.id;
            let path = format!("/v1/conversations/{id}/messages");
            for body in [AGREE, INFORM] {
                let start = Instant::now();
                post(
                    sender,
                    addr,
                    &path,
                    Some("bob-token"),
                    Bytes::from_static(body.as_bytes()),
                )
                .await?;
                record(start);
            }
        }
    }
    Ok(())
}

#[derive(Clone)]
struct Figures {
    requests_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// What one or more runs recorded: every request's latency, and how long they ran.
#[derive(Default)]
struct Sample {
    latencies_us: Vec<u32>,
    seconds: f64,
}

impl Sample {
    fn add(&mut self, other: Sample) {
        self.latencies_us.extend(other.latencies_us);
        self.seconds += other.seconds;
    }

    fn figures(mut self) -> Figures {
        let all = &mut self.latencies_us;
        all.sort_unstable();
        let at = |q: f64| {
            all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
                .copied()
                .unwrap_or(0) as f64
                / 1000.0
        };
        Figures {
            requests_per_s: all.len() as f64 / self.seconds.max(f64::MIN_POSITIVE),
            p50_ms: at(0.50),
            p99_ms: at(0.99),
        }
    }
}

/// Runs `workload` on every connection for `duration`; paced at `rate` requests/s in
/// total when given (open loop), as fast as possible otherwise.
async fn run(
    addr: SocketAddr,
    workload: Workload,
    duration: Duration,
    rate: Option<f64>,
) -> anyhow::Result<Sample> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    let begin = Instant::now();
    for n in 0..CONNECTIONS {
        let stop = stop.clone();
        workers.push(tokio::spawn(async move {
            let mut sender = connect(addr).await?;
            let mut latencies = Vec::new();
            // Three requests per unit; each connection carries 1/CONNECTIONS of the rate.
            let interval = rate.map(|r| Duration::from_secs_f64(3.0 * CONNECTIONS as f64 / r));
            let mut next = Instant::now()
                + interval.map_or(Duration::ZERO, |i| i.mul_f64(n as f64 / CONNECTIONS as f64));
            while !stop.load(Ordering::Relaxed) {
                let scheduled = match interval {
                    Some(interval) => {
                        tokio::time::sleep_until(next.into()).await;
                        let at = next;
                        next += interval;
                        at
                    }
                    None => Instant::now(),
                };
                unit(&mut sender, addr, workload, &mut latencies, scheduled).await?;
            }
            anyhow::Ok(latencies)
        }));
    }
    tokio::time::sleep(duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for worker in workers {
        all.extend(worker.await??);
    }
    Ok(Sample {
        latencies_us: all,
        seconds: begin.elapsed().as_secs_f64(),
    })
}

#[derive(Clone)]
struct Measured {
    max: Figures,
    half: Figures,
    /// Server CPU time (user + system, all threads) per request in the full-speed phase:
    /// unlike the rate, barely moved by other load on the machine.
    cpu_us_per_request: f64,
    /// The kernel's share of it (system time: sockets, page faults).
    system_us_per_request: f64,
    /// Growth of the server's resident memory over the full-speed phase, per request.
    rss_bytes_per_request: f64,
    /// The mean duration of the server's hook calls in the full-speed phase (its `/metrics`:
    /// `colloquy_hook_duration_seconds`, `on_message`), when it made any.
    served_call_us: Option<f64>,
}

/// The server's `on_message` hook calls so far and their total duration in seconds, from
/// its `/metrics`.
async fn hook_calls(addr: SocketAddr) -> anyhow::Result<(f64, f64)> {
    let mut sender = connect(addr).await?;
    let request = Request::get("/metrics")
        .header("host", addr.to_string())
        .body(Full::new(Bytes::new()))?;
    let response = sender.send_request(request).await?;
    let text = String::from_utf8(response.into_body().collect().await?.to_bytes().to_vec())?;
    let series = "{event=\"on_message\",result=\"ok\"} ";
    let value = |name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(series))
            .map_or(Ok(0.0), str::parse::<f64>)
    };
    Ok((
        value("colloquy_hook_duration_seconds_count")?,
        value("colloquy_hook_duration_seconds_sum")?,
    ))
}

/// Full-speed slices per server: the servers take turns, so a change in the machine's
/// other load (these machines are shared) weighs on all of them alike instead of on
/// whichever ran at the time.
const SLICES: u32 = 4;

/// A server under measurement and what it has recorded so far.
struct Target<'a> {
    server: &'a Server,
    workload: Workload,
    full_speed: Sample,
    cpu: (f64, f64),
    rss_growth: f64,
    /// Hook calls and their total seconds.
    hook_calls: (f64, f64),
}

/// Warms every server up, measures them at full speed in interleaved slices (`SLICES` per
/// server, `options.measure` in total each), then each alone at half its full-speed rate.
async fn measure(
    servers: &[(&Server, Workload)],
    options: &Options,
) -> anyhow::Result<Vec<Measured>> {
    let mut targets = Vec::new();
    for &(server, workload) in servers {
        run(server.addr, workload, options.warmup(), None).await?;
        targets.push(Target {
            server,
            workload,
            full_speed: Sample::default(),
            cpu: (0.0, 0.0),
            rss_growth: 0.0,
            hook_calls: (0.0, 0.0),
        });
    }
    let slice = options.measure / SLICES;
    for _ in 0..SLICES {
        for target in &mut targets {
            let pid = target.server.child.id();
            let conversations = target.workload == Workload::Conversations;
            let calls_before = match conversations {
                true => hook_calls(target.server.addr).await?,
                false => (0.0, 0.0),
            };
            let (cpu_before, rss_before) = (cpu_seconds(pid)?, resident_bytes(pid)?);
            let sample = run(target.server.addr, target.workload, slice, None).await?;
            let cpu_after = cpu_seconds(pid)?;
            if conversations {
                let calls_after = hook_calls(target.server.addr).await?;
                target.hook_calls.0 += calls_after.0 - calls_before.0;
                target.hook_calls.1 += calls_after.1 - calls_before.1;
            }
            target.cpu.0 += cpu_after.0 - cpu_before.0;
            target.cpu.1 += cpu_after.1 - cpu_before.1;
            target.rss_growth += resident_bytes(pid)? - rss_before;
            target.full_speed.add(sample);
        }
    }
    let mut measured = Vec::new();
    for target in targets {
        let requests = (target.full_speed.latencies_us.len() as f64).max(1.0);
        let (user, system) = target.cpu;
        let max = target.full_speed.figures();
        let half = run(
            target.server.addr,
            target.workload,
            options.measure,
            Some(max.requests_per_s / 2.0),
        )
        .await?
        .figures();
        measured.push(Measured {
            max,
            half,
            cpu_us_per_request: (user + system) * 1e6 / requests,
            system_us_per_request: system * 1e6 / requests,
            rss_bytes_per_request: target.rss_growth / requests,
            served_call_us: (target.hook_calls.0 > 0.0)
                .then(|| target.hook_calls.1 * 1e6 / target.hook_calls.0),
        });
    }
    Ok(measured)
}

/// Server CPU per request (user + system µs) of each of `servers` paced at `rate` requests/s
/// (open loop), in `SLICES` interleaved slices of `options.measure` in total each.
async fn cpu_at_rate(
    servers: &[&Server],
    rate: f64,
    options: &Options,
) -> anyhow::Result<Vec<f64>> {
    let mut cpu = vec![0.0; servers.len()];
    let mut requests = vec![0usize; servers.len()];
    let slice = options.measure / SLICES;
    for _ in 0..SLICES {
        for (index, server) in servers.iter().enumerate() {
            let pid = server.child.id();
            let before = cpu_seconds(pid)?;
            let sample = run(server.addr, Workload::Conversations, slice, Some(rate)).await?;
            let after = cpu_seconds(pid)?;
            cpu[index] += (after.0 - before.0) + (after.1 - before.1);
            requests[index] += sample.latencies_us.len();
        }
    }
    Ok(cpu
        .iter()
        .zip(&requests)
        .map(|(cpu, requests)| cpu * 1e6 / (*requests as f64).max(1.0))
        .collect())
}

/// Rounds of in-process calls per hook; the fastest counts.
const IN_PROCESS_ROUNDS: usize = 5;
/// How long each round of in-process calls runs, about.
const IN_PROCESS_ROUND: Duration = Duration::from_millis(300);

/// µs per call of `template`'s hook called in this process (`HookRuntime::call`, reusing an
/// instance, as a server does) on the `on_message` events of a request conversation's three
/// messages in turn, as the template's `reads: [threads]` cuts them.
fn in_process_us(runtime: &HookRuntime, template: &CompiledTemplate) -> anyhow::Result<f64> {
    let event = |performative: &str, state: &str, sender: &str, receiver: &str, content| {
        serde_json::json!({
            "abi_version": 1, "hook": "on_message", "now": 1767225600000u64,
            "conversation": {
                "id": "0197a5e2-3c4d-7e8f-9a0b-1c2d3e4f5a6b", "status": "active",
                "threads": [{"participant": "bob", "state": state}], "retry_attempts": 0
            },
            "message": {
                "id": "0197a5e2-3c4d-7e8f-9a0b-1c2d3e4f5a6c", "performative": performative,
                "sender": sender, "receivers": [receiver], "content": content
            },
            "config": template.hooks.as_ref().map(|spec| spec.config.clone())
        })
    };
    let events: Vec<HookInput<'static>> = [
        event(
            "request",
            "start",
            "alice",
            "bob",
            serde_json::json!({"action": "book-room", "room": "Lovelace"}),
        ),
        event("agree", "requested", "bob", "alice", serde_json::json!({})),
        event(
            "inform",
            "agreed",
            "bob",
            "alice",
            serde_json::json!({"done": true, "booking": "LV-0412"}),
        ),
    ]
    .into_iter()
    .map(serde_json::from_value)
    .collect::<Result<_, _>>()?;
    let calls = |count: usize| -> anyhow::Result<Duration> {
        let began = Instant::now();
        for input in events.iter().cycle().take(count) {
            let output = runtime.call(template, HookEvent::OnMessage, input)?;
            std::hint::black_box(output);
        }
        Ok(began.elapsed())
    };
    // Warm-up, which also sizes the rounds.
    let warm = calls(300)?.as_secs_f64() / 300.0;
    let per_round = ((IN_PROCESS_ROUND.as_secs_f64() / warm) as usize).max(300);
    let mut best = f64::MAX;
    for _ in 0..IN_PROCESS_ROUNDS {
        best = best.min(calls(per_round)?.as_secs_f64() * 1e6 / per_round as f64);
    }
    Ok(best)
}

/// What the run measured of one hooked server.
struct Hooked {
    name: String,
    measured: Measured,
    /// Server CPU per request at the common paced rate.
    cpu_at_common_us: f64,
    /// µs per call in process.
    in_process_us: f64,
}

fn main() -> anyhow::Result<()> {
    let Some(options) = options()? else {
        return Ok(());
    };
    if options.pin {
        // The load generator stays off the servers' CPU.
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
    // Everything the servers read or write outside the source tree (the agents file, the
    // hooked templates, the hook runtime's compile cache), removed at the end.
    let scratch = std::env::temp_dir().join(format!("colloquy-http-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let result = bench(&options, &runtime, &scratch);
    let _ = std::fs::remove_dir_all(&scratch);
    let (echo, colloquy, hooked, shadows, common_rate, variants) = result?;
    report(&options, &echo, &colloquy, &hooked, common_rate)?;
    report_shadows(&colloquy, &shadows, common_rate)?;
    report_variants(&colloquy, &variants)
}

/// Each `--variant` against the plain colloquy server of the same run.
fn report_variants(colloquy: &Measured, variants: &[(String, Measured)]) -> anyhow::Result<()> {
    if variants.is_empty() {
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "variants, against colloquy in the same run (rate x: its rate over colloquy's; CPU x: \
         its server CPU per request over colloquy's):"
    )?;
    writeln!(
        out,
        "{:<12} {:>10} {:>7} {:>7} {:>7} | {:>8} {:>8} {:>7}",
        "variant", "requests/s", "rate x", "p50 ms", "p99 ms", "CPU µs", "CPU +µs", "CPU x"
    )?;
    for (name, m) in variants {
        writeln!(
            out,
            "{:<12} {:>10.0} {:>6.3}x {:>7.2} {:>7.2} | {:>8.1} {:>+8.1} {:>6.3}x",
            name,
            m.max.requests_per_s,
            m.max.requests_per_s / colloquy.max.requests_per_s,
            m.max.p50_ms,
            m.max.p99_ms,
            m.cpu_us_per_request,
            m.cpu_us_per_request - colloquy.cpu_us_per_request,
            m.cpu_us_per_request / colloquy.cpu_us_per_request
        )?;
    }
    Ok(())
}

/// Everything the run measured: echo, colloquy, each hooked server, each server with a
/// candidate in shadow, and the common rate the colloquy servers were paced at (`None`
/// without hooks or shadows).
type Results = (
    Measured,
    Measured,
    Vec<Hooked>,
    Vec<Shadowed>,
    Option<(f64, f64)>,
    Vec<(String, Measured)>,
);

/// What the run measured of one server with a candidate in shadow.
struct Shadowed {
    /// The share of conversations shadowed.
    sample: f64,
    measured: Measured,
    /// Server CPU per request at the common paced rate.
    cpu_at_common_us: f64,
    /// Its candidate's report after the run (`GET /v1/templates/fipa-request/candidates`).
    report: serde_json::Value,
}

/// The admin token of the bench's servers (it stages the shadow candidates).
const BENCH_ADMIN: &str = "bench-admin";

/// Stages `yaml` as the candidate of `fipa-request` on the server at `addr`.
async fn stage(addr: SocketAddr, yaml: &str, sample: f64) -> anyhow::Result<()> {
    let mut sender = connect(addr).await?;
    let request = Request::post(format!(
        "/v1/templates/fipa-request/candidates?sample={sample}"
    ))
    .header("host", addr.to_string())
    .header("authorization", format!("Bearer {BENCH_ADMIN}"))
    .body(Full::new(Bytes::from(yaml.to_owned())))?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let body = response.into_body().collect().await?.to_bytes();
    if status.as_u16() != 201 {
        bail!(
            "staging the shadow candidate: {status} {}",
            String::from_utf8_lossy(&body)
        );
    }
    Ok(())
}

/// The candidate report of `fipa-request` on the server at `addr`.
async fn candidate_report(addr: SocketAddr) -> anyhow::Result<serde_json::Value> {
    let mut sender = connect(addr).await?;
    let request = Request::get("/v1/templates/fipa-request/candidates")
        .header("host", addr.to_string())
        .header("authorization", format!("Bearer {BENCH_ADMIN}"))
        .body(Full::new(Bytes::new()))?;
    let response = sender.send_request(request).await?;
    let body = response.into_body().collect().await?.to_bytes();
    Ok(serde_json::from_slice(&body)?)
}

fn bench(
    options: &Options,
    runtime: &tokio::runtime::Runtime,
    scratch: &Path,
) -> anyhow::Result<Results> {
    let agents = scratch.join("agents.yaml");
    let data = scratch.join("data");
    std::fs::write(
        &agents,
        format!(
            "admin_token: {BENCH_ADMIN}\nagents:\n  - {{id: alice, token: alice-token}}\n  - {{id: bob, token: bob-token}}\n"
        ),
    )?;
    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");
    // The hooks timed in process first, while no server runs; they compile into the cache
    // the servers then read (`colloquy serve` keeps it in `<data-dir>/hook-cache`).
    let hook_runtime = HookRuntime::new(HookRuntimeConfig {
        cache_dir: Some(data.join("hook-cache")),
        ..HookRuntimeConfig::default()
    })?;
    let mut hooked_dirs = Vec::new();
    let mut in_process = Vec::new();
    for choice in &options.hooks {
        let dir = hooked_templates(
            &templates,
            &scratch.join("hooked").join(&choice.name),
            choice,
        )?;
        let template = TemplateCompiler::new()
            .compile_file(&dir.join("fipa-request.yaml"))
            .map_err(|diagnostics| anyhow::anyhow!("{diagnostics}"))?;
        hook_runtime
            .prepare(&template)
            .with_context(|| format!("the {} hook", choice.name))?;
        in_process.push(
            in_process_us(&hook_runtime, &template)
                .with_context(|| format!("calling the {} hook", choice.name))?,
        );
        hooked_dirs.push(dir);
    }
    drop(hook_runtime);
    let retention = options.retention_s.map(|seconds| format!("{seconds}s"));
    let serve_as = |colloquy: &Path, templates: &Path, extra: &[String]| {
        let templates = templates.to_string_lossy();
        let (agents, data) = (agents.to_string_lossy(), data.to_string_lossy());
        // The memory store unless the extra flags name another (`--store SPEC`).
        let store = if extra.iter().any(|arg| arg == "--store") {
            &[][..]
        } else {
            &["--store", "memory"][..]
        };
        let mut args = vec!["serve", "--listen", "127.0.0.1:0"];
        args.extend(store);
        args.extend([
            "--templates",
            &templates,
            "--agents",
            &agents,
            "--data-dir",
            &data,
        ]);
        if let Some(retention) = &retention {
            args.extend(["--retention", retention]);
        }
        args.extend(extra.iter().map(String::as_str));
        spawn(colloquy, &args, options.pin)
    };
    let serve = |templates: &Path| serve_as(&options.colloquy, templates, &[]);
    runtime.block_on(async {
        let echo = spawn(&options.echo, &[], options.pin)?;
        let colloquy = serve(&templates)?;
        let mut hooked = hooked_dirs
            .iter()
            .map(|dir| serve(dir))
            .collect::<anyhow::Result<Vec<Server>>>()?;
        // Shadow servers are measured as hooked ones are (after them in `hooked`).
        let candidate = format!(
            "{}\n# the shadow candidate: the same protocol, another revision\n",
            std::fs::read_to_string(templates.join("fipa-request.yaml"))?
        );
        for sample in &options.shadows {
            let server = serve(&templates)?;
            stage(server.addr, &candidate, *sample).await?;
            hooked.push(server);
        }
        let sink = if (options.variants.iter()).any(|v| v.args.iter().any(|a| a.contains(SINK))) {
            format!("http://{}", serve_sink().await?)
        } else {
            String::new()
        };
        let mut variants = Vec::new();
        for variant in &options.variants {
            let args: Vec<String> = (variant.args.iter())
                .map(|arg| arg.replace(SINK, &sink))
                .collect();
            let binary = variant.colloquy.as_deref().unwrap_or(&options.colloquy);
            variants.push(serve_as(binary, &templates, &args)?);
        }
        let mut servers = vec![
            (&echo, Workload::Echo),
            (&colloquy, Workload::Conversations),
        ];
        servers.extend(
            hooked
                .iter()
                .chain(&variants)
                .map(|server| (server, Workload::Conversations)),
        );
        let mut figures = measure(&servers, options).await?.into_iter();
        let (Some(echo_figures), Some(colloquy_figures)) = (figures.next(), figures.next()) else {
            bail!("a server was not measured");
        };
        let mut hooked_figures: Vec<Measured> = figures.collect();
        let variant_figures: Vec<(String, Measured)> = (options.variants.iter())
            .map(|variant| variant.name.clone())
            .zip(hooked_figures.split_off(hooked.len()))
            .collect();
        // Half the slowest hooked server's full speed: no colloquy server is saturated.
        let common = hooked_figures
            .iter()
            .map(|m| m.max.requests_per_s)
            .reduce(f64::min)
            .map(|slowest| slowest / 2.0);
        let (common_rate, cpu_at_common) = match common {
            Some(rate) => {
                let paced: Vec<&Server> = std::iter::once(&colloquy).chain(&hooked).collect();
                let cpu = cpu_at_rate(&paced, rate, options).await?;
                (Some((rate, cpu[0])), cpu[1..].to_vec())
            }
            None => (None, Vec::new()),
        };
        let hooks = options.hooks.len();
        let shadow_servers = &hooked[hooks..];
        let mut shadows = Vec::new();
        for (((sample, measured), cpu_at_common_us), server) in options
            .shadows
            .iter()
            .zip(hooked_figures[hooks..].iter().cloned())
            .zip(cpu_at_common[hooks..].iter().copied())
            .zip(shadow_servers)
        {
            shadows.push(Shadowed {
                sample: *sample,
                measured,
                cpu_at_common_us,
                report: candidate_report(server.addr).await?,
            });
        }
        let hooked = options
            .hooks
            .iter()
            .zip(hooked_figures)
            .zip(cpu_at_common)
            .zip(in_process)
            .map(
                |(((choice, measured), cpu_at_common_us), in_process_us)| Hooked {
                    name: choice.name.clone(),
                    measured,
                    cpu_at_common_us,
                    in_process_us,
                },
            )
            .collect();
        anyhow::Ok((
            echo_figures,
            colloquy_figures,
            hooked,
            shadows,
            common_rate,
            variant_figures,
        ))
    })
}

fn report(
    options: &Options,
    echo: &Measured,
    colloquy: &Measured,
    hooked: &[Hooked],
    common_rate: Option<(f64, f64)>,
) -> anyhow::Result<()> {
    let retention = options.retention_s.map(|seconds| format!("{seconds}s"));
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "HTTP benchmark: {CONNECTIONS} keep-alive connections, {}s per phase, servers {}, \
         colloquy retention {}",
        options.measure.as_secs(),
        if options.pin {
            "pinned to CPU 0, one thread"
        } else {
            "unpinned"
        },
        retention.as_deref().unwrap_or("default (5m)")
    )?;
    writeln!(
        out,
        "{:<34} {:>12} {:>9} {:>9} | at half rate: {:>9} {:>9}",
        "", "requests/s", "p50 ms", "p99 ms", "p50 ms", "p99 ms"
    )?;
    for (name, m) in [
        ("echo (serde_json Value in/out)", echo),
        ("colloquy request conversations", colloquy),
    ] {
        writeln!(
            out,
            "{name:<34} {:>12.0} {:>9.2} {:>9.2} | {:>23.2} {:>9.2}",
            m.max.requests_per_s, m.max.p50_ms, m.max.p99_ms, m.half.p50_ms, m.half.p99_ms
        )?;
    }
    writeln!(
        out,
        "colloquy messages/s: {:.0} ({:.0} conversations/s)",
        colloquy.max.requests_per_s,
        colloquy.max.requests_per_s / 3.0
    )?;
    writeln!(
        out,
        "ratio to echo: rate {:.2}x, p50 {:.2}x, p99 {:.2}x; at half rate p99 {:.2}x",
        colloquy.max.requests_per_s / echo.max.requests_per_s,
        colloquy.max.p50_ms / echo.max.p50_ms,
        colloquy.max.p99_ms / echo.max.p99_ms,
        colloquy.half.p99_ms / echo.half.p99_ms
    )?;
    writeln!(
        out,
        "server CPU per request: echo {:.1} µs, colloquy {:.1} µs; echo/colloquy {:.2}x",
        echo.cpu_us_per_request,
        colloquy.cpu_us_per_request,
        echo.cpu_us_per_request / colloquy.cpu_us_per_request
    )?;
    writeln!(
        out,
        "of which system (kernel): echo {:.1} µs, colloquy {:.1} µs",
        echo.system_us_per_request, colloquy.system_us_per_request
    )?;
    writeln!(
        out,
        "server memory growth per request (full speed): echo {:.0} B, colloquy {:.0} B",
        echo.rss_bytes_per_request, colloquy.rss_bytes_per_request
    )?;
    let Some((rate, colloquy_at_rate)) = common_rate else {
        return Ok(());
    };
    writeln!(
        out,
        "with the credit policy as a hook on every message, against colloquy without a hook \
         (server CPU added per request: at full speed, and with both paced at {rate:.0} \
         requests/s, where colloquy alone takes {colloquy_at_rate:.1} µs; in process: one \
         call in this process):"
    )?;
    writeln!(
        out,
        "{:<8} {:>10} {:>6} {:>7} {:>7} | {:>8} {:>7} {:>6} {:>8} | {:>9} {:>10} {:>9}",
        "hook",
        "requests/s",
        "rate",
        "p50 ms",
        "p99 ms",
        "CPU +µs",
        "system",
        "B/req",
        "call µs",
        "paced +µs",
        "in process",
        "served/in"
    )?;
    for hook in hooked {
        let m = &hook.measured;
        let paced = hook.cpu_at_common_us - colloquy_at_rate;
        writeln!(
            out,
            "{:<8} {:>10.0} {:>5.0}% {:>7.2} {:>7.2} | {:>+8.1} {:>+7.1} {:>6.0} {:>8.2} | {:>+9.1} {:>8.2}µs {:>8.1}x",
            hook.name,
            m.max.requests_per_s,
            100.0 * m.max.requests_per_s / colloquy.max.requests_per_s,
            m.max.p50_ms,
            m.max.p99_ms,
            m.cpu_us_per_request - colloquy.cpu_us_per_request,
            m.system_us_per_request - colloquy.system_us_per_request,
            m.rss_bytes_per_request,
            m.served_call_us.unwrap_or(f64::NAN),
            paced,
            hook.in_process_us,
            paced / hook.in_process_us
        )?;
    }
    writeln!(
        out,
        "(call µs: the server's hook calls at full speed, from its /metrics; served/in: the \
         paced CPU added per request over the in-process call)"
    )?;
    Ok(())
}

/// The shadow servers against colloquy without a candidate: the live rate and latency, and
/// the server CPU each live request costs with its twin's work (at full speed, where the
/// `SCHED_IDLE` worker gets only what live work leaves, and paced at the common rate).
fn report_shadows(
    colloquy: &Measured,
    shadows: &[Shadowed],
    common_rate: Option<(f64, f64)>,
) -> anyhow::Result<()> {
    let Some((rate, colloquy_at_rate)) = common_rate.filter(|_| !shadows.is_empty()) else {
        return Ok(());
    };
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "with a candidate of fipa-request in shadow, against colloquy without one (server CPU \
         per request: at full speed, and paced at {rate:.0} requests/s, where colloquy alone \
         takes {colloquy_at_rate:.1} µs):"
    )?;
    writeln!(
        out,
        "{:<7} {:>10} {:>6} {:>8} {:>8} {:>9} {:>9} | {:>8} {:>9} {:>9} | {:>8} {:>6} {:>8} {:>8}",
        "sample",
        "requests/s",
        "rate",
        "p99 ms",
        "p99 x",
        "half p99",
        "half p99 x",
        "CPU µs",
        "paced µs",
        "paced x",
        "shadowed",
        "same",
        "diverged",
        "dropped"
    )?;
    for shadow in shadows {
        let m = &shadow.measured;
        let report = &shadow.report["candidates"][0]["shadow"];
        writeln!(
            out,
            "{:<7} {:>10.0} {:>5.0}% {:>8.2} {:>7.2}x {:>9.2} {:>9.2}x | {:>8.1} {:>9.1} {:>8.2}x | {:>8} {:>6} {:>8} {:>8}",
            shadow.sample,
            m.max.requests_per_s,
            100.0 * m.max.requests_per_s / colloquy.max.requests_per_s,
            m.max.p99_ms,
            m.max.p99_ms / colloquy.max.p99_ms,
            m.half.p99_ms,
            m.half.p99_ms / colloquy.half.p99_ms,
            m.cpu_us_per_request,
            shadow.cpu_at_common_us,
            shadow.cpu_at_common_us / colloquy_at_rate,
            report["shadowed"],
            report["same"],
            report["diverged"],
            report["dropped"]
        )?;
    }
    writeln!(
        out,
        "(p99 x, half p99 x, paced x: against colloquy without a candidate in the same run; \
         the twin redoes each live step, so paced x near 2 at sample 1 is the twin's whole cost)"
    )?;
    Ok(())
}

/// A templates directory for one hook of `--hook`: the built-in `fipa-request` with the
/// hook file as its `on_message` hook, configured as the credit policy's example ships it
/// (`reads: [threads]`, the limits of its example template).
fn hooked_templates(templates: &Path, dir: &Path, choice: &HookChoice) -> anyhow::Result<PathBuf> {
    if !choice.module.is_file() {
        bail!("{} is missing", choice.module.display());
    }
    std::fs::create_dir_all(dir)?;
    std::fs::copy(&choice.module, dir.join("hook.wasm"))?;
    let yaml = std::fs::read_to_string(templates.join("fipa-request.yaml"))?;
    let limits = match choice.limits {
        Some((bytes, ms)) => format!("    limits: {{ memory_bytes: {bytes}, timeout_ms: {ms} }}\n"),
        None => String::new(),
    };
    std::fs::write(
        dir.join("fipa-request.yaml"),
        format!(
            "{yaml}\n  hooks:\n    module: hook.wasm\n    events: [on_message]\n    \
             reads: [threads]\n    config: {{ max_amount: 50000 }}\n{limits}"
        ),
    )?;
    Ok(dir.to_owned())
}
