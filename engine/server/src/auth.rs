//! Who is calling. With an agents file (`colloquy serve --agents FILE`) every request carries
//! `Authorization: Bearer <token>` and the token alone says which agent it is; without one
//! the server runs in open development mode, where the `X-Agent-Id` header names the caller.
//!
//! The agents file is YAML and rejects unknown fields:
//!
//! ```yaml
//! admin_token: "s3cret-admin"        # optional: reads everything, acts as no agent
//! agents:
//!   - id: alice
//!     token: "alice-token"
//!   - id: bob
//!     token: "bob-token"
//!     webhook: "http://127.0.0.1:9000/bob"   # optional push delivery
//!   - id: carol
//!     token: "carol-token"
//!     inbox: false   # only starts conversations and follows them: no inbox to acknowledge
//!   - id: translator
//!     a2a: "https://translator.example/a2a"   # a remote A2A agent; needs no token
//!     a2a_token: "…"   # optional: the bearer token the engine presents there
//! ```
//!
//! Tokens are kept as SHA-256 digests, so a lookup's timing says nothing about a stored token.
//!
//! Beside the agents file, or instead of it, bearer JWTs from an identity provider
//! (`colloquy serve --auth-jwks … --auth-issuer … --auth-audience …`): a static token is
//! looked up first, anything else is verified as a JWT ([`JwtAuth`]; [`jwt`] verifies,
//! [`jwks`] keeps the provider's keys fresh).

pub mod jwks;
pub mod jwt;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use colloquy_protocol::message::{AgentId, ENGINE_PARTY};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::AppState;
use super::error::ApiError;

/// The header naming the caller in open development mode.
pub const AGENT_HEADER: &str = "x-agent-id";
/// Longest agent id accepted from a header or the agents file: that of every id.
pub const MAX_AGENT_ID_LEN: usize = colloquy_core::ids::MAX_ID_LEN;

/// The agents file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsFile {
    /// The administrator's token, if there is one.
    #[serde(default)]
    pub admin_token: Option<String>,
    /// The agents.
    pub agents: Vec<AgentEntry>,
}

impl AgentsFile {
    /// Reads and parses an agents file (its consistency is [`Identity::from_agents`]'s).
    pub fn read(path: &Path) -> Result<AgentsFile, AgentsFileError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|error| AgentsFileError::Read {
            path: shown.clone(),
            error,
        })?;
        AgentsFile::parse(&text, &shown)
    }

    /// Parses the text of an agents file; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<AgentsFile, AgentsFileError> {
        serde_norway::from_str(text).map_err(|error| AgentsFileError::Parse {
            path: origin.to_owned(),
            error,
        })
    }
}

/// One agent of the agents file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentEntry {
    /// Its id.
    pub id: String,
    /// Its bearer token; optional for an A2A agent, which never calls the engine.
    #[serde(default)]
    pub token: Option<String>,
    /// Where to push its inbox messages as well, if anywhere.
    #[serde(default)]
    pub webhook: Option<String>,
    /// The A2A (JSON-RPC) endpoint of a remote agent: the engine sends it every message in
    /// its inbox and records its answers as its replies (`crate::a2a`).
    #[serde(default)]
    pub a2a: Option<String>,
    /// The bearer token the engine presents to that endpoint, if it wants one.
    #[serde(default)]
    pub a2a_token: Option<String>,
    /// How long one call there may take, in seconds (1 to 3600; default
    /// [`colloquy_a2a::A2A_TIMEOUT`]).
    #[serde(default)]
    pub a2a_timeout_s: Option<u64>,
    /// Whether messages to it are kept in an inbox (the default). `false` for an agent
    /// that only starts conversations and follows them (as the SDK's request, query and
    /// call-for-proposals helpers do): it would never read or acknowledge its inbox, which
    /// a durable store would keep growing.
    #[serde(default = "keeps_an_inbox")]
    pub inbox: bool,
    /// The public keys its messages are signed with: a JWKS (`{keys: [JWK, …]}`, Ed25519
    /// or P-256 keys with a `kid`), for templates with `signatures:` (docs/security.md).
    #[serde(default)]
    pub signing_keys: Option<serde_json::Value>,
}

fn keeps_an_inbox() -> bool {
    true
}

fn is_http_url(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

/// Why an agents file was refused. Each message is whole on its own (the cause is part of
/// it, not a `source`), so a report that prints the cause chain says it once.
#[derive(Debug, thiserror::Error)]
pub enum AgentsFileError {
    /// Unreadable.
    #[error("cannot read {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// Not an agents file.
    #[error("{path}: {error}")]
    Parse {
        /// The file.
        path: String,
        /// Why, with line and column.
        error: serde_norway::Error,
    },
    /// Parsed, but inconsistent.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// A caller the server recognised.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Caller {
    /// An agent: it acts and reads as itself.
    Agent(AgentId),
    /// The administrator: reads everything, is no agent, so it sends nothing.
    Admin,
}

impl Caller {
    /// The agent, or 403 for the administrator (who is nobody in a conversation).
    pub fn agent(&self) -> Result<&AgentId, ApiError> {
        match self {
            Caller::Agent(agent) => Ok(agent),
            Caller::Admin => Err(ApiError::Forbidden(
                "the admin token names no agent; act with an agent's token".into(),
            )),
        }
    }

    /// 403 unless `agent`'s inbox is the caller's own, or the caller is the administrator
    /// (who may drain the inbox of an agent that is gone). `what` is what the caller tried:
    /// `read`, `acknowledge`.
    pub fn check_inbox_owner(&self, agent: &str, what: &str) -> Result<(), ApiError> {
        match self {
            Caller::Agent(me) if &**me != agent => Err(ApiError::Forbidden(format!(
                "`{me}` may {what} only its own inbox, not `{agent}`'s"
            ))),
            _ => Ok(()),
        }
    }

    /// Who reads: `None` for the administrator, who may read everything.
    pub fn viewer(&self) -> Option<&str> {
        match self {
            Caller::Agent(agent) => Some(agent),
            Caller::Admin => None,
        }
    }
}

type Digest32 = [u8; 32];

fn digest(token: &str) -> Digest32 {
    Sha256::digest(token.as_bytes()).into()
}

/// How callers are identified.
#[derive(Clone, Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "one per server, made at start and shared: its size costs nothing"
)]
pub enum Identity {
    /// Development mode: `X-Agent-Id` names the caller, nobody is checked.
    Open,
    /// Bearer tokens from an agents file.
    Tokens {
        /// Token digest → caller.
        callers: HashMap<Digest32, Caller>,
        /// Agent → webhook URL.
        webhooks: HashMap<AgentId, String>,
        /// Agent → A2A endpoint.
        a2a: HashMap<AgentId, colloquy_a2a::Endpoint>,
        /// Agents without an inbox.
        inboxless: HashSet<AgentId>,
        /// Agent → the public keys (as given, and parsed) its signed messages are checked
        /// against.
        signing_keys: HashMap<AgentId, SigningKeys>,
        /// Bearer JWTs of an identity provider, tried when a token is none of the above.
        jwt: Option<Arc<JwtAuth>>,
    },
}

/// An agent's public signing keys: the JWKS as the agents file gives it (audit records
/// carry it) and the keys it holds.
#[derive(Clone, Debug)]
pub struct SigningKeys {
    /// The JWKS document.
    pub jwks: serde_json::Value,
    /// Its keys.
    pub keys: colloquy_trust::jws::KeySet,
}

/// A public key an identity provider bound to an agent's JWT (`cnf`, RFC 7800): the agent
/// holds its private half, so its signatures are the agent's while the token is valid.
#[derive(Clone, Debug)]
pub struct BoundKey {
    /// The agent the token names.
    pub agent: AgentId,
    /// The JWK of the `cnf` claim, as the token gives it.
    pub jwk: serde_json::Value,
    /// The token's issuer.
    pub issuer: String,
    /// The token's `exp`, in Unix milliseconds.
    pub expires_at_ms: u64,
}

/// Most agents known only through JWTs that `GET /v1/agents` lists for the administrator:
/// those that called this node since it started, up to this many (the identity provider,
/// not this server, knows them all).
pub const MAX_LISTED_JWT_AGENTS: usize = 10_000;

/// Bearer JWTs: the provider's keys and what a token must say.
#[derive(Debug)]
pub struct JwtAuth {
    expect: jwt::Expectations,
    jwks: Arc<jwks::JwksCache>,
    /// Agents that presented a good JWT here (for the administrator's agent list).
    seen: Mutex<BTreeSet<AgentId>>,
}

impl JwtAuth {
    /// Tokens signed by a key of `jwks`, checked against `expect`.
    pub fn new(expect: jwt::Expectations, jwks: Arc<jwks::JwksCache>) -> JwtAuth {
        JwtAuth {
            expect,
            jwks,
            seen: Mutex::new(BTreeSet::new()),
        }
    }

    /// The issuer tokens must come from.
    pub fn issuer(&self) -> &str {
        &self.expect.issuer
    }

    /// How far past its `exp` a token is still taken (clock drift), in milliseconds: a key
    /// a token bound signs as long too.
    pub fn leeway_ms(&self) -> u64 {
        self.expect.leeway_s.saturating_mul(1000)
    }

    /// Whether some token can name the administrator (`--auth-admin-claim`).
    pub fn names_an_admin(&self) -> bool {
        self.expect.admin_claim.is_some()
    }

    /// The key cache.
    pub fn jwks(&self) -> &Arc<jwks::JwksCache> {
        &self.jwks
    }

    /// The caller `token` names, now.
    pub fn verify(&self, token: &str) -> Result<Caller, jwt::JwtError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let caller = jwt::verify(token, &self.jwks.keys(), &self.expect, now)?;
        if let Caller::Agent(agent) = &caller {
            let mut seen = self
                .seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if seen.len() < MAX_LISTED_JWT_AGENTS && !seen.contains(agent) {
                seen.insert(agent.clone());
            }
        }
        Ok(caller)
    }

    /// The key `token` binds to its agent with a `cnf` claim (RFC 7800 §3.2: `{"cnf":
    /// {"jwk": {…}}}`), when it is a good token of an agent that has one. `Err` says why a
    /// `cnf` claim binds nothing (not a public Ed25519/P-256 JWK).
    pub fn bound_key(&self, token: &str) -> Result<Option<BoundKey>, String> {
        if !jwt::has_confirmation(token) {
            return Ok(None);
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_secs());
        let Ok((Caller::Agent(agent), claims)) =
            jwt::verify_claims(token, &self.jwks.keys(), &self.expect, now)
        else {
            // A bad token is refused when the caller is identified; an admin signs nothing.
            return Ok(None);
        };
        let Some(jwk) = claims.get("cnf").and_then(|cnf| cnf.get("jwk")) else {
            return Err("the token's `cnf` claim has no `jwk` (RFC 7800 §3.2)".to_owned());
        };
        // A NumericDate may have a fraction (RFC 7519 §2), and the claim check took it.
        let expires_ms = (claims.get("exp").and_then(serde_json::Value::as_f64))
            .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
            .map_or(now.saturating_mul(1000), |seconds| {
                (seconds * 1000.0) as u64
            });
        Ok(Some(BoundKey {
            agent,
            jwk: jwk.clone(),
            issuer: self.expect.issuer.clone(),
            expires_at_ms: expires_ms,
        }))
    }

    /// Before `token` is verified: when it names a kid the keys lack, reads them again
    /// (rate-limited, [`jwks::UNKNOWN_KID_REFRESH`]), so a rotated key is found.
    pub async fn prepare(&self, token: &str) {
        if let Some(kid) = jwt::kid_of(token) {
            self.jwks.know(&kid).await;
        }
    }

    /// Agents that presented a good JWT here since start.
    pub fn seen(&self) -> Vec<AgentId> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        seen.iter().cloned().collect()
    }
}

impl Identity {
    /// Reads an agents file.
    pub fn from_file(path: &Path) -> Result<Identity, AgentsFileError> {
        Identity::from_checked(AgentsFile::read(path)?, &path.display().to_string())
    }

    /// Reads the text of an agents file; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Identity, AgentsFileError> {
        Identity::from_checked(AgentsFile::parse(text, origin)?, origin)
    }

    /// [`Identity::from_agents`], its error naming the file `origin`.
    pub fn from_checked(file: AgentsFile, origin: &str) -> Result<Identity, AgentsFileError> {
        Identity::from_agents(file).map_err(|message| AgentsFileError::Invalid {
            path: origin.to_owned(),
            message,
        })
    }

    /// The identity an agents file describes; an error names the first inconsistency.
    pub fn from_agents(file: AgentsFile) -> Result<Identity, String> {
        let mut callers = HashMap::new();
        let mut webhooks = HashMap::new();
        let mut a2a = HashMap::new();
        let mut inboxless = HashSet::new();
        let mut signing_keys = HashMap::new();
        if let Some(token) = &file.admin_token {
            if token.is_empty() {
                return Err("admin_token is empty".into());
            }
            callers.insert(digest(token), Caller::Admin);
        }
        for (index, agent) in file.agents.into_iter().enumerate() {
            if !valid_agent_id(&agent.id) {
                return Err(format!(
                    "agents[{index}].id `{}` is not 1 to {MAX_AGENT_ID_LEN} characters of A-Z a-z 0-9 - _ . :",
                    agent.id
                ));
            }
            match (&agent.token, &agent.a2a) {
                (Some(token), _) if token.is_empty() => {
                    return Err(format!("agents[{index}].token is empty"));
                }
                (None, None) => {
                    return Err(format!(
                        "agents[{index}] has no token (only an `a2a` agent may go without)"
                    ));
                }
                _ => {}
            }
            if agent.id == ENGINE_PARTY {
                return Err(format!(
                    "agents[{index}].id `{ENGINE_PARTY}` is reserved for the messages the engine \
                     sends itself"
                ));
            }
            let id = AgentId::from(agent.id.as_str());
            if let Some(jwks) = agent.signing_keys {
                let keys = colloquy_trust::jws::KeySet::from_jwks(&jwks)
                    .map_err(|why| format!("agents[{index}].signing_keys: {why}"))?;
                signing_keys.insert(id.clone(), SigningKeys { jwks, keys });
            }
            if let Some(token) = &agent.token
                && callers
                    .insert(digest(token), Caller::Agent(id.clone()))
                    .is_some()
            {
                return Err(format!("agents[{index}].token is used twice"));
            }
            if !agent.inbox {
                if agent.webhook.is_some() || agent.a2a.is_some() {
                    return Err(format!(
                        "agents[{index}] has a {} and `inbox: false`: {} from the inbox",
                        if agent.a2a.is_some() {
                            "a2a endpoint"
                        } else {
                            "webhook"
                        },
                        if agent.a2a.is_some() {
                            "A2A agents are sent their messages"
                        } else {
                            "webhooks push"
                        }
                    ));
                }
                inboxless.insert(id.clone());
            }
            if agent.webhook.is_some() && agent.a2a.is_some() {
                return Err(format!(
                    "agents[{index}] has both a webhook and an a2a endpoint: an A2A agent \
                     gets its messages through A2A"
                ));
            }
            if let Some(url) = agent.webhook {
                if !is_http_url(&url) {
                    return Err(format!("agents[{index}].webhook is not an http(s) URL"));
                }
                webhooks.insert(id.clone(), url);
            }
            match (agent.a2a, agent.a2a_token, agent.a2a_timeout_s) {
                (Some(url), token, timeout) => {
                    if !is_http_url(&url) {
                        return Err(format!("agents[{index}].a2a is not an http(s) URL"));
                    }
                    if token.as_deref() == Some("") {
                        return Err(format!("agents[{index}].a2a_token is empty"));
                    }
                    let timeout = match timeout {
                        None => colloquy_a2a::A2A_TIMEOUT,
                        Some(seconds @ 1..=3600) => std::time::Duration::from_secs(seconds),
                        Some(_) => {
                            return Err(format!(
                                "agents[{index}].a2a_timeout_s must be 1 to 3600 seconds"
                            ));
                        }
                    };
                    a2a.insert(
                        id,
                        colloquy_a2a::Endpoint {
                            url,
                            token,
                            timeout,
                        },
                    );
                }
                (None, None, None) => {}
                (None, _, _) => {
                    return Err(format!(
                        "agents[{index}] has a2a settings but no a2a endpoint"
                    ));
                }
            }
        }
        Ok(Identity::Tokens {
            callers,
            webhooks,
            a2a,
            inboxless,
            signing_keys,
            jwt: None,
        })
    }

    /// This identity, also accepting the bearer JWTs `jwt` verifies. In open mode, JWTs
    /// alone: `X-Agent-Id` then names nobody.
    pub fn with_jwt(self, auth: Arc<JwtAuth>) -> Identity {
        match self {
            Identity::Open => Identity::Tokens {
                callers: HashMap::new(),
                webhooks: HashMap::new(),
                a2a: HashMap::new(),
                inboxless: HashSet::new(),
                signing_keys: HashMap::new(),
                jwt: Some(auth),
            },
            Identity::Tokens {
                callers,
                webhooks,
                a2a,
                inboxless,
                signing_keys,
                ..
            } => Identity::Tokens {
                callers,
                webhooks,
                a2a,
                inboxless,
                signing_keys,
                jwt: Some(auth),
            },
        }
    }

    /// `agent`'s public signing keys, if the agents file gives it any.
    pub fn signing_keys(&self, agent: &str) -> Option<&SigningKeys> {
        match self {
            Identity::Open => None,
            Identity::Tokens { signing_keys, .. } => signing_keys.get(agent),
        }
    }

    /// Whether `agent` is a remote A2A agent (which cannot sign Colloquy messages).
    pub fn is_a2a(&self, agent: &str) -> bool {
        match self {
            Identity::Open => false,
            Identity::Tokens { a2a, .. } => a2a.contains_key(agent),
        }
    }

    /// The JWT verifier, when JWTs are accepted.
    pub fn jwt(&self) -> Option<&Arc<JwtAuth>> {
        match self {
            Identity::Open => None,
            Identity::Tokens { jwt, .. } => jwt.as_ref(),
        }
    }

    /// Whether any credential names the administrator: an admin token, or a JWT claim.
    pub fn has_admin(&self) -> bool {
        match self {
            Identity::Open => false,
            Identity::Tokens { callers, jwt, .. } => {
                callers.values().any(|caller| *caller == Caller::Admin)
                    || jwt.as_ref().is_some_and(|jwt| jwt.names_an_admin())
            }
        }
    }

    /// The `check` label of `colloquy_auth_failures_total` for a request refused 401:
    /// `missing`, `unknown_token`, `agent_header`, or the JWT check that failed.
    pub fn failed_check(&self, headers: &axum::http::HeaderMap) -> &'static str {
        let token = match (self, bearer_token(headers)) {
            (Identity::Open, _) => return "agent_header",
            (_, Err(_)) => return "malformed",
            (_, Ok(None)) => return "missing",
            (_, Ok(Some(token))) => token,
        };
        match self.jwt() {
            Some(jwt) if !self.is_static(token) => match jwt.verify(token) {
                Err(error) => error.check.label(),
                Ok(_) => "other",
            },
            _ => "unknown_token",
        }
    }

    /// Whether `token` is one of the agents file's.
    fn is_static(&self, token: &str) -> bool {
        match self {
            Identity::Open => false,
            Identity::Tokens { callers, .. } => callers.contains_key(&digest(token)),
        }
    }

    /// Before the request is identified: lets a JWT naming a kid the keys lack refresh them
    /// ([`JwtAuth::prepare`]); nothing for any other credential.
    pub async fn prepare(&self, headers: &axum::http::HeaderMap) {
        if let (Some(jwt), Ok(Some(token))) = (self.jwt(), bearer_token(headers))
            && !self.is_static(token)
        {
            jwt.prepare(token).await;
        }
    }

    /// Agents whose messages are not kept in an inbox (`inbox: false`).
    pub fn inboxless(&self) -> HashSet<AgentId> {
        match self {
            Identity::Open => HashSet::new(),
            Identity::Tokens { inboxless, .. } => inboxless.clone(),
        }
    }

    /// Agents with a webhook URL.
    pub fn webhooks(&self) -> HashMap<AgentId, String> {
        match self {
            Identity::Open => HashMap::new(),
            Identity::Tokens { webhooks, .. } => webhooks.clone(),
        }
    }

    /// Whether `agent` is one of the agents file's (in open mode, anyone is; with JWTs,
    /// any agent id may be, as the identity provider says who exists).
    pub fn knows(&self, agent: &str) -> bool {
        match self {
            Identity::Open => true,
            Identity::Tokens { jwt: Some(_), .. } => valid_agent_id(agent) && agent != ENGINE_PARTY,
            Identity::Tokens { callers, a2a, .. } => {
                a2a.contains_key(agent)
                    || callers
                        .values()
                        .any(|caller| matches!(caller, Caller::Agent(id) if &**id == agent))
            }
        }
    }

    /// Every agent of the agents file, by id (none in open mode, where anyone is one), and
    /// with JWTs those that called this node since it started ([`MAX_LISTED_JWT_AGENTS`]).
    pub fn agents(&self) -> Vec<AgentId> {
        match self {
            Identity::Open => Vec::new(),
            Identity::Tokens {
                callers, a2a, jwt, ..
            } => {
                let mut agents: Vec<AgentId> = (callers.values())
                    .filter_map(|caller| match caller {
                        Caller::Agent(id) => Some(id.clone()),
                        Caller::Admin => None,
                    })
                    .chain(a2a.keys().cloned())
                    .chain(jwt.iter().flat_map(|jwt| jwt.seen()))
                    .collect();
                agents.sort();
                agents.dedup();
                agents
            }
        }
    }

    /// Remote A2A agents, with their endpoints.
    pub fn a2a_agents(&self) -> HashMap<AgentId, colloquy_a2a::Endpoint> {
        match self {
            Identity::Open => HashMap::new(),
            Identity::Tokens { a2a, .. } => a2a.clone(),
        }
    }

    /// Who the request's headers say the caller is.
    pub fn identify(&self, parts: &Parts) -> Result<Caller, ApiError> {
        self.identify_headers(&parts.headers)
    }

    /// [`Identity::identify`] from the headers alone.
    pub fn identify_headers(&self, headers: &axum::http::HeaderMap) -> Result<Caller, ApiError> {
        match self {
            Identity::Open => {
                let agent = headers
                    .get(AGENT_HEADER)
                    .ok_or_else(|| {
                        ApiError::Unauthenticated(
                            "open development mode: name the caller with the X-Agent-Id header"
                                .into(),
                        )
                    })?
                    .to_str()
                    .ok()
                    .filter(|id| valid_agent_id(id))
                    .ok_or_else(|| {
                        ApiError::Unauthenticated(format!(
                            "X-Agent-Id is not 1 to {MAX_AGENT_ID_LEN} characters of A-Z a-z 0-9 - _ . :"
                        ))
                    })?;
                if agent == ENGINE_PARTY {
                    return Err(ApiError::Unauthenticated(format!(
                        "X-Agent-Id `{ENGINE_PARTY}` is reserved for the engine's own messages"
                    )));
                }
                Ok(Caller::Agent(AgentId::from(agent)))
            }
            Identity::Tokens { callers, jwt, .. } => {
                let token = bearer_token(headers)?.ok_or_else(|| {
                    ApiError::Unauthenticated("missing `Authorization: Bearer` token".into())
                })?;
                if let Some(caller) = callers.get(&digest(token)) {
                    return Ok(caller.clone());
                }
                match jwt {
                    Some(jwt) => jwt
                        .verify(token)
                        .map_err(|error| ApiError::Unauthenticated(error.to_string())),
                    None => Err(ApiError::Unauthenticated("unknown bearer token".into())),
                }
            }
        }
    }
}

/// The token of the request's `Authorization: Bearer <token>` header, if it has one. The
/// scheme is matched without regard to case (RFC 9110: `bearer` is `Bearer`); two
/// `Authorization` headers are refused rather than one of them picked.
pub fn bearer_token(headers: &axum::http::HeaderMap) -> Result<Option<&str>, ApiError> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(ApiError::Unauthenticated(
            "more than one `Authorization` header".into(),
        ));
    }
    let Ok(value) = value.to_str() else {
        // Tokens are visible ASCII; saying "missing" here would send the caller looking for
        // a header it did send.
        return Err(ApiError::Unauthenticated(
            "the `Authorization` header is not visible ASCII".into(),
        ));
    };
    let Some((scheme, token)) = value.split_once(' ') else {
        return Ok(None);
    };
    let token = token.trim();
    Ok((scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token))
}

/// Agent ids follow the conversation id alphabet, so they are safe in paths and logs.
pub fn valid_agent_id(id: &str) -> bool {
    colloquy_core::ids::is_id(id)
}

/// Middleware over every route: lets a JWT whose kid the keys lack refresh them before
/// any handler identifies the caller ([`Identity::prepare`]), and counts each request
/// refused 401 in `colloquy_auth_failures_total` by the check its credential failed.
pub async fn gate(
    axum::extract::State(state): axum::extract::State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let identity = state.identity();
    identity.prepare(request.headers()).await;
    super::agent_keys::bind_presented_key(&state, request.headers()).await;
    // Only the credential is kept for the count, and only where there are credentials.
    let mut credential = axum::http::HeaderMap::new();
    if matches!(identity, Identity::Tokens { .. }) {
        for value in request.headers().get_all(header::AUTHORIZATION) {
            credential.append(header::AUTHORIZATION, value.clone());
        }
    }
    let response = next.run(request).await;
    if response.status() == axum::http::StatusCode::UNAUTHORIZED {
        state
            .metrics()
            .auth_failure(identity.failed_check(&credential));
    }
    response
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Caller, ApiError> {
        // A node of a cluster sending a remote A2A agent's answer to its conversation's owner
        // (checked by the router: node secret, a remote A2A agent).
        if let Some(crate::ownership::ActingAs(agent)) = parts.extensions.get() {
            return Ok(Caller::Agent(agent.clone()));
        }
        state.identity().identify(parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(yaml: &str) -> Result<Identity, String> {
        let file: AgentsFile = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
        Identity::from_agents(file)
    }

    #[test]
    fn unknown_fields_and_reused_tokens_are_refused() {
        assert!(
            file("agents: [{id: a, token: t, sender: x}]")
                .unwrap_err()
                .contains("unknown field")
        );
        assert!(
            file("agents: [{id: a, token: t}, {id: b, token: t}]")
                .unwrap_err()
                .contains("used twice")
        );
        assert!(file("agents: [{id: 'a b', token: t}]").is_err());
        assert!(
            file("agents: [{id: 'colloquy:engine', token: t}]")
                .unwrap_err()
                .contains("reserved")
        );
    }

    /// `inbox: false` names an agent without an inbox, which can then have no webhook.
    #[test]
    fn agents_without_an_inbox_are_listed_and_have_no_webhook() {
        let identity =
            file("agents: [{id: a, token: t1, inbox: false}, {id: b, token: t2}]").expect("valid");
        assert_eq!(
            identity.inboxless(),
            HashSet::from([AgentId::from("a")]),
            "b keeps an inbox by default"
        );
        assert!(
            file("agents: [{id: a, token: t, inbox: false, webhook: 'http://127.0.0.1:1/a'}]")
                .unwrap_err()
                .contains("webhooks push from the inbox")
        );
    }

    /// An A2A agent needs no token, keeps an inbox (its messages are sent from there) and
    /// has no webhook; every other agent needs a token.
    #[test]
    fn a2a_agents_need_no_token_and_no_webhook() {
        let identity =
            file("agents: [{id: a, token: t}, {id: remote, a2a: 'http://127.0.0.1:1/a2a'}]")
                .expect("valid");
        assert_eq!(
            identity.a2a_agents(),
            HashMap::from([(
                AgentId::from("remote"),
                colloquy_a2a::Endpoint {
                    url: "http://127.0.0.1:1/a2a".to_owned(),
                    token: None,
                    timeout: colloquy_a2a::A2A_TIMEOUT,
                }
            )])
        );
        let with_token = file("agents: [{id: r, a2a: 'http://x', a2a_token: s3cret}]")
            .expect("valid")
            .a2a_agents();
        assert_eq!(
            with_token[&AgentId::from("r")].token.as_deref(),
            Some("s3cret")
        );
        assert!(identity.webhooks().is_empty());
        let refused = |yaml: &str, says: &str| {
            let error = file(yaml).unwrap_err();
            assert!(error.contains(says), "{yaml}: {error}");
        };
        refused("agents: [{id: a}]", "has no token");
        refused(
            "agents: [{id: a, a2a: 'ftp://x'}]",
            "a2a is not an http(s) URL",
        );
        refused(
            "agents: [{id: a, a2a: 'http://x', webhook: 'http://y'}]",
            "both a webhook and an a2a endpoint",
        );
        refused(
            "agents: [{id: a, token: t, a2a_token: x}]",
            "no a2a endpoint",
        );
        refused(
            "agents: [{id: a, a2a: 'http://x', a2a_timeout_s: 0}]",
            "1 to 3600 seconds",
        );
        refused(
            "agents: [{id: a, a2a: 'http://x', inbox: false}]",
            "A2A agents are sent their messages from the inbox",
        );
    }

    /// The cause is said once, also where a report prints the whole cause chain.
    #[test]
    fn an_unreadable_agents_file_says_why_once() {
        let error = AgentsFile::read(Path::new("/nonexistent/agents.yaml")).expect_err("no file");
        let report = format!("{:#}", anyhow::Error::from(error));
        assert!(
            report.starts_with("cannot read /nonexistent/agents.yaml: "),
            "{report}"
        );
        assert_eq!(report.matches("os error").count(), 1, "{report}");
    }

    #[test]
    fn tokens_name_their_agents() {
        let identity = file("admin_token: root\nagents: [{id: alice, token: t1}]").expect("valid");
        let parts = |value: &str| {
            axum::http::Request::builder()
                .header("authorization", value)
                .body(())
                .expect("request")
                .into_parts()
                .0
        };
        assert_eq!(
            identity.identify(&parts("Bearer t1")).expect("known"),
            Caller::Agent("alice".into())
        );
        assert_eq!(
            identity.identify(&parts("Bearer root")).expect("known"),
            Caller::Admin
        );
        assert!(identity.identify(&parts("Bearer nope")).is_err());
        // The scheme's case does not matter; another scheme is no token.
        assert_eq!(
            identity.identify(&parts("bearer  t1 ")).expect("known"),
            Caller::Agent("alice".into())
        );
        let error = identity
            .identify(&parts("Basic dDE="))
            .expect_err("not bearer");
        assert!(error.to_string().contains("missing"), "{error}");
        let (mut latin1, ()) = axum::http::Request::builder()
            .body(())
            .expect("request")
            .into_parts();
        latin1.headers.insert(
            "authorization",
            axum::http::HeaderValue::from_bytes(b"Bearer t\xe9").expect("a header value"),
        );
        let error = identity.identify(&latin1).expect_err("not ASCII");
        assert!(error.to_string().contains("not visible ASCII"), "{error}");
        // Two credentials are refused, not one of them picked.
        let (mut two, ()) = axum::http::Request::builder()
            .header("authorization", "Bearer t1")
            .header("authorization", "Bearer root")
            .body(())
            .expect("request")
            .into_parts();
        let error = identity.identify(&two).expect_err("two headers");
        assert!(error.to_string().contains("more than one"), "{error}");
        two.headers.remove("authorization");
        assert!(identity.identify(&two).is_err());
    }
}
