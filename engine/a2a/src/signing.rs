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

use std::collections::HashMap;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
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
pub struct CardSigner {
    key: SigningKey,
    kid: String,
}

enum SigningKey {
    Ed25519(Ed25519KeyPair),
    P256(EcdsaKeyPair),
}

impl std::fmt::Debug for CardSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CardSigner")
            .field("alg", &self.alg())
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

impl CardSigner {
    /// The key in `path` (PKCS#8, PEM or DER; Ed25519 or P-256), named `kid`.
    pub fn from_file(path: &Path, kid: &str) -> Result<CardSigner, String> {
        let bytes = std::fs::read(path)
            .map_err(|error| format!("the card key {}: {error}", path.display()))?;
        CardSigner::from_pkcs8(&pkcs8_der(&bytes)?, kid)
            .map_err(|why| format!("the card key {}: {why}", path.display()))
    }

    /// A key from its PKCS#8 DER bytes.
    pub fn from_pkcs8(der: &[u8], kid: &str) -> Result<CardSigner, String> {
        if kid.is_empty() {
            return Err("a key id (--a2a-card-key-id) is required".to_owned());
        }
        let key = if let Ok(pair) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            SigningKey::Ed25519(pair)
        } else {
            let pair = EcdsaKeyPair::from_pkcs8(
                &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                der,
                &SystemRandom::new(),
            )
            .map_err(|_| "not a PKCS#8 Ed25519 or P-256 private key".to_owned())?;
            SigningKey::P256(pair)
        };
        Ok(CardSigner {
            key,
            kid: kid.to_owned(),
        })
    }

    fn alg(&self) -> &'static str {
        match self.key {
            SigningKey::Ed25519(_) => "EdDSA",
            SigningKey::P256(_) => "ES256",
        }
    }

    /// The public key as a JWK, for the operator to hand to those who verify.
    pub fn public_jwk(&self) -> Value {
        match &self.key {
            SigningKey::Ed25519(pair) => json!({
                "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": self.kid,
                "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref()),
            }),
            SigningKey::P256(pair) => {
                // Uncompressed point: 0x04 || x || y.
                let point = pair.public_key().as_ref();
                json!({
                    "kty": "EC", "crv": "P-256", "alg": "ES256", "kid": self.kid,
                    "x": URL_SAFE_NO_PAD.encode(&point[1..33]),
                    "y": URL_SAFE_NO_PAD.encode(&point[33..65]),
                })
            }
        }
    }

    /// `card` with its signature in `signatures`.
    pub fn sign(&self, card: &Value) -> Result<Value, String> {
        let header = json!({"alg": self.alg(), "kid": self.kid, "typ": "JOSE"});
        let protected = URL_SAFE_NO_PAD.encode(header.to_string());
        let payload = URL_SAFE_NO_PAD.encode(canonical(card));
        let input = format!("{protected}.{payload}");
        let signature = match &self.key {
            SigningKey::Ed25519(pair) => pair.sign(input.as_bytes()).as_ref().to_vec(),
            SigningKey::P256(pair) => pair
                .sign(&SystemRandom::new(), input.as_bytes())
                .map_err(|_| "the card could not be signed".to_owned())?
                .as_ref()
                .to_vec(),
        };
        let mut signed = card.clone();
        if let Some(fields) = signed.as_object_mut() {
            fields.insert(
                "signatures".to_owned(),
                json!([{"protected": protected, "signature": URL_SAFE_NO_PAD.encode(signature)}]),
            );
        }
        Ok(signed)
    }
}

/// PKCS#8 DER from a PEM (`-----BEGIN PRIVATE KEY-----`) or DER file.
fn pkcs8_der(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Ok(bytes.to_vec());
    };
    if !text.contains("-----BEGIN") {
        return Ok(bytes.to_vec());
    }
    let body: String = text
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .map(str::trim)
        .collect();
    STANDARD
        .decode(body)
        .map_err(|error| format!("not PEM: {error}"))
}

/// Public keys trusted to sign remote agents' cards, by key id.
#[derive(Debug, Default)]
pub struct TrustStore {
    keys: HashMap<String, TrustedKey>,
}

#[derive(Debug)]
struct TrustedKey {
    alg: &'static str,
    /// The raw public key: 32 bytes (Ed25519) or an uncompressed P-256 point.
    public: Vec<u8>,
}

impl TrustStore {
    /// The keys of a JWKS document (`{"keys": [JWK, …]}`); every key needs a `kid`.
    pub fn from_jwks(jwks: &Value) -> Result<TrustStore, String> {
        let keys = jwks
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| "a JWKS document has a `keys` list".to_owned())?;
        let mut store = TrustStore::default();
        for (index, key) in keys.iter().enumerate() {
            let field = |name: &str| key.get(name).and_then(Value::as_str);
            let bytes = |name: &str| -> Result<Vec<u8>, String> {
                let text = field(name).ok_or_else(|| format!("keys[{index}].{name}: required"))?;
                URL_SAFE_NO_PAD
                    .decode(text)
                    .map_err(|error| format!("keys[{index}].{name}: {error}"))
            };
            let kid = field("kid").ok_or_else(|| format!("keys[{index}].kid: required"))?;
            let trusted = match (field("kty"), field("crv")) {
                (Some("OKP"), Some("Ed25519")) => TrustedKey {
                    alg: "EdDSA",
                    public: bytes("x")?,
                },
                (Some("EC"), Some("P-256")) => {
                    let mut point = vec![4];
                    point.extend(bytes("x")?);
                    point.extend(bytes("y")?);
                    TrustedKey {
                        alg: "ES256",
                        public: point,
                    }
                }
                _ => {
                    return Err(format!(
                        "keys[{index}]: an OKP/Ed25519 or EC/P-256 key is expected"
                    ));
                }
            };
            store.keys.insert(kid.to_owned(), trusted);
        }
        Ok(store)
    }

    /// The keys of a JWKS file.
    pub fn from_file(path: &Path) -> Result<TrustStore, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("the trust store {}: {error}", path.display()))?;
        let jwks: Value = serde_json::from_str(&text)
            .map_err(|error| format!("the trust store {}: {error}", path.display()))?;
        TrustStore::from_jwks(&jwks)
            .map_err(|why| format!("the trust store {}: {why}", path.display()))
    }

    /// The key id of a trusted key whose signature on `card` holds. `Err` says why none
    /// does (unsigned, unknown key, wrong algorithm, altered card).
    pub fn verify(&self, card: &Value) -> Result<String, String> {
        let signatures = card
            .get("signatures")
            .and_then(Value::as_array)
            .filter(|signatures| !signatures.is_empty())
            .ok_or_else(|| "the card is not signed".to_owned())?;
        let payload = URL_SAFE_NO_PAD.encode(canonical(card));
        let mut why = String::new();
        for signed in signatures {
            let (Some(protected), Some(value)) = (
                signed.get("protected").and_then(Value::as_str),
                signed.get("signature").and_then(Value::as_str),
            ) else {
                why = "a signature lacks `protected` or `signature`".to_owned();
                continue;
            };
            let header: Value = match URL_SAFE_NO_PAD
                .decode(protected)
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            {
                Some(header) => header,
                None => {
                    why = "a signature's protected header is not base64url JSON".to_owned();
                    continue;
                }
            };
            let kid = header
                .get("kid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let alg = header
                .get("alg")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let Some(key) = self.keys.get(kid) else {
                why = format!("no trusted key `{kid}`");
                continue;
            };
            if key.alg != alg {
                why = format!("key `{kid}` is {}, the signature says {alg}", key.alg);
                continue;
            }
            let Ok(value) = URL_SAFE_NO_PAD.decode(value) else {
                why = "a signature is not base64url".to_owned();
                continue;
            };
            let algorithm: &dyn signature::VerificationAlgorithm = match key.alg {
                "EdDSA" => &signature::ED25519,
                _ => &signature::ECDSA_P256_SHA256_FIXED,
            };
            let input = format!("{protected}.{payload}");
            match UnparsedPublicKey::new(algorithm, &key.public).verify(input.as_bytes(), &value) {
                Ok(()) => return Ok(kid.to_owned()),
                Err(_) => why = format!("the signature by `{kid}` does not hold"),
            }
        }
        Err(why)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ed25519(kid: &str) -> CardSigner {
        let der = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key");
        CardSigner::from_pkcs8(der.as_ref(), kid).expect("a signer")
    }

    fn p256(kid: &str) -> CardSigner {
        let der = EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &SystemRandom::new(),
        )
        .expect("a key");
        CardSigner::from_pkcs8(der.as_ref(), kid).expect("a signer")
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
            assert_eq!(trust.verify(&signed).as_deref(), Ok(signer.kid.as_str()));

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
    fn keys_come_from_pem_and_bad_ones_say_why() {
        let der = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key");
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            STANDARD.encode(der.as_ref())
        );
        let der_again = pkcs8_der(pem.as_bytes()).expect("PEM");
        assert!(CardSigner::from_pkcs8(&der_again, "k").is_ok());
        assert!(CardSigner::from_pkcs8(b"nonsense", "k").is_err());
        assert!(CardSigner::from_pkcs8(&der_again, "").is_err());
        assert!(TrustStore::from_jwks(&json!({"keys": [{"kty": "RSA", "kid": "r"}]})).is_err());
    }
}
