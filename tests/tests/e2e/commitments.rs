//! Commitments beyond the protocol flows: deadlines that fire exactly once, and release or
//! cancel by hand (only by the creditor or the debtor).

use colloquy_core::ErrorKind;
use colloquy_protocol::conversation::{
    CommitmentState, ConversationStatus, Outcome, ViolationKind,
};
use colloquy_tests::{Harness, T0, msg};
use serde_json::json;

use crate::support::{commitment_states, expect_error, state, violation_kinds, violations_of};

/// A request bob agreed to, with a thread reply-by far beyond the commitment deadline.
async fn agreed_with_long_reply_by(h: &Harness) -> (String, String) {
    let c = h.start("fipa-request", "alice", &["bob"], json!({})).await;
    h.ok(&c.id, "alice", msg("request", json!({}))).await;
    h.ok(
        &c.id,
        "bob",
        msg("agree", json!({})).reply_by(T0 + 10_000_000),
    )
    .await;
    let view = h.view(&c.id).await;
    assert_eq!(view.commitments[0].state, CommitmentState::Active);
    assert_eq!(view.commitments[0].deadline, Some(T0 + 300_000));
    (c.id.to_string(), view.commitments[0].id.to_string())
}

#[tokio::test]
async fn commitment_is_violated_at_its_deadline_exactly_once() {
    let h = Harness::new();
    let (id, _) = agreed_with_long_reply_by(&h).await;
    h.advance(299_999).await;
    assert_eq!(
        commitment_states(&h.view(&id).await),
        [CommitmentState::Active]
    );
    h.advance(1).await;
    let view = h.view(&id).await;
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
    assert_eq!(view.commitments[0].deadline, None);
    // The thread is not the commitment: it still waits for the result.
    assert_eq!(state(&view.threads, "bob"), "agreed");
    let violated = violations_of(&view, ViolationKind::CommitmentViolated);
    assert_eq!(violated.len(), 1);
    assert_eq!(violated[0].agent.as_deref(), Some("bob"));
    assert_eq!(violated[0].at, T0 + 300_000);
    let version = view.version;

    // More scheduler passes, with and without time passing, change nothing.
    h.engine.run_due().await.expect("pass");
    h.engine.run_due().await.expect("pass");
    h.advance(1_000).await;
    let view = h.view(&id).await;
    assert_eq!(view.version, version);
    assert_eq!(violation_kinds(&view), [ViolationKind::CommitmentViolated]);

    // A result after the deadline ends the thread but does not un-violate the commitment.
    h.ok(&id, "bob", msg("inform", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(view.outcome, Some(Outcome::Success));
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
    assert_eq!(violation_kinds(&view), [ViolationKind::CommitmentViolated]);
}

#[tokio::test]
async fn commitment_deadline_fires_lazily_before_the_next_message() {
    let h = Harness::new();
    let (id, _) = agreed_with_long_reply_by(&h).await;
    h.clock.advance(300_000);
    // No scheduler pass: the next message fires the due deadline first.
    h.ok(&id, "bob", msg("inform", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
    assert_eq!(violation_kinds(&view), [ViolationKind::CommitmentViolated]);
    h.advance(0).await;
    assert_eq!(
        violation_kinds(&h.view(&id).await),
        [ViolationKind::CommitmentViolated]
    );
}

#[tokio::test]
async fn creditor_releases_and_the_later_result_does_not_reopen_it() {
    let h = Harness::new();
    let (id, commitment) = agreed_with_long_reply_by(&h).await;
    let released = h
        .engine
        .release_commitment(&commitment, "alice")
        .await
        .expect("release");
    assert_eq!(released.state, CommitmentState::Released);
    let view = h.view(&id).await;
    assert_eq!(commitment_states(&view), [CommitmentState::Released]);
    assert_eq!(view.commitments[0].deadline, None);
    // A released commitment has no deadline left to violate.
    h.advance(300_000).await;
    assert!(h.view(&id).await.violations.is_empty());
    h.ok(&id, "bob", msg("inform", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(commitment_states(&view), [CommitmentState::Released]);
    expect_error(
        h.engine.release_commitment(&commitment, "alice").await,
        "commitment_closed",
        ErrorKind::Conflict,
    );
}

#[tokio::test]
async fn debtor_cancels() {
    let h = Harness::new();
    let (id, commitment) = agreed_with_long_reply_by(&h).await;
    let cancelled = h
        .engine
        .cancel_commitment(&commitment, "bob")
        .await
        .expect("cancel");
    assert_eq!(cancelled.state, CommitmentState::Cancelled);
    assert_eq!(
        commitment_states(&h.view(&id).await),
        [CommitmentState::Cancelled]
    );
}

#[tokio::test]
async fn only_the_creditor_releases_and_only_the_debtor_cancels() {
    let h = Harness::new();
    let (id, commitment) = agreed_with_long_reply_by(&h).await;
    let before = h.view(&id).await;
    expect_error(
        h.engine.release_commitment(&commitment, "bob").await,
        "forbidden",
        ErrorKind::Forbidden,
    );
    expect_error(
        h.engine.cancel_commitment(&commitment, "alice").await,
        "forbidden",
        ErrorKind::Forbidden,
    );
    expect_error(
        h.engine.release_commitment(&commitment, "mallory").await,
        "not_a_party",
        ErrorKind::Forbidden,
    );
    expect_error(
        h.engine.cancel_commitment(&format!("{id}/99"), "bob").await,
        "unknown_commitment",
        ErrorKind::NotFound,
    );
    expect_error(
        h.engine
            .cancel_commitment("no-such-conversation/1", "bob")
            .await,
        "unknown_commitment",
        ErrorKind::NotFound,
    );
    let after = h.view(&id).await;
    assert_eq!(after.version, before.version);
    assert_eq!(after.commitments, before.commitments);
}

#[tokio::test]
async fn commitments_of_lists_both_sides() {
    let h = Harness::new();
    let (_, commitment) = agreed_with_long_reply_by(&h).await;
    let of_bob = h.engine.commitments_of("bob").await;
    let of_alice = h.engine.commitments_of("alice").await;
    assert_eq!(of_bob.len(), 1);
    assert_eq!(of_alice, of_bob);
    assert_eq!(&*of_bob[0].id, commitment);
    assert!(h.engine.commitments_of("carol").await.is_empty());
}
