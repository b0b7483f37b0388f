//! The HTTP API's own cost, without sockets: request conversations driven through the
//! router (`tower::ServiceExt::oneshot`) with the same bodies and token auth as the HTTP
//! benchmark, next to the JSON echo router measured in the same run. What is left of the
//! loopback benchmark's gap is the kernel and hyper. Run with
//! `cargo bench -p colloquy-engine --bench api` (release mode); `--conversations N`.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use colloquy_engine::api::{AppState, Identity, router};
use colloquy_engine::metrics::{MeteredStore, Metrics};
use colloquy_engine::store::MemoryStore;
use colloquy_engine::{Engine, EngineConfig, SystemClock};
use colloquy_policy::{Catalog, TemplateCompiler};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

mod support;
use support::arg;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const REQUEST: &str = r#"{"template":"fipa-request","participants":["bob"],"message":{"performative":"request","content":{"action":"book-room","room":"Lovelace"}}}"#;
const AGREE: &str = r#"{"performative":"agree","content":{}}"#;
const INFORM: &str = r#"{"performative":"inform","content":{"done":true,"booking":"LV-0412"}}"#;

fn colloquy() -> Router {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates");
    let templates = TemplateCompiler::new()
        .compile_dir(&dir)
        .expect("built-in templates compile");
    let catalog = Catalog::new(templates.into_iter().map(Arc::new));
    let metrics = Arc::new(Metrics::new());
    let store = Arc::new(MeteredStore::new(
        Arc::new(MemoryStore::new()),
        metrics.clone(),
    ));
    let engine = Arc::new(Engine::new(
        Arc::new(catalog),
        store,
        Arc::new(SystemClock),
        EngineConfig::default(),
    ));
    let identity = Identity::from_yaml(
        "agents:\n  - {id: alice, token: alice-token}\n  - {id: bob, token: bob-token}\n",
        "bench",
    )
    .expect("agents");
    let (_, closing) = tokio::sync::watch::channel(false);
    router(AppState::new(engine, identity, metrics, closing))
}

async fn post(app: &Router, path: &str, token: Option<&str>, body: &'static str) -> bytes::Bytes {
    let mut request = Request::post(path).header("content-type", "application/json");
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let response = app
        .clone()
        .oneshot(request.body(Body::from(body)).expect("request"))
        .await
        .expect("infallible");
    assert!(
        response.status().is_success(),
        "{path}: {}",
        response.status()
    );
    response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes()
}

#[derive(serde::Deserialize)]
struct Started {
    id: String,
}

async fn conversations(app: &Router, n: usize) -> f64 {
    let began = Instant::now();
    for _ in 0..n {
        let started = post(app, "/v1/conversations", Some("alice-token"), REQUEST).await;
        let id = serde_json::from_slice::<Started>(&started)
            .expect("view")
            .id;
        let path = format!("/v1/conversations/{id}/messages");
        for body in [AGREE, INFORM] {
            post(app, &path, Some("bob-token"), body).await;
        }
    }
    began.elapsed().as_secs_f64() * 1e6 / (3 * n) as f64
}

async fn echoes(app: &Router, n: usize) -> f64 {
    let began = Instant::now();
    for _ in 0..n {
        for body in [REQUEST, AGREE, INFORM] {
            post(app, "/echo", None, body).await;
        }
    }
    began.elapsed().as_secs_f64() * 1e6 / (3 * n) as f64
}

fn main() {
    let n = arg("--conversations", 100_000);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let echo = colloquy_engine::api::echo::router();
        let app = colloquy();
        echoes(&echo, n / 10).await;
        conversations(&app, n / 10).await;
        let echo_us = echoes(&echo, n).await;
        let colloquy_us = conversations(&app, n).await;
        println!("in-process router, µs per request: echo {echo_us:.2}, colloquy {colloquy_us:.2} ({:.2}x echo)", colloquy_us / echo_us);
    });
}
