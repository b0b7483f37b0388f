//! The MCP server at `/mcp`: LLM agents (any MCP client) take part in conversations as the
//! agent their credentials name, through tools, resources and a prompt. Streamable HTTP on
//! the official Rust SDK (`rmcp`), in both protocol eras: 2026-07-28 (stateless, no
//! handshake) and 2025-11-25 (an `initialize` handshake and an `Mcp-Session-Id`).
//!
//! Everything a tool does is an in-process call of the HTTP API as the caller
//! ([`api::Api`]), so an MCP client sees and does exactly what that agent may over HTTP.
//! The identity is the HTTP request's (a bearer token of the agents file, or `X-Agent-Id` in
//! open development mode), checked here before the SDK sees the request: an OAuth 2.1
//! resource server as the MCP spec asks, whose 401 points at its protected resource
//! metadata (RFC 9728). Never an identity from a tool argument.

pub mod api;
pub mod handler;
pub mod protocols;
pub mod resources;
pub mod tools;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequest as _, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use self::api::Credential;
use self::handler::{ColloquyMcp, McpCaller, Shared};
use crate::auth::{AGENT_HEADER, Caller, Identity};
use crate::error::ApiError;
use crate::extract::{CappedBody, MAX_BODY_BYTES, unreadable};
use crate::json::JsonResponse;
use crate::{AppState, Route};

/// Where the MCP endpoint is.
pub const PATH: &str = "/mcp";
/// Where its protected resource metadata is (RFC 9728, the path inserted after the
/// well-known prefix), and the bare prefix clients also try.
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
const METADATA_ROOT: &str = "/.well-known/oauth-protected-resource";

/// Which requests the endpoint takes: the DNS-rebinding defences of the MCP spec.
#[derive(Clone, Debug)]
pub struct McpSettings {
    /// `Host` values accepted (a name, or `name:port`).
    pub allowed_hosts: Vec<String>,
    /// Browser `Origin`s accepted (`scheme://host[:port|:*]`); a request without an
    /// `Origin` (not from a browser) passes, one with another is refused with 403.
    pub allowed_origins: Vec<String>,
}

impl McpSettings {
    /// The defaults for a server listening on `listen`: its loopback names (or its own
    /// address), and the origins of those hosts on any port.
    pub fn for_listen(listen: SocketAddr) -> McpSettings {
        let ip = listen.ip();
        let hosts: Vec<String> = if ip.is_loopback() || ip.is_unspecified() {
            vec!["localhost".into(), "127.0.0.1".into(), "::1".into()]
        } else {
            vec![ip.to_string()]
        };
        McpSettings::for_hosts(hosts)
    }

    /// `hosts`, and the `http://` origin of each (on any port, unless the host names one).
    pub fn for_hosts(hosts: Vec<String>) -> McpSettings {
        let allowed_origins = hosts
            .iter()
            .map(|host| match host.matches(':').count() {
                0 => format!("http://{host}:*"),
                1 => format!("http://{host}"),
                _ if host.starts_with('[') => format!("http://{host}"),
                _ => format!("http://[{host}]:*"),
            })
            .collect();
        McpSettings {
            allowed_hosts: hosts,
            allowed_origins,
        }
    }
}

/// The MCP routes over `api` (the rest of the router): `/mcp` behind the gate, and the
/// protected resource metadata. Ends its streams when `closing` is cancelled.
pub fn router(
    api: Router,
    state: &AppState,
    settings: McpSettings,
    closing: CancellationToken,
) -> Router {
    let shared = Arc::new(Shared {
        api,
        templates: state.engine().templates().clone(),
    });
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(settings.allowed_hosts)
        .with_allowed_origins(settings.allowed_origins)
        .enforce_origin_validation()
        .with_legacy_session_mode(true)
        .with_json_response(true)
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(closing);
    let service = StreamableHttpService::new(
        move || Ok(ColloquyMcp::new(shared.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    Router::new()
        .nest_service(PATH, service)
        .layer(middleware::from_fn_with_state(state.clone(), gate))
        .layer(middleware::from_fn(body_first))
        .route(METADATA_PATH, get(metadata))
        .route(METADATA_ROOT, get(metadata))
        .with_state(state.clone())
}

/// The routes [`router`] adds, for the route list the OpenAPI test checks.
pub fn routes() -> Vec<Route> {
    vec![
        crate::route("get", METADATA_PATH, get(metadata)),
        crate::route("get", METADATA_ROOT, get(metadata)),
    ]
}

/// Reads the request body in full (at most [`MAX_BODY_BYTES`], within the API's body
/// deadline) before anything decides on the request. A refusal that leaves body bytes unread
/// on a kept-alive connection (the gate's 401, the SDK's `Host` and `Origin` 403s) makes
/// hyper close the connection under the client, whose next request on it then fails with no
/// answer at all; read first, every refusal is an answer and the connection stays usable.
async fn body_first(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(CappedBody(read)) = CappedBody::from_request(Request::new(body), &()).await;
    match read {
        Ok(bytes) => {
            next.run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Err(error) => {
            let mut response = unreadable(error, MAX_BODY_BYTES).into_response();
            // What is left of the body cannot be read past: the connection ends here.
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            response
        }
    }
}

/// Lets through only requests whose credential names an agent, with the caller put in the
/// request for the handler. No credential, or one nobody issued: 401 with
/// `WWW-Authenticate` naming the metadata; the admin (who is no agent): 403.
async fn gate(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    match state.identity().identify_headers(request.headers()) {
        Ok(Caller::Agent(agent)) => {
            let credential = credential(request.headers(), state.identity());
            request
                .extensions_mut()
                .insert(McpCaller { agent, credential });
            next.run(request).await
        }
        Ok(Caller::Admin) => ApiError::Forbidden(
            "the admin token names no agent; MCP clients act as an agent: use an agent's token"
                .into(),
        )
        .into_response(),
        Err(ApiError::Unauthenticated(message)) => {
            let mut response = ApiError::Unauthenticated(message).into_response();
            let challenge = format!(
                "Bearer resource_metadata=\"{}{METADATA_PATH}\"",
                origin_of(request.headers())
            );
            if let Ok(value) = HeaderValue::from_str(&challenge) {
                response
                    .headers_mut()
                    .insert(header::WWW_AUTHENTICATE, value);
            }
            response
        }
        Err(other) => other.into_response(),
    }
}

/// The credential the request came with, in the form the identity reads.
fn credential(headers: &HeaderMap, identity: &Identity) -> Credential {
    let header_value = |name| {
        headers
            .get(name)
            .cloned()
            .unwrap_or(HeaderValue::from_static(""))
    };
    match identity {
        Identity::Open => Credential::AgentHeader(header_value(AGENT_HEADER)),
        _ => Credential::Bearer(header_value(header::AUTHORIZATION.as_str())),
    }
}

/// `http://HOST` of the request, as the client named this server.
fn origin_of(headers: &HeaderMap) -> String {
    let host = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("localhost");
    let scheme = match headers.get("x-forwarded-proto").map(HeaderValue::as_bytes) {
        Some(b"https") => "https",
        _ => "http",
    };
    format!("{scheme}://{host}")
}

/// `GET /.well-known/oauth-protected-resource[/mcp]`: the protected resource metadata
/// (RFC 9728). With JWTs (`--auth-jwks`), their issuer is the authorization server a client
/// obtains its token from; the agents file's static tokens come from no authorization
/// server, so with them alone none is named: a client is given its token, it cannot obtain
/// one by OAuth.
async fn metadata(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    let origin = origin_of(&headers);
    let mut body = json!({
        "resource": format!("{origin}{PATH}"),
        "resource_name": "Colloquy",
        "bearer_methods_supported": ["header"],
    });
    if let Some(jwt) = state.identity().jwt() {
        body["authorization_servers"] = json!([jwt.issuer()]);
    }
    (StatusCode::OK, JsonResponse(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_listen_address() {
        let loopback = McpSettings::for_listen("127.0.0.1:7700".parse().expect("addr"));
        assert!(loopback.allowed_hosts.contains(&"localhost".to_owned()));
        assert!(
            loopback
                .allowed_origins
                .contains(&"http://127.0.0.1:*".to_owned())
        );
        assert!(
            loopback
                .allowed_origins
                .contains(&"http://[::1]:*".to_owned())
        );
        let public = McpSettings::for_listen("10.1.2.3:7700".parse().expect("addr"));
        assert_eq!(public.allowed_hosts, ["10.1.2.3"]);
        assert_eq!(public.allowed_origins, ["http://10.1.2.3:*"]);
        let named =
            McpSettings::for_hosts(vec!["agents.example".into(), "agents.example:8443".into()]);
        assert_eq!(
            named.allowed_origins,
            ["http://agents.example:*", "http://agents.example:8443"]
        );
    }
}
