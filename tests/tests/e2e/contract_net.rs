//! FIPA Contract-Net (templates/fipa-contract-net.yaml) with several participants: mixed
//! answers and silence, late proposals, one, several or staged awards, and the binding
//! proposal commitments.

use colloquy_core::ErrorKind;
use colloquy_protocol::conversation::{
    CommitmentState, ConversationStatus, Outcome, ViolationKind,
};
use colloquy_tests::{Harness, T0, msg};
use serde_json::json;

use crate::support::{
    assert_unchanged, commitment_of, commitment_states, expect_error, performatives, state, thread,
    violation_kinds, violations_of,
};

const BIDDERS: [&str; 3] = ["p1", "p2", "p3"];

/// The proposal deadline of every cfp here.
const CFP_DEADLINE: u64 = T0 + 10_000;

/// `manager` calls for proposals from `bidders`, due at [`CFP_DEADLINE`].
async fn called(h: &Harness, bidders: &[&str]) -> String {
    let c = h
        .start("fipa-contract-net", "manager", bidders, json!({}))
        .await;
    let r = h
        .ok(
            &c.id,
            "manager",
            msg("cfp", json!({"task": "haul 3t"})).reply_by(CFP_DEADLINE),
        )
        .await;
    assert_eq!(r.receivers.len(), bidders.len());
    for bidder in bidders {
        assert_eq!(state(&r.threads, bidder), "called");
        assert_eq!(thread(&r.threads, bidder).deadline, Some(CFP_DEADLINE));
    }
    c.id.to_string()
}

async fn propose(h: &Harness, id: &str, bidder: &str, price: u64) {
    let r = h
        .ok(id, bidder, msg("propose", json!({"price": price})))
        .await;
    assert_eq!(state(&r.threads, bidder), "proposed");
    assert!(r.violation.is_none(), "{:?}", r.violation);
}

async fn accept(h: &Harness, id: &str, bidders: &[&str]) {
    let r = h
        .ok(
            id,
            "manager",
            msg("accept-proposal", json!({})).to(bidders.iter().copied()),
        )
        .await;
    for bidder in bidders {
        assert_eq!(state(&r.threads, bidder), "contracted");
    }
}

async fn reject(h: &Harness, id: &str, bidder: &str) {
    let r = h
        .ok(
            id,
            "manager",
            msg("reject-proposal", json!({})).to([bidder]),
        )
        .await;
    assert_eq!(state(&r.threads, bidder), "rejected");
    // The receipt shows the thread the message went on, not every bidder's.
    assert_eq!(r.threads.len(), 1, "{:?}", r.threads);
}

#[tokio::test]
async fn contract_net_happy_path_one_award() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    propose(&h, &id, "p1", 100).await;
    propose(&h, &id, "p2", 120).await;
    propose(&h, &id, "p3", 90).await;
    accept(&h, &id, &["p3"]).await;
    reject(&h, &id, "p1").await;
    reject(&h, &id, "p2").await;
    assert_eq!(h.view(&id).await.status, ConversationStatus::Active);
    let r = h
        .ok(&id, "p3", msg("inform", json!({"delivered": true})))
        .await;
    assert_eq!(r.outcome, Some(Outcome::Success));
    let view = h.view(&id).await;
    assert_eq!(thread(&view.threads, "p1").outcome, Some(Outcome::Rejected));
    assert_eq!(thread(&view.threads, "p3").outcome, Some(Outcome::Success));
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Released);
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Released);
    assert_eq!(commitment_of(&view, "p3"), CommitmentState::Fulfilled);
    assert!(view.violations.is_empty(), "{:?}", view.violations);
}

#[tokio::test]
async fn contract_net_mixed_propose_refuse_and_silence() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    propose(&h, &id, "p1", 100).await;
    let r = h
        .ok(&id, "p2", msg("refuse", json!({"reason": "busy"})))
        .await;
    assert_eq!(state(&r.threads, "p2"), "refused");
    // p3 says nothing; the proposal deadline passes.
    h.advance(9_999).await;
    assert_eq!(state(&h.view(&id).await.threads, "p3"), "called");
    h.advance(1).await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p3"), "no_reply");
    assert_eq!(thread(&view.threads, "p3").outcome, Some(Outcome::NoReply));
    // The proposal is not affected by the cfp deadline.
    assert_eq!(state(&view.threads, "p1"), "proposed");
    assert_eq!(view.status, ConversationStatus::Active);
    assert!(view.violations.is_empty(), "{:?}", view.violations);

    accept(&h, &id, &["p1"]).await;
    h.ok(&id, "p1", msg("inform", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(view.outcome, Some(Outcome::Success));
    assert_eq!(commitment_states(&view), [CommitmentState::Fulfilled]);
}

/// FIPA: a proposal's reply-by is how long the offer stands. Unanswered by then, it lapses:
/// the thread ends (`lapsed`, outcome `rejected`) and the proposer is released, instead of
/// staying `proposed` and `pending` until the conversation deadline (an hour here).
#[tokio::test]
async fn contract_net_proposal_lapses_at_its_reply_by() {
    let h = Harness::new();
    let id = called(&h, &["p1", "p2"]).await;
    // p1's offer stands until after the proposal deadline; p2's has no validity of its own.
    let valid_until = CFP_DEADLINE + 5_000;
    let r = h
        .ok(
            &id,
            "p1",
            msg("propose", json!({"price": 100})).reply_by(valid_until),
        )
        .await;
    assert_eq!(state(&r.threads, "p1"), "proposed");
    assert_eq!(thread(&r.threads, "p1").deadline, Some(valid_until));
    propose(&h, &id, "p2", 120).await;
    assert_eq!(thread(&h.view(&id).await.threads, "p2").deadline, None);

    h.advance(valid_until - T0 - 1).await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "proposed");
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Pending);
    h.advance(1).await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "lapsed");
    assert_eq!(thread(&view.threads, "p1").outcome, Some(Outcome::Rejected));
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Released);
    // p2's offer stands: the conversation goes on.
    assert_eq!(state(&view.threads, "p2"), "proposed");
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Pending);
    assert_eq!(view.status, ConversationStatus::Active);
    assert!(view.violations.is_empty(), "{:?}", view.violations);

    // Accepting the lapsed offer binds nobody: the thread has ended (recorded, report mode).
    let r = h
        .ok(&id, "manager", msg("accept-proposal", json!({})).to(["p1"]))
        .await;
    assert_eq!(r.violation.map(|v| v.kind), Some(ViolationKind::AfterEnd));
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "lapsed");
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Released);

    accept(&h, &id, &["p2"]).await;
    h.ok(&id, "p2", msg("inform", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(view.outcome, Some(Outcome::Success));
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Fulfilled);
}

/// Every proposal lapsing ends the call like every proposal being rejected.
#[tokio::test]
async fn contract_net_all_proposals_lapsing_ends_the_conversation() {
    let h = Harness::new();
    let id = called(&h, &["p1"]).await;
    h.ok(
        &id,
        "p1",
        msg("propose", json!({"price": 100})).reply_by(T0 + 2_000),
    )
    .await;
    h.advance(2_000).await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "lapsed");
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(view.outcome, Some(Outcome::Failure));
    assert_eq!(commitment_states(&view), [CommitmentState::Released]);
}

#[tokio::test]
async fn contract_net_late_proposal_is_rejected_automatically() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    propose(&h, &id, "p1", 100).await;
    propose(&h, &id, "p2", 110).await;
    h.advance(10_000).await;
    assert_eq!(state(&h.view(&id).await.threads, "p3"), "no_reply");

    let r = h
        .ok(
            &id,
            "p3",
            msg("propose", json!({"price": 1})).with_id("p3-late"),
        )
        .await;
    assert!(r.transitions.is_empty(), "{:?}", r.transitions);
    let violation = r.violation.expect("late violation");
    assert_eq!(violation.kind, ViolationKind::LateMessage);
    assert_eq!(violation.agent.as_deref(), Some("p3"));
    assert_eq!(state(&r.threads, "p3"), "no_reply");

    let view = h.view(&id).await;
    assert_eq!(
        performatives(&view),
        ["cfp", "propose", "propose", "propose", "reject-proposal"]
    );
    let answer = view.messages.last().expect("auto answer");
    assert_eq!(&*answer.sender, "colloquy:engine");
    assert_eq!(
        answer.receivers.iter().map(|r| &**r).collect::<Vec<_>>(),
        ["p3"]
    );
    assert_eq!(answer.content, json!({"reason": "late"}));
    assert_eq!(answer.in_reply_to.as_deref(), Some("p3-late"));
    // A late proposal binds nobody.
    assert!(
        view.commitments.iter().all(|c| &*c.debtor != "p3"),
        "{:?}",
        view.commitments
    );
    assert_eq!(violation_kinds(&view), [ViolationKind::LateMessage]);
    assert_eq!(view.status, ConversationStatus::Active);
}

#[tokio::test]
async fn contract_net_late_proposal_after_completion_is_still_answered() {
    let h = Harness::new();
    let id = called(&h, &["p1", "p2"]).await;
    propose(&h, &id, "p1", 100).await;
    h.advance(10_000).await;
    reject(&h, &id, "p1").await;
    let view = h.view(&id).await;
    assert_eq!(view.status, ConversationStatus::Completed);
    let outcome = view.outcome;

    let r = h.ok(&id, "p2", msg("propose", json!({"price": 1}))).await;
    assert_eq!(
        r.violation.map(|v| v.kind),
        Some(ViolationKind::LateMessage)
    );
    let after = h.view(&id).await;
    assert_eq!(after.outcome, outcome);
    assert_eq!(after.messages.len(), view.messages.len() + 2);
    assert_eq!(
        &*after.messages.last().expect("answer").sender,
        "colloquy:engine"
    );
    // The initiator cannot talk to an ended conversation.
    expect_error(
        h.send(&id, "manager", msg("accept-proposal", json!({})).to(["p2"]))
            .await,
        "conversation_ended",
        ErrorKind::Gone,
    );
}

#[tokio::test]
async fn contract_net_several_proposals_accepted() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    for (bidder, price) in BIDDERS.iter().zip([100, 120, 140]) {
        propose(&h, &id, bidder, price).await;
    }
    accept(&h, &id, &["p1", "p2"]).await;
    reject(&h, &id, "p3").await;
    let view = h.view(&id).await;
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Active);
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Active);
    assert_eq!(commitment_of(&view, "p3"), CommitmentState::Released);
    h.ok(&id, "p1", msg("inform", json!({}))).await;
    assert_eq!(h.view(&id).await.status, ConversationStatus::Active);
    h.ok(&id, "p2", msg("inform", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(view.outcome, Some(Outcome::Success));
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Fulfilled);
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Fulfilled);
}

#[tokio::test]
async fn contract_net_staged_award_after_the_first_contractor_fails() {
    let h = Harness::new();
    let id = called(&h, &["p1", "p2"]).await;
    propose(&h, &id, "p1", 100).await;
    propose(&h, &id, "p2", 120).await;
    accept(&h, &id, &["p1"]).await;
    h.ok(&id, "p1", msg("failure", json!({"reason": "truck broke"})))
        .await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "failed");
    assert_eq!(state(&view.threads, "p2"), "proposed");
    assert_eq!(view.status, ConversationStatus::Active);
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Violated);
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Pending);

    accept(&h, &id, &["p2"]).await;
    h.ok(&id, "p2", msg("inform", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(view.outcome, Some(Outcome::Success));
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Fulfilled);
    let violated = violations_of(&view, ViolationKind::CommitmentViolated);
    assert_eq!(violated.len(), 1);
    assert_eq!(violated[0].agent.as_deref(), Some("p1"));
}

#[tokio::test]
async fn contract_net_everyone_refusing_ends_refused() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    for bidder in BIDDERS {
        h.ok(&id, bidder, msg("refuse", json!({}))).await;
    }
    let view = h.view(&id).await;
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(view.outcome, Some(Outcome::Refused));
    assert!(view.commitments.is_empty());
}

#[tokio::test]
async fn contract_net_nobody_answering_times_out() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    h.advance(10_000).await;
    let view = h.view(&id).await;
    assert_eq!(view.status, ConversationStatus::Completed);
    for bidder in BIDDERS {
        assert_eq!(
            thread(&view.threads, bidder).outcome,
            Some(Outcome::NoReply)
        );
    }
    assert_eq!(view.outcome, Some(Outcome::Timeout));
}

#[tokio::test]
async fn contract_net_proposal_commitment_lifecycle() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    propose(&h, &id, "p1", 100).await;
    propose(&h, &id, "p2", 110).await;
    propose(&h, &id, "p3", 120).await;
    let view = h.view(&id).await;
    assert_eq!(commitment_states(&view), [CommitmentState::Pending; 3]);
    assert!(
        view.commitments
            .iter()
            .all(|c| c.deadline.is_none() && &*c.creditor == "manager")
    );

    // Accepting binds p1 and p2; the accept's reply-by is the contract deadline.
    let due = T0 + 100_000;
    h.ok(
        &id,
        "manager",
        msg("accept-proposal", json!({}))
            .to(["p1", "p2"])
            .reply_by(due),
    )
    .await;
    reject(&h, &id, "p3").await;
    let view = h.view(&id).await;
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Active);
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Active);
    assert_eq!(commitment_of(&view, "p3"), CommitmentState::Released);
    assert!(
        view.commitments
            .iter()
            .filter(|c| c.state == CommitmentState::Active)
            .all(|c| c.deadline == Some(due))
    );

    h.ok(&id, "p1", msg("inform", json!({}))).await;
    h.ok(&id, "p2", msg("failure", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Fulfilled);
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Violated);
    assert_eq!(violation_kinds(&view), [ViolationKind::CommitmentViolated]);
    assert_eq!(view.outcome, Some(Outcome::Success));

    // Every commitment is visible to its parties through commitments_of.
    let of_p1 = h.engine.commitments_of("p1").await;
    assert_eq!(of_p1.len(), 1);
    assert_eq!(of_p1[0].state, CommitmentState::Fulfilled);
    assert_eq!(h.engine.commitments_of("manager").await.len(), 3);
}

#[tokio::test]
async fn contract_net_contractor_silent_past_the_contract_deadline() {
    let h = Harness::new();
    let id = called(&h, &["p1"]).await;
    propose(&h, &id, "p1", 100).await;
    h.ok(
        &id,
        "manager",
        msg("accept-proposal", json!({})).reply_by(T0 + 50_000),
    )
    .await;
    h.advance(50_000).await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "timed_out");
    assert_eq!(view.outcome, Some(Outcome::Timeout));
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
    assert_eq!(violation_kinds(&view), [ViolationKind::CommitmentViolated]);
    h.advance(50_000).await;
    assert_eq!(
        violation_kinds(&h.view(&id).await),
        [ViolationKind::CommitmentViolated]
    );
    // A late result is flagged and fulfils nothing.
    let r = h.ok(&id, "p1", msg("inform", json!({}))).await;
    assert_eq!(
        r.violation.map(|v| v.kind),
        Some(ViolationKind::LateMessage)
    );
    assert_eq!(
        commitment_states(&h.view(&id).await),
        [CommitmentState::Violated]
    );
}

#[tokio::test]
async fn contract_net_not_understood_ends_only_that_thread() {
    let h = Harness::new();
    let id = called(&h, &["p1", "p2"]).await;
    h.ok(&id, "p1", msg("not-understood", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(
        thread(&view.threads, "p1").outcome,
        Some(Outcome::NotUnderstood)
    );
    assert_eq!(state(&view.threads, "p2"), "called");
    assert_eq!(view.status, ConversationStatus::Active);
}

#[tokio::test]
async fn contract_net_duplicate_result_is_flagged_after_end_while_others_run() {
    let h = Harness::new();
    let id = called(&h, &["p1", "p2"]).await;
    propose(&h, &id, "p1", 100).await;
    propose(&h, &id, "p2", 100).await;
    accept(&h, &id, &["p1", "p2"]).await;
    h.ok(&id, "p1", msg("inform", json!({}))).await;
    let r = h.ok(&id, "p1", msg("inform", json!({"again": true}))).await;
    assert_eq!(r.violation.map(|v| v.kind), Some(ViolationKind::AfterEnd));
    assert!(r.transitions.is_empty());
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "done");
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Fulfilled);
    assert_eq!(view.status, ConversationStatus::Active);
}

#[tokio::test]
async fn contract_net_cancel_confirmed_and_cancel_failed() {
    let h = Harness::new();
    let id = called(&h, &["p1", "p2"]).await;
    propose(&h, &id, "p1", 100).await;
    propose(&h, &id, "p2", 100).await;
    accept(&h, &id, &["p1", "p2"]).await;
    h.ok(&id, "manager", msg("cancel", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "cancelling");
    assert_eq!(state(&view.threads, "p2"), "cancelling");
    h.ok(&id, "p1", msg("inform", json!({}))).await;
    h.ok(&id, "p2", msg("failure", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "cancelled");
    assert_eq!(state(&view.threads, "p2"), "cancel_failed");
    assert_eq!(commitment_of(&view, "p1"), CommitmentState::Released);
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Active);
    h.ok(&id, "p2", msg("inform", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p2"), "done");
    assert_eq!(commitment_of(&view, "p2"), CommitmentState::Fulfilled);
    assert_eq!(view.outcome, Some(Outcome::Success));
    assert!(view.violations.is_empty(), "{:?}", view.violations);
}

#[tokio::test]
async fn contract_net_cancel_from_a_participant_and_messages_from_strangers() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    let r = h.ok(&id, "p1", msg("cancel", json!({}))).await;
    assert_eq!(
        r.violation.map(|v| v.kind),
        Some(ViolationKind::OutOfProtocol)
    );
    assert_eq!(state(&r.threads, "p1"), "called");
    let before = h.view(&id).await;
    expect_error(
        h.send(&id, "p4", msg("propose", json!({}))).await,
        "not_a_party",
        ErrorKind::Forbidden,
    );
    let error = expect_error(
        h.send(&id, "p2", msg("bid", json!({}))).await,
        "unknown_performative",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/performative"));
    // A participant talks only to the initiator.
    let error = expect_error(
        h.send(&id, "p2", msg("propose", json!({})).to(["p3"]))
            .await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/to/0"));
    // The initiator names each receiver once.
    let error = expect_error(
        h.send(&id, "manager", msg("cfp", json!({})).to(["p1", "p2", "p1"]))
            .await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/to/2"));
    assert_unchanged(&h, &before).await;
}

#[tokio::test]
async fn contract_net_retried_late_proposal_is_answered_once() {
    let h = Harness::new();
    let id = called(&h, &["p1", "p2"]).await;
    propose(&h, &id, "p1", 100).await;
    h.advance(10_000).await;
    let late = msg("propose", json!({"price": 5})).with_id("p2-late");
    let first = h.ok(&id, "p2", late.clone()).await;
    let before = h.view(&id).await;
    let again = h.ok(&id, "p2", late).await;
    assert!(again.duplicate);
    assert_eq!(again.violation, first.violation);
    assert_eq!(
        again.violation.map(|v| v.kind),
        Some(ViolationKind::LateMessage)
    );
    assert_unchanged(&h, &before).await;
    let answers = before
        .messages
        .iter()
        .filter(|m| &*m.sender == "colloquy:engine")
        .count();
    assert_eq!(answers, 1);
}

#[tokio::test]
async fn contract_net_broadcast_reaches_ended_threads_as_after_end() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    h.ok(&id, "p1", msg("refuse", json!({}))).await;
    // A broadcast cancel: p2 and p3 move, p1's ended thread records an after-end violation.
    let r = h.ok(&id, "manager", msg("cancel", json!({}))).await;
    assert_eq!(r.transitions.len(), 2);
    assert_eq!(r.violation.map(|v| v.kind), Some(ViolationKind::AfterEnd));
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "p1"), "refused");
    assert_eq!(state(&view.threads, "p2"), "cancelling");
    assert_eq!(state(&view.threads, "p3"), "cancelling");
    // Addressed, the same cancel is clean.
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    h.ok(&id, "p1", msg("refuse", json!({}))).await;
    let r = h
        .ok(&id, "manager", msg("cancel", json!({})).to(["p2", "p3"]))
        .await;
    assert!(r.violation.is_none());
    assert_eq!(r.transitions.len(), 2);
    h.ok(&id, "p2", msg("inform", json!({}))).await;
    h.ok(&id, "p3", msg("inform", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(view.status, ConversationStatus::Completed);
    // One refusal, two cancellations: neither rule for "all" holds.
    assert_eq!(view.outcome, Some(Outcome::Failure));
}

/// Proposals are sealed: a bidder reads the call, its own thread, its own commitment and the
/// conversation-wide facts, never a rival's proposal or thread. The manager reads it all.
#[tokio::test]
async fn contract_net_bidders_do_not_see_each_others_proposals() {
    let h = Harness::new();
    let id = called(&h, &BIDDERS).await;
    propose(&h, &id, "p1", 100).await;
    propose(&h, &id, "p2", 80).await;
    let r = h.ok(&id, "p3", msg("refuse", json!({}))).await;
    assert_eq!(
        r.threads.len(),
        1,
        "a receipt shows the sender's thread only"
    );
    accept(&h, &id, &["p2"]).await;

    let p1 = h.engine.view(&id, Some("p1")).await.expect("p1 reads");
    assert_eq!(performatives(&p1), ["cfp", "propose"]);
    assert!(p1.messages.iter().all(|m| m.sender.as_ref() != "p2"));
    assert_eq!(p1.threads.len(), 1);
    assert_eq!(&*p1.threads[0].participant, "p1");
    assert!(
        p1.commitments.iter().all(|c| &*c.debtor == "p1"),
        "{:?}",
        p1.commitments
    );
    assert_eq!(p1.participants.len(), 3, "who was called is no secret");

    let events = h
        .engine
        .events(&id, Some("p1"), 0)
        .await
        .expect("p1 events");
    let text = serde_json::to_string(&events).expect("json");
    assert!(
        !text.contains("\"p2\",\"from\""),
        "no move of p2's thread: {text}"
    );
    assert!(
        !text.contains("\"price\":80"),
        "no sight of p2's price: {text}"
    );
    assert!(text.contains("\"price\":100"), "p1's own proposal: {text}");

    let manager = h
        .engine
        .view(&id, Some("manager"))
        .await
        .expect("manager reads");
    assert_eq!(
        performatives(&manager),
        ["cfp", "propose", "propose", "refuse", "accept-proposal"]
    );
    assert_eq!(manager.threads.len(), 3);
    assert_eq!(
        manager,
        h.view(&id).await,
        "the initiator sees what the admin sees"
    );
}
