//! A task as the caller sees its conversation ([`task_of`]): its state from the
//! conversation's status and outcome, its artifacts the participants' results, the question
//! it waits on when it wants input.

use colloquy_protocol::a2a::{A2aMessage, Artifact, Part, Task, TaskStatus};
use colloquy_protocol::conversation::{ConversationStatus, ConversationView, Outcome};
use serde_json::{Map, Value, json};

/// A message's content from its parts: the value of a lone data part, else `{"text": …}`
/// with the text parts joined by newlines (and `"data"` with the data parts, if any).
pub(super) fn content_of(parts: &[Part]) -> Value {
    colloquy_a2a::outward::content_of(parts.iter().collect())
}

/// The conversation as an A2A task.
/// The performatives by which a participant asks the initiator for something.
pub(super) const QUESTIONS: [&str; 2] = ["query-ref", "query-if"];

/// Whether the task waits for the caller (A2A's `input-required`): a participant's latest
/// message is a question (`query-ref`, `query-if`) that the initiator has not answered
/// yet. Protocols whose participants never ask (the FIPA ones) never wait so.
pub(super) fn waits_for_input(view: &ConversationView) -> bool {
    let from_participant = |sender: &str| view.participants.iter().any(|p| &**p == sender);
    let Some(asked) = view
        .messages
        .iter()
        .rposition(|m| from_participant(&m.sender))
    else {
        return false;
    };
    QUESTIONS.contains(&view.messages[asked].performative.name())
        && !view.messages[asked + 1..]
            .iter()
            .any(|m| m.sender == view.initiator)
}

/// The participant's question, as the status message of a task that waits for input (see
/// [`waits_for_input`]): the
/// client reads what it is asked there (its parts are the question's content).
pub(super) fn question(view: &ConversationView) -> Option<A2aMessage> {
    let asked = view
        .messages
        .iter()
        .rev()
        .find(|m| m.sender != view.initiator)?;
    Some(A2aMessage {
        task_id: Some(view.id.to_string()),
        parts: colloquy_a2a::outward::parts_of(&asked.content.value()),
        ..A2aMessage::agent_text(
            asked.id.to_string(),
            Some(view.id.to_string()),
            String::new(),
        )
    })
}

pub fn task_of(view: &ConversationView) -> Task {
    let from_participant = |sender: &str| view.participants.iter().any(|p| &**p == sender);
    let answered = view.messages.iter().any(|m| from_participant(&m.sender));
    let state = match (view.status, view.outcome) {
        (ConversationStatus::Active, _) if waits_for_input(view) => "input-required",
        (ConversationStatus::Active, _) if answered => "working",
        (ConversationStatus::Active, _) => "submitted",
        (ConversationStatus::Completed, Some(Outcome::Success)) => "completed",
        (ConversationStatus::Completed, Some(Outcome::Refused | Outcome::Rejected)) => "rejected",
        (ConversationStatus::Completed, Some(Outcome::Cancelled)) => "canceled",
        (ConversationStatus::Completed, _) => "failed",
    };
    // An `inform` that confirms a cancel is no result.
    let cancels: Vec<&str> = view
        .messages
        .iter()
        .filter(|m| m.performative.name() == "cancel")
        .map(|m| &*m.id)
        .collect();
    // A task that ended cancelled has no result: whatever a participant said after the
    // cancel confirmed it (an `inform` in reply to the request, too, as fipa-request's
    // `cancelling` state takes it).
    let cancelled_at = (view.outcome == Some(Outcome::Cancelled))
        .then(|| {
            view.messages
                .iter()
                .position(|m| m.performative.name() == "cancel")
        })
        .flatten();
    let answers_a_cancel = |m: &&colloquy_protocol::message::Message| {
        let after_the_cancel = cancelled_at.is_some_and(|at| {
            view.messages
                .iter()
                .position(|other| other.id == m.id)
                .is_some_and(|index| index > at)
        });
        after_the_cancel
            || m.in_reply_to
                .as_deref()
                .is_some_and(|answered| cancels.contains(&answered))
    };
    let artifacts = view
        .messages
        .iter()
        .filter(|m| from_participant(&m.sender))
        .filter(|m| matches!(m.performative.name(), "inform" | "propose" | "confirm"))
        .filter(|m| !answers_a_cancel(m))
        .map(|m| Artifact {
            artifact_id: Some(m.id.to_string()),
            name: Some(m.performative.name().to_owned()),
            parts: colloquy_a2a::outward::parts_of(&m.content.value()),
        })
        .collect();
    let why = match state {
        "rejected" | "canceled" | "failed" => {
            let reason = view
                .messages
                .iter()
                .rev()
                .find(|m| from_participant(&m.sender))
                .and_then(|m| m.content.value().get("reason")?.as_str().map(str::to_owned));
            Some(reason.unwrap_or_else(|| view.outcome.map_or("ended", Outcome::name).to_owned()))
        }
        _ => None,
    };
    let mut colloquy = Map::new();
    colloquy.insert("template".into(), json!(&*view.template));
    colloquy.insert("status".into(), json!(view.status));
    if let Some(outcome) = view.outcome {
        colloquy.insert("outcome".into(), json!(outcome.name()));
    }
    let mut metadata = Map::new();
    metadata.insert("colloquy".into(), Value::Object(colloquy));
    Task {
        kind: "task".to_owned(),
        id: view.id.to_string(),
        context_id: Some(view.id.to_string()),
        status: TaskStatus {
            state: state.to_owned(),
            message: why
                .map(|text| A2aMessage {
                    task_id: Some(view.id.to_string()),
                    ..A2aMessage::agent_text(
                        format!("{}-status", view.id),
                        Some(view.id.to_string()),
                        text,
                    )
                })
                .or_else(|| {
                    (state == "input-required")
                        .then(|| question(view))
                        .flatten()
                }),
        },
        artifacts,
        metadata: Some(metadata),
    }
}
