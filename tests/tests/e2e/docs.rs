//! `docs/templates.md` stays true: every complete YAML example in it compiles, every excerpt
//! of a built-in template is quoted verbatim, and the custom "price quote" protocol behaves
//! the way the document says.

use std::path::Path;

use colloquy_core::EngineError;
use colloquy_protocol::conversation::{ConversationStatus, Outcome, ViolationKind};
use colloquy_protocol::message::ENGINE_PARTY;
use colloquy_tests::{Harness, T0, compile, msg, templates_dir};
use serde_json::json;

/// The ```` ```yaml ```` blocks of a Markdown text, in order.
fn yaml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match current.as_mut() {
            None if line.trim_end() == "```yaml" => current = Some(String::new()),
            None => {}
            Some(_) if line.trim_end() == "```" => blocks.extend(current.take()),
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
        }
    }
    assert!(
        current.is_none(),
        "a ```yaml block in docs/templates.md is not closed"
    );
    blocks
}

fn reference() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/templates.md");
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The complete template examples (blocks with an `apiVersion`, but test files).
fn complete_examples() -> Vec<String> {
    yaml_blocks(&reference())
        .into_iter()
        .filter(|block| block.contains("apiVersion:") && !is_test_file(block))
        .collect()
}

fn is_test_file(block: &str) -> bool {
    block.contains("kind: TemplateTest")
}

/// The test file example runs as written against the built-in templates, and passes.
#[test]
fn the_test_file_example_passes_against_the_built_in_templates() {
    use colloquy_sandbox::suite::load::{TemplateDirs, load};
    let examples: Vec<String> = yaml_blocks(&reference())
        .into_iter()
        .filter(|block| is_test_file(block))
        .collect();
    assert_eq!(
        examples.len(),
        1,
        "docs/templates.md has one test file example"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    for built_in in [
        "fipa-request.yaml",
        "fipa-query.yaml",
        "fipa-contract-net.yaml",
    ] {
        std::fs::copy(templates_dir().join(built_in), dir.path().join(built_in)).expect("copy");
    }
    let path = dir.path().join("example.test.yaml");
    std::fs::write(&path, &examples[0]).expect("write");
    let suite = load(&path, &mut TemplateDirs::default()).expect("the example loads");
    let clock = std::sync::Arc::new(colloquy_core::clock::ManualClock::new(
        colloquy_sandbox::TEST_EPOCH_MS,
    ));
    let reports = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(colloquy_sandbox::suite::run::run_suite(
            &suite, &clock, None, None,
        ));
    assert_eq!(reports.len(), 3);
    for report in &reports {
        assert!(report.passed(), "{}: {:#?}", report.name, report.failures);
    }
}

fn price_quote_yaml() -> String {
    complete_examples()
        .into_iter()
        .find(|block| block.contains("name: price-quote"))
        .expect("docs/templates.md has the price-quote example")
}

#[test]
fn every_complete_example_compiles() {
    let examples = complete_examples();
    // The minimal template and the price quote at least; guards against a parser that
    // silently finds nothing.
    assert!(
        examples.len() >= 2,
        "found {} complete examples",
        examples.len()
    );
    for example in &examples {
        let template = compile(example);
        assert!(!template.name.is_empty());
    }
}

/// Indented blocks are excerpts of the built-in templates' `spec` and must be verbatim.
#[test]
fn excerpts_of_builtin_templates_are_verbatim() {
    let builtins: Vec<String> = [
        "fipa-request.yaml",
        "fipa-query.yaml",
        "fipa-contract-net.yaml",
    ]
    .iter()
    .map(|file| std::fs::read_to_string(templates_dir().join(file)).expect("built-in template"))
    .collect();
    let excerpts: Vec<String> = yaml_blocks(&reference())
        .into_iter()
        .filter(|block| !block.contains("apiVersion:") && block.starts_with("  "))
        .collect();
    assert!(excerpts.len() >= 8, "found {} excerpts", excerpts.len());
    for excerpt in &excerpts {
        assert!(
            builtins
                .iter()
                .any(|source| source.contains(excerpt.as_str())),
            "not a verbatim excerpt of a built-in template:\n{excerpt}"
        );
    }
}

#[tokio::test]
async fn price_quote_over_budget_is_routed_guarded_and_rejected() {
    let h = Harness::with(vec![compile(&price_quote_yaml())]);

    // Start parameters are validated; the error names the field.
    let error = h
        .try_start(
            "price-quote",
            "buyer",
            &["supplier"],
            json!({"budget": "lots"}),
            None,
        )
        .await
        .expect_err("a string budget is refused");
    assert!(
        matches!(&error, EngineError::SchemaViolation { pointer, .. } if pointer == "/parameters/budget"),
        "{error:?}"
    );

    let c = h
        .start(
            "price-quote",
            "buyer",
            &["supplier"],
            json!({"budget": 100}),
        )
        .await;

    // Content is validated per performative; a violation leaves the conversation unchanged.
    let error = h
        .send(
            &c.id,
            "buyer",
            msg("quote-request", json!({"item": "bolts", "quantity": 0})),
        )
        .await
        .expect_err("quantity 0 is refused");
    assert!(
        matches!(&error, EngineError::SchemaViolation { pointer, .. } if pointer == "/content/quantity"),
        "{error:?}"
    );
    assert!(h.view(&c.id).await.messages.is_empty());

    let r = h
        .ok(
            &c.id,
            "buyer",
            msg("quote-request", json!({"item": "bolts", "quantity": 500})),
        )
        .await;
    assert_eq!(&*r.threads[0].state, "asked");
    assert_eq!(r.threads[0].deadline, Some(T0 + 60_000));

    // enforcement: enforce refuses out-of-protocol messages and stores nothing.
    let error = h
        .send(&c.id, "supplier", msg("accept-proposal", json!({})))
        .await
        .expect_err("out of protocol under enforce");
    assert!(matches!(error, EngineError::OutOfProtocol(_)), "{error:?}");
    assert_eq!(h.view(&c.id).await.messages.len(), 1);

    // Over budget: routed to finance-desk as well; remember-quote records the price.
    let r = h
        .ok(&c.id, "supplier", msg("propose", json!({"price": 120})))
        .await;
    assert_eq!(&*r.threads[0].state, "quoted");
    let receivers: Vec<&str> = r.receivers.iter().map(|agent| &**agent).collect();
    assert_eq!(receivers, ["buyer", "finance-desk"]);
    let view = h
        .engine
        .view(&c.id, Some("finance-desk"))
        .await
        .expect("observer reads");
    assert_eq!(view.vars, json!({"price": 120, "quoted": true}));

    // budget-guard reads vars set by the previous message.
    let error = h
        .send(&c.id, "buyer", msg("accept-proposal", json!({})))
        .await
        .expect_err("the guard refuses an over-budget acceptance");
    match &error {
        EngineError::Rejected { rule, reason } => {
            assert_eq!(rule, "budget-guard");
            assert_eq!(reason, "the quote is over budget");
        }
        other => panic!("expected a rejection, got {other:?}"),
    }

    let r = h
        .ok(&c.id, "buyer", msg("reject-proposal", json!({})))
        .await;
    assert_eq!(r.status, ConversationStatus::Completed);
    assert_eq!(r.outcome, Some(Outcome::Rejected));

    let error = h
        .send(&c.id, "supplier", msg("inform", json!({})))
        .await
        .expect_err("the conversation has ended");
    assert!(
        matches!(error, EngineError::ConversationEnded(_)),
        "{error:?}"
    );
}

#[tokio::test]
async fn price_quote_silence_ends_in_no_reply_and_a_late_quote_is_turned_down() {
    let h = Harness::with(vec![compile(&price_quote_yaml())]);
    let c = h
        .start(
            "price-quote",
            "buyer",
            &["supplier"],
            json!({"budget": 100}),
        )
        .await;
    h.ok(
        &c.id,
        "buyer",
        msg("quote-request", json!({"item": "bolts", "quantity": 500})),
    )
    .await;

    h.advance(60_001).await;
    let view = h.view(&c.id).await;
    assert_eq!(&*view.threads[0].state, "no_quote");
    assert_eq!(view.status, ConversationStatus::Completed);
    assert_eq!(view.outcome, Some(Outcome::NoReply));

    let r = h
        .ok(&c.id, "supplier", msg("propose", json!({"price": 90})))
        .await;
    let violation = r.violation.expect("a late message is flagged");
    assert_eq!(violation.kind, ViolationKind::LateMessage);
    let view = h.view(&c.id).await;
    let answer = view.messages.last().expect("the engine's answer");
    assert_eq!(&*answer.sender, ENGINE_PARTY);
    assert_eq!(answer.performative.name(), "reject-proposal");
    assert_eq!(
        answer.content,
        json!({"reason": "quote arrived after the deadline"})
    );
    assert_eq!(
        answer
            .receivers
            .iter()
            .map(|agent| &**agent)
            .collect::<Vec<_>>(),
        ["supplier"]
    );
}

#[tokio::test]
async fn price_quote_within_budget_succeeds() {
    let h = Harness::with(vec![compile(&price_quote_yaml())]);
    let c = h
        .start(
            "price-quote",
            "buyer",
            &["supplier"],
            json!({"budget": 100}),
        )
        .await;
    h.ok(
        &c.id,
        "buyer",
        msg("quote-request", json!({"item": "bolts", "quantity": 500})),
    )
    .await;
    let r = h
        .ok(&c.id, "supplier", msg("propose", json!({"price": 80})))
        .await;
    let receivers: Vec<&str> = r.receivers.iter().map(|agent| &**agent).collect();
    assert_eq!(receivers, ["buyer"], "within budget, no routing");
    let r = h
        .ok(&c.id, "buyer", msg("accept-proposal", json!({})))
        .await;
    assert_eq!(r.status, ConversationStatus::Completed);
    assert_eq!(r.outcome, Some(Outcome::Success));
}
