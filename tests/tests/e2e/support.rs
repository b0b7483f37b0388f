//! Small assertions shared by the scenario modules.

use colloquy_engine::{EngineError, ErrorKind};
use colloquy_protocol::conversation::{
    CommitmentState, ConversationView, ThreadView, Violation, ViolationKind,
};
use colloquy_tests::Harness;

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

/// Asserts that an error left the conversation exactly as `before`.
pub async fn assert_unchanged(h: &Harness, before: &ConversationView) {
    let after = h.view(&before.id).await;
    assert_eq!(after.version, before.version, "the version moved");
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
