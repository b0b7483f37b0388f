//! Ownership in the server (`colloquy_server::ownership`): two engine nodes in this process
//! share one store and one lease table (the in-memory ones), each takes about half of the
//! partitions, and any node takes any conversation's request: the owner serves it, another
//! node forwards it there over loopback HTTP. A node that stops (dropped, as a crash: it
//! gives nothing back) loses its partitions after the lease TTL, and the other serves its
//! conversations from the store from then on. (Postgres's lease table and fenced commits,
//! and nodes as separate processes, come with the Postgres store's ownership.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use colloquy_cluster::{MemoryLeaseStore, NodeId, OwnershipConfig};
use colloquy_core::store::{ConversationStore, MemoryStore};
use colloquy_server::ServiceOptions;
use colloquy_server::ownership::{OwnershipSettings, SERVED_BY};
use colloquy_tests::http::{STEP, Server, call, identity};
use reqwest::Method;
use serde_json::json;

/// Short leases, few partitions: a takeover within a second or two.
fn config() -> OwnershipConfig {
    OwnershipConfig {
        partitions: 16,
        lease_ttl_ms: 1_200,
        tick_ms: 100,
        safety_margin_ms: 50,
        ..OwnershipConfig::default()
    }
}

async fn node(
    name: &str,
    store: &Arc<dyn ConversationStore>,
    leases: &Arc<MemoryLeaseStore>,
) -> Server {
    Server::with_options(
        Vec::new(),
        ServiceOptions {
            identity: identity(&[]),
            store: Some(store.clone()),
            ownership: Some(OwnershipSettings {
                leases: leases.clone(),
                node: NodeId::new(name),
                address: None,
                secret: Arc::from("node-secret"),
                config: config(),
            }),
            ..ServiceOptions::default()
        },
    )
    .await
}

/// Waits until the lease table gives every partition a live lease held by one of
/// `nodes`, each of which holds at least one.
async fn settled(leases: &MemoryLeaseStore, nodes: &[&str]) {
    let deadline = Instant::now() + STEP;
    loop {
        let view = leases.view_at(leases.now());
        let live: Vec<_> = (view.leases.iter())
            .filter(|lease| lease.is_live(view.now))
            .collect();
        let each = nodes
            .iter()
            .all(|node| live.iter().any(|lease| lease.owner.as_str() == *node));
        let theirs = (live.iter()).all(|lease| nodes.contains(&lease.owner.as_str()));
        if each && theirs && live.len() == config().partitions as usize {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "partitions did not settle: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn served_by(response: &reqwest::Response) -> String {
    (response.headers().get(SERVED_BY))
        .and_then(|value| value.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_node_takes_a_conversations_requests_and_a_dead_owners_move() {
    let store: Arc<dyn ConversationStore> = Arc::new(MemoryStore::new());
    let leases = Arc::new(MemoryLeaseStore::new());
    let a = node("node-a", &store, &leases).await;
    let b = node("node-b", &store, &leases).await;
    settled(&leases, &["node-a", "node-b"]).await;

    // Starts on both nodes: each is served where it arrives (its id is drawn in a
    // partition that node owns).
    let mut started = Vec::new();
    for (index, server) in [&a, &b, &a, &b, &a, &b].into_iter().enumerate() {
        let response = server
            .as_agent(Method::POST, "/v1/conversations", "alice")
            .json(&json!({"template": "fipa-request", "participants": ["bob"],
                          "message": {"performative": "request", "content": {"n": index}}}))
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 201);
        let node = served_by(&response);
        let view: serde_json::Value = response.json().await.expect("a view");
        started.push((view["id"].as_str().expect("an id").to_owned(), node));
    }
    assert!(started.iter().any(|(_, node)| node == "node-a"));
    assert!(started.iter().any(|(_, node)| node == "node-b"));

    // Every conversation's requests, sent to either node, are answered by its owner.
    for (id, owner) in &started {
        for server in [&a, &b] {
            let response = server
                .as_agent(Method::GET, &format!("/v1/conversations/{id}"), "bob")
                .send()
                .await
                .expect("sent");
            assert_eq!(response.status(), 200);
            assert_eq!(
                &served_by(&response),
                owner,
                "{id} read through {}",
                server.url
            );
        }
    }
    // bob agrees through the node that does not own the conversation.
    let mut versions = std::collections::HashMap::new();
    for (id, owner) in &started {
        let other = if owner == "node-a" { &b } else { &a };
        let (status, receipt) = call(
            other
                .as_agent(
                    Method::POST,
                    &format!("/v1/conversations/{id}/messages"),
                    "bob",
                )
                .json(&json!({"performative": "agree"})),
        )
        .await;
        assert_eq!(status, 202, "{receipt}");
        let (status, view) =
            call(other.as_agent(Method::GET, &format!("/v1/conversations/{id}"), "bob")).await;
        assert_eq!(status, 200, "{view}");
        assert_eq!(view["status"], "active", "{view}");
        versions.insert(id.clone(), view["version"].clone());
    }
    // A start naming its id goes to that id's owner, wherever it arrives.
    let (status, view) = call(a.as_agent(Method::POST, "/v1/conversations", "alice").json(
        &json!({"conversation_id": "chosen-by-alice", "template": "fipa-request",
                          "participants": ["bob"]}),
    ))
    .await;
    assert_eq!(status, 201, "{view}");

    // node-a stops without a word (its leases are not given back): after the TTL node-b
    // takes its partitions and serves its conversations, at the version node-a left them.
    let stopped = Instant::now();
    drop(a);
    settled(&leases, &["node-b"]).await;
    assert!(
        stopped.elapsed() < Duration::from_millis(config().lease_ttl_ms) + STEP,
        "the takeover took {:?}",
        stopped.elapsed()
    );
    for (id, _) in &started {
        let response = b
            .as_agent(Method::GET, &format!("/v1/conversations/{id}"), "bob")
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), 200);
        assert_eq!(served_by(&response), "node-b");
        let view: serde_json::Value = response.json().await.expect("a view");
        assert_eq!(view["version"], versions[id], "as node-a left it: {view}");
        let (status, receipt) = call(
            b.as_agent(
                Method::POST,
                &format!("/v1/conversations/{id}/messages"),
                "bob",
            )
            .json(&json!({"performative": "inform", "content": {"done": true}})),
        )
        .await;
        assert_eq!(status, 202, "{receipt}");
    }
}

/// A2A calls name their conversation inside the call, which routing does not read yet: a
/// node of a cluster of owners refuses them with 501 `not_in_cluster` (docs/scale.md)
/// rather than record on a node that may not own the task. Agent cards are still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_calls_are_refused_on_a_cluster_of_owners_and_cards_served() {
    let store: Arc<dyn ConversationStore> = Arc::new(MemoryStore::new());
    let leases = Arc::new(MemoryLeaseStore::new());
    let a = node("node-a", &store, &leases).await;
    settled(&leases, &["node-a"]).await;
    let (status, body) = call(
        a.as_agent(Method::POST, "/a2a/bob", "alice")
            .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {}})),
    )
    .await;
    assert_eq!(status, 501, "{body}");
    assert_eq!(body["error"]["code"], "not_in_cluster", "{body}");
    let card = a
        .as_agent(Method::GET, "/a2a/bob/.well-known/agent-card.json", "alice")
        .send()
        .await
        .expect("sent");
    assert_ne!(card.status(), 501);
}
