//! A protocol defined only in a test fixture (tests/fixtures/quote.yaml): declared intents,
//! content and parameter schemas, a CEL guard, routing that adds a receiver or refuses,
//! `on_message` rules that set vars, and `enforcement: enforce`.

use colloquy_core::ErrorKind;
use colloquy_protocol::conversation::{
    CommitmentState, ConversationStatus, Outcome, ViolationKind,
};
use colloquy_tests::{Harness, T0, compile, msg};
use serde_json::json;

use crate::support::{
    assert_unchanged, commitment_states, expect_error, performatives, state, violation_kinds,
};

fn harness() -> Harness {
    Harness::with(vec![compile(include_str!("../../fixtures/quote.yaml"))])
}

/// buyer asks seller for 10 widgets with a limit of 1500; returns the conversation id.
async fn asked(h: &Harness) -> String {
    let c = h
        .start("quote", "buyer", &["seller"], json!({"limit": 1500}))
        .await;
    let r = h
        .ok(
            &c.id,
            "buyer",
            msg("quote-request", json!({"item": "widget", "quantity": 10})),
        )
        .await;
    assert_eq!(state(&r.threads, "seller"), "asked");
    let view = h.view(&c.id).await;
    assert_eq!(commitment_states(&view), [CommitmentState::Pending]);
    assert_eq!(view.commitments[0].deadline, Some(T0 + 60_000));
    c.id.to_string()
}

#[tokio::test]
async fn quote_accepted_in_three_steps() {
    let h = harness();
    let id = asked(&h).await;
    let r = h
        .ok(&id, "seller", msg("quote", json!({"amount": 800})))
        .await;
    assert_eq!(state(&r.threads, "seller"), "quoted");
    assert_eq!(
        r.receivers.iter().map(|r| &**r).collect::<Vec<_>>(),
        ["buyer"]
    );
    let view = h.view(&id).await;
    assert_eq!(
        view.vars,
        json!({"quoted": true, "last_amount": 800, "last_seller": "seller"})
    );
    assert_eq!(commitment_states(&view), [CommitmentState::Fulfilled]);
    h.ok(&id, "buyer", msg("accept-proposal", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(view.outcome, Some(Outcome::Success));
    assert_eq!(state(&view.threads, "seller"), "accepted");
    assert_eq!(
        performatives(&view),
        ["quote-request", "quote", "accept-proposal"]
    );
    assert_eq!(commitment_states(&view), [CommitmentState::Fulfilled]);
    assert!(view.violations.is_empty(), "{:?}", view.violations);
}

#[tokio::test]
async fn quote_above_the_limit_takes_the_guarded_branch() {
    let h = harness();
    let id = asked(&h).await;
    let r = h
        .ok(&id, "seller", msg("quote", json!({"amount": 2000})))
        .await;
    assert_eq!(state(&r.threads, "seller"), "over_limit");
    assert_eq!(r.outcome, Some(Outcome::Rejected));
    // Over 1000: the routing rule copied the auditor in, who may now read along.
    let receivers: Vec<&str> = r.receivers.iter().map(|r| &**r).collect();
    assert_eq!(receivers, ["buyer", "auditor"]);
    let view = h
        .engine
        .view(&id, Some("auditor"))
        .await
        .expect("auditor reads");
    assert_eq!(view.vars["last_amount"], json!(2000));
}

#[tokio::test]
async fn quote_declined_ends_rejected_with_the_answer_given() {
    let h = harness();
    let id = asked(&h).await;
    let r = h
        .ok(&id, "seller", msg("quote", json!({"amount": 1200})))
        .await;
    assert_eq!(r.receivers.len(), 2, "1200 > 1000 goes to the auditor too");
    h.ok(&id, "buyer", msg("reject-proposal", json!({}))).await;
    let view = h.view(&id).await;
    assert_eq!(view.outcome, Some(Outcome::Rejected));
    // Declining the quote does not undo that it was given.
    assert_eq!(commitment_states(&view), [CommitmentState::Fulfilled]);
}

#[tokio::test]
async fn quote_schema_violation_names_the_field_and_changes_nothing() {
    let h = harness();
    let id = asked(&h).await;
    let before = h.view(&id).await;
    let error = expect_error(
        h.send(&id, "seller", msg("quote", json!({"amount": "ten"})))
            .await,
        "schema_violation",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/content/amount"));
    let error = expect_error(
        h.send(&id, "seller", msg("quote", json!({"amount": -5})))
            .await,
        "schema_violation",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/content/amount"));
    assert_unchanged(&h, &before).await;
    assert_eq!(before.vars, json!({}));
}

#[tokio::test]
async fn quote_routing_rule_refuses_and_changes_nothing() {
    let h = harness();
    let c = h
        .start("quote", "buyer", &["seller"], json!({"limit": 10}))
        .await;
    let before = h.view(&c.id).await;
    let error = expect_error(
        h.send(
            &c.id,
            "buyer",
            msg("quote-request", json!({"item": "w", "quantity": 500})),
        )
        .await,
        "rejected",
        ErrorKind::Unprocessable,
    );
    assert!(
        error.to_string().contains("bulk-orders-only-up-to-100"),
        "{error}"
    );
    assert!(error.to_string().contains("at most 100 units"), "{error}");
    assert_unchanged(&h, &before).await;
}

#[tokio::test]
async fn quote_enforces_the_protocol() {
    let h = harness();
    let id = asked(&h).await;
    let before = h.view(&id).await;
    // The seller cannot accept its own quote, the buyer cannot quote, nor ask twice.
    for (sender, message) in [
        ("seller", msg("accept-proposal", json!({}))),
        ("buyer", msg("quote", json!({"amount": 1}))),
        (
            "buyer",
            msg("quote-request", json!({"item": "w", "quantity": 1})),
        ),
    ] {
        let performative = message.performative.clone();
        let error = expect_error(
            h.send(&id, sender, message).await,
            "out_of_protocol",
            ErrorKind::Conflict,
        );
        assert!(error.to_string().contains(&performative), "{error}");
    }
    // Intents are per template: `request` is a FIPA act but has no transition here.
    expect_error(
        h.send(&id, "buyer", msg("request", json!({}))).await,
        "out_of_protocol",
        ErrorKind::Conflict,
    );
    expect_error(
        h.send(&id, "buyer", msg("quote-revision", json!({}))).await,
        "unknown_performative",
        ErrorKind::Unprocessable,
    );
    assert_unchanged(&h, &before).await;
}

#[tokio::test]
async fn quote_start_checks_the_parameters_schema() {
    let h = harness();
    let error = expect_error(
        h.try_start(
            "quote",
            "buyer",
            &["seller"],
            json!({"limit": "lots"}),
            None,
        )
        .await,
        "schema_violation",
        ErrorKind::Unprocessable,
    );
    assert_eq!(error.pointer(), Some("/parameters/limit"));
    let error = expect_error(
        h.try_start("quote", "buyer", &["seller"], json!({}), None)
            .await,
        "schema_violation",
        ErrorKind::Unprocessable,
    );
    assert_eq!(
        error.pointer(),
        Some("/parameters/limit"),
        "the missing property is named"
    );
    expect_error(
        h.try_start(
            "quote",
            "buyer",
            &["s1", "s2", "s3"],
            json!({"limit": 5}),
            None,
        )
        .await,
        "invalid",
        ErrorKind::Unprocessable,
    );
    assert_eq!(h.engine.live_count(), 0);
}

#[tokio::test]
async fn quote_silent_seller_expires_and_a_late_quote_is_flagged() {
    let h = harness();
    let id = asked(&h).await;
    h.advance(60_000).await;
    let view = h.view(&id).await;
    assert_eq!(state(&view.threads, "seller"), "expired");
    assert_eq!(view.outcome, Some(Outcome::Rejected));
    // The answer was owed by the request's reply-by: its deadline violates it, even though
    // the thread ends at the same instant.
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
    assert_eq!(violation_kinds(&view), [ViolationKind::CommitmentViolated]);
    let r = h
        .ok(&id, "seller", msg("quote", json!({"amount": 5})))
        .await;
    assert_eq!(
        r.violation.map(|v| v.kind),
        Some(ViolationKind::LateMessage)
    );
    // Late messages run no rules and move no commitment.
    let view = h.view(&id).await;
    assert_eq!(view.vars, json!({}));
    assert_eq!(commitment_states(&view), [CommitmentState::Violated]);
}
