//! Which A2A version the bridge speaks to a remote agent, and v1.0's spelling of its calls.
//!
//! The agent's card says ([`Dialect::of_card`]): one that lists a `JSONRPC` interface at
//! version 1.0 (`supportedInterfaces`, v1.0's card) is spoken to in v1.0 there; any other
//! agent (no card, a v0.3 card, a card without such an interface) in v0.3, at the agents
//! file's URL, as before v1.0. The bridge writes its calls in v0.3's types
//! (`colloquy_protocol::a2a`) and this module respells them for v1.0 ([`spelt_v1`]) and
//! reads v1.0's answers back into those types ([`answer_from_v1`]), so everything after the
//! call (verdicts, replies, task records) is the same for both versions.

use colloquy_protocol::a2a::{A2aMessage, Artifact, Part, Request, SendResult, Task, TaskStatus};
use serde::Deserialize;
use serde_json::{Map, Value, json};

/// Where a remote agent's card is, below its JSON-RPC URL (a Colloquy agent's at
/// `/a2a/{agent}` is at `/a2a/{agent}/.well-known/agent-card.json`) or at its origin (an
/// agent served at a host's root path).
pub const CARD_PATH: &str = "/.well-known/agent-card.json";

/// The `A2A-Version` the bridge sends to a v1.0 agent.
pub const V1_VERSION: &str = "1.0";

/// How the bridge speaks to one remote agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Dialect {
    /// A2A v0.3 JSON-RPC at the agents file's URL, without an `A2A-Version` header.
    V0_3,
    /// A2A v1.0 JSON-RPC at `url`, with `A2A-Version: 1.0`.
    V1_0 {
        /// The card's JSONRPC 1.0 interface, as the bridge calls it.
        url: String,
        /// The card says `capabilities.streaming: true`: messages go out as
        /// `SendStreamingMessage` and their tasks are followed over its events.
        streaming: bool,
    },
}

impl Dialect {
    /// The dialect a card calls for, its agent reached at `endpoint` (the agents file's
    /// URL): v1.0 at the first `JSONRPC` interface of version `1.0` (or `1.0.x`), else v0.3.
    /// `own` says the card was read below `endpoint`, so it is that agent's; a card read at
    /// the origin may describe another agent there, so only an interface at `endpoint`'s
    /// own path counts.
    ///
    /// The bridge's bearer token goes wherever it calls, so an interface on another origin
    /// than `endpoint`'s is not used. One at `endpoint`'s host and path under another scheme
    /// or port is `endpoint` itself: Colloquy writes its cards' URLs from the request's
    /// `Host` as `http://`, so behind a TLS proxy its card names the plain-HTTP URL of the
    /// endpoint the agents file names with `https://`.
    pub fn of_card(card: &Value, endpoint: &str, own: bool) -> Dialect {
        let Ok(endpoint_url) = reqwest::Url::parse(endpoint) else {
            return Dialect::V0_3;
        };
        let streaming = card
            .get("capabilities")
            .and_then(|capabilities| capabilities.get("streaming"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let interfaces = card
            .get("supportedInterfaces")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        for interface in interfaces {
            let field = |name| interface.get(name).and_then(Value::as_str);
            let version = field("protocolVersion").unwrap_or_default();
            let is_v1 = version == "1.0" || version.starts_with("1.0.");
            if field("protocolBinding") != Some("JSONRPC") || !is_v1 {
                continue;
            }
            let Some(Ok(url)) = field("url").map(reqwest::Url::parse) else {
                continue;
            };
            let path = |url: &reqwest::Url| url.path().trim_end_matches('/').to_owned();
            if url.host_str() == endpoint_url.host_str() && path(&url) == path(&endpoint_url) {
                return Dialect::V1_0 {
                    url: endpoint.to_owned(),
                    streaming,
                };
            }
            if own && url.origin() == endpoint_url.origin() {
                return Dialect::V1_0 {
                    url: url.into(),
                    streaming,
                };
            }
        }
        Dialect::V0_3
    }

    /// Whether it is v1.0.
    pub fn is_v1(&self) -> bool {
        matches!(self, Dialect::V1_0 { .. })
    }

    /// Whether messages go out as `SendStreamingMessage`.
    pub fn streams(&self) -> bool {
        matches!(
            self,
            Dialect::V1_0 {
                streaming: true,
                ..
            }
        )
    }
}

/// Where to look for the card of the agent at `endpoint`, in order: below the URL, then at
/// its origin when that is elsewhere.
pub fn card_urls(endpoint: &str) -> Vec<String> {
    let mut urls = vec![format!("{}{CARD_PATH}", endpoint.trim_end_matches('/'))];
    if let Ok(url) = reqwest::Url::parse(endpoint)
        && let Some(Ok(at_root)) = url
            .origin()
            .is_tuple()
            .then(|| url.join(CARD_PATH).map(String::from))
        && !urls.contains(&at_root)
    {
        urls.push(at_root);
    }
    urls
}

/// v1.0's name of a v0.3 method the bridge calls.
pub fn v1_method(method: &str) -> &str {
    match method {
        "message/send" => "SendMessage",
        "message/stream" => "SendStreamingMessage",
        "tasks/get" => "GetTask",
        "tasks/cancel" => "CancelTask",
        other => other,
    }
}

/// A request of the bridge's (v0.3 names and shapes) as v1.0 spells it: the method renamed,
/// a message without `kind`, its role `ROLE_USER`, its parts v1.0's, `blocking` turned into
/// `returnImmediately`. `GetTask` and `CancelTask` take `{"id"}` as v0.3 did.
pub fn spelt_v1<P: serde::Serialize>(request: &Request<P>) -> Request<Value> {
    // The bridge's params are plain structs of strings and JSON values.
    let mut params = serde_json::to_value(&request.params).unwrap_or(Value::Null);
    if let Some(message) = params.get_mut("message").and_then(Value::as_object_mut) {
        message.remove("kind");
        message.insert("role".into(), json!("ROLE_USER"));
        if let Some(Value::Array(parts)) = message.get_mut("parts") {
            for part in parts.iter_mut() {
                if let Ok(v03) = serde_json::from_value::<Part>(part.clone()) {
                    *part = part_v1(&v03);
                }
            }
        }
    }
    if let Some(configuration) = params.get_mut("configuration") {
        let blocking = configuration
            .get("blocking")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        *configuration = json!({"returnImmediately": !blocking});
    }
    Request::new(request.id.clone(), v1_method(&request.method), params)
}

/// A v0.3 part as v1.0 writes it: exactly one of `text`, `data`, `raw`, `url`, a file's
/// name and type as `filename` and `mediaType`.
pub fn part_v1(part: &Part) -> Value {
    match part {
        Part::Text { text } => json!({"text": text}),
        Part::Data { data } => json!({"data": data}),
        Part::File { file } => {
            let mut out = Map::new();
            for (v03, v1) in [
                ("bytes", "raw"),
                ("uri", "url"),
                ("name", "filename"),
                ("mimeType", "mediaType"),
            ] {
                if let Some(value) = file.get(v03) {
                    out.insert(v1.into(), value.clone());
                }
            }
            Value::Object(out)
        }
    }
}

/// A v1.0 answer (`SendMessage`'s `{"task"}` or `{"message"}`, `GetTask`'s and
/// `CancelTask`'s bare task) as the v0.3 result the bridge reads; `Err` says what is wrong
/// with it.
pub fn answer_from_v1(result: Value) -> Result<SendResult, String> {
    let (task, message) = match result {
        Value::Object(mut fields) => match (fields.remove("task"), fields.remove("message")) {
            (Some(task), None) => (Some(task), None),
            (None, Some(message)) => (None, Some(message)),
            (None, None) if fields.contains_key("status") => (Some(Value::Object(fields)), None),
            _ => return Err("a result that is neither a task nor a message".to_owned()),
        },
        _ => return Err("a result that is not an object".to_owned()),
    };
    if let Some(task) = task {
        let task: TaskV1 = serde_json::from_value(task).map_err(|error| error.to_string())?;
        return task.into_v03().map(SendResult::Task);
    }
    let message: MessageV1 =
        serde_json::from_value(message.unwrap_or_default()).map_err(|error| error.to_string())?;
    message.into_v03().map(SendResult::Message)
}

/// A v1.0 `TaskStatus` (a `statusUpdate`'s) as v0.3's.
pub fn status_from_v1(status: Value) -> Result<TaskStatus, String> {
    let status: StatusV1 = serde_json::from_value(status).map_err(|error| error.to_string())?;
    Ok(TaskStatus {
        state: state_from_v1(&status.state),
        message: status.message.map(MessageV1::into_v03).transpose()?,
    })
}

/// A v1.0 `Artifact` (an `artifactUpdate`'s) as v0.3's.
pub fn artifact_from_v1(artifact: Value) -> Result<Artifact, String> {
    serde_json::from_value::<ArtifactV1>(artifact)
        .map_err(|error| error.to_string())?
        .into_v03()
}

/// A v1.0 task state (`TASK_STATE_INPUT_REQUIRED`) as v0.3 spells it (`input-required`).
pub fn state_from_v1(state: &str) -> String {
    state
        .strip_prefix("TASK_STATE_")
        .unwrap_or(state)
        .to_ascii_lowercase()
        .replace('_', "-")
}

/// A v1.0 `Task`, as much of it as the bridge reads.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TaskV1 {
    id: String,
    #[serde(default)]
    context_id: Option<String>,
    status: StatusV1,
    #[serde(default)]
    artifacts: Vec<ArtifactV1>,
    #[serde(default)]
    history: Vec<MessageV1>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
struct StatusV1 {
    state: String,
    #[serde(default)]
    message: Option<MessageV1>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ArtifactV1 {
    #[serde(default)]
    artifact_id: Option<String>,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    parts: Vec<PartV1>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageV1 {
    #[serde(default)]
    message_id: String,
    #[serde(default)]
    context_id: Option<String>,
    #[serde(default)]
    task_id: Option<String>,
    #[serde(default)]
    role: Option<String>,
    #[serde(default)]
    parts: Vec<PartV1>,
    #[serde(default)]
    metadata: Option<Map<String, Value>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PartV1 {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    data: Option<Value>,
    #[serde(default)]
    raw: Option<String>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    media_type: Option<String>,
}

impl TaskV1 {
    /// The v0.3 task. A task that wants input without a status message asks with the
    /// agent's latest message in its history (a Colloquy agent's task does so).
    fn into_v03(mut self) -> Result<Task, String> {
        let state = state_from_v1(&self.status.state);
        if self.status.message.is_none() && state == "input-required" {
            let latest = self
                .history
                .iter()
                .rposition(|message| message.role.as_deref() == Some("ROLE_AGENT"));
            self.status.message = latest.map(|at| self.history.swap_remove(at));
        }
        let message = self.status.message.map(MessageV1::into_v03).transpose()?;
        let artifacts = self
            .artifacts
            .into_iter()
            .map(ArtifactV1::into_v03)
            .collect::<Result<_, String>>()?;
        Ok(Task {
            kind: "task".to_owned(),
            id: self.id,
            context_id: self.context_id,
            status: TaskStatus { state, message },
            artifacts,
            metadata: self.metadata,
        })
    }
}

impl ArtifactV1 {
    fn into_v03(self) -> Result<Artifact, String> {
        Ok(Artifact {
            artifact_id: self.artifact_id,
            name: self.name,
            parts: parts_v03(self.parts)?,
        })
    }
}

impl MessageV1 {
    fn into_v03(self) -> Result<A2aMessage, String> {
        let role = match self.role.as_deref() {
            Some("ROLE_USER") => "user",
            _ => "agent",
        };
        Ok(A2aMessage {
            kind: "message".to_owned(),
            role: role.to_owned(),
            message_id: self.message_id,
            context_id: self.context_id,
            task_id: self.task_id,
            parts: parts_v03(self.parts)?,
            metadata: self.metadata,
        })
    }
}

fn parts_v03(parts: Vec<PartV1>) -> Result<Vec<Part>, String> {
    parts.into_iter().map(PartV1::into_v03).collect()
}

impl PartV1 {
    /// The same content as a v0.3 part; a file keeps its name and type.
    fn into_v03(self) -> Result<Part, String> {
        if let Some(text) = self.text {
            return Ok(Part::Text { text });
        }
        if let Some(data) = self.data {
            return Ok(Part::Data { data });
        }
        if self.raw.is_none() && self.url.is_none() {
            return Err("a part with none of text, data, raw and url".to_owned());
        }
        let mut file = Map::new();
        for (key, value) in [
            ("bytes", self.raw),
            ("uri", self.url),
            ("name", self.filename),
            ("mimeType", self.media_type),
        ] {
            if let Some(value) = value {
                file.insert(key.into(), Value::String(value));
            }
        }
        Ok(Part::File {
            file: Value::Object(file),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ENDPOINT: &str = "https://b.example/a2a/bob";

    fn card(interfaces: Value) -> Value {
        json!({"name": "bob", "supportedInterfaces": interfaces})
    }

    #[test]
    fn a_card_with_a_jsonrpc_1_0_interface_is_spoken_to_in_v1() {
        // A Colloquy card behind a TLS proxy: its URLs say http://, the endpoint https://.
        let colloquy = card(json!([
            {"url": "http://b.example/a2a/bob", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": "http://b.example/a2a/bob", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": "http://b.example/a2a/bob/rest", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}
        ]));
        assert_eq!(
            Dialect::of_card(&colloquy, ENDPOINT, true),
            Dialect::V1_0 {
                url: ENDPOINT.to_owned(),
                streaming: false
            }
        );
        let elsewhere_on_the_origin = card(json!([
            {"url": "https://b.example/rpc/v1", "protocolBinding": "JSONRPC", "protocolVersion": "1.0.2"}
        ]));
        assert_eq!(
            Dialect::of_card(&elsewhere_on_the_origin, ENDPOINT, true),
            Dialect::V1_0 {
                url: "https://b.example/rpc/v1".to_owned(),
                streaming: false
            }
        );
        // Read at the origin, the card may be another agent's: only the endpoint's path.
        assert_eq!(
            Dialect::of_card(&elsewhere_on_the_origin, ENDPOINT, false),
            Dialect::V0_3
        );
        assert!(Dialect::of_card(&colloquy, ENDPOINT, false).is_v1());
        // Streaming, when the card says so.
        let mut streaming = colloquy.clone();
        streaming["capabilities"] = json!({"streaming": true, "pushNotifications": false});
        assert!(Dialect::of_card(&streaming, ENDPOINT, true).streams());
        assert!(!Dialect::of_card(&colloquy, ENDPOINT, true).streams());
    }

    #[test]
    fn other_cards_are_spoken_to_in_v0_3() {
        let cards = [
            // A v0.3 card: no supportedInterfaces.
            json!({"name": "bob", "url": ENDPOINT, "protocolVersion": "0.3.0"}),
            // v1.0 only over HTTP+JSON, or JSON-RPC only at 0.3.
            card(json!([
                {"url": ENDPOINT, "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
                {"url": ENDPOINT, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
            ])),
            // Another version, and 1.0 on another origin (the token is not sent there).
            card(json!([
                {"url": ENDPOINT, "protocolBinding": "JSONRPC", "protocolVersion": "1.1"},
                {"url": "https://c.example/a2a/bob", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ])),
            json!("not a card"),
        ];
        for card in cards {
            assert_eq!(
                Dialect::of_card(&card, ENDPOINT, true),
                Dialect::V0_3,
                "{card}"
            );
        }
    }

    #[test]
    fn the_card_is_looked_for_below_the_url_then_at_its_origin() {
        assert_eq!(
            card_urls("http://b.example:7700/a2a/bob"),
            [
                "http://b.example:7700/a2a/bob/.well-known/agent-card.json",
                "http://b.example:7700/.well-known/agent-card.json"
            ]
        );
        assert_eq!(
            card_urls("http://127.0.0.1:9/"),
            ["http://127.0.0.1:9/.well-known/agent-card.json"]
        );
    }

    #[test]
    fn a_message_send_is_respelt_as_send_message() {
        let request = Request::new(
            "c/m".to_owned(),
            "message/send",
            json!({"message": {"kind": "message", "role": "user", "messageId": "m",
                "contextId": "c", "parts": [{"kind": "data", "data": {"x": 1}},
                {"kind": "file", "file": {"name": "a.txt", "mimeType": "text/plain", "uri": "http://f"}}],
                "metadata": {"colloquy": {"performative": "request"}}},
                "configuration": {"blocking": true}}),
        );
        assert_eq!(
            serde_json::to_value(spelt_v1(&request)).expect("json"),
            json!({"jsonrpc": "2.0", "id": "c/m", "method": "SendMessage", "params": {
                "message": {"role": "ROLE_USER", "messageId": "m", "contextId": "c",
                    "parts": [{"data": {"x": 1}},
                        {"url": "http://f", "filename": "a.txt", "mediaType": "text/plain"}],
                    "metadata": {"colloquy": {"performative": "request"}}},
                "configuration": {"returnImmediately": false}}})
        );
        let get = Request::new("g".to_owned(), "tasks/get", json!({"id": "t"}));
        assert_eq!(
            serde_json::to_value(spelt_v1(&get)).expect("json"),
            json!({"jsonrpc": "2.0", "id": "g", "method": "GetTask", "params": {"id": "t"}})
        );
    }

    #[test]
    fn v1_answers_read_as_v0_3_results() {
        let task = answer_from_v1(json!({"task": {"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED", "timestamp": "2026-12-01T00:00:00Z",
                "message": {"messageId": "s", "role": "ROLE_AGENT", "parts": [{"text": "which room?"}]}},
            "artifacts": [{"artifactId": "a", "parts": [{"raw": "dGNr", "filename": "a.txt"}]}],
            "history": []}}))
        .expect("a task");
        let SendResult::Task(task) = task else {
            panic!("not a task: {task:?}")
        };
        assert_eq!(task.status.state, "input-required");
        let said = task.status.message.expect("a status message");
        assert_eq!((said.role.as_str(), said.parts.len()), ("agent", 1));
        assert_eq!(
            task.artifacts[0].parts,
            [Part::File {
                file: json!({"bytes": "dGNr", "name": "a.txt"})
            }]
        );
        // Without a status message, the agent's latest message in the history asks.
        let asking = answer_from_v1(json!({"task": {"id": "t",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED"},
            "history": [
                {"messageId": "1", "role": "ROLE_USER", "parts": [{"data": {"action": "book"}}]},
                {"messageId": "2", "role": "ROLE_AGENT", "parts": [{"data": {"question": "which city?"}}]}
            ]}}))
        .expect("a task");
        let SendResult::Task(asking) = asking else {
            panic!("not a task: {asking:?}")
        };
        assert_eq!(
            asking.status.message.map(|m| m.parts),
            Some(vec![Part::Data {
                data: json!({"question": "which city?"})
            }])
        );
        // GetTask and CancelTask answer the bare task.
        let bare = answer_from_v1(json!({"id": "t", "status": {"state": "TASK_STATE_CANCELED"}}))
            .expect("a bare task");
        assert!(matches!(bare, SendResult::Task(task) if task.status.state == "canceled"));
        let message = answer_from_v1(json!({"message": {"messageId": "r", "role": "ROLE_AGENT",
            "parts": [{"data": {"ok": true}}]}}))
        .expect("a message");
        assert!(
            matches!(message, SendResult::Message(m) if m.parts == [Part::Data { data: json!({"ok": true}) }])
        );
        for broken in [
            json!([]),
            json!({"task": {}, "message": {}}),
            json!({"message": {"parts": [{}]}}),
        ] {
            assert!(answer_from_v1(broken.clone()).is_err(), "{broken}");
        }
    }
}
