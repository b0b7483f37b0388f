//! A conversation's life around the messages: starting (and refused starts), the opening
//! message, the conversation deadline, retention, and unknown conversations.

use colloquy_core::ErrorKind;
use colloquy_core::store::ConversationStore;
use colloquy_protocol::conversation::{CommitmentState, ConversationStatus, Outcome};
use colloquy_protocol::message::StartConversation;
use colloquy_protocol::template::MAX_PARTICIPANTS;
use colloquy_tests::{Harness, T0, msg};
use serde_json::json;

use crate::support::{commitment_states, expect_error, performatives, state};

fn start_request(template: &str, participants: &[&str]) -> StartConversation {
    StartConversation {
        template: template.to_owned(),
        participants: participants.iter().map(|p| (*p).to_owned()).collect(),
        ..StartConversation::default()
    }
}

#[tokio::test]
async fn start_with_an_opening_message() {
    let h = Harness::new();
    let opening = msg("request", json!({"action": "book"})).with_id("open-1");
    let view = h
        .try_start(
            "fipa-request",
            "alice",
            &["bob"],
            json!({}),
            Some(opening.clone()),
        )
        .await
        .expect("start");
    assert_eq!(view.status, ConversationStatus::Active);
    assert_eq!(state(&view.threads, "bob"), "requested");
    assert_eq!(performatives(&view), ["request"]);
    assert_eq!(&*view.messages[0].id, "open-1");
    assert_eq!(&*view.messages[0].sender, "alice");
    assert_eq!(commitment_states(&view), [CommitmentState::Pending]);
    assert_eq!(view.deadline, Some(T0 + 3_600_000));
    // The opening message counts for idempotency like any other.
    let again = h.ok(&view.id, "alice", opening).await;
    assert!(again.duplicate);
    assert_eq!(h.view(&view.id).await.version, view.version);
}

#[tokio::test]
async fn start_with_an_invalid_opening_message_creates_nothing() {
    let h = Harness::new();
    let live = h.engine.live_count();
    let mut request = start_request("fipa-request", &["bob"]);
    request.conversation_id = Some("c-bad-opening".to_owned());
    request.message = Some(msg("refuse", json!({"reason": 1})));
    let error = expect_error(
        h.engine.start("alice", request).await,
        "schema_violation",
        ErrorKind::Unprocessable,
    );
    assert_eq!(
        error.pointer(),
        Some("/message/content/reason"),
        "points into the start body"
    );
    assert_eq!(h.engine.live_count(), live);
    let mut request = start_request("fipa-request", &["bob"]);
    request.message = Some(msg("reqest", json!({})));
    let error = expect_error(
        h.engine.start("alice", request).await,
        "unknown_performative",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/message/performative"));
    // A new conversation has no message yet for the opening one to answer.
    let mut request = start_request("fipa-request", &["bob"]);
    request.conversation_id = Some("c-bad-opening".to_owned());
    request.message = Some(msg("request", json!({"action": "book"})).in_reply_to("m-elsewhere"));
    let error = expect_error(
        h.engine.start("alice", request).await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/message/in_reply_to"));
    assert_eq!(h.engine.live_count(), live);
    expect_error(
        h.engine.view("c-bad-opening", None).await,
        "unknown_conversation",
        ErrorKind::NotFound,
    );
}

#[tokio::test]
async fn start_with_a_zero_deadline_is_refused() {
    let h = Harness::new();
    let live = h.engine.live_count();
    let mut request = start_request("fipa-request", &["bob"]);
    request.deadline_ms = Some(0);
    let error = expect_error(
        h.engine.start("alice", request).await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/deadline_ms"));
    assert_eq!(h.engine.live_count(), live);
    let mut request = start_request("fipa-request", &["bob"]);
    request.deadline_ms = Some(1);
    let view = h
        .engine
        .start("alice", request)
        .await
        .expect("1 ms is a deadline");
    assert_eq!(view.deadline, Some(colloquy_tests::T0 + 1));
}

/// A template without a `max` still has one: the engine's cap. Before it, one start with
/// tens of thousands of participants held the engine for seconds.
#[tokio::test]
async fn no_conversation_has_more_participants_than_the_engine_cap() {
    let h = Harness::new();
    let names: Vec<String> = (0..=MAX_PARTICIPANTS)
        .map(|i| format!("bidder-{i}"))
        .collect();
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let error = expect_error(
        h.try_start("fipa-contract-net", "alice", &all, json!({}), None)
            .await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/participants"));
    assert!(error.to_string().contains("1 to 1000"), "{error}");
    let view = h
        .try_start(
            "fipa-contract-net",
            "alice",
            &all[..MAX_PARTICIPANTS as usize],
            json!({}),
            None,
        )
        .await
        .expect("as many as the cap");
    assert_eq!(view.threads.len(), MAX_PARTICIPANTS as usize);
}

#[tokio::test]
async fn start_with_the_wrong_number_of_participants_is_refused() {
    let h = Harness::new();
    for participants in [&[][..], &["bob", "carol"][..]] {
        let error = expect_error(
            h.try_start("fipa-request", "alice", participants, json!({}), None)
                .await,
            "invalid",
            ErrorKind::Unprocessable,
        );
        assert_eq!(error.pointer(), Some("/participants"));
    }
    expect_error(
        h.try_start("fipa-contract-net", "alice", &[], json!({}), None)
            .await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    let error = expect_error(
        h.try_start(
            "fipa-contract-net",
            "alice",
            &["p1", "alice"],
            json!({}),
            None,
        )
        .await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/participants/1"));
    let error = expect_error(
        h.try_start("fipa-contract-net", "alice", &["p1", "p1"], json!({}), None)
            .await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/participants/1"));
    assert_eq!(h.engine.live_count(), 0);
}

#[tokio::test]
async fn start_with_an_unknown_template_is_refused() {
    let h = Harness::new();
    expect_error(
        h.try_start("fipa-subscribe", "alice", &["bob"], json!({}), None)
            .await,
        "unknown_template",
        ErrorKind::NotFound,
    );
}

#[tokio::test]
async fn duplicate_conversation_id_is_refused_and_the_first_survives() {
    let h = Harness::new();
    let mut request = start_request("fipa-request", &["bob"]);
    request.conversation_id = Some("c-1".to_owned());
    let first = h
        .engine
        .start("alice", request.clone())
        .await
        .expect("first start");
    assert_eq!(&*first.id, "c-1");
    h.ok("c-1", "alice", msg("request", json!({}))).await;
    let before = h.view("c-1").await;
    // Another initiator, another template: still refused, never merged.
    let mut other = start_request("fipa-query", &["carol"]);
    other.conversation_id = Some("c-1".to_owned());
    let error = expect_error(
        h.engine.start("mallory", other).await,
        "duplicate_conversation",
        ErrorKind::Conflict,
    );
    assert!(error.to_string().contains("c-1"), "{error}");
    expect_error(
        h.engine.start("alice", request).await,
        "duplicate_conversation",
        ErrorKind::Conflict,
    );
    let after = h.view("c-1").await;
    assert_eq!(after.version, before.version);
    assert_eq!(&*after.initiator, "alice");
    assert_eq!(&*after.template, "fipa-request");
}

#[tokio::test]
async fn conversation_deadline_times_out_open_threads_and_completes() {
    let h = Harness::new();
    let mut request = start_request("fipa-contract-net", &["p1", "p2", "p3"]);
    request.deadline_ms = Some(30_000);
    let c = h.engine.start("manager", request).await.expect("start");
    assert_eq!(c.deadline, Some(T0 + 30_000));
    h.ok(
        &c.id,
        "manager",
        msg("cfp", json!({})).reply_by(T0 + 20_000),
    )
    .await;
    h.ok(&c.id, "p1", msg("propose", json!({}))).await;
    h.ok(&c.id, "p2", msg("refuse", json!({}))).await;
    h.advance(20_000).await;
    let view = h.view(&c.id).await;
    assert_eq!(state(&view.threads, "p3"), "no_reply");
    assert_eq!(state(&view.threads, "p1"), "proposed");
    h.advance(10_000).await;
    let view = h.view(&c.id).await;
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(state(&view.threads, "p1"), "timed_out");
    assert_eq!(state(&view.threads, "p2"), "refused");
    assert_eq!(state(&view.threads, "p3"), "no_reply");
    assert_eq!(view.deadline, None);
    // The unanswered proposal lapses without blame.
    assert_eq!(commitment_states(&view), [CommitmentState::Released]);
    assert!(view.violations.is_empty(), "{:?}", view.violations);
    assert_eq!(view.outcome, Some(Outcome::Failure));
}

#[tokio::test]
async fn request_conversation_deadline_gives_timeout() {
    let h = Harness::new();
    let mut request = start_request("fipa-request", &["bob"]);
    request.deadline_ms = Some(10_000);
    request.message = Some(msg("request", json!({})));
    let c = h.engine.start("alice", request).await.expect("start");
    h.advance(10_000).await;
    let view = h.view(&c.id).await;
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(view.outcome, Some(Outcome::Timeout));
    assert_eq!(state(&view.threads, "bob"), "timed_out");
}

/// A timer pass whose rules send messages ends the conversation when they bring it to its
/// `limits.max_messages`, though the same rules pushed its deadline back.
#[tokio::test]
async fn timer_messages_that_reach_the_message_limit_end_the_conversation() {
    let nudging = colloquy_tests::compile(
        "apiVersion: colloquy.dev/v1
kind: ConversationTemplate
metadata: { name: nudging, version: 1.0.0 }
spec:
  roles: { participants: { min: 1 } }
  deadlines: { conversation_ms: 1000 }
  limits: { max_messages: 3 }
  thread:
    initial: open
    on_expiry: cut_off
    states:
      open: { transitions: [{ performative: request, from: initiator, to: open }] }
      cut_off: { terminal: timeout }
  actions:
    on_timeout:
      - name: nudge
        when: \"timeout.kind == 'conversation'\"
        then:
          - send: { performative: inform, to: [ops-desk], content: { note: still open } }
          - extend_deadline: { by_ms: 1000 }
",
    );
    let h = Harness::with(vec![nudging]);
    let c = h
        .engine
        .start("alice", start_request("nudging", &["bob"]))
        .await
        .expect("start");
    for nudges in 1..=2 {
        h.advance(1000).await;
        let view = h.view(&c.id).await;
        assert_eq!(view.messages.len(), nudges);
        assert_eq!(view.status, ConversationStatus::Active, "after {nudges}");
    }
    h.advance(1000).await;
    let view = h.view(&c.id).await;
    assert_eq!(view.messages.len(), 3);
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(view.outcome, Some(Outcome::Timeout));
    assert_eq!(state(&view.threads, "bob"), "cut_off");
    assert_eq!(view.deadline, None);
    // Nothing fires any more.
    h.advance(10_000).await;
    assert_eq!(h.view(&c.id).await.messages.len(), 3);
}

#[tokio::test]
async fn completed_conversations_are_removed_after_retention() {
    let h = Harness::new();
    let c = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    h.ok(&c.id, "alice", msg("request", json!({}))).await;
    h.ok(&c.id, "bob", msg("inform", json!({}))).await;
    let other = h
        .start("fipa-request", "alice", &["carol"], json!({}))
        .await;
    assert_eq!(h.engine.live_count(), 2);
    assert_eq!(h.engine.commitments_of("bob").await.len(), 1);

    h.advance(299_999).await;
    assert_eq!(h.view(&c.id).await.outcome, Some(Outcome::Success));
    h.advance(1).await;
    expect_error(
        h.engine.view(&c.id, None).await,
        "unknown_conversation",
        ErrorKind::NotFound,
    );
    expect_error(
        h.send(&c.id, "bob", msg("inform", json!({}))).await,
        "unknown_conversation",
        ErrorKind::NotFound,
    );
    expect_error(
        h.engine.events(&c.id, None, 0).await,
        "unknown_conversation",
        ErrorKind::NotFound,
    );
    assert!(h.engine.commitments_of("bob").await.is_empty());
    assert_eq!(h.engine.live_count(), 1);
    // The active conversation is untouched.
    assert_eq!(h.view(&other.id).await.status, ConversationStatus::Active);
}

#[tokio::test]
async fn a_message_to_an_unknown_conversation_creates_nothing() {
    let h = Harness::new();
    for _ in 0..2 {
        expect_error(
            h.send("ghost", "bob", msg("propose", json!({}))).await,
            "unknown_conversation",
            ErrorKind::NotFound,
        );
    }
    expect_error(
        h.engine.view("ghost", None).await,
        "unknown_conversation",
        ErrorKind::NotFound,
    );
    assert_eq!(h.engine.live_count(), 0);
    assert!(h.engine.commitments_of("bob").await.is_empty());
}

#[tokio::test]
async fn parties_read_and_strangers_do_not() {
    let h = Harness::new();
    let c = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    h.ok(&c.id, "alice", msg("request", json!({}))).await;
    assert_eq!(
        h.engine
            .view(&c.id, Some("bob"))
            .await
            .expect("bob reads")
            .messages
            .len(),
        1
    );
    expect_error(
        h.engine.view(&c.id, Some("eve")).await,
        "not_a_party",
        ErrorKind::Forbidden,
    );
    expect_error(
        h.engine.events(&c.id, Some("eve"), 0).await,
        "not_a_party",
        ErrorKind::Forbidden,
    );
    let events = h
        .engine
        .events(&c.id, Some("alice"), 0)
        .await
        .expect("events");
    assert_eq!(events.len() as u64, h.view(&c.id).await.version);
}

#[tokio::test]
async fn a_fresh_engine_over_the_same_store_replays_the_same_conversation() {
    use std::sync::Arc;

    use colloquy_core::{Engine, EngineConfig};
    use colloquy_policy::Catalog;

    let h = Harness::new();
    let c = h
        .start(
            "fipa-contract-net",
            "manager",
            &["p1", "p2", "p3"],
            json!({}),
        )
        .await;
    h.ok(
        &c.id,
        "manager",
        msg("cfp", json!({})).reply_by(T0 + 10_000),
    )
    .await;
    h.ok(&c.id, "p1", msg("propose", json!({"price": 1}))).await;
    h.ok(&c.id, "p2", msg("propose", json!({"price": 2}))).await;
    h.advance(10_000).await;
    h.ok(&c.id, "p3", msg("propose", json!({"price": 0}))).await;
    h.ok(
        &c.id,
        "manager",
        msg("accept-proposal", json!({}))
            .to(["p1"])
            .reply_by(T0 + 50_000),
    )
    .await;
    h.ok(
        &c.id,
        "manager",
        msg("reject-proposal", json!({})).to(["p2"]),
    )
    .await;
    let original = h.view(&c.id).await;
    assert!(!original.violations.is_empty());

    let catalog = Catalog::new(
        colloquy_tests::builtin_templates()
            .into_iter()
            .map(Arc::new),
    );
    let restarted = Engine::new(
        Arc::new(catalog),
        h.store.clone(),
        h.clock.clone(),
        EngineConfig::default(),
    );
    let replayed = restarted.view(&c.id, None).await.expect("replayed view");
    assert_eq!(replayed, original);

    // The replayed copy keeps working: the contract deadline still fires, once.
    h.clock.advance(40_000);
    restarted.run_due().await.expect("pass");
    let view = restarted.view(&c.id, None).await.expect("view");
    assert_eq!(state(&view.threads, "p1"), "timed_out");
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(
        commitment_states(&view),
        [CommitmentState::Violated, CommitmentState::Released]
    );
}

/// An inbox entry nobody acknowledges is dropped once its message is older than the inbox
/// TTL (7 days by default), oldest first: younger entries stay, the sequence goes on, and the
/// conversations are untouched.
#[tokio::test]
async fn inbox_entries_nobody_acknowledges_expire_after_the_inbox_ttl() {
    const DAY: u64 = 24 * 60 * 60 * 1000;
    let h = Harness::new();
    let first = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    h.ok(&first.id, "alice", msg("request", json!({"n": 1})))
        .await;
    h.clock.advance(3 * DAY);
    let second = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    h.ok(&second.id, "alice", msg("request", json!({"n": 2})))
        .await;
    let inbox = h.store.inbox("bob", 0, 10).await.expect("inbox");
    assert_eq!(inbox.len(), 2);

    // The first request is 7 days old less a millisecond: nothing is dropped yet.
    h.clock.advance(4 * DAY - 1);
    assert_eq!(h.engine.expire_inboxes().await.expect("sweep"), 0);
    h.clock.advance(1);
    assert_eq!(h.engine.expire_inboxes().await.expect("sweep"), 1);
    let left = h.store.inbox("bob", 0, 10).await.expect("inbox");
    assert_eq!(left.len(), 1);
    assert_eq!(*left[0].conversation_id, *second.id);
    assert_eq!(left[0].seq, inbox[1].seq, "positions keep their meaning");
    assert_eq!(h.store.inbox_head("bob").await.expect("head"), inbox[1].seq);
    assert_eq!(h.view(&first.id).await.status, ConversationStatus::Active);

    // Three days on, the second goes too; a sweep of an empty inbox drops nothing.
    h.clock.advance(3 * DAY);
    assert_eq!(h.engine.expire_inboxes().await.expect("sweep"), 1);
    assert!(h.store.inbox("bob", 0, 10).await.expect("inbox").is_empty());
    assert_eq!(h.engine.expire_inboxes().await.expect("sweep"), 0);
    assert_eq!(h.engine.inbox_entries_expired(), 2, "counted for /metrics");
}

/// Expiry reads an inbox a batch at a time: a backlog longer than a batch goes whole.
#[tokio::test]
async fn an_expired_backlog_longer_than_a_batch_goes_whole() {
    let h = Harness::new();
    for n in 0..300 {
        let c = h.start("fipa-request", "alice", &["bob"], json!({})).await;
        h.ok(&c.id, "alice", msg("request", json!({"n": n}))).await;
    }
    h.clock.advance(colloquy_core::engine::DEFAULT_INBOX_TTL_MS);
    assert_eq!(h.engine.expire_inboxes().await.expect("sweep"), 300);
    assert!(h.store.inbox("bob", 0, 10).await.expect("inbox").is_empty());
    assert_eq!(h.store.inbox_head("bob").await.expect("head"), 300);
}
