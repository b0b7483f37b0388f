//! Agents' public signing keys from three sources, as one registry: the agents file's
//! `signing_keys`, keys the administrator registers over the API, and keys an identity
//! provider binds to an agent's JWT with a `cnf` claim (RFC 7800). The last two are kept in
//! the store ([`colloquy_core::store::keys`]), so every node and every restart knows them.
//!
//! - `GET /v1/agents/{id}/signing-keys`: the agent itself or the administrator.
//! - `PUT /v1/agents/{id}/signing-keys/{kid}` with a public JWK: the administrator. A kid
//!   keeps its key: registering other key material under a kid in use is 409.
//! - `DELETE /v1/agents/{id}/signing-keys/{kid}`: the administrator revokes the key. It
//!   signs nothing new, and stays in the audit records of what it signed before.
//!
//! A key bound by `cnf` is kept the first time a token presents it (its kid: the JWK's own,
//! or its RFC 7638 thumbprint), and signs until the latest `exp` of the tokens that bound
//! it. See docs/security.md.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use colloquy_core::EngineError;
use colloquy_core::store::{AgentKey, KeySource};
use colloquy_trust::jws::KeySet;
use serde_json::{Value, json};

use super::AppState;
use super::auth::{BoundKey, Caller, bearer_token};
use super::error::ApiError;
use super::extract::{JsonBody, PathParams};
use super::json::JsonResponse;

/// JWK members that only a private key has: a registration carrying one is refused (and
/// the key is not echoed back).
const PRIVATE_MEMBERS: [&str; 6] = ["d", "p", "q", "dp", "dq", "qi"];

/// The keys `agent`'s messages may be signed with now: the agents file's and the kept ones
/// neither revoked nor lapsed. `None` when it has none.
pub async fn signing_keys(state: &AppState, agent: &str) -> Result<Option<KeySet>, ApiError> {
    let now = state.engine().now();
    let kept = kept(state, agent).await?;
    let mut set = (state.identity().signing_keys(agent)).map(|keys| keys.keys.clone());
    let grace = grace_ms(state);
    for key in kept.iter().filter(|key| key.signs_at(now, grace)) {
        let set = set.get_or_insert_with(KeySet::default);
        // A kept key that no longer parses (or clashes with the file) signs nothing.
        let _ = set.add_jwks(&json!({ "keys": [key.jwk] }));
    }
    Ok(set)
}

/// How long past its token's `exp` a key bound by `cnf` still signs: the leeway the token
/// itself gets, so an agent that may sign in may also sign.
fn grace_ms(state: &AppState) -> u64 {
    (state.identity().jwt()).map_or(0, |jwt| jwt.leeway_ms())
}

/// Why `kid` of `agent` does not sign now, when it is a kept key that did once: for the
/// 422 of a message signed with it.
pub async fn why_not(state: &AppState, agent: &str, kid: &str) -> Option<String> {
    let now = state.engine().now();
    let kept = kept(state, agent).await.ok()?;
    let key = kept.iter().find(|key| key.kid == kid)?;
    match (key.revoked_at, key.valid_until) {
        (Some(at), _) if at <= now => Some(format!(
            "unknown key: key `{kid}` of `{agent}` was revoked at {at} (Unix ms)"
        )),
        (_, Some(until)) if until.saturating_add(grace_ms(state)) < now => Some(format!(
            "unknown key: key `{kid}` of `{agent}` was bound by a token that expired at {until} \
             (Unix ms)"
        )),
        _ => None,
    }
}

/// Every key `agent` ever had, as a JWKS: what an audit record carries for an auditor to
/// check the agent's signatures with, those of revoked and lapsed keys included.
pub async fn record_jwks(state: &AppState, agent: &str) -> Result<Option<Value>, ApiError> {
    let mut keys: Vec<Value> = (state.identity().signing_keys(agent))
        .and_then(|keys| keys.jwks.get("keys").and_then(Value::as_array).cloned())
        .unwrap_or_default();
    for key in kept(state, agent).await? {
        if !keys
            .iter()
            .any(|known| known.get("kid") == key.jwk.get("kid"))
        {
            keys.push(key.jwk);
        }
    }
    Ok((!keys.is_empty()).then(|| json!({ "keys": keys })))
}

async fn kept(state: &AppState, agent: &str) -> Result<Vec<AgentKey>, ApiError> {
    (state.engine().store().agent_keys(agent).await)
        .map_err(|error| ApiError::Engine(EngineError::from(error)))
}

/// Keeps the key the request's JWT binds with `cnf`, if it does, or moves its expiry on
/// (the gate calls this before any handler, so a message signed with the key verifies).
/// A `cnf` key clashing with a kid of the agent's other keys is not kept; the signature
/// then fails as made with an unknown key, which the 422 says.
pub async fn bind_presented_key(state: &AppState, headers: &axum::http::HeaderMap) {
    let (Some(jwt), Ok(Some(token))) = (state.identity().jwt(), bearer_token(headers)) else {
        return;
    };
    match jwt.bound_key(token) {
        Ok(Some(bound)) => {
            if let Err(why) = keep_bound(state, bound).await {
                tracing::debug!(%why, "a `cnf` key was not kept");
            }
        }
        Ok(None) => {}
        Err(why) => tracing::debug!(%why, "a token's `cnf` binds no key"),
    }
}

async fn keep_bound(state: &AppState, bound: BoundKey) -> Result<(), String> {
    let mut jwk = public_jwk(&bound.jwk)?;
    let kid = match jwk.get("kid").and_then(Value::as_str) {
        Some(kid) => kid.to_owned(),
        None => {
            let kid = colloquy_trust::jws::thumbprint(&jwk).map_err(|why| format!("jwk{why}"))?;
            jwk["kid"] = Value::from(kid.clone());
            kid
        }
    };
    if (state.identity().signing_keys(&bound.agent)).is_some_and(|keys| keys.keys.contains(&kid)) {
        return Err(format!("kid `{kid}` is one of the agents file's"));
    }
    let kept = kept(state, &bound.agent)
        .await
        .map_err(|error| error.to_string())?;
    let earlier = kept.into_iter().find(|key| key.kid == kid);
    let key = match earlier {
        Some(key) if key.jwk != jwk => {
            return Err(format!(
                "kid `{kid}` names another key of `{}`",
                bound.agent
            ));
        }
        // Kept already, and no later token to move its expiry on.
        Some(key) if key.valid_until >= Some(bound.expires_at_ms) => return Ok(()),
        Some(key) => AgentKey {
            valid_until: Some(bound.expires_at_ms),
            ..key
        },
        None => AgentKey {
            agent: bound.agent.clone(),
            kid,
            jwk,
            source: KeySource::Cnf {
                issuer: bound.issuer,
            },
            registered_at: state.engine().now(),
            valid_until: Some(bound.expires_at_ms),
            revoked_at: None,
        },
    };
    (state.engine().store().keep_agent_key(&key).await).map_err(|error| error.to_string())
}

/// `jwk` if it is a public Ed25519 or P-256 key, with only the members that say so (and its
/// `kid`, `alg`, `use` when it has them).
fn public_jwk(jwk: &Value) -> Result<Value, String> {
    let Value::Object(members) = jwk else {
        return Err("a JWK is a JSON object".to_owned());
    };
    if let Some(private) = PRIVATE_MEMBERS
        .iter()
        .find(|name| members.contains_key(**name))
    {
        return Err(format!(
            "the JWK has the private member `{private}`: register the public key only"
        ));
    }
    colloquy_trust::jws::thumbprint(jwk).map_err(|why| format!("jwk{why}"))?;
    let kept: serde_json::Map<String, Value> = (members.iter())
        .filter(|(name, _)| ["kty", "crv", "x", "y", "kid", "alg", "use"].contains(&name.as_str()))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    Ok(Value::Object(kept))
}

/// The view of an agent's keys: each with its source and validity.
fn listing(agent: &str, file: Option<&Value>, kept: &[AgentKey]) -> Value {
    let mut keys = Vec::new();
    for jwk in file
        .and_then(|jwks| jwks.get("keys"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        keys.push(json!({
            "kid": jwk.get("kid"),
            "jwk": jwk,
            "source": {"kind": "agents_file"},
        }));
    }
    let by_kid: BTreeMap<&str, &AgentKey> = kept.iter().map(|key| (&*key.kid, key)).collect();
    for key in by_kid.values() {
        let mut view = serde_json::to_value(key).unwrap_or(Value::Null);
        if let Value::Object(view) = &mut view {
            view.remove("agent");
        }
        keys.push(view);
    }
    json!({ "agent": agent, "keys": keys })
}

fn may_read(caller: &Caller, agent: &str) -> Result<(), ApiError> {
    match caller {
        Caller::Admin => Ok(()),
        Caller::Agent(me) if &**me == agent => Ok(()),
        Caller::Agent(me) => Err(ApiError::Forbidden(format!(
            "`{me}` may not list the signing keys of `{agent}`: only the agent itself and the \
             administrator may"
        ))),
    }
}

fn must_be_admin(caller: &Caller) -> Result<(), ApiError> {
    match caller {
        Caller::Admin => Ok(()),
        Caller::Agent(me) => Err(ApiError::Forbidden(format!(
            "`{me}` is an agent: registering and revoking signing keys needs the administrator \
             (the admin token, or a JWT with the admin claim)"
        ))),
    }
}

fn known_agent(state: &AppState, agent: &str) -> Result<(), ApiError> {
    if state.identity().knows(agent) {
        Ok(())
    } else {
        Err(ApiError::Absent {
            code: "unknown_agent",
            message: format!("no agent `{agent}`"),
        })
    }
}

/// `GET /v1/agents/{id}/signing-keys` → 200 with the agent's keys and where each came from.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(agent): PathParams<String>,
) -> Result<JsonResponse<Value>, ApiError> {
    may_read(&caller, &agent)?;
    known_agent(&state, &agent)?;
    let kept = kept(&state, &agent).await?;
    let file = (state.identity().signing_keys(&agent)).map(|keys| &keys.jwks);
    Ok(JsonResponse(listing(&agent, file, &kept)))
}

/// `PUT /v1/agents/{id}/signing-keys/{kid}` with a public JWK → 201 with the key (200 when
/// the same key was registered already).
pub async fn register(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((agent, kid)): PathParams<(String, String)>,
    JsonBody(jwk): JsonBody<Value>,
) -> Result<(StatusCode, JsonResponse<AgentKey>), ApiError> {
    must_be_admin(&caller)?;
    known_agent(&state, &agent)?;
    let invalid = |message: String| ApiError::BadRequest {
        code: "invalid_body",
        message,
        pointer: Some(String::new()),
    };
    let mut jwk = public_jwk(&jwk).map_err(invalid)?;
    match jwk.get("kid") {
        None => jwk["kid"] = Value::from(kid.clone()),
        Some(named) if named.as_str() == Some(kid.as_str()) => {}
        Some(_) => {
            return Err(invalid(format!(
                "the JWK's `kid` is not `{kid}`, the key id of the path"
            )));
        }
    }
    if (state.identity().signing_keys(&agent)).is_some_and(|keys| keys.keys.contains(&kid)) {
        return Err(ApiError::Conflict {
            code: "kid_taken",
            message: format!("`{agent}` has a key `{kid}` in the agents file"),
        });
    }
    let kept = kept(&state, &agent).await?;
    if let Some(key) = kept.into_iter().find(|key| key.kid == kid) {
        if key.jwk != jwk {
            return Err(ApiError::Conflict {
                code: "kid_taken",
                message: format!(
                    "`{agent}` has another key `{kid}` (revoked keys keep their kid, so the \
                     records they signed stay verifiable): register the new key under a new kid"
                ),
            });
        }
        return Ok((StatusCode::OK, JsonResponse(key)));
    }
    let key = AgentKey {
        agent: agent.as_str().into(),
        kid,
        jwk,
        source: KeySource::Admin,
        registered_at: state.engine().now(),
        valid_until: None,
        revoked_at: None,
    };
    (state.engine().store().keep_agent_key(&key).await)
        .map_err(|error| ApiError::Engine(EngineError::from(error)))?;
    Ok((StatusCode::CREATED, JsonResponse(key)))
}

/// `DELETE /v1/agents/{id}/signing-keys/{kid}` → 200 with the key, revoked.
pub async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((agent, kid)): PathParams<(String, String)>,
) -> Result<JsonResponse<AgentKey>, ApiError> {
    must_be_admin(&caller)?;
    let kept = kept(&state, &agent).await?;
    let Some(mut key) = kept.into_iter().find(|key| key.kid == kid) else {
        let in_file =
            (state.identity().signing_keys(&agent)).is_some_and(|keys| keys.keys.contains(&kid));
        return Err(if in_file {
            ApiError::Conflict {
                code: "in_agents_file",
                message: format!("key `{kid}` of `{agent}` is in the agents file: remove it there"),
            }
        } else {
            ApiError::Absent {
                code: "unknown_key",
                message: format!("`{agent}` has no registered key `{kid}`"),
            }
        });
    };
    if key.revoked_at.is_none() {
        key.revoked_at = Some(state.engine().now());
        (state.engine().store().keep_agent_key(&key).await)
            .map_err(|error| ApiError::Engine(EngineError::from(error)))?;
    }
    Ok(JsonResponse(key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_keys_are_registered() {
        let public = json!({
            "kty": "OKP", "crv": "Ed25519", "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
            "kid": "k1", "ext": true,
        });
        assert_eq!(
            public_jwk(&public).unwrap(),
            json!({"kty": "OKP", "crv": "Ed25519", "kid": "k1",
                   "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"})
        );
        let mut private = public.clone();
        private["d"] = json!("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A");
        let why = public_jwk(&private).unwrap_err();
        assert!(why.contains("private member `d`"), "{why}");
        assert!(!why.contains("nWGx"), "{why}");
        assert!(public_jwk(&json!({"kty": "RSA", "n": "x", "e": "AQAB"})).is_err());
        assert!(public_jwk(&json!("a string")).is_err());
    }
}
