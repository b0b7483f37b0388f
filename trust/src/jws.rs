//! JWS signatures (RFC 7515) with Ed25519 (`EdDSA`) and P-256 (`ES256`) keys, and the key
//! sets (JWKS) that verify them.
//!
//! Everything Colloquy signs is a JSON value in its RFC 8785 form ([`crate::jcs`]), so the
//! signing input is `protected || "." || base64url(canonical bytes)`, where `protected` is
//! the base64url of `{"alg": …, "kid": …, "typ": …}`. Who signs what:
//! - A2A agent cards (`colloquy_a2a::signing`): the card without `signatures`.
//! - The engine's audit records ([`crate::record`]): the chain's head and the time.
//! - Senders' messages (detached: the payload is the message's signed fields, which the
//!   receiver rebuilds, so the JWS travels without it).
//!
//! Only the two algorithms named are known: never `none`, never an HMAC, never a key the
//! header points at (`jku`, `jwk`): only the keys a [`KeySet`] was given count.

use std::collections::HashMap;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey};
use serde_json::{Value, json};

/// A private key that signs, named by a key id.
pub struct Signer {
    key: PrivateKey,
    kid: String,
}

enum PrivateKey {
    Ed25519(Ed25519KeyPair),
    P256(EcdsaKeyPair),
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("alg", &self.alg())
            .field("kid", &self.kid)
            .finish_non_exhaustive()
    }
}

/// A signature's two parts, as a flattened JWS without its payload carries them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// base64url of the protected header.
    pub protected: String,
    /// base64url of the signature bytes.
    pub signature: String,
}

impl Signature {
    /// The compact serialization with the payload detached (RFC 7515 appendix F):
    /// `protected..signature`.
    pub fn detached(&self) -> String {
        format!("{}..{}", self.protected, self.signature)
    }

    /// The `kid` its protected header names, if it is base64url JSON that names one.
    pub fn kid(&self) -> Option<String> {
        let header: Value = URL_SAFE_NO_PAD
            .decode(&self.protected)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())?;
        header.get("kid")?.as_str().map(str::to_owned)
    }

    /// A compact JWS whose payload is detached (`protected..signature`), split.
    pub fn parse_detached(jws: &str) -> Result<Signature, String> {
        let mut parts = jws.split('.');
        match (parts.next(), parts.next(), parts.next(), parts.next()) {
            (Some(protected), Some(""), Some(signature), None)
                if !protected.is_empty() && !signature.is_empty() =>
            {
                Ok(Signature {
                    protected: protected.to_owned(),
                    signature: signature.to_owned(),
                })
            }
            _ => Err("not a detached compact JWS (`header..signature`)".to_owned()),
        }
    }
}

impl Signer {
    /// The key in `path` (PKCS#8, PEM or DER; Ed25519 or P-256), named `kid`.
    pub fn from_file(path: &Path, kid: &str) -> Result<Signer, String> {
        let bytes =
            std::fs::read(path).map_err(|error| format!("the key {}: {error}", path.display()))?;
        Signer::from_pkcs8(&pkcs8_der(&bytes)?, kid)
            .map_err(|why| format!("the key {}: {why}", path.display()))
    }

    /// A key from its PKCS#8 DER bytes.
    pub fn from_pkcs8(der: &[u8], kid: &str) -> Result<Signer, String> {
        if kid.is_empty() {
            return Err("a key id is required".to_owned());
        }
        let key = if let Ok(pair) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            PrivateKey::Ed25519(pair)
        } else {
            let pair = EcdsaKeyPair::from_pkcs8(
                &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
                der,
                &SystemRandom::new(),
            )
            .map_err(|_| "not a PKCS#8 Ed25519 or P-256 private key".to_owned())?;
            PrivateKey::P256(pair)
        };
        Ok(Signer {
            key,
            kid: kid.to_owned(),
        })
    }

    /// A fresh Ed25519 key (PKCS#8 DER), for tests and `colloquy audit keygen`.
    pub fn generate_ed25519() -> Result<Vec<u8>, String> {
        Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
            .map(|der| der.as_ref().to_vec())
            .map_err(|_| "no key could be generated".to_owned())
    }

    /// A fresh P-256 key (PKCS#8 DER).
    pub fn generate_p256() -> Result<Vec<u8>, String> {
        EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &SystemRandom::new(),
        )
        .map(|der| der.as_ref().to_vec())
        .map_err(|_| "no key could be generated".to_owned())
    }

    /// `EdDSA` or `ES256`.
    pub fn alg(&self) -> &'static str {
        match self.key {
            PrivateKey::Ed25519(_) => "EdDSA",
            PrivateKey::P256(_) => "ES256",
        }
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK, for the operator to hand to those who verify.
    pub fn public_jwk(&self) -> Value {
        match &self.key {
            PrivateKey::Ed25519(pair) => json!({
                "kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": self.kid,
                "x": URL_SAFE_NO_PAD.encode(pair.public_key().as_ref()),
            }),
            PrivateKey::P256(pair) => {
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

    /// A signature over `payload` with a protected header of this key's `alg` and `kid` and
    /// `typ`.
    pub fn sign(&self, payload: &[u8], typ: &str) -> Result<Signature, String> {
        let header = json!({"alg": self.alg(), "kid": self.kid, "typ": typ});
        let protected = URL_SAFE_NO_PAD.encode(header.to_string());
        let input = signing_input(&protected, payload);
        let signature = match &self.key {
            PrivateKey::Ed25519(pair) => pair.sign(input.as_bytes()).as_ref().to_vec(),
            PrivateKey::P256(pair) => pair
                .sign(&SystemRandom::new(), input.as_bytes())
                .map_err(|_| "the payload could not be signed".to_owned())?
                .as_ref()
                .to_vec(),
        };
        Ok(Signature {
            protected,
            signature: URL_SAFE_NO_PAD.encode(signature),
        })
    }
}

fn signing_input(protected: &str, payload: &[u8]) -> String {
    format!("{protected}.{}", URL_SAFE_NO_PAD.encode(payload))
}

/// PKCS#8 DER from a PEM (`-----BEGIN PRIVATE KEY-----`) or DER file.
pub fn pkcs8_der(bytes: &[u8]) -> Result<Vec<u8>, String> {
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

/// PKCS#8 DER as PEM (`-----BEGIN PRIVATE KEY-----`, 64 columns), as key files are kept.
pub fn pkcs8_pem(der: &[u8]) -> String {
    let body = STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN PRIVATE KEY-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(&String::from_utf8_lossy(line));
        pem.push('\n');
    }
    pem.push_str("-----END PRIVATE KEY-----\n");
    pem
}

/// Public keys that verify signatures, by key id.
#[derive(Debug, Default, Clone)]
pub struct KeySet {
    keys: HashMap<String, PublicKey>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PublicKey {
    alg: &'static str,
    /// The raw public key: 32 bytes (Ed25519) or an uncompressed P-256 point.
    public: Vec<u8>,
}

impl KeySet {
    /// The keys of a JWKS document (`{"keys": [JWK, …]}`); every key needs a `kid`. Keys of
    /// other types (RSA, say, in an identity provider's set) are an error: a signature
    /// Colloquy checks is never made with one.
    pub fn from_jwks(jwks: &Value) -> Result<KeySet, String> {
        let mut set = KeySet::default();
        set.add_jwks(jwks)?;
        Ok(set)
    }

    /// Adds the keys of a JWKS document; a key id already present is an error unless it
    /// names the same key.
    pub fn add_jwks(&mut self, jwks: &Value) -> Result<(), String> {
        let keys = jwks
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| "a JWKS document has a `keys` list".to_owned())?;
        for (index, key) in keys.iter().enumerate() {
            let (kid, public) = public_key(key).map_err(|why| format!("keys[{index}]{why}"))?;
            match self.keys.get(&kid) {
                Some(known) if *known != public => {
                    return Err(format!("keys[{index}]: key id `{kid}` names two keys"));
                }
                _ => {
                    self.keys.insert(kid, public);
                }
            }
        }
        Ok(())
    }

    /// The keys of a JWKS file.
    pub fn from_file(path: &Path) -> Result<KeySet, String> {
        let mut set = KeySet::default();
        set.add_file(path)?;
        Ok(set)
    }

    /// Adds the keys of a JWKS file.
    pub fn add_file(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("the key set {}: {error}", path.display()))?;
        let jwks: Value = serde_json::from_str(&text)
            .map_err(|error| format!("the key set {}: {error}", path.display()))?;
        self.add_jwks(&jwks)
            .map_err(|why| format!("the key set {}: {why}", path.display()))
    }

    /// Whether the set holds no key.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether the set holds a key `kid`.
    pub fn contains(&self, kid: &str) -> bool {
        self.keys.contains_key(kid)
    }

    /// The id of the key whose signature over `payload` `signature` is. `Err` says why it
    /// does not hold: a header that is not base64url JSON, an unknown key, an algorithm the
    /// key is not for (so `none` and HMAC never pass), a signature that does not verify (the
    /// payload or the signature was altered).
    pub fn verify(&self, signature: &Signature, payload: &[u8]) -> Result<String, String> {
        let header: Value = URL_SAFE_NO_PAD
            .decode(&signature.protected)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(|| "the protected header is not base64url JSON".to_owned())?;
        let field = |name: &str| {
            header
                .get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let (kid, alg) = (field("kid"), field("alg"));
        let key = self
            .keys
            .get(&kid)
            .ok_or_else(|| format!("no known key `{kid}`"))?;
        if key.alg != alg {
            return Err(format!(
                "key `{kid}` is {}, the signature says `{alg}`",
                key.alg
            ));
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(&signature.signature)
            .map_err(|_| "the signature is not base64url".to_owned())?;
        let algorithm: &dyn signature::VerificationAlgorithm = match key.alg {
            "EdDSA" => &signature::ED25519,
            _ => &signature::ECDSA_P256_SHA256_FIXED,
        };
        let input = signing_input(&signature.protected, payload);
        UnparsedPublicKey::new(algorithm, &key.public)
            .verify(input.as_bytes(), &bytes)
            .map(|()| kid.clone())
            .map_err(|_| format!("the signature by `{kid}` does not hold"))
    }
}

/// The RFC 7638 thumbprint of a public Ed25519 or P-256 JWK: the base64url SHA-256 of its
/// required members in lexicographic order, no whitespace. It names a key that has no `kid`
/// (a `cnf` key, say) the same way wherever it is computed.
pub fn thumbprint(jwk: &Value) -> Result<String, String> {
    let field = |name: &str| {
        jwk.get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!(".{name}: required"))
    };
    let members = match (field("kty")?, field("crv")?) {
        ("OKP", "Ed25519") => serde_json::json!({"crv": "Ed25519", "kty": "OKP", "x": field("x")?}),
        ("EC", "P-256") => serde_json::json!({
            "crv": "P-256", "kty": "EC", "x": field("x")?, "y": field("y")?,
        }),
        _ => return Err(": an OKP/Ed25519 or EC/P-256 key is expected".to_owned()),
    };
    let canonical = crate::jcs::canonicalize(&members);
    Ok(URL_SAFE_NO_PAD.encode(ring::digest::digest(
        &ring::digest::SHA256,
        canonical.as_bytes(),
    )))
}

/// A JWK's key id and public key; `Err` starts with the field at fault (`.x: …`).
fn public_key(key: &Value) -> Result<(String, PublicKey), String> {
    let field = |name: &str| key.get(name).and_then(Value::as_str);
    let bytes = |name: &str| -> Result<Vec<u8>, String> {
        let text = field(name).ok_or_else(|| format!(".{name}: required"))?;
        URL_SAFE_NO_PAD
            .decode(text)
            .map_err(|error| format!(".{name}: {error}"))
    };
    let kid = field("kid").ok_or_else(|| ".kid: required".to_owned())?;
    let public = match (field("kty"), field("crv")) {
        (Some("OKP"), Some("Ed25519")) => PublicKey {
            alg: "EdDSA",
            public: bytes("x")?,
        },
        (Some("EC"), Some("P-256")) => {
            let mut point = vec![4];
            point.extend(bytes("x")?);
            point.extend(bytes("y")?);
            PublicKey {
                alg: "ES256",
                public: point,
            }
        }
        _ => return Err(": an OKP/Ed25519 or EC/P-256 key is expected".to_owned()),
    };
    Ok((kid.to_owned(), public))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thumbprints_are_rfc_8037s() {
        // RFC 8037 appendix A.3.
        let jwk = serde_json::json!({
            "kty": "OKP", "crv": "Ed25519",
            "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
        });
        assert_eq!(
            thumbprint(&jwk).as_deref(),
            Ok("kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k")
        );
        assert!(thumbprint(&serde_json::json!({"kty": "RSA", "crv": "x"})).is_err());
    }

    fn signer(der: Vec<u8>, kid: &str) -> Signer {
        Signer::from_pkcs8(&der, kid).expect("a signer")
    }

    #[test]
    fn a_signature_verifies_with_its_key_and_not_when_altered() {
        for key in [
            signer(Signer::generate_ed25519().unwrap(), "ed"),
            signer(Signer::generate_p256().unwrap(), "ec"),
        ] {
            let keys = KeySet::from_jwks(&json!({"keys": [key.public_jwk()]})).unwrap();
            let signature = key.sign(b"{\"a\":1}", "JOSE").unwrap();
            assert_eq!(
                keys.verify(&signature, b"{\"a\":1}"),
                Ok(key.kid().to_owned())
            );
            let why = keys.verify(&signature, b"{\"a\":2}").unwrap_err();
            assert!(why.contains("does not hold"), "{why}");
            let parsed = Signature::parse_detached(&signature.detached()).unwrap();
            assert_eq!(parsed, signature);
        }
    }

    #[test]
    fn none_hmac_and_unknown_keys_never_pass() {
        let key = signer(Signer::generate_ed25519().unwrap(), "ed");
        let keys = KeySet::from_jwks(&json!({"keys": [key.public_jwk()]})).unwrap();
        let forged = |alg: &str, kid: &str| Signature {
            protected: URL_SAFE_NO_PAD.encode(json!({"alg": alg, "kid": kid}).to_string()),
            signature: URL_SAFE_NO_PAD.encode(b"x"),
        };
        assert!(
            keys.verify(&forged("none", "ed"), b"p")
                .unwrap_err()
                .contains("`none`")
        );
        assert!(
            keys.verify(&forged("HS256", "ed"), b"p")
                .unwrap_err()
                .contains("`HS256`")
        );
        assert!(
            keys.verify(&forged("EdDSA", "who"), b"p")
                .unwrap_err()
                .contains("no known key")
        );
        assert!(Signature::parse_detached("a.b.c").is_err());
    }

    #[test]
    fn keys_come_from_pem_and_bad_ones_say_why() {
        let der = Signer::generate_ed25519().unwrap();
        let pem = pkcs8_pem(&der);
        assert_eq!(pkcs8_der(pem.as_bytes()).unwrap(), der);
        assert!(Signer::from_pkcs8(&pkcs8_der(pem.as_bytes()).unwrap(), "k").is_ok());
        assert!(Signer::from_pkcs8(b"nonsense", "k").is_err());
        assert!(Signer::from_pkcs8(&der, "").is_err());
        let why = KeySet::from_jwks(&json!({"keys": [{"kty": "RSA", "kid": "r"}]})).unwrap_err();
        assert!(why.starts_with("keys[0]:"), "{why}");
        let one = signer(der.clone(), "k").public_jwk();
        let other = signer(Signer::generate_ed25519().unwrap(), "k").public_jwk();
        assert!(KeySet::from_jwks(&json!({"keys": [one.clone(), one.clone()]})).is_ok());
        assert!(KeySet::from_jwks(&json!({"keys": [one, other]})).is_err());
    }
}
