//! The policy manager's routes with a hook runtime's reload check: a revision whose module
//! is refused never serves, one that compiles serves once its compile ends.

use std::path::Path;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use colloquy_protocol::policy::PolicyStatus;
use http_body_util::BodyExt as _;
use sha2::{Digest as _, Sha256};
use tokio::sync::watch;
use tower::ServiceExt as _;

use colloquy_hooks::hook_check;
use std::sync::Arc;

use crate::policy::{PolicyState, Reads, Writes, router};
use colloquy_hooks::{HookRuntime, HookRuntimeConfig};
use colloquy_policy::LiveCatalog;

/// A hook answering `continue` to `on_message`, plus `extra` functions nobody calls,
/// each of a few hundred operators: only there to make the module slow to compile.
fn hook_module(extra: usize) -> Vec<u8> {
    let mut wat = String::from(
        r#"(module
(memory (export "memory") 1)
(data (i32.const 0) "{\"actions\":[\"continue\"]}")
(func (export "hooks_abi_version") (result i32) (i32.const 1))
(func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
(func (export "message") (param i32 i32) (result i32)
  (i32.store (i32.const 2048) (i32.const 0))
  (i32.store (i32.const 2052) (i32.const 24))
  (i32.const 2048))"#,
    );
    for function in 0..extra {
        wat.push_str("\n  (func (param i32) (result i32) (local.get 0)");
        for step in 0..40 {
            wat.push_str(&format!(
                " (i32.add (i32.const {})) (i32.mul (local.get 0)) (i32.xor (i32.const {step}))",
                function + step
            ));
        }
        wat.push(')');
    }
    wat.push(')');
    wat::parse_str(&wat).expect("WAT")
}

fn template(name: &str, done: &str, module: Option<&str>) -> String {
    let hooks = module
        .map(|module| format!("  hooks: {{ module: {module}, events: [on_message] }}\n"))
        .unwrap_or_default();
    format!(
        "apiVersion: colloquy.dev/v1\nkind: ConversationTemplate\nmetadata: {{ name: {name}, version: 1.0.0 }}\nspec:\n  roles: {{ participants: {{ min: 1 }} }}\n  thread:\n    initial: open\n    on_expiry: {done}\n    states:\n      open: {{ transitions: [{{ performative: inform, from: initiator, to: {done} }}] }}\n      {done}: {{ terminal: success }}\n{hooks}"
    )
}

fn write(dir: &Path, file: &str, bytes: impl AsRef<[u8]>) {
    std::fs::write(dir.join(file), bytes).expect("write fixture");
}

async fn status(live: &Arc<LiveCatalog>) -> PolicyStatus {
    let (_, closing) = watch::channel(false);
    let app = router(PolicyState::new(
        live.clone(),
        Writes::Disabled,
        Reads::Public,
        closing,
    ));
    let request = Request::get("/v1/status")
        .body(Body::empty())
        .expect("request");
    let response = app.oneshot(request).await.expect("infallible");
    let body = response.into_body().collect().await.expect("body");
    serde_json::from_slice(&body.to_bytes()).expect("status")
}

fn revision(live: &LiveCatalog, name: &str) -> Arc<str> {
    live.latest(name).expect("served").revision.clone()
}

#[tokio::test]
async fn a_slow_hook_compiles_in_the_background_while_other_templates_swap_in() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();
    write(
        dir,
        "slow.yaml",
        template("slow", "done", Some("slow.wasm")),
    );
    write(dir, "slow.wasm", hook_module(0));
    write(dir, "other.yaml", template("other", "done", None));
    let runtime = Arc::new(
        HookRuntime::new(HookRuntimeConfig {
            // No AOT cache: the module compiles for real every run.
            cache_dir: None,
            max_instances: 4,
            idle_instances_per_module: 1,
            ..HookRuntimeConfig::default()
        })
        .expect("runtime"),
    );
    let live = Arc::new(LiveCatalog::new(dir).with_check(hook_check(runtime.clone())));
    live.reload_settled().expect("compiles");
    let first_slow = revision(&live, "slow");
    let first_other = revision(&live, "other");

    // A module that takes a while to compile (1.3 s for 3000 functions in a debug build
    // on the 2-core development machine), and an edit of the other template: the
    // reload returns at once, with the other one swapped in.
    let slow = hook_module(4000);
    write(dir, "slow.wasm", &slow);
    write(dir, "other.yaml", template("other", "finished", None));
    live.reload().expect("reloads");
    assert_ne!(revision(&live, "other"), first_other, "swapped in");
    assert_eq!(
        revision(&live, "slow"),
        first_slow,
        "the previous revision serves while the new hook compiles"
    );
    let compiling = live.compiling();
    assert_eq!(compiling.len(), 1, "{compiling:?}");
    assert_eq!(compiling[0].template, "slow");
    assert_ne!(compiling[0].revision, *first_slow);
    let sha256: String = Sha256::digest(&slow)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    assert_eq!(compiling[0].hook_sha256, sha256);
    let shown = status(&live).await;
    assert_eq!(shown.compiling, compiling, "/v1/status shows it compiling");
    assert_eq!(shown.last_error, None);

    // Once compiled, it serves without anyone reloading.
    let until = Instant::now() + Duration::from_secs(120);
    while *revision(&live, "slow") != *compiling[0].revision {
        assert!(
            Instant::now() < until,
            "the compiled revision never served: {:?}",
            live.last_error()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(live.compiling().is_empty());
    let shown = status(&live).await;
    assert!(shown.compiling.is_empty());
    assert_eq!(shown.last_error, None);

    // A new revision with the same hook compiles nothing: it serves at once.
    write(
        dir,
        "slow.yaml",
        template("slow", "finished", Some("slow.wasm")),
    );
    live.reload().expect("reloads");
    assert_ne!(*revision(&live, "slow"), *compiling[0].revision);
    assert!(live.compiling().is_empty());
}
