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

/// Node `name` on the shared `store` and lease table, with `options` for the rest.
async fn node_with(
    name: &str,
    store: &Arc<dyn ConversationStore>,
    leases: &Arc<MemoryLeaseStore>,
    options: ServiceOptions,
) -> Server {
    Server::with_options(
        Vec::new(),
        ServiceOptions {
            store: Some(store.clone()),
            ownership: Some(OwnershipSettings {
                leases: leases.clone(),
                node: NodeId::new(name),
                address: None,
                secret: Arc::from("node-secret"),
                config: config(),
            }),
            ..options
        },
    )
    .await
}

/// A node whose agents are the harness's.
async fn node(
    name: &str,
    store: &Arc<dyn ConversationStore>,
    leases: &Arc<MemoryLeaseStore>,
) -> Server {
    let options = ServiceOptions {
        identity: identity(&[]),
        ..ServiceOptions::default()
    };
    node_with(name, store, leases, options).await
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

/// A node of two for A2A clients: push notifications may go to loopback webhooks.
async fn a2a_node(
    name: &str,
    store: &Arc<dyn ConversationStore>,
    leases: &Arc<MemoryLeaseStore>,
) -> Server {
    let options = ServiceOptions {
        identity: identity(&[]),
        a2a: colloquy_server::a2a::Settings {
            push_allow_private: true,
            ..colloquy_server::a2a::Settings::default()
        },
        ..ServiceOptions::default()
    };
    node_with(name, store, leases, options).await
}

/// An A2A v1.0 JSON-RPC call as alice to agent bob through `server`: the answer's node and
/// its `result` (the test fails on a JSON-RPC error).
async fn a2a_call(
    server: &Server,
    method: &str,
    params: serde_json::Value,
) -> (String, serde_json::Value) {
    let response = server
        .as_agent(Method::POST, "/a2a/bob", "alice")
        .header("A2A-Version", "1.0")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}))
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 200, "{method}");
    let node = served_by(&response);
    let body: serde_json::Value = response.json().await.expect("JSON-RPC");
    assert!(body.get("error").is_none(), "{method} {params}: {body:#}");
    (node, body["result"].clone())
}

/// A webhook on 127.0.0.1 that takes every push notification: the bodies, in order.
async fn push_receiver() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>,
) {
    let (pushed, received) = tokio::sync::mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<serde_json::Value>| {
            let pushed = pushed.clone();
            async move {
                let _ = pushed.send(body);
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("address"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

/// The pushes until one shows the task in `state`; fails after [`STEP`].
async fn pushed_until(
    pushed: &mut tokio::sync::mpsc::UnboundedReceiver<serde_json::Value>,
    state: &str,
) {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let push = tokio::time::timeout_at(deadline, pushed.recv())
            .await
            .unwrap_or_else(|_| panic!("no push of {state} in time"))
            .expect("the receiver runs");
        if push["statusUpdate"]["status"]["state"] == state {
            return;
        }
    }
}

/// A2A calls name their task inside the call (JSON-RPC params, REST paths); any node takes
/// them, and the task's owner serves them: tasks open where the call arrives, every later
/// call about a task (JSON-RPC and REST) is answered by its owner through either node, a
/// Colloquy bridge's retry-safe send opens one task whichever node it reaches, and a push
/// notification config set through the other node is followed by the owner, and by the
/// node that takes the task over when the owner dies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2a_calls_are_served_by_their_tasks_owner_wherever_they_arrive() {
    let store: Arc<dyn ConversationStore> = Arc::new(MemoryStore::new());
    let leases = Arc::new(MemoryLeaseStore::new());
    let a = a2a_node("node-a", &store, &leases).await;
    let b = a2a_node("node-b", &store, &leases).await;
    settled(&leases, &["node-a", "node-b"]).await;

    let mut tasks = Vec::new();
    for (n, (server, name)) in [
        (&a, "node-a"),
        (&b, "node-b"),
        (&a, "node-a"),
        (&b, "node-b"),
    ]
    .into_iter()
    .enumerate()
    {
        let (node, sent) = a2a_call(
            server,
            "SendMessage",
            json!({"message": {"messageId": format!("m-{n}"), "role": "ROLE_USER",
                               "parts": [{"data": {"n": n}}]},
                   "configuration": {"returnImmediately": true}}),
        )
        .await;
        assert_eq!(node, name, "a task opens where its call arrives");
        let id = sent["task"]["id"].as_str().expect("a task").to_owned();
        tasks.push((id, node));
    }
    for (id, owner) in &tasks {
        for server in [&a, &b] {
            let (node, task) = a2a_call(server, "GetTask", json!({"id": id})).await;
            assert_eq!((&node, &task["id"]), (owner, &json!(id)), "{task:#}");
            let response = server
                .as_agent(Method::GET, &format!("/a2a/bob/rest/tasks/{id}"), "alice")
                .header("A2A-Version", "1.0")
                .send()
                .await
                .expect("sent");
            assert_eq!(response.status(), 200);
            assert_eq!(&served_by(&response), owner, "REST: by the owner too");
        }
    }

    // A Colloquy bridge's send (it names its conversation) is retry-safe: sent again
    // through the other node, it finds the task the first one opened.
    let bridged = json!({"message": {"messageId": "bridged-1", "role": "ROLE_USER",
        "parts": [{"data": {"n": "bridged"}}],
        "metadata": {"colloquy": {"conversation": "elsewhere-1"}}},
        "configuration": {"returnImmediately": true}});
    let (first_node, first) = a2a_call(&a, "SendMessage", bridged.clone()).await;
    let (again_node, again) = a2a_call(&b, "SendMessage", bridged).await;
    assert_eq!(first["task"]["id"], again["task"]["id"]);
    assert_eq!(first_node, again_node, "both served by the task's owner");

    // Push notifications for a task of node-a's, set through node-b.
    let (id, owner) = tasks[0].clone();
    assert_eq!(owner, "node-a");
    let (url, mut pushed) = push_receiver().await;
    let (node, _) = a2a_call(
        &b,
        "CreateTaskPushNotificationConfig",
        json!({"taskId": id, "id": "hook", "url": url}),
    )
    .await;
    assert_eq!(node, "node-a", "set on the owner");
    let agreed = b
        .as_agent(
            Method::POST,
            &format!("/v1/conversations/{id}/messages"),
            "bob",
        )
        .json(&json!({"performative": "agree", "content": {}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(agreed.status(), 202);
    pushed_until(&mut pushed, "TASK_STATE_WORKING").await;

    // node-a dies; node-b takes its partitions, and with them the push config.
    drop(a);
    settled(&leases, &["node-b"]).await;
    let informed = b
        .as_agent(
            Method::POST,
            &format!("/v1/conversations/{id}/messages"),
            "bob",
        )
        .json(&json!({"performative": "inform", "content": {"done": true}}))
        .send()
        .await
        .expect("sent");
    assert_eq!(informed.status(), 202);
    pushed_until(&mut pushed, "TASK_STATE_COMPLETED").await;
    let (node, task) = a2a_call(&b, "GetTask", json!({"id": id})).await;
    assert_eq!(node, "node-b");
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task:#}");
}

/// Only a node acts as another agent, and only as a remote A2A agent: a client's own
/// `x-colloquy-act-as` is ignored by the node it calls and never passed on to the owner, and
/// a request with the node secret may act as no agent but a remote A2A one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_node_acts_as_a_remote_a2a_agent() {
    use colloquy_server::ownership::{ACT_AS, FORWARDED_BY, NODE_SECRET};
    let store: Arc<dyn ConversationStore> = Arc::new(MemoryStore::new());
    let leases = Arc::new(MemoryLeaseStore::new());
    // `remote` is a remote A2A agent (nobody listens there: its messages go unanswered).
    let agents = colloquy_server::Identity::from_yaml(
        "agents:\n  - {id: alice, token: alice-token}\n  - {id: bob, token: bob-token}\n  \
         - {id: remote, a2a: 'http://127.0.0.1:9/'}\n",
        "test agents",
    )
    .expect("agents");
    let start = |name| {
        let options = ServiceOptions {
            identity: agents.clone(),
            ..ServiceOptions::default()
        };
        node_with(name, &store, &leases, options)
    };
    let a = start("node-a").await;
    let b = start("node-b").await;
    settled(&leases, &["node-a", "node-b"]).await;
    let started = a
        .as_agent(Method::POST, "/v1/conversations", "alice")
        .json(
            &json!({"template": "fipa-request", "participants": ["remote"],
                      "message": {"performative": "request", "content": {}}}),
        )
        .send()
        .await
        .expect("sent");
    assert_eq!(started.status(), 201);
    assert_eq!(served_by(&started), "node-a");
    let view: serde_json::Value = started.json().await.expect("a view");
    let id = view["id"].as_str().expect("an id").to_owned();
    let messages = format!("/v1/conversations/{id}/messages");

    // alice, through node-b, says she is `remote`: she is alice to both nodes, and her
    // agree to her own request is recorded as hers, out of protocol.
    let (status, body) = call(
        b.as_agent(Method::POST, &messages, "alice")
            .header(ACT_AS, "remote")
            .json(&json!({"performative": "agree", "content": {}})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["violation"]["agent"], "alice", "{body}");
    // An agree sent to node-a as node-b forwards one: with `secret`, acting as `agent`.
    let forwarded_agree = |secret: &str, agent: &str| {
        call(
            a.anonymous(Method::POST, &messages)
                .header(FORWARDED_BY, "node-b")
                .header(NODE_SECRET, secret)
                .header(ACT_AS, agent)
                .json(&json!({"performative": "agree", "content": {}})),
        )
    };
    // With the node secret, acting as an agent that is not a remote A2A agent is refused.
    let (status, body) = forwarded_agree("node-secret", "bob").await;
    assert_eq!(status, 403, "{body}");
    // A wrong secret makes it a client's request: no credentials, 401.
    let (status, body) = forwarded_agree("not-the-secret", "remote").await;
    assert_eq!(status, 401, "{body}");
    // The bridge's way: the secret, and the remote agent.
    let (status, body) = forwarded_agree("node-secret", "remote").await;
    assert_eq!(status, 202, "{body}");
    let (_, view) =
        call(b.as_agent(Method::GET, &format!("/v1/conversations/{id}"), "alice")).await;
    let senders: Vec<&str> = (view["messages"].as_array().expect("messages").iter())
        .map(|message| message["sender"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(senders, ["alice", "alice", "remote"], "{view:#}");
    assert_eq!(view["threads"][0]["state"], "agreed", "{view:#}");
}

/// Waits until the lease table gives `node` `count` live leases.
async fn holds(leases: &MemoryLeaseStore, node: &str, count: usize) {
    let deadline = Instant::now() + STEP;
    loop {
        let view = leases.view_at(leases.now());
        let held = (view.leases.iter())
            .filter(|lease| lease.is_live(view.now) && lease.owner.as_str() == node)
            .count();
        if held == count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{node} holds {held}, not {count}: {view:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Reads an event stream until its text has `wanted` in it; fails if it ends first or
/// takes longer than [`STEP`].
async fn read_until(stream: &mut reqwest::Response, wanted: &str) {
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + STEP;
    while !text.contains(wanted) {
        let chunk = tokio::time::timeout_at(deadline, stream.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {wanted} in time: {text}"))
            .expect("the stream reads");
        let chunk = chunk.unwrap_or_else(|| panic!("the stream ended before {wanted}: {text}"));
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// A conversation's event stream is its owner's: when a node joins and the conversation's
/// partition moves there, the stream on the old owner ends (the new owner's commits would
/// never reach it), and the client, opening it again through either node, reads on from the
/// new owner. The streams of conversations that stayed go on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversations_stream_ends_when_its_partition_moves() {
    let store: Arc<dyn ConversationStore> = Arc::new(MemoryStore::new());
    let leases = Arc::new(MemoryLeaseStore::new());
    let a = node("node-a", &store, &leases).await;
    settled(&leases, &["node-a"]).await;
    let mut streams = Vec::new();
    for n in 0..24 {
        let (status, view) = call(
            a.as_agent(Method::POST, "/v1/conversations", "alice")
                .json(&json!({"template": "fipa-request", "participants": ["bob"],
                              "message": {"performative": "request", "content": {"n": n}}})),
        )
        .await;
        assert_eq!(status, 201, "{view}");
        let id = view["id"].as_str().expect("an id").to_owned();
        let mut stream = a
            .as_agent(
                Method::GET,
                &format!("/v1/conversations/{id}/events"),
                "alice",
            )
            .send()
            .await
            .expect("a stream");
        assert_eq!(stream.status(), 200);
        read_until(&mut stream, "\"request\"").await;
        streams.push((id, stream));
    }

    let b = node("node-b", &store, &leases).await;
    holds(&leases, "node-b", config().partitions as usize / 2).await;
    holds(&leases, "node-a", config().partitions as usize / 2).await;
    let (mut moved, mut stayed) = (0, 0);
    for (id, mut stream) in streams {
        let read = a
            .as_agent(Method::GET, &format!("/v1/conversations/{id}"), "alice")
            .send()
            .await
            .expect("sent");
        let owner = served_by(&read);
        let (status, receipt) = call(
            a.as_agent(
                Method::POST,
                &format!("/v1/conversations/{id}/messages"),
                "bob",
            )
            .json(&json!({"performative": "agree", "content": {}})),
        )
        .await;
        assert_eq!(status, 202, "{receipt}");
        if owner == "node-a" {
            stayed += 1;
            read_until(&mut stream, "\"agree\"").await;
            continue;
        }
        moved += 1;
        let ended = tokio::time::timeout(STEP, async {
            while stream.chunk().await.expect("the stream reads").is_some() {}
        })
        .await;
        assert!(ended.is_ok(), "{id}: the old owner's stream ended");
        for server in [&a, &b] {
            let mut again = server
                .as_agent(
                    Method::GET,
                    &format!("/v1/conversations/{id}/events"),
                    "alice",
                )
                .send()
                .await
                .expect("a stream");
            assert_eq!(served_by(&again), "node-b");
            read_until(&mut again, "\"agree\"").await;
        }
    }
    assert!(moved > 0 && stayed > 0, "moved {moved}, stayed {stayed}");
}
