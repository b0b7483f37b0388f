//! The part of the A2A protocol (Agent2Agent, JSON-RPC 2.0 binding, version 0.3) the engine
//! speaks: `message/send`, `tasks/get` and `tasks/cancel`, their messages, tasks and parts,
//! and the agent card. The engine calls remote agents with them and answers A2A clients
//! with them.
//!
//! Only what the engine reads or writes is modelled; everything else a peer sends
//! (extensions, file parts' details, history) is accepted and ignored, so peers on newer
//! minor versions of A2A keep working.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A JSON-RPC 2.0 request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Request<P> {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// Echoed in the response.
    pub id: String,
    /// `message/send` or `tasks/get`.
    pub method: String,
    /// The method's parameters.
    pub params: P,
}

impl<P> Request<P> {
    /// A request for `method` with `params`.
    pub fn new(id: String, method: &str, params: P) -> Request<P> {
        Request {
            jsonrpc: "2.0".to_owned(),
            id,
            method: method.to_owned(),
            params,
        }
    }
}

/// A JSON-RPC 2.0 response: a result or an error.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response<R> {
    /// Always `"2.0"`.
    pub jsonrpc: String,
    /// The result, on success.
    #[serde(default = "Option::default", skip_serializing_if = "Option::is_none")]
    pub result: Option<R>,
    /// The error, on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RpcError>,
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RpcError {
    /// The code (A2A uses -32700 to -32600 for JSON-RPC's own, -32001 to -32099 for its).
    pub code: i64,
    /// What went wrong, for people.
    pub message: String,
    /// Anything else the agent adds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

/// Parameters of `message/send`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageSendParams {
    /// The message.
    pub message: A2aMessage,
    /// How the sender wants the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub configuration: Option<SendConfiguration>,
}

/// `message/send`'s `configuration`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendConfiguration {
    /// Wait until the task is done (or needs input) before answering.
    pub blocking: bool,
}

/// Parameters of `tasks/get`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskQueryParams {
    /// The task.
    pub id: String,
}

/// Parameters of `tasks/cancel` (and of `tasks/get`, which may add a history length the
/// engine does not use).
pub type TaskIdParams = TaskQueryParams;

/// The A2A protocol version the engine speaks.
pub const PROTOCOL_VERSION: &str = "0.3.0";

/// An agent card: what an A2A client reads at `/.well-known/agent-card.json` to learn how
/// to reach an agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCard {
    /// [`PROTOCOL_VERSION`].
    pub protocol_version: String,
    /// The agent's name (its Colloquy id).
    pub name: String,
    /// What it is.
    pub description: String,
    /// Its JSON-RPC endpoint.
    pub url: String,
    /// `JSONRPC`.
    pub preferred_transport: String,
    /// The version of the software serving it.
    pub version: String,
    /// What the endpoint supports beyond request and response.
    pub capabilities: Capabilities,
    /// Media types it takes.
    pub default_input_modes: Vec<String>,
    /// Media types it answers with.
    pub default_output_modes: Vec<String>,
    /// What one can ask of it.
    pub skills: Vec<Skill>,
    /// How callers authenticate, by scheme name (OpenAPI security schemes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_schemes: Option<Map<String, Value>>,
    /// Which schemes a call needs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<Vec<Map<String, Value>>>,
    /// Every interface the agent serves, by binding and version (A2A v1.0's card lists
    /// them here; a v0.3 client reads `url` and `protocolVersion` above).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub supported_interfaces: Vec<AgentInterface>,
}

/// One interface of an agent card (A2A v1.0 `AgentInterface`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentInterface {
    /// Where it is served.
    pub url: String,
    /// `JSONRPC`, `HTTP+JSON` or `GRPC`.
    pub protocol_binding: String,
    /// The A2A version spoken there (`Major.Minor`).
    pub protocol_version: String,
}

/// An agent card's `capabilities`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    /// `message/stream` and `tasks/resubscribe`.
    pub streaming: bool,
    /// Push notifications of task updates.
    pub push_notifications: bool,
}

/// One skill of an agent card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Skill {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Keywords.
    pub tags: Vec<String>,
}

/// An A2A message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct A2aMessage {
    /// Always `"message"`.
    pub kind: String,
    /// `user` (from the engine) or `agent` (from the remote agent).
    pub role: String,
    /// Its id.
    pub message_id: String,
    /// The conversation it belongs to (a Colloquy conversation id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The task it continues, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
    /// Free-form; the engine's own details go under `colloquy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

impl A2aMessage {
    /// An agent's message (`role: agent`) saying `text`, as a task's status message.
    pub fn agent_text(message_id: String, context_id: Option<String>, text: String) -> A2aMessage {
        A2aMessage {
            kind: "message".to_owned(),
            role: "agent".to_owned(),
            message_id,
            context_id,
            task_id: None,
            parts: vec![Part::Text { text }],
            metadata: None,
        }
    }
}

/// One piece of a message's or an artifact's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Part {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// Structured data (a JSON value).
    Data {
        /// The value.
        data: Value,
    },
    /// A file; kept as sent.
    File {
        /// The file object (`name`, `mimeType`, `bytes` or `uri`).
        file: Value,
    },
}

/// What a `message/send` or `tasks/get` answers with, told apart by its `kind`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum SendResult {
    /// A task (possibly still running).
    Task(Task),
    /// A direct answer, without a task.
    Message(A2aMessage),
}

impl<'de> Deserialize<'de> for SendResult {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<SendResult, D::Error> {
        use serde::de::Error;
        let value = Value::deserialize(deserializer)?;
        match value.get("kind").and_then(Value::as_str) {
            Some("task") => serde_json::from_value(value)
                .map(SendResult::Task)
                .map_err(D::Error::custom),
            Some("message") => serde_json::from_value(value)
                .map(SendResult::Message)
                .map_err(D::Error::custom),
            Some(other) => Err(D::Error::custom(format!(
                "a result of kind `{other}`, where a task or a message was expected"
            ))),
            None => Err(D::Error::custom("a result without a `kind`")),
        }
    }
}

/// A unit of work at the remote agent.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Always `"task"`.
    pub kind: String,
    /// Its id.
    pub id: String,
    /// Its context.
    #[serde(default)]
    pub context_id: Option<String>,
    /// Where it stands.
    pub status: TaskStatus,
    /// What it produced.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    /// Free-form.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Map<String, Value>>,
}

/// A task's state, with the agent's message about it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TaskStatus {
    /// `submitted`, `working`, `input-required`, `completed`, `canceled`, `failed`,
    /// `rejected`, `auth-required` or `unknown` (kept as a string: an unknown state is not
    /// a malformed answer).
    pub state: String,
    /// The agent's message about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<A2aMessage>,
}

/// An output of a task.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Its id.
    #[serde(default)]
    pub artifact_id: Option<String>,
    /// Its name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_task_and_a_message_are_told_apart_by_kind() {
        let task: SendResult = serde_json::from_value(json!({
            "kind": "task", "id": "t", "contextId": "c",
            "status": {"state": "completed", "timestamp": "2026-12-01T00:00:00Z"},
            "artifacts": [{"artifactId": "a", "parts": [{"kind": "data", "data": {"x": 1}}]}],
            "history": []
        }))
        .expect("task");
        let SendResult::Task(task) = task else {
            panic!("not a task")
        };
        assert_eq!(task.status.state, "completed");
        assert_eq!(
            task.artifacts[0].parts,
            [Part::Data {
                data: json!({"x": 1})
            }]
        );
        let message: SendResult = serde_json::from_value(json!({
            "kind": "message", "role": "agent", "messageId": "m",
            "parts": [{"kind": "text", "text": "hi"}]
        }))
        .expect("message");
        assert!(matches!(message, SendResult::Message(m) if m.parts.len() == 1));
    }

    #[test]
    fn a_message_send_is_written_in_a2a_field_names() {
        let request = Request::new(
            "1".to_owned(),
            "message/send",
            MessageSendParams {
                message: A2aMessage {
                    kind: "message".to_owned(),
                    role: "user".to_owned(),
                    message_id: "m".to_owned(),
                    context_id: Some("c".to_owned()),
                    task_id: None,
                    parts: vec![Part::Text {
                        text: "hi".to_owned(),
                    }],
                    metadata: None,
                },
                configuration: Some(SendConfiguration { blocking: true }),
            },
        );
        assert_eq!(
            serde_json::to_value(&request).expect("json"),
            json!({"jsonrpc": "2.0", "id": "1", "method": "message/send", "params": {
                "message": {"kind": "message", "role": "user", "messageId": "m",
                    "contextId": "c", "parts": [{"kind": "text", "text": "hi"}]},
                "configuration": {"blocking": true}}})
        );
    }
}
