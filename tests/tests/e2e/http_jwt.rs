//! Bearer JWTs of an identity provider (`colloquy serve --auth-jwks … --auth-issuer …
//! --auth-audience …`): a JWKS served on loopback by the test, tokens signed here with each
//! algorithm (RS256, PS256, ES256, EdDSA), every kind of bad token refused 401 with the check
//! that failed and counted in `/metrics`, a key rotation followed without a restart, and
//! the admin named by a claim on every admin route.
//!
//! ring cannot generate RSA keys, so the RSA key is a fixture:
//! `tests/fixtures/jwt-rsa-key.der`, made with
//! `openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -outform DER` then
//! `openssl pkcs8 -topk8 -nocrypt -inform DER -outform DER` (ring reads PKCS#8 only).

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use colloquy_policy::Catalog;
use colloquy_policy::live::LiveCatalog;
use colloquy_server::auth::{JwtAuth, jwks, jwt};
use colloquy_server::policy::{self, PolicyState, Reads, Writes};
use colloquy_server::rollout::{Rollouts, ShadowSettings};
use colloquy_server::{self as api, Identity, RunningService, ServiceOptions};
use colloquy_tests::http::{ADMIN_TOKEN, Server, bounded, call, raw};
use reqwest::Method;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _, RsaKeyPair};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

const ISSUER: &str = "https://idp.example/realms/agents";
const AUDIENCE: &str = "colloquy";

fn b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_secs()
}

/// The identity provider's JWKS on a loopback port, which the test may change, and how
/// often it was fetched.
struct Provider {
    jwks: Arc<Mutex<Value>>,
    fetches: Arc<AtomicUsize>,
    url: String,
    _server: tokio::task::JoinHandle<()>,
}

impl Provider {
    async fn serve(keys: &[&Key]) -> Provider {
        let jwks = Arc::new(Mutex::new(jwks_of(keys)));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (shared, counter) = (jwks.clone(), fetches.clone());
        let app = axum::Router::new().route(
            "/jwks",
            axum::routing::get(move || {
                let (shared, counter) = (shared.clone(), counter.clone());
                async move {
                    counter.fetch_add(1, Ordering::SeqCst);
                    let document = shared.lock().expect("not poisoned").clone();
                    axum::Json(document)
                }
            }),
        );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/jwks", listener.local_addr().expect("addr"));
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .await
                .expect("the JWKS server runs");
        });
        Provider {
            jwks,
            fetches,
            url,
            _server: server,
        }
    }

    fn rotate_to(&self, keys: &[&Key]) {
        *self.jwks.lock().expect("not poisoned") = jwks_of(keys);
    }

    fn fetches(&self) -> usize {
        self.fetches.load(Ordering::SeqCst)
    }
}

fn jwks_of(keys: &[&Key]) -> Value {
    json!({"keys": keys.iter().map(|key| key.jwk()).collect::<Vec<_>>()})
}

enum Pair {
    Rsa(RsaKeyPair),
    Ec(EcdsaKeyPair),
    Ed(Ed25519KeyPair),
}

/// A signing key of the provider, with the algorithm its tokens use.
struct Key {
    kid: &'static str,
    alg: &'static str,
    pair: Pair,
}

impl Key {
    fn rsa(kid: &'static str, alg: &'static str) -> Key {
        let der =
            std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/jwt-rsa-key.der"))
                .expect("the RSA fixture");
        Key {
            kid,
            alg,
            pair: Pair::Rsa(RsaKeyPair::from_pkcs8(&der).expect("a PKCS#8 RSA key")),
        }
    }

    fn ec(kid: &'static str) -> Key {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("a P-256 key");
        let pair = EcdsaKeyPair::from_pkcs8(
            &signature::ECDSA_P256_SHA256_FIXED_SIGNING,
            pkcs8.as_ref(),
            &rng,
        )
        .expect("the key");
        Key {
            kid,
            alg: "ES256",
            pair: Pair::Ec(pair),
        }
    }

    fn ed(kid: &'static str) -> Key {
        let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("a key");
        Key {
            kid,
            alg: "EdDSA",
            pair: Pair::Ed(Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("the key")),
        }
    }

    /// Its public JWK, as a provider publishes it.
    fn jwk(&self) -> Value {
        match &self.pair {
            Pair::Rsa(pair) => {
                let public: ring::rsa::PublicKeyComponents<Vec<u8>> = pair.public().into();
                json!({"kty": "RSA", "kid": self.kid, "use": "sig",
                       "n": b64(&public.n), "e": b64(&public.e)})
            }
            Pair::Ec(pair) => {
                let point = pair.public_key().as_ref();
                json!({"kty": "EC", "crv": "P-256", "kid": self.kid, "alg": "ES256",
                       "x": b64(&point[1..33]), "y": b64(&point[33..])})
            }
            Pair::Ed(pair) => json!({"kty": "OKP", "crv": "Ed25519", "kid": self.kid,
                                     "x": b64(pair.public_key().as_ref())}),
        }
    }

    fn signed(&self, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        let rng = SystemRandom::new();
        let signature = match &self.pair {
            Pair::Rsa(pair) => {
                let padding: &'static dyn signature::RsaEncoding = if self.alg == "PS256" {
                    &signature::RSA_PSS_SHA256
                } else {
                    &signature::RSA_PKCS1_SHA256
                };
                let mut out = vec![0; pair.public().modulus_len()];
                pair.sign(padding, &rng, input.as_bytes(), &mut out)
                    .expect("signed");
                out
            }
            Pair::Ec(pair) => pair
                .sign(&rng, input.as_bytes())
                .expect("signed")
                .as_ref()
                .to_vec(),
            Pair::Ed(pair) => pair.sign(input.as_bytes()).as_ref().to_vec(),
        };
        format!("{input}.{}", b64(&signature))
    }

    /// A token with these claims.
    fn token(&self, claims: &Value) -> String {
        self.signed(
            &json!({"alg": self.alg, "kid": self.kid, "typ": "JWT"}),
            claims,
        )
    }

    /// A good token naming `agent`.
    fn for_agent(&self, agent: &str) -> String {
        self.token(&claims(agent))
    }
}

/// The claims of a good token for `sub`, valid for five minutes.
fn claims(sub: &str) -> Value {
    let now = now();
    json!({"iss": ISSUER, "aud": [AUDIENCE, "other"], "sub": sub,
           "iat": now, "nbf": now - 5, "exp": now + 300})
}

/// The verifier `colloquy serve --auth-jwks URL --auth-issuer ISSUER --auth-audience
/// AUDIENCE --auth-admin-claim role=admin` builds.
async fn jwt_auth(provider: &Provider) -> Arc<JwtAuth> {
    let keys = jwks::JwksCache::load(jwks::JwksSource::Url(provider.url.clone()))
        .await
        .expect("the JWKS loads");
    Arc::new(JwtAuth::new(
        jwt::Expectations {
            issuer: ISSUER.into(),
            audience: AUDIENCE.into(),
            agent_claim: "sub".into(),
            admin_claim: Some(("role".into(), "admin".into())),
            leeway_s: jwt::LEEWAY_S,
        },
        Arc::new(keys),
    ))
}

/// A server taking JWTs alone.
async fn jwt_server(provider: &Provider) -> Server {
    let identity = Identity::Open.with_jwt(jwt_auth(provider).await);
    Server::with_options(
        Vec::new(),
        ServiceOptions {
            identity,
            mcp: Some(colloquy_server::mcp::McpSettings::for_listen(
                "127.0.0.1:0".parse().expect("an address"),
            )),
            ..ServiceOptions::default()
        },
    )
    .await
}

fn with_token(server: &Server, method: Method, path: &str, token: &str) -> reqwest::RequestBuilder {
    server.anonymous(method, path).bearer_auth(token)
}

/// The value of `colloquy_auth_failures_total{check="…"}`, 0 when absent.
async fn failures(server: &Server, check: &str) -> u64 {
    let metrics = server.metrics().await;
    let series = format!("colloquy_auth_failures_total{{check=\"{check}\"}} ");
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(&series))
        .map_or(0, |count| count.parse().expect("a count"))
}

/// An agent known only through JWTs is a full agent, whichever algorithm its provider
/// signs with: it starts conversations, reads its inbox, answers, lists its commitments.
#[tokio::test]
async fn each_algorithm_names_an_agent_who_takes_part() {
    let (rs, ps, es, ed) = (
        Key::rsa("rsa-1", "RS256"),
        Key::rsa("rsa-1", "PS256"),
        Key::ec("ec-1"),
        Key::ed("ed-1"),
    );
    // One RSA key (the JWK names no alg) verifies both RS256 and PS256.
    let provider = Provider::serve(&[&rs, &es, &ed]).await;
    let server = jwt_server(&provider).await;
    let (alice, bob, carol, dave) = (
        rs.for_agent("alice"),
        ps.for_agent("bob"),
        es.for_agent("carol"),
        ed.for_agent("dave"),
    );
    let (status, body) = call(
        with_token(&server, Method::POST, "/v1/conversations", &alice).json(&json!({
            "template": "fipa-query",
            "participants": ["bob"],
            "message": {"performative": "query-ref", "content": {"ref": "price"}}
        })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().expect("id").to_owned();
    let (status, body) = call(with_token(
        &server,
        Method::GET,
        "/v1/agents/bob/inbox/poll?wait_ms=5000",
        &bob,
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["items"][0]["conversation_id"], id.as_str());
    let (status, body) = call(
        with_token(
            &server,
            Method::POST,
            &format!("/v1/conversations/{id}/messages"),
            &bob,
        )
        .json(&json!({"performative": "inform", "content": {"price": 3}})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = call(with_token(
        &server,
        Method::GET,
        &format!("/v1/conversations/{id}"),
        &alice,
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "completed", "{body}");
    // carol (ES256) and dave (EdDSA) are agents too, who see nothing of alice's conversation.
    for token in [&carol, &dave] {
        let (status, body) =
            call(with_token(&server, Method::GET, "/v1/conversations", token)).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["conversations"].as_array().map(Vec::len), Some(0));
        let (status, _) = call(with_token(
            &server,
            Method::GET,
            &format!("/v1/conversations/{id}"),
            token,
        ))
        .await;
        assert_eq!(status, 403);
    }
    let (status, body) = call(with_token(&server, Method::GET, "/v1/commitments", &bob)).await;
    assert_eq!(status, 200, "{body}");
    // The admin (a claim) lists the agents that signed in here, and acts as nobody.
    let mut admin_claims = claims("ops");
    admin_claims["role"] = json!(["reader", "admin"]);
    let admin = ed.token(&admin_claims);
    let (status, body) = call(with_token(&server, Method::GET, "/v1/agents", &admin)).await;
    assert_eq!(status, 200, "{body}");
    let listed: Vec<&str> = body["agents"]
        .as_array()
        .expect("agents")
        .iter()
        .filter_map(|agent| agent["id"].as_str())
        .collect();
    assert_eq!(listed, ["alice", "bob", "carol", "dave"], "{body}");
    let (status, body) = call(with_token(
        &server,
        Method::GET,
        &format!("/v1/conversations/{id}"),
        &admin,
    ))
    .await;
    assert_eq!(status, 200, "the admin reads everything: {body}");
    let (status, _) = call(
        with_token(
            &server,
            Method::POST,
            &format!("/v1/conversations/{id}/messages"),
            &admin,
        )
        .json(&json!({"performative": "inform", "content": {}})),
    )
    .await;
    assert_eq!(status, 403, "the admin names no agent");
    // The A2A endpoints take the same tokens.
    let (status, body) = call(with_token(
        &server,
        Method::GET,
        "/a2a/bob/rest/tasks",
        &alice,
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    let (status, _) = call(with_token(
        &server,
        Method::GET,
        "/a2a/bob/rest/tasks",
        &alice.replace('.', ".x"),
    ))
    .await;
    assert_eq!(status, 401);
}

/// Every kind of bad token is 401 with the check that failed, never the token, and is
/// counted under that check.
#[tokio::test]
async fn bad_tokens_get_401_naming_the_check_and_are_counted() {
    let good = Key::ed("ed-1");
    let rsa = Key::rsa("rsa-1", "RS256");
    let provider = Provider::serve(&[&good, &rsa]).await;
    let server = jwt_server(&provider).await;
    let with = |name: &str, value: Value| {
        let mut claims = claims("alice");
        claims[name] = value;
        good.token(&claims)
    };
    let now = now();
    let mut no_sub = claims("alice");
    no_sub.as_object_mut().expect("claims").remove("sub");
    // Same kid, another key: the signature does not hold.
    let impostor = Key::ed("ed-1");
    let unsigned = format!(
        "{}.{}.",
        b64(json!({"alg": "none", "typ": "JWT"}).to_string().as_bytes()),
        b64(claims("alice").to_string().as_bytes())
    );
    // HS256 with the provider's public RSA key (as its JWK text) for the HMAC secret.
    let hmac_input = format!(
        "{}.{}",
        b64(json!({"alg": "HS256", "kid": "rsa-1"})
            .to_string()
            .as_bytes()),
        b64(claims("alice").to_string().as_bytes())
    );
    let secret = ring::hmac::Key::new(
        ring::hmac::HMAC_SHA256,
        provider.jwks.lock().expect("jwks")["keys"][1]
            .to_string()
            .as_bytes(),
    );
    let hs256 = format!(
        "{hmac_input}.{}",
        b64(ring::hmac::sign(&secret, hmac_input.as_bytes()).as_ref())
    );
    let cases = [
        (with("exp", json!(now - 3600)), "expired"),
        (with("nbf", json!(now + 3600)), "not_yet_valid"),
        (with("iss", json!("https://evil.example")), "issuer"),
        (with("aud", json!("someone-else")), "audience"),
        (Key::ed("ed-2").for_agent("alice"), "unknown_kid"),
        (impostor.for_agent("alice"), "signature"),
        (unsigned, "algorithm"),
        (hs256, "algorithm"),
        (good.token(&no_sub), "claim"),
        ("garbage".to_owned(), "malformed"),
    ];
    let fetches_at_start = provider.fetches();
    for (token, check) in &cases {
        let before = failures(&server, check).await;
        let (status, body) =
            call(with_token(&server, Method::GET, "/v1/conversations", token)).await;
        assert_eq!(status, 401, "{check}: {body}");
        assert_eq!(body["error"]["code"], "unauthenticated", "{check}");
        let message = body["error"]["message"].as_str().expect("a message");
        assert!(
            message.contains(&format!("`{check}` check")),
            "{check}: {message}"
        );
        if let Some(signature) = token.rsplit('.').next().filter(|part| part.len() > 8) {
            assert!(
                !message.contains(signature),
                "{check}: the token is not echoed"
            );
        }
        assert_eq!(
            failures(&server, check).await,
            before + 1,
            "{check} counted"
        );
    }
    // Unknown kids refresh the keys at most once a minute.
    let (status, _) = call(with_token(
        &server,
        Method::GET,
        "/v1/conversations",
        &Key::ed("ed-3").for_agent("alice"),
    ))
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        provider.fetches(),
        fetches_at_start + 1,
        "one refresh for the first unknown kid, none for the next"
    );
    // No credential at all is counted too.
    let (status, _) = call(server.anonymous(Method::GET, "/v1/conversations")).await;
    assert_eq!(status, 401);
    assert_eq!(failures(&server, "missing").await, 1);
    let (status, _) = call(with_token(
        &server,
        Method::GET,
        "/v1/conversations",
        &good.for_agent("alice"),
    ))
    .await;
    assert_eq!(status, 200, "the good key still works");
}

/// The provider rotates its key: a token with the new kid works without a restart, and the
/// withdrawn key stops working.
#[tokio::test]
async fn a_rotated_key_is_followed_without_a_restart() {
    let (old, new) = (Key::ec("2026-11"), Key::ed("2026-12"));
    let provider = Provider::serve(&[&old]).await;
    let server = jwt_server(&provider).await;
    let ask = |token: String| {
        let request = with_token(&server, Method::GET, "/v1/conversations", &token);
        async move { call(request).await.0 }
    };
    assert_eq!(ask(old.for_agent("alice")).await, 200);
    provider.rotate_to(&[&new]);
    assert_eq!(
        ask(new.for_agent("alice")).await,
        200,
        "the new kid is fetched"
    );
    assert_eq!(provider.fetches(), 2);
    assert_eq!(
        ask(old.for_agent("alice")).await,
        401,
        "the old key is gone"
    );
}

/// The static tokens of an agents file keep working beside JWTs, and one administrator —
/// the admin token or a JWT with the admin claim — changes templates and candidates; an
/// agent's JWT is 403 there, no credential or a bad one 401.
#[tokio::test]
async fn the_admin_claim_is_the_admin_on_every_admin_route() {
    let key = Key::ed("ed-1");
    let provider = Provider::serve(&[&key]).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates/fipa-query.yaml"),
        dir.path().join("fipa-query.yaml"),
    )
    .expect("a template");
    let live = LiveCatalog::new(dir.path());
    live.reload().unwrap_or_else(|d| panic!("{d}"));
    let live = Arc::new(live);
    let identity = Arc::new(
        Identity::from_yaml(
            &format!("admin_token: {ADMIN_TOKEN}\nagents: [{{id: alice, token: alice-token}}]"),
            "agents",
        )
        .expect("an agents file")
        .with_jwt(jwt_auth(&provider).await),
    );
    let (_closing, closing_rx) = watch::channel(false);
    let rollouts = Rollouts::new(live.clone(), ShadowSettings::default());
    let state = PolicyState::new(
        live.clone(),
        Writes::Identity(identity.clone()),
        Reads::Tokens(identity.clone()),
        closing_rx,
    )
    .with_rollouts(rollouts.clone())
    .with_identity(identity.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let service: RunningService = api::launch(
        Catalog::default(),
        listener,
        ServiceOptions {
            identity: (*identity).clone(),
            templates: Some(live.clone()),
            routes: Some(policy::router(state)),
            commit_observer: Some(rollouts),
            scheduler_period: Duration::from_millis(10),
            ..ServiceOptions::default()
        },
    )
    .expect("service starts");
    let url = service.url();
    let template =
        std::fs::read_to_string(dir.path().join("fipa-query.yaml")).expect("the template");
    // Each write a new revision: the same template with another comment.
    let edited = |by: &str| format!("{template}\n# written by {by}\n");
    let mut admin_claims = claims("ops");
    admin_claims["role"] = json!("admin");
    let admin_jwt = key.token(&admin_claims);
    let agent_jwt = key.for_agent("bob");
    let put = |token: Option<&str>, by: &str| {
        let request = raw()
            .put(format!("{url}/v1/templates/fipa-query"))
            .body(edited(by));
        match token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    };
    let stage = |token: &str| {
        raw()
            .post(format!("{url}/v1/templates/fipa-query/candidates"))
            .bearer_auth(token)
            .body(edited("a candidate"))
    };
    assert_eq!(call(put(None, "nobody")).await.0, 401, "no credential");
    assert_eq!(
        call(put(Some("made-up"), "nobody")).await.0,
        401,
        "an unknown credential"
    );
    let (status, body) = call(put(Some(&agent_jwt), "bob")).await;
    assert_eq!(status, 403, "an agent's JWT: {body}");
    assert_eq!(
        call(put(Some("alice-token"), "alice")).await.0,
        403,
        "an agent's token"
    );
    let (status, body) = call(put(Some(&admin_jwt), "the admin claim")).await;
    assert!(
        status == 200 || status == 201,
        "the admin claim: {status} {body}"
    );
    let (status, body) = call(put(Some(ADMIN_TOKEN), "the admin token")).await;
    assert!(
        status == 200 || status == 201,
        "the admin token: {status} {body}"
    );
    assert_eq!(call(stage(&agent_jwt)).await.0, 403);
    let (status, body) = call(stage(&admin_jwt)).await;
    assert!(
        status == 200 || status == 201,
        "a candidate by the admin claim: {status} {body}"
    );
    let (status, body) = bounded(call(
        raw()
            .get(format!("{url}/v1/templates/fipa-query/candidates"))
            .bearer_auth(&agent_jwt),
    ))
    .await;
    assert_eq!(status, 403, "reading candidates needs the admin: {body}");
    // The agents file's tokens still name their agents beside JWTs.
    let (status, body) = call(
        raw()
            .get(format!("{url}/v1/conversations"))
            .bearer_auth("alice-token"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

/// The A2A agent card and the MCP protected resource metadata name the issuer.
#[tokio::test]
async fn the_card_and_the_mcp_metadata_name_the_issuer() {
    let key = Key::ed("ed-1");
    let provider = Provider::serve(&[&key]).await;
    let server = jwt_server(&provider).await;
    let (status, card) =
        call(server.anonymous(Method::GET, "/a2a/someone/.well-known/agent-card.json")).await;
    assert_eq!(status, 200, "any agent id may sign in with a JWT: {card}");
    assert_eq!(
        card["securitySchemes"]["oidc"]["openIdConnectSecurityScheme"]["openIdConnectUrl"],
        format!("{ISSUER}/.well-known/openid-configuration"),
        "{card}"
    );
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["bearerFormat"],
        "JWT"
    );
    let (status, metadata) =
        call(server.anonymous(Method::GET, "/.well-known/oauth-protected-resource/mcp")).await;
    assert_eq!(status, 200);
    assert_eq!(metadata["authorization_servers"], json!([ISSUER]));
    // An MCP client signed in with a JWT acts as its agent; an expired one is refused
    // with the challenge pointing at that metadata.
    let list_templates = json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {
            "name": "list_templates", "arguments": {"name": "fipa-query"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {}
            }
        }
    });
    let mcp = |token: &str| {
        with_token(&server, Method::POST, "/mcp", token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", "tools/call")
            .header("mcp-name", "list_templates")
            .json(&list_templates)
    };
    let (status, answer) = call(mcp(&key.for_agent("erin"))).await;
    assert_eq!(status, 200, "{answer}");
    let templates = &answer["result"]["structuredContent"]["templates"];
    assert_eq!(templates[0]["name"], "fipa-query", "{answer}");
    let mut expired = claims("erin");
    expired["exp"] = json!(now() - 3600);
    let refused = bounded(mcp(&key.token(&expired)).send())
        .await
        .expect("sent");
    assert_eq!(refused.status(), 401);
    let challenge = refused.headers()["www-authenticate"]
        .to_str()
        .expect("ASCII");
    assert!(
        challenge.contains("oauth-protected-resource/mcp"),
        "{challenge}"
    );
    // With static tokens alone, no authorization server is named.
    let tokens = Server::with_options(
        Vec::new(),
        ServiceOptions {
            identity: colloquy_tests::http::identity(&[]),
            mcp: Some(colloquy_server::mcp::McpSettings::for_listen(
                "127.0.0.1:0".parse().expect("an address"),
            )),
            ..ServiceOptions::default()
        },
    )
    .await;
    let (_, metadata) =
        call(tokens.anonymous(Method::GET, "/.well-known/oauth-protected-resource/mcp")).await;
    assert!(
        metadata.get("authorization_servers").is_none(),
        "{metadata}"
    );
}

/// The Rust SDK takes a token provider: asked first, then again when the server refuses
/// the token (here an expired one), and the refused request is sent once more.
#[tokio::test]
async fn the_sdk_asks_its_token_provider_again_when_refused() {
    use colloquy_sdk::{Client, TokenRequest};
    let key = Arc::new(Key::ed("ed-1"));
    let provider = Provider::serve(&[key.as_ref()]).await;
    let server = jwt_server(&provider).await;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let (log, signer) = (asked.clone(), key.clone());
    let tokens = move |why: TokenRequest| {
        log.lock().expect("not poisoned").push(why);
        let mut claims = claims("alice");
        if why == TokenRequest::First {
            claims["exp"] = json!(now() - 3600);
        }
        let token = signer.token(&claims);
        async move { Ok(token) }
    };
    let alice = bounded(Client::connect_with_token_provider(
        &server.url,
        "alice",
        tokens,
    ))
    .await
    .expect("connects");
    let page = bounded(alice.conversations(&Default::default()))
        .await
        .expect("the second token is accepted");
    assert!(page.conversations.is_empty());
    assert_eq!(
        *asked.lock().expect("not poisoned"),
        [TokenRequest::First, TokenRequest::Refused]
    );
    assert_eq!(failures(&server, "expired").await, 1);
}

/// A key an identity provider binds to an agent's token with `cnf` (RFC 7800) signs for the
/// agent: a signed start goes through, the agent lists the key with its issuer, and the
/// record carries it; a key the token does not bind is still unknown.
#[tokio::test]
async fn a_key_bound_by_cnf_signs_for_its_agent() {
    let key = Key::ed("provider-1");
    let provider = Provider::serve(&[&key]).await;
    let server = Server::with_options(
        vec![super::audit::signed_request_template()],
        ServiceOptions {
            identity: Identity::Open.with_jwt(jwt_auth(&provider).await),
            ..ServiceOptions::default()
        },
    )
    .await;
    // dave's key, named by its RFC 7638 thumbprint as the token's `cnf` gives no kid.
    let der = colloquy_sdk::trust::jws::Signer::generate_ed25519().expect("a key");
    let unnamed = colloquy_sdk::trust::jws::Signer::from_pkcs8(&der, "-").expect("a signer");
    let mut bound = unnamed.public_jwk();
    bound.as_object_mut().expect("a JWK").remove("kid");
    let kid = colloquy_sdk::trust::jws::thumbprint(&bound).expect("a thumbprint");
    let dave = colloquy_sdk::trust::jws::Signer::from_pkcs8(&der, &kid).expect("a signer");

    let mut claims = claims("dave");
    claims["cnf"] = json!({"jwk": bound});
    let token = key.token(&claims);
    let start = |signer: &colloquy_sdk::trust::jws::Signer, id: &str| {
        let mut message = colloquy_protocol::SendMessage::new("request", json!({"n": 1}))
            .with_id(format!("{id}-m1"));
        colloquy_sdk::trust::message::sign(signer, id, "dave", &mut message).expect("signed");
        json!({"conversation_id": id, "template": "signed-request", "participants": ["erin"],
               "message": message})
    };
    let (status, body) = call(
        with_token(&server, Method::POST, "/v1/conversations", &token).json(&start(&dave, "d-1")),
    )
    .await;
    assert_eq!(status, 201, "{body}");

    // A key the token does not bind is unknown.
    let stranger = super::audit::signer(&kid);
    let (status, body) = call(
        with_token(&server, Method::POST, "/v1/conversations", &token)
            .json(&start(&stranger, "d-2")),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("altered"), "{body}");

    // dave sees the key with the issuer that bound it.
    let (status, body) = call(with_token(
        &server,
        Method::GET,
        "/v1/agents/dave/signing-keys",
        &key.for_agent("dave"),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["keys"][0]["kid"], kid.as_str(), "{body}");
    assert_eq!(body["keys"][0]["source"]["kind"], "cnf", "{body}");
    assert_eq!(body["keys"][0]["source"]["issuer"], ISSUER, "{body}");
    assert!(body["keys"][0]["valid_until"].is_u64(), "{body}");

    // The record carries it, and verifies.
    let (status, record) = call(with_token(
        &server,
        Method::GET,
        "/v1/conversations/d-1/audit",
        &key.for_agent("dave"),
    ))
    .await;
    assert_eq!(status, 200, "{record}");
    let record: colloquy_sdk::trust::record::AuditRecord =
        serde_json::from_value(record).expect("a record");
    assert_eq!(record.signer_keys["dave"]["keys"][0]["kid"], kid.as_str());
    let verified =
        colloquy_sdk::trust::record::verify(&record, &colloquy_sdk::trust::jws::KeySet::default())
            .unwrap_or_else(|broken| panic!("{broken}"));
    assert_eq!(verified.signed_messages, 1);
}
