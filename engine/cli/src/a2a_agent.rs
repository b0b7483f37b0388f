//! The demo's remote A2A agent: a translator that speaks A2A (JSON-RPC 2.0 over HTTP), not
//! Colloquy, on a loopback port of its own. The engine reaches it through its `a2a`
//! endpoint in the agents file, as it would an agent run by someone else.
//!
//! It answers `message/send` with a completed task whose one artifact is the translation,
//! or a rejected task when it knows no translation; anything else is a JSON-RPC error.

use std::convert::Infallible;

use bytes::Bytes;
use colloquy_protocol::a2a::{
    A2aMessage, Artifact, MessageSendParams, Part, Request, Response, RpcError, SendResult, Task,
    TaskStatus,
};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// What the translator knows: (text, language, translation).
const PHRASEBOOK: &[(&str, &str, &str)] = &[
    ("good morning", "de", "Guten Morgen"),
    ("good morning", "fr", "Bonjour"),
    ("thank you", "de", "Danke"),
    ("thank you", "fr", "Merci"),
];

/// Starts the translator on `127.0.0.1:0`: its A2A endpoint and the task serving it
/// (abort it to stop).
pub async fn start() -> anyhow::Result<(String, JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/", listener.local_addr()?);
    let serving = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let service = service_fn(|request: hyper::Request<Incoming>| async move {
                    let body = match request.into_body().collect().await {
                        Ok(body) => body.to_bytes(),
                        Err(_) => Bytes::new(),
                    };
                    let answer = serde_json::to_vec(&answer(&body)).unwrap_or_default();
                    let mut response = hyper::Response::new(Full::new(Bytes::from(answer)));
                    response.headers_mut().insert(
                        hyper::header::CONTENT_TYPE,
                        hyper::header::HeaderValue::from_static("application/json"),
                    );
                    Ok::<_, Infallible>(response)
                });
                // A connection that breaks off only ends itself.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Ok((url, serving))
}

/// The JSON-RPC response to one request body.
fn answer(body: &[u8]) -> Response<SendResult> {
    let error = |code, message: &str| Response {
        jsonrpc: "2.0".to_owned(),
        result: None,
        error: Some(RpcError {
            code,
            message: message.to_owned(),
            data: None,
        }),
    };
    let Ok(request) = serde_json::from_slice::<Request<Value>>(body) else {
        return error(-32700, "not a JSON-RPC request");
    };
    if request.method != "message/send" {
        return error(-32601, "this agent only takes message/send");
    }
    let Ok(params) = serde_json::from_value::<MessageSendParams>(request.params) else {
        return error(-32602, "params are not a message/send's");
    };
    Response {
        jsonrpc: "2.0".to_owned(),
        result: Some(SendResult::Task(translate(&params.message))),
        error: None,
    }
}

/// The task a request to translate `{"text": …, "to": …}` makes.
fn translate(message: &A2aMessage) -> Task {
    let asked = message.parts.iter().find_map(|part| match part {
        Part::Data { data } => Some(data),
        _ => None,
    });
    let field = |name: &str| {
        asked
            .and_then(|data| data.get(name))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let (text, to) = (field("text"), field("to"));
    let known = PHRASEBOOK
        .iter()
        .find(|(phrase, language, _)| phrase.eq_ignore_ascii_case(&text) && *language == to);
    let (state, artifacts, said) = match known {
        Some((_, _, translation)) => (
            "completed",
            vec![Artifact {
                artifact_id: Some("translation".to_owned()),
                name: Some("translation".to_owned()),
                parts: vec![Part::Data {
                    data: json!({"translation": translation, "language": to}),
                }],
            }],
            None,
        ),
        None => (
            "rejected",
            Vec::new(),
            Some(format!("no translation of {text:?} into {to:?}")),
        ),
    };
    Task {
        kind: "task".to_owned(),
        id: format!("task-{}", message.message_id),
        context_id: message.context_id.clone(),
        status: TaskStatus {
            state: state.to_owned(),
            message: said.map(|text| {
                A2aMessage::agent_text(
                    format!("status-{}", message.message_id),
                    message.context_id.clone(),
                    text,
                )
            }),
        },
        artifacts,
        metadata: None,
    }
}
