//! Streaming a task to an A2A client over server-sent events: `SendStreamingMessage` and
//! `SubscribeToTask` (v1.0), `message/stream` and `tasks/resubscribe` (v0.3), and the
//! HTTP+JSON binding's `message:stream` and `tasks/{id}:subscribe`.
//!
//! A stream follows the conversation ([`colloquy_core::engine::Engine::listen_conversation`]): the
//! task as it stands first, then a status update each time the task's state changes and an
//! artifact update for each new result, until the task ends or waits for the client
//! (`input-required`), the client leaves, or the server closes. Each event is read from the
//! conversation itself, so a stream opened on any node, or again after a restart on a
//! durable store, shows the same task.

use std::borrow::Cow;
use std::collections::HashSet;

use axum::response::sse::Event;
use colloquy_protocol::a2a::Task;
use colloquy_protocol::conversation::{ConversationStatus, ConversationView};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::inward::task_of;
use super::v1::{self, Version};
use crate::AppState;
use crate::streams::{STREAM_BUFFER, SseStream, Wake, sse, wait_as_owner};

/// How each event is written.
#[derive(Clone, Debug)]
pub enum Envelope {
    /// A JSON-RPC response to the request with this id.
    JsonRpc(Value),
    /// The bare `StreamResponse` (the HTTP+JSON binding).
    Bare,
}

/// States after which a stream ends: the task is over, or waits for the client.
const FINAL_STATES: [&str; 6] = [
    "completed",
    "failed",
    "canceled",
    "rejected",
    "input-required",
    "auth-required",
];

/// Whether a task in `state` (v0.3 spelling) has ended or waits for the client.
pub fn is_final(state: &str) -> bool {
    FINAL_STATES.contains(&state)
}

/// Whether a task in `state` has ended: no message moves it any more.
pub fn is_terminal(state: &str) -> bool {
    is_final(state) && !matches!(state, "input-required" | "auth-required")
}

/// When a stream ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Until {
    /// When the task ends or waits for the client: the stream of the client's own message
    /// (`SendStreamingMessage`), whose next move is the client's.
    Settled,
    /// When the task ends: a subscription (`SubscribeToTask`), which also sees a task that
    /// waits for input go on once someone answers.
    Ended,
}

/// The stream of conversation `id` as `caller` sees it, in `version`'s shapes.
pub fn follow(
    state: AppState,
    caller: String,
    id: String,
    version: Version,
    envelope: Envelope,
    until: Until,
) -> SseStream {
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    tokio::spawn(async move {
        let engine = state.engine();
        let listener = engine.listen_conversation(&id);
        // How far the events sent cover the conversation (see [`progress`]).
        let mut covered: Option<usize> = None;
        let mut artifacts_sent: HashSet<String> = HashSet::new();
        loop {
            // Armed before the read, so a change between the two still wakes the stream.
            let rung = listener.next_ring();
            let Ok(view) = engine.view(&id, Some(&caller)).await else {
                return;
            };
            let task = task_of(&view);
            let events = match covered {
                None => {
                    artifacts_sent.extend(artifact_ids(&task));
                    vec![whole_task(&task, &view, version)]
                }
                Some(covered) => updates_since(&view, covered, &mut artifacts_sent, version),
            };
            covered = Some(progress(&view));
            for event in events {
                let data = match &envelope {
                    Envelope::JsonRpc(request_id) => {
                        json!({"jsonrpc": "2.0", "id": request_id, "result": event})
                    }
                    Envelope::Bare => event,
                };
                if tx
                    .send(Event::default().data(data.to_string()))
                    .await
                    .is_err()
                {
                    return;
                }
            }
            let over = match until {
                Until::Settled => is_final(&task.status.state),
                Until::Ended => is_terminal(&task.status.state),
            };
            if over {
                return;
            }
            if let Wake::Stop = wait_as_owner(rung, &tx, &state, &id).await {
                return;
            }
        }
    });
    sse(rx)
}

fn artifact_ids(task: &Task) -> impl Iterator<Item = String> + '_ {
    task.artifacts
        .iter()
        .filter_map(|artifact| artifact.artifact_id.clone())
}

/// The first event: the task as it stands.
fn whole_task(task: &Task, view: &ConversationView, version: Version) -> Value {
    match version {
        Version::V1_0 => json!({"task": v1::task(task, view, None)}),
        Version::V0_3 => json!(task),
    }
}

/// How far a conversation has got, as its updates count it: one step per message, and one
/// more when it has ended (a conversation can end without a message: its deadline).
pub(super) fn progress(view: &ConversationView) -> usize {
    view.messages.len() + usize::from(view.status == ConversationStatus::Completed)
}

/// Most steps [`updates_since`] takes one at a time; a longer way is one step (a client that
/// reconnects to a long conversation gets where it stands, not every move on the way).
const MAX_STEPS: usize = 64;

/// The conversation as it stood at `step` (`0..=progress(view)`): its first `step`
/// messages, still running, until the last step, which is `view` itself.
pub(super) fn at_step(view: &ConversationView, step: usize) -> Cow<'_, ConversationView> {
    if step >= progress(view) {
        return Cow::Borrowed(view);
    }
    let mut then = view.clone();
    then.messages.truncate(step);
    then.status = ConversationStatus::Active;
    then.outcome = None;
    Cow::Owned(then)
}

/// The events for what happened in `view` after `covered` steps (see [`progress`]), one
/// step at a time, so a client sees every state the task went through (`working` between
/// an `agree` and an `inform` that came together), even when it reads them late.
/// `artifacts_sent` holds the ids of the artifacts already sent, and grows.
pub(super) fn updates_since(
    view: &ConversationView,
    covered: usize,
    artifacts_sent: &mut HashSet<String>,
    version: Version,
) -> Vec<Value> {
    let last = progress(view);
    if covered >= last {
        return Vec::new();
    }
    let steps: Vec<usize> = if last - covered > MAX_STEPS {
        vec![last]
    } else {
        (covered + 1..=last).collect()
    };
    let mut previous = task_of(&at_step(view, covered)).status.state;
    let mut events = Vec::new();
    for step in steps {
        let then = at_step(view, step);
        let task = task_of(&then);
        events.extend(updates(&task, &then, &previous, artifacts_sent, version));
        previous = task.status.state;
    }
    events
}

/// What changed since the last event: new artifacts, then the new state if it moved.
fn updates(
    task: &Task,
    view: &ConversationView,
    previous_state: &str,
    artifacts_sent: &mut HashSet<String>,
    version: Version,
) -> Vec<Value> {
    let mut events = Vec::new();
    let context_id = task.context_id.clone().unwrap_or_else(|| task.id.clone());
    for artifact in &task.artifacts {
        let Some(artifact_id) = &artifact.artifact_id else {
            continue;
        };
        if !artifacts_sent.insert(artifact_id.clone()) {
            continue;
        }
        events.push(match version {
            Version::V1_0 => {
                let whole = v1::task(
                    &Task {
                        artifacts: vec![artifact.clone()],
                        ..task.clone()
                    },
                    view,
                    Some(0),
                );
                json!({"artifactUpdate": {
                    "taskId": task.id, "contextId": context_id,
                    "artifact": whole["artifacts"][0], "append": false, "lastChunk": true,
                }})
            }
            Version::V0_3 => json!({
                "kind": "artifact-update", "taskId": task.id, "contextId": context_id,
                "artifact": artifact, "append": false, "lastChunk": true,
            }),
        });
    }
    if task.status.state != previous_state {
        let last = is_final(&task.status.state);
        events.push(match version {
            Version::V1_0 => {
                let whole = v1::task(task, view, Some(0));
                json!({"statusUpdate": {
                    "taskId": task.id, "contextId": context_id, "status": whole["status"],
                }})
            }
            Version::V0_3 => json!({
                "kind": "status-update", "taskId": task.id, "contextId": context_id,
                "status": task.status, "final": last,
            }),
        });
    }
    events
}
