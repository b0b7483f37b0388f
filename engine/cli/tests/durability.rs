//! Durability end to end: real `colloquy serve` processes on 127.0.0.1, killed with
//! SIGKILL, restarted, and pointed at one SQLite file, one Redis or one Postgres database.
//!
//! These tests need the `colloquy` binary, which only an integration test of the `colloquy`
//! package can name (`CARGO_BIN_EXE_colloquy`); hence this second test binary beside the
//! workspace's end-to-end suite.
//!
//! Redis: the tests read `COLLOQUY_TEST_REDIS` (`redis://127.0.0.1:PORT`, a server they may
//! write to; `.ci/run` starts one) and start their own `redis-server` (from `PATH`) when
//! they must restart it. Without the variable they print a SKIPPED line, except under CI
//! (`CI=true`), where they fail.
//!
//! Postgres: the tests read `COLLOQUY_TEST_POSTGRES` (`postgres://USER@127.0.0.1:PORT/DB`;
//! `.ci/run` starts a cluster) and create a database of their own on it; without the
//! variable they skip as the Redis tests do.
//!
//! Every wait is bounded; nothing asserts how long something took.
//!
//! Why one file of 2,000 lines: every scenario spawns and kills the same `colloquy serve`
//! processes and Redis through the helpers at the top; each test reads alone.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use colloquy_core::store::ConversationStore;
use colloquy_protocol::conversation::{CommitmentState, ConversationStatus, ViolationKind};
use colloquy_protocol::event::EventKind;
use colloquy_protocol::message::{SendMessage, StartConversation};
use colloquy_sdk::Client;
use colloquy_sdk::client::ConversationQuery;
use colloquy_store::RedisStore;
use serde_json::json;
use tokio::time::{sleep, timeout};

/// Audit records: signed, verified offline, altered logs caught, logs from before chains.
#[path = "durability/audit.rs"]
mod audit;
/// Postgres failing under two owning nodes: stopped and restarted, and a faulty link.
#[path = "durability/postgres_faults.rs"]
mod postgres_faults;

/// Longest any one test may run.
const TEST_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest wait for a server to print its address, or for an expected state.
const WAIT: Duration = Duration::from_secs(60);

fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "colloquy-durability-{test}-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7()
    ));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// The lease TTL of the nodes the ownership tests start (`--cluster-lease-ttl`).
const LEASE_TTL: Duration = Duration::from_secs(2);

/// The extra `colloquy serve` arguments of a node owning partitions: a secret file written
/// in `dir` (the same for every node of a test) and a [`LEASE_TTL`] lease.
fn ownership_args(dir: &Path) -> Vec<String> {
    let secret = dir.join("node-secret");
    std::fs::write(&secret, "a node secret for the durability tests\n").expect("secret");
    vec![
        "--cluster-secret-file".to_owned(),
        secret.display().to_string(),
        "--cluster-lease-ttl".to_owned(),
        format!("{}s", LEASE_TTL.as_secs()),
    ]
}

/// A template directory with the built-in templates only (copied, so work on examples
/// elsewhere in the tree cannot change what these tests run).
fn templates(dir: &Path) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    let target = dir.join("templates");
    std::fs::create_dir_all(&target).expect("create templates dir");
    for name in [
        "fipa-request.yaml",
        "fipa-query.yaml",
        "fipa-contract-net.yaml",
    ] {
        std::fs::copy(source.join(name), target.join(name)).expect("copy template");
    }
    target
}

/// The test Postgres, from `COLLOQUY_TEST_POSTGRES` (`postgres://USER@127.0.0.1:PORT/DB`, a
/// server the tests may create databases on; `.ci/run` starts one). Without it the test
/// prints a SKIPPED line, except under CI (`CI=true`), where it fails.
fn test_postgres(test: &str) -> Option<String> {
    match std::env::var("COLLOQUY_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("{test}: CI=true but COLLOQUY_TEST_POSTGRES is not set; .ci/run starts Postgres")
        }
        _ => {
            eprintln!(
                "SKIPPED {test}: set COLLOQUY_TEST_POSTGRES=postgres://USER@127.0.0.1:PORT/DB to run it"
            );
            None
        }
    }
}

fn test_redis(test: &str) -> Option<String> {
    match std::env::var("COLLOQUY_TEST_REDIS") {
        Ok(url) if !url.is_empty() => Some(url.trim_end_matches('/').to_owned()),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("{test}: CI=true but COLLOQUY_TEST_REDIS is not set; .ci/run starts Redis")
        }
        _ => {
            eprintln!("SKIPPED {test}: set COLLOQUY_TEST_REDIS=redis://127.0.0.1:PORT to run it");
            None
        }
    }
}

/// A `colloquy serve` process; SIGKILLed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Server {
    fn start(dir: &Path, templates: &Path, store: &str, name: &str) -> Server {
        Server::start_with(dir, templates, store, name, &[] as &[&str])
    }

    /// [`Server::start`] with more `colloquy serve` arguments.
    fn start_with(
        dir: &Path,
        templates: &Path,
        store: &str,
        name: &str,
        extra: &[impl AsRef<std::ffi::OsStr>],
    ) -> Server {
        Server::start_logging(dir, templates, store, name, extra, "warn")
    }

    /// [`Server::start_with`] logging what `rust_log` (a `RUST_LOG` filter) lets through to
    /// `DIR/NAME.log`.
    fn start_logging(
        dir: &Path,
        templates: &Path,
        store: &str,
        name: &str,
        extra: &[impl AsRef<std::ffi::OsStr>],
        rust_log: &str,
    ) -> Server {
        let log = dir.join(format!("{name}.log"));
        let mut child = Command::new(env!("CARGO_BIN_EXE_colloquy"))
            .arg("serve")
            .args(["--listen", "127.0.0.1:0", "--store", store])
            .arg("--templates")
            .arg(templates)
            .args(extra)
            .env("RUST_LOG", rust_log)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("create log"))
            .spawn()
            .expect("start colloquy serve");
        let stdout = child.stdout.take().expect("piped stdout");
        // Reading blocks until the server prints its address or exits; a thread keeps the
        // pipe drained afterwards.
        let (found, address) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            for line in lines.by_ref().map_while(Result::ok) {
                if let Some(url) = line.strip_prefix("colloquy listening on ") {
                    let _ = found.send(url.to_owned());
                    break;
                }
            }
            for _ in lines {}
        });
        let url = address
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("{name} did not start; see {}", log.display()));
        Server { child, url }
    }

    fn client(&self, agent: &str) -> Client {
        Client::new(&self.url, agent, None).expect("client")
    }

    /// `kill -TERM`, as a service manager stops a process; waits for the exit (bounded) and
    /// returns how it ended.
    fn terminate(mut self) -> std::process::ExitStatus {
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -TERM failed");
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("poll the server") {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "colloquy serve still running {WAIT:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `kill -9`.
    fn kill(mut self) {
        self.child.kill().expect("kill");
        self.child.wait().expect("reap");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Already dead after `kill`; nothing to report then.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_millis() as u64)
        .unwrap_or(0)
}

/// A request conversation from `alice` to `bob`, opened with a request whose reply is due
/// at `reply_by` (absolute ms), if given.
fn request(id: &str, participant: &str, reply_by: Option<u64>) -> StartConversation {
    StartConversation {
        template: "fipa-request".to_owned(),
        participants: vec![participant.to_owned()],
        conversation_id: Some(id.to_owned()),
        message: Some(SendMessage {
            message_id: Some(format!("{id}.request")),
            reply_by,
            ..SendMessage::new("request", json!({"action": "archive", "item": id}))
        }),
        ..StartConversation::default()
    }
}

/// The URL of database `db` of the test Redis at `redis`, emptied: a test that owns a
/// database sees no other run's leftovers.
async fn emptied_database(redis: &str, db: u8) -> String {
    colloquy_store::raw::emptied_redis_database(redis, db).await
}

/// Polls `check` until it returns `Some`, for at most [`WAIT`].
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting: {what}"
        );
        sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the conversation's single thread has timed out, as `agent` sees it through
/// `client`.
async fn timed_out(client: &Client, id: &str) -> Option<()> {
    let view = client.conversation(id).await.ok()?;
    (view.threads[0].state.as_ref() == "timed_out").then_some(())
}

/// How many times a thread expired in the stored log.
async fn expiries(store: &dyn ConversationStore, id: &str) -> usize {
    store
        .load(id)
        .await
        .expect("load")
        .expect("conversation stored")
        .iter()
        .filter(|event| matches!(event.kind, EventKind::ThreadExpired(_)))
        .count()
}

/// What one client acknowledged before the server died.
#[derive(Default)]
struct Acknowledged {
    /// Conversations whose opening request was acknowledged.
    started: Vec<String>,
    /// Of those, the ones whose `agree` was acknowledged too.
    agreed: Vec<String>,
}

/// `--retention`: a completed conversation is readable at first, then removed once its
/// window has passed, and the removal is in the file: it stays gone after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_conversations_are_removed_after_the_retention_given_to_serve() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("retention");
        let templates = templates(&dir);
        let store = format!("sqlite:{}", dir.join("data/colloquy.db").display());
        let first = Server::start_with(&dir, &templates, &store, "first", &["--retention", "1s"]);
        let alice = first.client("alice");
        alice
            .start(&request("short-lived", "bob", None))
            .await
            .expect("start");
        first
            .client("bob")
            .send(
                "short-lived",
                &SendMessage::new("refuse", json!({"reason": "busy"})),
            )
            .await
            .expect("refuse");
        let view = alice
            .conversation("short-lived")
            .await
            .expect("readable right after completing");
        assert_eq!(view.status, ConversationStatus::Completed);
        eventually("the conversation is removed", || {
            let alice = &alice;
            async move {
                match alice.conversation("short-lived").await {
                    Err(error) if error.status() == Some(404) => Some(()),
                    _ => None,
                }
            }
        })
        .await;
        first.kill();
        let second = Server::start(&dir, &templates, &store, "second");
        let error = second
            .client("alice")
            .conversation("short-lived")
            .await
            .expect_err("still removed after a restart");
        assert_eq!(error.status(), Some(404), "{error}");
    })
    .await
    .expect("test timed out");
}

/// SIGTERM, how systemd, Docker and Kubernetes stop a process, shuts the server down
/// gracefully: it exits with success (not killed by the signal), and what it acknowledged is
/// there after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_stops_the_server_gracefully() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("sigterm");
        let templates = templates(&dir);
        let store = format!("sqlite:{}", dir.join("data/colloquy.db").display());
        let first = Server::start(&dir, &templates, &store, "first");
        first
            .client("alice")
            .start(&request("before-sigterm", "bob", None))
            .await
            .expect("start");
        // An open event stream must not hold the shutdown up.
        let mut stream = first.client("bob").inbox(0);
        stream.next().await.expect("bob's inbox stream is open");
        let status = tokio::task::spawn_blocking(move || first.terminate())
            .await
            .expect("joined");
        assert!(
            status.success(),
            "colloquy serve ended with {status} on SIGTERM"
        );
        let second = Server::start(&dir, &templates, &store, "second");
        let view = second
            .client("alice")
            .conversation("before-sigterm")
            .await
            .expect("still there after a restart");
        assert_eq!(view.messages.len(), 1);
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_keeps_everything_acknowledged_across_kill_9() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("sqlite-crash");
        let store = format!("sqlite:{}", dir.join("data/colloquy.db").display());
        keeps_everything_acknowledged_across_kill_9(&dir, &store).await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// The same crash on Postgres: a real `colloquy serve --store postgres://…` killed with
/// SIGKILL under load, restarted twice on the same database.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_keeps_everything_acknowledged_across_kill_9() {
    let Some(postgres) = test_postgres("postgres_keeps_everything_acknowledged_across_kill_9")
    else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("postgres-crash");
        let store = colloquy_store::raw::fresh_postgres_database(&postgres).await;
        keeps_everything_acknowledged_across_kill_9(&dir, &store).await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// Clients send until a `colloquy serve` on `store` is killed under them (with a deadline
/// pending); a restarted server has every acknowledged conversation, message, listing,
/// commitment and inbox entry, and fires the deadline once.
async fn keeps_everything_acknowledged_across_kill_9(dir: &Path, store: &str) {
    let templates = templates(dir);
    let first = Server::start(dir, &templates, store, "first");

    // A deadline pending across the crash: bob never answers this request.
    let deadline_at = now_ms() + 4_000;
    first
        .client("alice")
        .start(&request("pending-deadline", "bob", Some(deadline_at)))
        .await
        .expect("start the deadline conversation");

    // Clients send until the server dies under them.
    let sent = Arc::new(AtomicUsize::new(0));
    let mut clients = Vec::new();
    for worker in 0..8 {
        let alice = first.client("alice");
        let bob = first.client("bob");
        let sent = sent.clone();
        clients.push(tokio::spawn(async move {
            let mut acknowledged = Acknowledged::default();
            for n in 0.. {
                let id = format!("w{worker}-{n}");
                if alice.start(&request(&id, "bob", None)).await.is_err() {
                    break;
                }
                acknowledged.started.push(id.clone());
                let agree = SendMessage {
                    message_id: Some(format!("{id}.agree")),
                    ..SendMessage::new("agree", json!({}))
                };
                if bob.send(&id, &agree).await.is_err() {
                    break;
                }
                acknowledged.agreed.push(id);
                sent.fetch_add(1, Ordering::Relaxed);
            }
            acknowledged
        }));
    }
    eventually("clients got going", || {
        let sent = sent.load(Ordering::Relaxed);
        async move { (sent >= 200).then_some(()) }
    })
    .await;
    first.kill();
    let mut acknowledged = Acknowledged::default();
    for client in clients {
        let done = client.await.expect("client task");
        acknowledged.started.extend(done.started);
        acknowledged.agreed.extend(done.agreed);
    }
    assert!(acknowledged.agreed.len() >= 200);

    let second = Server::start(dir, &templates, store, "second");
    let alice = second.client("alice");
    let bob = second.client("bob");
    for id in &acknowledged.started {
        let view = alice
            .conversation(id)
            .await
            .unwrap_or_else(|error| panic!("acknowledged conversation {id} lost: {error}"));
        assert_eq!(&*view.messages[0].id, format!("{id}.request").as_str());
    }
    for id in &acknowledged.agreed {
        let view = bob.conversation(id).await.expect("conversation");
        assert!(
            view.messages
                .iter()
                .any(|m| *m.id == *format!("{id}.agree")),
            "acknowledged agree of {id} lost"
        );
    }
    // Commitments of conversations the new process has not loaded before this call
    // are there too (the debtor's list reads the store's party index).
    second.kill();
    let fresh = Server::start(dir, &templates, store, "third");
    // alice's conversation list reads the store's party index: every acknowledged
    // conversation is listed although this process has loaded none of them yet.
    let mut listed = BTreeSet::new();
    let mut query = ConversationQuery {
        limit: Some(500),
        ..ConversationQuery::default()
    };
    loop {
        let page = fresh
            .client("alice")
            .conversations(&query)
            .await
            .expect("list");
        listed.extend(page.conversations.iter().map(|c| c.id.to_string()));
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => break,
        }
    }
    for id in &acknowledged.started {
        assert!(
            listed.contains(id),
            "{id} missing from the list after restart"
        );
    }
    let commitments = fresh
        .client("bob")
        .commitments(Some("debtor"), None)
        .await
        .expect("list");
    let active: BTreeSet<&str> = commitments
        .iter()
        .filter(|c| c.state == CommitmentState::Active)
        .map(|c| &*c.conversation_id)
        .collect();
    for id in &acknowledged.agreed {
        assert!(
            active.contains(id.as_str()),
            "commitment of {id} lost after restart"
        );
    }
    // bob's inbox still holds every acknowledged request.
    let mut requests = BTreeSet::new();
    let mut after = 0;
    loop {
        let page = fresh
            .client("bob")
            .poll_inbox(after, 0)
            .await
            .expect("poll");
        if page.items.is_empty() {
            break;
        }
        after = page.next_after;
        requests.extend(
            page.items
                .into_iter()
                .map(|item| item.message.id.to_string()),
        );
    }
    for id in &acknowledged.started {
        assert!(
            requests.contains(&format!("{id}.request")),
            "inbox lost {id}"
        );
    }

    // The pending deadline fires after the restart, once.
    let alice = fresh.client("alice");
    eventually("the pending deadline fired", || {
        timed_out(&alice, "pending-deadline")
    })
    .await;
    fresh.kill();
    let store = colloquy_store::open(store).await.expect("open the store");
    assert_eq!(expiries(&*store, "pending-deadline").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_on_one_redis_act_as_one_engine() {
    let Some(redis) = test_redis("two_nodes_on_one_redis_act_as_one_engine") else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        // A database of its own, emptied first: leftovers must not fire here.
        let url = emptied_database(&redis, 3).await;
        let dir = scratch_dir("two-nodes");
        two_nodes_act_as_one_engine(&dir, &url).await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// The same two nodes on one Postgres database: each follows the other's commits through
/// the `changes` table, as on Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_nodes_on_one_postgres_act_as_one_engine() {
    let Some(postgres) = test_postgres("two_nodes_on_one_postgres_act_as_one_engine") else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let url = colloquy_store::raw::fresh_postgres_database(&postgres).await;
        let dir = scratch_dir("two-nodes-postgres");
        two_nodes_act_as_one_engine(&dir, &url).await;
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// Two nodes sharing a Postgres store's partitions (`--cluster-secret-file`): conversations
/// started through either are read and answered through both (forwarded to their owner);
/// after `kill -9` of one, the other takes its partitions when their leases run out and
/// serves its conversations with every acknowledged message in them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owners_on_postgres_hand_over_after_kill_9() {
    let Some(postgres) = test_postgres("owners_on_postgres_hand_over_after_kill_9") else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let url = colloquy_store::raw::fresh_postgres_database(&postgres).await;
        let dir = scratch_dir("owners-postgres");
        let templates = templates(&dir);
        let extra = ownership_args(&dir);
        let node_a = Server::start_with(&dir, &templates, &url, "owner-a", &extra);
        let node_b = Server::start_with(&dir, &templates, &url, "owner-b", &extra);
        let (alice_a, alice_b) = (node_a.client("alice"), node_b.client("alice"));
        let (bob_a, bob_b) = (node_a.client("bob"), node_b.client("bob"));

        // Starts through either node, agreed to through the other.
        let ids: Vec<String> = (0..16).map(|n| format!("owned-{n}")).collect();
        for (n, id) in ids.iter().enumerate() {
            let (starter, answerer) = if n % 2 == 0 {
                (&alice_a, &bob_b)
            } else {
                (&alice_b, &bob_a)
            };
            starter
                .start(&request(id, "bob", None))
                .await
                .expect("start");
            answerer
                .send(
                    id,
                    &SendMessage::new("agree", json!({})).with_id(format!("{id}.agree")),
                )
                .await
                .expect("agree");
        }
        let mut versions = std::collections::HashMap::new();
        for id in &ids {
            let on_a = alice_a.conversation(id).await.expect("read through node-a");
            let on_b = alice_b.conversation(id).await.expect("read through node-b");
            assert_eq!(on_a.version, on_b.version, "{id}: one owner answers both");
            assert_eq!(on_a.threads[0].state.as_ref(), "agreed", "{id}");
            versions.insert(id.clone(), on_a.version);
        }

        // Deadlines fire on their partition's owner, once: one while both run, one due
        // after node-a dies (on whichever node owns it then).
        alice_a
            .start(&request("owned-deadline", "carol", Some(now_ms() + 1_000)))
            .await
            .expect("start");
        eventually("the deadline fired", || {
            timed_out(&alice_b, "owned-deadline")
        })
        .await;
        alice_b
            .start(&request("owned-late", "carol", Some(now_ms() + 2_500)))
            .await
            .expect("start");

        // node-a dies; node-b serves everything once node-a's leases run out.
        node_a.kill();
        let killed = std::time::Instant::now();
        for id in &ids {
            let view = eventually("node-b serves the conversation", || async {
                alice_b.conversation(id).await.ok()
            })
            .await;
            assert_eq!(
                view.version, versions[id],
                "{id}: every acknowledged message is there"
            );
        }
        let takeover = killed.elapsed();
        eprintln!("takeover after kill -9: {takeover:?} (lease TTL {LEASE_TTL:?})");
        for id in &ids {
            bob_b
                .send(id, &SendMessage::new("inform", json!({"done": true})))
                .await
                .expect("inform through the survivor");
            let view = alice_b.conversation(id).await.expect("read");
            assert_eq!(view.status, ConversationStatus::Completed, "{id}");
        }
        eventually("the late deadline fired", || {
            timed_out(&alice_b, "owned-late")
        })
        .await;
        node_b.kill();
        let store = colloquy_store::PostgresStore::connect(&url)
            .await
            .expect("connect");
        for id in ["owned-deadline", "owned-late"] {
            assert_eq!(expiries(&store, id).await, 1, "{id} fired once");
        }
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// A node paused (`SIGSTOP`) past its lease TTL loses its partitions to the other node, and
/// when it resumes (`SIGCONT`) it never answers from its stale copies: every read through it
/// shows what the new owner committed meanwhile, and a message sent through it lands once,
/// at the new owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_owner_resumes_without_stale_answers() {
    let Some(postgres) = test_postgres("a_paused_owner_resumes_without_stale_answers") else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let url = colloquy_store::raw::fresh_postgres_database(&postgres).await;
        let dir = scratch_dir("paused-owner");
        let templates = templates(&dir);
        let extra = ownership_args(&dir);
        let node_a = Server::start_with(&dir, &templates, &url, "paused-a", &extra);
        let node_b = Server::start_with(&dir, &templates, &url, "paused-b", &extra);
        let (alice_a, alice_b) = (node_a.client("alice"), node_b.client("alice"));
        let (bob_a, bob_b) = (node_a.client("bob"), node_b.client("bob"));
        let ids: Vec<String> = (0..12).map(|n| format!("paused-{n}")).collect();
        for id in &ids {
            alice_a
                .start(&request(id, "bob", None))
                .await
                .expect("start");
            bob_b
                .send(
                    id,
                    &SendMessage::new("agree", json!({})).with_id(format!("{id}.agree")),
                )
                .await
                .expect("agree");
        }

        // node-a stops answering anything; node-b takes its partitions after the TTL and
        // completes every conversation.
        let signal = |signal: &str| {
            let sent = Command::new("kill")
                .args([signal, &node_a.child.id().to_string()])
                .status()
                .expect("run kill");
            assert!(sent.success(), "kill {signal} failed");
        };
        signal("-STOP");
        let mut done = std::collections::HashMap::new();
        for id in &ids {
            eventually("node-b completes the conversation", || async {
                bob_b
                    .send(
                        id,
                        &SendMessage::new("inform", json!({"done": true}))
                            .with_id(format!("{id}.inform")),
                    )
                    .await
                    .ok()
            })
            .await;
            let view = alice_b.conversation(id).await.expect("read through node-b");
            assert_eq!(view.status, ConversationStatus::Completed, "{id}");
            done.insert(id.clone(), view.version);
        }

        // node-a resumes: whatever it answers is the new owner's state, never its own stale
        // copy (its leases ran out by its own clock while it was stopped).
        signal("-CONT");
        for id in &ids {
            let view = eventually("node-a answers again", || async {
                alice_a.conversation(id).await.ok()
            })
            .await;
            assert_eq!(view.version, done[id], "{id}: as node-b left it");
            assert_eq!(view.status, ConversationStatus::Completed, "{id}");
        }
        // The same inform sent again through node-a is the same message: recorded once.
        for id in &ids {
            let retried = bob_a
                .send(
                    id,
                    &SendMessage::new("inform", json!({"done": true}))
                        .with_id(format!("{id}.inform")),
                )
                .await;
            let view = alice_a.conversation(id).await.expect("read through node-a");
            assert_eq!(
                view.version, done[id],
                "{id}: nothing recorded twice ({retried:?})"
            );
        }
        drop(node_a);
        drop(node_b);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// Partition owners hear of other nodes' commits only for the inboxes someone waits on
/// there: commits to carol's inbox on node-b, whom nobody on node-a waits for, bring node-a
/// no notice; one to bob's, whose long poll is open on node-a, brings exactly one, and wakes
/// the poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partition_owners_hear_only_of_the_inboxes_someone_waits_on() {
    let Some(postgres) =
        test_postgres("partition_owners_hear_only_of_the_inboxes_someone_waits_on")
    else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let url = colloquy_store::raw::fresh_postgres_database(&postgres).await;
        let dir = scratch_dir("narrowed-notices");
        let templates = templates(&dir);
        let extra = ownership_args(&dir);
        let node_a = Server::start_with(&dir, &templates, &url, "notices-a", &extra);
        let node_b = Server::start_with(&dir, &templates, &url, "notices-b", &extra);
        eventually("both nodes hold a share", || async {
            let held = colloquy_store::raw::postgres_live_leases(&url).await;
            (held.len() == 2 && held.values().all(|n| n.abs_diff(512) <= 1)).then_some(())
        })
        .await;
        let http = reqwest::Client::new();
        let notices = |node: &Server| {
            let request = http.get(format!("{}/metrics", node.url)).send();
            async move {
                let text = request.await.expect("metrics").text().await.expect("text");
                text.lines()
                    .find_map(|line| line.strip_prefix("colloquy_remote_notices_total "))
                    .expect("the notices counter")
                    .parse::<u64>()
                    .expect("a count")
            }
        };

        // bob waits on node-a.
        let bob = node_a.client("bob");
        let poll = tokio::spawn(async move { bob.poll_inbox(0, 20_000).await });
        eventually("bob's long poll is open on node-a", || async {
            let list: serde_json::Value = (http.get(format!("{}/v1/agents", node_a.url)))
                .header("x-agent-id", "bob")
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (list["agents"][0]["inbox_streams"].as_u64() > Some(0)).then_some(())
        })
        .await;
        let before = notices(&node_a).await;

        // Conversations node-b starts (ids in its own partitions) for carol: nobody on
        // node-a waits for her.
        let alice_b = node_b.client("alice");
        let opening = |to: &str| StartConversation {
            template: "fipa-request".to_owned(),
            participants: vec![to.to_owned()],
            conversation_id: None,
            message: Some(SendMessage::new("request", json!({"action": "x"}))),
            ..request("unused", to, None)
        };
        for _ in 0..10 {
            alice_b
                .start(&opening("carol"))
                .await
                .expect("start for carol");
        }
        // One for bob: his poll on node-a wakes.
        let started = alice_b.start(&opening("bob")).await.expect("start for bob");
        let page = poll.await.expect("poll task").expect("bob's poll");
        assert_eq!(page.items.len(), 1);
        assert_eq!(page.items[0].conversation_id, started.id);
        // The follower polls each second besides its wake-ups: wait past that, then count.
        sleep(Duration::from_millis(1_500)).await;
        let heard = notices(&node_a).await - before;
        eprintln!("node-a heard {heard} notices of node-b's 11 commits");
        assert_eq!(heard, 1, "node-a heard of bob's inbox only");
        drop((node_a, node_b));
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// Three nodes serve a steady load spread over all of them; a fourth joins. The partitions
/// rebalance to a quarter each (the three give back, the fourth takes) while the load runs,
/// and no request fails: a request for a partition in flight waits for its new owner, and
/// one whose commit the move fenced is routed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fourth_node_takes_its_share_while_no_request_fails() {
    let Some(postgres) = test_postgres("a_fourth_node_takes_its_share_while_no_request_fails")
    else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let url = colloquy_store::raw::fresh_postgres_database(&postgres).await;
        let dir = scratch_dir("fourth-node");
        let templates = templates(&dir);
        let extra = ownership_args(&dir);
        let start = |name: &str| Server::start_with(&dir, &templates, &url, name, &extra);
        let nodes = [start("join-a"), start("join-b"), start("join-c")];
        let shares = |count: usize| {
            let url = url.clone();
            move || {
                let url = url.clone();
                async move {
                    let held = colloquy_store::raw::postgres_live_leases(&url).await;
                    let even = held.len() == count
                        && held.values().sum::<usize>() == 1024
                        && held.values().all(|n| n.abs_diff(1024 / count) <= 1);
                    even.then_some(held)
                }
            }
        };
        eventually("three nodes share the partitions", shares(3)).await;

        // The load: three workers, each running whole conversations (request, agree,
        // inform), every step through another node.
        let urls: Vec<String> = nodes.iter().map(|node| node.url.clone()).collect();
        let running = Arc::new(AtomicBool::new(true));
        let failures = Arc::new(Mutex::new(Vec::<String>::new()));
        let done = Arc::new(AtomicUsize::new(0));
        let joined: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
        let mut workers = Vec::new();
        for worker in 0..3 {
            let (urls, running, failures, done, joined) = (
                urls.clone(),
                running.clone(),
                failures.clone(),
                done.clone(),
                joined.clone(),
            );
            workers.push(tokio::spawn(async move {
                let mut n = 0usize;
                while running.load(Ordering::SeqCst) {
                    let id = format!("join-{worker}-{n}");
                    // Once the fourth node is up, it takes a share of the calls too.
                    let mut through = urls.clone();
                    through.extend(joined.lock().expect("joined").clone());
                    let node = |step: usize| through[(n + step + worker) % through.len()].clone();
                    let alice = Client::new(&node(0), "alice", None).expect("client");
                    let bob = Client::new(&node(1), "bob", None).expect("client");
                    let bob_again = Client::new(&node(2), "bob", None).expect("client");
                    let outcome = async {
                        alice
                            .start(&request(&id, "bob", None))
                            .await
                            .map_err(|e| format!("{id} start: {e:?}"))?;
                        bob.send(
                            &id,
                            &SendMessage::new("agree", json!({})).with_id(format!("{id}.agree")),
                        )
                        .await
                        .map_err(|e| format!("{id} agree: {e:?}"))?;
                        bob_again
                            .send(
                                &id,
                                &SendMessage::new("inform", json!({"done": true}))
                                    .with_id(format!("{id}.inform")),
                            )
                            .await
                            .map_err(|e| format!("{id} inform: {e:?}"))?;
                        Ok::<(), String>(())
                    }
                    .await;
                    match outcome {
                        Ok(()) => {
                            done.fetch_add(1, Ordering::SeqCst);
                        }
                        Err(failure) => failures.lock().expect("failures").push(failure),
                    }
                    n += 1;
                }
            }));
        }

        sleep(Duration::from_millis(500)).await;
        let before = done.load(Ordering::SeqCst);
        let fourth = start("join-d");
        *joined.lock().expect("joined") = Some(fourth.url.clone());
        let held = eventually("four nodes share the partitions", shares(4)).await;
        assert_eq!(held.get(&fourth.url), Some(&256), "{held:?}");
        let during = done.load(Ordering::SeqCst) - before;
        // A while longer with all four taking calls.
        sleep(Duration::from_millis(500)).await;
        running.store(false, Ordering::SeqCst);
        for worker in workers {
            worker.await.expect("worker");
        }
        let failures = failures.lock().expect("failures").clone();
        let done = done.load(Ordering::SeqCst);
        eprintln!(
            "fourth node joined: {done} conversations, {during} of them while it took its share; \
             {} failed",
            failures.len()
        );
        assert!(failures.is_empty(), "requests failed: {failures:#?}");
        assert!(during > 0, "the load ran while the partitions moved");

        // Every conversation is complete, read through the new node (forwarded or served).
        let reader = Client::new(&fourth.url, "alice", None).expect("client");
        let mut completed = 0;
        for worker in 0..3 {
            for n in 0.. {
                let id = format!("join-{worker}-{n}");
                match reader.conversation(&id).await {
                    Ok(view) => assert_eq!(view.status, ConversationStatus::Completed, "{id}"),
                    Err(_) => break,
                }
                completed += 1;
            }
        }
        assert_eq!(completed, done, "every conversation run is there, complete");
        drop(nodes);
        drop(fourth);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// Two `colloquy serve` nodes on the store at `url`: an inbox long poll on one wakes for a
/// message sent through the other, each sees the other's commits, a deadline fires once with
/// both running and once more when the node that took its request is killed.
async fn two_nodes_act_as_one_engine(dir: &Path, url: &str) {
    let templates = templates(dir);
    let node_a = Server::start(dir, &templates, url, "node-a");
    let node_b = Server::start(dir, &templates, url, "node-b");
    let alice = node_a.client("alice");
    let bob = node_b.client("bob");

    // alice on A asks bob on B; bob's long poll on B wakes up for a message sent via A.
    let poll = tokio::spawn({
        let bob = bob.clone();
        async move { bob.poll_inbox(0, 20_000).await }
    });
    sleep(Duration::from_millis(300)).await;
    alice
        .start(&request("across", "bob", None))
        .await
        .expect("start on A");
    let page = poll.await.expect("poll task").expect("poll on B");
    assert_eq!(page.items.len(), 1);
    assert_eq!(&*page.items[0].message.id, "across.request");

    // bob answers through B; alice sees it through A, and A's view is current.
    bob.send("across", &SendMessage::new("agree", json!({})))
        .await
        .expect("agree on B");
    let page = alice.poll_inbox(0, 20_000).await.expect("poll on A");
    assert_eq!(page.items[0].message.performative.to_string(), "agree");
    bob.send("across", &SendMessage::new("inform", json!({"done": true})))
        .await
        .expect("inform on B");
    eventually("A sees the conversation completed", || async {
        let view = alice.conversation("across").await.ok()?;
        (view.status == ConversationStatus::Completed).then_some(())
    })
    .await;
    let commitments = alice
        .commitments(Some("creditor"), None)
        .await
        .expect("on A");
    assert_eq!(commitments.len(), 1);
    assert_eq!(commitments[0].state, CommitmentState::Fulfilled);

    // A deadline fires once while both nodes run their schedulers.
    alice
        .start(&request("both-running", "carol", Some(now_ms() + 1_500)))
        .await
        .expect("start");
    let carol_on_b = node_b.client("carol");
    eventually("the deadline fired", || {
        timed_out(&carol_on_b, "both-running")
    })
    .await;

    // And still fires when the node that took the request is killed.
    alice
        .start(&request("one-killed", "carol", Some(now_ms() + 1_500)))
        .await
        .expect("start");
    node_a.kill();
    eventually("the deadline fired on the surviving node", || {
        timed_out(&carol_on_b, "one-killed")
    })
    .await;
    node_b.kill();

    let store = colloquy_store::open(url).await.expect("open the store");
    assert_eq!(expiries(&*store, "both-running").await, 1);
    assert_eq!(expiries(&*store, "one-killed").await, 1);
}

/// A `redis-server` of the test's own, which it can kill and restart.
struct RedisServer {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    fn start(dir: &Path, port: u16) -> RedisServer {
        // appendfsync always: a write Redis answered is on disk, so "acknowledged" means
        // durable even when Redis is killed.
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
            .arg(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server (install the redis-server package)");
        RedisServer {
            child,
            port,
            dir: dir.to_path_buf(),
        }
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    fn restart(&mut self) {
        self.kill();
        *self = RedisServer::start(&self.dir.clone(), self.port);
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The messages a webhook receiver got, as (inbox seq, message id).
type Pushed = Arc<std::sync::Mutex<Vec<(u64, String)>>>;

/// A webhook receiver on loopback that records every item POSTed to it; its URL.
async fn webhook_receiver(pushed: Pushed) -> String {
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(
            move |axum::Json(item): axum::Json<serde_json::Value>| async move {
                let seq = item["seq"].as_u64().unwrap_or_default();
                let id = item["message"]["id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                pushed.lock().expect("lock").push((seq, id));
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// Two nodes push each webhook message once, whichever node accepted it: only the node that
/// leads webhook delivery pushes. When it dies, the other takes the lead and pushes what
/// comes after.
#[tokio::test]
async fn two_nodes_push_each_webhook_message_once() {
    let Some(redis) = test_redis("two_nodes_push_each_webhook_message_once") else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let url = emptied_database(&redis, 4).await;
        two_nodes_push_each_webhook_message_once_on(&url, "webhook-nodes", &[]).await;
    })
    .await
    .expect("within the test timeout");
}

/// The same with partition owners on Postgres: the leader of webhook delivery hears of the
/// other node's commits to bob's inbox (it follows the inboxes it delivers to), and pushes
/// each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_owners_push_each_webhook_message_once() {
    let Some(postgres) = test_postgres("partition_owners_push_each_webhook_message_once") else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let url = colloquy_store::raw::fresh_postgres_database(&postgres).await;
        let secret_dir = scratch_dir("webhook-owners-secret");
        let extra = ownership_args(&secret_dir);
        two_nodes_push_each_webhook_message_once_on(&url, "webhook-owners", &extra).await;
        let _ = std::fs::remove_dir_all(&secret_dir);
    })
    .await
    .expect("within the test timeout");
}

/// Two nodes on the store at `url` (started with `extra` arguments besides the agents file):
/// six starts through both, each pushed to bob's webhook once; the node that probably leads
/// delivery killed; the next start pushed by the survivor, and nothing acknowledged again.
async fn two_nodes_push_each_webhook_message_once_on(url: &str, dir_name: &str, extra: &[String]) {
    let pushed: Pushed = Arc::default();
    let hook = webhook_receiver(pushed.clone()).await;
    let dir = scratch_dir(dir_name);
    let templates = templates(&dir);
    let agents = agents_file(&dir, Some(&hook));
    let args = [&agents[..], extra].concat();
    let node_a = Server::start_with(&dir, &templates, url, "node-a", &args);
    let node_b = Server::start_with(&dir, &templates, url, "node-b", &args);
    let on_a = Client::new(&node_a.url, "alice", Some("alice-secret")).expect("client");
    let on_b = Client::new(&node_b.url, "alice", Some("alice-secret")).expect("client");
    for n in 0..3 {
        for (node, client) in [("a", &on_a), ("b", &on_b)] {
            client
                .start(&request(&format!("hook-{node}{n}"), "bob", None))
                .await
                .expect("start");
        }
    }
    let ids = |pushed: &Pushed| -> Vec<String> {
        let mut ids = pushed_ids(pushed);
        ids.sort();
        ids
    };
    eventually("six pushes", || async {
        (ids(&pushed).len() >= 6).then_some(())
    })
    .await;
    // Longer than a lead renewal: a second pusher would have pushed by now.
    sleep(Duration::from_secs(4)).await;
    let once: Vec<String> = ["a0", "a1", "a2", "b0", "b1", "b2"]
        .iter()
        .map(|n| format!("hook-{n}.request"))
        .collect();
    assert_eq!(ids(&pushed), once, "each message pushed once, by one node");

    // bob acknowledges what he got; node A, which started first and so most likely
    // leads, dies; B pushes what comes next (after taking the lead, if A had it).
    let bob = Client::new(&node_b.url, "bob", Some("bob-secret")).expect("client");
    bob.acknowledge(6).await.expect("acknowledge");
    node_a.kill();
    let survivor = node_b;
    let alice = Client::new(&survivor.url, "alice", Some("alice-secret")).expect("client");
    // With partition owners the start may find its partition still held by the dead node
    // (503 until its lease runs out): a client retries.
    eventually("the start after the leader died", || async {
        match alice.start(&request("hook-after", "bob", None)).await {
            Ok(_) => Some(()),
            Err(colloquy_sdk::SdkError::Api { status: 409, .. }) => Some(()),
            Err(_) => None,
        }
    })
    .await;
    eventually("the push after the failover", || async {
        ids(&pushed)
            .contains(&"hook-after.request".to_owned())
            .then_some(())
    })
    .await;
    assert_eq!(
        ids(&pushed).len(),
        7,
        "acknowledged messages are not pushed again: {:?}",
        ids(&pushed)
    );
}

/// The ids of the messages a webhook receiver got, in the order it got them.
fn pushed_ids(pushed: &Pushed) -> Vec<String> {
    let pushed = pushed.lock().expect("lock");
    pushed.iter().map(|(_, id)| id.clone()).collect()
}

/// bob's webhook cursor in the SQLite file at `db`, read beside the running server; `None`
/// until there is one (or while the file is busy).
fn sqlite_webhook_cursor(db: &Path) -> Option<u64> {
    sqlite_push_cursor(db, "bob")
}

/// How far `agent`'s pushes (webhook or A2A bridge) got, in the SQLite file at `db`, read
/// beside the running server; `None` until there is a cursor (or while the file is busy).
fn sqlite_push_cursor(db: &Path, agent: &str) -> Option<u64> {
    colloquy_store::raw::sqlite_push_cursor(db, agent)
}

/// A server killed and restarted on its SQLite file goes on pushing bob's webhook where it
/// got: bob never acknowledges his inbox, and still is not sent it all again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_pushes_webhooks_from_where_it_got() {
    timeout(TEST_TIMEOUT, async {
        let pushed: Pushed = Arc::default();
        let hook = webhook_receiver(pushed.clone()).await;
        let dir = scratch_dir("webhook-restart");
        let templates = templates(&dir);
        let agents = agents_file(&dir, Some(&hook));
        let agents_arg = [agents[0].as_str(), agents[1].as_str()];
        let db = dir.join("data/colloquy.db");
        let store = format!("sqlite:{}", db.display());

        let first = Server::start_with(&dir, &templates, &store, "first", &agents_arg);
        let alice = Client::new(&first.url, "alice", Some("alice-secret")).expect("client");
        for n in 0..3 {
            alice
                .start(&request(&format!("before-{n}"), "bob", None))
                .await
                .expect("start");
        }
        eventually("three pushes", || async {
            (pushed_ids(&pushed).len() >= 3).then_some(())
        })
        .await;
        // Killed once the cursor is on disk: the entries of a batch still under way at a
        // crash are pushed again, by design (at least once).
        eventually("bob's webhook cursor recorded", || async {
            (sqlite_webhook_cursor(&db) == Some(3)).then_some(())
        })
        .await;
        first.kill();

        let second = Server::start_with(&dir, &templates, &store, "second", &agents_arg);
        let alice = Client::new(&second.url, "alice", Some("alice-secret")).expect("client");
        alice
            .start(&request("after", "bob", None))
            .await
            .expect("start after the restart");
        // Pushes go in inbox order, so anything pushed again would arrive before this.
        eventually("the push after the restart", || async {
            pushed_ids(&pushed)
                .contains(&"after.request".to_owned())
                .then_some(())
        })
        .await;
        assert_eq!(
            pushed_ids(&pushed),
            [
                "before-0.request",
                "before-1.request",
                "before-2.request",
                "after.request"
            ],
            "each message pushed once, in order, across the restart"
        );
        drop(second);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("within the test timeout");
}

/// A fake remote A2A agent on 127.0.0.1 (JSON-RPC at `/`): `message/send` starts task
/// `t-1`, which works until `finished` is set and then completes with a translation.
/// Records every method called. Returns its URL.
async fn a2a_agent(finished: Arc<AtomicBool>, calls: Arc<Mutex<Vec<String>>>) -> String {
    let app = axum::Router::new().route(
        "/",
        axum::routing::post(
            move |axum::Json(call): axum::Json<serde_json::Value>| async move {
                let method = call["method"].as_str().unwrap_or_default().to_owned();
                calls.lock().expect("lock").push(method.clone());
                let state = if method == "tasks/get" && finished.load(Ordering::SeqCst) {
                    "completed"
                } else {
                    "working"
                };
                axum::Json(json!({"jsonrpc": "2.0", "id": call["id"], "result": {
                    "kind": "task", "id": "t-1", "contextId": "ctx",
                    "status": {"state": state},
                    "artifacts": [{"artifactId": "a", "parts": [
                        {"kind": "data", "data": {"translated": "hallo"}}
                    ]}]
                }}))
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// A task a remote A2A agent still runs when the engine is killed is followed again after a
/// restart on the same SQLite file: the bridge recorded it in the store, the restarted
/// engine asks about it, and its result completes the conversation. The request is not sent
/// to the agent a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_goes_on_following_a_running_a2a_task() {
    timeout(TEST_TIMEOUT, async {
        let finished = Arc::new(AtomicBool::new(false));
        let calls: Arc<Mutex<Vec<String>>> = Arc::default();
        let translator = a2a_agent(finished.clone(), calls.clone()).await;
        let dir = scratch_dir("a2a-restart");
        let templates = templates(&dir);
        let agents = dir.join("agents.yaml");
        std::fs::write(
            &agents,
            format!(
                "agents:\n  - {{id: alice, token: alice-secret}}\n  \
                 - {{id: translator, a2a: \"{translator}\"}}\n"
            ),
        )
        .expect("agents file");
        let agents_arg = ["--agents", agents.to_str().expect("a UTF-8 path")];
        let db = dir.join("data/colloquy.db");
        let store = format!("sqlite:{}", db.display());

        let first = Server::start_with(&dir, &templates, &store, "first", &agents_arg);
        let alice = Client::new(&first.url, "alice", Some("alice-secret")).expect("client");
        alice
            .start(&request("trip", "translator", None))
            .await
            .expect("start");
        // The agree is sent after the task is recorded.
        eventually("translator's agree", || async {
            let view = alice.conversation("trip").await.ok()?;
            view.messages
                .iter()
                .any(|m| m.performative.name() == "agree")
                .then_some(())
        })
        .await;
        // Delivery is at least once: killed between the agree and the bridge's record of how
        // far it got, the restarted engine would send the request again. Kill after it.
        eventually("the bridge's cursor past the request", || async {
            sqlite_push_cursor(&db, "translator")
                .filter(|through| *through >= 1)
                .map(|_| ())
        })
        .await;
        first.kill();
        finished.store(true, Ordering::SeqCst);

        let second = Server::start_with(&dir, &templates, &store, "second", &agents_arg);
        let alice = Client::new(&second.url, "alice", Some("alice-secret")).expect("client");
        let view = eventually(
            "the conversation completed by the task's result",
            || async {
                let view = alice.conversation("trip").await.ok()?;
                (view.status == ConversationStatus::Completed).then_some(view)
            },
        )
        .await;
        let performatives: Vec<&str> = view
            .messages
            .iter()
            .map(|m| m.performative.name())
            .collect();
        assert_eq!(performatives, ["request", "agree", "inform"], "{view:?}");
        assert_eq!(
            view.messages[2].content.value(),
            json!({"translated": "hallo"}),
            "{view:?}"
        );
        let calls = calls.lock().expect("lock").clone();
        assert_eq!(
            calls.iter().filter(|m| *m == "message/send").count(),
            1,
            "the request is sent once: {calls:?}"
        );
        drop(second);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("within the test timeout");
}

/// A remote A2A agent on a cluster of partition owners on Postgres: one node leads delivery
/// to the agent, whichever nodes own its conversations, and each of its answers is recorded
/// by the conversation's owner (the leader sends it there, acting as the agent), so fencing
/// refuses none. Sixteen conversations started through both nodes each get the agent's
/// `agree` and, once its task completes, its `inform`; each request went out once; and
/// alice's A2A calls about the tasks are answered by their owner through either node.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn owners_record_a_remote_a2a_agents_answers() {
    let Some(postgres) = test_postgres("owners_record_a_remote_a2a_agents_answers") else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let finished = Arc::new(AtomicBool::new(true));
        let calls: Arc<Mutex<Vec<String>>> = Arc::default();
        let translator = a2a_agent(finished, calls.clone()).await;
        let url = colloquy_store::raw::fresh_postgres_database(&postgres).await;
        let dir = scratch_dir("owners-a2a");
        let templates = templates(&dir);
        let agents = dir.join("agents.yaml");
        std::fs::write(
            &agents,
            format!(
                "agents:\n  - {{id: alice, token: alice-secret}}\n  \
                 - {{id: translator, a2a: \"{translator}\"}}\n"
            ),
        )
        .expect("agents file");
        let mut extra = ownership_args(&dir);
        extra.extend(["--agents".to_owned(), agents.display().to_string()]);
        let node_a = Server::start_with(&dir, &templates, &url, "a2a-owner-a", &extra);
        let node_b = Server::start_with(&dir, &templates, &url, "a2a-owner-b", &extra);
        let alice_a = Client::new(&node_a.url, "alice", Some("alice-secret")).expect("client");
        let alice_b = Client::new(&node_b.url, "alice", Some("alice-secret")).expect("client");

        let ids: Vec<String> = (0..16).map(|n| format!("a2a-owned-{n}")).collect();
        for (n, id) in ids.iter().enumerate() {
            let starter = if n % 2 == 0 { &alice_a } else { &alice_b };
            starter
                .start(&request(id, "translator", None))
                .await
                .expect("start");
        }
        let http = reqwest::Client::new();
        let mut owners = BTreeSet::new();
        for id in &ids {
            let view = eventually("the translator's answers", || async {
                let view = alice_b.conversation(id).await.ok()?;
                (view.status == ConversationStatus::Completed).then_some(view)
            })
            .await;
            let performatives: Vec<&str> = view
                .messages
                .iter()
                .map(|m| m.performative.name())
                .collect();
            assert_eq!(
                performatives,
                ["request", "agree", "inform"],
                "{id}: {view:?}"
            );
            let mut served = BTreeSet::new();
            for node in [&node_a, &node_b] {
                let answer = http
                    .post(format!("{}/a2a/translator", node.url))
                    .bearer_auth("alice-secret")
                    .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get",
                                  "params": {"id": id}}))
                    .send()
                    .await
                    .expect("tasks/get");
                let node = (answer.headers().get("x-colloquy-node"))
                    .and_then(|node| node.to_str().ok())
                    .unwrap_or_default()
                    .to_owned();
                let body: serde_json::Value = answer.json().await.expect("JSON-RPC");
                assert_eq!(body["result"]["id"], id.as_str(), "{body}");
                assert_eq!(body["result"]["status"]["state"], "completed", "{body}");
                served.insert(node);
            }
            assert_eq!(
                served.len(),
                1,
                "{id}: one owner answers through both nodes"
            );
            owners.extend(served);
        }
        assert_eq!(owners.len(), 2, "both nodes own some of them: {owners:?}");
        let calls = calls.lock().expect("lock").clone();
        assert_eq!(
            calls.iter().filter(|m| *m == "message/send").count(),
            ids.len(),
            "each request went out once: {calls:?}"
        );
        drop((node_a, node_b));
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("within the test timeout");
}

/// `colloquy serve` logs at `info`, and every line a conversation's work writes names the
/// conversation: a template's own `log` action, a condition that fails, a message refused
/// by a rule. A real process, with its one global subscriber: a subscriber scoped to a test
/// thread would share tracing's callsite cache with every other test of the binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_line_of_a_conversations_work_names_it() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("log-lines");
        let templates = templates(&dir);
        let logged = std::fs::read_to_string(templates.join("fipa-request.yaml"))
            .expect("template")
            .replace("name: fipa-request", "name: logged-request")
            .replace(
                "  commitments:",
                "  actions:
    on_message:
      - name: note-every-message
        then:
          - log: { level: info, message: a message passed }
      - name: a-broken-condition
        when: \"content.no.such.field > 1\"
        then:
          - log: { level: warn, message: never }
      - name: no-cancel
        performatives: [cancel]
        then:
          - reject: { reason: cancelling is off }
  commitments:",
            );
        assert!(logged.contains("note-every-message"), "the variant applies");
        std::fs::write(templates.join("logged-request.yaml"), logged).expect("write template");
        let server =
            Server::start_logging(&dir, &templates, "memory", "logged", &[] as &[&str], "info");
        let log = dir.join("logged.log");
        let read_log = || std::fs::read_to_string(&log).expect("read the log");
        // The last start-up line comes after the address: the conversation's lines follow it.
        eventually("the start-up lines", || async {
            read_log().contains("open development mode").then_some(())
        })
        .await;
        let before = read_log().len();
        let (alice, bob) = (server.client("alice"), server.client("bob"));
        let view = alice
            .start(&StartConversation {
                template: "logged-request".into(),
                participants: vec!["bob".into()],
                message: Some(SendMessage::new("request", json!({"action": "book"}))),
                ..StartConversation::default()
            })
            .await
            .expect("started");
        let id = view.id.to_string();
        alice
            .send(&id, &SendMessage::new("cancel", json!({})))
            .await
            .expect_err("a rule refuses cancel");
        for performative in ["agree", "inform"] {
            bob.send(&id, &SendMessage::new(performative, json!({})))
                .await
                .expect("answered");
        }
        // Written before each answer left the server. The policy manager's own lines (its
        // watcher may report the directory it was started on) are no conversation's work.
        let text = read_log();
        let lines: Vec<&str> = text[before..]
            .lines()
            .filter(|line| !line.contains(" colloquy_policy::"))
            .collect();
        assert!(
            lines
                .iter()
                .filter(|line| line.contains("a message passed"))
                .count()
                >= 3,
            "the template's log action ran for each message: {lines:#?}"
        );
        assert!(
            lines.iter().any(|line| line.contains("WARN")),
            "the broken condition warned: {lines:#?}"
        );
        for line in &lines {
            assert!(
                line.contains(&id),
                "a line without the conversation id: {line}"
            );
        }
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("within the test timeout");
}

/// Every conversation id an administrator's `GET /v1/conversations` lists on the server at
/// `url`, following `next_cursor` through pages of `limit`.
async fn admin_listing(url: &str, query: &str, limit: usize) -> Vec<String> {
    let http = reqwest::Client::new();
    let mut ids = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut request = http
            .get(format!("{url}/v1/conversations?limit={limit}{query}"))
            .bearer_auth("admin-secret");
        if let Some(cursor) = &cursor {
            request = request.query(&[("cursor", cursor)]);
        }
        let page: serde_json::Value = request
            .send()
            .await
            .expect("list as admin")
            .json()
            .await
            .expect("a page");
        let listed = page["conversations"].as_array().expect("conversations");
        ids.extend(
            listed
                .iter()
                .map(|c| c["id"].as_str().expect("id").to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return ids,
        }
    }
}

/// An agents file in `dir` with the administrator (`admin-secret`), alice and bob, bob
/// with `bob_webhook` if given; the `--agents` arguments naming it.
fn agents_file(dir: &Path, bob_webhook: Option<&str>) -> [String; 2] {
    let agents = dir.join("agents.yaml");
    let webhook = bob_webhook.map_or(String::new(), |url| format!(", webhook: \"{url}\""));
    std::fs::write(
        &agents,
        format!(
            "admin_token: admin-secret\nagents:\n  - {{id: alice, token: alice-secret}}\n  \
             - {{id: bob, token: bob-secret{webhook}}}\n"
        ),
    )
    .expect("agents file");
    ["--agents".to_owned(), agents.display().to_string()]
}

/// An administrator lists every stored conversation: on a server restarted on its SQLite
/// file, which has loaded none of them yet, and on a Redis node other than the one that ran
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_administrator_lists_conversations_this_node_has_not_loaded() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("admin-listing");
        let templates = templates(&dir);
        let agents = agents_file(&dir, None);
        let agents_arg = [agents[0].as_str(), agents[1].as_str()];
        let ids: Vec<String> = (0..7).map(|n| format!("listed-{n}")).collect();
        let start_all = |url: String| {
            let ids = ids.clone();
            async move {
                let alice = Client::new(&url, "alice", Some("alice-secret")).expect("client");
                for id in &ids {
                    alice.start(&request(id, "bob", None)).await.expect("start");
                }
            }
        };

        let store = format!("sqlite:{}", dir.join("data/colloquy.db").display());
        let first = Server::start_with(&dir, &templates, &store, "first", &agents_arg);
        start_all(first.url.clone()).await;
        first.kill();
        let second = Server::start_with(&dir, &templates, &store, "second", &agents_arg);
        assert_eq!(
            admin_listing(&second.url, "", 3).await,
            ids,
            "after a restart"
        );
        assert_eq!(
            admin_listing(&second.url, "&state=active&template=fipa-request", 2).await,
            ids,
            "filtered"
        );
        assert!(
            admin_listing(&second.url, "&state=completed", 3)
                .await
                .is_empty()
        );
        drop(second);

        if let Some(redis) =
            test_redis("an_administrator_lists_conversations_this_node_has_not_loaded")
        {
            let url = emptied_database(&redis, 5).await;
            let node_a = Server::start_with(&dir, &templates, &url, "node-a", &agents_arg);
            let node_b = Server::start_with(&dir, &templates, &url, "node-b", &agents_arg);
            start_all(node_a.url.clone()).await;
            assert_eq!(
                admin_listing(&node_b.url, "", 3).await,
                ids,
                "on another node"
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("within the test timeout");
}

/// One administrator per server: the agents file's `admin_token` also uploads templates,
/// `--admin-token` alone also reads everything, and two different tokens stop the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_token_of_the_agents_file_or_the_flag_is_one_administrator() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("admin-token");
        let templates = templates(&dir);
        let agents = dir.join("agents.yaml");
        std::fs::write(
            &agents,
            "admin_token: admin-secret\nagents:\n  - {id: alice, token: alice-secret}\n",
        )
        .expect("agents file");
        let agents_arg = agents.to_str().expect("utf-8 path");
        let upload = std::fs::read_to_string(templates.join("fipa-request.yaml"))
            .expect("template")
            .replace("name: fipa-request", "name: fipa-request-copy");
        let http = reqwest::Client::new();
        let put = |url: &str, token: &str| {
            http.put(format!("{url}/v1/templates/fipa-request-copy"))
                .bearer_auth(token)
                .body(upload.clone())
                .send()
        };

        let server = Server::start_with(
            &dir,
            &templates,
            "memory",
            "file",
            &["--agents", agents_arg],
        );
        let agent = put(&server.url, "alice-secret")
            .await
            .expect("put as alice");
        assert_eq!(
            agent.status(),
            403,
            "an agent's token changes no template: known, not allowed"
        );
        let admin = put(&server.url, "admin-secret")
            .await
            .expect("put as admin");
        assert_eq!(
            admin.status(),
            201,
            "{}",
            admin.text().await.unwrap_or_default()
        );
        drop(server);

        let plain = dir.join("plain.yaml");
        std::fs::write(&plain, "agents:\n  - {id: alice, token: alice-secret}\n")
            .expect("agents file");
        let plain_arg = plain.to_str().expect("utf-8 path");
        let server = Server::start_with(
            &dir,
            &templates,
            "memory",
            "flag",
            &["--agents", plain_arg, "--admin-token", "flag-secret"],
        );
        let listed = http
            .get(format!("{}/v1/conversations", server.url))
            .bearer_auth("flag-secret")
            .send()
            .await
            .expect("list as admin");
        assert_eq!(listed.status(), 200, "the flag's token reads as the admin");
        drop(server);

        let refused = Command::new(env!("CARGO_BIN_EXE_colloquy"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store", "memory"])
            .arg("--templates")
            .arg(&templates)
            .args(["--agents", agents_arg, "--admin-token", "another-secret"])
            .env_remove("COLLOQUY_ADMIN_TOKEN")
            .stdin(Stdio::null())
            .output()
            .expect("run colloquy serve");
        assert!(
            !refused.status.success(),
            "two admin tokens must stop the start"
        );
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("admin_token differ"), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// A JWT of the test's identity provider, signed with `key` under `kid`.
fn signed_jwt(
    key: &ring::signature::Ed25519KeyPair,
    kid: &str,
    claims: &serde_json::Value,
) -> String {
    use base64::Engine as _;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let header = json!({"alg": "EdDSA", "kid": kid, "typ": "JWT"});
    let input = format!(
        "{}.{}",
        b64(header.to_string().as_bytes()),
        b64(claims.to_string().as_bytes())
    );
    format!("{input}.{}", b64(key.sign(input.as_bytes()).as_ref()))
}

/// `colloquy serve --auth-jwks FILE --auth-issuer … --auth-audience … --auth-admin-claim …`
/// without an agents file: JWTs name agents and the administrator (who writes templates), a
/// bad one is 401 naming its check and counted, a key added to the file is read without a
/// restart, and a JWKS that cannot be read stops the start.
#[tokio::test]
async fn a_real_server_signs_agents_in_with_jwts() {
    use ring::signature::{Ed25519KeyPair, KeyPair as _};
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("jwt");
        let templates = templates(&dir);
        let key = |_: ()| {
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&ring::rand::SystemRandom::new())
                .expect("a key");
            Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("the key")
        };
        let (first, second) = (key(()), key(()));
        let jwk = |kid: &str, key: &Ed25519KeyPair| {
            use base64::Engine as _;
            json!({"kty": "OKP", "crv": "Ed25519", "kid": kid,
                   "x": base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.public_key().as_ref())})
        };
        let jwks = dir.join("jwks.json");
        std::fs::write(&jwks, json!({"keys": [jwk("k1", &first)]}).to_string()).expect("jwks");
        let jwks_arg = jwks.to_str().expect("utf-8 path");
        let server = Server::start_with(
            &dir,
            &templates,
            "memory",
            "jwt",
            &[
                "--auth-jwks",
                jwks_arg,
                "--auth-issuer",
                "https://idp.test",
                "--auth-audience",
                "colloquy",
                "--auth-admin-claim",
                "groups=colloquy-admins",
            ],
        );
        let now = now_ms() / 1000;
        let claims = |sub: &str, exp: u64| {
            json!({"iss": "https://idp.test", "aud": "colloquy", "sub": sub, "exp": exp})
        };
        let alice = signed_jwt(&first, "k1", &claims("alice", now + 300));
        let mut admin_claims = claims("ops", now + 300);
        admin_claims["groups"] = json!(["staff", "colloquy-admins"]);
        let admin = signed_jwt(&first, "k1", &admin_claims);
        let http = reqwest::Client::new();
        let list = |token: Option<String>| {
            let request = http.get(format!("{}/v1/conversations", server.url));
            match token {
                Some(token) => request.bearer_auth(token),
                None => request,
            }
            .send()
        };
        assert_eq!(list(None).await.expect("sent").status(), 401);
        assert_eq!(list(Some(alice.clone())).await.expect("sent").status(), 200);
        let expired = list(Some(signed_jwt(&first, "k1", &claims("alice", now - 3600))))
            .await
            .expect("sent");
        assert_eq!(expired.status(), 401);
        let body: serde_json::Value = expired.json().await.expect("a JSON body");
        let message = body["error"]["message"].as_str().expect("a message");
        assert!(message.contains("`expired` check"), "{message}");
        let metrics = http
            .get(format!("{}/metrics", server.url))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text");
        assert!(
            metrics.contains("colloquy_auth_failures_total{check=\"expired\"} 1"),
            "{metrics}"
        );
        let upload = std::fs::read_to_string(templates.join("fipa-request.yaml"))
            .expect("template")
            .replace("name: fipa-request", "name: fipa-request-copy");
        let put = |token: &str| {
            http.put(format!("{}/v1/templates/fipa-request-copy", server.url))
                .bearer_auth(token)
                .body(upload.clone())
                .send()
        };
        assert_eq!(put(&alice).await.expect("sent").status(), 403, "an agent");
        let written = put(&admin).await.expect("sent");
        assert_eq!(written.status(), 201, "{}", written.text().await.unwrap_or_default());
        // A key added to the file is read when a token names it.
        std::fs::write(
            &jwks,
            json!({"keys": [jwk("k1", &first), jwk("k2", &second)]}).to_string(),
        )
        .expect("jwks");
        let rotated = signed_jwt(&second, "k2", &claims("bob", now + 300));
        assert_eq!(list(Some(rotated)).await.expect("sent").status(), 200);
        drop(server);

        let refused = Command::new(env!("CARGO_BIN_EXE_colloquy"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store", "memory"])
            .arg("--templates")
            .arg(&templates)
            .args(["--auth-jwks", "/nonexistent/jwks.json"])
            .args(["--auth-issuer", "https://idp.test", "--auth-audience", "colloquy"])
            .stdin(Stdio::null())
            .output()
            .expect("run colloquy serve");
        assert!(!refused.status.success(), "an unreadable JWKS stops the start");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("cannot read the JWKS"), "{stderr}");
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// An engine node over its own connection to `prefix` in `url`'s Redis, with the built-in
/// templates; it does not follow the other nodes' commits, so what it has cached stays as it
/// was until it reloads.
async fn library_node(url: &str, prefix: &str, templates: &Path) -> colloquy_core::Engine {
    library_node_with(
        url,
        prefix,
        templates,
        colloquy_core::EngineConfig::default(),
    )
    .await
}

/// [`library_node`] with its own engine configuration.
async fn library_node_with(
    url: &str,
    prefix: &str,
    templates: &Path,
    config: colloquy_core::EngineConfig,
) -> colloquy_core::Engine {
    let compiled = colloquy_policy::TemplateCompiler::new()
        .compile_dir(templates)
        .expect("built-in templates compile");
    let store = RedisStore::connect_with_prefix(url, prefix)
        .await
        .expect("connect");
    colloquy_core::Engine::new(
        Arc::new(colloquy_policy::Catalog::new(
            compiled.into_iter().map(Arc::new),
        )),
        Arc::new(store),
        Arc::new(colloquy_core::SystemClock),
        config,
    )
}

/// Of two nodes on one Redis that both run the inbox sweep, only the holder of the sweep's
/// lead drops expired entries, so each is dropped and counted once; when the holder stops,
/// the other takes the lead once the lease has run out and sweeps in its place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_nodes_one_sweeps_inboxes_and_the_other_takes_over() {
    let Some(url) = test_redis("of_two_nodes_one_sweeps_inboxes_and_the_other_takes_over") else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("inbox-sweep");
        let templates = templates(&dir);
        let prefix = format!("colloquy-test-sweep-{}", uuid::Uuid::now_v7());
        // Everything delivered is expired by the next sweep.
        let config = colloquy_core::EngineConfig {
            inbox_ttl_ms: 1,
            ..colloquy_core::EngineConfig::default()
        };
        let node_a = Arc::new(library_node_with(&url, &prefix, &templates, config.clone()).await);
        let node_b = Arc::new(library_node_with(&url, &prefix, &templates, config).await);
        let store = RedisStore::connect_with_prefix(&url, &prefix)
            .await
            .expect("connect");
        for n in 0..5 {
            node_a
                .start("alice", request(&format!("sweep-{n}"), "bob", None))
                .await
                .expect("start");
        }
        assert_eq!(store.inbox("bob", 0, 10).await.expect("inbox").len(), 5);

        // A sweep every 200 ms; the lead is leased for three of them.
        let period = Duration::from_millis(200);
        let sweep_a = node_a.spawn_inbox_expiry(period);
        let sweep_b = node_b.spawn_inbox_expiry(period);
        eventually("the first five entries to be swept", || async {
            store
                .inbox("bob", 0, 10)
                .await
                .ok()?
                .is_empty()
                .then_some(())
        })
        .await;
        // A sweep acknowledges, then counts: wait for the count (a node counts a sweep's
        // drops at once, so two sweeping nodes would show a split or a double count).
        let swept = eventually("the sweep to count what it dropped", || async {
            let counts = (
                node_a.inbox_entries_expired(),
                node_b.inbox_entries_expired(),
            );
            (counts.0 + counts.1 >= 5).then_some(counts)
        })
        .await;
        assert!(
            swept == (5, 0) || swept == (0, 5),
            "one node swept everything, not both a part: {swept:?}"
        );
        let (holder, holder_sweep, other, other_sweep) = if swept.0 == 5 {
            (&node_a, sweep_a, &node_b, sweep_b)
        } else {
            (&node_b, sweep_b, &node_a, sweep_a)
        };

        // The holder stops sweeping (as if it died): the other leads once the lease is out.
        holder_sweep.abort();
        for n in 5..8 {
            other
                .start("alice", request(&format!("sweep-{n}"), "bob", None))
                .await
                .expect("start");
        }
        eventually("the other node to sweep the next three", || async {
            (other.inbox_entries_expired() == 3).then_some(())
        })
        .await;
        assert!(store.inbox("bob", 0, 10).await.expect("inbox").is_empty());
        assert_eq!(
            holder.inbox_entries_expired(),
            5,
            "the stopped node swept no more"
        );
        assert_eq!(store.inbox_head("bob").await.expect("head"), 8);
        other_sweep.abort();
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// A refusal decided on a cached copy that another node's commit has left behind would be
/// wrong: before refusing, a node on a shared store checks that its copy is current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_another_does_not_refuse_what_the_store_allows() {
    let Some(url) = test_redis("a_node_behind_another_does_not_refuse_what_the_store_allows")
    else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("stale-copy");
        let templates = templates(&dir);
        let prefix = format!("colloquy-test-stale-{}", uuid::Uuid::now_v7());
        let node_a = library_node(&url, &prefix, &templates).await;
        let node_b = library_node(&url, &prefix, &templates).await;

        node_a
            .start("alice", request("behind", "bob", None))
            .await
            .expect("start on A");
        // B caches the conversation as it is now: requested.
        let seen = node_b.view("behind", None).await.expect("view on B");
        assert_eq!(seen.messages.len(), 1);
        node_a
            .send(
                "behind",
                "bob",
                SendMessage::new("agree", json!({})).with_id("behind.agree"),
            )
            .await
            .expect("agree on A");

        // A real refusal stays one: A's copy is current, and no such message exists.
        let error = node_a
            .send(
                "behind",
                "bob",
                SendMessage::new("inform", json!({})).in_reply_to("behind.nowhere"),
            )
            .await
            .expect_err("unknown in_reply_to");
        assert_eq!(error.code(), "invalid");
        // B has not heard of the agree; it answers from the store's state, not its copy's.
        let receipt = node_b
            .send(
                "behind",
                "bob",
                SendMessage::new("inform", json!({"done": true})).in_reply_to("behind.agree"),
            )
            .await
            .expect("inform on B, in reply to the agree B had not seen");
        assert_eq!(receipt.status, ConversationStatus::Completed);
        let view = node_a.view("behind", None).await.expect("view on A");
        let ids: Vec<&str> = view.messages.iter().map(|m| &*m.id).collect();
        assert_eq!(ids[..2], ["behind.request", "behind.agree"]);
        assert_eq!(
            view.messages[2].in_reply_to.as_deref(),
            Some("behind.agree")
        );
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

async fn wait_for_redis(url: &str) {
    eventually("redis accepts connections", || async {
        colloquy_store::raw::redis_answers(url).await.then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_restart_under_load_answers_503_and_loses_nothing_acknowledged() {
    if test_redis("a_redis_restart_under_load_answers_503_and_loses_nothing_acknowledged").is_none()
    {
        return;
    }
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("redis-restart");
        let templates = templates(&dir);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("free port")
            .port();
        let redis_dir = dir.join("redis");
        std::fs::create_dir_all(&redis_dir).expect("redis dir");
        let mut redis = RedisServer::start(&redis_dir, port);
        wait_for_redis(&redis.url()).await;
        let server = Server::start(&dir, &templates, &redis.url(), "node");

        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(AtomicUsize::new(0));
        let unavailable = Arc::new(AtomicUsize::new(0));
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(20))
            .build()
            .expect("http client");
        let mut clients = Vec::new();
        for worker in 0..4 {
            let (http, url, stop) = (http.clone(), server.url.clone(), stop.clone());
            let (acknowledged, unavailable) = (acknowledged.clone(), unavailable.clone());
            clients.push(tokio::spawn(async move {
                let mut ids = Vec::new();
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let id = format!("r{worker}-{n}");
                    let response = http
                        .post(format!("{url}/v1/conversations"))
                        .header("X-Agent-Id", "alice")
                        .json(&request(&id, "bob", None))
                        .send()
                        .await
                        .expect("the engine itself stays up");
                    let status = response.status().as_u16();
                    match status {
                        200 | 201 => {
                            ids.push(id);
                            acknowledged.fetch_add(1, Ordering::Relaxed);
                        }
                        503 => {
                            assert!(
                                response.headers().contains_key("retry-after"),
                                "503 without Retry-After"
                            );
                            unavailable.fetch_add(1, Ordering::Relaxed);
                            sleep(Duration::from_millis(20)).await;
                        }
                        other => {
                            let body = response.text().await.unwrap_or_default();
                            panic!("unexpected status {other} during the outage: {body}")
                        }
                    }
                }
                ids
            }));
        }
        eventually("load is running", || {
            let done = acknowledged.load(Ordering::Relaxed);
            async move { (done >= 50).then_some(()) }
        })
        .await;
        redis.kill();
        eventually("requests are refused with 503 during the outage", || {
            let refused = unavailable.load(Ordering::Relaxed);
            async move { (refused > 0).then_some(()) }
        })
        .await;
        redis.restart();
        let before = acknowledged.load(Ordering::Relaxed);
        eventually("the engine recovers by itself", || {
            let done = acknowledged.load(Ordering::Relaxed);
            async move { (done >= before + 50).then_some(()) }
        })
        .await;
        stop.store(true, Ordering::Relaxed);
        let mut ids = Vec::new();
        for client in clients {
            ids.extend(client.await.expect("client task"));
        }

        let alice = server.client("alice");
        for id in &ids {
            alice
                .conversation(id)
                .await
                .unwrap_or_else(|error| panic!("acknowledged {id} lost: {error}"));
        }
        let mut inbox = BTreeSet::new();
        let bob = server.client("bob");
        let mut after = 0;
        loop {
            let page = bob.poll_inbox(after, 0).await.expect("poll");
            if page.items.is_empty() {
                break;
            }
            after = page.next_after;
            inbox.extend(
                page.items
                    .into_iter()
                    .map(|item| item.message.id.to_string()),
            );
        }
        for id in &ids {
            assert!(inbox.contains(&format!("{id}.request")), "inbox lost {id}");
        }
        drop(server);
        drop(redis);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

// --- hostile hooks (issue 32) ------------------------------------------------------------

/// Hooks of the `spinner` template run this long at most (its `timeout_ms`, raised to the
/// server's `--max-hook-timeout-ms`).
const SPIN_BUDGET_MS: u64 = 2_000;
/// How many spinning hooks run at once: more than the cores of the machines we run on.
const SPINNERS: usize = 4;

/// A template directory with the built-in templates, `spinner`, a request protocol whose hook
/// loops for ever at `on_start`, and `late-spinner`, whose hook loops for ever at
/// `on_timeout` (its requests' reply-by is 300 ms).
fn spinner_templates(dir: &Path, budget_ms: u64) -> PathBuf {
    let templates = templates(dir);
    let module = wat::parse_str(
        r#"(module
  (memory (export "memory") 1)
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
  (func $spin (param i32 i32) (result i32) (loop $forever (br $forever)) (i32.const 0))
  (export "start" (func $spin))
  (export "timeout" (func $spin)))"#,
    )
    .expect("WAT");
    std::fs::write(templates.join("spin.wasm"), module).expect("write module");
    let request = std::fs::read_to_string(templates.join("fipa-request.yaml")).expect("read");
    for (name, event) in [("spinner", "on_start"), ("late-spinner", "on_timeout")] {
        let spinner = request
            .replace("name: fipa-request", &format!("name: {name}"))
            .replace(
                "reply_by: { default_ms: 60000 }",
                "reply_by: { default_ms: 300 }",
            )
            .replace(
                "spec:\n",
                &format!(
                    "spec:\n  hooks:\n    module: spin.wasm\n    events: [{event}]\n    \
                     limits: {{ timeout_ms: {budget_ms} }}\n"
                ),
            );
        assert!(spinner.contains(&format!("name: {name}")) && spinner.contains("spin.wasm"));
        std::fs::write(templates.join(format!("{name}.yaml")), spinner).expect("write template");
    }
    templates
}

/// A start of a `spinner` conversation: its `on_start` hook loops.
fn spinner_start(id: &str) -> StartConversation {
    StartConversation {
        template: "spinner".to_owned(),
        participants: vec!["bob".to_owned()],
        conversation_id: Some(id.to_owned()),
        ..StartConversation::default()
    }
}

/// A `colloquy serve` over [`spinner_templates`] with hook budgets of `budget_ms`, `extra`
/// arguments, and its data in `dir`; returned once it serves (it prints its address before
/// its templates load).
async fn spinner_server(dir: &Path, name: &str, budget_ms: u64, extra: &[&str]) -> Server {
    let templates = spinner_templates(dir, budget_ms);
    let (budget, data) = (
        budget_ms.to_string(),
        dir.join("data").display().to_string(),
    );
    let mut args = vec!["--max-hook-timeout-ms", &budget, "--data-dir", &data];
    args.extend_from_slice(extra);
    let server = Server::start_with(dir, &templates, "memory", name, &args);
    server
        .client("carol")
        .start(&request("ready", "dave", None))
        .await
        .expect("the server serves");
    server
}

/// The `p`-quantile of `durations` (sorted here).
fn quantile(durations: &mut [Duration], p: f64) -> Duration {
    durations.sort();
    let index = ((durations.len() as f64 - 1.0) * p).round() as usize;
    durations[index]
}

/// Hooks that run to their budget, more of them at once than there are cores, hold up no
/// one else: another client's request conversations (no hooks) are answered at their usual
/// pace meanwhile, the hooks' callers get their failure soon after the budget, and SIGTERM
/// still stops the server while such hooks run. Before the hook pool, three such calls on a
/// two-core machine stopped every other request for 30 s and more, and only `kill -9` ended
/// the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hooks_running_to_their_budget_hold_up_no_other_conversation() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("spinners");
        let server = spinner_server(&dir, "spinners", SPIN_BUDGET_MS, &[]).await;
        let spin = |index: usize| {
            let client = server.client("alice");
            async move {
                let started = std::time::Instant::now();
                let result = client.start(&spinner_start(&format!("spin-{index}"))).await;
                (result, started.elapsed())
            }
        };
        let spinning: Vec<_> = (0..SPINNERS).map(|i| tokio::spawn(spin(i))).collect();
        // Let the hooks start spinning, then time another client's plain conversations.
        sleep(Duration::from_millis(200)).await;
        let other = server.client("carol");
        let mut latencies = Vec::new();
        for index in 0..40 {
            let started = std::time::Instant::now();
            other
                .start(&request(&format!("plain-{index}"), "dave", None))
                .await
                .expect("a plain conversation starts");
            latencies.push(started.elapsed());
        }
        for handle in spinning {
            let (result, took) = handle.await.expect("joined");
            let error = result.expect_err("a spinning hook fails the start");
            let text = error.to_string();
            assert!(
                text.contains("HTTP 422") && text.contains("hook_failed"),
                "{text}"
            );
            // The budget, the wall margin (1 s), and room for a loaded machine: far
            // below the minute these calls went unanswered before.
            assert!(
                took < Duration::from_millis(SPIN_BUDGET_MS * 3),
                "a spinning hook's caller waited {took:?}"
            );
        }
        let slowest = *latencies.iter().max().expect("timed");
        let p99 = quantile(&mut latencies, 0.99);
        eprintln!("plain starts beside {SPINNERS} spinning hooks: p99 {p99:?}, max {slowest:?}");
        // A request that waited behind a hook would take most of its 2 s budget.
        assert!(
            slowest < Duration::from_millis(SPIN_BUDGET_MS / 2),
            "a plain start took {slowest:?} beside spinning hooks"
        );

        // Deadlines: `on_timeout` hooks spinning to their budget (their conversations' reply-by
        // passes first) do not hold up another conversation's deadline.
        let alice = server.client("alice");
        for index in 0..SPINNERS {
            let id = format!("late-spin-{index}");
            alice
                .start(&StartConversation {
                    template: "late-spinner".to_owned(),
                    ..request(&id, "bob", None)
                })
                .await
                .expect("a late spinner starts (its hook runs only at timeouts)");
        }
        let due = now_ms() + 800;
        alice
            .start(&request("punctual", "bob", Some(due)))
            .await
            .expect("start");
        let deadline = std::time::Instant::now() + WAIT;
        while timed_out(&alice, "punctual").await.is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "punctual never timed out"
            );
            sleep(Duration::from_millis(25)).await;
        }
        let late = now_ms().saturating_sub(due);
        eprintln!("a deadline beside {SPINNERS} spinning on_timeout hooks fired {late} ms late");
        // Behind the spinners one after another it would be seconds late (their 2 s each).
        assert!(
            late < SPIN_BUDGET_MS * 3 / 4,
            "a deadline fired {late} ms late beside spinning on_timeout hooks"
        );

        // Each spinning `on_timeout` hook is stopped in turn: its conversation records the
        // hook's failure (a `hook_error` violation).
        for index in 0..SPINNERS {
            let id = format!("late-spin-{index}");
            eventually(&format!("{id}'s on_timeout hook is stopped"), || async {
                let view = alice.conversation(&id).await.ok()?;
                view.violations
                    .iter()
                    .any(|violation| violation.kind == ViolationKind::HookError)
                    .then_some(())
            })
            .await;
        }

        // SIGTERM while hooks spin: the server still stops.
        let spinning: Vec<_> = (SPINNERS..2 * SPINNERS)
            .map(|i| tokio::spawn(spin(i)))
            .collect();
        sleep(Duration::from_millis(200)).await;
        let signalled = std::time::Instant::now();
        let status = tokio::task::spawn_blocking(move || server.terminate())
            .await
            .expect("joined");
        eprintln!(
            "SIGTERM with {SPINNERS} hooks spinning: exited after {:?}",
            signalled.elapsed()
        );
        assert!(
            status.success(),
            "colloquy serve ended with {status} on SIGTERM"
        );
        for handle in spinning {
            let _ = handle.await;
        }
    })
    .await
    .expect("test timed out");
}

/// A hook pool whose threads are all taken by hooks running to their budgets answers `503
/// hooks_busy` (retry later) once a step has waited its limit (2 s) for one, records
/// nothing, and still serves conversations without hooks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_hook_pool_answers_503_and_serves_other_templates() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("busy-pool");
        // Longer than the 2 s a step may wait, so the second spinner cannot get the thread.
        let budget_ms = 5_000;
        let server = spinner_server(&dir, "busy-pool", budget_ms, &["--hook-threads", "1"]).await;
        let first = tokio::spawn({
            let client = server.client("alice");
            let start = spinner_start("first");
            async move { client.start(&start).await }
        });
        sleep(Duration::from_millis(300)).await;
        let error = server
            .client("alice")
            .start(&spinner_start("second"))
            .await
            .expect_err("the pool's one thread is spinning");
        let text = error.to_string();
        assert!(
            text.contains("HTTP 503") && text.contains("hooks_busy"),
            "{text}"
        );
        server
            .client("carol")
            .start(&request("plain", "dave", None))
            .await
            .expect("a template without hooks does not wait on the pool");
        let first = first.await.expect("joined").expect_err("the first spins");
        assert!(first.to_string().contains("hook_failed"), "{first}");
        assert!(
            server.client("alice").conversation("second").await.is_err(),
            "the refused start recorded nothing"
        );
    })
    .await
    .expect("test timed out");
}

/// `colloquy --help`, and a subcommand's, print the usage on stdout and exit 0 (as every
/// binary of the workspace does; the others are checked in the end-to-end suite).
#[test]
fn colloquy_answers_help() {
    for args in [
        &["--help"][..],
        &["-h"],
        &["serve", "--help"],
        &["templates", "--help"],
    ] {
        let output = Command::new(env!("CARGO_BIN_EXE_colloquy"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run colloquy");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "colloquy {args:?}: {}",
            output.status
        );
        assert!(
            stdout.contains("Usage: colloquy"),
            "colloquy {args:?}: {stdout}"
        );
    }
}

/// With Redis down, each kind of request gets its 503 with `Retry-After` from one bounded
/// wait, not from the connection manager's whole reconnection backoff once per command
/// (issue 32: a start took 7 s, a message 15 s): a start, a message to a conversation this
/// node holds, and a read of it (whose messages are read from the store). The 10 s client
/// timeout is five times `COMMAND_DEADLINE`; before the bound a message took 15 s. Once
/// Redis is back the same requests go through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_down_each_request_gets_503_from_one_bounded_wait() {
    if test_redis("with_redis_down_each_request_gets_503_from_one_bounded_wait").is_none() {
        return;
    }
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("redis-down");
        let templates = templates(&dir);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("free port")
            .port();
        let redis_dir = dir.join("redis");
        std::fs::create_dir_all(&redis_dir).expect("redis dir");
        let mut redis = RedisServer::start(&redis_dir, port);
        wait_for_redis(&redis.url()).await;
        let server = Server::start(&dir, &templates, &redis.url(), "node");
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("http client");
        let url = server.url.clone();
        let start = |id: &str| {
            http.post(format!("{url}/v1/conversations"))
                .header("X-Agent-Id", "alice")
                .json(&request(id, "bob", None))
        };
        let agree = || {
            http.post(format!("{url}/v1/conversations/held/messages"))
                .header("X-Agent-Id", "bob")
                .json(&json!({"message_id": "held.agree", "performative": "agree"}))
        };
        let read = || {
            http.get(format!("{url}/v1/conversations/held"))
                .header("X-Agent-Id", "alice")
        };
        let status = |response: reqwest::Response| response.status().as_u16();
        assert_eq!(status(start("held").send().await.expect("start")), 201);
        assert_eq!(status(read().send().await.expect("read")), 200);

        redis.kill();
        for (what, request) in [
            ("a start", start("during")),
            ("a message", agree()),
            ("a read", read()),
        ] {
            let response = request
                .send()
                .await
                .unwrap_or_else(|error| panic!("{what} with Redis down: {error}"));
            assert_eq!(response.status().as_u16(), 503, "{what}");
            assert!(
                response.headers().contains_key("retry-after"),
                "{what}: 503 without Retry-After"
            );
        }

        redis.restart();
        wait_for_redis(&redis.url()).await;
        eventually("the message goes through once Redis is back", || async {
            (agree().send().await.ok().map(status) == Some(202)).then_some(())
        })
        .await;
        assert_eq!(status(read().send().await.expect("read")), 200);
        drop(server);
        drop(redis);
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("test timed out");
}

/// Listing over a durable store: an administrator's listing after a restart.
mod listing {
    use std::path::Path;

    use colloquy_policy::{Catalog, TemplateCompiler};
    use colloquy_protocol::message::{SendMessage, StartConversation};
    use serde_json::json;

    use std::sync::Arc;

    use colloquy_core::listing::ConversationFilter;
    use colloquy_core::{Engine, EngineConfig, SystemClock};
    use colloquy_store::SqliteStore;

    fn engine(store: SqliteStore) -> Engine {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/fipa-request.yaml");
        let template = TemplateCompiler::new()
            .compile_file(&path)
            .unwrap_or_else(|diagnostics| panic!("{diagnostics}"));
        Engine::new(
            Arc::new(Catalog::new([Arc::new(template)])),
            Arc::new(store),
            Arc::new(SystemClock),
            EngineConfig::default(),
        )
    }

    /// After a restart, an administrator's listing shows the stored conversations, a page at
    /// a time, without loading them into the engine.
    #[tokio::test]
    async fn an_administrators_listing_reads_the_store_and_caches_nothing() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("colloquy.db");
        let ids = ["c1", "c2", "c3"];
        {
            let first = engine(SqliteStore::open(&path).expect("open"));
            for id in ids {
                let request = StartConversation {
                    template: "fipa-request".to_owned(),
                    participants: vec!["bob".to_owned()],
                    conversation_id: Some(id.to_owned()),
                    message: Some(SendMessage::new("request", json!({"action": "x"}))),
                    ..StartConversation::default()
                };
                first.start("alice", request).await.expect("start");
            }
        }
        let restarted = engine(SqliteStore::open(&path).expect("reopen"));
        let filter = |after: Option<&str>| ConversationFilter {
            after: after.map(str::to_owned),
            limit: 2,
            ..ConversationFilter::default()
        };
        let (page, more) = restarted.list(None, &filter(None)).await;
        let listed: Vec<&str> = page.iter().map(|c| &*c.id).collect();
        assert_eq!((listed, more), (vec!["c1", "c2"], true));
        let (page, more) = restarted.list(None, &filter(Some("c2"))).await;
        let listed: Vec<&str> = page.iter().map(|c| &*c.id).collect();
        assert_eq!((listed, more), (vec!["c3"], false));
        let newest = |after: Option<&str>| ConversationFilter {
            newest_first: true,
            ..filter(after)
        };
        let (page, more) = restarted.list(None, &newest(None)).await;
        let listed: Vec<&str> = page.iter().map(|c| &*c.id).collect();
        assert_eq!((listed, more), (vec!["c3", "c2"], true));
        let (page, more) = restarted.list(None, &newest(Some("c2"))).await;
        let listed: Vec<&str> = page.iter().map(|c| &*c.id).collect();
        assert_eq!((listed, more), (vec!["c1"], false));
        assert_eq!(
            restarted.live_count(),
            0,
            "listing loads nothing into the engine"
        );
    }
}

/// Runs `colloquy ARGS…` to its end: exit code and stdout.
fn colloquy(args: &[&str]) -> (i32, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_colloquy"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run colloquy");
    (
        output.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ),
    )
}

/// One contract-net conversation: alice calls bob for proposals, bob proposes, alice
/// accepts `accept_after` later, bob delivers.
async fn contract(http: &reqwest::Client, url: &str, accept_after: Duration) -> String {
    let send = |id: &str, token: &str, body: serde_json::Value| {
        http.post(format!("{url}/v1/conversations/{id}/messages"))
            .bearer_auth(token)
            .json(&body)
            .send()
    };
    let started: serde_json::Value = http
        .post(format!("{url}/v1/conversations"))
        .bearer_auth("alice-secret")
        .json(&json!({
            "template": "fipa-contract-net",
            "participants": ["bob"],
            "message": {"performative": "cfp", "content": {"task": "deliver"}},
        }))
        .send()
        .await
        .expect("start")
        .json()
        .await
        .expect("json");
    let id = started["id"].as_str().expect("id").to_owned();
    let proposed = send(
        &id,
        "bob-secret",
        json!({"performative": "propose", "content": {"price": 10}}),
    )
    .await
    .expect("propose");
    assert!(proposed.status().is_success(), "{}", proposed.status());
    sleep(accept_after).await;
    let accepted = send(
        &id,
        "alice-secret",
        json!({"performative": "accept-proposal", "to": ["bob"], "content": {}}),
    )
    .await
    .expect("accept");
    assert!(accepted.status().is_success(), "{}", accepted.status());
    let informed = send(
        &id,
        "bob-secret",
        json!({"performative": "inform", "content": {"delivered": true}}),
    )
    .await
    .expect("inform");
    assert!(informed.status().is_success(), "{}", informed.status());
    id
}

/// Issue 39 end to end on a real `colloquy serve` on SQLite: recorded contract-net
/// conversations replayed against a change whose proposals lapse sooner (the divergences
/// named), the same change staged as a candidate and shadowed on live traffic, promoted,
/// rolled back, and the history (and a second rollback) read again after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_contract_net_is_replayed_shadowed_promoted_and_rolled_back_across_a_restart() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("rollouts");
        let templates = templates(&dir);
        let agents = agents_file(&dir, None);
        let db = dir.join("colloquy.db");
        let store = format!("sqlite:{}", db.display());
        let extra = [agents[0].as_str(), agents[1].as_str(), "--retention", "7d"];
        let server = Server::start_with(&dir, &templates, &store, "rollouts", &extra);
        let http = reqwest::Client::new();
        // A proposal stands 50 ms in the candidate; alice takes 300 ms to accept.
        let live_text = std::fs::read_to_string(templates.join("fipa-contract-net.yaml")).expect("read");
        let candidate_text = live_text.replacen(
            "{ performative: propose, from: participant, to: proposed }",
            "{ performative: propose, from: participant, to: proposed, reply_by: { default_ms: 50 } }",
            1,
        );
        assert_ne!(candidate_text, live_text);
        let candidate_file = dir.join("candidate.yaml");
        std::fs::write(&candidate_file, &candidate_text).expect("write candidate");
        let candidate_path = candidate_file.display().to_string();
        for _ in 0..3 {
            contract(&http, &server.url, Duration::from_millis(300)).await;
        }

        // Replay beside the running server: every conversation diverges where alice accepts.
        let (code, out) = colloquy(&[
            "templates", "replay", "--store", &store, "--template", "fipa-contract-net",
            "--candidate", &candidate_path, "--format", "json",
        ]);
        assert_eq!(code, 1, "{out}");
        let report: serde_json::Value = serde_json::from_str(&out).expect("json report");
        assert_eq!(report["diverged"], json!(3), "{report}");
        assert_eq!(report["by_kind"]["thread"], json!(3), "{report}");
        assert!(
            report["divergences"][0]["divergence"]["input"]
                .as_str()
                .expect("input")
                .starts_with("accept-proposal from alice"),
            "{report}"
        );

        // Stage it; an agent may not.
        let server_args = ["--server", server.url.as_str()];
        let as_admin = |args: &[&str]| {
            let mut all: Vec<&str> = args.to_vec();
            all.extend(server_args);
            all.extend(["--token", "admin-secret", "--json"]);
            colloquy(&all)
        };
        let (code, out) = colloquy(&[
            "templates", "stage", "fipa-contract-net", &candidate_path, "--server", &server.url,
            "--token", "alice-secret",
        ]);
        assert_eq!(code, 1, "{out}");
        assert!(out.contains("403"), "{out}");
        let (code, out) = as_admin(&["templates", "stage", "fipa-contract-net", &candidate_path]);
        assert_eq!(code, 0, "{out}");
        let staged: serde_json::Value = serde_json::from_str(&out).expect("json");
        let revision = staged["revision"].as_str().expect("revision").to_owned();
        let active = staged["active"].as_str().expect("active").to_owned();

        // Live traffic on the active revision; the twins on the candidate lapse first.
        for _ in 0..2 {
            contract(&http, &server.url, Duration::from_millis(300)).await;
        }
        let report = eventually("the shadow divergences", || async {
            let (code, out) = as_admin(&["templates", "candidates", "fipa-contract-net"]);
            assert_eq!(code, 0, "{out}");
            let report: serde_json::Value = serde_json::from_str(&out).expect("json");
            (report["candidates"][0]["shadow"]["diverged"] == json!(2)).then_some(report)
        })
        .await;
        assert_eq!(report["candidates"][0]["shadow"]["by_kind"]["thread"], json!(2), "{report}");

        // Promote, roll back.
        let (code, out) = as_admin(&["templates", "promote", "fipa-contract-net", &revision]);
        assert_eq!(code, 0, "{out}");
        let (code, out) = as_admin(&["templates", "rollback", "fipa-contract-net"]);
        assert_eq!(code, 0, "{out}");
        let rolled: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(rolled["activation"]["revision"], json!(active), "{rolled}");
        let (code, out) = as_admin(&["templates", "rollback", "nope"]);
        assert_eq!(code, 1, "{out}");

        // Restarted on the same file: the history is there, and rolling back again finds the
        // candidate's revision in the archive.
        assert!(server.terminate().success());
        let server = Server::start_with(&dir, &templates, &store, "rollouts-2", &extra);
        let (code, out) = colloquy(&[
            "templates", "history", "fipa-contract-net", "--server", &server.url, "--token",
            "alice-secret", "--json",
        ]);
        assert_eq!(code, 0, "{out}");
        let history: serde_json::Value = serde_json::from_str(&out).expect("json");
        let kinds: Vec<&str> = history["activations"]
            .as_array()
            .expect("activations")
            .iter()
            .map(|a| a["kind"].as_str().expect("kind"))
            .collect();
        assert_eq!(kinds, ["reload", "stage", "promote", "rollback"], "{history}");
        let (code, out) = colloquy(&[
            "templates", "rollback", "fipa-contract-net", "--server", &server.url, "--token",
            "admin-secret", "--json",
        ]);
        assert_eq!(code, 0, "{out}");
        let again: serde_json::Value = serde_json::from_str(&out).expect("json");
        assert_eq!(again["activation"]["revision"], json!(revision), "{again}");
        let _ = std::fs::remove_dir_all(&dir);
    })
    .await
    .expect("within the test timeout");
}
