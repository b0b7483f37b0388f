//! FIPA Request (templates/fipa-request.yaml): every way a request can end, cancel, timeouts,
//! absorbed late and duplicate replies, and the per-message checks.

use colloquy_core::ErrorKind;
use colloquy_protocol::conversation::{
    CommitmentState, ConversationStatus, ConversationView, Outcome, ViolationKind,
};
use colloquy_tests::{Harness, msg, variant};
use serde_json::json;

use crate::support::{
    assert_unchanged, commitment_states, expect_error, performatives, state, violation_kinds,
    violations_of,
};

/// alice asks bob to book something; returns the conversation id.
async fn requested(h: &Harness) -> String {
    let c = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    let r = h
        .ok(&c.id, "alice", msg("request", json!({"action": "book"})))
        .await;
    assert_eq!(state(&r.threads, "bob"), "requested");
    c.id.to_string()
}

/// ... and bob agreed.
async fn agreed(h: &Harness) -> String {
    let id = requested(h).await;
    let r = h.ok(&id, "bob", msg("agree", json!({}))).await;
    assert_eq!(state(&r.threads, "bob"), "agreed");
    id
}

fn ended(view: &ConversationView, thread_state: &str, outcome: Outcome) {
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(view.outcome, Some(outcome));
    assert_eq!(state(&view.threads, "bob"), thread_state);
    assert_eq!(view.threads[0].outcome, Some(outcome));
}

#[tokio::test]
async fn request_agree_inform_succeeds_and_fulfils_the_commitment() {
    let h = Harness::new();
    let c = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    let r = h
        .ok(&c.id, "alice", msg("request", json!({"action": "book"})))
        .await;
    assert_eq!(&*r.threads[0].state, "requested");
    assert_eq!(
        r.receivers.iter().map(|r| &**r).collect::<Vec<_>>(),
        ["bob"]
    );
    let r = h.ok(&c.id, "bob", msg("agree", json!({}))).await;
    assert_eq!(&*r.threads[0].state, "agreed");
    assert_eq!(
        r.receivers.iter().map(|r| &**r).collect::<Vec<_>>(),
        ["alice"]
    );
    let r = h
        .ok(&c.id, "bob", msg("inform", json!({"done": true})))
        .await;
    assert_eq!(r.status, ConversationStatus::Completed);
    assert_eq!(r.outcome, Some(Outcome::Success));
    let view = h.view(&c.id).await;
    assert_eq!(view.messages.len(), 3);
    assert_eq!(view.commitments.len(), 1);
    assert_eq!(view.commitments[0].state, CommitmentState::Fulfilled);
    assert_eq!(&*view.commitments[0].debtor, "bob");
    assert_eq!(&*view.commitments[0].creditor, "alice");
    assert!(view.violations.is_empty(), "{:?}", view.violations);
}

#[tokio::test]
async fn request_agree_is_optional_inform_straight_away_succeeds() {
    let h = Harness::new();
    let id = requested(&h).await;
    let r = h.ok(&id, "bob", msg("inform", json!({"result": 42}))).await;
    assert_eq!(r.transitions.len(), 1);
    assert_eq!(&*r.transitions[0].from, "requested");
    assert_eq!(&*r.transitions[0].to, "done");
    let view = h.view(&id).await;
    ended(&view, "done", Outcome::Success);
    assert_eq!(commitment_states(&view), [CommitmentState::Fulfilled]);
    assert!(view.violations.is_empty(), "{:?}", view.violations);
}

#[tokio::test]
async fn request_agree_is_optional_failure_straight_away_fails() {
    let h = Harness::new();
    let id = requested(&h).await;
    h.ok(&id, "bob", msg("failure", json!({"reason": "no seats"})))
        .await;
    let view = h.view(&id).await;
    ended(&view, "failed", Outcome::Failure);
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
    assert_eq!(violation_kinds(&view), [ViolationKind::CommitmentViolated]);
}

#[tokio::test]
async fn request_refused_cancels_the_commitment() {
    let h = Harness::new();
    let id = requested(&h).await;
    let r = h
        .ok(&id, "bob", msg("refuse", json!({"reason": "busy"})))
        .await;
    assert_eq!(r.outcome, Some(Outcome::Refused));
    let view = h.view(&id).await;
    ended(&view, "refused", Outcome::Refused);
    assert_eq!(commitment_states(&view), [CommitmentState::Cancelled]);
    assert!(view.violations.is_empty(), "{:?}", view.violations);
}

#[tokio::test]
async fn request_agree_then_failure_violates_the_active_commitment() {
    let h = Harness::new();
    let id = agreed(&h).await;
    assert_eq!(
        commitment_states(&h.view(&id).await),
        [CommitmentState::Active]
    );
    h.ok(&id, "bob", msg("failure", json!({}))).await;
    let view = h.view(&id).await;
    ended(&view, "failed", Outcome::Failure);
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
    let violated = violations_of(&view, ViolationKind::CommitmentViolated);
    assert_eq!(violated.len(), 1);
    assert_eq!(violated[0].agent.as_deref(), Some("bob"));
}

#[tokio::test]
async fn request_not_understood_ends_the_thread() {
    let h = Harness::new();
    let id = agreed(&h).await;
    h.ok(&id, "bob", msg("not-understood", json!({}))).await;
    let view = h.view(&id).await;
    ended(&view, "not_understood", Outcome::NotUnderstood);
    assert_eq!(commitment_states(&view), [CommitmentState::Cancelled]);
}

#[tokio::test]
async fn request_silent_participant_times_out_at_reply_by() {
    let h = Harness::new();
    let id = requested(&h).await;
    let view = h.view(&id).await;
    assert_eq!(view.threads[0].deadline, Some(colloquy_tests::T0 + 60_000));
    h.advance(59_999).await;
    assert_eq!(state(&h.view(&id).await.threads, "bob"), "requested");
    h.advance(1).await;
    let view = h.view(&id).await;
    ended(&view, "timed_out", Outcome::Timeout);
    // A request nobody agreed to was never binding: released, not violated.
    assert_eq!(commitment_states(&view), [CommitmentState::Released]);
    assert!(view.violations.is_empty(), "{:?}", view.violations);
}

#[tokio::test]
async fn request_silence_after_agree_times_out_and_violates_the_commitment_once() {
    let h = Harness::new();
    let id = agreed(&h).await;
    h.advance(300_000).await;
    let view = h.view(&id).await;
    ended(&view, "timed_out", Outcome::Timeout);
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
    assert_eq!(violation_kinds(&view), [ViolationKind::CommitmentViolated]);
    h.advance(1_000).await;
    h.engine.run_due().await.expect("pass");
    assert_eq!(
        violation_kinds(&h.view(&id).await),
        [ViolationKind::CommitmentViolated]
    );
}

#[tokio::test]
async fn request_reply_after_timeout_is_absorbed_and_flagged_late() {
    let h = Harness::new();
    let id = agreed(&h).await;
    h.advance(300_001).await;
    let before = h.view(&id).await;
    assert_eq!(before.outcome, Some(Outcome::Timeout));
    let r = h.ok(&id, "bob", msg("inform", json!({"done": true}))).await;
    assert!(r.transitions.is_empty(), "{:?}", r.transitions);
    assert_eq!(
        r.violation.as_ref().map(|v| v.kind),
        Some(ViolationKind::LateMessage)
    );
    let view = h.view(&id).await;
    ended(&view, "timed_out", Outcome::Timeout);
    assert_eq!(view.messages.len(), before.messages.len() + 1);
    // The commitment stays violated: a late inform fulfils nothing.
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
    assert_eq!(
        violation_kinds(&view),
        [
            ViolationKind::CommitmentViolated,
            ViolationKind::LateMessage
        ]
    );
    // flag only: the engine does not answer.
    assert!(
        view.messages
            .iter()
            .all(|m| &*m.sender != "colloquy:engine")
    );
}

#[tokio::test]
async fn request_reply_after_timeout_without_a_scheduler_pass_is_still_late() {
    let h = Harness::new();
    let id = requested(&h).await;
    // The clock passes reply-by but no scheduler pass runs: the send fires the timer first.
    h.clock.advance(60_000);
    let r = h.ok(&id, "bob", msg("inform", json!({}))).await;
    assert_eq!(
        r.violation.as_ref().map(|v| v.kind),
        Some(ViolationKind::LateMessage)
    );
    assert_eq!(r.outcome, Some(Outcome::Timeout));
    let view = h.view(&id).await;
    ended(&view, "timed_out", Outcome::Timeout);
    assert_eq!(commitment_states(&view), [CommitmentState::Released]);
}

#[tokio::test]
async fn request_second_inform_after_done_is_refused_as_ended() {
    let h = Harness::new();
    let id = agreed(&h).await;
    h.ok(&id, "bob", msg("inform", json!({"done": true}))).await;
    let before = h.view(&id).await;
    let result = h
        .send(&id, "bob", msg("inform", json!({"done": true})))
        .await;
    expect_error(result, "conversation_ended", ErrorKind::Gone);
    assert_unchanged(&h, &before).await;
    assert_eq!(before.outcome, Some(Outcome::Success));
    assert_eq!(commitment_states(&before), [CommitmentState::Fulfilled]);
}

#[tokio::test]
async fn request_duplicate_message_id_returns_the_first_result_and_adds_nothing() {
    let h = Harness::new();
    let id = requested(&h).await;
    let first = h
        .ok(&id, "bob", msg("agree", json!({})).with_id("bob-1"))
        .await;
    assert!(!first.duplicate);
    let before = h.view(&id).await;
    let again = h
        .ok(&id, "bob", msg("agree", json!({})).with_id("bob-1"))
        .await;
    assert!(again.duplicate);
    assert_eq!(again.message_id, first.message_id);
    assert_eq!(again.transitions, first.transitions);
    assert_eq!(again.receivers, first.receivers);
    assert_unchanged(&h, &before).await;
    // The same id on another message is refused, not answered as if it were accepted:
    // another performative, other content, or another sender's id.
    for (sender, message) in [
        ("bob", msg("inform", json!({})).with_id("bob-1")),
        ("bob", msg("agree", json!({"eta_ms": 5})).with_id("bob-1")),
        ("alice", msg("agree", json!({})).with_id("bob-1")),
    ] {
        let result = h.send(&id, sender, message).await;
        let error = expect_error(result, "message_id_taken", ErrorKind::Unprocessable);
        assert_eq!(error.pointer(), Some("/message_id"));
    }
    assert_unchanged(&h, &before).await;
    // A non-party cannot learn anything by replaying an id.
    let result = h
        .send(&id, "mallory", msg("agree", json!({})).with_id("bob-1"))
        .await;
    expect_error(result, "not_a_party", ErrorKind::Forbidden);
}

#[tokio::test]
async fn request_cancel_confirmed_ends_cancelled_and_releases_the_commitment() {
    let h = Harness::new();
    let id = agreed(&h).await;
    let r = h.ok(&id, "alice", msg("cancel", json!({}))).await;
    assert_eq!(state(&r.threads, "bob"), "cancelling");
    assert_eq!(r.threads[0].deadline, Some(colloquy_tests::T0 + 30_000));
    h.ok(&id, "bob", msg("inform", json!({"cancelled": true})))
        .await;
    let view = h.view(&id).await;
    ended(&view, "cancelled", Outcome::Cancelled);
    assert_eq!(commitment_states(&view), [CommitmentState::Released]);
    assert!(view.violations.is_empty(), "{:?}", view.violations);
}

#[tokio::test]
async fn request_cancel_that_fails_keeps_the_result_owed() {
    let h = Harness::new();
    let id = agreed(&h).await;
    h.ok(&id, "alice", msg("cancel", json!({}))).await;
    let r = h
        .ok(
            &id,
            "bob",
            msg("failure", json!({"reason": "too late to cancel"})),
        )
        .await;
    assert_eq!(state(&r.threads, "bob"), "cancel_failed");
    assert_eq!(r.status, ConversationStatus::Active);
    let view = h.view(&id).await;
    // Failing to cancel is not failing the action.
    assert_eq!(commitment_states(&view), [CommitmentState::Active]);
    assert!(view.violations.is_empty(), "{:?}", view.violations);
    h.ok(&id, "bob", msg("inform", json!({"done": true}))).await;
    let view = h.view(&id).await;
    ended(&view, "done", Outcome::Success);
    assert_eq!(commitment_states(&view), [CommitmentState::Fulfilled]);
}

#[tokio::test]
async fn request_cancel_from_the_participant_is_out_of_protocol() {
    let h = Harness::new();
    let id = agreed(&h).await;
    let r = h.ok(&id, "bob", msg("cancel", json!({}))).await;
    let violation = r.violation.expect("a violation");
    assert_eq!(violation.kind, ViolationKind::OutOfProtocol);
    assert_eq!(violation.agent.as_deref(), Some("bob"));
    assert!(r.transitions.is_empty());
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "bob"), "agreed");
    assert_eq!(view.status, ConversationStatus::Active);
    assert_eq!(commitment_states(&view), [CommitmentState::Active]);
    assert_eq!(performatives(&view), ["request", "agree", "cancel"]);
}

#[tokio::test]
async fn request_from_a_non_party_is_refused() {
    let h = Harness::new();
    let id = requested(&h).await;
    let before = h.view(&id).await;
    let result = h.send(&id, "mallory", msg("inform", json!({}))).await;
    expect_error(result, "not_a_party", ErrorKind::Forbidden);
    assert_unchanged(&h, &before).await;
}

#[tokio::test]
async fn request_reply_to_an_unknown_message_is_refused_and_a_known_one_is_kept() {
    let h = Harness::new();
    let id = requested(&h).await;
    let before = h.view(&id).await;
    let error = expect_error(
        h.send(&id, "bob", msg("agree", json!({})).in_reply_to("m-nowhere"))
            .await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/in_reply_to"));
    assert!(error.to_string().contains("m-nowhere"), "{error}");
    assert_unchanged(&h, &before).await;
    // The request itself is a message of the conversation: answering it is fine.
    let request = before.messages[0].id.to_string();
    h.ok(
        &id,
        "bob",
        msg("agree", json!({})).in_reply_to(request.clone()),
    )
    .await;
    let view = h.view(&id).await;
    assert_eq!(view.messages[1].in_reply_to.as_deref(), Some(&*request));
}

#[tokio::test]
async fn request_with_a_reply_by_that_has_passed_is_refused() {
    let h = Harness::new();
    let c = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    let before = h.view(&c.id).await;
    let book = || msg("request", json!({"action": "book"}));
    // A duration where a time belongs (30 s after 1970) and "now" itself are both past.
    for reply_by in [30_000, colloquy_tests::T0] {
        let error = expect_error(
            h.send(&c.id, "alice", book().reply_by(reply_by)).await,
            "invalid",
            ErrorKind::Unprocessable,
        );
        assert_eq!(error.pointer(), Some("/reply_by"));
        assert!(error.to_string().contains("Unix milliseconds"), "{error}");
    }
    assert_unchanged(&h, &before).await;
    let r = h
        .ok(&c.id, "alice", book().reply_by(colloquy_tests::T0 + 1))
        .await;
    assert_eq!(r.threads[0].deadline, Some(colloquy_tests::T0 + 1));
}

#[tokio::test]
async fn request_unknown_performative_is_refused_at_performative() {
    let h = Harness::new();
    let id = requested(&h).await;
    let before = h.view(&id).await;
    let error = expect_error(
        h.send(&id, "bob", msg("frobnicate", json!({}))).await,
        "unknown_performative",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/performative"));
    // An intent of another template is just as unknown here.
    let error = expect_error(
        h.send(&id, "bob", msg("quote", json!({}))).await,
        "unknown_performative",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/performative"));
    assert_unchanged(&h, &before).await;
}

#[tokio::test]
async fn request_out_of_protocol_under_report_is_stored_and_flagged() {
    let h = Harness::new();
    let c = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    // bob answers before being asked.
    let r = h.ok(&c.id, "bob", msg("inform", json!({}))).await;
    assert_eq!(
        r.violation.as_ref().map(|v| v.kind),
        Some(ViolationKind::OutOfProtocol)
    );
    assert_eq!(state(&r.threads, "bob"), "start");
    // alice agrees to her own request.
    h.ok(&c.id, "alice", msg("request", json!({}))).await;
    let r = h.ok(&c.id, "alice", msg("agree", json!({}))).await;
    assert_eq!(
        r.violation.as_ref().map(|v| v.kind),
        Some(ViolationKind::OutOfProtocol)
    );
    let view = h.view(&c.id).await;
    assert_eq!(state(&view.threads, "bob"), "requested");
    assert_eq!(performatives(&view), ["inform", "request", "agree"]);
    assert_eq!(
        violation_kinds(&view),
        [ViolationKind::OutOfProtocol, ViolationKind::OutOfProtocol]
    );
    assert_eq!(view.violations[1].agent.as_deref(), Some("alice"));
    // Nothing moved the commitment the request created.
    assert_eq!(commitment_states(&view), [CommitmentState::Pending]);
}

#[tokio::test]
async fn request_out_of_protocol_under_enforce_is_refused_and_not_stored() {
    let enforcing = variant(
        "fipa-request.yaml",
        &[("enforcement: report", "enforcement: enforce")],
    );
    let h = Harness::with(vec![enforcing]);
    let c = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    let before = h.view(&c.id).await;
    expect_error(
        h.send(&c.id, "bob", msg("inform", json!({}))).await,
        "out_of_protocol",
        ErrorKind::Conflict,
    );
    assert_unchanged(&h, &before).await;
    h.ok(&c.id, "alice", msg("request", json!({}))).await;
    let before = h.view(&c.id).await;
    expect_error(
        h.send(&c.id, "bob", msg("cancel", json!({}))).await,
        "out_of_protocol",
        ErrorKind::Conflict,
    );
    assert_unchanged(&h, &before).await;
    // In-protocol messages still work.
    h.ok(&c.id, "bob", msg("inform", json!({}))).await;
    let view = h.view(&c.id).await;
    ended(&view, "done", Outcome::Success);
    assert!(view.violations.is_empty(), "{:?}", view.violations);
}

#[tokio::test]
async fn request_schema_violation_names_the_field_and_changes_nothing() {
    let h = Harness::new();
    let id = requested(&h).await;
    let before = h.view(&id).await;
    let error = expect_error(
        h.send(&id, "bob", msg("refuse", json!({"reason": 7})))
            .await,
        "schema_violation",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/content/reason"));
    assert_unchanged(&h, &before).await;
}
