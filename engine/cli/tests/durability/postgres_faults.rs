//! Postgres failing under two owning nodes: a cluster of the test's own stopped and started
//! again, and a TCP proxy between one node and the database that delays, drops and
//! black-holes the link. Requests get 503 with `Retry-After` while the database is out of
//! reach, both nodes serve again once it is back, and nothing acknowledged is lost.

use super::*;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Where Debian's Postgres 15 server binaries are (`initdb`, `pg_ctl`, `postgres`).
const PG_BIN: &str = "/usr/lib/postgresql/15/bin";
/// Longest any one HTTP call may take in these tests: a 503 is due within the store's 2 s
/// operation deadline or the 2 s ownership wait, so this is generous; a call cut off by it
/// counts as failed, and is retried with its same ids.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether a test that runs a Postgres of its own can run: as the tests on the shared
/// Postgres (`test_postgres`), when `COLLOQUY_TEST_POSTGRES` is set or under CI, and then
/// only with the server binaries in [`PG_BIN`] (required under CI).
fn private_postgres_available(test: &str) -> bool {
    let ci = std::env::var("CI").is_ok_and(|ci| ci == "true");
    let asked = std::env::var("COLLOQUY_TEST_POSTGRES").is_ok_and(|url| !url.is_empty());
    if !asked && !ci {
        eprintln!(
            "SKIPPED {test}: set COLLOQUY_TEST_POSTGRES=postgres://USER@127.0.0.1:PORT/DB to run it"
        );
        return false;
    }
    if !Path::new(PG_BIN).join("initdb").exists() {
        assert!(
            !ci,
            "{test}: CI=true but {PG_BIN}/initdb is missing (install postgresql-15)"
        );
        eprintln!("SKIPPED {test}: no Postgres 15 server binaries in {PG_BIN}");
        return false;
    }
    true
}

/// A Postgres 15 cluster of the test's own on a loopback port, which it may stop and start
/// again (on the same port and data directory); stopped when dropped.
struct PrivatePostgres {
    /// Holds `data/` and the Unix socket.
    dir: PathBuf,
    port: u16,
    /// `initdb` and `postgres` refuse to run as root: as root they run as `postgres`.
    as_postgres: bool,
}

impl PrivatePostgres {
    /// `initdb` in `DIR/pg` and starts the server there.
    fn start(dir: &Path) -> PrivatePostgres {
        let dir = dir.join("pg");
        std::fs::create_dir_all(&dir).expect("create the Postgres dir");
        let uid = Command::new("id").arg("-u").output().expect("run id -u");
        let as_postgres = String::from_utf8_lossy(&uid.stdout).trim() == "0";
        if as_postgres {
            let chown = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .expect("run chown");
            assert!(chown.success(), "chown the Postgres dir to postgres");
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("free port")
            .port();
        let postgres = PrivatePostgres {
            dir,
            port,
            as_postgres,
        };
        let data = postgres.data();
        postgres.run(
            "initdb",
            &["-D", &data, "-U", "postgres", "--auth=trust", "-E", "UTF8"],
        );
        postgres.start_again();
        postgres
    }

    fn data(&self) -> String {
        self.dir.join("data").display().to_string()
    }

    /// One of the server binaries (run as `postgres` when we are root).
    fn command(&self, binary: &str, args: &[&str]) -> Command {
        let binary = format!("{PG_BIN}/{binary}");
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--", &binary]);
            command
        } else {
            Command::new(&binary)
        };
        command.args(args).stdin(Stdio::null());
        command
    }

    /// Runs one of the server binaries to its end; it must succeed.
    fn run(&self, binary: &str, args: &[&str]) {
        let output = self
            .command(binary, args)
            .output()
            .unwrap_or_else(|error| panic!("run {binary}: {error}"));
        assert!(
            output.status.success(),
            "{binary} {args:?}: {}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Starts the server (again) on its port, with fsync on; returns once it accepts
    /// connections.
    fn start_again(&self) {
        let options = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=on -c synchronous_commit=on",
            self.port,
            self.dir.display()
        );
        let log = self.dir.join("postgres.log").display().to_string();
        self.run(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                &log,
                "-o",
                &options,
                "-w",
                "-t",
                "60",
                "start",
            ],
        );
    }

    /// `pg_ctl stop -m MODE` (`fast`: clients disconnected, a clean shutdown; `immediate`:
    /// as a crash, recovered from the WAL at the next start).
    fn stop(&self, mode: &str) {
        self.run(
            "pg_ctl",
            &["-D", &self.data(), "-m", mode, "-w", "-t", "60", "stop"],
        );
    }

    /// The URL of its `postgres` database, as superuser `postgres`.
    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        // Already stopped when the test stopped it last; nothing to report then.
        let data = self.data();
        let _ = (self.command("pg_ctl", &["-D", &data, "-m", "immediate", "-w", "stop"]))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One answer of the HTTP API: status, `Retry-After` present, error code (if any), the
/// node that served it (`x-colloquy-node`, if one did).
#[derive(Debug)]
struct Answer {
    status: u16,
    retry_after: bool,
    code: Option<String>,
    served_by: Option<String>,
}

/// Sends `request`, bounded by [`CALL_TIMEOUT`] (the client's timeout); `Err` when it got
/// no answer.
async fn answer(request: reqwest::RequestBuilder) -> Result<Answer, reqwest::Error> {
    let response = request.send().await?;
    let status = response.status().as_u16();
    let retry_after = response.headers().contains_key("retry-after");
    let served_by = (response.headers().get("x-colloquy-node"))
        .and_then(|node| node.to_str().ok())
        .map(str::to_owned);
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    let code = body["error"]["code"].as_str().map(str::to_owned);
    Ok(Answer {
        status,
        retry_after,
        code,
        served_by,
    })
}

fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(CALL_TIMEOUT)
        .build()
        .expect("http client")
}

/// The API of each of `servers`, over one client.
fn apis<const N: usize>(servers: [&Server; N]) -> [Api; N] {
    let http = http_client();
    servers.map(|server| Api {
        http: http.clone(),
        url: server.url.clone(),
    })
}

/// Requests of the HTTP API on the node at `url`.
#[derive(Clone)]
struct Api {
    http: reqwest::Client,
    url: String,
}

impl Api {
    fn start(&self, id: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}/v1/conversations", self.url))
            .header("X-Agent-Id", "alice")
            .json(&request(id, "bob", None))
    }

    /// `bob` sends `performative` (`agree`, `inform`) with id `{id}.{performative}`.
    fn send(&self, id: &str, performative: &str) -> reqwest::RequestBuilder {
        let content = if performative == "inform" {
            json!({"done": true})
        } else {
            json!({})
        };
        self.http
            .post(format!("{}/v1/conversations/{id}/messages", self.url))
            .header("X-Agent-Id", "bob")
            .json(&SendMessage::new(performative, content).with_id(format!("{id}.{performative}")))
    }

    fn read(&self, id: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}/v1/conversations/{id}", self.url))
            .header("X-Agent-Id", "alice")
    }

    /// The conversation's version as `alice` reads it through this node, if it answers.
    async fn version(&self, id: &str) -> Option<u64> {
        let response = self.read(id).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let view: serde_json::Value = response.json().await.ok()?;
        view["version"].as_u64()
    }
}

/// Postgres stopped under two owning nodes: each kind of request through either node (a
/// start, a message, a read of a conversation no node holds), sent at once and again past
/// the lease TTL, gets 503 with `Retry-After` from a bounded wait, and changes nothing; once
/// Postgres is started again both nodes serve starts and messages again, and every
/// conversation is at the version acknowledged before the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_restarted_under_two_nodes_gives_503_then_recovers() {
    if !private_postgres_available("postgres_restarted_under_two_nodes_gives_503_then_recovers") {
        return;
    }
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("pg-restart");
        let templates = templates(&dir);
        let postgres = PrivatePostgres::start(&dir);
        let url = colloquy_store::raw::fresh_postgres_database(&postgres.url()).await;
        let extra = ownership_args(&dir);
        let log = "warn,colloquy_server=debug";
        let node_a = Server::start_logging(&dir, &templates, &url, "restart-a", &extra, log);
        let node_b = Server::start_logging(&dir, &templates, &url, "restart-b", &extra, log);
        let nodes = apis([&node_a, &node_b]);

        // Conversations started through one node and agreed to through the other.
        let ids: Vec<String> = (0..8).map(|n| format!("restart-{n}")).collect();
        for (n, id) in ids.iter().enumerate() {
            let (starter, answerer) = (&nodes[n % 2], &nodes[(n + 1) % 2]);
            let started = answer(starter.start(id)).await.expect("start");
            assert_eq!(started.status, 201, "{id}: {started:?}");
            let agreed = answer(answerer.send(id, "agree")).await.expect("agree");
            assert_eq!(agreed.status, 202, "{id}: {agreed:?}");
        }
        let mut versions = HashMap::new();
        for id in &ids {
            let on_a = nodes[0].version(id).await.expect("read through node-a");
            let on_b = nodes[1].version(id).await.expect("read through node-b");
            assert_eq!(on_a, on_b, "{id}: one owner answers both");
            versions.insert(id.clone(), on_a);
        }

        // Postgres goes away as in a crash. Every request through either node is answered
        // 503 with Retry-After, each from one bounded wait (the client gives up after
        // CALL_TIMEOUT), and writes nothing.
        // Asked at once (the nodes' leases still valid: the store's own 503) and again past
        // the lease TTL (the leases lapsed: the ownership layer's 503 after its wait).
        postgres.stop("immediate");
        let stopped = Instant::now();
        for (round, (node, api)) in ["node-a", "node-b"]
            .into_iter()
            .zip(&nodes)
            .cycle()
            .take(4)
            .enumerate()
        {
            if round == 2 {
                sleep(LEASE_TTL * 2).await;
            }
            for (what, request) in [
                ("a start", api.start(&format!("during-{round}"))),
                ("an inform", api.send(&ids[0], "inform")),
                ("an inform", api.send(&ids[1], "inform")),
                (
                    "a read of a conversation no node holds",
                    api.read("nobody-has-it"),
                ),
            ] {
                let sent = Instant::now();
                let answered = answer(request)
                    .await
                    .unwrap_or_else(|error| panic!("{what} through {node}: no answer: {error}"));
                eprintln!(
                    "Postgres down {:?}: {what} through {node} answered {answered:?} in {:?}",
                    stopped.elapsed(),
                    sent.elapsed()
                );
                assert_eq!(answered.status, 503, "{what} through {node}: {answered:?}");
                assert!(
                    answered.retry_after,
                    "{what} through {node}: no Retry-After"
                );
                assert!(
                    matches!(
                        answered.code.as_deref(),
                        Some("store_unavailable" | "unavailable")
                    ),
                    "{what} through {node}: {answered:?}"
                );
            }
        }

        // Postgres is back, on the same port and data: both nodes serve again.
        postgres.start_again();
        let restarted = Instant::now();
        for (n, (node, api)) in ["node-a", "node-b"].into_iter().zip(&nodes).enumerate() {
            let id = format!("after-{node}");
            eventually("a start goes through again", || async {
                let started = answer(api.start(&id)).await.ok()?;
                // A start whose answer was lost may have been recorded: then it exists.
                (started.status == 201 || started.code.as_deref() == Some("duplicate_conversation"))
                    .then_some(())
            })
            .await;
            eprintln!(
                "{node} serves a start {:?} after Postgres started again",
                restarted.elapsed()
            );
            // Answered through the other node, informed through this one.
            let agreed = answer(nodes[(n + 1) % 2].send(&id, "agree"))
                .await
                .expect("agree");
            assert_eq!(agreed.status, 202, "{id}: {agreed:?}");
            let informed = answer(api.send(&id, "inform")).await.expect("inform");
            assert_eq!(informed.status, 202, "{id}: {informed:?}");
        }

        // Everything acknowledged before the outage is there, at the version it had: the
        // refused messages changed nothing. Then the conversations complete, through both.
        for (n, id) in ids.iter().enumerate() {
            for api in &nodes {
                let version = eventually("the conversation is readable", || api.version(id)).await;
                assert_eq!(
                    version, versions[id],
                    "{id}: as acknowledged before the outage"
                );
            }
            let informed = answer(nodes[n % 2].send(id, "inform"))
                .await
                .expect("inform");
            assert_eq!(informed.status, 202, "{id}: {informed:?}");
        }
        drop(node_a);
        drop(node_b);
        let store = colloquy_store::PostgresStore::connect(&url)
            .await
            .expect("connect");
        for id in &ids {
            let log = store.load(id).await.expect("load").expect("stored");
            let informs: Vec<u64> = (log.iter())
                .filter(|event| match &event.kind {
                    EventKind::MessageAccepted { message, .. } => {
                        *message.id == format!("{id}.inform")
                    }
                    _ => false,
                })
                .map(|event| event.seq)
                .collect();
            assert_eq!(informs.len(), 1, "{id}: informed once, after the outage");
            assert!(informs[0] > versions[id], "{id}: informed after the outage");
        }
        drop(store);
        drop(postgres);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// What a [`FaultProxy`] does to the bytes between a node and Postgres.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Link {
    /// Forwards every chunk at once.
    Pass,
    /// Holds each chunk this long before forwarding it.
    Delay(Duration),
    /// Closes every connection, and each new one at once.
    Drop,
    /// Keeps every connection open but forwards nothing either way (a half-open link:
    /// what is held goes on once the link passes again, as TCP retransmits would).
    BlackHole,
}

/// A TCP proxy on loopback in front of `upstream`, whose [`Link`] the test switches.
struct FaultProxy {
    address: SocketAddr,
    link: watch::Sender<Link>,
    accepting: tokio::task::JoinHandle<()>,
}

impl FaultProxy {
    async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let address = listener.local_addr().expect("address");
        let (link, _) = watch::channel(Link::Pass);
        let accepting = tokio::spawn({
            let link = link.clone();
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(FaultProxy::connection(client, upstream, link.subscribe()));
                }
            }
        });
        FaultProxy {
            address,
            link,
            accepting,
        }
    }

    fn set(&self, link: Link) {
        self.link.send_replace(link);
    }

    /// Carries one connection until either side closes it or the link drops it.
    async fn connection(client: TcpStream, upstream: SocketAddr, link: watch::Receiver<Link>) {
        if *link.borrow() == Link::Drop {
            return;
        }
        let Ok(server) = TcpStream::connect(upstream).await else {
            return;
        };
        let (client_in, client_out) = client.into_split();
        let (server_in, server_out) = server.into_split();
        let mut dropped = link.clone();
        // Returning drops both sockets: each side sees the connection closed.
        tokio::select! {
            _ = FaultProxy::pump(client_in, server_out, link.clone()) => {}
            _ = FaultProxy::pump(server_in, client_out, link) => {}
            _ = dropped.wait_for(|link| *link == Link::Drop) => {}
        }
    }

    /// Copies `from` to `to` a chunk at a time, as the link lets it.
    async fn pump(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        mut link: watch::Receiver<Link>,
    ) {
        let mut buffer = vec![0u8; 16 * 1024];
        loop {
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            // Held while black-holed; a closed control means the test ended.
            let state = match link.wait_for(|link| *link != Link::BlackHole).await {
                Ok(state) => *state,
                Err(_) => return,
            };
            if let Link::Delay(delay) = state {
                sleep(delay).await;
            }
            if to.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accepting.abort();
        self.link.send_replace(Link::Drop);
    }
}

/// `url` with its `host:port` replaced by `address`.
fn through(url: &str, address: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (authority, path) = rest.split_once('/').expect("a database in the URL");
    let user = authority
        .split_once('@')
        .map_or(String::new(), |(user, _)| format!("{user}@"));
    format!("{scheme}://{user}{address}/{path}")
}

/// Opens, through `api`'s node, the event stream of the first of `conversations` that node
/// serves itself, and reads it on in a task until it ends: the task returns what it read, or
/// how it failed. Returns the conversation and that task.
async fn open_stream_on(
    api: &Api,
    conversations: &[String],
) -> (String, tokio::task::JoinHandle<Result<String, String>>) {
    // Without the client's timeout: the stream is read for as long as it stays open.
    let http = reqwest::Client::new();
    for id in conversations {
        let Ok(mut stream) = (http.get(format!("{}/v1/conversations/{id}/events", api.url)))
            .header("X-Agent-Id", "alice")
            .send()
            .await
        else {
            continue;
        };
        let here = (stream.headers().get("x-colloquy-node"))
            .and_then(|node| node.to_str().ok())
            .is_some_and(|node| node.starts_with(&api.url));
        if stream.status() != 200 || !here {
            continue;
        }
        let reading = tokio::spawn(async move {
            let mut read = String::new();
            loop {
                match stream.chunk().await {
                    Ok(Some(chunk)) => read.push_str(&String::from_utf8_lossy(&chunk)),
                    Ok(None) => return Ok(read),
                    Err(error) => return Err(error.to_string()),
                }
            }
        });
        return (id.clone(), reading);
    }
    panic!("{} serves none of {conversations:?} itself", api.url);
}

/// The phases the link to Postgres goes through, in order, while the load runs.
const PHASES: [&str; 5] = ["pass", "delay 200 ms", "drop", "black hole", "pass again"];

/// What the load acknowledged and how often it failed, shared by its workers.
#[derive(Default)]
struct Ledger {
    /// Which phase the link is in (an index into [`PHASES`]).
    phase: AtomicUsize,
    /// Failed attempts (503, or no answer within [`CALL_TIMEOUT`]) per phase (that they were
    /// answered in).
    failed: [AtomicUsize; PHASES.len()],
    /// Failed attempts per phase and kind (the 503's error code, or `no answer`).
    failures: Mutex<std::collections::BTreeMap<(usize, String), usize>>,
    /// Acknowledged requests per phase.
    acknowledged: [AtomicUsize; PHASES.len()],
    /// Acknowledged requests through node-a (index 0) and node-b (1), per phase.
    through: [[AtomicUsize; PHASES.len()]; 2],
    /// Every acknowledged message, as (conversation, message id).
    messages: Mutex<Vec<(String, String)>>,
}

impl Ledger {
    fn phase(&self) -> usize {
        self.phase.load(Ordering::Relaxed)
    }

    fn failed(&self, phase: usize, kind: &str) {
        self.failed[phase].fetch_add(1, Ordering::Relaxed);
        let mut failures = self.failures.lock().expect("lock");
        *failures.entry((phase, kind.to_owned())).or_default() += 1;
    }

    /// The kinds of failure of `phase`, with their counts.
    fn failures_in(&self, phase: usize) -> Vec<(String, usize)> {
        let failures = self.failures.lock().expect("lock");
        (failures.iter())
            .filter(|((of, _), _)| *of == phase)
            .map(|((_, kind), count)| (kind.clone(), *count))
            .collect()
    }
}

/// Attempts each request this many times (with its same ids) before giving its
/// conversation up.
const ATTEMPTS: usize = 12;

/// Sends one step of a conversation through `api` (node `node`: 0 is node-a) until it is
/// acknowledged, at most [`ATTEMPTS`] times; true once it is. A start refused as a duplicate
/// after a failed attempt was recorded by that attempt: not acknowledged, but there.
async fn step(ledger: &Ledger, node: usize, api: &Api, id: &str, performative: &str) -> bool {
    for attempt in 0..ATTEMPTS {
        let request = if performative == "request" {
            api.start(id)
        } else {
            api.send(id, performative)
        };
        let answered = answer(request).await;
        // Counted in the phase the answer came in (an attempt sent at the end of one phase
        // may be answered in the next).
        let phase = ledger.phase();
        match answered {
            Ok(Answer { status, .. }) if (200..300).contains(&status) => {
                ledger.acknowledged[phase].fetch_add(1, Ordering::Relaxed);
                ledger.through[node][phase].fetch_add(1, Ordering::Relaxed);
                (ledger.messages.lock().expect("lock"))
                    .push((id.to_owned(), format!("{id}.{performative}")));
                return true;
            }
            Ok(Answer {
                status: 503,
                retry_after,
                code,
                ..
            }) => {
                assert!(retry_after, "{id}.{performative}: 503 without Retry-After");
                ledger.failed(phase, code.as_deref().unwrap_or("503 without a code"));
            }
            Ok(Answer { code, .. })
                if attempt > 0
                    && performative == "request"
                    && code.as_deref() == Some("duplicate_conversation") =>
            {
                return true;
            }
            Ok(other) => panic!(
                "{id}.{performative} through node {node} (attempt {attempt}, phase {}): {other:?}",
                PHASES[phase]
            ),
            Err(_) => ledger.failed(phase, "no answer"),
        }
        sleep(Duration::from_millis(200)).await;
    }
    false
}

/// A link between node-a and Postgres that is slow, then cut, then black-holed past the
/// lease TTL, then healthy again, under a steady load through both nodes: every message
/// either node acknowledged is in the store once, at contiguous versions; node-b (on a
/// direct link) serves throughout the black hole, taking over node-a's partitions; node-a
/// serves again once its link passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_faulty_link_to_postgres_loses_nothing_acknowledged() {
    let Some(postgres) = test_postgres("a_faulty_link_to_postgres_loses_nothing_acknowledged")
    else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let url = colloquy_store::raw::fresh_postgres_database(&postgres).await;
        let dir = scratch_dir("pg-faulty-link");
        let templates = templates(&dir);
        let authority = url
            .split_once("://")
            .and_then(|(_, rest)| rest.split_once('/'))
            .map(|(authority, _)| authority.rsplit('@').next().unwrap_or(authority))
            .expect("host:port in COLLOQUY_TEST_POSTGRES");
        let upstream = tokio::net::lookup_host(authority)
            .await
            .expect("resolve the test Postgres")
            .next()
            .expect("an address");
        let proxy = FaultProxy::start(upstream).await;
        let extra = ownership_args(&dir);
        let log = "warn,colloquy_server=debug";
        let proxied = through(&url, proxy.address);
        let node_a = Server::start_logging(&dir, &templates, &proxied, "link-a", &extra, log);
        let node_b = Server::start_logging(&dir, &templates, &url, "link-b", &extra, log);
        let nodes = apis([&node_a, &node_b]);

        // Conversations started and agreed to before the faults, to be informed through
        // node-b during the black hole: those node-a owns then must move to node-b.
        let ledger = Arc::new(Ledger::default());
        let held: Vec<String> = (0..16).map(|n| format!("held-{n}")).collect();
        for id in &held {
            let started = answer(nodes[0].start(id)).await.expect("start");
            assert_eq!(started.status, 201, "{id}: {started:?}");
            let agreed = answer(nodes[1].send(id, "agree")).await.expect("agree");
            assert_eq!(agreed.status, 202, "{id}: {agreed:?}");
            for performative in ["request", "agree"] {
                (ledger.messages.lock().expect("lock"))
                    .push((id.clone(), format!("{id}.{performative}")));
            }
        }

        // Four workers, each starting its conversations through one node, agreeing through
        // the other and informing through the first again.
        let stop = Arc::new(AtomicBool::new(false));
        let mut workers = Vec::new();
        for worker in 0..4 {
            let (ledger, stop, nodes) = (ledger.clone(), stop.clone(), nodes.clone());
            workers.push(tokio::spawn(async move {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let id = format!("link-{worker}-{n}");
                    let (first, second) = (worker % 2, (worker + 1) % 2);
                    for (node, performative) in
                        [(first, "request"), (second, "agree"), (first, "inform")]
                    {
                        if !step(&ledger, node, &nodes[node], &id, performative).await {
                            break;
                        }
                    }
                }
            }));
        }
        let acknowledged_in = |phase: usize| ledger.acknowledged[phase].load(Ordering::Relaxed);
        let advance = |phase: usize, link: Link| {
            proxy.set(link);
            ledger.phase.store(phase, Ordering::Relaxed);
            eprintln!("link: {} ({link:?})", PHASES[phase]);
        };

        eventually("the load runs", || async { (acknowledged_in(0) >= 30).then_some(()) }).await;
        advance(1, Link::Delay(Duration::from_millis(200)));
        sleep(Duration::from_secs(4)).await;
        // Every connection cut, and each new one for a second; then node-a reconnects and
        // owns partitions again (it may have lost them all) before the black hole.
        advance(2, Link::Drop);
        sleep(Duration::from_secs(1)).await;
        proxy.set(Link::Pass);
        let held_by_a = eventually("node-a owns conversations again", || async {
            let mut owned = Vec::new();
            for id in &held {
                let Ok(read) = answer(nodes[0].read(id)).await else {
                    continue;
                };
                let by_a = (read.served_by.as_deref()).is_some_and(|by| by.starts_with(&node_a.url));
                if read.status == 200 && by_a {
                    owned.push(id.clone());
                }
            }
            (!owned.is_empty()).then_some(owned)
        })
        .await;
        eprintln!("node-a owns {held_by_a:?} before the black hole");
        let (watched, watching) = open_stream_on(&nodes[0], &held_by_a).await;

        // Black-holed past the TTL: node-a's leases run out by the database's clock, and
        // node-b (whose link is fine) goes on serving, its own partitions and then node-a's.
        advance(3, Link::BlackHole);
        let holed = Instant::now();
        let probe = &nodes[1];
        let mut probes = 0;
        eventually("node-b serves during the black hole", || {
            probes += 1;
            let id = format!("probe-b-{probes}");
            async move {
                let started = answer(probe.start(&id)).await.ok()?;
                (started.status == 201).then_some(())
            }
        })
        .await;
        eprintln!(
            "node-b served a start {:?} into the black hole",
            holed.elapsed()
        );
        for id in &held_by_a {
            let informed = eventually("node-b takes node-a's conversation over", || async {
                let informed = answer(nodes[1].send(id, "inform")).await.ok()?;
                (informed.status == 202).then_some(informed)
            })
            .await;
            let owner = informed.served_by.expect("x-colloquy-node");
            assert!(owner.starts_with(&node_b.url), "{id} served by {owner}");
            (ledger.messages.lock().expect("lock")).push((id.clone(), format!("{id}.inform")));
        }
        eprintln!(
            "node-b served node-a's conversations {:?} into the black hole",
            holed.elapsed()
        );
        let hole = LEASE_TTL * 3;
        if holed.elapsed() < hole {
            sleep(hole - holed.elapsed()).await;
        }

        // node-a's lease on the watched conversation lapsed in the black hole, with no tick
        // to say so (none reaches the store): its stream there ended, rather than staying
        // open and silent while node-b informed the conversation.
        assert!(
            watching.is_finished(),
            "node-a's stream of {watched} is still open {:?} into the black hole",
            holed.elapsed()
        );
        let read = (watching.await.expect("the stream's reader"))
            .unwrap_or_else(|error| panic!("node-a's stream of {watched} failed: {error}"));
        assert!(read.contains("\"agree\"") && !read.contains("\"inform\""), "{read}");

        advance(4, Link::Pass);
        let passed = Instant::now();
        eventually("node-a acknowledges again", || async {
            (ledger.through[0][4].load(Ordering::Relaxed) >= 10).then_some(())
        })
        .await;
        eprintln!(
            "node-a acknowledged again {:?} after the link passed",
            passed.elapsed()
        );
        eventually("the load goes on through both", || async {
            (acknowledged_in(4) >= 40).then_some(())
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        for worker in workers {
            worker.await.expect("a worker");
        }
        for (phase, name) in PHASES.iter().enumerate() {
            eprintln!(
                "phase {name}: {} failed attempts {:?}, {} acknowledged ({} through node-a, {} through node-b)",
                ledger.failed[phase].load(Ordering::Relaxed),
                ledger.failures_in(phase),
                acknowledged_in(phase),
                ledger.through[0][phase].load(Ordering::Relaxed),
                ledger.through[1][phase].load(Ordering::Relaxed),
            );
        }

        // node-a serves reads and writes again.
        let id = "after-the-faults";
        for (node, performative) in [(0, "request"), (1, "agree"), (0, "inform")] {
            assert!(
                step(&ledger, node, &nodes[node], id, performative).await,
                "{id}.{performative}"
            );
        }

        // Every acknowledged message is in the store, once, at contiguous versions; both
        // nodes read each conversation at the version the store has.
        let store = colloquy_store::PostgresStore::connect(&url)
            .await
            .expect("connect");
        let mut acknowledged: HashMap<String, Vec<String>> = HashMap::new();
        for (conversation, message) in ledger.messages.lock().expect("lock").iter() {
            acknowledged
                .entry(conversation.clone())
                .or_default()
                .push(message.clone());
        }
        for (conversation, messages) in &acknowledged {
            let log = store
                .load(conversation)
                .await
                .expect("load")
                .unwrap_or_else(|| panic!("acknowledged {conversation} lost"));
            let seqs: Vec<u64> = log.iter().map(|event| event.seq).collect();
            let expected: Vec<u64> = (1..=log.len() as u64).collect();
            assert_eq!(seqs, expected, "{conversation}: versions 1..n");
            let mut ids: Vec<String> = log
                .iter()
                .filter_map(|event| match &event.kind {
                    EventKind::MessageAccepted { message, .. } => Some(message.id.to_string()),
                    _ => None,
                })
                .collect();
            for message in messages {
                assert!(ids.contains(message), "acknowledged {message} lost");
            }
            let all = ids.len();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), all, "{conversation}: a message recorded twice");
            for (node, api) in nodes.iter().enumerate() {
                let version = eventually("the conversation is readable", || api.version(conversation))
                    .await;
                assert_eq!(
                    version,
                    log.len() as u64,
                    "{conversation} through node {node}: the stored version"
                );
            }
        }
        eprintln!(
            "{} acknowledged messages in {} conversations, all in the store",
            ledger.messages.lock().expect("lock").len(),
            acknowledged.len()
        );
        drop(store);
        drop(node_a);
        drop(node_b);
        drop(proxy);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}
