//! Signed messages at the door: a message that carries a signature (`signature`, a detached
//! JWS over what its sender signed, `colloquy_trust::message`) is checked against the
//! sender's keys from the agents file before the engine sees it, so the engine records only
//! signatures that hold. Whether a template *requires* signatures is the engine's check (it
//! also refuses unsigned messages that reach it through A2A). See docs/security.md.

use colloquy_core::EngineError;
use colloquy_protocol::message::{SendMessage, StartConversation};
use colloquy_protocol::template::Signatures;

use super::AppState;
use super::error::ApiError;

/// `message`'s signature, when it has one, holds under `sender`'s keys for conversation
/// `conversation_id` (those of the agents file, and those registered or bound by a token,
/// `super::agent_keys`): else 422 `bad_signature` saying why (no keys, unknown, revoked or
/// lapsed key, altered).
pub async fn check(
    state: &AppState,
    sender: &str,
    conversation_id: &str,
    message: &SendMessage,
) -> Result<(), ApiError> {
    let Some(jws) = &message.signature else {
        return Ok(());
    };
    // A key that signed once but was revoked or lapsed is named as such, not as unknown.
    let lapsed = || async {
        let kid = colloquy_trust::jws::Signature::parse_detached(jws)
            .ok()
            .and_then(|signature| signature.kid())?;
        super::agent_keys::why_not(state, sender, &kid).await
    };
    let Some(keys) = super::agent_keys::signing_keys(state, sender).await? else {
        let why = lapsed().await.unwrap_or_else(|| {
            format!(
                "unknown key: no signing keys are registered for `{sender}` (`signing_keys` in \
                 the agents file, a key the administrator registered, or a token's `cnf`)"
            )
        });
        return Err(EngineError::BadSignature(why).into());
    };
    let fields = message.signed_fields(conversation_id, sender);
    match colloquy_trust::message::verify(&keys, &fields, jws) {
        Ok(_) => Ok(()),
        Err(why) if why.starts_with("unknown key") => {
            Err(EngineError::BadSignature(lapsed().await.unwrap_or(why)).into())
        }
        Err(why) => Err(EngineError::BadSignature(why).into()),
    }
}

/// A start's opening message signed as any message is (over the conversation id the client
/// chose: a signed opening message needs one), and no remote A2A agent among the
/// participants of a template that requires signatures: it could not sign its replies.
pub async fn check_start(
    state: &AppState,
    initiator: &str,
    request: &StartConversation,
) -> Result<(), ApiError> {
    if let Some(message) = &request.message {
        match &request.conversation_id {
            Some(id) => check(state, initiator, id, message).await?,
            None if message.signature.is_some() => {
                return Err(EngineError::BadSignature(
                    "a signed opening message needs the conversation_id it signed, chosen by \
                     the client"
                        .to_owned(),
                )
                .into());
            }
            None => {}
        }
    }
    let Some(remote) = (request.participants.iter()).find(|p| state.identity().is_a2a(p)) else {
        return Ok(());
    };
    // Every revision the start may land on (a ramped candidate's too), looked at without
    // counting as a start.
    let requires = (state.engine().starting_templates(&request.template).iter())
        .any(|template| template.signatures == Signatures::Required);
    if requires {
        return Err(EngineError::BadSignature(format!(
            "participant `{remote}` is a remote A2A agent, which cannot sign its messages, and \
             template `{}` requires signatures",
            request.template
        ))
        .into());
    }
    Ok(())
}
