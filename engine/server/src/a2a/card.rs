//! An agent's A2A card (`/.well-known/agent-card.json`, v1.0 and v0.3 shapes): its skills
//! are the templates an initiator can start with it.

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use colloquy_protocol::a2a::{AgentCard, AgentInterface, Capabilities, PROTOCOL_VERSION, Skill};
use colloquy_protocol::template::Role;
use serde_json::{Map, Value, json};

use super::v1;
use crate::AppState;
use crate::auth::Identity;
use crate::error::ApiError;
use crate::extract::PathParams;

/// `GET /a2a/{agent}/.well-known/agent-card.json`: the agent's card in v1.0's shape (its
/// endpoints only in `supportedInterfaces`). No credentials needed, as A2A clients read the
/// card before they authenticate; with an agents file, only its agents have one. Cached
/// for a minute, with an `ETag` (the skills change when templates reload).
pub async fn card(
    State(state): State<AppState>,
    PathParams(agent): PathParams<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let card = v1::agent_card(&card_of(&state, agent, &headers)?);
    // Signing fails only on a fractional number, which these cards never hold.
    let card = match state.a2a_card_signer().map(|signer| signer.sign(&card)) {
        Some(Ok(signed)) => signed,
        Some(Err(why)) => {
            tracing::error!("the agent card is served unsigned: {why}");
            card
        }
        None => card,
    };
    Ok(cached(&headers, &card))
}

/// `GET /a2a/{agent}/.well-known/agent.json`: the same card in v0.3's shape (`url`,
/// `protocolVersion`, `preferredTransport` at its top), for v0.3 clients: v1.0's card
/// schema allows no such fields, so the two shapes cannot share one document. (`agent.json`
/// is the card's name before v0.3 renamed it.)
pub async fn card_v03(
    State(state): State<AppState>,
    PathParams(agent): PathParams<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let card = card_of(&state, agent, &headers)?;
    Ok(cached(&headers, &json!(card)))
}

/// `card` as a cacheable response: `Cache-Control: max-age=60` and an `ETag` of its bytes;
/// a request whose `If-None-Match` names it gets `304 Not Modified`.
pub(super) fn cached(headers: &HeaderMap, card: &Value) -> Response {
    use sha2::{Digest, Sha256};
    let body = card.to_string();
    let digest = Sha256::digest(body.as_bytes());
    let tag: String = digest[..12]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    let etag = format!("\"{tag}\"");
    let unchanged = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|asked| {
            asked
                .split(',')
                .any(|one| one.trim() == etag || one.trim() == "*")
        });
    let cache = [
        (header::CACHE_CONTROL, "public, max-age=60".to_owned()),
        (header::ETAG, etag),
    ];
    if unchanged {
        return (axum::http::StatusCode::NOT_MODIFIED, cache).into_response();
    }
    (
        cache,
        [(header::CONTENT_TYPE, "application/json".to_owned())],
        body,
    )
        .into_response()
}

/// The agent's card (v0.3's type, which [`v1::agent_card`] respells).
pub(super) fn card_of(
    state: &AppState,
    agent: String,
    headers: &HeaderMap,
) -> Result<AgentCard, ApiError> {
    let identity = state.identity();
    if !identity.knows(&agent) {
        return Err(ApiError::NotFound(format!("no agent `{agent}` here")));
    }
    let host = headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .unwrap_or("localhost");
    let engine = state.engine();
    let skills = engine
        .template_names()
        .iter()
        .filter_map(|name| {
            let template = engine.latest_template(name)?;
            let opening = opening_performative(&template)?;
            Some(Skill {
                id: name.to_string(),
                name: name.to_string(),
                description: template
                    .source
                    .metadata
                    .description
                    .clone()
                    .unwrap_or_default(),
                tags: vec!["colloquy".to_owned(), opening],
            })
        })
        .collect();
    let tokens = matches!(identity, Identity::Tokens { .. });
    let issuer = identity.jwt().map(|jwt| jwt.issuer().to_owned());
    // Static tokens and JWTs are both bearer tokens; with JWTs the OpenID Connect issuer
    // is named beside, for clients that obtain their token there.
    let schemes = || {
        let mut schemes = Map::new();
        let mut bearer = json!({"type": "http", "scheme": "bearer"});
        if issuer.is_some() {
            bearer["bearerFormat"] = json!("JWT");
        }
        schemes.insert("bearer".to_owned(), bearer);
        if let Some(issuer) = &issuer {
            schemes.insert(
                "oidc".to_owned(),
                json!({
                    "type": "openIdConnect",
                    "openIdConnectUrl": openid_configuration_url(issuer),
                }),
            );
        }
        schemes
    };
    let url = format!("http://{host}/a2a/{agent}");
    // One JSON-RPC endpoint for both versions (the A2A-Version header of each call
    // chooses), and v1.0's HTTP+JSON binding beside it.
    let mut supported_interfaces: Vec<AgentInterface> = v1::VERSIONS
        .iter()
        .map(|version| AgentInterface {
            url: url.clone(),
            protocol_binding: "JSONRPC".to_owned(),
            protocol_version: (*version).to_owned(),
        })
        .collect();
    supported_interfaces.push(AgentInterface {
        url: format!("{url}/rest"),
        protocol_binding: "HTTP+JSON".to_owned(),
        protocol_version: "1.0".to_owned(),
    });
    Ok(AgentCard {
        supported_interfaces,
        protocol_version: PROTOCOL_VERSION.to_owned(),
        description: format!(
            "The agent `{agent}`, reached through a Colloquy dialogue engine: each task is a \
             conversation that follows one of the skills' protocols."
        ),
        url,
        name: agent,
        preferred_transport: "JSONRPC".to_owned(),
        version: env!("CARGO_PKG_VERSION").to_owned(),
        capabilities: Capabilities {
            streaming: true,
            push_notifications: false,
        },
        default_input_modes: vec!["application/json".to_owned(), "text/plain".to_owned()],
        default_output_modes: vec!["application/json".to_owned(), "text/plain".to_owned()],
        skills,
        security_schemes: tokens.then(schemes),
        // Alternatives: any one of the schemes will do.
        security: tokens.then(|| {
            schemes()
                .keys()
                .map(|name| {
                    let mut needed = Map::new();
                    needed.insert(name.clone(), json!([]));
                    needed
                })
                .collect()
        }),
    })
}

/// The OpenID Connect discovery document of `issuer` (OpenID Connect Discovery 1.0, §4).
pub fn openid_configuration_url(issuer: &str) -> String {
    format!(
        "{}/.well-known/openid-configuration",
        issuer.trim_end_matches('/')
    )
}

/// The performative an initiator opens a conversation of `template` with: the first its
/// initial state lets the initiator send. `None` when the initiator cannot open it.
pub(super) fn opening_performative(template: &colloquy_policy::CompiledTemplate) -> Option<String> {
    let machine = &template.machine;
    machine
        .state(machine.initial)
        .transitions
        .iter()
        .find(|transition| transition.from == Role::Initiator)
        .map(|transition| transition.performative.name().to_owned())
}
