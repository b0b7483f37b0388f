//! Signed messages: a sender signs the RFC 8785 form of what it sends
//! (`SendMessage::signed_fields`: the conversation id, the message id, itself, the
//! performative, `to` as sent, the content, `in_reply_to`, `reply_by`) with a detached JWS,
//! and whoever holds its public keys checks it: the server before accepting the message, an
//! auditor from the record later (`Message::signed_fields` rebuilds the same fields).

use colloquy_protocol::message::SendMessage;
use serde_json::Value;

use crate::jws::{KeySet, Signature, Signer};

/// The JWS `typ` of a message signature.
pub const SIGNATURE_TYPE: &str = "colloquy-message+jws";

/// `fields` signed by `signer`: the detached compact JWS a message carries in `signature`.
pub fn sign_fields(signer: &Signer, fields: &Value) -> Result<String, String> {
    let payload = crate::jcs::canonicalize(fields);
    Ok(signer.sign(payload.as_bytes(), SIGNATURE_TYPE)?.detached())
}

/// `message`, to be sent by `sender` in `conversation_id`, with its signature by `signer`.
/// It must name its `message_id` (the signature covers it).
pub fn sign(
    signer: &Signer,
    conversation_id: &str,
    sender: &str,
    message: &mut SendMessage,
) -> Result<(), String> {
    if message.message_id.is_none() {
        return Err("a signed message names its message_id".to_owned());
    }
    let fields = message.signed_fields(conversation_id, sender);
    message.signature = Some(sign_fields(signer, &fields)?);
    Ok(())
}

/// The key id of the key in `keys` whose signature `jws` over `fields` is; `Err` says why
/// not, in words a 422 can carry: not a JWS, signed by a key the sender does not have
/// (`unknown key`), or over other fields (`altered`).
pub fn verify(keys: &KeySet, fields: &Value, jws: &str) -> Result<String, String> {
    let signature = Signature::parse_detached(jws)?;
    let payload = crate::jcs::canonicalize(fields);
    keys.verify(&signature, payload.as_bytes()).map_err(|why| {
        if why.starts_with("no known key") {
            format!("unknown key: {why}")
        } else if why.contains("does not hold") {
            format!("altered: {why} over this message")
        } else {
            why
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_signed_message_verifies_and_an_altered_one_says_so() {
        let signer =
            Signer::from_pkcs8(&Signer::generate_p256().unwrap(), "bob-1").expect("a signer");
        let keys = KeySet::from_jwks(&json!({"keys": [signer.public_jwk()]})).unwrap();
        let mut message = SendMessage::new("propose", json!({"price": 99.5})).with_id("m-1");
        sign(&signer, "c-1", "bob", &mut message).unwrap();
        let jws = message.signature.clone().unwrap();
        let fields = message.signed_fields("c-1", "bob");
        assert_eq!(verify(&keys, &fields, &jws).as_deref(), Ok("bob-1"));

        let other = message.signed_fields("c-2", "bob");
        assert!(
            verify(&keys, &other, &jws)
                .unwrap_err()
                .starts_with("altered")
        );
        let strangers = KeySet::from_jwks(&json!({"keys": []})).unwrap();
        assert!(
            verify(&strangers, &fields, &jws)
                .unwrap_err()
                .starts_with("unknown key")
        );
        let mut unnamed = SendMessage::new("propose", json!({}));
        assert!(sign(&signer, "c-1", "bob", &mut unnamed).is_err());
    }
}
