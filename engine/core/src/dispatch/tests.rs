//! Tests of `dispatch`.

use colloquy_protocol::action::{Action, RejectAction};
use serde_json::json;

use colloquy_policy::compiled::State;
use colloquy_protocol::template::ReplyBySpec;

use super::commitments::numbered_id;
use super::message::arrival_deadline;
use super::*;

#[test]
fn numbered_ids_read_as_the_format_they_replace() {
    let long = "c".repeat(200);
    for prefix in [
        "",
        "c-1",
        "0193a5e2-7c4b-7d1e-9a3f-2b8c4d5e6f70",
        long.as_str(),
    ] {
        for n in [0, 1, 9, 10, 99, 100, 12345, usize::MAX] {
            assert_eq!(&*numbered_id(prefix, n), format!("{prefix}/{n}"));
        }
    }
}

fn schema(source: Value) -> colloquy_policy::compiled::JsonSchema {
    colloquy_policy::compiled::JsonSchema {
        validator: jsonschema::validator_for(&source).expect("a valid schema"),
        source,
    }
}

fn violation(schema: &colloquy_policy::compiled::JsonSchema, value: &Value) -> String {
    match validate(schema, value, "/content") {
        Err(EngineError::SchemaViolation { message, .. }) => message,
        other => panic!("expected a schema violation, got {other:?}"),
    }
}

#[test]
fn a_hook_rejection_names_the_hook() {
    let mut effects = Effects::default();
    let origin = HookOrigin("credit.wasm");
    effects.add(&origin, Action::Continue);
    effects.add(
        &origin,
        Action::Reject(RejectAction {
            reason: "no".to_owned(),
        }),
    );
    assert_eq!(
        effects.reject,
        Some(("hook `credit.wasm`".to_owned(), "no".to_owned()))
    );
}

fn state(terminal: Option<Outcome>, on_deadline: Option<StateId>) -> State {
    State {
        name: Arc::from("s"),
        terminal,
        transitions: Vec::new(),
        on_deadline,
        late: None,
    }
}

#[test]
fn a_state_with_on_deadline_takes_the_messages_reply_by() {
    let now = 1_000;
    let lapses = state(None, Some(StateId(1)));
    let advisory = state(None, None);
    let terminal = state(Some(Outcome::Rejected), None);
    let default = ReplyBySpec {
        default_ms: Some(50),
        required: false,
    };
    let own = ReplyBySpec {
        default_ms: None,
        required: false,
    };
    // Without a `reply_by` on the transition: only a state that lapses keeps the
    // sender's reply-by (it was dropped there before, so proposals never lapsed).
    assert_eq!(
        arrival_deadline(None, &lapses, Some(5_000), now),
        Some(5_000)
    );
    assert_eq!(arrival_deadline(None, &lapses, None, now), None);
    assert_eq!(arrival_deadline(None, &advisory, Some(5_000), now), None);
    // With one: the message's own, else the default, wherever it leads.
    assert_eq!(
        arrival_deadline(Some(&default), &advisory, Some(5_000), now),
        Some(5_000)
    );
    assert_eq!(
        arrival_deadline(Some(&default), &lapses, None, now),
        Some(1_050)
    );
    assert_eq!(arrival_deadline(Some(&own), &advisory, None, now), None);
    // A terminal state has no deadline left.
    assert_eq!(
        arrival_deadline(Some(&default), &terminal, Some(5_000), now),
        None
    );
}

#[test]
fn a_violation_quotes_a_short_value_and_names_a_long_one() {
    let pattern = schema(json!({"type": "string", "pattern": "^[a-z]+$"}));
    let short = violation(&pattern, &json!("ABC"));
    assert!(short.contains("\"ABC\""), "{short}");
    let long = "A".repeat(100_000);
    let message = violation(&pattern, &json!(long));
    assert!(message.len() < 100, "{} bytes: {message}", message.len());
    assert!(message.contains("the value"), "{message}");
    assert!(message.contains("^[a-z]+$"), "{message}");
}
