//! The built-in protocols between SDK agents over real HTTP: initiators use the SDK's
//! helpers, participants answer from handlers over their inbox streams.

use std::time::Duration;

use colloquy_protocol::conversation::{CommitmentState, ConversationStatus, Outcome};
use colloquy_sdk::ask::now_ms;
use colloquy_sdk::client::ConversationQuery;
use colloquy_sdk::{AskOptions, Client, Handlers, SdkError};
use colloquy_tests::http::{Server, bounded, call};
use reqwest::Method;
use serde_json::json;
use tokio::task::JoinHandle;

/// Runs `handlers` for `client` until the test ends.
fn serve(client: Client, handlers: Handlers) -> JoinHandle<()> {
    tokio::spawn(async move {
        // The server refusing the stream ends the agent; the test then times out on its
        // own assertion, which names what was missing.
        let _ = client.serve(handlers, 0).await;
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_request_resolves_on_the_inform_not_on_the_agree() {
    let server = Server::start().await;
    let bob = serve(
        server.client("bob").await,
        Handlers::new().on("fipa-request", "request", |msg| async move {
            msg.agree(json!({})).await?;
            msg.inform(json!({"done": true, "booking": "LV-1"})).await?;
            Ok(())
        }),
    );
    let alice = server.client("alice").await;
    let (seen, mut observed) = tokio::sync::mpsc::unbounded_channel();
    let answer = bounded(alice.request(
        "bob",
        json!({"action": "book-room"}),
        AskOptions::default().observe(seen),
    ))
    .await
    .expect("request answered");
    assert_eq!(answer.outcome, Some(Outcome::Success));
    let reply = answer.reply.expect("a final message");
    assert_eq!(reply.performative.name(), "inform");
    assert_eq!(reply.content.value()["booking"], "LV-1");
    let mut performatives = Vec::new();
    while let Ok(message) = observed.try_recv() {
        performatives.push(message.performative.name().to_owned());
    }
    assert_eq!(
        performatives,
        ["agree", "inform"],
        "intermediate messages are observable"
    );
    let view = bounded(alice.conversation(&answer.conversation_id))
        .await
        .expect("view");
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(
        &*view.messages[1].sender, "bob",
        "the sender is who the token says"
    );
    assert_eq!(
        view.messages[1].in_reply_to.as_deref(),
        Some(&*view.messages[0].id),
        "reply helpers fill in_reply_to"
    );
    bob.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_query_resolves_on_a_refusal() {
    let server = Server::start().await;
    let dave = serve(
        server.client("dave").await,
        Handlers::new().on_any("query-ref", |msg| async move {
            msg.refuse(json!({"reason": "confidential"})).await?;
            Ok(())
        }),
    );
    let carol = server.client("carol").await;
    let answer = bounded(carol.query("dave", json!({"ref": "salary"}), AskOptions::default()))
        .await
        .expect("query answered");
    assert_eq!(answer.outcome, Some(Outcome::Refused));
    assert_eq!(
        answer
            .reply
            .map(|m| m.performative.name().to_owned())
            .as_deref(),
        Some("refuse")
    );
    dave.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_request_gives_up_at_its_timeout_when_nobody_answers() {
    let server = Server::start().await;
    let alice = server.client("alice").await;
    let result = bounded(alice.request(
        "bob",
        json!({"action": "anything"}),
        AskOptions::default().timeout(Duration::from_millis(200)),
    ))
    .await;
    match result {
        Err(SdkError::Timeout { conversation_id }) => {
            let view = bounded(alice.conversation(&conversation_id))
                .await
                .expect("the conversation goes on");
            assert_eq!(view.status, ConversationStatus::Active);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_contract_net_collects_proposals_refusals_and_silence_then_awards() {
    let server = Server::start().await;
    let mut agents = Vec::new();
    for (name, price) in [("acme", 120), ("globex", 95)] {
        agents.push(serve(
            server.client(name).await,
            Handlers::new()
                .on("fipa-contract-net", "cfp", move |msg| async move {
                    msg.propose(json!({"price": price})).await?;
                    Ok(())
                })
                .on("fipa-contract-net", "accept-proposal", |msg| async move {
                    msg.inform(json!({"done": true})).await?;
                    Ok(())
                }),
        ));
    }
    agents.push(serve(
        server.client("carol").await,
        Handlers::new().on("fipa-contract-net", "cfp", |msg| async move {
            msg.refuse(json!({"reason": "busy"})).await?;
            Ok(())
        }),
    ));
    // initech has no handler: it stays silent past the reply-by.
    let buyer = server.client("buyer").await;
    let collected = bounded(buyer.call_for_proposals(
        &["acme", "globex", "carol", "initech"],
        json!({"task": "chairs"}),
        now_ms() + 400,
        AskOptions::default(),
    ))
    .await
    .expect("proposals collected");
    assert_eq!(collected.silent, ["initech"]);
    assert_eq!(collected.declined.len(), 1);
    let mut proposals = collected.proposals.clone();
    proposals.sort_by_key(|m| m.content.value()["price"].as_u64());
    let senders: Vec<&str> = proposals.iter().map(|m| &*m.sender).collect();
    assert_eq!(senders, ["globex", "acme"]);
    let id = collected.conversation_id.clone();
    bounded(buyer.accept(&id, &proposals[0], json!({"price": 95})))
        .await
        .expect("accepted");
    bounded(buyer.reject(&id, &proposals[1], json!({"reason": "price"})))
        .await
        .expect("rejected");
    let mut events = buyer.events(&id, 0);
    bounded(async { while events.next().await.expect("event stream").is_some() {} }).await;
    let view = bounded(buyer.conversation(&id)).await.expect("view");
    assert_eq!(view.outcome, Some(Outcome::Success));
    let states: Vec<(&str, &str)> = view
        .threads
        .iter()
        .map(|t| (&*t.participant, &*t.state))
        .collect();
    assert_eq!(
        states,
        [
            ("acme", "rejected"),
            ("globex", "done"),
            ("carol", "refused"),
            ("initech", "no_reply")
        ]
    );
    agents.iter().for_each(JoinHandle::abort);
}

/// A token-mode server where alice asked bob for something and bob agreed: bob owes alice.
async fn agreed_request() -> (Server, Client, Client) {
    let server = Server::start().await;
    let alice = server.client("alice").await;
    let bob = server.client("bob").await;
    let view = bounded(alice.start(&colloquy_protocol::StartConversation {
        template: "fipa-request".into(),
        participants: vec!["bob".into()],
        message: Some(colloquy_protocol::SendMessage::new(
            "request",
            json!({"action": "x"}),
        )),
        ..Default::default()
    }))
    .await
    .expect("started");
    bounded(bob.send(
        &view.id,
        &colloquy_protocol::SendMessage::new("agree", json!({})),
    ))
    .await
    .expect("agreed");
    (server, alice, bob)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commitments_are_listed_by_role_and_released_by_their_creditor() {
    let (_server, alice, bob) = agreed_request().await;
    let owed = bounded(bob.commitments(Some("debtor"), Some("active")))
        .await
        .expect("listed");
    assert_eq!(owed.len(), 1);
    assert!(
        bounded(bob.commitments(Some("creditor"), None))
            .await
            .expect("listed")
            .is_empty()
    );
    let id = owed[0].id.to_string();
    let refused = bounded(bob.release_commitment(&id)).await;
    assert_eq!(
        refused.err().and_then(|e| e.status()),
        Some(403),
        "only the creditor releases"
    );
    let released = bounded(alice.release_commitment(&id))
        .await
        .expect("released");
    assert_eq!(released.state, CommitmentState::Released);
    let again = bounded(bob.cancel_commitment(&id)).await;
    assert_eq!(again.err().and_then(|e| e.status()), Some(409));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_listed_by_filter_a_page_at_a_time() {
    let server = Server::start().await;
    let alice = server.client("alice").await;
    for participant in ["bob", "carol", "bob"] {
        bounded(alice.start(&colloquy_protocol::StartConversation {
            template: "fipa-query".into(),
            participants: vec![participant.into()],
            ..Default::default()
        }))
        .await
        .expect("started");
    }
    let bob = server.client("bob").await;
    let mine = bounded(bob.conversations(&ConversationQuery::default()))
        .await
        .expect("listed");
    assert_eq!(mine.conversations.len(), 2, "bob sees only his own");
    let mut seen = Vec::new();
    let mut query = ConversationQuery {
        participant: Some("bob".into()),
        template: Some("fipa-query".into()),
        state: Some("active".into()),
        limit: Some(1),
        ..Default::default()
    };
    loop {
        let page = bounded(alice.conversations(&query)).await.expect("page");
        seen.extend(page.conversations.iter().map(|c| c.id.to_string()));
        match page.next_cursor {
            Some(cursor) => query.cursor = Some(cursor),
            None => break,
        }
    }
    assert_eq!(seen.len(), 2);
    assert!(seen[0] < seen[1], "ordered by id");
    query.state = Some("completed".into());
    query.cursor = None;
    let none = bounded(alice.conversations(&query)).await.expect("page");
    assert!(none.conversations.is_empty());
}

/// A commitment id written as it is (`<conversation id>/<n>`, slash not encoded) reaches the
/// same release and cancel as the encoded one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commitment_id_works_in_the_path_with_its_slash_unencoded() {
    let (server, _alice, bob) = agreed_request().await;
    let owed = bounded(bob.commitments(Some("debtor"), None))
        .await
        .expect("listed");
    let id = owed[0].id.to_string();
    assert!(id.contains('/'), "{id}");
    let path = |action: &str| format!("/v1/commitments/{id}/{action}");
    let (status, _) = call(server.as_agent(Method::POST, &path("release"), "bob")).await;
    assert_eq!(status, 403, "only the creditor releases");
    let (status, body) = call(server.as_agent(Method::POST, &path("release"), "alice")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["id"], id.as_str());
    assert_eq!(body["state"], "released");
    let (status, _) = call(server.as_agent(Method::POST, &path("cancel"), "bob")).await;
    assert_eq!(status, 409, "released already");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commitments_come_a_page_at_a_time() {
    let server = Server::start().await;
    let alice = server.client("alice").await;
    for n in 0..3 {
        bounded(alice.start(&colloquy_protocol::StartConversation {
            template: "fipa-request".into(),
            participants: vec!["bob".into()],
            message: Some(colloquy_protocol::SendMessage::new(
                "request",
                json!({"action": "file", "n": n}),
            )),
            ..Default::default()
        }))
        .await
        .expect("started");
    }
    let (status, first) =
        call(server.as_agent(Method::GET, "/v1/commitments?limit=2", "alice")).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["commitments"].as_array().map(Vec::len), Some(2));
    let cursor = first["next_cursor"]
        .as_str()
        .expect("a next page")
        .to_owned();
    assert_eq!(first["commitments"][1]["id"], cursor.as_str());
    let (status, rest) = call(
        server
            .as_agent(Method::GET, "/v1/commitments", "alice")
            .query(&[("limit", "2"), ("cursor", cursor.as_str())]),
    )
    .await;
    assert_eq!(status, 200, "{rest}");
    assert_eq!(rest["commitments"].as_array().map(Vec::len), Some(1));
    assert!(rest.get("next_cursor").is_none(), "{rest}");
    assert!(rest["commitments"][0]["id"].as_str() > Some(cursor.as_str()));
    // The SDK follows the pages.
    let all = bounded(alice.commitments(None, None))
        .await
        .expect("listed");
    assert_eq!(all.len(), 3);
    let (status, _) = call(server.as_agent(Method::GET, "/v1/commitments?limit=0", "alice")).await;
    assert_eq!(status, 400);
}

/// `outcome` keeps the conversations that ended with it; an unknown one is a 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conversations_are_listed_by_outcome() {
    let server = Server::start().await;
    let alice = server.client("alice").await;
    let mut ids = Vec::new();
    for n in 0..2 {
        let view = bounded(alice.start(&colloquy_protocol::StartConversation {
            template: "fipa-request".into(),
            participants: vec!["bob".into()],
            message: Some(colloquy_protocol::SendMessage::new(
                "request",
                json!({"action": "file", "n": n}),
            )),
            ..Default::default()
        }))
        .await
        .expect("started");
        ids.push(view.id.to_string());
    }
    let bob = server.client("bob").await;
    bounded(bob.send(
        &ids[0],
        &colloquy_protocol::SendMessage::new("refuse", json!({"reason": "busy"})),
    ))
    .await
    .expect("refused");
    let listed = |query: &'static str| {
        let server = &server;
        async move {
            let (status, body) =
                call(server.as_agent(Method::GET, &format!("/v1/conversations?{query}"), "alice"))
                    .await;
            assert_eq!(status, 200, "{body}");
            body["conversations"]
                .as_array()
                .expect("conversations")
                .iter()
                .map(|c| c["id"].as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(listed("outcome=refused").await, [ids[0].clone()]);
    assert_eq!(listed("outcome=success").await, Vec::<String>::new());
    assert_eq!(listed("state=active").await, [ids[1].clone()]);
    let (status, body) =
        call(server.as_agent(Method::GET, "/v1/conversations?outcome=maybe", "alice")).await;
    assert_eq!(status, 400, "{body}");
}
