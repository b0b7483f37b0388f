//! The HTTP API's own cost, without sockets: request conversations driven through the
//! router (`tower::ServiceExt::oneshot`) with the same bodies and token auth as the HTTP
//! benchmark, next to the JSON echo router measured in the same run. What is left of the
//! loopback benchmark's gap is the kernel and hyper. Run with
//! `cargo bench -p colloquy-server --bench api` (release mode); `--conversations N`.
//!
//! With `--hook` (after `templates/examples/build.sh`), a third router runs the same
//! conversations with the Rust credit-assessment policy as `fipa-request`'s `on_message`
//! hook, configured as `http-bench --hook` configures it: the hook's cost on the router
//! path, next to the hook calls alone in `--bench hooks`.
//!
//! With `--log`, the process logs as `colloquy serve` does by default (the fmt subscriber
//! at `info`, here into a sink): what the conversation spans cost when nothing is logged.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use colloquy_core::metrics::{MeteredStore, Metrics};
use colloquy_core::store::MemoryStore;
use colloquy_core::{Engine, EngineConfig, SystemClock};
use colloquy_hooks::{HookRuntime, HookRuntimeConfig};
use colloquy_policy::{Catalog, TemplateCompiler};
use colloquy_server::{AppState, Identity, router};
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

#[path = "../../bench_support.rs"]
mod support;
use support::arg;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const REQUEST: &str = r#"{"template":"fipa-request","participants":["bob"],"message":{"performative":"request","content":{"action":"book-room","room":"Lovelace"}}}"#;
const AGREE: &str = r#"{"performative":"agree","content":{}}"#;
const INFORM: &str = r#"{"performative":"inform","content":{"done":true,"booking":"LV-0412"}}"#;

/// The built-in templates, or with `hooked` the same with the credit-assessment policy as
/// `fipa-request`'s `on_message` hook (and a hook runtime to run it).
fn colloquy(hooked: bool) -> Router {
    let builtin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
    let dir = if hooked {
        hooked_templates(&builtin)
    } else {
        builtin
    };
    let templates = TemplateCompiler::new()
        .compile_dir(&dir)
        .expect("built-in templates compile");
    let catalog = Catalog::new(templates.into_iter().map(Arc::new));
    let metrics = Arc::new(Metrics::new());
    let store = Arc::new(MeteredStore::new(
        Arc::new(MemoryStore::new()),
        metrics.clone(),
    ));
    let mut engine = Engine::new(
        Arc::new(catalog),
        store,
        Arc::new(SystemClock),
        EngineConfig::default(),
    );
    if hooked {
        let runtime = HookRuntime::new(HookRuntimeConfig {
            cache_dir: None,
            ..HookRuntimeConfig::default()
        })
        .expect("hook runtime");
        engine = engine.with_hooks(Arc::new(runtime));
    }
    let engine = Arc::new(engine);
    let identity = Identity::from_yaml(
        "agents:\n  - {id: alice, token: alice-token}\n  - {id: bob, token: bob-token}\n",
        "bench",
    )
    .expect("agents");
    let (_, closing) = tokio::sync::watch::channel(false);
    router(AppState::new(engine, identity, metrics, closing))
}

/// `fipa-request` alone, with the credit hook as `http-bench --hook` sets it up, in a
/// scratch directory.
fn hooked_templates(builtin: &Path) -> PathBuf {
    let module = builtin.join("examples/credit-assessment/credit_assessment.wasm");
    assert!(
        module.is_file(),
        "{} is missing: run templates/examples/build.sh first",
        module.display()
    );
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).expect("scratch dir");
    std::fs::copy(&module, dir.join("credit_assessment.wasm")).expect("copy the module");
    let yaml = std::fs::read_to_string(builtin.join("fipa-request.yaml")).expect("template");
    std::fs::write(
        dir.join("fipa-request.yaml"),
        format!(
            "{yaml}\n  hooks:\n    module: credit_assessment.wasm\n    events: [on_message]\n    \
             reads: [threads]\n    config: {{ max_amount: 50000 }}\n"
        ),
    )
    .expect("hooked template");
    dir
}

fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("colloquy-bench-api-{}", std::process::id()))
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
    let hook = std::env::args().any(|arg| arg == "--hook");
    if std::env::args().any(|arg| arg == "--log") {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
            .with_writer(std::io::sink)
            .init();
    }
    runtime.block_on(async {
        let echo = colloquy_server::echo::router();
        let app = colloquy(false);
        let hooked = hook.then(|| colloquy(true));
        echoes(&echo, n / 10).await;
        conversations(&app, n / 10).await;
        if let Some(hooked) = &hooked {
            conversations(hooked, n / 10).await;
        }
        let echo_us = echoes(&echo, n).await;
        let colloquy_us = conversations(&app, n).await;
        println!("in-process router, µs per request: echo {echo_us:.2}, colloquy {colloquy_us:.2} ({:.2}x echo)", colloquy_us / echo_us);
        if let Some(hooked) = &hooked {
            let hooked_us = conversations(hooked, n).await;
            println!(
                "with the Rust credit hook on every message: {hooked_us:.2} µs per request \
                 (+{:.2} µs, {:.0}% of colloquy's rate without it)",
                hooked_us - colloquy_us,
                100.0 * colloquy_us / hooked_us
            );
        }
    });
    if hook {
        let _ = std::fs::remove_dir_all(scratch_dir());
    }
}
