//! Small assertions shared by the scenario modules.

use colloquy_core::{EngineError, ErrorKind};
use colloquy_protocol::conversation::{
    CommitmentState, ConversationView, ThreadView, Violation, ViolationKind,
};
use colloquy_protocol::event::EventKind;
use colloquy_tests::Harness;
use colloquy_tests::http::STEP;
use serde_json::Value;

/// The state of `participant`'s thread.
pub fn state<'a>(threads: &'a [ThreadView], participant: &str) -> &'a str {
    &threads
        .iter()
        .find(|thread| &*thread.participant == participant)
        .unwrap_or_else(|| panic!("no thread with `{participant}` in {threads:?}"))
        .state
}

/// `participant`'s thread.
pub fn thread<'a>(threads: &'a [ThreadView], participant: &str) -> &'a ThreadView {
    threads
        .iter()
        .find(|thread| &*thread.participant == participant)
        .unwrap_or_else(|| panic!("no thread with `{participant}` in {threads:?}"))
}

/// The kinds of every recorded violation, in order.
pub fn violation_kinds(view: &ConversationView) -> Vec<ViolationKind> {
    view.violations
        .iter()
        .map(|violation| violation.kind)
        .collect()
}

/// The violations of one kind.
pub fn violations_of(view: &ConversationView, kind: ViolationKind) -> Vec<&Violation> {
    view.violations
        .iter()
        .filter(|violation| violation.kind == kind)
        .collect()
}

/// The states of every commitment, in creation order.
pub fn commitment_states(view: &ConversationView) -> Vec<CommitmentState> {
    view.commitments
        .iter()
        .map(|commitment| commitment.state)
        .collect()
}

/// The state of the commitment `debtor` owes (exactly one must exist).
pub fn commitment_of(view: &ConversationView, debtor: &str) -> CommitmentState {
    let owed: Vec<_> = view
        .commitments
        .iter()
        .filter(|c| &*c.debtor == debtor)
        .collect();
    assert_eq!(
        owed.len(),
        1,
        "commitments owed by `{debtor}`: {:?}",
        view.commitments
    );
    owed[0].state
}

/// The performatives of the stored messages, in order.
pub fn performatives(view: &ConversationView) -> Vec<String> {
    view.messages
        .iter()
        .map(|message| message.performative.name().to_owned())
        .collect()
}

/// The performatives of a conversation's messages, from its JSON view (HTTP API).
pub fn json_performatives(view: &Value) -> Vec<&str> {
    view["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| m["performative"].as_str().unwrap_or("?"))
        .collect()
}

/// Asks `look` every 20 ms until `done` holds of its answer, and returns that answer; after
/// [`STEP`], `Err` with the last answer seen, for the caller's failure message.
pub async fn poll_until<F, Fut>(mut look: F, done: impl Fn(&Value) -> bool) -> Result<Value, Value>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Value>,
{
    let mut last = Value::Null;
    let found = tokio::time::timeout(STEP, async {
        loop {
            let seen = look().await;
            if done(&seen) {
                return seen;
            }
            last = seen;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await;
    found.map_err(|_| last)
}

/// Asserts that an error left the conversation exactly as `before`, but for the refusals it
/// recorded (`message_refused` events, which move the version and nothing else).
pub async fn assert_unchanged(h: &Harness, before: &ConversationView) {
    let after = h.view(&before.id).await;
    let since = h
        .engine
        .events(&before.id, None, before.version)
        .await
        .expect("events");
    assert!(
        since
            .iter()
            .all(|event| matches!(event.kind, EventKind::MessageRefused(_))),
        "more than refusals recorded: {since:?}"
    );
    assert_eq!(
        after.version,
        before.version + since.len() as u64,
        "the version moved"
    );
    assert_eq!(
        after.messages.len(),
        before.messages.len(),
        "a message was stored"
    );
    assert_eq!(after.threads, before.threads, "a thread moved");
    assert_eq!(after.commitments, before.commitments, "a commitment moved");
    assert_eq!(
        after.violations, before.violations,
        "a violation was recorded"
    );
    assert_eq!(after.status, before.status);
    assert_eq!(after.outcome, before.outcome);
}

/// Asserts an error's code and kind, returning it for further checks.
pub fn expect_error<T: std::fmt::Debug>(
    result: Result<T, EngineError>,
    code: &str,
    kind: ErrorKind,
) -> EngineError {
    match result {
        Ok(value) => panic!("expected `{code}`, got {value:?}"),
        Err(error) => {
            assert_eq!(error.code(), code, "{error}");
            assert_eq!(error.kind(), kind, "{error}");
            error
        }
    }
}
