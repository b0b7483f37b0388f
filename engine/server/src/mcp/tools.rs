//! The MCP tools: their catalogue (`tools.yaml`) and what each does, through the API as the
//! caller ([`Api`]). A refusal by the API is a tool error the model can read (what was
//! refused and why, and for a message the moves open instead); arguments that do not fit a
//! tool's schema are a JSON-RPC `invalid params` error, as the MCP spec asks.

use std::sync::{Arc, OnceLock};

use colloquy_core::engine::TemplateSource;
use colloquy_protocol::message::AgentId;
use rmcp::ErrorData;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

use super::api::{Api, Refused, encode};
use super::protocols;

/// What a tool runs with: the API as the caller, the caller's id, the templates.
pub struct ToolContext {
    /// The API, called with the caller's credential.
    pub api: Api,
    /// The caller.
    pub agent: AgentId,
    /// The templates new conversations start from.
    pub templates: Arc<dyn TemplateSource>,
}

/// The tools, as `tools/list` shows them.
pub fn catalogue() -> &'static [Tool] {
    static TOOLS: OnceLock<Vec<Tool>> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let entries: Vec<Entry> = serde_norway::from_str(include_str!("tools.yaml"))
            .expect("tools.yaml is a list of tools (checked by a unit test)");
        entries.into_iter().map(Entry::into_tool).collect()
    })
}

/// The tool named `name`.
pub fn find(name: &str) -> Option<Tool> {
    catalogue().iter().find(|tool| tool.name == name).cloned()
}

/// One tool of `tools.yaml`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Entry {
    name: String,
    title: String,
    description: String,
    #[serde(default)]
    read_only: bool,
    input: Value,
    output: Value,
}

impl Entry {
    fn into_tool(self) -> Tool {
        serde_json::from_value(json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input,
            "outputSchema": self.output,
            "annotations": {
                "title": self.title,
                "readOnlyHint": self.read_only,
                // Tools act inside this engine only.
                "openWorldHint": false,
            },
        }))
        .expect("a tool of tools.yaml has the shape of an MCP tool")
    }
}

/// Runs tool `name` with `arguments`.
pub async fn call(
    context: &ToolContext,
    name: &str,
    arguments: Option<JsonObject>,
) -> Result<CallToolResult, ErrorData> {
    let arguments = Value::Object(arguments.unwrap_or_default());
    match name {
        "list_templates" => list_templates(context, parse(name, arguments)?),
        "start_conversation" => start_conversation(context, parse(name, arguments)?).await,
        "send_message" => send_message(context, parse(name, arguments)?).await,
        "wait_for_messages" => wait_for_messages(context, parse(name, arguments)?).await,
        "get_conversation" => get_conversation(context, parse(name, arguments)?).await,
        "list_conversations" => list_conversations(context, parse(name, arguments)?).await,
        "list_commitments" => list_commitments(context, parse(name, arguments)?).await,
        _ => Err(ErrorData::invalid_params(
            format!("unknown tool `{name}`: tools/list names the tools"),
            None,
        )),
    }
}

/// `arguments` as tool `tool`'s input, or `invalid params` naming the field at fault.
fn parse<T: DeserializeOwned>(tool: &str, arguments: Value) -> Result<T, ErrorData> {
    serde_path_to_error::deserialize(arguments).map_err(|error| {
        let path = error.path().to_string();
        ErrorData::invalid_params(
            format!("arguments of `{tool}` at `{path}`: {}", error.inner()),
            Some(json!({"tool": tool, "path": path})),
        )
    })
}

/// A refusal of the API as a tool error.
fn refused(refusal: &Refused, extra: Map<String, Value>) -> CallToolResult {
    let mut body = Map::new();
    body.insert("result".into(), "refused".into());
    body.insert("error".into(), refusal.to_json());
    body.extend(extra);
    CallToolResult::structured_error(Value::Object(body))
}

/// The answer of a read, or the refusal as a tool error.
fn answered(result: Result<Value, Refused>) -> CallToolResult {
    match result {
        Ok(value) => CallToolResult::structured(value),
        Err(refusal) => refused(&refusal, Map::new()),
    }
}

/// A query string of the given pairs, the absent ones left out.
fn query(pairs: &[(&str, Option<String>)]) -> String {
    let present: Vec<String> = pairs
        .iter()
        .filter_map(|(key, value)| {
            value
                .as_ref()
                .map(|value| format!("{key}={}", encode(value)))
        })
        .collect();
    if present.is_empty() {
        String::new()
    } else {
        format!("?{}", present.join("&"))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListTemplates {
    name: Option<String>,
}

fn list_templates(
    context: &ToolContext,
    input: ListTemplates,
) -> Result<CallToolResult, ErrorData> {
    let names = match input.name {
        Some(name) => vec![Arc::from(name)],
        None => context.templates.names(),
    };
    let templates: Vec<Value> = names
        .iter()
        .filter_map(|name| context.templates.latest(name))
        .map(|template| protocols::summary(&template))
        .collect();
    Ok(CallToolResult::structured(
        json!({ "templates": templates }),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StartConversation {
    template: String,
    participants: Vec<String>,
    performative: Option<String>,
    content: Option<Value>,
    parameters: Option<Value>,
    context: Option<Value>,
    conversation_id: Option<String>,
    deadline_ms: Option<u64>,
}

async fn start_conversation(
    context: &ToolContext,
    input: StartConversation,
) -> Result<CallToolResult, ErrorData> {
    let mut body = json!({"template": input.template, "participants": input.participants});
    match (input.performative, input.content) {
        (Some(performative), content) => {
            body["message"] = json!({
                "performative": performative,
                "content": content.unwrap_or_else(|| json!({})),
            });
        }
        (None, Some(_)) => {
            return Err(ErrorData::invalid_params(
                "arguments of `start_conversation` at `content`: content without a \
                 performative; name the opening message's performative",
                None,
            ));
        }
        (None, None) => {}
    }
    for (key, value) in [
        ("parameters", input.parameters),
        ("context", input.context),
        ("conversation_id", input.conversation_id.map(Value::from)),
        ("deadline_ms", input.deadline_ms.map(Value::from)),
    ] {
        if let Some(value) = value {
            body[key] = value;
        }
    }
    match context.api.post("/v1/conversations", &body).await {
        Ok(conversation) => {
            let id = conversation["id"].as_str().unwrap_or_default().to_owned();
            let moves = moves(context, &id).await;
            Ok(CallToolResult::structured(
                json!({"conversation": conversation, "moves": moves}),
            ))
        }
        Err(refusal) => Ok(refused(&refusal, Map::new())),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct SendMessage {
    conversation_id: String,
    performative: String,
    content: Option<Value>,
    #[serde(default)]
    to: Vec<String>,
    in_reply_to: Option<String>,
    message_id: Option<String>,
}

async fn send_message(
    context: &ToolContext,
    input: SendMessage,
) -> Result<CallToolResult, ErrorData> {
    let mut body = json!({
        "performative": input.performative,
        "content": input.content.unwrap_or_else(|| json!({})),
        "to": input.to,
    });
    if let Some(in_reply_to) = input.in_reply_to {
        body["in_reply_to"] = in_reply_to.into();
    }
    if let Some(message_id) = input.message_id {
        body["message_id"] = message_id.into();
    }
    let path = format!(
        "/v1/conversations/{}/messages",
        encode(&input.conversation_id)
    );
    match context.api.post(&path, &body).await {
        Ok(receipt) => {
            let mut result = Map::new();
            let kind = if receipt.get("violation").is_some_and(|v| !v.is_null()) {
                "accepted_with_violation"
            } else {
                "accepted"
            };
            result.insert("result".into(), kind.into());
            if let Value::Object(fields) = receipt {
                result.extend(fields);
            }
            Ok(CallToolResult::structured(Value::Object(result)))
        }
        Err(refusal) => {
            let allowed = moves(context, &input.conversation_id).await;
            let mut extra = Map::new();
            extra.insert("allowed_moves".into(), allowed);
            Ok(refused(&refusal, extra))
        }
    }
}

/// The moves open to the caller in conversation `id`, or none when they cannot be read.
async fn moves(context: &ToolContext, id: &str) -> Value {
    let path = format!("/v1/conversations/{}/moves", encode(id));
    match context.api.get(&path).await {
        Ok(mut answer) => answer["moves"].take(),
        Err(_) => json!([]),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WaitForMessages {
    #[serde(default)]
    cursor: u64,
    wait_ms: Option<u64>,
    limit: Option<u32>,
}

/// Longest wait of `wait_for_messages` (the long poll's own bound).
const MAX_WAIT_MS: u64 = 30_000;
/// `wait_for_messages`' wait when the model names none.
const DEFAULT_WAIT_MS: u64 = 10_000;

async fn wait_for_messages(
    context: &ToolContext,
    input: WaitForMessages,
) -> Result<CallToolResult, ErrorData> {
    let inbox = format!("/v1/agents/{}/inbox", encode(&context.agent));
    // The cursor the model passes is what it has read: acknowledged now, so a result that
    // never reached it (a lost tool result) is read again.
    if input.cursor > 0
        && let Err(refusal) = context
            .api
            .post(&format!("{inbox}/ack"), &json!({"through": input.cursor}))
            .await
    {
        return Ok(refused(&refusal, Map::new()));
    }
    let wait_ms = input.wait_ms.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS);
    let limit = input.limit.unwrap_or(50).clamp(1, 256);
    let path = format!(
        "{inbox}/poll{}",
        query(&[
            ("after", Some(input.cursor.to_string())),
            ("limit", Some(limit.to_string())),
            ("wait_ms", Some(wait_ms.to_string())),
        ])
    );
    Ok(match context.api.get(&path).await {
        Ok(mut page) => CallToolResult::structured(json!({
            "messages": page["items"].take(),
            "next_cursor": page["next_after"].as_u64().unwrap_or(input.cursor),
        })),
        Err(refusal) => refused(&refusal, Map::new()),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetConversation {
    conversation_id: String,
}

async fn get_conversation(
    context: &ToolContext,
    input: GetConversation,
) -> Result<CallToolResult, ErrorData> {
    let path = format!("/v1/conversations/{}", encode(&input.conversation_id));
    Ok(match context.api.get(&path).await {
        Ok(conversation) => {
            let moves = moves(context, &input.conversation_id).await;
            CallToolResult::structured(json!({"conversation": conversation, "moves": moves}))
        }
        Err(refusal) => refused(&refusal, Map::new()),
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListConversations {
    state: Option<String>,
    template: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

async fn list_conversations(
    context: &ToolContext,
    input: ListConversations,
) -> Result<CallToolResult, ErrorData> {
    let path = format!(
        "/v1/conversations{}",
        query(&[
            ("order", Some("desc".into())),
            ("state", input.state),
            ("template", input.template),
            ("limit", input.limit.map(|limit| limit.to_string())),
            ("cursor", input.cursor),
        ])
    );
    Ok(answered(context.api.get(&path).await))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListCommitments {
    role: Option<String>,
    state: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

async fn list_commitments(
    context: &ToolContext,
    input: ListCommitments,
) -> Result<CallToolResult, ErrorData> {
    let path = format!(
        "/v1/commitments{}",
        query(&[
            ("role", input.role),
            ("state", input.state),
            ("limit", input.limit.map(|limit| limit.to_string())),
            ("cursor", input.cursor),
        ])
    );
    Ok(answered(context.api.get(&path).await))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tool_has_object_schemas_and_a_runner() {
        let tools = catalogue();
        assert_eq!(tools.len(), 7);
        for tool in tools {
            assert_eq!(tool.input_schema["type"], "object", "{}", tool.name);
            let output = tool.output_schema.as_ref().expect("an output schema");
            assert_eq!(output["type"], "object", "{}", tool.name);
            assert!(tool.description.as_ref().is_some_and(|d| d.len() > 80));
        }
        let runners = [
            "list_templates",
            "start_conversation",
            "send_message",
            "wait_for_messages",
            "get_conversation",
            "list_conversations",
            "list_commitments",
        ];
        let names: Vec<&str> = tools.iter().map(|tool| &*tool.name).collect();
        assert_eq!(names, runners);
    }

    #[test]
    fn arguments_that_do_not_fit_name_the_field() {
        let error = parse::<SendMessage>("send_message", json!({"conversation_id": "c"}))
            .err()
            .expect("performative is required");
        assert!(error.message.contains("send_message"), "{}", error.message);
        let error = parse::<WaitForMessages>("wait_for_messages", json!({"cursor": "x"}))
            .err()
            .expect("a cursor is a number");
        assert!(error.message.contains("cursor"), "{}", error.message);
    }
}
