//! Signed agent cards (A2A v1.0 §8.4): a JWS over the card's RFC 8785 canonical form.
//!
//! - **Signing.** An operator who gives `colloquy serve` a key (`--a2a-card-key`, a PKCS#8
//!   Ed25519 or P-256 private key, PEM or DER, and `--a2a-card-key-id`) has every v1.0 card
//!   served with one signature in `signatures`: `protected` is the base64url of
//!   `{"alg": "EdDSA"|"ES256", "kid": …, "typ": "JOSE"}`, `signature` the base64url of the
//!   signature over `protected || "." || base64url(canonical card)`, where the canonical card
//!   is the card without `signatures` in its RFC 8785 form ([`crate::jcs`]: keys sorted by
//!   UTF-16 code units, no insignificant whitespace, numbers as ECMAScript writes them, so a
//!   fractional number signs too). The cards carry no default-valued fields that proto3
//!   would drop, so what is served is what is signed.
//! - **Verifying.** [`TrustStore`] holds the public keys an operator trusts, by key id, from
//!   a JWKS file (`OKP`/`Ed25519` and `EC`/`P-256` keys); [`TrustStore::verify`] accepts a
//!   card when one of its signatures is by a trusted key and holds. A `jku` in a header is
//!   never fetched: only the configured keys count.
//!
//! The JWS machinery is `colloquy_trust::jws`'s, which also signs audit records and messages.

use std::path::Path;

use colloquy_trust::jws::{KeySet, Signature, Signer};
use serde_json::{Value, json};

/// The card as RFC 8785 canonicalizes it ([`crate::jcs`]), `signatures` left out.
pub fn canonical(card: &Value) -> String {
    let mut unsigned = card.clone();
    if let Some(fields) = unsigned.as_object_mut() {
        fields.remove("signatures");
    }
    crate::jcs::canonicalize(&unsigned)
}

/// A private key that signs cards.
#[derive(Debug)]
pub struct CardSigner {
    signer: Signer,
}

impl CardSigner {
    /// The key in `path` (PKCS#8, PEM or DER; Ed25519 or P-256), named `kid`.
    pub fn from_file(path: &Path, kid: &str) -> Result<CardSigner, String> {
        if kid.is_empty() {
            return Err("a key id (--a2a-card-key-id) is required".to_owned());
        }
        Signer::from_file(path, kid)
            .map(|signer| CardSigner { signer })
            .map_err(|why| format!("the card {why}"))
    }

    /// A key from its PKCS#8 DER bytes.
    pub fn from_pkcs8(der: &[u8], kid: &str) -> Result<CardSigner, String> {
        if kid.is_empty() {
            return Err("a key id (--a2a-card-key-id) is required".to_owned());
        }
        Signer::from_pkcs8(der, kid).map(|signer| CardSigner { signer })
    }

    /// The public key as a JWK, for the operator to hand to those who verify.
    pub fn public_jwk(&self) -> Value {
        self.signer.public_jwk()
    }

    /// `card` with its signature in `signatures`.
    pub fn sign(&self, card: &Value) -> Result<Value, String> {
        let Signature {
            protected,
            signature,
        } = self
            .signer
            .sign(canonical(card).as_bytes(), "JOSE")
            .map_err(|_| "the card could not be signed".to_owned())?;
        let mut signed = card.clone();
        if let Some(fields) = signed.as_object_mut() {
            fields.insert(
                "signatures".to_owned(),
                json!([{"protected": protected, "signature": signature}]),
            );
        }
        Ok(signed)
    }
}

/// Public keys trusted to sign remote agents' cards, by key id.
#[derive(Debug, Default)]
pub struct TrustStore {
    keys: KeySet,
}

impl TrustStore {
    /// The keys of a JWKS document (`{"keys": [JWK, …]}`); every key needs a `kid`.
    pub fn from_jwks(jwks: &Value) -> Result<TrustStore, String> {
        KeySet::from_jwks(jwks).map(|keys| TrustStore { keys })
    }

    /// The keys of a JWKS file.
    pub fn from_file(path: &Path) -> Result<TrustStore, String> {
        KeySet::from_file(path)
            .map(|keys| TrustStore { keys })
            .map_err(|why| why.replacen("the key set", "the trust store", 1))
    }

    /// The key id of a trusted key whose signature on `card` holds. `Err` says why none
    /// does (unsigned, unknown key, wrong algorithm, altered card).
    pub fn verify(&self, card: &Value) -> Result<String, String> {
        let signatures = card
            .get("signatures")
            .and_then(Value::as_array)
            .filter(|signatures| !signatures.is_empty())
            .ok_or_else(|| "the card is not signed".to_owned())?;
        let payload = canonical(card);
        let mut why = String::new();
        for signed in signatures {
            let (Some(protected), Some(signature)) = (
                signed.get("protected").and_then(Value::as_str),
                signed.get("signature").and_then(Value::as_str),
            ) else {
                why = "a signature lacks `protected` or `signature`".to_owned();
                continue;
            };
            let signature = Signature {
                protected: protected.to_owned(),
                signature: signature.to_owned(),
            };
            match self.keys.verify(&signature, payload.as_bytes()) {
                Ok(kid) => return Ok(kid),
                Err(reason) => why = reason.replace("no known key", "no trusted key"),
            }
        }
        Err(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ed25519(kid: &str) -> CardSigner {
        let der = Signer::generate_ed25519().expect("a key");
        CardSigner::from_pkcs8(&der, kid).expect("a signer")
    }

    fn p256(kid: &str) -> CardSigner {
        let der = Signer::generate_p256().expect("a key");
        CardSigner::from_pkcs8(&der, kid).expect("a signer")
    }

    fn card() -> Value {
        json!({"name": "bob", "description": "", "version": "1",
            "capabilities": {"streaming": true, "pushNotifications": true},
            "skills": [{"id": "a", "name": "a", "description": "é\n\"x\"", "tags": []}]})
    }

    #[test]
    fn the_canonical_form_sorts_keys_and_leaves_signatures_out() {
        let mut signed = card();
        signed["signatures"] = json!([{"protected": "x", "signature": "y"}]);
        assert_eq!(
            canonical(&signed),
            r#"{"capabilities":{"pushNotifications":true,"streaming":true},"description":"","name":"bob","skills":[{"description":"é\n\"x\"","id":"a","name":"a","tags":[]}],"version":"1"}"#
        );
        // A fractional number has its RFC 8785 form, and a card holding one signs.
        assert_eq!(
            canonical(&json!({"bid": 99.5, "n": 1e30})),
            r#"{"bid":99.5,"n":1e+30}"#
        );
        let signer = ed25519("k-ed");
        let mut priced = card();
        priced["price"] = json!(99.5);
        let signed = signer.sign(&priced).expect("signed");
        let trust = TrustStore::from_jwks(&json!({"keys": [signer.public_jwk()]})).unwrap();
        assert_eq!(trust.verify(&signed).as_deref(), Ok("k-ed"));
    }

    #[test]
    fn a_signed_card_verifies_with_a_trusted_key_and_not_when_altered() {
        for signer in [ed25519("k-ed"), p256("k-ec")] {
            let signed = signer.sign(&card()).expect("signed");
            let trust = TrustStore::from_jwks(&json!({"keys": [signer.public_jwk()]})).unwrap();
            assert_eq!(trust.verify(&signed).as_deref(), Ok(signer.signer.kid()));

            let mut altered = signed.clone();
            altered["name"] = json!("mallory");
            let why = trust.verify(&altered).expect_err("an altered card");
            assert!(why.contains("does not hold"), "{why}");

            let strangers = TrustStore::from_jwks(&json!({"keys": [ed25519("k-ed").public_jwk()
                .as_object().map(|k| { let mut k = k.clone(); k.insert("kid".into(), json!("other")); Value::Object(k) }).unwrap()]}))
            .unwrap();
            let why = strangers.verify(&signed).expect_err("an unknown key");
            assert!(why.contains("no trusted key"), "{why}");
            assert!(trust.verify(&card()).unwrap_err().contains("not signed"));
        }
    }

    #[test]
    fn a_card_key_needs_an_id() {
        let der = Signer::generate_ed25519().expect("a key");
        assert!(CardSigner::from_pkcs8(&der, "k").is_ok());
        let why = CardSigner::from_pkcs8(&der, "").unwrap_err();
        assert!(why.contains("--a2a-card-key-id"), "{why}");
    }
}
