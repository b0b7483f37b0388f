//! The service around the API: the OpenAPI document matches the router, health and
//! readiness, Prometheus metrics, and webhook delivery with retries.

use std::collections::BTreeSet;

use colloquy_protocol::SendMessage;
use colloquy_protocol::StartConversation;
use colloquy_server::{self as api, ops::OPENAPI};
use colloquy_tests::http::{ADMIN_TOKEN, Server, bounded, call, identity};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

fn documented() -> BTreeSet<(String, String)> {
    documented_tagged(false)
}

/// The documented operations of the policy routes (tagged `policy`), or of the engine's own.
fn documented_tagged(policy: bool) -> BTreeSet<(String, String)> {
    let document: Value = serde_json::from_str(OPENAPI).expect("the OpenAPI document is JSON");
    assert_eq!(document["openapi"], "3.1.0");
    let mut found = BTreeSet::new();
    for (path, operations) in document["paths"].as_object().expect("paths") {
        for (method, operation) in operations.as_object().expect("operations") {
            let tagged = operation["tags"]
                .as_array()
                .is_some_and(|tags| tags.iter().any(|tag| tag == "policy"));
            if tagged == policy {
                found.insert((method.clone(), path.clone()));
            }
        }
    }
    found
}

#[test]
fn the_openapi_document_lists_exactly_the_policy_routes() {
    let served: BTreeSet<(String, String)> = colloquy_server::policy::ROUTES
        .iter()
        .map(|(method, path)| ((*method).to_owned(), (*path).to_owned()))
        .collect();
    assert_eq!(documented_tagged(true), served);
}

/// The document is valid OpenAPI 3.1: it passes the OpenAPI Initiative's schema of 3.1
/// documents (`tests/fixtures/openapi-3.1.schema.json`, the 2022-10-07 edition published at
/// spec.openapis.org, Apache-2.0), so code generators and viewers can read it.
#[test]
fn the_openapi_document_is_valid_openapi_3_1() {
    let schema: Value =
        serde_json::from_str(include_str!("../../fixtures/openapi-3.1.schema.json"))
            .expect("the OpenAPI 3.1 schema is JSON");
    let validator = jsonschema::validator_for(&schema).expect("the schema compiles");
    let document: Value = serde_json::from_str(OPENAPI).expect("the document is JSON");
    let errors: Vec<String> = validator
        .iter_errors(&document)
        .map(|error| format!("{}: {error}", error.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

#[test]
fn the_openapi_document_lists_exactly_the_routes_of_the_router() {
    let served: BTreeSet<(String, String)> = api::routes()
        .into_iter()
        .map(|route| (route.method.to_owned(), route.path.to_owned()))
        .collect();
    assert_eq!(documented(), served);
}

/// `/mcp` and its protected resource metadata are left out of the document on purpose: MCP
/// is JSON-RPC over one endpoint, described by the MCP specification (and tested by its
/// conformance suite, `tests/mcp`), not by HTTP operations an OpenAPI document could list.
#[test]
fn the_mcp_routes_are_exempt_from_the_openapi_document() {
    let documented = documented();
    let mut mcp = api::mcp::routes()
        .into_iter()
        .map(|route| route.path)
        .collect::<Vec<_>>();
    mcp.push(api::mcp::PATH);
    for path in mcp {
        assert!(
            documented.iter().all(|(_, documented)| documented != path),
            "{path} is documented"
        );
    }
}

#[tokio::test]
async fn every_documented_route_is_served() {
    let server = Server::start().await;
    let (status, body) = call(server.anonymous(Method::GET, "/v1/openapi.json")).await;
    assert_eq!(status, 200);
    assert_eq!(body, serde_json::from_str::<Value>(OPENAPI).expect("JSON"));
    for (method, path) in documented() {
        // An A2A card exists only for a known agent: an unknown one is a 404 `not_found`.
        let path = path.replace("{id}", "x").replace("{agent}", "alice");
        let method = Method::from_bytes(method.to_uppercase().as_bytes()).expect("method");
        let response = bounded(
            server
                .anonymous(method.clone(), &path)
                .bearer_auth(ADMIN_TOKEN)
                .send(),
        )
        .await
        .expect("sent");
        let status = response.status().as_u16();
        assert_ne!(status, 405, "{method} {path}");
        if status == 404 {
            let body: Value = bounded(response.json()).await.expect("JSON error");
            assert_ne!(
                body["error"]["code"], "not_found",
                "{method} {path} has no route"
            );
        }
    }
}

#[tokio::test]
async fn health_readiness_and_metrics() {
    let server = Server::start().await;
    let (status, body) = call(server.anonymous(Method::GET, "/healthz")).await;
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    let (status, body) = call(server.anonymous(Method::GET, "/readyz")).await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ready");
    assert!(
        body["templates"]
            .as_array()
            .is_some_and(|t| t.contains(&json!("fipa-request")))
    );

    let carol = server.client("carol").await;
    let view = bounded(carol.start(&StartConversation {
        template: "fipa-query".into(),
        participants: vec!["dave".into()],
        message: Some(SendMessage::new("query-ref", json!({"ref": "x"}))),
        ..StartConversation::default()
    }))
    .await
    .expect("started");
    let dave = server.client("dave").await;
    let refused = bounded(dave.send(&view.id, &SendMessage::new("shrug", json!({})))).await;
    assert_eq!(refused.err().and_then(|e| e.status()), Some(422));
    bounded(dave.send(&view.id, &SendMessage::new("inform", json!({"value": 1}))))
        .await
        .expect("answered");
    let text = server.metrics().await;
    for line in [
        "colloquy_messages_total{template=\"fipa-query\",performative=\"query-ref\",result=\"accepted\"} 1",
        "colloquy_messages_total{template=\"fipa-query\",performative=\"inform\",result=\"accepted\"} 1",
        "colloquy_messages_total{template=\"fipa-query\",performative=\"unknown\",result=\"unknown_performative\"} 1",
        "colloquy_conversations_completed_total{template=\"fipa-query\",outcome=\"success\"} 1",
        "colloquy_live_conversations 1",
        "colloquy_inbox_expired_total 0",
        "# TYPE colloquy_violations_total counter",
    ] {
        assert!(text.contains(line), "missing `{line}` in:\n{text}");
    }
}

/// A webhook receiver: answers the first request 500, the rest 204, and hands each
/// accepted body over.
async fn webhook_receiver() -> (String, mpsc::UnboundedReceiver<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut first = true;
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let mut buffer = Vec::new();
            loop {
                let Some(head_end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                    let mut chunk = [0u8; 4096];
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                    }
                    continue;
                };
                let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
                let length: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                if buffer.len() < head_end + 4 + length {
                    let mut chunk = [0u8; 4096];
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                    }
                    continue;
                }
                let body: Vec<u8> = buffer
                    .drain(..head_end + 4 + length)
                    .skip(head_end + 4)
                    .collect();
                let answer: &[u8] = if first {
                    first = false;
                    b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n"
                } else {
                    let _ = tx.send(serde_json::from_slice(&body).unwrap_or(Value::Null));
                    b"HTTP/1.1 204 No Content\r\n\r\n"
                };
                if socket.write_all(answer).await.is_err() {
                    break;
                }
            }
        }
    });
    (url, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhooks_receive_every_message_in_order_after_retries() {
    let (url, mut pushed) = webhook_receiver().await;
    let server = Server::with(identity(&[("dave", url)]), Vec::new()).await;
    let carol = server.client("carol").await;
    for n in 1..=3 {
        bounded(carol.start(&StartConversation {
            template: "fipa-query".into(),
            participants: vec!["dave".into()],
            message: Some(SendMessage::new("query-ref", json!({"ref": n}))),
            ..StartConversation::default()
        }))
        .await
        .expect("started");
    }
    let mut refs = Vec::new();
    for _ in 1..=3 {
        let item = bounded(pushed.recv()).await.expect("pushed");
        assert_eq!(item["template"], "fipa-query");
        refs.push(item["message"]["content"]["ref"].as_u64());
    }
    assert_eq!(
        refs,
        [Some(1), Some(2), Some(3)],
        "the refused first push was retried"
    );
    let metrics = server.metrics().await;
    assert!(
        metrics.contains("colloquy_webhook_deliveries_total{result=\"retried\"} 1"),
        "{metrics}"
    );
}
