//! `colloquy mcp --server URL`: an MCP server on standard input and output (newline-delimited
//! JSON-RPC, as Claude Desktop and other hosts launch local servers) that bridges to the
//! Streamable HTTP endpoint of a running `colloquy serve`. It relays messages as they are and
//! keeps only what the HTTP transport needs between them: the legacy era's session id and
//! negotiated version, and the `Mcp-Method`/`Mcp-Name` headers of each request. The
//! identity is the agent's token (`--token` or `COLLOQUY_TOKEN`), or in open development mode
//! the agent id (`--agent` or `COLLOQUY_AGENT`). Logs go to standard error.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use futures_util::StreamExt as _;
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::sync::mpsc;

use crate::templates::rollout::TOKEN_ENV;

/// The environment variable naming the agent in open development mode.
pub const AGENT_ENV: &str = "COLLOQUY_AGENT";
/// Longest a request may take before the bridge answers it with an error itself: above the
/// longest wait a tool may ask for (`wait_for_messages`, 30 s).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// How long in-flight requests get to finish once standard input closes.
const DRAIN: Duration = Duration::from_secs(5);
/// JSON-RPC error code for an answer the bridge makes itself: the server is unreachable or
/// refused the request at the HTTP level.
const BRIDGE_ERROR: i64 = -32603;

/// Options of `colloquy mcp`.
#[derive(Debug, Args)]
pub struct McpArgs {
    /// The server (`colloquy serve`), e.g. http://127.0.0.1:7700; its MCP endpoint is `/mcp`.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:7700")]
    server: String,
    /// The agent's bearer token [default: $COLLOQUY_TOKEN].
    #[arg(long, value_name = "TOKEN")]
    token: Option<String>,
    /// In open development mode (a server without --agents): the agent to act as
    /// [default: $COLLOQUY_AGENT].
    #[arg(long, value_name = "ID")]
    agent: Option<String>,
}

/// What the bridge keeps between messages.
#[derive(Default)]
struct Session {
    /// The legacy era's `Mcp-Session-Id`, once `initialize` answered with one.
    id: Option<HeaderValue>,
    /// The version `initialize` negotiated (legacy era).
    version: Option<String>,
    /// Whether the server-to-client stream (GET) is open.
    listening: bool,
}

struct Bridge {
    http: reqwest::Client,
    endpoint: String,
    credentials: HeaderMap,
    session: Mutex<Session>,
    out: mpsc::UnboundedSender<String>,
}

/// Runs the bridge until standard input closes.
pub async fn run(args: McpArgs) -> anyhow::Result<()> {
    let mut credentials = HeaderMap::new();
    let token = args.token.or_else(|| std::env::var(TOKEN_ENV).ok());
    let agent = args.agent.or_else(|| std::env::var(AGENT_ENV).ok());
    if let Some(token) = token.filter(|token| !token.is_empty()) {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .context("the token is not a valid header value")?;
        credentials.insert(AUTHORIZATION, value);
    }
    if let Some(agent) = agent.filter(|agent| !agent.is_empty()) {
        let value =
            HeaderValue::from_str(&agent).context("the agent id is not a valid header value")?;
        credentials.insert("x-agent-id", value);
    }
    if credentials.is_empty() {
        tracing::warn!(
            "no --token ($COLLOQUY_TOKEN) nor --agent ($COLLOQUY_AGENT): the server will answer 401"
        );
    }
    let (out, mut lines) = mpsc::unbounded_channel::<String>();
    let bridge = Arc::new(Bridge {
        http: reqwest::Client::builder()
            .build()
            .context("building the HTTP client")?,
        endpoint: format!("{}/mcp", args.server.trim_end_matches('/')),
        credentials,
        session: Mutex::default(),
        out,
    });
    // One writer, so concurrent answers never interleave within a line.
    let writer = tokio::spawn(async move {
        let mut stdout = tokio::io::stdout();
        while let Some(line) = lines.recv().await {
            if stdout.write_all(line.as_bytes()).await.is_err()
                || stdout.write_all(b"\n").await.is_err()
                || stdout.flush().await.is_err()
            {
                break;
            }
        }
    });
    tracing::info!(endpoint = %bridge.endpoint, "bridging MCP over stdio");
    let mut input = BufReader::new(tokio::io::stdin()).lines();
    let mut in_flight = tokio::task::JoinSet::new();
    while let Some(line) = input.next_line().await.context("reading standard input")? {
        if line.trim().is_empty() {
            continue;
        }
        let message: Value = match serde_json::from_str(&line) {
            Ok(message) => message,
            Err(error) => {
                bridge.answer(json!({"jsonrpc": "2.0", "id": null,
                    "error": {"code": -32700, "message": format!("parse error: {error}")}}));
                continue;
            }
        };
        in_flight.spawn(bridge.clone().relay(message));
    }
    let _ = tokio::time::timeout(DRAIN, async {
        while in_flight.join_next().await.is_some() {}
    })
    .await;
    bridge.end_session().await;
    drop(bridge);
    let _ = writer.await;
    Ok(())
}

impl Bridge {
    fn answer(&self, message: Value) {
        let _ = self.out.send(message.to_string());
    }

    /// An error answer to `request` made by the bridge itself (none for a notification).
    fn fail(&self, request: &Value, message: String) {
        if let Some(id) = request.get("id") {
            self.answer(json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": BRIDGE_ERROR, "message": message}}));
        }
    }

    /// Posts one client message and relays whatever the server answers.
    async fn relay(self: Arc<Self>, message: Value) {
        let method = message["method"].as_str().unwrap_or_default().to_owned();
        let headers = self.headers_for(&message);
        let sent = self
            .http
            .post(&self.endpoint)
            .headers(headers)
            .timeout(if method == "subscriptions/listen" {
                Duration::from_secs(86_400)
            } else {
                REQUEST_TIMEOUT
            })
            .body(message.to_string())
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                tracing::warn!(%error, "the server could not be reached");
                return self.fail(
                    &message,
                    format!("the Colloquy server could not be reached: {error}"),
                );
            }
        };
        if let Some(id) = response.headers().get("mcp-session-id") {
            self.session.lock().unwrap_or_else(|e| e.into_inner()).id = Some(id.clone());
        }
        let status = response.status();
        let sse = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .is_some_and(|value| value.starts_with("text/event-stream"));
        if sse {
            self.relay_stream(response).await;
        } else {
            let body = response.bytes().await.unwrap_or_default();
            match serde_json::from_slice::<Value>(&body) {
                Ok(answer) if answer.get("jsonrpc").is_some() => {
                    self.note_initialized(&method, &answer);
                    self.answer(answer);
                }
                _ if status.is_success() => {}
                _ => {
                    let text = String::from_utf8_lossy(&body);
                    self.fail(&message, format!("HTTP {status}: {}", text.trim()));
                }
            }
        }
        if method == "notifications/initialized" {
            self.clone().listen_for_notifications();
        }
    }

    /// Relays each event of a server-sent event stream as a line.
    async fn relay_stream(&self, response: reqwest::Response) {
        let mut body = response.bytes_stream();
        let mut pending = String::new();
        while let Some(Ok(chunk)) = body.next().await {
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue;
                }
                if let Ok(message) = serde_json::from_str::<Value>(&data.join("\n")) {
                    self.answer(message);
                }
            }
        }
    }

    /// Keeps the negotiated version of a legacy `initialize` answer.
    fn note_initialized(&self, method: &str, answer: &Value) {
        if method == "initialize"
            && let Some(version) = answer["result"]["protocolVersion"].as_str()
        {
            self.session
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .version = Some(version.to_owned());
        }
    }

    /// Legacy era: opens the session's server-to-client stream (resource updates of
    /// `resources/subscribe`) once, and relays it until it ends.
    fn listen_for_notifications(self: Arc<Self>) {
        let headers = {
            let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
            if session.id.is_none() || session.listening {
                return;
            }
            session.listening = true;
            let mut headers = self.credentials.clone();
            headers.insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
            if let Some(id) = &session.id {
                headers.insert("mcp-session-id", id.clone());
            }
            if let Some(version) = session
                .version
                .as_deref()
                .and_then(|v| HeaderValue::from_str(v).ok())
            {
                headers.insert("mcp-protocol-version", version);
            }
            headers
        };
        tokio::spawn(async move {
            match self.http.get(&self.endpoint).headers(headers).send().await {
                Ok(response) if response.status().is_success() => self.relay_stream(response).await,
                Ok(response) => {
                    tracing::debug!(status = %response.status(), "no server-to-client stream")
                }
                Err(error) => tracing::debug!(%error, "no server-to-client stream"),
            }
        });
    }

    /// The headers of one POST: credentials, content negotiation, the session, the protocol
    /// version, and the standard `Mcp-Method`/`Mcp-Name` headers.
    fn headers_for(&self, message: &Value) -> HeaderMap {
        let mut headers = self.credentials.clone();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        let session = self.session.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(id) = &session.id {
            headers.insert("mcp-session-id", id.clone());
        }
        // A 2026-07-28 request names its version in `_meta`; a legacy one has the session's.
        let version = message["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"]
            .as_str()
            .or(session.version.as_deref());
        if let Some(version) = version.and_then(|v| HeaderValue::from_str(v).ok()) {
            headers.insert("mcp-protocol-version", version);
        }
        if let Some(method) = message["method"].as_str() {
            if let Ok(value) = HeaderValue::from_str(method) {
                headers.insert("mcp-method", value);
            }
            let name = match method {
                "tools/call" | "prompts/get" => message["params"]["name"].as_str(),
                "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
                    message["params"]["uri"].as_str()
                }
                _ => None,
            };
            if let Some(value) = name.and_then(|name| HeaderValue::from_str(name).ok()) {
                headers.insert("mcp-name", value);
            }
        }
        headers
    }

    /// Ends a legacy session on the server (DELETE), so it does not wait for a time-out.
    async fn end_session(&self) {
        let id = self
            .session
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .id
            .clone();
        if let Some(id) = id {
            let mut headers = self.credentials.clone();
            headers.insert("mcp-session-id", id);
            let _ = self
                .http
                .delete(&self.endpoint)
                .headers(headers)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
        }
    }
}
