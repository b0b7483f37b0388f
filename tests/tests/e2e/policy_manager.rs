//! Hot reload and the policy manager, with real files in a temporary directory and real
//! servers on loopback: edits while conversations run, broken edits, deletions, uploads,
//! and a remote engine following a standalone policy manager across its restart. Reloads
//! are waited for by polling with a bound, never by sleeping a fixed time.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use colloquy_core::store::MemoryStore;
use colloquy_core::{Engine, EngineConfig, SystemClock};
use colloquy_policy::watcher::{self, DirectoryWatcher};
use colloquy_policy::{Catalog, LiveCatalog, PolicyClient};
use colloquy_protocol::message::{SendMessage, StartConversation};
use colloquy_server::policy::{self, PolicyState, Reads, RunningPolicyManager, Writes};
use colloquy_server::{self as api, RunningService, ServiceOptions};
use colloquy_tests::http::{ADMIN_TOKEN, bounded, call, raw};
use colloquy_tests::templates_dir;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

const ADMIN: &str = "policy-admin";

/// A one-step protocol: the initiator requests, the participant informs, and the thread
/// ends in the state named `done` (so each edit makes a new revision and a visible change).
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

/// Polls `check` every 10 ms until it holds; fails after 10 s (a reload that never shows).
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(
            tokio::time::Instant::now() < until,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An engine serving a watched template directory with the policy API embedded, as
/// `colloquy serve` runs it.
struct Embedded {
    service: RunningService,
    live: Arc<LiveCatalog>,
    _watcher: DirectoryWatcher,
    _closing: watch::Sender<bool>,
}

async fn embedded(dir: &Path) -> Embedded {
    let live = Arc::new(LiveCatalog::open(dir).unwrap_or_else(|d| panic!("{d}")));
    let watcher = watcher::watch(live.clone()).expect("watching");
    let (closing, closing_rx) = watch::channel(false);
    let state = PolicyState::new(
        live.clone(),
        Writes::AdminToken(ADMIN.into()),
        Reads::Public,
        closing_rx,
    );
    let service = launch_engine(live.clone(), state).await;
    Embedded {
        service,
        live,
        _watcher: watcher,
        _closing: closing,
    }
}

/// [`embedded`] with an agents file ([`colloquy_tests::http::identity`]: `<agent>-token`
/// and [`ADMIN_TOKEN`]); reads need tokens unless `public`, as `colloquy serve --agents FILE
/// [--public-templates]` runs it.
async fn embedded_with_agents(dir: &Path, public: bool) -> Embedded {
    let live = Arc::new(LiveCatalog::open(dir).unwrap_or_else(|d| panic!("{d}")));
    let watcher = watcher::watch(live.clone()).expect("watching");
    let (closing, closing_rx) = watch::channel(false);
    let identity = colloquy_tests::http::identity(&[]);
    let reads = if public {
        Reads::Public
    } else {
        Reads::Tokens(Arc::new(identity.clone()))
    };
    let state = PolicyState::new(
        live.clone(),
        Writes::AdminToken(ADMIN_TOKEN.into()),
        reads,
        closing_rx,
    );
    let service = launch_engine_as(live.clone(), state, identity).await;
    Embedded {
        service,
        live,
        _watcher: watcher,
        _closing: closing,
    }
}

async fn launch_engine(live: Arc<LiveCatalog>, policy: PolicyState) -> RunningService {
    launch_engine_as(live, policy, api::Identity::Open).await
}

async fn launch_engine_as(
    live: Arc<LiveCatalog>,
    policy: PolicyState,
    identity: api::Identity,
) -> RunningService {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let options = ServiceOptions {
        identity,
        templates: Some(live),
        routes: Some(policy::router(policy)),
        scheduler_period: Duration::from_millis(10),
        ..ServiceOptions::default()
    };
    api::launch(Catalog::default(), listener, options).expect("service starts")
}

async fn start(url: &str, template: &str) -> (u16, Value) {
    let body = json!({
        "template": template,
        "participants": ["bob"],
        "message": {"performative": "request", "content": {}},
    });
    call(
        raw()
            .post(format!("{url}/v1/conversations"))
            .header("x-agent-id", "alice")
            .json(&body),
    )
    .await
}

async fn inform(url: &str, conversation: &str) -> (u16, Value) {
    call(
        raw()
            .post(format!("{url}/v1/conversations/{conversation}/messages"))
            .header("x-agent-id", "bob")
            .json(&json!({"performative": "inform", "content": {}})),
    )
    .await
}

async fn view(url: &str, conversation: &str) -> Value {
    let (status, body) = call(
        raw()
            .get(format!("{url}/v1/conversations/{conversation}"))
            .header("x-agent-id", "alice"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

async fn status(url: &str) -> Value {
    let (code, body) = call(raw().get(format!("{url}/v1/status"))).await;
    assert_eq!(code, 200, "{body}");
    body
}

fn admin(method: Method, url: String) -> reqwest::RequestBuilder {
    raw().request(method, url).bearer_auth(ADMIN)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_reaches_new_conversations_while_running_ones_finish_on_their_revision() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("errand.yaml"), errand("done")).expect("fixture");
    let live = Arc::new(LiveCatalog::open(dir.path()).unwrap_or_else(|d| panic!("{d}")));
    let _watcher = watcher::watch(live.clone()).expect("watching");
    let store = Arc::new(MemoryStore::new());
    let engine = |live: &Arc<LiveCatalog>| {
        Engine::new(
            live.clone(),
            store.clone(),
            Arc::new(SystemClock),
            EngineConfig::default(),
        )
    };
    let first = engine(&live);
    let request = |id: &str| StartConversation {
        template: "errand".into(),
        conversation_id: Some(id.into()),
        participants: vec!["bob".into()],
        message: Some(SendMessage::new("request", json!({}))),
        ..StartConversation::default()
    };
    let old = first.start("alice", request("old")).await.expect("started");

    std::fs::write(dir.path().join("errand.yaml"), errand("finished")).expect("edit");
    eventually("the edit to load", || {
        let live = live.clone();
        let old = old.revision.clone();
        async move { live.latest("errand").is_some_and(|t| t.revision != old) }
    })
    .await;

    let new = first.start("alice", request("new")).await.expect("started");
    assert_ne!(
        new.revision, old.revision,
        "new conversations take the new revision"
    );
    // The running conversation finishes on its own revision, in memory ...
    let receipt = first
        .send("old", "bob", SendMessage::new("inform", json!({})))
        .await
        .expect("accepted");
    assert_eq!(&*receipt.transitions[0].to, "done");
    let receipt = first
        .send("new", "bob", SendMessage::new("inform", json!({})))
        .await
        .expect("accepted");
    assert_eq!(&*receipt.transitions[0].to, "finished");
    // ... and when another engine loads it from the store: its revision is still there.
    let second = engine(&live);
    let reloaded = second
        .view("old", None)
        .await
        .expect("loads its pinned revision");
    assert_eq!(reloaded.revision, old.revision);
    assert_eq!(&*reloaded.threads[0].state, "done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_edit_is_refused_and_reported_while_the_old_revision_serves() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("errand.yaml");
    std::fs::write(&file, errand("done")).expect("fixture");
    let server = embedded(dir.path()).await;
    let url = server.service.url();
    let good = status(&url).await["revision"].clone();

    std::fs::write(&file, errand("done").replace("to: asked", "to: nowhere")).expect("break");
    eventually("the failed reload in /v1/status", || {
        let url = url.clone();
        async move { !status(&url).await["last_error"].is_null() }
    })
    .await;
    let report = status(&url).await;
    assert_eq!(report["revision"], good, "the last good catalog serves");
    let diagnostic = &report["last_error"]["diagnostics"][0];
    assert!(
        diagnostic["file"]
            .as_str()
            .is_some_and(|f| f.ends_with("errand.yaml")),
        "{report}"
    );
    assert!(diagnostic["line"].as_u64().is_some(), "{report}");
    assert!(
        diagnostic["message"]
            .as_str()
            .is_some_and(|m| m.contains("nowhere")),
        "{report}"
    );

    let (code, started) = bounded(start(&url, "errand")).await;
    assert_eq!(code, 201, "{started}");
    let (code, receipt) = inform(&url, started["id"].as_str().expect("id")).await;
    assert_eq!(code, 202, "{receipt}");
    assert_eq!(receipt["transitions"][0]["to"], "done");

    std::fs::write(&file, errand("finished")).expect("fix");
    eventually("the fix to clear the error", || {
        let url = url.clone();
        let good = good.clone();
        async move {
            let report = status(&url).await;
            report["last_error"].is_null() && report["revision"] != good
        }
    })
    .await;
    assert!(server.live.latest("errand").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_template_refuses_new_conversations_and_running_ones_finish() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("errand.yaml"), errand("done")).expect("fixture");
    std::fs::copy(
        templates_dir().join("fipa-query.yaml"),
        dir.path().join("fipa-query.yaml"),
    )
    .expect("copy");
    let server = embedded(dir.path()).await;
    let url = server.service.url();
    let (code, running) = start(&url, "errand").await;
    assert_eq!(code, 201, "{running}");
    let id = running["id"].as_str().expect("id").to_owned();

    // Deleted through the API here; deleting the file has the same effect (unit-tested).
    let (code, body) = call(raw().delete(format!("{url}/v1/templates/errand"))).await;
    assert_eq!(code, 401, "{body}");
    let (code, body) = call(admin(Method::DELETE, format!("{url}/v1/templates/errand"))).await;
    assert_eq!(code, 204, "{body}");
    assert!(!dir.path().join("errand.yaml").exists());

    let (code, body) = start(&url, "errand").await;
    assert_eq!(code, 404, "{body}");
    assert_eq!(body["error"]["code"], "unknown_template");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("errand")),
        "{body}"
    );
    let (code, body) = call(raw().get(format!("{url}/v1/templates/errand"))).await;
    assert_eq!(code, 404, "{body}");

    let (code, receipt) = inform(&url, &id).await;
    assert_eq!(code, 202, "{receipt}");
    assert_eq!(view(&url, &id).await["status"], "completed");
    let (code, _) = start(&url, "fipa-query").await;
    assert_eq!(code, 201, "other templates are untouched");
}

/// Mistakes on the policy routes merged into the service get its JSON errors too: a method
/// the route does not have, and a name whose percent-encoding is not UTF-8.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_policy_routes_answer_mistakes_in_json() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("errand.yaml"), errand("done")).expect("fixture");
    let server = embedded(dir.path()).await;
    let url = server.service.url();
    let (code, body) = call(admin(Method::DELETE, format!("{url}/v1/templates"))).await;
    assert_eq!(code, 405, "{body}");
    assert_eq!(body["error"]["code"], "method_not_allowed");
    let (code, body) = call(admin(Method::GET, format!("{url}/v1/templates/%FF"))).await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["error"]["code"], "invalid_path");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploads_go_through_the_compiler_good_and_broken() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::copy(
        templates_dir().join("fipa-query.yaml"),
        dir.path().join("fipa-query.yaml"),
    )
    .expect("copy");
    let server = embedded(dir.path()).await;
    let url = server.service.url();
    let put = |body: String| {
        admin(Method::PUT, format!("{url}/v1/templates/errand"))
            .header("content-type", "application/yaml")
            .body(body)
    };

    let (code, body) = call(
        raw()
            .put(format!("{url}/v1/templates/errand"))
            .body(errand("done")),
    )
    .await;
    assert_eq!(code, 401, "uploads need the admin token: {body}");

    let (code, created) = call(put(errand("done"))).await;
    assert_eq!(code, 201, "{created}");
    let revision = created["revision"].as_str().expect("revision").to_owned();
    assert!(
        dir.path().join("errand.yaml").is_file(),
        "written to the directory"
    );
    let (code, started) = start(&url, "errand").await;
    assert_eq!(code, 201, "{started}");
    assert_eq!(started["revision"], revision.as_str());

    let (code, rejected) = call(put(
        errand("done").replace("from: participant", "from: nobody")
    ))
    .await;
    assert_eq!(code, 422, "{rejected}");
    assert_eq!(rejected["error"]["code"], "invalid_template");
    let diagnostic = &rejected["diagnostics"][0];
    assert!(diagnostic["line"].as_u64().is_some(), "{rejected}");
    assert!(
        diagnostic["path"]
            .as_str()
            .is_some_and(|p| p.contains("from")),
        "{rejected}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.path().join("errand.yaml")).expect("file"),
        errand("done"),
        "a broken upload writes nothing"
    );
    assert!(status(&url).await["last_error"].is_null());

    // A mistake on every line: every problem is counted, the first hundred are listed.
    let typos: String = (0..150).map(|i| format!("  typo_{i}: 1\n")).collect();
    let (code, rejected) = call(put(
        errand("done").replace("spec:\n", &format!("spec:\n{typos}"))
    ))
    .await;
    assert_eq!(code, 422, "{rejected}");
    let message = rejected["error"]["message"].as_str().expect("message");
    assert!(message.contains("(150 problems)"), "{message}");
    let listed = rejected["diagnostics"].as_array().expect("diagnostics");
    assert_eq!(listed.len(), 101, "a hundred and the count of the rest");
    assert!(
        listed[100]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("50 more problems")),
        "{}",
        listed[100]
    );

    // The same revision is served back, with ETag and 304.
    let response = bounded(raw().get(format!("{url}/v1/templates/errand")).send())
        .await
        .expect("sent");
    assert_eq!(
        response.headers()["etag"],
        format!("\"{revision}\"").as_str()
    );
    let response = bounded(
        raw()
            .get(format!("{url}/v1/templates/errand"))
            .header("if-none-match", format!("\"{revision}\""))
            .send(),
    )
    .await
    .expect("sent");
    assert_eq!(response.status().as_u16(), 304);
}

/// The template: 133 KB, a list of 10,000 strings anchored in a message schema and
/// referenced 500 times (five million strings once expanded).
fn alias_bomb() -> String {
    let strings: Vec<String> = (0..10_000).map(|i| format!("item-{i:06}")).collect();
    let aliases = vec!["*big"; 500].join(", ");
    format!(
        "{}  messages:\n    request:\n      schema:\n        type: object\n        \
         x-strings: &big [{}]\n        examples: [{aliases}]\n",
        errand("done"),
        strings.join(", ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alias_bomb_upload_is_refused_naming_the_limit() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("errand.yaml"), errand("done")).expect("fixture");
    let server = embedded(dir.path()).await;
    let url = server.service.url();
    let bomb = alias_bomb();
    assert!((130_000..140_000).contains(&bomb.len()));
    let (code, rejected) = call(
        admin(Method::PUT, format!("{url}/v1/templates/errand"))
            .header("content-type", "application/yaml")
            .body(bomb.clone()),
    )
    .await;
    assert_eq!(code, 422, "{rejected}");
    assert_eq!(rejected["error"]["code"], "invalid_template");
    let diagnostic = &rejected["diagnostics"][0];
    let message = diagnostic["message"].as_str().expect("message");
    assert!(
        message.contains(&format!(
            "more than {} nodes (the limit)",
            colloquy_policy::compiler::MAX_EXPANDED_NODES
        )),
        "{rejected}"
    );
    assert_eq!(diagnostic["line"], bomb.lines().count(), "at the aliases");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("errand.yaml")).expect("file"),
        errand("done"),
        "nothing written"
    );
}

/// A GET as `who`: `None` without credentials, else a bearer token.
async fn read(url: &str, path: &str, token: Option<&str>) -> (u16, Value) {
    let mut request = raw().get(format!("{url}{path}"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = bounded(request.send()).await.expect("sent");
    let code = response.status().as_u16();
    // The change feed never ends: its status line is what counts.
    if response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.as_bytes().starts_with(b"text/event-stream"))
    {
        return (code, Value::Null);
    }
    let bytes = bounded(response.bytes()).await.expect("body");
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (code, body)
}

/// Writes `errand` using a hook module into `dir`.
fn hooked_errand(dir: &Path) {
    let module = wat::parse_str("(module)").expect("wat");
    std::fs::write(dir.join("hook.wasm"), &module).expect("module");
    std::fs::write(
        dir.join("errand.yaml"),
        format!(
            "{}  hooks:\n    module: hook.wasm\n    events: [on_message]\n",
            errand("done")
        ),
    )
    .expect("template");
}

/// The SHA-256 of `errand`'s hook module.
fn module_sha(server: &Embedded) -> String {
    let errand = server.live.latest("errand").expect("errand");
    errand
        .hook_module
        .as_ref()
        .expect("module")
        .sha256
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_agents_file_policy_reads_need_a_token_and_sources_the_admin() {
    let dir = tempfile::tempdir().expect("temp dir");
    hooked_errand(dir.path());
    let server = embedded_with_agents(dir.path(), false).await;
    let sha = module_sha(&server);
    let url = server.service.url();
    let module = format!("/v1/templates/errand/modules/{sha}");
    let listing = [
        "/v1/templates",
        "/v1/templates/errand/revisions",
        "/v1/watch",
        "/v1/status",
    ];
    let sources = ["/v1/templates/errand", module.as_str()];
    for path in listing.iter().chain(&sources) {
        let (code, body) = read(&url, path, None).await;
        assert_eq!(code, 401, "{path} without a token: {body}");
        assert_eq!(body["error"]["code"], "unauthenticated", "{path}: {body}");
        let (code, _) = read(&url, path, Some("forged-token")).await;
        assert_eq!(code, 401, "{path} with an unknown token");
    }
    for path in listing {
        let (code, body) = read(&url, path, Some("alice-token")).await;
        assert_eq!(code, 200, "{path} as an agent: {body}");
    }
    for path in sources {
        let (code, body) = read(&url, path, Some("alice-token")).await;
        assert_eq!(code, 403, "{path} is the admin's: {body}");
        assert_eq!(body["error"]["code"], "forbidden", "{body}");
        let (code, body) = read(&url, path, Some(ADMIN_TOKEN)).await;
        assert_eq!(code, 200, "{path} as the admin: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_templates_open_the_policy_reads_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    hooked_errand(dir.path());
    let server = embedded_with_agents(dir.path(), true).await;
    let sha = module_sha(&server);
    let url = server.service.url();
    for path in [
        "/v1/templates".to_owned(),
        "/v1/templates/errand".to_owned(),
        "/v1/templates/errand/revisions".to_owned(),
        format!("/v1/templates/errand/modules/{sha}"),
        "/v1/watch".to_owned(),
        "/v1/status".to_owned(),
    ] {
        let (code, body) = read(&url, &path, None).await;
        assert_eq!(code, 200, "{path}: {body}");
    }
    // The engine's own routes still need a token.
    let (code, _) = read(&url, "/v1/conversations", None).await;
    assert_eq!(code, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_does_not_quote_a_linked_secret_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("errand.yaml"), errand("done")).expect("fixture");
    let elsewhere = tempfile::tempdir().expect("temp dir");
    let secret = elsewhere.path().join("shadow");
    let lines: Vec<String> = (0..300)
        .map(|i| format!("user{i}:$6$salt{i:04}$0123456789abcdefSECRET{i:04}:19000:0:99999:7:::"))
        .collect();
    std::fs::write(&secret, lines.join("\n")).expect("secret");
    let server = embedded_with_agents(dir.path(), false).await;
    let url = server.service.url();
    std::os::unix::fs::symlink(&secret, dir.path().join("leak.yaml")).expect("link");
    let live = server.live.clone();
    eventually("the broken link reported", || {
        let live = live.clone();
        async move { live.last_error().is_some() }
    })
    .await;

    let (code, _) = read(&url, "/v1/status", None).await;
    assert_eq!(code, 401, "nothing for anonymous callers");
    let (code, body) = read(&url, "/v1/status", Some("alice-token")).await;
    assert_eq!(code, 200, "{body}");
    let text = body.to_string();
    assert!(
        text.contains("leak.yaml"),
        "the file at fault is named: {text}"
    );
    assert!(text.contains("not a template"), "{text}");
    assert!(!text.contains("SECRET"), "nothing of the file: {text}");
    assert!(text.len() < 2_000, "{} bytes: {text}", text.len());
}

async fn manager_on(listener: TcpListener, dir: &Path) -> (RunningPolicyManager, DirectoryWatcher) {
    let live = Arc::new(LiveCatalog::open(dir).unwrap_or_else(|d| panic!("{d}")));
    let watcher = watcher::watch(live.clone()).expect("watching");
    let manager = policy::launch(live, listener, Some(ADMIN.into())).expect("manager starts");
    (manager, watcher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_engine_follows_a_standalone_manager_across_its_restart() {
    let source = tempfile::tempdir().expect("manager dir");
    let mirror = tempfile::tempdir().expect("engine mirror");
    std::fs::write(source.path().join("errand.yaml"), errand("done")).expect("fixture");
    // A template with a hook module: the module is mirrored byte for byte, so the engine
    // computes the very same revision. (Assembled from the tracked WAT source, so this test
    // does not depend on the example build.)
    let example = templates_dir().join("examples/auto-responder");
    std::fs::copy(
        example.join("auto-responder.yaml"),
        source.path().join("auto-responder.yaml"),
    )
    .expect("copy example");
    let module = wat::parse_file(example.join("auto_responder.wat")).expect("assemble");
    std::fs::write(source.path().join("auto_responder.wasm"), module).expect("module");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (manager, manager_watcher) = manager_on(listener, source.path()).await;
    let manager_live = manager.live.clone();

    let engine_live = Arc::new(LiveCatalog::new(mirror.path()).with_origin(manager.url()));
    let client = PolicyClient::new(&manager.url()).expect("client");
    let follower = colloquy_policy::follower::follow(engine_live.clone(), client);
    let (_closing, closing_rx) = watch::channel(false);
    let state = PolicyState::new(
        engine_live.clone(),
        Writes::Follower(manager.url()),
        Reads::Public,
        closing_rx,
    );
    let engine = launch_engine(engine_live.clone(), state).await;
    let url = engine.url();

    let same_catalog = |expected: Arc<str>| {
        let engine_live = engine_live.clone();
        move || {
            let engine_live = engine_live.clone();
            let expected = expected.clone();
            async move { engine_live.snapshot().revision == expected }
        }
    };
    eventually(
        "the first sync",
        same_catalog(manager_live.snapshot().revision.clone()),
    )
    .await;
    assert_eq!(
        engine_live
            .latest("auto-responder")
            .map(|t| t.revision.clone()),
        manager_live
            .latest("auto-responder")
            .map(|t| t.revision.clone()),
    );
    assert!(engine_live.latest("auto-responder").is_some());
    assert_eq!(
        std::fs::read(mirror.path().join("auto_responder.wasm")).expect("mirrored module"),
        std::fs::read(source.path().join("auto_responder.wasm")).expect("module"),
    );
    let (code, old) = start(&url, "errand").await;
    assert_eq!(code, 201, "{old}");

    // An upload to the manager reaches the engine through the change feed.
    let (code, body) = call(
        admin(
            Method::PUT,
            format!("{}/v1/templates/errand", manager.url()),
        )
        .body(errand("finished")),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    eventually(
        "the upload to reach the engine",
        same_catalog(manager_live.snapshot().revision.clone()),
    )
    .await;
    let (code, body) =
        call(admin(Method::PUT, format!("{url}/v1/templates/errand")).body(errand("x"))).await;
    assert_eq!(code, 403, "a follower takes no uploads: {body}");

    // The manager goes away: the engine keeps serving its last catalog.
    manager.shutdown().await.expect("manager stops");
    drop(manager_watcher);
    let (code, new) = start(&url, "errand").await;
    assert_eq!(code, 201, "{new}");
    assert_ne!(new["revision"], old["revision"]);
    let (code, receipt) = inform(&url, old["id"].as_str().expect("id")).await;
    assert_eq!(code, 202, "{receipt}");
    assert_eq!(
        receipt["transitions"][0]["to"], "done",
        "the old conversation keeps its revision"
    );

    // Changed while the manager was down; a new manager on the same address serves it.
    std::fs::write(source.path().join("errand.yaml"), errand("closed")).expect("edit");
    std::fs::remove_file(source.path().join("auto-responder.yaml")).expect("delete");
    let listener = TcpListener::bind(addr)
        .await
        .expect("rebind the manager's address");
    let (manager, _watcher) = manager_on(listener, source.path()).await;
    eventually(
        "the engine to catch up with the restarted manager",
        same_catalog(manager.live.snapshot().revision.clone()),
    )
    .await;
    assert!(
        engine_live.latest("auto-responder").is_none(),
        "deletion followed"
    );
    let (code, started) = start(&url, "errand").await;
    assert_eq!(code, 201, "{started}");
    let (code, receipt) = inform(&url, started["id"].as_str().expect("id")).await;
    assert_eq!(code, 202, "{receipt}");
    assert_eq!(receipt["transitions"][0]["to"], "closed");
    let report = status(&url).await;
    assert_eq!(report["source"], manager.url().as_str());
    assert!(report["last_error"].is_null(), "{report}");
    follower.abort();
}
