//! Agents' public signing keys that the server learns while it runs, kept with the
//! conversations so every node and every restart knows them: keys the administrator
//! registers (`PUT /v1/agents/{id}/signing-keys/{kid}`) and keys an identity provider binds
//! to an agent's JWT with a `cnf` claim (RFC 7800). The agents file's `signing_keys` are not
//! kept here: the file is their home.
//!
//! A key is never deleted, only revoked or left to lapse: an audit record of a conversation
//! signed last year still needs the key it was signed with (docs/security.md).

use colloquy_protocol::message::AgentId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One public key of one agent, with where it came from and how long it may sign.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentKey {
    /// The agent it belongs to.
    pub agent: AgentId,
    /// Its key id, unique per agent.
    pub kid: String,
    /// The public JWK (Ed25519 or P-256), `kid` included.
    pub jwk: Value,
    /// Who vouched for it.
    pub source: KeySource,
    /// When it was first kept, in Unix milliseconds.
    pub registered_at: u64,
    /// Until when it may sign new messages (Unix milliseconds), when it lapses: the latest
    /// expiry of the tokens that bound it (`cnf`). `None`: until revoked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valid_until: Option<u64>,
    /// When the administrator revoked it (Unix milliseconds); it signs nothing new after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<u64>,
}

/// Who vouched that a key is an agent's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum KeySource {
    /// The administrator registered it.
    Admin,
    /// A JWT of this issuer named it in its `cnf` claim (RFC 7800 §3.2).
    Cnf {
        /// The token's `iss`.
        issuer: String,
    },
}

impl AgentKey {
    /// Whether it may sign a message at `now` (Unix milliseconds): not revoked, and not
    /// lapsed more than `grace_ms` ago (the clock leeway the tokens that bound it get).
    pub fn signs_at(&self, now: u64, grace_ms: u64) -> bool {
        self.revoked_at.is_none_or(|at| now < at)
            && (self.valid_until).is_none_or(|until| now <= until.saturating_add(grace_ms))
    }
}
