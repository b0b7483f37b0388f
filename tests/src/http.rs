//! Harness for the HTTP scenarios: a real `colloquy` service on `127.0.0.1:0` over the
//! built-in templates (plus fixtures), with an agents file or in open mode, and helpers for
//! raw requests.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use colloquy_policy::{Catalog, CompiledTemplate};
use colloquy_sdk::Client;
use colloquy_server::{self as api, Identity, RunningService, ServiceOptions};
use tokio::net::TcpListener;

use crate::builtin_templates;

/// Longest any one HTTP scenario step may take; a hang fails the test instead of the run.
pub const STEP: Duration = Duration::from_secs(20);

/// The agents every token-mode server knows; each one's token is `<id>-token`.
pub const AGENTS: &[&str] = &[
    "alice", "bob", "carol", "dave", "buyer", "acme", "globex", "initech", "mallory",
];
/// The admin token of token-mode servers.
pub const ADMIN_TOKEN: &str = "admin-token";

/// Runs `future`, failing the test if it takes longer than [`STEP`].
pub async fn bounded<F: Future>(future: F) -> F::Output {
    match tokio::time::timeout(STEP, future).await {
        Ok(output) => output,
        Err(_) => panic!("step did not finish within {STEP:?}"),
    }
}

/// A running service.
pub struct Server {
    /// The service (dropping it stops it).
    pub service: RunningService,
    /// `http://127.0.0.1:port`.
    pub url: String,
    /// Whether callers authenticate with tokens.
    pub tokens: bool,
}

/// The identity of token-mode servers: [`AGENTS`] with `<id>-token`, webhooks as given.
pub fn identity(webhooks: &[(&str, String)]) -> Identity {
    let mut yaml = format!("admin_token: {ADMIN_TOKEN}\nagents:\n");
    for agent in AGENTS {
        yaml.push_str(&format!("  - id: {agent}\n    token: {agent}-token\n"));
        if let Some((_, url)) = webhooks.iter().find(|(who, _)| who == agent) {
            yaml.push_str(&format!("    webhook: \"{url}\"\n"));
        }
    }
    Identity::from_yaml(&yaml, "agents fixture").unwrap_or_else(|error| panic!("{error}"))
}

impl Server {
    /// A server in token mode over the built-in templates.
    pub async fn start() -> Server {
        Server::with(identity(&[]), Vec::new()).await
    }

    /// A server in open development mode over the built-in templates.
    pub async fn open() -> Server {
        Server::with(Identity::Open, Vec::new()).await
    }

    /// A server with this identity and these extra templates.
    pub async fn with(identity: Identity, extra: Vec<CompiledTemplate>) -> Server {
        Server::with_options(
            extra,
            ServiceOptions {
                identity,
                // Deadlines in these scenarios are short; check them often.
                scheduler_period: Duration::from_millis(10),
                ..ServiceOptions::default()
            },
        )
        .await
    }

    /// A server with these extra templates and options.
    pub async fn with_options(extra: Vec<CompiledTemplate>, options: ServiceOptions) -> Server {
        let tokens = matches!(options.identity, Identity::Tokens { .. });
        let catalog = Catalog::new(builtin_templates().into_iter().chain(extra).map(Arc::new));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a loopback port");
        let service = api::launch(catalog, listener, options).expect("service starts");
        let url = service.url();
        Server {
            service,
            url,
            tokens,
        }
    }

    /// An SDK client for `agent` (with its token in token mode).
    pub async fn client(&self, agent: &str) -> Client {
        let token = format!("{agent}-token");
        let token = self.tokens.then_some(token.as_str());
        bounded(Client::connect(&self.url, agent, token))
            .await
            .unwrap_or_else(|error| panic!("connect {agent}: {error}"))
    }

    /// A raw request as `agent` (bearer token or `X-Agent-Id`, by mode).
    pub fn as_agent(
        &self,
        method: reqwest::Method,
        path: &str,
        agent: &str,
    ) -> reqwest::RequestBuilder {
        let builder = raw().request(method, format!("{}{path}", self.url));
        if self.tokens {
            builder.bearer_auth(format!("{agent}-token"))
        } else {
            builder.header("x-agent-id", agent)
        }
    }

    /// The `/metrics` text.
    pub async fn metrics(&self) -> String {
        let response = bounded(self.anonymous(reqwest::Method::GET, "/metrics").send())
            .await
            .expect("metrics sent");
        bounded(response.text()).await.expect("metrics text")
    }

    /// A raw request without credentials.
    pub fn anonymous(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        raw().request(method, format!("{}{path}", self.url))
    }
}

/// A plain HTTP client.
pub fn raw() -> reqwest::Client {
    reqwest::Client::new()
}

/// Sends a request and returns its status and JSON body (`null` when the body is not JSON).
pub async fn call(request: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let response = bounded(request.send()).await.expect("request sent");
    let status = response.status().as_u16();
    let bytes = bounded(response.bytes()).await.expect("body read");
    let body = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, body)
}
