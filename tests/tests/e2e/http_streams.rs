//! Streams over HTTP: the inbox resumes after a disconnect without losing or reordering
//! messages, the long poll wakes up for a new message, and a conversation's event stream
//! ends with the conversation and resumes from `Last-Event-ID`.

use colloquy_core::EngineConfig;
use colloquy_protocol::SendMessage;
use colloquy_protocol::StartConversation;
use colloquy_server::ServiceOptions;
use colloquy_tests::http::{Server, bounded, call, identity};
use std::time::Duration;

use crate::support::poll_until;
use reqwest::Method;
use serde_json::json;

fn query(participant: &str, n: u64) -> StartConversation {
    StartConversation {
        template: "fipa-query".into(),
        participants: vec![participant.into()],
        message: Some(SendMessage::new("query-ref", json!({"ref": n}))),
        ..StartConversation::default()
    }
}

/// Reads one raw SSE event block (up to a blank line) from a streaming response.
/// `carol` starts query conversations with dave, one per number in `numbers`.
async fn ask_dave(carol: &colloquy_sdk::Client, numbers: std::ops::RangeInclusive<u64>) {
    for n in numbers {
        bounded(carol.start(&query("dave", n)))
            .await
            .expect("started");
    }
}

async fn next_block(response: &mut reqwest::Response, buffer: &mut String) -> String {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let block = buffer[..end].to_owned();
            buffer.drain(..end + 2);
            if block.lines().all(|line| line.starts_with(':')) {
                continue;
            }
            return block;
        }
        let chunk = bounded(response.chunk())
            .await
            .expect("stream readable")
            .expect("stream open");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

fn field<'a>(block: &'a str, name: &str) -> Option<&'a str> {
    block
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(": "))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_resumes_after_a_disconnect_in_order() {
    let server = Server::start().await;
    let carol = server.client("carol").await;
    ask_dave(&carol, 1..=2).await;
    // First connection: read one message, then hang up.
    let mut response = bounded(
        server
            .as_agent(Method::GET, "/v1/agents/dave/inbox", "dave")
            .send(),
    )
    .await
    .expect("connected");
    assert_eq!(response.status().as_u16(), 200);
    let mut buffer = String::new();
    let block = next_block(&mut response, &mut buffer).await;
    assert_eq!(field(&block, "id"), Some("1"));
    assert_eq!(field(&block, "event"), Some("message"));
    drop(response);
    ask_dave(&carol, 3..=4).await;
    // Reconnect after the one it saw: 2, 3, 4 follow, in order, nothing twice.
    let mut response = bounded(
        server
            .as_agent(Method::GET, "/v1/agents/dave/inbox", "dave")
            .header("last-event-id", "1")
            .send(),
    )
    .await
    .expect("reconnected");
    let mut buffer = String::new();
    let mut refs = Vec::new();
    for expected in 2..=4u64 {
        let block = next_block(&mut response, &mut buffer).await;
        assert_eq!(field(&block, "id"), Some(expected.to_string().as_str()));
        let item: serde_json::Value =
            serde_json::from_str(field(&block, "data").expect("data")).expect("JSON item");
        assert_eq!(item["template"], "fipa-query");
        refs.push(item["message"]["content"]["ref"].as_u64());
    }
    assert_eq!(refs, [Some(2), Some(3), Some(4)]);

    // The SDK's stream does the same on its own, from a position it reports.
    let dave = server.client("dave").await;
    let mut inbox = dave.inbox(3);
    let item = bounded(inbox.next()).await.expect("item");
    assert_eq!(item.seq, 4);
    assert_eq!(inbox.position(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_long_poll_returns_when_a_message_arrives() {
    let server = Server::start().await;
    let dave = server.client("dave").await;
    let empty = bounded(dave.poll_inbox(0, 0)).await.expect("polled");
    assert!(empty.items.is_empty());
    assert_eq!(empty.next_after, 0);
    let waiting = tokio::spawn(async move { dave.poll_inbox(0, 15_000).await });
    let carol = server.client("carol").await;
    bounded(carol.start(&query("dave", 7)))
        .await
        .expect("started");
    let page = bounded(waiting).await.expect("poll task").expect("polled");
    assert_eq!(page.items.len(), 1);
    assert_eq!(page.next_after, 1);
    assert_eq!(page.items[0].message.content.value()["ref"], 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_ends_with_the_conversation_and_resumes() {
    let server = Server::start().await;
    let carol = server.client("carol").await;
    let view = bounded(carol.start(&query("dave", 1)))
        .await
        .expect("started");
    let id = view.id.to_string();
    let dave = server.client("dave").await;
    bounded(dave.send(&id, &SendMessage::new("inform", json!({"value": 1}))))
        .await
        .expect("answered");
    let mut events = carol.events(&id, 0);
    let mut seqs = Vec::new();
    let mut last_type = String::new();
    bounded(async {
        while let Some(event) = events.next().await.expect("stream") {
            seqs.push(event.seq);
            last_type = serde_json::to_value(&event).expect("json")["type"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        }
    })
    .await;
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert_eq!(last_type, "completed", "the stream ends after `completed`");
    let total = *seqs.last().expect("events");
    // Resuming two before the end yields exactly the last two.
    let response = bounded(
        server
            .as_agent(
                Method::GET,
                &format!("/v1/conversations/{id}/events"),
                "carol",
            )
            .header("last-event-id", (total - 2).to_string())
            .send(),
    )
    .await
    .expect("connected");
    let text = bounded(response.text()).await.expect("whole stream");
    let ids: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("id: "))
        .collect();
    assert_eq!(ids, [(total - 1).to_string(), total.to_string()]);
    // Resuming after the last event of an ended conversation: an empty stream that closes.
    let response = bounded(
        server
            .as_agent(
                Method::GET,
                &format!("/v1/conversations/{id}/events"),
                "carol",
            )
            .header("last-event-id", total.to_string())
            .send(),
    )
    .await
    .expect("connected");
    let text = bounded(response.text()).await.expect("whole stream");
    assert!(!text.contains("id: "), "{text}");
    let (status, _) = call(
        server
            .as_agent(
                Method::GET,
                &format!("/v1/conversations/{id}/events"),
                "carol",
            )
            .header("last-event-id", "yesterday"),
    )
    .await;
    assert_eq!(status, 400);
}

/// A bidder's event stream of a Contract-Net follows its own thread live, passes over a
/// rival's proposal, and still ends with the conversation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bidders_event_stream_shows_its_own_thread_to_the_end() {
    let server = Server::start().await;
    let manager = server.client("buyer").await;
    let reply_by = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_millis() as u64
        + 60_000;
    let view = bounded(manager.start(&StartConversation {
        template: "fipa-contract-net".into(),
        participants: vec!["acme".into(), "globex".into()],
        message: Some(SendMessage::new("cfp", json!({"task": "paint"})).reply_by(reply_by)),
        ..StartConversation::default()
    }))
    .await
    .expect("started");
    let id = view.id.to_string();
    let acme = server.client("acme").await;
    let globex = server.client("globex").await;
    let mut events = acme.events(&id, 0);
    let reader = tokio::spawn(async move {
        let mut seen = Vec::new();
        while let Some(event) = events.next().await.expect("stream") {
            seen.push(serde_json::to_value(&event).expect("json"));
        }
        seen
    });
    for (bidder, price) in [(&globex, 70), (&acme, 90)] {
        bounded(bidder.send(&id, &SendMessage::new("propose", json!({"price": price}))))
            .await
            .expect("proposed");
    }
    for bidder in ["acme", "globex"] {
        bounded(manager.send(
            &id,
            &SendMessage::new("reject-proposal", json!({})).to([bidder]),
        ))
        .await
        .expect("rejected");
    }
    let seen = bounded(reader).await.expect("reader");
    let text = serde_json::to_string(&seen).expect("json");
    assert!(text.contains("\"price\":90"), "acme's own proposal: {text}");
    assert!(!text.contains("\"price\":70"), "not globex's: {text}");
    assert!(
        !text.contains("\"participant\":\"globex\""),
        "not globex's thread: {text}"
    );
    assert_eq!(seen.last().expect("events")["type"], "completed");
    let seqs: Vec<u64> = seen.iter().filter_map(|e| e["seq"].as_u64()).collect();
    assert!(
        seqs.windows(2).all(|pair| pair[0] < pair[1]),
        "in order: {seqs:?}"
    );
}

/// A position past the end of an inbox, which only a store reset can leave a client with,
/// starts over from the beginning, for the long poll and the stream alike; a position at the
/// end waits as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_position_past_the_end_of_the_inbox_starts_over() {
    let server = Server::start().await;
    let carol = server.client("carol").await;
    bounded(carol.start(&query("dave", 1)))
        .await
        .expect("started");
    let dave = server.client("dave").await;
    let page = bounded(dave.poll_inbox(5_000, 0)).await.expect("poll");
    let seqs: Vec<u64> = page.items.iter().map(|item| item.seq).collect();
    assert_eq!(seqs, [1]);
    assert_eq!(page.next_after, 1);
    let page = bounded(dave.poll_inbox(1, 0)).await.expect("poll");
    assert!(page.items.is_empty());
    assert_eq!(page.next_after, 1);
    let mut inbox = dave.inbox(5_000);
    let item = bounded(inbox.next()).await.expect("an item");
    assert_eq!(item.seq, 1);
}

/// The `seq`s a long poll from 0 returns.
async fn inbox_seqs(client: &colloquy_sdk::Client) -> Vec<u64> {
    let page = bounded(client.poll_inbox(0, 0)).await.expect("polled");
    page.items.iter().map(|item| item.seq).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_inbox_entries_are_gone_and_the_sequence_goes_on() {
    let server = Server::start().await;
    let carol = server.client("carol").await;
    ask_dave(&carol, 1..=3).await;
    let ack = |agent: &str, body: serde_json::Value| {
        server
            .as_agent(Method::POST, "/v1/agents/dave/inbox/ack", agent)
            .json(&body)
    };
    let (status, body) = call(ack("carol", json!({"through": 1}))).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = call(ack("dave", json!({"through": 9}))).await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["pointer"], "/through");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("ends at 3")),
        "{body}"
    );
    for bad in [
        json!({}),
        json!({"through": -1}),
        json!({"through": 1, "extra": true}),
    ] {
        let (status, body) = call(ack("dave", bad.clone())).await;
        assert!(
            (400..500).contains(&status) && body["error"]["code"].is_string(),
            "{bad}: {status} {body}"
        );
    }
    let dave = server.client("dave").await;
    assert_eq!(
        inbox_seqs(&dave).await,
        [1, 2, 3],
        "refused acks delete nothing"
    );

    let (status, body) = call(ack("dave", json!({"through": 2}))).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, json!({"through": 2, "head": 3}));
    assert_eq!(inbox_seqs(&dave).await, [3]);
    // The SSE inbox from the start begins after what was acknowledged.
    let mut response = bounded(
        server
            .as_agent(Method::GET, "/v1/agents/dave/inbox", "dave")
            .send(),
    )
    .await
    .expect("connected");
    let block = next_block(&mut response, &mut String::new()).await;
    assert_eq!(field(&block, "id"), Some("3"));
    drop(response);

    // Emptied, the inbox numbers the next message after its head.
    let acked = bounded(dave.acknowledge(3)).await.expect("acknowledged");
    assert_eq!((acked.through, acked.head), (3, 3));
    assert_eq!(inbox_seqs(&dave).await, Vec::<u64>::new());
    let (status, _) = call(ack("dave", json!({"through": 1}))).await;
    assert_eq!(status, 200, "an older position is acknowledged already");
    bounded(carol.start(&query("dave", 4)))
        .await
        .expect("started");
    assert_eq!(inbox_seqs(&dave).await, [4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_acknowledges_what_it_handles() {
    let server = Server::start().await;
    let dave = server.client("dave").await;
    let handlers =
        colloquy_sdk::Handlers::new().on("fipa-query", "query-ref", |incoming| async move {
            let n = incoming.content()["ref"].clone();
            incoming.inform(json!({"answer": n})).await?;
            Ok(())
        });
    let serving = tokio::spawn({
        let dave = dave.clone();
        async move { dave.serve(handlers, 0).await }
    });
    let carol = server.client("carol").await;
    for n in 1..=3 {
        bounded(carol.query("dave", json!({"ref": n}), Default::default()))
            .await
            .expect("answered");
    }
    // Acknowledgements run beside the handlers; wait (bounded) for the last to land.
    bounded(async {
        while !inbox_seqs(&dave).await.is_empty() {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    serving.abort();

    // carol only asked: her helpers followed the events, and the three answers wait in
    // her inbox until she drops them.
    assert_eq!(inbox_seqs(&carol).await.len(), 3);
    let acked = bounded(carol.acknowledge_inbox())
        .await
        .expect("acknowledged");
    assert_eq!((acked.through, acked.head), (3, 3));
    assert!(inbox_seqs(&carol).await.is_empty());
    // Nothing left: a second call acknowledges nothing new.
    let again = bounded(carol.acknowledge_inbox())
        .await
        .expect("acknowledged");
    assert_eq!(again.head, 3);
}

/// An agent with `inbox: false` in the agents file (one that only starts conversations and
/// follows them) gets no inbox entries: the answer it gets is in the conversation, its inbox
/// stays empty, and there is nothing for it to acknowledge. The other side's inbox works as
/// ever.
#[tokio::test]
async fn an_agent_without_an_inbox_is_left_nothing_to_acknowledge() {
    let identity = colloquy_server::Identity::from_yaml(
        "agents:\n  - {id: carol, token: carol-token, inbox: false}\n  \
         - {id: dave, token: dave-token}\n",
        "agents fixture",
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let server = Server::with(identity, Vec::new()).await;
    let carol = server.client("carol").await;
    let dave = server.client("dave").await;
    let view = bounded(carol.start(&StartConversation {
        template: "fipa-request".into(),
        participants: vec!["dave".into()],
        message: Some(SendMessage::new("request", json!({"action": "archive"}))),
        ..StartConversation::default()
    }))
    .await
    .expect("started");
    for performative in ["agree", "inform"] {
        bounded(dave.send(&view.id, &SendMessage::new(performative, json!({}))))
            .await
            .expect("answered");
    }
    let seen = bounded(carol.conversation(&view.id)).await.expect("read");
    assert_eq!(
        seen.messages.len(),
        3,
        "the answers are in the conversation"
    );
    let inbox = bounded(carol.poll_inbox(0, 0)).await.expect("poll");
    assert!(inbox.items.is_empty(), "carol keeps no inbox: {inbox:?}");
    let requests = bounded(dave.poll_inbox(0, 0)).await.expect("poll");
    assert_eq!(requests.items.len(), 1, "dave's inbox has the request");
}

/// A running server sweeps inboxes by itself: what nobody fetches and acknowledges within
/// the inbox TTL is dropped, `/metrics` counts it, and the sequence goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_drops_what_nobody_acknowledges_within_the_inbox_ttl() {
    let server = Server::with_options(
        Vec::new(),
        ServiceOptions {
            identity: identity(&[]),
            engine: EngineConfig {
                inbox_ttl_ms: 100,
                ..EngineConfig::default()
            },
            inbox_sweep_period: Duration::from_millis(20),
            ..ServiceOptions::default()
        },
    )
    .await;
    let carol = server.client("carol").await;
    ask_dave(&carol, 1..=2).await;
    let dave = server.client("dave").await;
    poll_until(
        || async { json!(inbox_seqs(&dave).await) },
        |seqs| seqs == &json!([]),
    )
    .await
    .expect("dave's entries expire");
    let metrics = || async {
        json!(
            server
                .metrics()
                .await
                .contains("colloquy_inbox_expired_total 2")
        )
    };
    poll_until(metrics, |counted| counted == &json!(true))
        .await
        .expect("both counted");
    // `through: 0` acknowledges nothing and answers the head: both entries were there.
    let (status, body) = call(
        server
            .as_agent(Method::POST, "/v1/agents/dave/inbox/ack", "dave")
            .json(&json!({"through": 0})),
    )
    .await;
    assert_eq!((status, body["head"].clone()), (200, json!(2)), "{body}");
}
