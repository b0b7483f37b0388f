//! `GET /v1/conversations/{id}/audit`: a conversation's audit record for the caller (its
//! parties and observers have the events they may see in full and the others as digests; the
//! administrator has all), signed by the engine's audit key when the server has one
//! (`--audit-key`); and `GET /v1/audit/keys`, that key's public half as a JWKS, for those
//! who verify records (`colloquy audit verify --jwks`). See `docs/security.md`.

use axum::extract::State;
use colloquy_protocol::message::ENGINE_PARTY;
use colloquy_trust::record::{AuditRecord, EngineSignature, SIGNATURE_TYPE, signed_payload};
use serde_json::{Value, json};

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::PathParams;
use super::json::JsonResponse;

/// `GET /v1/conversations/{id}/audit` → 200 with the record.
pub async fn record(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<String>,
) -> Result<JsonResponse<AuditRecord>, ApiError> {
    let mut record = state.engine().audit_record(&id, caller.viewer()).await?;
    for sender in signed_senders(&record) {
        let keys = if sender == ENGINE_PARTY {
            // The engine's own messages are signed with its audit key.
            (state.audit_key()).map(|key| json!({ "keys": [key.public_jwk()] }))
        } else {
            super::agent_keys::record_jwks(&state, &sender).await?
        };
        if let Some(keys) = keys {
            record.signer_keys.insert(sender, keys);
        }
    }
    if let Some(key) = state.audit_key() {
        let signature = key
            .sign(signed_payload(&record).as_bytes(), SIGNATURE_TYPE)
            .map_err(ApiError::Internal)?;
        record.engine_signature = Some(EngineSignature {
            kid: key.kid().to_owned(),
            jws: signature.detached(),
        });
    }
    Ok(JsonResponse(record))
}

/// The senders of the signed messages the record shows in full.
fn signed_senders(record: &AuditRecord) -> std::collections::BTreeSet<String> {
    (record.events.iter())
        .filter_map(|event| event.get("message"))
        .filter(|message| message.get("signature").is_some())
        .filter_map(|message| message.get("sender").and_then(Value::as_str))
        .map(str::to_owned)
        .collect()
}

/// `GET /v1/audit/keys` → 200 with the engine's audit key as a JWKS (`{"keys": []}` when
/// the server has none). Public: a public key is what a verifier needs and nothing else.
pub async fn keys(State(state): State<AppState>) -> JsonResponse<Value> {
    let keys: Vec<Value> = state
        .audit_key()
        .map(|key| key.public_jwk())
        .into_iter()
        .collect();
    JsonResponse(json!({ "keys": keys }))
}
