//! Audit records through the Rust SDK: a party fetches its conversation's record with
//! `Client::audit` and verifies it, offline, with the engine's key from `/v1/audit/keys`.
//! (The real binary, other readers, altered logs and upgrades: engine/cli/tests/durability.)

use std::sync::Arc;
use std::time::Duration;

use colloquy_protocol::SendMessage;
use colloquy_sdk::trust::jws::{KeySet, Signer};
use colloquy_sdk::trust::record::verify;
use colloquy_server::ServiceOptions;
use colloquy_tests::http::{Server, bounded, identity};
use serde_json::{Value, json};

#[tokio::test]
async fn a_party_verifies_its_record_with_the_engines_key() {
    let der = Signer::generate_p256().expect("a key");
    let key = Signer::from_pkcs8(&der, "engine-key").expect("a signer");
    let server = Server::with_options(
        Vec::new(),
        ServiceOptions {
            identity: identity(&[]),
            scheduler_period: Duration::from_millis(10),
            audit_key: Some(Arc::new(key)),
            ..ServiceOptions::default()
        },
    )
    .await;
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

    let jwks: Value = bounded(async {
        reqwest::get(format!("{}/v1/audit/keys", server.url))
            .await?
            .json()
            .await
    })
    .await
    .expect("the engine's key");
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
