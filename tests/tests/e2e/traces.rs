//! OpenTelemetry traces end to end (`colloquy serve --otlp-endpoint`): the exporter the
//! `colloquy` binary installs ([`TraceExport::install`]) posts OTLP/HTTP protobuf to a
//! collector written here on a loopback port, which decodes each batch with
//! `opentelemetry-proto`. Checked: a request's server span takes the caller's
//! `traceparent` as its parent; the engine step, the hook call and the store commit sit
//! below it with the conversation's id, template and revision; a later message's step links
//! to the step its conversation started in; and one trace runs across two engines, an A2A
//! call from engine A carrying it into engine B's server span, and a webhook carrying it to
//! its receiver.
//!
//! The exporter is the process's global `tracing` subscriber, installed once for this test
//! binary: other tests' servers export into the same collector while it is installed, so
//! each test here reads only the traces it started (a trace id of its own in the
//! `traceparent` it sends).

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use colloquy_hooks::{HookRuntime, HookRuntimeConfig};
use colloquy_policy::{CompiledTemplate, TemplateCompiler};
use colloquy_server::trace_export::{ExportHandle, OtlpProtocol, TraceExport, traces_url};
use colloquy_server::{Identity, ServiceOptions};
use colloquy_tests::http::{ADMIN_TOKEN, STEP, Server, call, identity};
use colloquy_tests::templates_dir;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use prost::Message as _;
use reqwest::Method;
use serde_json::json;
use tokio::net::TcpListener;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The collector every test here reads, and the exporter feeding it.
struct Collector {
    spans: Arc<Mutex<Vec<Span>>>,
    exporter: ExportHandle,
}

/// Starts the collector and installs the exporter, once for the test binary. Before any
/// server of these tests starts: a server adds its request spans only when traces are
/// exported.
fn collector() -> &'static Collector {
    static COLLECTOR: OnceLock<Collector> = OnceLock::new();
    COLLECTOR.get_or_init(|| {
        let (url, spans) = serve_collector();
        let export = TraceExport {
            endpoint: traces_url(&url).expect("a loopback URL"),
            protocol: OtlpProtocol::Protobuf,
            sample_ratio: 1.0,
        };
        let (layer, exporter) = export.install().expect("the exporter is built");
        tracing_subscriber::registry()
            .with(layer)
            .try_init()
            .expect("no other test of this binary sets a global subscriber");
        Collector { spans, exporter }
    })
}

/// An OTLP/HTTP collector on its own thread (it outlives each test's runtime): every span
/// posted to `/v1/traces` is kept.
fn serve_collector() -> (String, Arc<Mutex<Vec<Span>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let kept = spans.clone();
    let (bound, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("the collector's runtime");
        runtime.block_on(async move {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
            bound
                .send(listener.local_addr().expect("address"))
                .expect("the test waits for the address");
            let app = axum::Router::new().route(
                "/v1/traces",
                post(move |body: Bytes| {
                    let kept = kept.clone();
                    async move {
                        let batch = ExportTraceServiceRequest::decode(body)
                            .expect("the exporter posts protobuf");
                        let mut spans = kept.lock().expect("not poisoned");
                        for resource in batch.resource_spans {
                            for scope in resource.scope_spans {
                                spans.extend(scope.spans);
                            }
                        }
                        ([("content-type", "application/x-protobuf")], Vec::new())
                    }
                }),
            );
            axum::serve(listener, app)
                .await
                .expect("the collector serves");
        });
    });
    let address = address.recv().expect("the collector binds");
    (format!("http://{address}"), spans)
}

/// A trace id of this test's own (32 hex digits, never all zero).
fn new_trace_id() -> String {
    colloquy_core::engine::new_id().replace('-', "")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// The spans of `trace_id` once `complete` holds of them, flushing the exporter between
/// looks; fails the test after [`STEP`].
async fn trace_once(trace_id: &str, complete: impl Fn(&[Span]) -> bool) -> Vec<Span> {
    let collector = collector();
    let deadline = Instant::now() + STEP;
    loop {
        tokio::task::spawn_blocking(|| collector.exporter.flush())
            .await
            .expect("the flush ran")
            .expect("the exporter flushes");
        let spans: Vec<Span> = (collector.spans.lock().expect("not poisoned").iter())
            .filter(|span| hex(&span.trace_id) == trace_id)
            .cloned()
            .collect();
        if complete(&spans) {
            return spans;
        }
        assert!(
            Instant::now() < deadline,
            "trace {trace_id} incomplete after {STEP:?}: {:#?}",
            summary(&spans)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Names, ids and parents, for failure messages.
fn summary(spans: &[Span]) -> Vec<String> {
    spans
        .iter()
        .map(|span| {
            format!(
                "{} {} <- {}",
                span.name,
                hex(&span.span_id),
                hex(&span.parent_span_id)
            )
        })
        .collect()
}

/// An attribute's value as text (numbers too), if the span has it.
fn attribute(span: &Span, key: &str) -> Option<String> {
    let value = span.attributes.iter().find(|kv| kv.key == key)?;
    match value.value.as_ref()?.value.as_ref()? {
        any_value::Value::StringValue(text) => Some(text.clone()),
        any_value::Value::IntValue(number) => Some(number.to_string()),
        any_value::Value::BoolValue(flag) => Some(flag.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn find(spans: &[Span], what: impl Fn(&Span) -> bool) -> Option<&Span> {
    spans.iter().find(|span| what(span))
}

/// The one span `what` picks; fails with the trace when there is none.
fn the<'a>(spans: &'a [Span], label: &str, what: impl Fn(&Span) -> bool) -> &'a Span {
    find(spans, what).unwrap_or_else(|| panic!("no {label} in {:#?}", summary(spans)))
}

fn named(name: &'static str) -> impl Fn(&Span) -> bool {
    move |span| span.name == name
}

/// Whether `span` is `ancestor` or below it in `spans`.
fn descends_from(spans: &[Span], span: &Span, ancestor: &Span) -> bool {
    let mut current = span;
    for _ in 0..spans.len() + 1 {
        if current.span_id == ancestor.span_id {
            return true;
        }
        match find(spans, |parent| parent.span_id == current.parent_span_id) {
            Some(parent) => current = parent,
            None => return false,
        }
    }
    false
}

/// fipa-request as `traced-request`, with an `on_message` hook: a core module written in
/// WAT here, which says so in its `producers` section, answering `continue`.
fn hooked_template(dir: &std::path::Path) -> CompiledTemplate {
    let output = r#"{"actions":["continue"]}"#;
    let escaped: String = output.bytes().map(|byte| format!("\\{byte:02x}")).collect();
    let wat = format!(
        r#"(module
  (@producers (language "wat" ""))
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (data (i32.const 0) "{escaped}")
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
    (local $at i32)
    (local.set $at (global.get $heap))
    (global.set $heap (i32.add (global.get $heap) (local.get 3)))
    (local.get $at))
  (func (export "message") (param i32 i32) (result i32)
    (i32.store (i32.const 2048) (i32.const 0))
    (i32.store (i32.const 2052) (i32.const {len}))
    (i32.const 2048))
  (func (export "cabi_post_message") (param i32) (global.set $heap (i32.const 4096))))"#,
        len = output.len()
    );
    let module = wat::parse_str(&wat).expect("the hook's WAT");
    std::fs::write(dir.join("hook.wasm"), module).expect("write the module");
    let yaml = std::fs::read_to_string(templates_dir().join("fipa-request.yaml"))
        .expect("fipa-request.yaml")
        .replace("name: fipa-request", "name: traced-request");
    let yaml = format!(
        "{yaml}\n  hooks:\n    module: hook.wasm\n    events: [on_message]\n    failure_policy: fail_closed\n"
    );
    let file = dir.join("traced-request.yaml");
    std::fs::write(&file, yaml).expect("write the template");
    TemplateCompiler::new()
        .compile_file(&file)
        .unwrap_or_else(|diagnostics| panic!("traced-request does not compile:\n{diagnostics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_is_one_trace_from_its_server_span_to_hook_call_and_store_commit() {
    collector();
    let scratch = tempfile::tempdir().expect("scratch dir");
    let runtime = HookRuntime::new(HookRuntimeConfig {
        cache_dir: None,
        ..HookRuntimeConfig::default()
    })
    .expect("hook runtime");
    let server = Server::with_options(
        vec![hooked_template(scratch.path())],
        ServiceOptions {
            identity: identity(&[]),
            hooks: Some(Arc::new(runtime)),
            ..ServiceOptions::default()
        },
    )
    .await;

    // The start, in a trace the caller began (its span 00f067aa0ba902b7).
    let started_in = new_trace_id();
    let (status, view) = call(
        server
            .as_agent(Method::POST, "/v1/conversations", "alice")
            .header(
                "traceparent",
                format!("00-{started_in}-00f067aa0ba902b7-01"),
            )
            .json(&json!({"template": "traced-request", "participants": ["bob"]})),
    )
    .await;
    assert_eq!(status, 201, "{view}");
    let id = view["id"].as_str().expect("an id").to_owned();
    // A message, in another trace of the caller's.
    let sent_in = new_trace_id();
    let path = format!("/v1/conversations/{id}/messages");
    let (status, receipt) = call(
        server
            .as_agent(Method::POST, &path, "alice")
            .header("traceparent", format!("00-{sent_in}-b7ad6b7169203331-01"))
            .json(&json!({"performative": "request", "to": ["bob"], "content": {"task": "ship"}})),
    )
    .await;
    assert_eq!(status, 202, "{receipt}");

    let start = trace_once(&started_in, |spans| {
        find(spans, named("store commit")).is_some()
            && find(spans, |span| span.kind == SpanKind::Server as i32).is_some()
    })
    .await;
    let server_span = the(&start, "server span", |span| {
        span.kind == SpanKind::Server as i32
    });
    assert_eq!(server_span.name, "POST /v1/conversations");
    assert_eq!(hex(&server_span.parent_span_id), "00f067aa0ba902b7");
    assert_eq!(
        attribute(server_span, "http.request.method").as_deref(),
        Some("POST")
    );
    assert_eq!(
        attribute(server_span, "http.route").as_deref(),
        Some("/v1/conversations")
    );
    assert_eq!(
        attribute(server_span, "url.path").as_deref(),
        Some("/v1/conversations")
    );
    assert_eq!(
        attribute(server_span, "server.address").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        attribute(server_span, "http.response.status_code").as_deref(),
        Some("201")
    );
    let step = the(&start, "engine step", named("engine step"));
    assert!(
        descends_from(&start, step, server_span),
        "{:#?}",
        summary(&start)
    );
    assert_eq!(attribute(step, "colloquy.step").as_deref(), Some("start"));
    assert_eq!(
        attribute(step, "colloquy.conversation.id"),
        Some(id.clone())
    );
    assert_eq!(
        attribute(step, "colloquy.template").as_deref(),
        Some("traced-request")
    );
    assert!(attribute(step, "colloquy.template.revision").is_some_and(|r| !r.is_empty()));
    let commit = the(&start, "store commit", named("store commit"));
    assert_eq!(commit.parent_span_id, step.span_id);
    assert_eq!(
        attribute(commit, "colloquy.conversation.id"),
        Some(id.clone())
    );
    // The start runs no hook (the hook is on_message only).
    assert!(find(&start, named("hook call")).is_none());

    let message = trace_once(&sent_in, |spans| {
        find(spans, named("store commit")).is_some()
            && find(spans, named("hook call")).is_some()
            && find(spans, |span| span.kind == SpanKind::Server as i32).is_some()
    })
    .await;
    let server_span = the(&message, "server span", |span| {
        span.kind == SpanKind::Server as i32
    });
    assert_eq!(server_span.name, "POST /v1/conversations/{id}/messages");
    assert_eq!(hex(&server_span.parent_span_id), "b7ad6b7169203331");
    assert_eq!(attribute(server_span, "url.path"), Some(path.clone()));
    assert_eq!(
        attribute(server_span, "http.response.status_code").as_deref(),
        Some("202")
    );
    let message_step = the(&message, "engine step", named("engine step"));
    assert!(descends_from(&message, message_step, server_span));
    assert_eq!(
        attribute(message_step, "colloquy.step").as_deref(),
        Some("message")
    );
    assert_eq!(
        attribute(message_step, "colloquy.template").as_deref(),
        Some("traced-request")
    );
    // The message's step links to the step its conversation started in.
    assert!(
        message_step
            .links
            .iter()
            .any(|link| hex(&link.trace_id) == started_in && link.span_id == step.span_id),
        "links: {:?}",
        message_step.links
    );
    let hook = the(&message, "hook call", named("hook call"));
    assert_eq!(hook.parent_span_id, message_step.span_id);
    assert_eq!(
        attribute(hook, "colloquy.hook.event").as_deref(),
        Some("on_message")
    );
    assert_eq!(
        attribute(hook, "colloquy.hook.module_kind").as_deref(),
        Some("core module")
    );
    assert_eq!(
        attribute(hook, "colloquy.hook.language").as_deref(),
        Some("wat")
    );
    assert_eq!(
        attribute(hook, "colloquy.hook.outcome").as_deref(),
        Some("ok")
    );
    assert_eq!(
        attribute(hook, "colloquy.template").as_deref(),
        Some("traced-request")
    );
    assert_eq!(
        attribute(hook, "colloquy.conversation.id"),
        Some(id.clone())
    );
    let commit = the(&message, "store commit", named("store commit"));
    assert_eq!(commit.parent_span_id, message_step.span_id);
}

/// Receives webhook POSTs on a loopback port and keeps each one's `traceparent`.
async fn webhook_receiver() -> (String, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |headers: HeaderMap| {
            let kept = kept.clone();
            async move {
                let traceparent = headers
                    .get("traceparent")
                    .and_then(|value| value.to_str().ok())
                    .unwrap_or("")
                    .to_owned();
                kept.lock().expect("not poisoned").push(traceparent);
                "ok"
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("address"));
    tokio::spawn(async move {
        axum::serve(listener, app)
            .await
            .expect("the receiver serves");
    });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_trace_runs_across_two_engines_and_a_webhook() {
    collector();
    let (hook_url, traceparents) = webhook_receiver().await;
    // Engine B, whose agent dave engine A's carol is (an A2A agent): A calls as alice.
    let b = Server::start().await;
    let agents = format!(
        "admin_token: {ADMIN_TOKEN}\n\
         agents:\n  \
           - id: alice\n    token: alice-token\n  \
           - id: bob\n    token: bob-token\n    webhook: \"{hook_url}\"\n  \
           - id: carol\n    a2a: \"{}/a2a/dave\"\n    a2a_token: alice-token\n",
        b.url
    );
    let a = Server::with(
        Identity::from_yaml(&agents, "traced agents").unwrap_or_else(|error| panic!("{error}")),
        Vec::new(),
    )
    .await;

    // Both conversations start in one trace of alice's: one asks bob (a webhook), one
    // carol (engine B, over A2A).
    let trace_id = new_trace_id();
    let mut conversations = Vec::new();
    for (agent, client_span) in [("bob", "1111111111111111"), ("carol", "2222222222222222")] {
        let (status, view) = call(
            a.as_agent(Method::POST, "/v1/conversations", "alice")
                .header("traceparent", format!("00-{trace_id}-{client_span}-01"))
                .json(&json!({
                    "template": "fipa-request",
                    "participants": [agent],
                    "message": {"performative": "request", "to": [agent], "content": {"task": "ship"}}
                })),
        )
        .await;
        assert_eq!(status, 201, "{view}");
        conversations.push(view["id"].as_str().expect("an id").to_owned());
    }
    let a2a_call = |span: &Span| {
        span.kind == SpanKind::Client as i32
            && attribute(span, "rpc.system").as_deref() == Some("jsonrpc")
    };
    let on_b = |spans: &[Span], call: &Span| {
        find(spans, |span| {
            span.kind == SpanKind::Server as i32 && span.parent_span_id == call.span_id
        })
        .is_some()
    };
    let card_get = |span: &Span| {
        span.name == "GET"
            && span.kind == SpanKind::Client as i32
            && attribute(span, "url.path").is_some_and(|path| path.ends_with("agent-card.json"))
    };
    let spans = trace_once(&trace_id, |spans| {
        let webhook = find(spans, |span| {
            span.name == "POST" && span.kind == SpanKind::Client as i32
        });
        let called_b = spans
            .iter()
            .filter(|span| a2a_call(span))
            .any(|call| on_b(spans, call));
        let steps = spans
            .iter()
            .filter(|span| span.name == "engine step")
            .count();
        // Engine A's two starts and engine B's.
        webhook.is_some() && called_b && steps >= 3 && find(spans, card_get).is_some()
    })
    .await;

    // Engine A's start of each conversation: its step, below the server span whose parent
    // is alice's span.
    let step_of = |conversation: &str| {
        the(&spans, "start step", |span| {
            span.name == "engine step"
                && attribute(span, "colloquy.conversation.id").as_deref() == Some(conversation)
                && attribute(span, "colloquy.step").as_deref() == Some("start")
        })
    };
    let (to_bob, to_carol) = (step_of(&conversations[0]), step_of(&conversations[1]));

    // The webhook POST to bob's receiver: a client span below the start, whose context is
    // the `traceparent` the receiver got.
    let webhook = the(&spans, "webhook span", |span| {
        span.name == "POST" && span.kind == SpanKind::Client as i32
    });
    assert_eq!(webhook.parent_span_id, to_bob.span_id);
    assert_eq!(attribute(webhook, "colloquy.agent").as_deref(), Some("bob"));
    assert_eq!(
        attribute(webhook, "colloquy.conversation.id"),
        Some(conversations[0].clone())
    );
    assert_eq!(
        attribute(webhook, "http.response.status_code").as_deref(),
        Some("200")
    );
    let expected = format!("00-{trace_id}-{}-01", hex(&webhook.span_id));
    assert!(
        traceparents
            .lock()
            .expect("not poisoned")
            .contains(&expected),
        "the receiver got {:?}, not {expected}",
        traceparents.lock().expect("not poisoned")
    );

    // The A2A call to engine B, in alice's trace (the bridge span between it and carol's
    // start stays open while engine A follows the task dave has not answered, so it is not
    // exported yet); on engine B, the server span of `/a2a/{agent}` is the call's child, and
    // B's engine step of the conversation it starts is below that.
    let call = spans
        .iter()
        .filter(|span| a2a_call(span))
        .find(|call| on_b(&spans, call))
        .expect("an A2A call engine B answered");
    assert!(
        ["message/send", "SendMessage", "SendStreamingMessage"]
            .contains(&attribute(call, "rpc.method").as_deref().unwrap_or("")),
        "{:?}",
        call.attributes
    );
    assert_eq!(
        attribute(call, "server.address").as_deref(),
        Some("127.0.0.1")
    );
    assert_eq!(
        attribute(call, "http.response.status_code").as_deref(),
        Some("200")
    );
    assert!(!call.parent_span_id.is_empty());
    let on_engine_b = the(&spans, "engine B's server span", |span| {
        span.kind == SpanKind::Server as i32 && span.parent_span_id == call.span_id
    });
    assert_eq!(on_engine_b.name, "POST /a2a/{agent}");
    assert_eq!(
        attribute(on_engine_b, "url.path").as_deref(),
        Some("/a2a/dave")
    );
    let b_step = the(&spans, "engine B's step", |span| {
        span.name == "engine step"
            && attribute(span, "colloquy.step").as_deref() == Some("start")
            && !conversations
                .contains(&attribute(span, "colloquy.conversation.id").unwrap_or_default())
    });
    assert!(
        descends_from(&spans, b_step, on_engine_b),
        "{:#?}",
        summary(&spans)
    );
    assert_ne!(b_step.span_id, to_carol.span_id);

    // Before its first call the bridge read dave's card: a client GET in the same trace,
    // whose `traceparent` engine B's server span for the card took as its parent.
    let card = the(&spans, "the card GET", card_get);
    assert_eq!(
        attribute(card, "http.response.status_code").as_deref(),
        Some("200")
    );
    let served = the(&spans, "engine B's card span", |span| {
        span.kind == SpanKind::Server as i32 && span.parent_span_id == card.span_id
    });
    assert!(served.name.starts_with("GET"), "{}", served.name);
}

/// A2A push notifications are client spans in the trace of the request that started the
/// task, and carry it to the client's webhook as `traceparent`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_push_notifications_carry_the_tasks_trace() {
    collector();
    let (hook_url, traceparents) = webhook_receiver().await;
    let server = Server::with_options(
        Vec::new(),
        ServiceOptions {
            identity: identity(&[]),
            a2a: colloquy_server::a2a::Settings {
                template: "a2a-task".to_owned(),
                push_allow_private: true,
                ..colloquy_server::a2a::Settings::default()
            },
            ..ServiceOptions::default()
        },
    )
    .await;
    // bob answers the task's request at once, which completes it.
    let bob = server.client("bob").await;
    let answering = tokio::spawn(async move {
        loop {
            let page = bob.poll_inbox(0, 1_000).await.expect("bob's inbox");
            if let Some(item) = page.items.first() {
                let answer = colloquy_protocol::SendMessage::new("inform", json!("booked"))
                    .in_reply_to(item.message.id.to_string())
                    .to([item.message.sender.to_string()]);
                bob.send(&item.conversation_id, &answer)
                    .await
                    .expect("bob informs");
                return;
            }
        }
    });
    let trace_id = new_trace_id();
    let (status, answer) = call(
        server
            .as_agent(Method::POST, "/a2a/bob", "alice")
            .header("A2A-Version", "1.0")
            .header("traceparent", format!("00-{trace_id}-3333333333333333-01"))
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {
                "message": {"messageId": "traced-push-1", "role": "ROLE_USER",
                            "parts": [{"text": "book a room"}]},
                "configuration": {"taskPushNotificationConfig": {"id": "hook-1", "url": hook_url}}
            }})),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("error").is_none(), "{answer:#}");
    tokio::time::timeout(STEP, answering)
        .await
        .expect("bob answered in time")
        .expect("bob's task");

    let push_of = |span: &Span| {
        span.name == "POST"
            && span.kind == SpanKind::Client as i32
            && attribute(span, "url.full").is_none()
            && attribute(span, "colloquy.agent").as_deref() == Some("alice")
    };
    let spans = trace_once(&trace_id, |spans| find(spans, push_of).is_some()).await;
    let push = the(&spans, "push span", push_of);
    let start = the(&spans, "the task's start step", |span| {
        span.name == "engine step" && attribute(span, "colloquy.step").as_deref() == Some("start")
    });
    assert_eq!(push.parent_span_id, start.span_id, "{:#?}", summary(&spans));
    assert_eq!(
        attribute(push, "http.response.status_code").as_deref(),
        Some("200")
    );
    let expected = format!("00-{trace_id}-{}-01", hex(&push.span_id));
    let deadline = Instant::now() + STEP;
    while !traceparents
        .lock()
        .expect("not poisoned")
        .contains(&expected)
    {
        assert!(
            Instant::now() < deadline,
            "the webhook got {:?}, not {expected}",
            traceparents.lock().expect("not poisoned")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The origin is kept with the conversation (its `started` event's `trace`): a message
/// another engine node sharing the store serves (here: a second server on the same store,
/// which has never seen the conversation) links to the step the conversation started in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_node_links_a_later_message_to_where_the_conversation_started() {
    collector();
    let store: Arc<dyn colloquy_core::store::ConversationStore> =
        Arc::new(colloquy_core::store::MemoryStore::new());
    let node = || ServiceOptions {
        identity: identity(&[]),
        store: Some(store.clone()),
        ..ServiceOptions::default()
    };
    let (a, b) = (
        Server::with_options(Vec::new(), node()).await,
        Server::with_options(Vec::new(), node()).await,
    );
    let started_in = new_trace_id();
    let (status, view) = call(
        a.as_agent(Method::POST, "/v1/conversations", "alice")
            .header(
                "traceparent",
                format!("00-{started_in}-4444444444444444-01"),
            )
            .json(&json!({"template": "fipa-request", "participants": ["bob"],
                          "message": {"performative": "request", "content": {"task": "x"}}})),
    )
    .await;
    assert_eq!(status, 201, "{view}");
    let id = view["id"].as_str().expect("an id").to_owned();
    let start = trace_once(&started_in, |spans| {
        find(spans, named("engine step")).is_some()
    })
    .await;
    let start_step = the(&start, "start step", named("engine step"));

    let sent_in = new_trace_id();
    let (status, receipt) = call(
        b.as_agent(
            Method::POST,
            &format!("/v1/conversations/{id}/messages"),
            "bob",
        )
        .header("traceparent", format!("00-{sent_in}-5555555555555555-01"))
        .json(&json!({"performative": "agree"})),
    )
    .await;
    assert_eq!(status, 202, "{receipt}");
    let message = trace_once(&sent_in, |spans| {
        find(spans, named("engine step")).is_some()
    })
    .await;
    let message_step = the(&message, "message step on node b", named("engine step"));
    assert!(
        message_step
            .links
            .iter()
            .any(|link| hex(&link.trace_id) == started_in && link.span_id == start_step.span_id),
        "links: {:?}",
        message_step.links
    );
}

/// A deadline the scheduler fires is an engine step of its own (no request caused it),
/// linked to the step its conversation started in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fired_deadline_links_to_where_the_conversation_started() {
    let collector = collector();
    let server = Server::with_options(
        Vec::new(),
        ServiceOptions {
            identity: identity(&[]),
            scheduler_period: Duration::from_millis(10),
            ..ServiceOptions::default()
        },
    )
    .await;
    let started_in = new_trace_id();
    let (status, view) = call(
        server
            .as_agent(Method::POST, "/v1/conversations", "alice")
            .header(
                "traceparent",
                format!("00-{started_in}-6666666666666666-01"),
            )
            .json(
                &json!({"template": "fipa-request", "participants": ["bob"], "deadline_ms": 100,
                          "message": {"performative": "request", "content": {"task": "x"}}}),
            ),
    )
    .await;
    assert_eq!(status, 201, "{view}");
    let id = view["id"].as_str().expect("an id").to_owned();
    let start = trace_once(&started_in, |spans| {
        find(spans, named("engine step")).is_some()
    })
    .await;
    let start_step = the(&start, "start step", named("engine step"));

    let fired = |span: &Span| {
        span.name == "engine step"
            && attribute(span, "colloquy.step").as_deref() == Some("deadline")
            && attribute(span, "colloquy.conversation.id").as_deref() == Some(id.as_str())
    };
    let deadline = Instant::now() + STEP;
    let step = loop {
        tokio::task::spawn_blocking(|| collector.exporter.flush())
            .await
            .expect("the flush ran")
            .expect("the exporter flushes");
        let step = (collector.spans.lock().expect("not poisoned").iter())
            .find(|span| fired(span))
            .cloned();
        if let Some(step) = step {
            break step;
        }
        assert!(Instant::now() < deadline, "no deadline step for {id}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_ne!(hex(&step.trace_id), started_in, "a trace of its own");
    assert_eq!(
        attribute(&step, "colloquy.template").as_deref(),
        Some("fipa-request")
    );
    assert!(
        step.links
            .iter()
            .any(|link| hex(&link.trace_id) == started_in && link.span_id == start_step.span_id),
        "links: {:?}",
        step.links
    );
}
