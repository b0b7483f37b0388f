//! What several engine nodes on one Postgres cost each other: the server CPU per message
//! and the change notices per commit, for 1, 2 and 3 nodes, with partition owners
//! (`--cluster-secret-file`) against nodes that follow every commit (the same store without
//! it), measured in one run.
//!
//! ```sh
//! cargo build --release -p colloquy --bin colloquy -p colloquy-tests --bin cluster-bench
//! target/release/cluster-bench --postgres postgres://postgres@127.0.0.1:5432/postgres
//! ```
//!
//! Each configuration gets a fresh database and its own `colloquy serve` processes (open
//! development mode, the built-in templates). The load is closed-loop request
//! conversations (`request` in the start call, `agree`, `inform`: three messages, three
//! commits) on keep-alive connections spread evenly over the nodes; connection `i` is agents
//! `alice-i` and `bob-i` and always calls the same node, as clients behind a sticky load
//! balancer do. A start names no conversation id, so with owners each node draws one in a
//! partition it owns and every step is served where it arrives. With `--streams`, `bob-i`
//! also holds an inbox stream open on the *next* node, which must hear of the entries
//! another node commits for him.
//!
//! Reported per configuration: conversations and messages per second; server CPU (user +
//! system) per message made anywhere in the cluster, for all nodes and per node; the notices
//! of other nodes' commits the nodes received (`colloquy_remote_notices_total`) per commit
//! made anywhere, for all nodes and per node. Every node and Postgres share the
//! machine's cores with the load, so rates do not grow with nodes here; CPU per message is
//! the figure that carries over to machines of their own.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use bytes::Bytes;
use colloquy_tests::bench::{Process, connect, cpu_seconds, spawn};
use http_body_util::{BodyExt as _, Full};
use hyper::Request;
use hyper::client::conn::http1::SendRequest;
use serde::Deserialize;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const USAGE: &str = "\
cluster-bench --postgres URL [--colloquy PATH] [--nodes 1,2,3] [--connections N]
              [--seconds N] [--streams]

  --postgres URL    a Postgres server the bench may create databases on
  --colloquy PATH   the colloquy binary (default: next to this one)
  --nodes LIST      node counts to measure (default 1,2,3)
  --connections N   keep-alive connections, spread over the nodes (default 24)
  --seconds N       measured seconds per configuration (default 8)
  --streams         each bob-i holds an inbox stream open on the next node
";

const WARMUP: Duration = Duration::from_secs(2);
const START: &str = r#"{"template":"fipa-request","participants":["bob-N"],"message":{"performative":"request","content":{"action":"book-room","room":"Lovelace"}}}"#;
const AGREE: &str = r#"{"performative":"agree","content":{}}"#;
const INFORM: &str = r#"{"performative":"inform","content":{"done":true,"booking":"LV-0412"}}"#;

struct Options {
    postgres: String,
    colloquy: PathBuf,
    nodes: Vec<usize>,
    connections: usize,
    measure: Duration,
    streams: bool,
}

fn options() -> anyhow::Result<Option<Options>> {
    let here = std::env::current_exe()?;
    let mut options = Options {
        postgres: String::new(),
        colloquy: here.with_file_name("colloquy"),
        nodes: vec![1, 2, 3],
        connections: 24,
        measure: Duration::from_secs(8),
        streams: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--postgres" => options.postgres = args.next().context("--postgres URL")?,
            "--colloquy" => options.colloquy = args.next().context("--colloquy PATH")?.into(),
            "--nodes" => {
                options.nodes = (args.next().context("--nodes LIST")?.split(','))
                    .map(str::parse)
                    .collect::<Result<_, _>>()?
            }
            "--connections" => {
                options.connections = args.next().context("--connections N")?.parse()?
            }
            "--seconds" => {
                options.measure = Duration::from_secs(args.next().context("--seconds N")?.parse()?)
            }
            "--streams" => options.streams = true,
            "-h" | "--help" => {
                print!("{USAGE}");
                return Ok(None);
            }
            other => bail!("unknown argument {other}; see cluster-bench --help"),
        }
    }
    if options.postgres.is_empty() {
        bail!("--postgres URL is required; see cluster-bench --help");
    }
    Ok(Some(options))
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// Every node follows every commit (no `--cluster-secret-file`).
    Followers,
    /// Partition owners.
    Owners,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Followers => "followers",
            Mode::Owners => "owners",
        }
    }
}

struct Figures {
    conversations_per_s: f64,
    cpu_us_per_message: f64,
    notices_per_commit: f64,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Some(options) = options()? else {
        return Ok(());
    };
    let scratch = std::env::temp_dir().join(format!("cluster-bench-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let secret = scratch.join("node-secret");
    std::fs::write(&secret, "a node secret for the cluster bench\n")?;
    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");

    println!(
        "{} connections, {:?} measured per configuration{}",
        options.connections,
        options.measure,
        if options.streams {
            ", an inbox stream per agent on the next node"
        } else {
            ""
        }
    );
    println!(
        "{:>5} {:>10} {:>8} {:>8} {:>11} {:>16} {:>15} {:>20}",
        "nodes",
        "mode",
        "conv/s",
        "msg/s",
        "CPU µs/msg",
        "CPU µs/msg/node",
        "notices/commit",
        "notices/commit/node"
    );
    let mut rows = Vec::new();
    for &nodes in &options.nodes {
        for mode in [Mode::Followers, Mode::Owners] {
            let figures = measure(&options, nodes, mode, &templates, &secret).await?;
            let per_node = nodes as f64;
            println!(
                "{nodes:>5} {:>10} {:>8.0} {:>8.0} {:>11.0} {:>16.0} {:>15.3} {:>20.3}",
                mode.name(),
                figures.conversations_per_s,
                figures.conversations_per_s * 3.0,
                figures.cpu_us_per_message,
                figures.cpu_us_per_message / per_node,
                figures.notices_per_commit,
                figures.notices_per_commit / per_node,
            );
            rows.push((nodes, mode, figures));
        }
    }
    println!("\nserver CPU per message, as a ratio to one node of the same mode:");
    for mode in [Mode::Followers, Mode::Owners] {
        let one = rows
            .iter()
            .find(|(nodes, m, _)| *nodes == 1 && *m == mode)
            .map(|(_, _, figures)| figures.cpu_us_per_message);
        for (nodes, _, figures) in rows.iter().filter(|(_, m, _)| *m == mode) {
            if let Some(one) = one {
                println!(
                    "  {:>9} {nodes} nodes: {:.2}x",
                    mode.name(),
                    figures.cpu_us_per_message / one
                );
            }
        }
    }
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

async fn measure(
    options: &Options,
    count: usize,
    mode: Mode,
    templates: &Path,
    secret: &Path,
) -> anyhow::Result<Figures> {
    let database = colloquy_store::raw::fresh_postgres_database(&options.postgres).await;
    let secret = secret.to_string_lossy();
    let templates = templates.to_string_lossy();
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        &database,
        "--templates",
        &templates,
    ];
    if mode == Mode::Owners {
        args.extend([
            "--cluster-secret-file",
            &secret,
            "--cluster-lease-ttl",
            "10s",
        ]);
    }
    let nodes: Vec<Process> = (0..count)
        .map(|_| spawn(&options.colloquy, &args, false))
        .collect::<anyhow::Result<_>>()?;
    if mode == Mode::Owners {
        even_shares(&database, count).await?;
    }
    let addrs: Vec<SocketAddr> = nodes.iter().map(|node| node.addr).collect();

    let running = Arc::new(AtomicBool::new(true));
    let measuring = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut streams = Vec::new();
    if options.streams {
        for i in 0..options.connections {
            let addr = addrs[(i + 1) % count];
            streams.push(tokio::spawn(hold_inbox_stream(addr, format!("bob-{i}"))));
        }
    }
    let mut clients = Vec::new();
    for i in 0..options.connections {
        let addr = addrs[i % count];
        let (running, measuring, done) = (running.clone(), measuring.clone(), done.clone());
        clients.push(tokio::spawn(async move {
            let mut sender = connect(addr).await?;
            let start = Bytes::from(START.replace("bob-N", &format!("bob-{i}")));
            let (alice, bob) = (format!("alice-{i}"), format!("bob-{i}"));
            while running.load(Ordering::Relaxed) {
                let started = post(
                    &mut sender,
                    addr,
                    "/v1/conversations",
                    &alice,
                    start.clone(),
                )
                .await?;
                let id = serde_json::from_slice::<Started>(&started)?.id;
                let path = format!("/v1/conversations/{id}/messages");
                for body in [AGREE, INFORM] {
                    post(
                        &mut sender,
                        addr,
                        &path,
                        &bob,
                        Bytes::from_static(body.as_bytes()),
                    )
                    .await?;
                }
                if measuring.load(Ordering::Relaxed) {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
            anyhow::Ok(())
        }));
    }

    tokio::time::sleep(WARMUP).await;
    let cpu = |nodes: &[Process]| -> anyhow::Result<f64> {
        nodes.iter().try_fold(0.0, |sum, node| {
            let (user, system) = cpu_seconds(node.pid())?;
            Ok(sum + user + system)
        })
    };
    let (cpu_before, notices_before) = (cpu(&nodes)?, notices(&addrs).await?);
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(options.measure).await;
    measuring.store(false, Ordering::Relaxed);
    let seconds = started.elapsed().as_secs_f64();
    let (cpu_after, notices_after) = (cpu(&nodes)?, notices(&addrs).await?);
    running.store(false, Ordering::Relaxed);
    for client in clients {
        client.await??;
    }
    for stream in streams {
        stream.abort();
    }
    drop(nodes);

    let conversations = done.load(Ordering::Relaxed) as f64;
    let messages = conversations * 3.0;
    if messages == 0.0 {
        bail!("{count} {} nodes: no conversation completed", mode.name());
    }
    Ok(Figures {
        conversations_per_s: conversations / seconds,
        cpu_us_per_message: (cpu_after - cpu_before) * 1e6 / messages,
        // Each message is one commit.
        notices_per_commit: (notices_after - notices_before) as f64 / messages,
    })
}

/// Waits until the lease table shows `count` live owners with even shares.
async fn even_shares(database: &str, count: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let held = colloquy_store::raw::postgres_live_leases(database).await;
        let total: usize = held.values().sum();
        if held.len() == count && held.values().all(|n| n.abs_diff(total / count) <= 1) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("the partitions did not settle over {count} nodes: {held:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Opens `agent`'s inbox stream on `addr` and reads it until aborted.
async fn hold_inbox_stream(addr: SocketAddr, agent: String) -> anyhow::Result<()> {
    let mut sender = connect(addr).await?;
    sender.ready().await?;
    let request = Request::get(format!("/v1/agents/{agent}/inbox"))
        .header("host", addr.to_string())
        .header("x-agent-id", &agent)
        .body(Full::new(Bytes::new()))?;
    let mut body = sender.send_request(request).await?.into_body();
    while let Some(frame) = body.frame().await {
        frame?;
    }
    Ok(())
}

/// The nodes' `colloquy_remote_notices_total`, summed.
async fn notices(addrs: &[SocketAddr]) -> anyhow::Result<u64> {
    let mut sum = 0;
    for addr in addrs {
        let text = reqwest::get(format!("http://{addr}/metrics"))
            .await?
            .text()
            .await?;
        sum += text
            .lines()
            .find_map(|line| line.strip_prefix("colloquy_remote_notices_total "))
            .context("no colloquy_remote_notices_total in /metrics")?
            .trim()
            .parse::<u64>()?;
    }
    Ok(sum)
}

#[derive(Deserialize)]
struct Started {
    id: String,
}

async fn post(
    sender: &mut SendRequest<Full<Bytes>>,
    addr: SocketAddr,
    path: &str,
    agent: &str,
    body: Bytes,
) -> anyhow::Result<Bytes> {
    sender.ready().await?;
    let request = Request::post(path)
        .header("host", addr.to_string())
        .header("content-type", "application/json")
        .header("x-agent-id", agent)
        .body(Full::new(body))?;
    let response = sender.send_request(request).await?;
    let status = response.status();
    let bytes = response.into_body().collect().await?.to_bytes();
    if !status.is_success() {
        bail!("{path}: {status}: {}", String::from_utf8_lossy(&bytes));
    }
    Ok(bytes)
}
