//! Colloquy's HTTP service: the API under `/v1`, the A2A endpoints under `/a2a`, streams,
//! webhooks and the inspector (axum). The only crate that names axum.
//!
//! # Layout
//! - [`router`]: every route, as a function of the shared [`AppState`].
//! - [`error`]: [`ApiError`], the one error type, mapping failures to status codes.
//! - [`extract`]: JSON bodies and query strings whose failures say where they are wrong.
//! - [`json`]: JSON response bodies, serialized into one right-sized buffer.
//! - [`auth`]: who the caller is (bearer tokens from an agents file, JWTs of an identity
//!   provider verified against its JWKS, or open mode).
//! - [`conversations`]: start, send, read and list conversations.
//! - [`signatures`]: signed messages checked against their senders' keys.
//! - [`agent_keys`]: those keys: the agents file's, registered by the administrator, bound
//!   to a JWT by `cnf`.
//! - [`audit`]: a conversation's audit record, signed with the engine's audit key, and
//!   that key's public half.
//! - [`streams`]: server-sent event streams (conversation events, agent inboxes) and the
//!   long-poll inbox.
//! - [`a2a`]: the A2A endpoints (`/a2a/{agent}`): Colloquy agents served to A2A clients,
//!   push notifications; the router mounts them.
//! - [`delivery`]: push delivery of inbox messages: webhooks, and remote A2A agents through
//!   `colloquy_a2a`'s outward bridge.
//! - [`agents`]: the agents a caller may see, with their inbox streams and depth.
//! - [`acks`]: inbox acknowledgements, which let the store delete handled entries.
//! - [`commitments`]: listing, releasing and cancelling commitments.
//! - [`ops`]: `/healthz`, `/readyz`, `/metrics` and `/v1/openapi.json`.
//! - [`policy`]: the policy manager's API (templates, uploads, change feed, status), served
//!   alone or merged into this service.
//! - [`ownership`]: several nodes sharing a store, each conversation served by the node
//!   holding its partition's lease; requests forwarded there.
//! - [`server`]: putting it together: engine, scheduler, webhooks, listener.
//! - [`listen`]: the accept loop of every server here (HTTP/1.1, a deadline for request
//!   heads, graceful shutdown).
//! - [`inspect`]: the web inspector's page and assets at `/inspect` (`docs/inspector.md`).
//! - [`echo`]: the JSON echo server the HTTP benchmark measures as its baseline.
//! - [`trace_export`]: exporting traces over OTLP/HTTP (`--otlp-endpoint`).
//! - [`request_spans`]: server spans per request and webhook client spans, with W3C trace
//!   context read and sent (only while traces are exported).
//!
//! # Dependencies
//! The core (the engine and its traits), the hook runtime, the store backends (to open the
//! one `--store` names) and the A2A bridge. Only the `colloquy` binary sits above it.

pub mod a2a;
pub mod acks;
pub mod agent_keys;
pub mod agents;
pub mod audit;
pub mod auth;
pub mod commitments;
pub mod conversations;
pub mod delivery;
pub mod echo;
pub mod error;
pub mod extract;
pub mod inspect;
pub mod json;
pub mod listen;
pub mod mcp;
pub mod ops;
pub mod ownership;
pub mod policy;
pub mod request_spans;
pub mod rollout;
pub mod server;
pub mod signatures;
pub mod streams;
pub mod trace_export;

#[cfg(test)]
mod policy_reload_tests;

use std::sync::Arc;

use axum::Router;
use axum::routing::{MethodRouter, get, post};
use tokio::sync::watch;

pub use auth::{Caller, Identity};
pub use error::ApiError;
pub use server::{RunningService, ServiceOptions, launch};

use colloquy_core::engine::Engine;
use colloquy_core::metrics::Metrics;

/// What every handler shares.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

#[derive(Clone)]
struct Shared {
    engine: Arc<Engine>,
    identity: Identity,
    metrics: Arc<Metrics>,
    /// Flips to `true` at shutdown so streams end and connections can drain.
    closing: watch::Receiver<bool>,
    /// How A2A clients are served.
    a2a: crate::a2a::Settings,
    /// The push notification followers running here.
    push_followers: Arc<crate::a2a::push::Followers>,
    /// The engine's key that signs audit records (`--audit-key`), if any.
    audit_key: Option<Arc<colloquy_trust::jws::Signer>>,
    /// This node's part in ownership, when nodes share the store's partitions.
    ownership: Option<Arc<ownership::Ownership>>,
}

impl AppState {
    /// State over this engine; `closing` turning `true` ends every open stream.
    pub fn new(
        engine: Arc<Engine>,
        identity: Identity,
        metrics: Arc<Metrics>,
        closing: watch::Receiver<bool>,
    ) -> AppState {
        AppState(Arc::new(Shared {
            engine,
            identity,
            metrics,
            closing,
            a2a: crate::a2a::Settings::default(),
            push_followers: Arc::default(),
            audit_key: None,
            ownership: None,
        }))
    }

    /// The same state, serving A2A clients as `settings` say (`colloquy serve --a2a-*`).
    pub fn with_a2a(self, settings: crate::a2a::Settings) -> AppState {
        let mut shared = (*self.0).clone();
        shared.a2a = settings;
        AppState(Arc::new(shared))
    }

    /// The same state, signing audit records with `key` (`colloquy serve --audit-key`).
    pub fn with_audit_key(self, key: Option<Arc<colloquy_trust::jws::Signer>>) -> AppState {
        let mut shared = (*self.0).clone();
        shared.audit_key = key;
        AppState(Arc::new(shared))
    }

    /// The same state, taking part in ownership (`crate::ownership`).
    pub fn with_ownership(self, ownership: Option<Arc<ownership::Ownership>>) -> AppState {
        let mut shared = (*self.0).clone();
        shared.ownership = ownership;
        AppState(Arc::new(shared))
    }

    /// This node's part in ownership, when several nodes share the store's partitions.
    pub fn ownership(&self) -> Option<&Arc<ownership::Ownership>> {
        self.0.ownership.as_ref()
    }

    /// The key that signs audit records, if any.
    pub fn audit_key(&self) -> Option<&colloquy_trust::jws::Signer> {
        self.0.audit_key.as_deref()
    }

    /// The template an A2A task starts when its message names none.
    pub fn a2a_template(&self) -> &str {
        &self.0.a2a.template
    }

    /// The key that signs agent cards, if any.
    pub fn a2a_card_signer(&self) -> Option<&colloquy_a2a::signing::CardSigner> {
        self.0.a2a.card_signer.as_deref()
    }

    /// Whether push notifications may go to private addresses.
    pub fn a2a_push_allow_private(&self) -> bool {
        self.0.a2a.push_allow_private
    }

    /// The push notification followers running here.
    pub fn a2a_followers(&self) -> &crate::a2a::push::Followers {
        &self.0.push_followers
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.0.engine
    }

    /// How callers are identified.
    pub fn identity(&self) -> &Identity {
        &self.0.identity
    }

    /// The counters.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.0.metrics
    }

    pub(crate) fn closing(&self) -> watch::Receiver<bool> {
        self.0.closing.clone()
    }
}

/// The routes of the service, built from [`routes`], and the web inspector's page.
pub fn router(state: AppState) -> Router {
    routes()
        .into_iter()
        .fold(Router::new(), |router, route| {
            router.route(route.path, route.handler)
        })
        .merge(inspect::router())
        .fallback(ops::not_found)
        .method_not_allowed_fallback(ops::method_not_allowed)
        .with_state(state)
}

/// A page's `next_cursor`: the id of its last item when more items follow, `None` on the
/// last page. The listings that page by id (conversations, commitments) answer with it.
fn next_cursor<T>(page: &[T], more: bool, id: impl Fn(&T) -> &str) -> Option<String> {
    if more {
        page.last().map(|last| id(last).to_owned())
    } else {
        None
    }
}

/// One route: a method on a path (OpenAPI path syntax, which axum 0.8 shares).
pub struct Route {
    /// Lowercase HTTP method, as OpenAPI spells it.
    pub method: &'static str,
    /// The path.
    pub path: &'static str,
    /// What serves it.
    pub handler: MethodRouter<AppState>,
}

pub(crate) fn route(
    method: &'static str,
    path: &'static str,
    handler: MethodRouter<AppState>,
) -> Route {
    Route {
        method,
        path,
        handler,
    }
}

/// Every route [`router`] serves. `/v1/openapi.json` must document exactly these (a test
/// compares the two).
pub fn routes() -> Vec<Route> {
    vec![
        route("post", "/v1/conversations", post(conversations::start)),
        route("get", "/v1/conversations", get(conversations::list)),
        route("get", "/v1/conversations/{id}", get(conversations::show)),
        route(
            "post",
            "/v1/conversations/{id}/messages",
            post(conversations::send),
        ),
        route("get", "/v1/conversations/{id}/events", get(streams::events)),
        route(
            "get",
            "/v1/conversations/{id}/moves",
            get(conversations::moves),
        ),
        route("get", "/v1/conversations/{id}/audit", get(audit::record)),
        route("get", "/v1/audit/keys", get(audit::keys)),
        route("get", "/v1/agents", get(agents::list)),
        route("get", "/v1/agents/{id}/signing-keys", get(agent_keys::list)),
        route(
            "put",
            "/v1/agents/{id}/signing-keys/{kid}",
            axum::routing::put(agent_keys::register),
        ),
        route(
            "delete",
            "/v1/agents/{id}/signing-keys/{kid}",
            axum::routing::delete(agent_keys::revoke),
        ),
        route("get", "/v1/agents/{id}/inbox", get(streams::inbox)),
        route("get", "/v1/agents/{id}/inbox/poll", get(streams::poll)),
        route("post", "/v1/agents/{id}/inbox/ack", post(acks::acknowledge)),
        route("get", "/v1/commitments", get(commitments::list)),
        route(
            "post",
            "/v1/commitments/{id}/release",
            post(commitments::release),
        ),
        route(
            "post",
            "/v1/commitments/{id}/cancel",
            post(commitments::cancel),
        ),
        route(
            "post",
            "/v1/commitments/{conversation}/{n}/release",
            post(commitments::release),
        ),
        route(
            "post",
            "/v1/commitments/{conversation}/{n}/cancel",
            post(commitments::cancel),
        ),
        route(
            "get",
            "/a2a/{agent}/.well-known/agent-card.json",
            get(a2a::inward::card),
        ),
        route(
            "get",
            "/a2a/{agent}/.well-known/agent.json",
            get(a2a::inward::card_v03),
        ),
        route("post", "/a2a/{agent}", post(a2a::inward::rpc)),
        // The interface URL with a slash after it, as some clients join paths.
        route("post", "/a2a/{agent}/", post(a2a::inward::rpc)),
        route(
            "get",
            "/a2a/{agent}/rest/tasks/{task}/pushNotificationConfigs",
            get(a2a::rest::list_push_configs),
        ),
        route(
            "post",
            "/a2a/{agent}/rest/tasks/{task}/pushNotificationConfigs",
            post(a2a::rest::create_push_config),
        ),
        route(
            "get",
            "/a2a/{agent}/rest/tasks/{task}/pushNotificationConfigs/{config}",
            get(a2a::rest::get_push_config),
        ),
        route(
            "delete",
            "/a2a/{agent}/rest/tasks/{task}/pushNotificationConfigs/{config}",
            axum::routing::delete(a2a::rest::delete_push_config),
        ),
        route(
            "post",
            "/a2a/{agent}/rest/message:send",
            post(a2a::rest::send_message),
        ),
        route(
            "post",
            "/a2a/{agent}/rest/message:stream",
            post(a2a::rest::stream_message),
        ),
        route("get", "/a2a/{agent}/rest/tasks", get(a2a::rest::list_tasks)),
        route(
            "get",
            "/a2a/{agent}/rest/tasks/{task}",
            get(a2a::rest::get_task),
        ),
        route(
            "post",
            "/a2a/{agent}/rest/tasks/{task}",
            post(a2a::rest::task_action),
        ),
        route(
            "get",
            "/a2a/{agent}/rest/extendedAgentCard",
            get(a2a::rest::extended_agent_card),
        ),
        route("get", "/v1/openapi.json", get(ops::openapi)),
        route("get", "/healthz", get(ops::healthz)),
        route("get", "/readyz", get(ops::readyz)),
        route("get", "/metrics", get(ops::metrics)),
    ]
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt as _;
    use tower::ServiceExt as _;

    use super::*;
    use colloquy_core::clock::ManualClock;
    use colloquy_core::engine::EngineConfig;
    use colloquy_core::store::MemoryStore;

    fn app() -> Router {
        let engine = Arc::new(Engine::new(
            Arc::new(colloquy_policy::Catalog::default()),
            Arc::new(MemoryStore::new()),
            Arc::new(ManualClock::new(0)),
            EngineConfig::default(),
        ));
        let (_, closing) = watch::channel(false);
        router(AppState::new(
            engine,
            Identity::Open,
            Arc::new(Metrics::new()),
            closing,
        ))
    }

    async fn answer(request: Request<Body>) -> (StatusCode, serde_json::Value) {
        let response = app().oneshot(request).await.expect("infallible service");
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        (status, serde_json::from_slice(&bytes).expect("a JSON body"))
    }

    #[tokio::test]
    async fn errors_outside_handlers_are_json_too() {
        let request = Request::get("/v1/conversations").body(Body::empty());
        let (status, body) = answer(request.expect("request")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["error"]["code"], "unauthenticated");
        let request = Request::get("/v2/anything").body(Body::empty());
        let (status, body) = answer(request.expect("request")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["error"]["code"], "not_found");
        let request = Request::put("/healthz").body(Body::empty());
        let (status, body) = answer(request.expect("request")).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
        assert_eq!(body["error"]["code"], "method_not_allowed");
        // Percent-encoded bytes that are not UTF-8, in each kind of path parameter.
        for (method, path) in [
            ("GET", "/v1/conversations/%FF"),
            ("GET", "/v1/agents/%FF/inbox"),
            ("POST", "/v1/commitments/%FF/release"),
        ] {
            let request = Request::builder()
                .method(method)
                .uri(path)
                .header("x-agent-id", "alice")
                .body(Body::empty());
            let (status, body) = answer(request.expect("request")).await;
            assert_eq!(status, StatusCode::BAD_REQUEST, "{path}: {body}");
            assert_eq!(body["error"]["code"], "invalid_path", "{path}");
        }
    }

    #[tokio::test]
    async fn an_unknown_template_is_a_404_naming_it() {
        let request = Request::post("/v1/conversations")
            .header("x-agent-id", "alice")
            .body(Body::from(
                r#"{"template": "nope", "participants": ["bob"]}"#,
            ));
        let (status, body) = answer(request.expect("request")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert_eq!(body["error"]["code"], "unknown_template");
    }
}
