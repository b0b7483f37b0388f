//! A2A v1.0 on the JSON-RPC binding, beside v0.3 on the same endpoint.
//!
//! The `A2A-Version` header chooses ([`version`]): none (or `0.3`) is v0.3, as the spec
//! says of clients that send none; `1.0` is v1.0; anything else is refused with
//! `VersionNotSupportedError` (-32009). v1.0 renamed the methods (`SendMessage`, `GetTask`,
//! `CancelTask`) and writes the proto3 JSON of `a2a.proto`: enums as `TASK_STATE_*` and
//! `ROLE_*`, parts without `kind` (`{"text": …}`, `{"data": …}`, `{"url": …}`, `{"raw": …}`),
//! `SendMessage`'s answer as the oneof `{"task": …}`. The engine's side is the same for
//! both versions: this module turns v1.0 requests into the v0.3 ones [`super::inward`]
//! serves, and its tasks into v1.0's, adding the history v0.3's tasks do not carry.
//!
//! What v1.0 changed in meaning, not only in spelling: `SendMessage` waits for the task to
//! end unless `configuration.returnImmediately` (v0.3 waited only when asked), and
//! `GetTask` takes `historyLength`.

use axum::http::HeaderMap;
use colloquy_protocol::a2a::{
    A2aMessage, AgentCard, MessageSendParams, Part as PartV03, SendConfiguration, Task as TaskV03,
};
use colloquy_protocol::conversation::ConversationView;
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// The request header naming the A2A version the client speaks.
pub use colloquy_a2a::VERSION_HEADER;
/// The versions this endpoint speaks, as the agent card lists them.
pub const VERSIONS: [&str; 2] = ["1.0", "0.3"];

/// An A2A protocol version this endpoint speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// `message/send`, `tasks/get`, `tasks/cancel`; the v0.3 JSON shapes.
    V0_3,
    /// `SendMessage`, `GetTask`, `CancelTask`; the v1.0 JSON shapes.
    V1_0,
}

/// The version a request asks for, from its `A2A-Version` header (`Major.Minor`; a patch
/// level is ignored, as versions match on `Major.Minor`). `Err` says why it is not one
/// spoken here.
pub fn version(headers: &HeaderMap) -> Result<Version, String> {
    let Some(value) = headers.get(VERSION_HEADER) else {
        return Ok(Version::V0_3);
    };
    let text = value
        .to_str()
        .map_err(|_| "the A2A-Version header is not text".to_owned())?
        .trim();
    let major_minor: Vec<&str> = text.splitn(3, '.').take(2).collect();
    match major_minor.as_slice() {
        [""] => Ok(Version::V0_3),
        ["0", "3"] => Ok(Version::V0_3),
        ["1", "0"] => Ok(Version::V1_0),
        _ => Err(format!(
            "A2A version `{}` is not supported here; this endpoint speaks {}",
            colloquy_core::log_safe::LogSafe(text),
            VERSIONS.join(" and ")
        )),
    }
}

/// `SendMessage`'s params (`SendMessageRequest`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageRequest {
    /// The message.
    pub message: Message,
    /// How the client wants the answer.
    #[serde(default)]
    pub configuration: Option<SendMessageConfiguration>,
    /// Free-form (not used by the engine).
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// A tenant (one per engine here: ignored).
    #[serde(default)]
    pub tenant: Option<String>,
}

/// `SendMessageConfiguration`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendMessageConfiguration {
    /// Media types the client takes (the engine answers JSON data and text parts).
    #[serde(default)]
    #[serde(alias = "accepted_output_modes")]
    pub accepted_output_modes: Vec<String>,
    /// How many of the task's latest messages the answer carries.
    #[serde(default)]
    #[serde(alias = "history_length")]
    pub history_length: Option<i32>,
    /// Answer at once instead of when the task ends.
    #[serde(default)]
    #[serde(alias = "return_immediately")]
    pub return_immediately: bool,
    /// Push notifications for the task (taken out and set by [`super::push`]).
    #[serde(default)]
    #[serde(alias = "task_push_notification_config")]
    pub task_push_notification_config: Option<Value>,
}

/// A v1.0 `Message` as a client sends it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Its id (required).
    #[serde(alias = "message_id")]
    pub message_id: String,
    /// The context (a conversation id).
    #[serde(default)]
    #[serde(alias = "context_id")]
    pub context_id: Option<String>,
    /// The task it continues.
    #[serde(default)]
    #[serde(alias = "task_id")]
    pub task_id: Option<String>,
    /// `ROLE_USER` for a client's message.
    pub role: Role,
    /// Its content.
    pub parts: Vec<Part>,
    /// Free-form; `colloquy` in it names the template and the performative.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Extensions it uses (none are known here).
    #[serde(default)]
    pub extensions: Vec<String>,
    /// Tasks it refers to.
    #[serde(default)]
    #[serde(alias = "reference_task_ids")]
    pub reference_task_ids: Vec<String>,
}

/// `Role`, spelt as proto3 JSON spells enums.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub enum Role {
    /// Not given.
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// The agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
}

/// A v1.0 `Part`: exactly one of `text`, `raw`, `url`, `data`.
///
/// Every multi-word field here takes its proto field name (`history_length`) besides its
/// JSON name (`historyLength`), as proto3 JSON parsers must.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    #[serde(default)]
    text: Option<String>,
    /// Base64, as proto3 JSON writes bytes.
    #[serde(default)]
    raw: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    data: Option<Value>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
    #[serde(default)]
    filename: Option<String>,
    #[serde(default, alias = "media_type")]
    media_type: Option<String>,
}

/// `GetTask`'s params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskRequest {
    /// The task.
    pub id: String,
    /// How many of its latest messages to include (none given: all).
    #[serde(default)]
    #[serde(alias = "history_length")]
    pub history_length: Option<i32>,
    /// A tenant (ignored).
    #[serde(default)]
    pub tenant: Option<String>,
}

/// `ListTasks`' params.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksRequest {
    /// Only the task of this context (a conversation id: one task per context here).
    #[serde(default)]
    #[serde(alias = "context_id")]
    pub context_id: Option<String>,
    /// Only tasks in this state (`TASK_STATE_*`; `TASK_STATE_UNSPECIFIED`: any).
    #[serde(default)]
    pub status: Option<String>,
    /// At most this many (1 to [`MAX_PAGE_SIZE`], default [`DEFAULT_PAGE_SIZE`]).
    #[serde(default)]
    #[serde(alias = "page_size")]
    pub page_size: Option<i32>,
    /// The previous page's `nextPageToken`.
    #[serde(default)]
    #[serde(alias = "page_token")]
    pub page_token: Option<String>,
    /// How many of each task's latest messages to include (none given: none).
    #[serde(default)]
    #[serde(alias = "history_length")]
    pub history_length: Option<i32>,
    /// Only tasks whose status changed at or after this time (RFC 3339).
    #[serde(default)]
    #[serde(alias = "status_timestamp_after")]
    pub status_timestamp_after: Option<String>,
    /// Include each task's artifacts (default: left out).
    #[serde(default)]
    #[serde(alias = "include_artifacts")]
    pub include_artifacts: Option<bool>,
    /// A tenant (ignored).
    #[serde(default)]
    pub tenant: Option<String>,
}

/// `ListTasks`' page size when none is asked for.
pub const DEFAULT_PAGE_SIZE: usize = 50;
/// The largest page `ListTasks` answers.
pub const MAX_PAGE_SIZE: usize = 100;

/// The states a task can be in, as v1.0 spells them.
pub const TASK_STATES: [&str; 8] = [
    "TASK_STATE_SUBMITTED",
    "TASK_STATE_WORKING",
    "TASK_STATE_COMPLETED",
    "TASK_STATE_FAILED",
    "TASK_STATE_CANCELED",
    "TASK_STATE_INPUT_REQUIRED",
    "TASK_STATE_REJECTED",
    "TASK_STATE_AUTH_REQUIRED",
];

/// `ListTasks`' checked params.
#[derive(Debug, PartialEq, Eq)]
pub struct TaskListing {
    /// Only this context.
    pub context_id: Option<String>,
    /// Only this state (`TASK_STATE_*`).
    pub state: Option<String>,
    /// The page size.
    pub page_size: usize,
    /// Tasks after this position in the order (`None`: from the start).
    pub after: Option<PagePosition>,
    /// History per task.
    pub history_length: usize,
    /// Only tasks changed at or after this Unix time (ms).
    pub changed_since: Option<u64>,
    /// Keep artifacts.
    pub include_artifacts: bool,
}

/// Where a page ends in `ListTasks`' order (latest change first, then id): the page token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PagePosition {
    /// The last task's status time (Unix ms).
    pub changed_at: u64,
    /// The last task's id.
    pub id: String,
}

impl PagePosition {
    /// The token a client passes back: `"{changed_at}:{id}"`.
    pub fn token(&self) -> String {
        format!("{}:{}", self.changed_at, self.id)
    }

    /// Whether a task at (`changed_at`, `id`) comes after this position in the order
    /// (latest change first; among equal times, by id).
    pub fn is_followed_by(&self, changed_at: u64, id: &str) -> bool {
        changed_at < self.changed_at || (changed_at == self.changed_at && id > self.id.as_str())
    }
}

impl ListTasksRequest {
    /// The listing asked for, or what is wrong with the params.
    pub fn checked(self) -> Result<TaskListing, String> {
        let page_size = match self.page_size {
            None => DEFAULT_PAGE_SIZE,
            Some(size) => usize::try_from(size)
                .ok()
                .filter(|size| (1..=MAX_PAGE_SIZE).contains(size))
                .ok_or_else(|| {
                    format!("params.pageSize: between 1 and {MAX_PAGE_SIZE}, got {size}")
                })?,
        };
        let state = match self.status.as_deref() {
            None | Some("" | "TASK_STATE_UNSPECIFIED") => None,
            Some(state) if TASK_STATES.contains(&state) => Some(state.to_owned()),
            Some(other) => {
                return Err(format!(
                    "params.status: `{}` is not a task state; one of {}",
                    colloquy_core::log_safe::LogSafe(other),
                    TASK_STATES.join(", ")
                ));
            }
        };
        let after = match self.page_token.as_deref() {
            None | Some("") => None,
            Some(token) => {
                let position = token.split_once(':').and_then(|(at, id)| {
                    Some(PagePosition {
                        changed_at: at.parse().ok()?,
                        id: id.to_owned(),
                    })
                });
                Some(position.ok_or_else(|| {
                    "params.pageToken: not a token this agent gave (pass nextPageToken as it \
                     came)"
                        .to_owned()
                })?)
            }
        };
        let history_length =
            history_length(self.history_length, "params.historyLength")?.unwrap_or(0);
        let changed_since = self
            .status_timestamp_after
            .as_deref()
            .map(|text| {
                colloquy_a2a::timestamp::parse(text)
                    .map_err(|why| format!("params.statusTimestampAfter: {why}"))
            })
            .transpose()?;
        Ok(TaskListing {
            context_id: self.context_id.filter(|id| !id.is_empty()),
            state,
            page_size,
            after,
            history_length,
            changed_since,
            include_artifacts: self.include_artifacts.unwrap_or(false),
        })
    }
}

/// `CancelTask`'s params.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelTaskRequest {
    /// The task.
    pub id: String,
    /// Free-form (not used).
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// A tenant (ignored).
    #[serde(default)]
    pub tenant: Option<String>,
}

impl SendMessageRequest {
    /// The v0.3 `message/send` params that ask the same, or what is wrong with these.
    pub fn into_v03(self) -> Result<MessageSendParams, String> {
        let message = self.message;
        if message.role != Role::User {
            return Err(format!(
                "params.message.role: a client's message has role ROLE_USER, not {:?}",
                message.role
            ));
        }
        if message.message_id.is_empty() {
            return Err("params.message.messageId: required".to_owned());
        }
        if message.parts.is_empty() {
            return Err("params.message.parts: at least one part is required".to_owned());
        }
        let parts = message
            .parts
            .into_iter()
            .enumerate()
            .map(|(index, part)| {
                part.into_v03()
                    .map_err(|why| format!("params.message.parts[{index}]: {why}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let wait = !self
            .configuration
            .as_ref()
            .is_some_and(|c| c.return_immediately);
        Ok(MessageSendParams {
            message: A2aMessage {
                kind: "message".to_owned(),
                role: "user".to_owned(),
                message_id: message.message_id,
                context_id: message.context_id,
                task_id: message.task_id,
                parts,
                metadata: message.metadata,
            },
            configuration: Some(SendConfiguration { blocking: wait }),
        })
    }

    /// The history length the answer is cut to, checked.
    pub fn history_length(&self) -> Result<Option<usize>, String> {
        history_length(
            self.configuration.as_ref().and_then(|c| c.history_length),
            "params.configuration.historyLength",
        )
    }
}

impl GetTaskRequest {
    /// The history length the answer is cut to, checked.
    pub fn history(&self) -> Result<Option<usize>, String> {
        history_length(self.history_length, "params.historyLength")
    }
}

/// A history length as asked (`None`: no limit); a negative one is refused.
fn history_length(asked: Option<i32>, field: &str) -> Result<Option<usize>, String> {
    match asked {
        None => Ok(None),
        Some(length) => usize::try_from(length)
            .map(Some)
            .map_err(|_| format!("{field}: must not be negative, got {length}")),
    }
}

impl Part {
    /// The same content as a v0.3 part; a file (`raw` or `url`) keeps its name and type.
    fn into_v03(self) -> Result<PartV03, String> {
        let given = [
            self.text.is_some(),
            self.raw.is_some(),
            self.url.is_some(),
            self.data.is_some(),
        ]
        .iter()
        .filter(|given| **given)
        .count();
        if given != 1 {
            return Err(format!(
                "a part has exactly one of text, raw, url and data; this one has {given}"
            ));
        }
        let _ = self.metadata;
        if let Some(text) = self.text {
            return Ok(PartV03::Text { text });
        }
        if let Some(data) = self.data {
            return Ok(PartV03::Data { data });
        }
        let mut file = Map::new();
        if let Some(raw) = self.raw {
            file.insert("bytes".into(), Value::String(raw));
        }
        if let Some(url) = self.url {
            file.insert("uri".into(), Value::String(url));
        }
        if let Some(name) = self.filename {
            file.insert("name".into(), Value::String(name));
        }
        if let Some(media_type) = self.media_type {
            file.insert("mimeType".into(), Value::String(media_type));
        }
        Ok(PartV03::File {
            file: Value::Object(file),
        })
    }
}

/// An agent card as v1.0 writes it: the endpoints only in `supportedInterfaces`, the
/// bearer scheme as an `httpAuthSecurityScheme` and `securityRequirements`.
pub fn agent_card(card: &AgentCard) -> Value {
    let mut out = Map::new();
    out.insert("name".into(), json!(card.name));
    out.insert("description".into(), json!(card.description));
    out.insert(
        "supportedInterfaces".into(),
        json!(card.supported_interfaces),
    );
    out.insert("version".into(), json!(card.version));
    out.insert(
        "capabilities".into(),
        json!({
            "streaming": card.capabilities.streaming,
            // v1.0's push notification methods are served (v0.3's are not: its card says no).
            "pushNotifications": true,
        }),
    );
    if let Some(schemes) = &card.security_schemes {
        let schemes: Map<String, Value> = schemes
            .iter()
            .map(|(name, scheme)| {
                let scheme = match scheme.get("openIdConnectUrl") {
                    Some(url) => json!({"openIdConnectSecurityScheme": {
                        "openIdConnectUrl": url,
                        "description": "A JWT of this OpenID Connect issuer, as a bearer token",
                    }}),
                    None if scheme.get("bearerFormat").is_some() => {
                        json!({"httpAuthSecurityScheme": {
                            "scheme": "bearer",
                            "bearerFormat": "JWT",
                            "description": "A JWT of the server's identity provider, or a \
                                            Colloquy agent token (the agents file's `token`)",
                        }})
                    }
                    None => json!({"httpAuthSecurityScheme": {
                        "scheme": "bearer",
                        "description": "A Colloquy agent token (the agents file's `token`)",
                    }}),
                };
                (name.clone(), scheme)
            })
            .collect();
        let requirements: Vec<Value> = schemes
            .keys()
            // `{}`: an empty StringList, as proto3 JSON writes it (and as the signed,
            // canonical card must hold it).
            .map(|name| json!({"schemes": {name: {}}}))
            .collect();
        out.insert("securitySchemes".into(), Value::Object(schemes));
        out.insert("securityRequirements".into(), Value::Array(requirements));
    }
    out.insert("defaultInputModes".into(), json!(card.default_input_modes));
    out.insert(
        "defaultOutputModes".into(),
        json!(card.default_output_modes),
    );
    out.insert("skills".into(), json!(card.skills));
    Value::Object(out)
}

/// A v0.3 task state (`input-required`) as v1.0 spells it (`TASK_STATE_INPUT_REQUIRED`).
pub fn task_state(state: &str) -> String {
    format!(
        "TASK_STATE_{}",
        state.to_ascii_uppercase().replace('-', "_")
    )
}

/// A v0.3 part as v1.0 writes it.
fn part(part: &PartV03) -> Value {
    match part {
        PartV03::Text { text } => json!({"text": text}),
        PartV03::Data { data } => json!({"data": data}),
        PartV03::File { file } => {
            let mut out = Map::new();
            if let Some(bytes) = file.get("bytes") {
                out.insert("raw".into(), bytes.clone());
            }
            if let Some(uri) = file.get("uri") {
                out.insert("url".into(), uri.clone());
            }
            if let Some(name) = file.get("name") {
                out.insert("filename".into(), name.clone());
            }
            if let Some(mime) = file.get("mimeType") {
                out.insert("mediaType".into(), mime.clone());
            }
            Value::Object(out)
        }
    }
}

/// A v0.3 message as v1.0 writes it.
fn message(message: &A2aMessage) -> Value {
    let mut out = Map::new();
    out.insert("messageId".into(), json!(message.message_id));
    if let Some(context) = &message.context_id {
        out.insert("contextId".into(), json!(context));
    }
    if let Some(task) = &message.task_id {
        out.insert("taskId".into(), json!(task));
    }
    let role = if message.role == "agent" {
        "ROLE_AGENT"
    } else {
        "ROLE_USER"
    };
    out.insert("role".into(), json!(role));
    out.insert(
        "parts".into(),
        Value::Array(message.parts.iter().map(part).collect()),
    );
    if let Some(metadata) = &message.metadata {
        out.insert("metadata".into(), Value::Object(metadata.clone()));
    }
    Value::Object(out)
}

/// The conversation's messages as the task's v1.0 history, the latest `limit` of them: the
/// initiator's as `ROLE_USER`, everyone else's as `ROLE_AGENT`, each one data part with
/// its content and `metadata.colloquy` naming its performative and sender.
fn history(view: &ConversationView, limit: Option<usize>) -> Vec<Value> {
    let skip = limit.map_or(0, |limit| view.messages.len().saturating_sub(limit));
    view.messages
        .iter()
        .skip(skip)
        .map(|sent| {
            let role = if sent.sender == view.initiator {
                "ROLE_USER"
            } else {
                "ROLE_AGENT"
            };
            json!({
                "messageId": &*sent.id,
                "contextId": &*view.id,
                "taskId": &*view.id,
                "role": role,
                "parts": [{"data": sent.content.value()}],
                "metadata": {"colloquy": {
                    "performative": sent.performative.name(),
                    "sender": &*sent.sender,
                }},
            })
        })
        .collect()
}

/// The performative of a participant's direct answer: a conversation that ended with it as
/// the participant's only message answers a v1.0 `SendMessage` with that message, not a
/// task (`a2a-task` declares it).
pub const DIRECT_REPLY: &str = "reply";

/// `SendMessage`'s answer when the conversation was a direct reply (see [`DIRECT_REPLY`]):
/// `{"message": …}` with the participant's message as the agent's.
pub fn direct_reply(view: &ConversationView) -> Option<Value> {
    let from_participant = |sender: &str| view.participants.iter().any(|p| &**p == sender);
    let answers: Vec<_> = view
        .messages
        .iter()
        .filter(|m| from_participant(&m.sender))
        .collect();
    let [answer] = answers.as_slice() else {
        return None;
    };
    let ended = view.status == colloquy_protocol::conversation::ConversationStatus::Completed;
    if !ended || answer.performative.name() != DIRECT_REPLY {
        return None;
    }
    let parts: Vec<Value> = colloquy_a2a::outward::parts_of(&answer.content.value())
        .iter()
        .map(part)
        .collect();
    Some(json!({"message": {
        "messageId": &*answer.id,
        "contextId": &*view.id,
        "role": "ROLE_AGENT",
        "parts": parts,
    }}))
}

/// When a task's status last changed: when the conversation's last message was sent.
pub fn changed_at(view: &ConversationView) -> Option<u64> {
    view.messages.last().map(|message| message.sent_at)
}

/// A task as v1.0 writes it: `task` (the v0.3 task of `view`) respelt, with the latest
/// `history_length` messages of the conversation (none when it is 0).
pub fn task(task: &TaskV03, view: &ConversationView, history_length: Option<usize>) -> Value {
    let mut status = Map::new();
    status.insert("state".into(), json!(task_state(&task.status.state)));
    if let Some(changed_at) = changed_at(view) {
        status.insert(
            "timestamp".into(),
            json!(colloquy_a2a::timestamp::format(changed_at)),
        );
    }
    if let Some(said) = &task.status.message {
        status.insert("message".into(), message(said));
    }
    let artifacts: Vec<Value> = task
        .artifacts
        .iter()
        .map(|artifact| {
            let mut out = Map::new();
            if let Some(id) = &artifact.artifact_id {
                out.insert("artifactId".into(), json!(id));
            }
            if let Some(name) = &artifact.name {
                out.insert("name".into(), json!(name));
            }
            out.insert(
                "parts".into(),
                Value::Array(artifact.parts.iter().map(part).collect()),
            );
            Value::Object(out)
        })
        .collect();
    let mut out = Map::new();
    out.insert("id".into(), json!(task.id));
    if let Some(context) = &task.context_id {
        out.insert("contextId".into(), json!(context));
    }
    out.insert("status".into(), Value::Object(status));
    if !artifacts.is_empty() {
        out.insert("artifacts".into(), Value::Array(artifacts));
    }
    let history = history(view, history_length);
    if !history.is_empty() {
        out.insert("history".into(), Value::Array(history));
    }
    if let Some(metadata) = &task.metadata {
        out.insert("metadata".into(), Value::Object(metadata.clone()));
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(version: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(version) = version {
            headers.insert(VERSION_HEADER, HeaderValue::from_str(version).unwrap());
        }
        headers
    }

    #[test]
    fn the_version_header_chooses_and_none_means_0_3() {
        assert_eq!(version(&headers(None)), Ok(Version::V0_3));
        assert_eq!(version(&headers(Some(""))), Ok(Version::V0_3));
        assert_eq!(version(&headers(Some("0.3"))), Ok(Version::V0_3));
        assert_eq!(version(&headers(Some("1.0"))), Ok(Version::V1_0));
        assert_eq!(version(&headers(Some("1.0.1"))), Ok(Version::V1_0));
        let refused = version(&headers(Some("0.5"))).unwrap_err();
        assert!(
            refused.contains("`0.5`") && refused.contains("1.0 and 0.3"),
            "{refused}"
        );
        assert!(version(&headers(Some("2"))).is_err());
    }

    fn request(value: Value) -> Result<MessageSendParams, String> {
        serde_json::from_value::<SendMessageRequest>(value)
            .map_err(|error| error.to_string())?
            .into_v03()
    }

    #[test]
    fn a_v1_message_becomes_the_v03_send_it_means() {
        let sent = request(json!({
            "message": {"messageId": "m1", "role": "ROLE_USER",
                "parts": [{"text": "hi"}, {"data": {"a": 1}},
                          {"url": "https://x/y.pdf", "filename": "y.pdf", "mediaType": "application/pdf"}],
                "metadata": {"colloquy": {"template": "fipa-query"}}},
            "configuration": {"returnImmediately": true}
        }))
        .unwrap();
        assert_eq!(sent.message.message_id, "m1");
        assert_eq!(sent.message.role, "user");
        assert_eq!(
            sent.message.parts,
            vec![
                PartV03::Text { text: "hi".into() },
                PartV03::Data {
                    data: json!({"a": 1})
                },
                PartV03::File {
                    file: json!({"uri": "https://x/y.pdf", "name": "y.pdf", "mimeType": "application/pdf"})
                },
            ]
        );
        assert_eq!(
            sent.configuration,
            Some(SendConfiguration { blocking: false })
        );
        let waits = request(json!({"message": {"messageId": "m2", "role": "ROLE_USER",
            "parts": [{"text": "hi"}]}}))
        .unwrap();
        assert_eq!(
            waits.configuration,
            Some(SendConfiguration { blocking: true })
        );
    }

    #[test]
    fn wrong_shapes_are_refused_saying_where() {
        let wrong_enum = request(json!({"message": {"messageId": "m", "role": "user",
            "parts": [{"text": "hi"}]}}))
        .unwrap_err();
        assert!(
            wrong_enum.contains("unknown variant `user`"),
            "{wrong_enum}"
        );
        let agent = request(json!({"message": {"messageId": "m", "role": "ROLE_AGENT",
            "parts": [{"text": "hi"}]}}))
        .unwrap_err();
        assert!(agent.contains("params.message.role"), "{agent}");
        let two = request(json!({"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": [{"text": "hi", "data": 1}]}}))
        .unwrap_err();
        assert!(two.contains("params.message.parts[0]"), "{two}");
        let none = request(json!({"message": {"messageId": "m", "role": "ROLE_USER",
            "parts": []}}))
        .unwrap_err();
        assert!(none.contains("params.message.parts"), "{none}");
        assert!(history_length(Some(-1), "f").is_err());
        assert_eq!(history_length(Some(0), "f"), Ok(Some(0)));
    }

    #[test]
    fn list_params_are_checked_and_the_page_token_read_back() {
        let listing = ListTasksRequest::default().checked().unwrap();
        assert_eq!(
            (listing.page_size, listing.history_length),
            (DEFAULT_PAGE_SIZE, 0)
        );
        assert!(!listing.include_artifacts);
        let read = |value: Value| {
            serde_json::from_value::<ListTasksRequest>(value)
                .unwrap()
                .checked()
        };
        for wrong in [
            json!({"pageSize": 0}),
            json!({"pageSize": 101}),
            json!({"status": "completed"}),
            json!({"pageToken": "nonsense"}),
            json!({"historyLength": -1}),
            json!({"statusTimestampAfter": "yesterday"}),
        ] {
            assert!(read(wrong.clone()).is_err(), "{wrong}");
        }
        let position = PagePosition {
            changed_at: 5,
            id: "b".into(),
        };
        let listing =
            read(json!({"pageToken": position.token(), "status": "TASK_STATE_WORKING"})).unwrap();
        assert_eq!(listing.after, Some(position.clone()));
        assert_eq!(listing.state.as_deref(), Some("TASK_STATE_WORKING"));
        assert!(position.is_followed_by(4, "a"));
        assert!(position.is_followed_by(5, "c"));
        assert!(!position.is_followed_by(5, "b"));
        assert!(!position.is_followed_by(5, "a"));
        assert!(!position.is_followed_by(6, "z"));
    }

    #[test]
    fn states_roles_and_parts_are_spelt_as_v1_spells_them() {
        assert_eq!(task_state("completed"), "TASK_STATE_COMPLETED");
        assert_eq!(task_state("input-required"), "TASK_STATE_INPUT_REQUIRED");
        let said = A2aMessage::agent_text("s".into(), Some("c".into()), "why".into());
        assert_eq!(
            message(&said),
            json!({"messageId": "s", "contextId": "c", "role": "ROLE_AGENT",
                "parts": [{"text": "why"}]})
        );
    }
}
