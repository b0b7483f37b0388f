//! Streaming a task to an A2A client over server-sent events: `SendStreamingMessage` and
//! `SubscribeToTask` (v1.0), `message/stream` and `tasks/resubscribe` (v0.3), and the
//! HTTP+JSON binding's `message:stream` and `tasks/{id}:subscribe`.
//!
//! A stream follows the conversation ([`crate::engine::Engine::listen_conversation`]): the
//! task as it stands first, then a status update each time the task's state changes and an
//! artifact update for each new result, until the task ends or waits for the client
//! (`input-required`), the client leaves, or the server closes. Each event is read from the
//! conversation itself, so a stream opened on any node, or again after a restart on a
//! durable store, shows the same task.

use std::collections::HashSet;

use axum::response::sse::Event;
use colloquy_protocol::a2a::Task;
use colloquy_protocol::conversation::ConversationView;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::inward::task_of;
use super::v1::{self, Version};
use crate::api::AppState;
use crate::api::streams::{STREAM_BUFFER, SseStream, Wake, sse, wait};

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
        let mut last_state: Option<String> = None;
        let mut artifacts_sent: HashSet<String> = HashSet::new();
        loop {
            // Armed before the read, so a change between the two still wakes the stream.
            let rung = listener.next_ring();
            let Ok(view) = engine.view(&id, Some(&caller)).await else {
                return;
            };
            let task = task_of(&view);
            let events = match &last_state {
                None => {
                    artifacts_sent.extend(artifact_ids(&task));
                    vec![whole_task(&task, &view, version)]
                }
                Some(previous) => updates(&task, &view, previous, &mut artifacts_sent, version),
            };
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
            last_state = Some(task.status.state.clone());
            if let Wake::Stop = wait(rung, &tx, &state).await {
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

/// What changed since the last event: new artifacts, then the new state if it moved.
pub(super) fn updates(
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
