//! Audit records and signed messages through the Rust SDK: a party fetches its
//! conversation's record with `Client::audit` and verifies it, offline, with the engine's key
//! from `/v1/audit/keys`; messages signed with `Client::signing_with` are checked at the door
//! (missing, unknown key, altered: 422 `bad_signature`) and again in the record. (The real
//! binary, other readers, altered logs and upgrades: engine/cli/tests/durability.)

use std::sync::Arc;
use std::time::Duration;

use colloquy_protocol::SendMessage;
use colloquy_sdk::trust::jws::{KeySet, Signer};
use colloquy_sdk::trust::record::verify;
use colloquy_server::Identity;
use colloquy_server::ServiceOptions;
use colloquy_tests::compile;
use colloquy_tests::http::{Server, bounded, call, identity, raw};
use serde_json::{Value, json};

/// A token-mode server (the agents of `colloquy_tests::http::AGENTS`) signing audit records
/// with `key`, its engine set up as `engine` says.
async fn audited_server(key: Arc<Signer>, engine: colloquy_core::EngineConfig) -> Server {
    Server::with_options(
        Vec::new(),
        ServiceOptions {
            identity: identity(&[]),
            scheduler_period: Duration::from_millis(10),
            audit_key: Some(key),
            engine,
            ..ServiceOptions::default()
        },
    )
    .await
}

/// The engine's audit key as `GET /v1/audit/keys` serves it.
async fn engine_keys(server: &Server) -> Value {
    bounded(async {
        reqwest::get(format!("{}/v1/audit/keys", server.url))
            .await?
            .json()
            .await
    })
    .await
    .expect("the engine's key")
}

#[tokio::test]
async fn a_party_verifies_its_record_with_the_engines_key() {
    let der = Signer::generate_p256().expect("a key");
    let key = Signer::from_pkcs8(&der, "engine-key").expect("a signer");
    let server = audited_server(Arc::new(key), colloquy_core::EngineConfig::default()).await;
    let alice = server.client("alice").await;
    let bob = server.client("bob").await;
    let view = bounded(alice.start(&colloquy_protocol::StartConversation {
        template: "fipa-request".to_owned(),
        participants: vec!["bob".to_owned()],
        message: Some(SendMessage::new("request", json!({"price": 99.5}))),
        ..Default::default()
    }))
    .await
    .expect("started");
    bounded(bob.send(&view.id, &SendMessage::new("agree", json!({}))))
        .await
        .expect("agreed");

    let jwks = engine_keys(&server).await;
    let keys = KeySet::from_jwks(&jwks).expect("a key set");
    let record = bounded(bob.audit(&view.id)).await.expect("bob's record");
    assert_eq!(record.reader.as_deref(), Some("bob"));
    let verified = verify(&record, &keys).unwrap_or_else(|broken| panic!("{broken}"));
    assert_eq!(verified.engine_key.as_deref(), Some("engine-key"));
    assert_eq!(verified.chain.length, record.events.len() as u64);

    // Without the archive of a live catalog the record names the revision only.
    assert_eq!(record.template.source, None);
    assert!(!verified.template_checked);

    // Altered, the record no longer verifies under the engine's signature.
    let mut altered = record.clone();
    altered.issued_at += 1;
    let broken = verify(&altered, &keys).expect_err("altered");
    assert_eq!(broken.check, "engine signature");
}

/// fipa-request under another name, requiring signatures.
pub(crate) fn signed_request_template() -> colloquy_policy::CompiledTemplate {
    let source = std::fs::read_to_string(colloquy_tests::templates_dir().join("fipa-request.yaml"))
        .expect("fipa-request.yaml");
    let source = source
        .replacen("name: fipa-request", "name: signed-request", 1)
        .replacen(
            "  enforcement:",
            "  signatures: required\n  enforcement:",
            1,
        );
    assert!(
        source.contains("signatures: required"),
        "the template has `enforcement:`"
    );
    compile(&source)
}

/// alice and bob, each with a signing key in the agents file; carol with none; `remote`, a
/// remote A2A agent (never reached: nothing is sent to it).
fn signing_agents(alice: &Signer, bob: &Signer) -> Identity {
    let jwks = |signer: &Signer| json!({"keys": [signer.public_jwk()]});
    let yaml = format!(
        "admin_token: admin-token\nagents:\n  - {{id: alice, token: alice-token, signing_keys: {}}}\n  \
         - {{id: bob, token: bob-token, signing_keys: {}}}\n  - {{id: carol, token: carol-token}}\n  \
         - {{id: remote, a2a: \"http://127.0.0.1:9/a2a\"}}\n",
        jwks(alice),
        jwks(bob)
    );
    Identity::from_yaml(&yaml, "signing agents").unwrap_or_else(|error| panic!("{error}"))
}

pub(crate) fn signer(kid: &str) -> Signer {
    Signer::from_pkcs8(&Signer::generate_ed25519().expect("a key"), kid).expect("a signer")
}

#[tokio::test]
async fn signed_messages_are_checked_at_the_door_and_in_the_record() {
    let (alice_key, bob_key) = (signer("alice-1"), signer("bob-1"));
    let bob_public = bob_key.public_jwk();
    let server = Server::with(
        signing_agents(&alice_key, &bob_key),
        vec![signed_request_template()],
    )
    .await;
    let alice = server.client("alice").await.signing_with(alice_key);
    let bob_unsigned = server.client("bob").await;
    let bob = server.client("bob").await.signing_with(bob_key);

    // The opening message, signed over the conversation id the SDK chose.
    let view = bounded(alice.start(&colloquy_protocol::StartConversation {
        template: "signed-request".to_owned(),
        participants: vec!["bob".to_owned()],
        message: Some(SendMessage::new("request", json!({"amount": 99.5}))),
        ..Default::default()
    }))
    .await
    .expect("a signed start");
    let id = view.id.clone();

    // Unsigned, on a template that requires signatures: refused, nothing recorded.
    let refused = bounded(bob_unsigned.send(&id, &SendMessage::new("agree", json!({}))))
        .await
        .expect_err("unsigned");
    assert_eq!(
        (refused.status(), refused.code()),
        (Some(422), Some("bad_signature"))
    );
    assert!(refused.to_string().contains("missing"), "{refused}");

    // Signed by a key that is not bob's: unknown key.
    let mut forged = SendMessage::new("agree", json!({})).with_id("forged-1");
    colloquy_sdk::trust::message::sign(&signer("bob-1"), &id, "bob", &mut forged).expect("signed");
    let forged_with_other_key = {
        let mut message = forged.clone();
        message.signature = Some(
            colloquy_sdk::trust::message::sign_fields(
                &signer("mallory-1"),
                &message.signed_fields(&id, "bob"),
            )
            .expect("signed"),
        );
        message
    };
    for (message, why) in [
        (&forged_with_other_key, "unknown key"),
        (&forged, "altered"),
    ] {
        let (status, body) = call(
            raw()
                .post(format!("{}/v1/conversations/{id}/messages", server.url))
                .bearer_auth("bob-token")
                .json(message),
        )
        .await;
        assert_eq!(status, 422, "{body}");
        assert_eq!(body["error"]["code"], "bad_signature", "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains(why),
            "{body}"
        );
    }
    // Signed by bob's key: accepted.
    bounded(bob.send(&id, &SendMessage::new("agree", json!({}))))
        .await
        .expect("a signed agree");
    bounded(bob.send(&id, &SendMessage::new("inform", json!({"done": true}))))
        .await
        .expect("a signed inform");

    // carol has no keys: her signature cannot be checked, so it is refused.
    let (status, body) = call(
        raw()
            .post(format!("{}/v1/conversations", server.url))
            .bearer_auth("carol-token")
            .json(
                &json!({"conversation_id": "carol-1", "template": "fipa-request",
                "participants": ["bob"],
                "message": {"performative": "request", "message_id": "m-1",
                            "signature": forged.signature}}),
            ),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("no signing keys"),
        "{body}"
    );

    // A remote A2A agent cannot sign: it cannot take part where signatures are required.
    let (status, body) = call(
        raw()
            .post(format!("{}/v1/conversations", server.url))
            .bearer_auth("carol-token")
            .json(&json!({"template": "signed-request", "participants": ["remote"]})),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or("")
            .contains("remote A2A agent"),
        "{body}"
    );

    // The record carries each signature and the keys the engine checked them against.
    let record = bounded(alice.audit(&id)).await.expect("alice's record");
    let verified = verify(&record, &KeySet::default()).unwrap_or_else(|broken| panic!("{broken}"));
    assert_eq!(verified.signed_messages, 3, "request, agree, inform");
    assert_eq!(record.signer_keys["bob"]["keys"][0], bob_public);
    // A signed message altered in the record is caught, by event.
    let mut altered = record.clone();
    let agree = altered
        .events
        .iter_mut()
        .find(|event| event["message"]["performative"] == "agree")
        .expect("the agree");
    agree["message"]["content"] = json!({"terms": "net 90"});
    let broken = verify(&altered, &KeySet::default()).expect_err("altered");
    assert!(
        matches!(broken.check, "chain" | "message signature"),
        "{broken}"
    );
}

/// A key the administrator registers signs for its agent, and after the administrator
/// revokes it signs nothing new, while the record of what it signed keeps it.
#[tokio::test]
async fn keys_the_admin_registers_sign_until_revoked() {
    let (alice_key, bob_key, carol_key) = (signer("alice-1"), signer("bob-1"), signer("carol-1"));
    let carol_public = carol_key.public_jwk();
    let server = Server::with(
        signing_agents(&alice_key, &bob_key),
        vec![signed_request_template()],
    )
    .await;
    let keys_path = "/v1/agents/carol/signing-keys";
    let put = |body: Value, token: &str| {
        raw()
            .put(format!("{}{keys_path}/carol-1", server.url))
            .bearer_auth(token)
            .json(&body)
    };
    // Only the administrator registers; only a public key; the path names the kid.
    let (status, body) = call(put(carol_public.clone(), "carol-token")).await;
    assert_eq!(status, 403, "{body}");
    let mut private = carol_public.clone();
    private["d"] = json!("bm90IGEga2V5");
    let (status, body) = call(put(private, "admin-token")).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("private member `d`"), "{body}");
    assert!(!body.to_string().contains("bm90IGEga2V5"), "{body}");
    let (status, body) = call(put(carol_public.clone(), "admin-token")).await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["source"]["kind"], "admin", "{body}");
    let (status, _) = call(put(carol_public.clone(), "admin-token")).await;
    assert_eq!(status, 200, "the same key again changes nothing");
    let (status, body) = call(put(signer("carol-1").public_jwk(), "admin-token")).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "kid_taken", "{body}");

    // carol now signs: a signed start and bob's signed agree go through.
    let carol = server.client("carol").await.signing_with(carol_key);
    let bob = server.client("bob").await.signing_with(bob_key);
    let view = bounded(carol.start(&colloquy_protocol::StartConversation {
        template: "signed-request".to_owned(),
        participants: vec!["bob".to_owned()],
        message: Some(SendMessage::new("request", json!({"amount": 12.5}))),
        ..Default::default()
    }))
    .await
    .expect("carol signs with her registered key");
    bounded(bob.send(&view.id, &SendMessage::new("agree", json!({}))))
        .await
        .expect("bob agrees");

    // She lists her keys (bob may not).
    let (status, body) = call(
        raw()
            .get(format!("{}{keys_path}", server.url))
            .bearer_auth("carol-token"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["keys"][0]["kid"], "carol-1", "{body}");
    let (status, _) = call(
        raw()
            .get(format!("{}{keys_path}", server.url))
            .bearer_auth("bob-token"),
    )
    .await;
    assert_eq!(status, 403);

    // Revoked: refused for new messages, saying so.
    let (status, body) = call(
        raw()
            .delete(format!("{}{keys_path}/carol-1", server.url))
            .bearer_auth("admin-token"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["revoked_at"].is_u64(), "{body}");
    let refused = bounded(carol.start(&colloquy_protocol::StartConversation {
        template: "signed-request".to_owned(),
        participants: vec!["bob".to_owned()],
        message: Some(SendMessage::new("request", json!({}))),
        ..Default::default()
    }))
    .await
    .expect_err("a revoked key");
    assert_eq!(
        (refused.status(), refused.code()),
        (Some(422), Some("bad_signature"))
    );
    assert!(refused.to_string().contains("revoked"), "{refused}");

    // The record of the first conversation still carries the key and verifies.
    let record = bounded(carol.audit(&view.id)).await.expect("the record");
    assert_eq!(record.signer_keys["carol"]["keys"][0]["kid"], "carol-1");
    let verified = verify(&record, &KeySet::default()).unwrap_or_else(|broken| panic!("{broken}"));
    assert_eq!(verified.signed_messages, 2, "request, agree");
}

/// With a key, the engine signs the messages it sends itself, as a party signs its own: a
/// late proposal's automatic rejection verifies in the record under the engine's key.
#[tokio::test]
async fn the_engines_own_messages_are_signed_with_its_key() {
    let der = Signer::generate_ed25519().expect("a key");
    let key = Arc::new(Signer::from_pkcs8(&der, "engine-key").expect("a signer"));
    let engine = colloquy_core::EngineConfig {
        message_signer: Some(key.clone()),
        ..colloquy_core::EngineConfig::default()
    };
    let server = audited_server(key, engine).await;
    let alice = server.client("alice").await;
    let bob = server.client("bob").await;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as u64;
    let view = bounded(alice.start(&colloquy_protocol::StartConversation {
        template: "fipa-contract-net".to_owned(),
        participants: vec!["bob".to_owned()],
        message: Some(SendMessage::new("cfp", json!({"task": "deliver"})).reply_by(now + 200)),
        ..Default::default()
    }))
    .await
    .expect("started");
    bounded(async {
        loop {
            let seen = alice.conversation(&view.id).await.expect("view");
            if seen.threads[0].state.as_ref() == "no_reply" {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Too late: the engine turns the proposal down itself.
    bounded(bob.send(
        &view.id,
        &SendMessage::new("propose", json!({"price": 99.5})),
    ))
    .await
    .expect("a late proposal is recorded");

    let record = bounded(alice.audit(&view.id))
        .await
        .expect("alice's record");
    let engine_reply = (record.events.iter())
        .find(|event| event["message"]["sender"] == colloquy_protocol::message::ENGINE_PARTY)
        .expect("the engine's reject-proposal");
    assert_eq!(engine_reply["message"]["performative"], "reject-proposal");
    assert!(
        engine_reply["message"]["signature"]["jws"].is_string(),
        "{engine_reply}"
    );
    let jwks = engine_keys(&server).await;
    assert_eq!(
        record.signer_keys[colloquy_protocol::message::ENGINE_PARTY],
        jwks,
        "the record names the engine's key for its messages"
    );
    let verified = verify(&record, &KeySet::from_jwks(&jwks).expect("keys"))
        .unwrap_or_else(|broken| panic!("{broken}"));
    assert_eq!(
        verified.signed_messages, 1,
        "the engine's reply, the only signed message"
    );
    assert_eq!(verified.engine_key.as_deref(), Some("engine-key"));
}
