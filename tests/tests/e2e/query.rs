//! FIPA Query (templates/fipa-query.yaml), both query-if and query-ref: answers with and
//! without agree, refusals, failures, cancel, timeouts and absorbed late or duplicate answers.

use colloquy_core::ErrorKind;
use colloquy_protocol::conversation::{
    CommitmentState, ConversationStatus, ConversationView, Outcome, ViolationKind,
};
use colloquy_tests::{Harness, T0, msg, variant};
use serde_json::{Value, json};

use crate::support::{
    assert_unchanged, commitment_states, expect_error, performatives, state, violation_kinds,
};

/// The two ways to ask, with valid content.
fn queries() -> [(&'static str, Value); 2] {
    [
        ("query-if", json!({"proposition": "(raining paris)"})),
        ("query-ref", json!({"ref": "(iota ?x (capital france ?x))"})),
    ]
}

/// alice asks bob; returns the conversation id.
async fn queried(h: &Harness, act: &str, content: Value) -> String {
    let c = h.start("fipa-query", "alice", &["bob"], json!({})).await;
    let r = h.ok(&c.id, "alice", msg(act, content)).await;
    assert_eq!(state(&r.threads, "bob"), "queried", "{act}");
    assert_eq!(r.threads[0].deadline, Some(T0 + 60_000));
    c.id.to_string()
}

fn ended(view: &ConversationView, thread_state: &str, outcome: Outcome) {
    assert_eq!(
        view.status,
        ConversationStatus::Completed,
        "{}",
        view.template
    );
    assert_eq!(view.outcome, Some(outcome));
    assert_eq!(state(&view.threads, "bob"), thread_state);
}

#[tokio::test]
async fn query_agree_then_inform_answers_and_fulfils_the_commitment() {
    for (act, content) in queries() {
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        // No commitment before agree: a query by itself binds nobody.
        assert!(h.view(&id).await.commitments.is_empty());
        h.ok(&id, "bob", msg("agree", json!({}))).await;
        assert_eq!(
            commitment_states(&h.view(&id).await),
            [CommitmentState::Active]
        );
        h.ok(&id, "bob", msg("inform", json!({"value": "paris"})))
            .await;
        let view = h.view(&id).await;
        ended(&view, "answered", Outcome::Success);
        assert_eq!(
            commitment_states(&view),
            [CommitmentState::Fulfilled],
            "{act}"
        );
        assert!(view.violations.is_empty(), "{act}: {:?}", view.violations);
        assert_eq!(performatives(&view), [act, "agree", "inform"]);
    }
}

#[tokio::test]
async fn query_agree_is_optional_inform_straight_away_answers() {
    for (act, content) in queries() {
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        let r = h
            .ok(&id, "bob", msg("inform", json!({"holds": false})))
            .await;
        assert_eq!(r.outcome, Some(Outcome::Success), "{act}");
        let view = h.view(&id).await;
        ended(&view, "answered", Outcome::Success);
        assert!(view.commitments.is_empty(), "{act}");
    }
}

#[tokio::test]
async fn query_agree_is_optional_failure_straight_away_fails() {
    for (act, content) in queries() {
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        h.ok(&id, "bob", msg("failure", json!({}))).await;
        let view = h.view(&id).await;
        ended(&view, "failed", Outcome::Failure);
        assert!(view.violations.is_empty(), "{act}: nothing was promised");
    }
}

#[tokio::test]
async fn query_refused() {
    for (act, content) in queries() {
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        h.ok(&id, "bob", msg("refuse", json!({}))).await;
        ended(&h.view(&id).await, "refused", Outcome::Refused);
    }
}

#[tokio::test]
async fn query_agree_then_failure_violates_the_commitment() {
    for (act, content) in queries() {
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        h.ok(&id, "bob", msg("agree", json!({}))).await;
        h.ok(&id, "bob", msg("failure", json!({}))).await;
        let view = h.view(&id).await;
        ended(&view, "failed", Outcome::Failure);
        assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
        assert_eq!(violation_kinds(&view), [ViolationKind::CommitmentViolated]);
    }
}

#[tokio::test]
async fn query_not_understood_ends_the_thread() {
    for (act, content) in queries() {
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        h.ok(&id, "bob", msg("agree", json!({}))).await;
        h.ok(&id, "bob", msg("not-understood", json!({}))).await;
        let view = h.view(&id).await;
        ended(&view, "not_understood", Outcome::NotUnderstood);
        assert_eq!(commitment_states(&view), [CommitmentState::Cancelled]);
    }
}

#[tokio::test]
async fn query_silent_participant_times_out() {
    for (act, content) in queries() {
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        h.advance(60_000).await;
        let view = h.view(&id).await;
        ended(&view, "timed_out", Outcome::Timeout);
        assert_eq!(view.threads[0].outcome, Some(Outcome::Timeout));
    }
}

#[tokio::test]
async fn query_answer_after_timeout_is_absorbed_and_flagged_late() {
    for (act, content) in queries() {
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        h.ok(&id, "bob", msg("agree", json!({}))).await;
        h.advance(300_000).await;
        let before = h.view(&id).await;
        ended(&before, "timed_out", Outcome::Timeout);
        assert_eq!(commitment_states(&before), [CommitmentState::Violated]);
        let r = h.ok(&id, "bob", msg("inform", json!({"value": 1}))).await;
        assert_eq!(
            r.violation.map(|v| v.kind),
            Some(ViolationKind::LateMessage)
        );
        let view = h.view(&id).await;
        ended(&view, "timed_out", Outcome::Timeout);
        assert_eq!(view.messages.len(), before.messages.len() + 1);
        assert_eq!(
            commitment_states(&view),
            [CommitmentState::Violated],
            "{act}"
        );
        assert_eq!(
            violation_kinds(&view),
            [
                ViolationKind::CommitmentViolated,
                ViolationKind::LateMessage
            ]
        );
    }
}

#[tokio::test]
async fn query_second_answer_is_refused_as_ended() {
    for (act, content) in queries() {
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        h.ok(&id, "bob", msg("inform", json!({"value": 1}))).await;
        let before = h.view(&id).await;
        expect_error(
            h.send(&id, "bob", msg("inform", json!({"value": 2}))).await,
            "conversation_ended",
            ErrorKind::Gone,
        );
        assert_unchanged(&h, &before).await;
        assert_eq!(before.outcome, Some(Outcome::Success));
    }
}

#[tokio::test]
async fn query_duplicate_message_id_adds_nothing() {
    let h = Harness::new();
    let c = h.start("fipa-query", "alice", &["bob"], json!({})).await;
    let ask = msg("query-ref", json!({"ref": "x"})).with_id("q-1");
    let first = h.ok(&c.id, "alice", ask.clone()).await;
    let before = h.view(&c.id).await;
    let again = h.ok(&c.id, "alice", ask).await;
    assert!(!first.duplicate);
    assert!(again.duplicate);
    assert_eq!(again.transitions, first.transitions);
    assert_unchanged(&h, &before).await;
    assert_eq!(before.messages.len(), 1);
}

#[tokio::test]
async fn query_cancel_confirmed_and_cancel_failed() {
    for (act, content) in queries() {
        // Confirmed.
        let h = Harness::new();
        let id = queried(&h, act, content.clone()).await;
        h.ok(&id, "bob", msg("agree", json!({}))).await;
        h.ok(&id, "alice", msg("cancel", json!({}))).await;
        h.ok(&id, "bob", msg("inform", json!({}))).await;
        let view = h.view(&id).await;
        ended(&view, "cancelled", Outcome::Cancelled);
        assert_eq!(commitment_states(&view), [CommitmentState::Released]);

        // Failed: the answer is still owed, and comes.
        let h = Harness::new();
        let id = queried(&h, act, content).await;
        h.ok(&id, "bob", msg("agree", json!({}))).await;
        h.ok(&id, "alice", msg("cancel", json!({}))).await;
        let r = h.ok(&id, "bob", msg("failure", json!({}))).await;
        assert_eq!(state(&r.threads, "bob"), "cancel_failed");
        assert_eq!(
            commitment_states(&h.view(&id).await),
            [CommitmentState::Active]
        );
        h.ok(&id, "bob", msg("inform", json!({"value": "paris"})))
            .await;
        let view = h.view(&id).await;
        ended(&view, "answered", Outcome::Success);
        assert_eq!(commitment_states(&view), [CommitmentState::Fulfilled]);
        assert!(view.violations.is_empty(), "{act}: {:?}", view.violations);
    }
}

#[tokio::test]
async fn query_cancel_from_the_participant_is_out_of_protocol() {
    let h = Harness::new();
    let (act, content) = queries()[0].clone();
    let id = queried(&h, act, content).await;
    let r = h.ok(&id, "bob", msg("cancel", json!({}))).await;
    assert_eq!(
        r.violation.map(|v| v.kind),
        Some(ViolationKind::OutOfProtocol)
    );
    assert_eq!(state(&r.threads, "bob"), "queried");
    assert_eq!(r.status, ConversationStatus::Active);
}

#[tokio::test]
async fn query_non_party_and_unknown_performative_are_refused() {
    let h = Harness::new();
    let (act, content) = queries()[1].clone();
    let id = queried(&h, act, content).await;
    let before = h.view(&id).await;
    expect_error(
        h.send(&id, "eve", msg("inform", json!({}))).await,
        "not_a_party",
        ErrorKind::Forbidden,
    );
    let error = expect_error(
        h.send(&id, "bob", msg("inform-result", json!({}))).await,
        "unknown_performative",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/performative"));
    assert_unchanged(&h, &before).await;
}

#[tokio::test]
async fn query_content_schema_is_checked_per_act() {
    let h = Harness::new();
    let c = h.start("fipa-query", "alice", &["bob"], json!({})).await;
    let before = h.view(&c.id).await;
    // query-if needs a proposition, query-ref a ref.
    let error = expect_error(
        h.send(&c.id, "alice", msg("query-if", json!({"ref": "x"})))
            .await,
        "schema_violation",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/content/proposition"));
    assert!(error.to_string().contains("proposition"), "{error}");
    let error = expect_error(
        h.send(
            &c.id,
            "alice",
            msg("query-ref", json!({"proposition": "p"})),
        )
        .await,
        "schema_violation",
        ErrorKind::Unprocessable,
    );
    assert!(error.to_string().contains("ref"), "{error}");
    assert_unchanged(&h, &before).await;
}

#[tokio::test]
async fn query_out_of_protocol_under_enforce_is_refused() {
    let enforcing = variant(
        "fipa-query.yaml",
        &[("enforcement: report", "enforcement: enforce")],
    );
    let h = Harness::with(vec![enforcing]);
    let (act, content) = queries()[0].clone();
    let id = queried(&h, act, content).await;
    let before = h.view(&id).await;
    // Asking twice is not part of the protocol.
    expect_error(
        h.send(&id, "alice", msg("query-if", json!({"proposition": "p"})))
            .await,
        "out_of_protocol",
        ErrorKind::Conflict,
    );
    assert_unchanged(&h, &before).await;
}
