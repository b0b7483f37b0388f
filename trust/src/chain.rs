//! The hash chain of a conversation's log: every event carries, in `prev`, the chain hash of
//! the event before it, so a removed, reordered or altered event breaks the chain.
//!
//! - An event's **body digest** is the SHA-256 of its RFC 8785 form ([`crate::jcs`]) without
//!   `prev`, with each of its thread transitions (`transitions`) replaced by the transition's
//!   own digest (hex). A reader who may not see one of the transitions (a bidder, of another
//!   bidder's thread) is given `{"redacted": digest}` in its place, and one who may not see an
//!   event at all is given the event's body digest: either way the reader computes every link
//!   without seeing what it may not.
//! - An event's **chain hash** is `SHA-256(prev || body digest)` over the 32 raw bytes of
//!   each; the first event's `prev` is [`GENESIS`].
//! - The chain's **head** is the last event's chain hash.
//!
//! Events recorded before chains existed carry no `prev`: their chain hashes are computed the
//! same way when the conversation is next loaded, and the first event written after that
//! carries the result, so the chain covers them from then on (an alteration made before it
//! cannot be told from the original).

use ring::digest::{SHA256, digest};
use serde_json::Value;

/// The `prev` of a conversation's first event: 32 zero bytes.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The field that carries the chain hash of the event before.
pub const PREV: &str = "prev";

/// The field that stands for what a reader may not see: an event's body digest, or a
/// transition's digest.
pub const REDACTED: &str = "redacted";

/// The body digest of `event` as JSON (see the module docs), lowercase hex.
pub fn body_digest(event: &Value) -> Result<String, String> {
    body_digest_of(event.clone())
}

/// [`body_digest`] of an event the caller owns, which it takes apart rather than copy.
pub fn body_digest_of(event: Value) -> Result<String, String> {
    let Value::Object(mut body) = event else {
        return Err("an event is a JSON object".to_owned());
    };
    if let Some(redacted) = body.get(REDACTED) {
        return digest_field(redacted).map(str::to_owned);
    }
    body.remove(PREV);
    if let Some(Value::Array(transitions)) = body.get_mut("transitions") {
        for transition in transitions.iter_mut() {
            *transition = Value::String(transition_digest(transition)?);
        }
    }
    Ok(sha256_hex(
        crate::jcs::canonicalize(&Value::Object(body)).as_bytes(),
    ))
}

/// The digest of one thread transition: the one it stands for when redacted, else the
/// SHA-256 of its RFC 8785 form.
pub fn transition_digest(transition: &Value) -> Result<String, String> {
    match transition {
        Value::Object(fields) if fields.len() == 1 && fields.contains_key(REDACTED) => {
            digest_field(&fields[REDACTED]).map(str::to_owned)
        }
        _ => Ok(sha256_hex(crate::jcs::canonicalize(transition).as_bytes())),
    }
}

/// The chain hash of an event whose `prev` and body digest are given (both hex).
pub fn link(prev: &str, body_digest: &str) -> Result<String, String> {
    let mut bytes = unhex(prev).ok_or_else(|| format!("`{prev}` is not a SHA-256 in hex"))?;
    bytes.extend(
        unhex(body_digest).ok_or_else(|| format!("`{body_digest}` is not a SHA-256 in hex"))?,
    );
    Ok(sha256_hex(&bytes))
}

/// The SHA-256 of `bytes`, lowercase hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(digest(&SHA256, bytes).as_ref())
}

/// The SHA-256 behind a template revision (`sha256:` and its first 16 hex digits): of the
/// YAML source, then, when the template has a hook module, `\0hook-module:` and the module's
/// SHA-256 in hex. An audit record carries the whole digest, so a verifier holding the
/// source (and the module) checks that it is the revision the conversation ran.
pub fn revision_digest(source: &str, hook_module_sha256: Option<&str>) -> String {
    let mut bytes = source.as_bytes().to_vec();
    if let Some(module) = hook_module_sha256 {
        bytes.extend_from_slice(b"\0hook-module:");
        bytes.extend_from_slice(module.as_bytes());
    }
    sha256_hex(&bytes)
}

fn digest_field(value: &Value) -> Result<&str, String> {
    value
        .as_str()
        .filter(|text| unhex(text).is_some())
        .ok_or_else(|| format!("`{REDACTED}` holds a SHA-256 in hex"))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

/// 32 bytes from 64 lowercase hex digits, or `None`.
fn unhex(text: &str) -> Option<Vec<u8>> {
    fn nibble(digit: u8) -> Option<u8> {
        match digit {
            b'0'..=b'9' => Some(digit - b'0'),
            b'a'..=b'f' => Some(digit - b'a' + 10),
            _ => None,
        }
    }
    if text.len() != 64 {
        return None;
    }
    (text.as_bytes().chunks_exact(2))
        .map(|pair| Some(nibble(pair[0])? << 4 | nibble(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn proposal() -> Value {
        json!({"seq": 3, "at": 10, "prev": GENESIS, "type": "message_accepted",
            "message": {"id": "m", "sender": "p1", "content": {"price": 99.5}},
            "transitions": [{"participant": "p1", "from": "a", "to": "b"},
                            {"participant": "p2", "from": "a", "to": "c"}]})
    }

    #[test]
    fn the_body_digest_leaves_prev_out_and_takes_redactions_for_what_they_hide() {
        let full = proposal();
        let digest = body_digest(&full).unwrap();
        let mut other_prev = full.clone();
        other_prev["prev"] = json!("11".repeat(32));
        assert_eq!(body_digest(&other_prev).unwrap(), digest);

        // A reader of p1's thread gets p2's transition as its digest: the same body digest.
        let hidden = transition_digest(&full["transitions"][1]).unwrap();
        let mut seen_by_p1 = full.clone();
        seen_by_p1["transitions"][1] = json!({"redacted": hidden});
        assert_eq!(body_digest(&seen_by_p1).unwrap(), digest);
        // And one who may not see the event gets its body digest.
        let redacted = json!({"seq": 3, "prev": GENESIS, "redacted": digest});
        assert_eq!(body_digest(&redacted).unwrap(), digest);

        let mut altered = full.clone();
        altered["message"]["content"]["price"] = json!(99.0);
        assert_ne!(body_digest(&altered).unwrap(), digest);
        // Key order and number spelling do not matter; values do.
        let respelled: Value = serde_json::from_str(
            r#"{"transitions":[{"to":"b","from":"a","participant":"p1"},{"participant":"p2","from":"a","to":"c"}],
                "type":"message_accepted","seq":3.0e0,"at":10,"prev":"x",
                "message":{"content":{"price":9.95e1},"sender":"p1","id":"m"}}"#,
        )
        .unwrap();
        assert_eq!(body_digest(&respelled).unwrap(), digest);
    }

    #[test]
    fn links_chain_and_bad_hex_is_refused() {
        let body = sha256_hex(b"x");
        let first = link(GENESIS, &body).unwrap();
        assert_ne!(link(&first, &body).unwrap(), first);
        assert!(link("zz", &body).is_err());
        assert!(body_digest(&json!({"redacted": "short"})).is_err());
        assert!(body_digest(&json!([1])).is_err());
    }

    #[test]
    fn a_revision_digest_covers_the_source_and_the_module() {
        let plain = revision_digest("kind: Template\n", None);
        assert_eq!(plain, sha256_hex(b"kind: Template\n"));
        assert_ne!(revision_digest("kind: Template\n", Some("ab")), plain);
    }
}
