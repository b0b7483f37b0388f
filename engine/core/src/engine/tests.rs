//! Tests of the engine: refused messages recorded in their conversations.

use std::path::Path;

use colloquy_policy::{Catalog, TemplateCompiler};
use colloquy_protocol::event::Refusal;
use serde_json::json;

use super::*;
use crate::clock::ManualClock;
use crate::dispatch::MAX_RECORDED_REFUSALS;
use crate::store::MemoryStore;

const NOW: u64 = 1_767_225_600_000;

/// FIPA Request with `enforcement: enforce`: a move out of protocol is refused.
fn enforced_request() -> Arc<CompiledTemplate> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/fipa-request.yaml");
    let source = std::fs::read_to_string(&path).expect("the built-in template");
    let source = source.replace("enforcement: report", "enforcement: enforce");
    assert!(
        source.contains("enforcement: enforce"),
        "the template changed"
    );
    match TemplateCompiler::new().compile_str(&source, None) {
        Ok(template) => Arc::new(template),
        Err(diagnostics) => panic!("{diagnostics}"),
    }
}

fn engine_over(store: Arc<MemoryStore>) -> Engine {
    Engine::new(
        Arc::new(Catalog::new([enforced_request()])),
        store,
        Arc::new(ManualClock::new(NOW)),
        EngineConfig::default(),
    )
}

fn message(id: &str, performative: &str) -> SendMessage {
    SendMessage {
        message_id: Some(id.to_owned()),
        ..SendMessage::new(performative, json!({}))
    }
}

/// Alice asked Bob; Bob's thread is `requested`, with a reply-by.
async fn requested(engine: &Engine) -> Arc<str> {
    let request = StartConversation {
        template: "fipa-request".to_owned(),
        participants: vec!["bob".to_owned()],
        conversation_id: Some("c1".to_owned()),
        ..StartConversation::default()
    };
    let view = engine.start("alice", request).await.expect("starts");
    engine
        .send(&view.id, "alice", message("a1", "request"))
        .await
        .expect("the request is accepted");
    view.id
}

/// The conversation's `message_refused` events, as the administrator reads them.
async fn refusals(engine: &Engine, id: &str) -> Vec<Refusal> {
    let events = engine.events(id, None, 0).await.expect("events");
    events
        .into_iter()
        .filter_map(|event| match event.kind {
            EventKind::MessageRefused(refusal) => Some(*refusal),
            _ => None,
        })
        .collect()
}

async fn refused(engine: &Engine, id: &str, sender: &str, message: SendMessage) -> EngineError {
    match engine.send(id, sender, message).await {
        Ok(receipt) => panic!("accepted: {receipt:?}"),
        Err(error) => error,
    }
}

#[tokio::test]
async fn a_refused_message_is_recorded_and_changes_nothing_else() {
    let store = Arc::new(MemoryStore::new());
    let engine = engine_over(store.clone());
    let id = requested(&engine).await;
    let before = engine.view(&id, None).await.expect("view");
    let wake = engine.next_wake(&id).await.expect("loaded");
    let deadline = before.threads[0].deadline.expect("a reply-by");
    let inbox = |agent: &'static str| {
        let store = store.clone();
        async move { store.inbox_head(agent).await.expect("inbox") }
    };
    let inboxes = (inbox("alice").await, inbox("bob").await);

    let cancel = SendMessage {
        to: vec!["alice".to_owned()],
        ..message("b1", "cancel")
    };
    let error = refused(&engine, &id, "bob", cancel).await;
    assert_eq!(error.code(), "out_of_protocol", "{error}");

    assert_eq!(
        refusals(&engine, &id).await,
        [Refusal {
            message_id: Some(Arc::from("b1")),
            sender: AgentId::from("bob"),
            performative: "cancel".to_owned(),
            to: vec![AgentId::from("alice")],
            code: "out_of_protocol".to_owned(),
            pointer: None,
        }]
    );
    let after = engine.view(&id, None).await.expect("view");
    assert_eq!(after.version, before.version + 1, "one event, the refusal");
    assert_eq!(
        ConversationView {
            version: before.version,
            ..after
        },
        before,
        "no thread, message, commitment, violation, status or outcome changed"
    );
    assert_eq!(engine.next_wake(&id).await.expect("loaded"), wake);
    assert_eq!(
        (inbox("alice").await, inbox("bob").await),
        inboxes,
        "delivered to nobody"
    );
    // The store still wakes the conversation at the reply-by, not before.
    assert!(
        store
            .claim_due(deadline - 1, 10)
            .await
            .expect("claims")
            .is_empty()
    );
    assert_eq!(store.claim_due(deadline, 10).await.expect("claims"), [id]);
}

#[tokio::test]
async fn a_refusal_is_seen_by_its_sender_and_the_administrator_only() {
    let engine = engine_over(Arc::new(MemoryStore::new()));
    let id = requested(&engine).await;
    let error = refused(&engine, &id, "bob", message("b1", "made-up-act")).await;
    assert_eq!(error.code(), "unknown_performative");
    let error = refused(&engine, &id, "alice", message("a2", "request")).await;
    assert_eq!(error.code(), "out_of_protocol", "{error}");
    let senders = |events: Vec<ConversationEvent>| -> Vec<String> {
        events
            .into_iter()
            .filter_map(|event| match event.kind {
                EventKind::MessageRefused(refusal) => Some(refusal.sender.to_string()),
                _ => None,
            })
            .collect()
    };
    let read = |viewer| engine.events(&id, viewer, 0);
    assert_eq!(senders(read(None).await.expect("admin")), ["bob", "alice"]);
    assert_eq!(senders(read(Some("bob")).await.expect("bob")), ["bob"]);
    assert_eq!(
        senders(read(Some("alice")).await.expect("alice")),
        ["alice"]
    );
    let bobs = refusals(&engine, &id).await.remove(0);
    assert_eq!(bobs.performative, "made-up-act", "as sent, though unknown");
    assert_eq!(bobs.pointer.as_deref(), Some("/performative"));
    let view = engine.view(&id, Some("alice")).await.expect("view");
    assert_eq!(
        view.messages.len(),
        1,
        "only the accepted request: {:?}",
        view.messages
    );
}

#[tokio::test]
async fn refusals_are_recorded_up_to_the_cap_and_refused_past_it() {
    let store = Arc::new(MemoryStore::new());
    let engine = engine_over(store.clone());
    let id = requested(&engine).await;
    let over = MAX_RECORDED_REFUSALS as usize + 6;
    for n in 0..over {
        let error = refused(&engine, &id, "bob", message(&format!("b{n}"), "cancel")).await;
        assert_eq!(error.code(), "out_of_protocol", "refusal {n}: {error}");
    }
    let recorded = refusals(&engine, &id).await;
    assert_eq!(recorded.len(), MAX_RECORDED_REFUSALS as usize);
    let last = MAX_RECORDED_REFUSALS - 1;
    assert_eq!(
        recorded.last().and_then(|r| r.message_id.as_deref()),
        Some(format!("b{last}").as_str()),
        "the first ones are kept"
    );
    // A fresh engine over the same store counts them from the log: still at the cap.
    let reloaded = engine_over(store);
    let error = refused(&reloaded, &id, "bob", message("late", "cancel")).await;
    assert_eq!(error.code(), "out_of_protocol");
    assert_eq!(
        refusals(&reloaded, &id).await.len(),
        MAX_RECORDED_REFUSALS as usize
    );
    // Still a conversation: the request is answered.
    reloaded
        .send(&id, "bob", message("b-agree", "agree"))
        .await
        .expect("accepted past the cap");
}

#[tokio::test]
async fn retries_clashing_ids_and_strangers_are_not_recorded() {
    let engine = engine_over(Arc::new(MemoryStore::new()));
    let id = requested(&engine).await;
    let version = engine.view(&id, None).await.expect("view").version;
    let retry = engine
        .send(&id, "alice", message("a1", "request"))
        .await
        .expect("a retry is answered");
    assert!(retry.duplicate);
    let clash = SendMessage {
        content: json!({"other": true}),
        ..message("a1", "request")
    };
    let error = refused(&engine, &id, "alice", clash).await;
    assert_eq!(error.code(), "message_id_taken");
    // A stranger's unknown performative is refused as unknown before its sender is
    // checked: still no party's refusal.
    for (performative, code) in [
        ("agree", "not_a_party"),
        ("made-up-act", "unknown_performative"),
    ] {
        let error = refused(&engine, &id, "eve", message("e1", performative)).await;
        assert_eq!(error.code(), code, "{error}");
    }
    assert_eq!(
        engine.view(&id, None).await.expect("view").version,
        version,
        "nothing recorded"
    );
    assert!(refusals(&engine, &id).await.is_empty());
    let error = refused(&engine, "no-such", "bob", message("b1", "agree")).await;
    assert_eq!(error.code(), "unknown_conversation");
}

#[tokio::test]
async fn the_log_with_refusals_folds_into_the_same_conversation() {
    let store = Arc::new(MemoryStore::new());
    let engine = engine_over(store.clone());
    let id = requested(&engine).await;
    refused(&engine, &id, "bob", message("b1", "cancel")).await;
    engine
        .send(&id, "bob", message("b2", "agree"))
        .await
        .expect("accepted after a refusal");
    refused(&engine, &id, "bob", message("b3", "request")).await;

    let live = engine.loaded_slot(&id).await.expect("loaded");
    let live = live.lock().await;
    let live = live.as_ref().expect("live");
    let (folded, _) = engine
        .replay_stored(&id)
        .await
        .expect("reads")
        .expect("stored");
    assert_eq!(live.refusals, 2);
    assert_eq!(folded.refusals, live.refusals);
    assert_eq!(folded.version, live.version);
    assert_eq!(folded.thread_views(), live.thread_views());
    assert_eq!(folded.accepted, live.accepted);
    assert_eq!(folded.commitments, live.commitments);
    assert_eq!(folded.next_wake(0), live.next_wake(0));
    let view = engine_over(store).view(&id, None).await.expect("reloads");
    assert_eq!(view, live.view(view.messages.clone()));
}
