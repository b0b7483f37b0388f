//! Verifying a bearer JWT (RFC 7519, JWS compact serialization, RFC 7515) against a key set
//! (a JWKS, RFC 7517), with `ring`: nothing here does I/O ([`super::jwks`] fetches the keys).
//!
//! Accepted: RS256, PS256, ES256 and EdDSA (Ed25519). Never `none`, never HMAC (`HS*`): a
//! server that verifies with public keys must not let a token choose a symmetric algorithm,
//! or the public key becomes the HMAC secret anyone can sign with. The token's `alg` must
//! also fit the key its `kid` names (an RSA key for RS256/PS256, P-256 for ES256, Ed25519 for
//! EdDSA, and the JWK's own `alg` when it has one).
//!
//! Checks run in this order, and the first that fails is the one reported: the token's
//! shape (`malformed`), its algorithm (`algorithm`), its key (`unknown_kid`), the signature
//! (`signature`), then the claims: `iss` (`issuer`), `aud` (`audience`), `exp` (`expired`),
//! `nbf` (`not_yet_valid`) and the agent or admin claim (`claim`). Claims are read only from
//! a token whose signature holds.

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use colloquy_protocol::message::{AgentId, ENGINE_PARTY};
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde_json::{Map, Value};

use super::Caller;

/// How far `exp` and `nbf` may be off, in seconds: clocks of the issuer and of this server
/// drift, and a token minted a second ahead of this clock must not be refused.
pub const LEEWAY_S: u64 = 60;
/// Longest token read: far more than any identity provider issues, so a client cannot make
/// the server decode megabytes per request.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

/// The check a token failed; its [`Check::label`] is the `check` label of
/// `colloquy_auth_failures_total` and is named in the 401's message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Check {
    /// Not three base64url parts of JSON.
    Malformed,
    /// `none`, HMAC, or an algorithm not accepted here, or one the key does not fit.
    Algorithm,
    /// No key of the JWKS has the token's `kid` (or, without a `kid`, none fits its `alg`).
    UnknownKey,
    /// The signature does not hold.
    Signature,
    /// `exp` has passed.
    Expired,
    /// `nbf` is still ahead.
    NotYetValid,
    /// `iss` is not the configured issuer.
    Issuer,
    /// `aud` does not name the configured audience.
    Audience,
    /// A required claim is missing or unusable (`exp`, the agent claim).
    Claim,
}

impl Check {
    /// The label of this check in messages and metrics.
    pub fn label(self) -> &'static str {
        match self {
            Check::Malformed => "malformed",
            Check::Algorithm => "algorithm",
            Check::UnknownKey => "unknown_kid",
            Check::Signature => "signature",
            Check::Expired => "expired",
            Check::NotYetValid => "not_yet_valid",
            Check::Issuer => "issuer",
            Check::Audience => "audience",
            Check::Claim => "claim",
        }
    }
}

/// Why a token was refused. The detail names claims and key ids, never the token, the
/// signature or key material.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("bearer JWT refused by the `{}` check: {detail}", check.label())]
pub struct JwtError {
    /// The check that failed.
    pub check: Check,
    /// What was wrong.
    pub detail: String,
}

fn refuse(check: Check, detail: impl Into<String>) -> JwtError {
    JwtError {
        check,
        detail: detail.into(),
    }
}

/// A signature algorithm accepted here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// RSASSA-PKCS1-v1_5 with SHA-256.
    Rs256,
    /// RSASSA-PSS with SHA-256.
    Ps256,
    /// ECDSA on P-256 with SHA-256.
    Es256,
    /// Ed25519.
    EdDsa,
}

impl Algorithm {
    /// The algorithm a JWS header names, or why it is refused.
    pub fn from_name(name: &str) -> Result<Algorithm, JwtError> {
        match name {
            "RS256" => Ok(Algorithm::Rs256),
            "PS256" => Ok(Algorithm::Ps256),
            "ES256" => Ok(Algorithm::Es256),
            "EdDSA" => Ok(Algorithm::EdDsa),
            "none" => Err(refuse(
                Check::Algorithm,
                "`alg: none`: unsigned tokens are never accepted",
            )),
            hmac if hmac.starts_with("HS") => Err(refuse(
                Check::Algorithm,
                format!(
                    "`{hmac}`: HMAC is never accepted (the keys here are public, so they are \
                     no secret)"
                ),
            )),
            _ => Err(refuse(
                Check::Algorithm,
                "the algorithm is not one of RS256, PS256, ES256, EdDSA",
            )),
        }
    }

    /// Its JWS name.
    pub fn name(self) -> &'static str {
        match self {
            Algorithm::Rs256 => "RS256",
            Algorithm::Ps256 => "PS256",
            Algorithm::Es256 => "ES256",
            Algorithm::EdDsa => "EdDSA",
        }
    }
}

/// The public part of one JWK, in the form `ring` verifies with.
#[derive(Clone, Debug, PartialEq, Eq)]
enum KeyMaterial {
    /// Modulus and exponent, big-endian, without leading zeros.
    Rsa { n: Vec<u8>, e: Vec<u8> },
    /// The uncompressed point `04 || x || y`.
    P256(Vec<u8>),
    /// The 32-byte public key.
    Ed25519(Vec<u8>),
}

/// One usable key of a JWKS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PublicKey {
    kid: Option<String>,
    /// The JWK's own `alg`, when it names one.
    alg: Option<Algorithm>,
    material: KeyMaterial,
}

impl PublicKey {
    /// Whether a token signed with `alg` may be checked with this key.
    fn fits(&self, alg: Algorithm) -> bool {
        let kty_fits = matches!(
            (&self.material, alg),
            (KeyMaterial::Rsa { .. }, Algorithm::Rs256 | Algorithm::Ps256)
                | (KeyMaterial::P256(_), Algorithm::Es256)
                | (KeyMaterial::Ed25519(_), Algorithm::EdDsa)
        );
        kty_fits && self.alg.is_none_or(|own| own == alg)
    }

    fn kind(&self) -> &'static str {
        match self.material {
            KeyMaterial::Rsa { .. } => "an RSA key",
            KeyMaterial::P256(_) => "an EC P-256 key",
            KeyMaterial::Ed25519(_) => "an Ed25519 key",
        }
    }

    /// Whether `signature` over `message` holds under this key with `alg` (which fits it).
    fn verifies(&self, alg: Algorithm, message: &[u8], signature_bytes: &[u8]) -> bool {
        match (&self.material, alg) {
            (KeyMaterial::Rsa { n, e }, Algorithm::Rs256 | Algorithm::Ps256) => {
                let params = if alg == Algorithm::Rs256 {
                    &signature::RSA_PKCS1_2048_8192_SHA256
                } else {
                    &signature::RSA_PSS_2048_8192_SHA256
                };
                RsaPublicKeyComponents { n, e }
                    .verify(params, message, signature_bytes)
                    .is_ok()
            }
            (KeyMaterial::P256(point), Algorithm::Es256) => {
                // JWS signs ES256 as the fixed-width `r || s`, not DER.
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(message, signature_bytes)
                    .is_ok()
            }
            (KeyMaterial::Ed25519(public), Algorithm::EdDsa) => {
                UnparsedPublicKey::new(&signature::ED25519, public)
                    .verify(message, signature_bytes)
                    .is_ok()
            }
            _ => false,
        }
    }
}

/// The usable keys of a JWKS document: signing keys of the accepted kinds. Keys of other
/// kinds (P-384, encryption keys, symmetric `oct` keys) are left out rather than refused,
/// as identity providers publish such keys beside their signing keys.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeySet {
    keys: Vec<PublicKey>,
    by_kid: HashMap<String, usize>,
}

/// Why a JWKS document was refused as a whole.
#[derive(Debug, thiserror::Error)]
pub enum KeySetError {
    /// Not JSON with a `keys` list.
    #[error("not a JWKS document: {0}")]
    NotJwks(String),
    /// A key has a field that does not decode.
    #[error("keys[{index}].{field}: not base64url")]
    Field {
        /// Which key.
        index: usize,
        /// Which field.
        field: &'static str,
    },
    /// Two keys share a `kid`.
    #[error("keys[{index}]: the kid `{kid}` is used twice")]
    DuplicateKid {
        /// Which key.
        index: usize,
        /// The kid.
        kid: String,
    },
}

fn base64url(text: &str) -> Option<Vec<u8>> {
    URL_SAFE_NO_PAD.decode(text).ok()
}

impl KeySet {
    /// The keys of a JWKS document's text.
    pub fn parse(text: &[u8]) -> Result<KeySet, KeySetError> {
        let document: Value = serde_json::from_slice(text)
            .map_err(|error| KeySetError::NotJwks(error.to_string()))?;
        let keys = document
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| KeySetError::NotJwks("no `keys` list".into()))?;
        let mut set = KeySet::default();
        for (index, jwk) in keys.iter().enumerate() {
            let Some(key) = public_key(jwk, index)? else {
                continue;
            };
            if let Some(kid) = &key.kid
                && set.by_kid.insert(kid.clone(), set.keys.len()).is_some()
            {
                return Err(KeySetError::DuplicateKid {
                    index,
                    kid: kid.clone(),
                });
            }
            set.keys.push(key);
        }
        Ok(set)
    }

    /// How many usable keys it holds.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Whether a key has this `kid`.
    pub fn has_kid(&self, kid: &str) -> bool {
        self.by_kid.contains_key(kid)
    }
}

/// One JWK as a usable key; `None` for a key of a kind not used here.
fn public_key(jwk: &Value, index: usize) -> Result<Option<PublicKey>, KeySetError> {
    let text = |name: &str| jwk.get(name).and_then(Value::as_str);
    if text("use").is_some_and(|usage| usage != "sig") {
        return Ok(None);
    }
    let bytes = |field: &'static str| -> Result<Vec<u8>, KeySetError> {
        text(field)
            .and_then(base64url)
            .ok_or(KeySetError::Field { index, field })
    };
    let material = match (text("kty"), text("crv")) {
        (Some("RSA"), _) => {
            let strip = |mut bytes: Vec<u8>| {
                let zeros = bytes.iter().take_while(|byte| **byte == 0).count();
                bytes.drain(..zeros);
                bytes
            };
            KeyMaterial::Rsa {
                n: strip(bytes("n")?),
                e: strip(bytes("e")?),
            }
        }
        (Some("EC"), Some("P-256")) => {
            let (x, y) = (bytes("x")?, bytes("y")?);
            let mut point = Vec::with_capacity(65);
            point.push(4);
            point.extend(x);
            point.extend(y);
            KeyMaterial::P256(point)
        }
        (Some("OKP"), Some("Ed25519")) => KeyMaterial::Ed25519(bytes("x")?),
        _ => return Ok(None),
    };
    // A JWK whose `alg` is one not accepted here (RS384, HS256) is no key for these tokens.
    let alg = match text("alg") {
        None => None,
        Some(name) => match Algorithm::from_name(name) {
            Ok(alg) => Some(alg),
            Err(_) => return Ok(None),
        },
    };
    Ok(Some(PublicKey {
        kid: text("kid").map(str::to_owned),
        alg,
        material,
    }))
}

/// What a token must say, besides being signed by a key of the set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expectations {
    /// The `iss` every token must carry.
    pub issuer: String,
    /// A value `aud` must be (or contain).
    pub audience: String,
    /// The claim whose string value is the agent id (`sub` by default).
    pub agent_claim: String,
    /// `(name, value)`: a token whose claim `name` is `value`, or an array containing it,
    /// is the administrator's.
    pub admin_claim: Option<(String, String)>,
    /// Tolerance on `exp` and `nbf`, in seconds ([`LEEWAY_S`]).
    pub leeway_s: u64,
}

/// The `kid` a token's header names, if it parses that far (to decide whether the key set
/// must be refreshed before verifying).
pub fn kid_of(token: &str) -> Option<String> {
    let (header, _) = token.split_once('.')?;
    let header: Value = serde_json::from_slice(&base64url(header)?).ok()?;
    header.get("kid")?.as_str().map(str::to_owned)
}

/// Verifies `token` with `keys` against `expect` at `now` (Unix seconds): the caller it
/// names, or the first check it fails.
pub fn verify(
    token: &str,
    keys: &KeySet,
    expect: &Expectations,
    now: u64,
) -> Result<Caller, JwtError> {
    verify_claims(token, keys, expect, now).map(|(caller, _)| caller)
}

/// [`verify`], with the claims of the token that passed (for its `cnf`).
pub fn verify_claims(
    token: &str,
    keys: &KeySet,
    expect: &Expectations,
    now: u64,
) -> Result<(Caller, Map<String, Value>), JwtError> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(refuse(
            Check::Malformed,
            format!("longer than {MAX_TOKEN_BYTES} bytes"),
        ));
    }
    let mut parts = token.split('.');
    let (Some(header_b64), Some(payload_b64), Some(signature_b64), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(refuse(
            Check::Malformed,
            "not a JWS in compact form (three base64url parts joined by dots)",
        ));
    };
    let header = json_object(header_b64, "header")?;
    let alg = header
        .get("alg")
        .and_then(Value::as_str)
        .ok_or_else(|| refuse(Check::Malformed, "the header has no `alg`"))?;
    let alg = Algorithm::from_name(alg)?;
    if header.contains_key("crit") {
        // RFC 7515 §4.1.11: extensions not understood must be refused; none is understood.
        return Err(refuse(
            Check::Malformed,
            "the header has `crit` extensions, none of which is understood here",
        ));
    }
    let signature_bytes = base64url(signature_b64)
        .ok_or_else(|| refuse(Check::Malformed, "the signature is not base64url"))?;
    let message = &token.as_bytes()[..header_b64.len() + 1 + payload_b64.len()];
    match header.get("kid") {
        Some(Value::String(kid)) => {
            let key = keys
                .by_kid
                .get(kid)
                .map(|&index| &keys.keys[index])
                .ok_or_else(|| {
                    refuse(
                        Check::UnknownKey,
                        format!("no key of the JWKS has the kid `{}`", printable(kid)),
                    )
                })?;
            if !key.fits(alg) {
                return Err(refuse(
                    Check::Algorithm,
                    format!(
                        "the token says {} but the key `{}` is {}{}",
                        alg.name(),
                        printable(kid),
                        key.kind(),
                        key.alg
                            .map_or(String::new(), |own| format!(" for {} only", own.name()))
                    ),
                ));
            }
            if !key.verifies(alg, message, &signature_bytes) {
                return Err(refuse(
                    Check::Signature,
                    format!(
                        "the signature does not hold under the key `{}`",
                        printable(kid)
                    ),
                ));
            }
        }
        Some(_) => {
            return Err(refuse(
                Check::Malformed,
                "the header's `kid` is not a string",
            ));
        }
        None => {
            let mut fitting = keys.keys.iter().filter(|key| key.fits(alg)).peekable();
            if fitting.peek().is_none() {
                return Err(refuse(
                    Check::UnknownKey,
                    format!(
                        "the token names no kid and no key of the JWKS is for {}",
                        alg.name()
                    ),
                ));
            }
            if !fitting.any(|key| key.verifies(alg, message, &signature_bytes)) {
                return Err(refuse(
                    Check::Signature,
                    "the signature holds under no key of the JWKS",
                ));
            }
        }
    }
    let claims = json_object(payload_b64, "payload")?;
    let caller = check_claims(&claims, expect, now)?;
    Ok((caller, claims))
}

/// Whether `token`'s payload (unverified) has a `cnf` claim: only such tokens bind a key.
pub fn has_confirmation(token: &str) -> bool {
    let Some(payload) = token.split('.').nth(1) else {
        return false;
    };
    base64url(payload)
        .and_then(|bytes| serde_json::from_slice::<Map<String, Value>>(&bytes).ok())
        .is_some_and(|claims| claims.contains_key("cnf"))
}

/// The claims of a token whose signature holds.
fn check_claims(
    claims: &Map<String, Value>,
    expect: &Expectations,
    now: u64,
) -> Result<Caller, JwtError> {
    match claims.get("iss").and_then(Value::as_str) {
        Some(iss) if iss == expect.issuer => {}
        Some(_) => {
            return Err(refuse(
                Check::Issuer,
                "`iss` is not the issuer this server trusts",
            ));
        }
        None => return Err(refuse(Check::Issuer, "the token has no `iss`")),
    }
    let audience_fits = match claims.get("aud") {
        Some(Value::String(aud)) => *aud == expect.audience,
        Some(Value::Array(auds)) => auds
            .iter()
            .any(|aud| aud.as_str() == Some(&expect.audience)),
        _ => false,
    };
    if !audience_fits {
        return Err(refuse(
            Check::Audience,
            format!(
                "`aud` does not name this server's audience `{}`",
                expect.audience
            ),
        ));
    }
    let time = |name: &str| -> Result<Option<u64>, JwtError> {
        match claims.get(name) {
            None => Ok(None),
            Some(value) => value
                .as_f64()
                .filter(|seconds| seconds.is_finite() && *seconds >= 0.0)
                // Whole seconds are what the claims mean (NumericDate); a fraction is cut.
                .map(|seconds| Some(seconds as u64))
                .ok_or_else(|| refuse(Check::Claim, format!("`{name}` is not a NumericDate"))),
        }
    };
    let exp = time("exp")?.ok_or_else(|| refuse(Check::Claim, "the claim `exp` is missing"))?;
    if now > exp.saturating_add(expect.leeway_s) {
        return Err(refuse(
            Check::Expired,
            format!("the token expired {} s ago", now - exp),
        ));
    }
    if let Some(nbf) = time("nbf")?
        && now.saturating_add(expect.leeway_s) < nbf
    {
        return Err(refuse(
            Check::NotYetValid,
            format!("the token is valid only in {} s", nbf - now),
        ));
    }
    if let Some((name, value)) = &expect.admin_claim {
        let is_admin = match claims.get(name) {
            Some(Value::String(text)) => text == value,
            Some(Value::Array(values)) => values.iter().any(|item| item.as_str() == Some(value)),
            _ => false,
        };
        if is_admin {
            return Ok(Caller::Admin);
        }
    }
    let claim = &expect.agent_claim;
    let agent = claims
        .get(claim)
        .ok_or_else(|| refuse(Check::Claim, format!("the claim `{claim}` is missing")))?
        .as_str()
        .filter(|id| super::valid_agent_id(id) && *id != ENGINE_PARTY)
        .ok_or_else(|| {
            refuse(
                Check::Claim,
                format!(
                    "the claim `{claim}` is not an agent id (1 to {} characters of A-Z a-z 0-9 \
                     - _ . :, not `{ENGINE_PARTY}`)",
                    super::MAX_AGENT_ID_LEN
                ),
            )
        })?;
    Ok(Caller::Agent(AgentId::from(agent)))
}

fn json_object(part: &str, what: &str) -> Result<Map<String, Value>, JwtError> {
    let bytes = base64url(part)
        .ok_or_else(|| refuse(Check::Malformed, format!("the {what} is not base64url")))?;
    match serde_json::from_slice(&bytes) {
        Ok(Value::Object(object)) => Ok(object),
        _ => Err(refuse(
            Check::Malformed,
            format!("the {what} is not a JSON object"),
        )),
    }
}

/// A kid fit to quote in a message: short and printable (it came from the caller).
fn printable(kid: &str) -> String {
    kid.chars()
        .take(64)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair as _};
    use serde_json::json;

    const NOW: u64 = 1_800_000_000;

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    fn expect() -> Expectations {
        Expectations {
            issuer: "https://idp.example".into(),
            audience: "colloquy".into(),
            agent_claim: "sub".into(),
            admin_claim: Some(("role".into(), "admin".into())),
            leeway_s: LEEWAY_S,
        }
    }

    fn claims() -> Value {
        json!({"iss": "https://idp.example", "aud": "colloquy", "sub": "alice",
               "exp": NOW + 300, "nbf": NOW - 10})
    }

    struct Signer {
        pair: Ed25519KeyPair,
        kid: &'static str,
    }

    impl Signer {
        fn new(kid: &'static str) -> Signer {
            let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key");
            Signer {
                pair: Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("the key"),
                kid,
            }
        }

        fn jwk(&self) -> Value {
            json!({"kty": "OKP", "crv": "Ed25519", "kid": self.kid,
                   "x": b64(self.pair.public_key().as_ref())})
        }

        fn sign_with_header(&self, header: &Value, claims: &Value) -> String {
            let input = format!(
                "{}.{}",
                b64(header.to_string().as_bytes()),
                b64(claims.to_string().as_bytes())
            );
            let signature = self.pair.sign(input.as_bytes());
            format!("{input}.{}", b64(signature.as_ref()))
        }

        fn sign(&self, claims: &Value) -> String {
            self.sign_with_header(&json!({"alg": "EdDSA", "kid": self.kid}), claims)
        }
    }

    fn set(jwks: &[Value]) -> KeySet {
        KeySet::parse(json!({"keys": jwks}).to_string().as_bytes()).expect("a JWKS")
    }

    fn check_of(result: Result<Caller, JwtError>) -> &'static str {
        result.expect_err("refused").check.label()
    }

    #[test]
    fn a_good_token_names_its_agent_or_the_admin() {
        let signer = Signer::new("k1");
        let keys = set(&[signer.jwk()]);
        assert_eq!(
            verify(&signer.sign(&claims()), &keys, &expect(), NOW),
            Ok(Caller::Agent("alice".into()))
        );
        let mut admin = claims();
        admin["role"] = json!(["reader", "admin"]);
        assert_eq!(
            verify(&signer.sign(&admin), &keys, &expect(), NOW),
            Ok(Caller::Admin)
        );
        // Within the leeway either side.
        assert!(
            verify(
                &signer.sign(&claims()),
                &keys,
                &expect(),
                NOW + 300 + LEEWAY_S
            )
            .is_ok()
        );
        assert!(
            verify(
                &signer.sign(&claims()),
                &keys,
                &expect(),
                NOW - 10 - LEEWAY_S
            )
            .is_ok()
        );
    }

    #[test]
    fn each_bad_token_fails_its_own_check() {
        let signer = Signer::new("k1");
        let keys = set(&[signer.jwk()]);
        let with = |name: &str, value: Value| {
            let mut claims = claims();
            claims[name] = value;
            signer.sign(&claims)
        };
        let without = |name: &str| {
            let mut claims = claims();
            claims.as_object_mut().expect("object").remove(name);
            signer.sign(&claims)
        };
        let run = |token: &str| check_of(verify(token, &keys, &expect(), NOW));
        assert_eq!(run(&with("exp", json!(NOW - LEEWAY_S - 1))), "expired");
        assert_eq!(
            run(&with("nbf", json!(NOW + LEEWAY_S + 1))),
            "not_yet_valid"
        );
        assert_eq!(run(&with("iss", json!("https://evil.example"))), "issuer");
        assert_eq!(run(&with("aud", json!(["other"]))), "audience");
        assert_eq!(run(&without("exp")), "claim");
        assert_eq!(run(&without("sub")), "claim");
        assert_eq!(run(&with("sub", json!("colloquy:engine"))), "claim");
        assert_eq!(run("garbage"), "malformed");
        assert_eq!(run("a.b.c"), "malformed");
        let other = Signer::new("k1");
        assert_eq!(run(&other.sign(&claims())), "signature");
        let unknown = Signer::new("k2");
        assert_eq!(run(&unknown.sign(&claims())), "unknown_kid");
        // Altered claims after signing.
        let token = signer.sign(&claims());
        let parts: Vec<&str> = token.split('.').collect();
        let mut forged = claims();
        forged["sub"] = json!("mallory");
        let altered = format!(
            "{}.{}.{}",
            parts[0],
            b64(forged.to_string().as_bytes()),
            parts[2]
        );
        assert_eq!(run(&altered), "signature");
    }

    /// `none` and HMAC are refused before any key is looked at, so a token "signed" with the
    /// public key as an HMAC secret gets nowhere.
    #[test]
    fn none_and_hmac_are_never_accepted() {
        let signer = Signer::new("k1");
        let keys = set(&[signer.jwk()]);
        let input = format!(
            "{}.{}",
            b64(json!({"alg": "none"}).to_string().as_bytes()),
            b64(claims().to_string().as_bytes())
        );
        let error = verify(&format!("{input}."), &keys, &expect(), NOW).expect_err("none");
        assert_eq!(error.check, Check::Algorithm);
        assert!(error.detail.contains("none"), "{error}");
        let header = json!({"alg": "HS256", "kid": "k1"});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims().to_string().as_bytes())
        );
        let secret =
            ring::hmac::Key::new(ring::hmac::HMAC_SHA256, signer.jwk().to_string().as_bytes());
        let tag = ring::hmac::sign(&secret, input.as_bytes());
        let error = verify(
            &format!("{input}.{}", b64(tag.as_ref())),
            &keys,
            &expect(),
            NOW,
        )
        .expect_err("HS256");
        assert_eq!(error.check, Check::Algorithm);
        assert!(error.detail.contains("HMAC"), "{error}");
    }

    /// A token's `alg` must fit the kind of key its kid names, and the key's own `alg`.
    #[test]
    fn the_algorithm_must_fit_the_key() {
        let ed = Signer::new("ed");
        let ec_pkcs8 = EcdsaKeyPair::generate_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            &SystemRandom::new(),
        )
        .expect("a key");
        let ec = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            ec_pkcs8.as_ref(),
            &SystemRandom::new(),
        )
        .expect("the key");
        let point = ec.public_key().as_ref();
        let ec_jwk = json!({"kty": "EC", "crv": "P-256", "kid": "ec", "alg": "ES256",
                            "x": b64(&point[1..33]), "y": b64(&point[33..])});
        let keys = set(&[ed.jwk(), ec_jwk]);
        // An EdDSA signature presented as ES256 with the Ed25519 key's kid.
        let token = ed.sign_with_header(&json!({"alg": "ES256", "kid": "ed"}), &claims());
        let error = verify(&token, &keys, &expect(), NOW).expect_err("mismatch");
        assert_eq!(error.check, Check::Algorithm);
        assert!(error.detail.contains("Ed25519"), "{error}");
        // The ES256 key with an EdDSA token.
        let token = ed.sign_with_header(&json!({"alg": "EdDSA", "kid": "ec"}), &claims());
        assert_eq!(check_of(verify(&token, &keys, &expect(), NOW)), "algorithm");
        // A good ES256 token.
        let input = format!(
            "{}.{}",
            b64(json!({"alg": "ES256", "kid": "ec"}).to_string().as_bytes()),
            b64(claims().to_string().as_bytes())
        );
        let signature = ec
            .sign(&SystemRandom::new(), input.as_bytes())
            .expect("signed");
        let token = format!("{input}.{}", b64(signature.as_ref()));
        assert_eq!(
            verify(&token, &keys, &expect(), NOW),
            Ok(Caller::Agent("alice".into()))
        );
        // Without a kid, any key for the algorithm may verify.
        let token = ed.sign_with_header(&json!({"alg": "EdDSA"}), &claims());
        assert!(verify(&token, &keys, &expect(), NOW).is_ok());
    }

    #[test]
    fn key_sets_keep_signing_keys_and_refuse_duplicates() {
        let ed = Signer::new("ed");
        let keys = set(&[
            ed.jwk(),
            json!({"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}),
            json!({"kty": "EC", "crv": "P-384", "kid": "p384", "x": "AA", "y": "AA"}),
            json!({"kty": "RSA", "use": "enc", "kid": "enc", "n": "AQAB", "e": "AQAB"}),
        ]);
        assert_eq!(keys.len(), 1);
        assert!(keys.has_kid("ed") && !keys.has_kid("hmac"));
        let twice = json!({"keys": [ed.jwk(), ed.jwk()]}).to_string();
        assert!(matches!(
            KeySet::parse(twice.as_bytes()),
            Err(KeySetError::DuplicateKid { .. })
        ));
        assert!(KeySet::parse(b"{}").is_err());
        assert_eq!(kid_of(&ed.sign(&claims())).as_deref(), Some("ed"));
        assert_eq!(kid_of("garbage"), None);
    }

    /// Messages quote claims and kids, never the token or the signature.
    #[test]
    fn errors_never_quote_the_token() {
        let signer = Signer::new("k1");
        let keys = set(&[Signer::new("k1").jwk()]);
        let token = signer.sign(&claims());
        let error = verify(&token, &keys, &expect(), NOW).expect_err("other key");
        let signature = token.rsplit('.').next().expect("signature");
        assert!(!error.to_string().contains(signature), "{error}");
    }
}
