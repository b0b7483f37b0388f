//! Audit records end to end (issue 40 §2) on real `colloquy serve` processes: signed with
//! the key `colloquy audit keygen` made, each reader's record verified offline (by the trust
//! crate and by `colloquy audit verify`), a log altered in the store found out, and logs
//! written before chains (as an older engine wrote them) chained from the first event after
//! the upgrade, on SQLite and on Redis.

use super::*;
use colloquy_trust::jws::KeySet;
use colloquy_trust::record::{AuditRecord, verify};

/// An agents file with the administrator, a buyer and two bidders; the `--agents` arguments.
fn bidders_agents_file(dir: &Path) -> [String; 2] {
    let agents = dir.join("agents.yaml");
    std::fs::write(
        &agents,
        "admin_token: admin-secret\nagents:\n  - {id: alice, token: alice-secret}\n  \
         - {id: bob, token: bob-secret}\n  - {id: carol, token: carol-secret}\n  \
         - {id: dave, token: dave-secret}\n",
    )
    .expect("agents file");
    ["--agents".to_owned(), agents.display().to_string()]
}

/// `colloquy audit keygen` in `dir`: the key file and the JWKS file of its public half.
fn audit_key(dir: &Path) -> (PathBuf, PathBuf) {
    let key = dir.join("engine.pem");
    let (code, output) = colloquy(&["audit", "keygen", "--out", key.to_str().expect("utf-8")]);
    assert_eq!(code, 0, "{output}");
    let jwks = dir.join("engine.jwks");
    std::fs::write(&jwks, output).expect("jwks file");
    (key, jwks)
}

async fn post(
    http: &reqwest::Client,
    url: &str,
    token: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let response = http
        .post(url)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .expect("sent");
    let status = response.status();
    let body: serde_json::Value = response.json().await.expect("json");
    assert!(status.is_success(), "{url}: {status}: {body}");
    body
}

/// alice calls bob and carol for proposals; bob bids 99.5, carol 120: the conversation id.
async fn sealed_bids(http: &reqwest::Client, url: &str, id: &str) {
    post(
        http,
        &format!("{url}/v1/conversations"),
        "alice-secret",
        json!({"conversation_id": id, "template": "fipa-contract-net",
               "participants": ["bob", "carol"],
               "message": {"performative": "cfp", "content": {"task": "deliver"}}}),
    )
    .await;
    for (bidder, price) in [("bob", json!(99.5)), ("carol", json!(120))] {
        post(
            http,
            &format!("{url}/v1/conversations/{id}/messages"),
            &format!("{bidder}-secret"),
            json!({"performative": "propose", "to": ["alice"], "content": {"price": price}}),
        )
        .await;
    }
}

/// The record of `id` as `token`'s holder has it: the status and the body.
async fn record(
    http: &reqwest::Client,
    url: &str,
    id: &str,
    token: Option<&str>,
) -> (u16, serde_json::Value) {
    let mut request = http.get(format!("{url}/v1/conversations/{id}/audit"));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("sent");
    (
        response.status().as_u16(),
        response.json().await.expect("json"),
    )
}

/// The prices of the proposals a record shows in full.
fn prices(record: &serde_json::Value) -> Vec<serde_json::Value> {
    let events = record["events"].as_array().expect("events");
    (events.iter())
        .filter(|event| event["message"]["performative"] == "propose")
        .map(|event| event["message"]["content"]["price"].clone())
        .collect()
}

fn parsed(record: &serde_json::Value) -> AuditRecord {
    serde_json::from_value(record.clone()).expect("an audit record")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_records_verify_offline_show_each_reader_its_part_and_catch_an_altered_log() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("audit");
        let templates = templates(&dir);
        let (key, jwks_file) = audit_key(&dir);
        let db = dir.join("audit.db");
        let store = format!("sqlite:{}", db.display());
        let mut args: Vec<String> = bidders_agents_file(&dir).into();
        args.extend(["--audit-key".to_owned(), key.display().to_string()]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let server = Server::start_with(&dir, &templates, &store, "audit", &args);
        let http = reqwest::Client::new();
        sealed_bids(&http, &server.url, "bids-1").await;

        // The engine's public key is served, and is the one keygen printed.
        let served: serde_json::Value = http
            .get(format!("{}/v1/audit/keys", server.url))
            .send()
            .await
            .expect("keys")
            .json()
            .await
            .expect("json");
        let printed: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&jwks_file).expect("jwks"))
                .expect("jwks json");
        assert_eq!(served, printed);
        let keys = KeySet::from_jwks(&served).expect("a key set");

        // The administrator's record: every event in full, signed, the template checked.
        let (status, admin) = record(&http, &server.url, "bids-1", Some("admin-secret")).await;
        assert_eq!(status, 200, "{admin}");
        let verified = verify(&parsed(&admin), &keys).unwrap_or_else(|broken| panic!("{broken}"));
        assert_eq!(verified.engine_key.as_deref(), Some("colloquy-audit"));
        assert!(
            verified.template_checked,
            "the revision archive holds the source"
        );
        assert_eq!(
            (verified.redacted, verified.chain.chained_from),
            (0, Some(1))
        );
        assert_eq!(
            prices(&admin),
            [json!(99.5), json!(120)],
            "the admin sees both bids"
        );

        // bob's: the same chain, carol's proposal only as its digest.
        let (status, bob) = record(&http, &server.url, "bids-1", Some("bob-secret")).await;
        assert_eq!(status, 200, "{bob}");
        let bobs = verify(&parsed(&bob), &keys).unwrap_or_else(|broken| panic!("{broken}"));
        assert_eq!(bobs.chain, verified.chain);
        assert!(bobs.redacted >= 1, "carol's proposal is hidden from bob");
        assert_eq!(
            prices(&bob),
            [json!(99.5)],
            "bob sees his own bid, never carol's"
        );

        // Not a party: 403; no credentials: 401.
        let (status, _) = record(&http, &server.url, "bids-1", Some("dave-secret")).await;
        assert_eq!(status, 403);
        let (status, _) = record(&http, &server.url, "bids-1", None).await;
        assert_eq!(status, 401);

        // The CLI verifies bob's record, and names the event after the one altered.
        let bob_file = dir.join("bob.json");
        std::fs::write(&bob_file, bob.to_string()).expect("bob's record");
        let (code, output) = colloquy(&[
            "audit",
            "verify",
            bob_file.to_str().expect("utf-8"),
            "--jwks",
            jwks_file.to_str().expect("utf-8"),
        ]);
        assert_eq!(code, 0, "{output}");
        assert!(output.contains("by key `colloquy-audit`"), "{output}");
        let mut altered = bob.clone();
        let events = altered["events"].as_array_mut().expect("events");
        let bid = events
            .iter()
            .position(|event| event["message"]["content"]["price"] == json!(99.5))
            .expect("bob's proposal");
        events[bid]["message"]["content"]["price"] = json!(9.5);
        std::fs::write(&bob_file, altered.to_string()).expect("altered record");
        let (code, output) = colloquy(&["audit", "verify", bob_file.to_str().expect("utf-8")]);
        assert_eq!(code, 1, "{output}");
        assert!(
            output.contains(&format!("event {}: chain check failed", bid + 2)),
            "{output}"
        );

        // Altered in the store behind the engine's back: the record the engine then makes
        // does not verify, and says where.
        server.kill();
        colloquy_store::raw::sqlite_rewrite_log(&db, "bids-1", |event| {
            if event["message"]["content"]["price"] == json!(120) {
                event["message"]["content"]["price"] = json!(12);
            }
        });
        let server = Server::start_with(&dir, &templates, &store, "audit-2", &args);
        let (_, admin) = record(&http, &server.url, "bids-1", Some("admin-secret")).await;
        let broken = verify(&parsed(&admin), &keys).expect_err("an altered log");
        assert_eq!(broken.check, "chain", "{broken}");
    })
    .await
    .expect("test timed out");
}

/// A conversation recorded before chains (its events stored without `prev`, as an older
/// engine wrote them) goes on after the upgrade: its next event carries the chain over
/// the old ones, and its record verifies, chained from that event.
async fn a_log_from_before_chains_is_chained_after_the_upgrade(
    store: &str,
    rewrite: impl AsyncFn(),
) {
    let dir = scratch_dir("audit-upgrade");
    let templates = templates(&dir);
    let server = Server::start(&dir, &templates, store, "before");
    let alice = server.client("alice");
    alice
        .start(&request("old-1", "bob", None))
        .await
        .expect("started");
    server.kill();
    rewrite().await;

    let server = Server::start(&dir, &templates, store, "after");
    let bob = server.client("bob");
    let record_of = || async {
        let body: serde_json::Value = reqwest::Client::new()
            .get(format!("{}/v1/conversations/old-1/audit", server.url))
            .header("x-agent-id", "bob")
            .send()
            .await
            .expect("sent")
            .json()
            .await
            .expect("json");
        parsed(&body)
    };
    let unchained = record_of().await;
    let verified = verify(&unchained, &KeySet::default()).unwrap_or_else(|b| panic!("{b}"));
    assert_eq!(verified.chain.chained_from, None, "nothing chained yet");
    let old_events = verified.chain.length;

    bob.send("old-1", &SendMessage::new("agree", json!({})))
        .await
        .expect("agreed");
    let chained = record_of().await;
    let verified = verify(&chained, &KeySet::default()).unwrap_or_else(|b| panic!("{b}"));
    assert_eq!(verified.chain.chained_from, Some(old_events + 1));
    assert!(verified.chain.length > old_events);
}

/// Strips `prev` from every stored event.
fn unchain(event: &mut serde_json::Value) {
    if let Some(fields) = event.as_object_mut() {
        fields.remove("prev");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sqlite_log_from_before_chains_is_chained_after_the_upgrade() {
    timeout(TEST_TIMEOUT, async {
        let dir = scratch_dir("audit-upgrade-sqlite");
        let db = dir.join("old.db");
        let store = format!("sqlite:{}", db.display());
        a_log_from_before_chains_is_chained_after_the_upgrade(&store, async || {
            colloquy_store::raw::sqlite_rewrite_log(&db, "old-1", unchain);
        })
        .await;
    })
    .await
    .expect("test timed out");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_log_from_before_chains_is_chained_after_the_upgrade() {
    let Some(redis) = test_redis("a_redis_log_from_before_chains_is_chained_after_the_upgrade")
    else {
        return;
    };
    timeout(TEST_TIMEOUT, async {
        let url = emptied_database(&redis, 13).await;
        a_log_from_before_chains_is_chained_after_the_upgrade(&url, async || {
            colloquy_store::raw::redis_rewrite_log(
                &url,
                colloquy_store::redis::DEFAULT_PREFIX,
                "old-1",
                unchain,
            )
            .await;
        })
        .await;
    })
    .await
    .expect("test timed out");
}
