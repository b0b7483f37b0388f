//! Inward: Colloquy agents as A2A agents: A2A clients (JSON-RPC 2.0, A2A 0.3) talk to an agent
//! through the engine, each A2A task being a conversation.
//!
//! - `GET /a2a/{agent}/.well-known/agent-card.json`: the agent's card; its skills are the
//!   templates an initiator can start.
//! - `POST /a2a/{agent}`: `message/send` starts a conversation with `{agent}` as its
//!   participant and the caller (by its usual credentials) as initiator (template and
//!   opening performative from `metadata.colloquy`, else `fipa-request` and its opening
//!   move), or, with a `taskId`, sends into that conversation; `tasks/get` reads one;
//!   `tasks/cancel` sends `cancel` into it. `configuration.blocking` waits until the
//!   conversation ends.
//!
//! A task is the conversation as the caller sees it ([`task_of`]): its state from the
//! conversation's status and outcome, its artifacts the participants' results (`inform`,
//! `propose`, `confirm`). The outward direction, remote A2A agents as participants, is
//! `colloquy_a2a::outward`.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use colloquy_protocol::a2a::{MessageSendParams, RpcError, Task, TaskIdParams};
use colloquy_protocol::conversation::ConversationView;
use colloquy_protocol::message::{SendMessage, StartConversation};
use colloquy_protocol::template::Role;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::caller::A2aCaller;
use super::card::opening_performative;
pub use super::card::{card, card_v03};
use super::push;
use super::stream::{self, Envelope};
use super::task::content_of;
pub use super::task::task_of;
use super::v1::{self, Version};
use crate::AppState;
use crate::error::ApiError;
use crate::extract::{BodyError, CappedBody, MAX_BODY_BYTES, PathParams};
use crate::json::JsonResponse;
use crate::streams::SseStream;
use colloquy_core::error::{EngineError, ErrorKind};
use colloquy_core::listing::{ConversationFilter, MAX_PAGE};

/// Longest a blocking `message/send` waits for its conversation to end before it answers
/// with the task as it stands.
pub const BLOCKING_WAIT: Duration = Duration::from_secs(30);
/// Longest a cancel waits for the participant to confirm it (the protocols end a task as
/// cancelled only when the participant says so) before it answers with the task as it
/// stands.
pub const CANCEL_WAIT: Duration = Duration::from_secs(5);
/// The template a `message/send` starts when its metadata names none, unless the server
/// names another (`colloquy serve --a2a-template`).
pub const DEFAULT_TEMPLATE: &str = "fipa-request";

/// JSON-RPC and A2A error codes.
pub(super) mod code {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    pub const TASK_NOT_FOUND: i64 = -32001;
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    pub const PUSH_NOTIFICATION_NOT_SUPPORTED: i64 = -32003;
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    pub const EXTENDED_AGENT_CARD_NOT_CONFIGURED: i64 = -32007;
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
    pub const VERSION_NOT_SUPPORTED: i64 = -32009;
}

/// The v1.0 methods this endpoint serves.
const V1_METHODS: &[&str] = &[
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
];
/// The v0.3 methods this endpoint serves.
const V03_METHODS: &[&str] = &[
    "message/send",
    "message/stream",
    "tasks/get",
    "tasks/cancel",
    "tasks/resubscribe",
];

/// `POST /a2a/{agent}`: one JSON-RPC call. Credentials are checked as for `/v1` (a 401 is
/// an HTTP error); everything after is a JSON-RPC answer with status 200.
pub async fn rpc(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams(agent): PathParams<String>,
    headers: HeaderMap,
    CappedBody(body): CappedBody,
) -> Result<Response, ApiError> {
    let body = match body {
        Ok(body) => body,
        Err(BodyError::TooLarge) => {
            return Err(ApiError::TooLarge(MAX_BODY_BYTES));
        }
        Err(BodyError::TimedOut) => {
            return Err(ApiError::BodyTimeout(
                crate::extract::BODY_READ_TIMEOUT.as_secs(),
            ));
        }
        Err(BodyError::Unreadable(error)) => {
            return Ok(answer(
                Value::Null,
                Err(rpc_error(code::PARSE_ERROR, error)),
            ));
        }
    };
    if let Some(media_type) = not_json(&headers) {
        let error = rpc_error(
            code::CONTENT_TYPE_NOT_SUPPORTED,
            format!("a JSON-RPC request is `application/json`, not `{media_type}`"),
        );
        return Ok(answer(
            Value::Null,
            Err(super::rest::with_error_info(error)),
        ));
    }
    let request: Call = match serde_json::from_slice::<Value>(&body) {
        Err(error) => {
            let error = rpc_error(code::PARSE_ERROR, format!("not JSON: {error}"));
            return Ok(answer(Value::Null, Err(error)));
        }
        Ok(value) => {
            let id = value.get("id").cloned().unwrap_or(Value::Null);
            match serde_json::from_value(value) {
                Ok(request) => request,
                Err(error) => {
                    let message = format!("not a JSON-RPC 2.0 request: {error}");
                    return Ok(answer(id, Err(rpc_error(code::INVALID_REQUEST, message))));
                }
            }
        }
    };
    if request.jsonrpc != "2.0" {
        let error = rpc_error(code::INVALID_REQUEST, "`jsonrpc` must be \"2.0\"");
        return Ok(answer(request.id, Err(error)));
    }
    let id = request.id;
    let caller = caller.agent()?.clone();
    let version = match v1::version(&headers) {
        Ok(version) => version,
        Err(why) => {
            let error = super::rest::with_error_info(rpc_error(code::VERSION_NOT_SUPPORTED, why));
            return Ok(answer(id, Err(error)));
        }
    };
    // v1.0's A2A errors carry their `ErrorInfo`; v0.3's carry nothing more.
    let respelt = |error: RpcError| match version {
        Version::V1_0 => super::rest::with_error_info(error),
        Version::V0_3 => error,
    };
    let streamed = match (version, request.method.as_str()) {
        (Version::V1_0, "SendStreamingMessage") | (Version::V0_3, "message/stream") => {
            Some(Streamed::Send)
        }
        (Version::V1_0, "SubscribeToTask") | (Version::V0_3, "tasks/resubscribe") => {
            Some(Streamed::Subscribe)
        }
        _ => None,
    };
    if let Some(streamed) = streamed {
        let envelope = Envelope::JsonRpc(id.clone());
        let opened = open_stream(
            &state,
            &caller,
            &agent,
            version,
            streamed,
            request.params,
            envelope,
        )
        .await;
        return Ok(match opened {
            Ok(stream) => stream.into_response(),
            Err(error) => answer(id, Err(respelt(error))),
        });
    }
    let result = match version {
        Version::V0_3 => call_v03(&state, &caller, &agent, request.method, request.params).await,
        Version::V1_0 => call_v1(&state, &caller, &agent, &request.method, request.params).await,
    };
    Ok(answer(id, result.map_err(respelt)))
}

/// One v0.3 call: `message/send`, `tasks/get`, `tasks/cancel`.
/// The request's `Content-Type` when it names one that is not JSON (`application/json`,
/// or any `+json` type); a request without one is read as JSON.
pub(super) fn not_json(headers: &HeaderMap) -> Option<String> {
    let given = headers.get(header::CONTENT_TYPE)?;
    let text = given.to_str().unwrap_or("?");
    let media_type = text
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let json = media_type == "application/json" || media_type.ends_with("+json");
    (!json).then(|| colloquy_core::log_safe::LogSafe(text).to_string())
}

async fn call_v03(
    state: &AppState,
    caller: &str,
    agent: &str,
    method: String,
    params_given: Value,
) -> Result<Value, RpcError> {
    let task = match method.as_str() {
        "message/send" => send(state, caller, agent, params(params_given)?).await?,
        "tasks/get" => {
            let task: TaskIdParams = params(params_given)?;
            task_of(&read_agents_view(state, caller, agent, &task.id).await?)
        }
        "tasks/cancel" => {
            let task: TaskIdParams = params(params_given)?;
            read_agents_view(state, caller, agent, &task.id).await?;
            cancel(state, caller, &task.id).await?
        }
        other => return Err(no_method(other, Version::V0_3)),
    };
    Ok(json!(task))
}

/// One v1.0 call: `SendMessage`, `GetTask`, `CancelTask`; the other methods of v1.0 are
/// answered with the spec's error for a capability the card does not claim.
pub(super) async fn call_v1(
    state: &AppState,
    caller: &str,
    agent: &str,
    method: &str,
    params_given: Value,
) -> Result<Value, RpcError> {
    let invalid = |why: String| rpc_error(code::INVALID_PARAMS, why);
    match method {
        "SendMessage" => {
            let mut request: v1::SendMessageRequest = params(params_given)?;
            let history = request.history_length().map_err(invalid)?;
            let push = take_push(state, &mut request).await?;
            let sent = send(state, caller, agent, request.into_v03().map_err(invalid)?).await?;
            attach_push(state, caller, &sent.id, push).await?;
            let view = read_view(state, caller, &sent.id).await?;
            if let Some(reply) = v1::direct_reply(&view) {
                return Ok(reply);
            }
            Ok(json!({"task": v1::task(&task_of(&view), &view, history)}))
        }
        "GetTask" => {
            let request: v1::GetTaskRequest = params(params_given)?;
            let history = request.history().map_err(invalid)?;
            let view = read_agents_view(state, caller, agent, &request.id).await?;
            Ok(v1::task(&task_of(&view), &view, history))
        }
        "CancelTask" => {
            let request: v1::CancelTaskRequest = params(params_given)?;
            read_agents_view(state, caller, agent, &request.id).await?;
            cancel(state, caller, &request.id).await?;
            let view = read_view(state, caller, &request.id).await?;
            Ok(v1::task(&task_of(&view), &view, None))
        }
        "CreateTaskPushNotificationConfig" => {
            let request: push::ConfigRequest = params(params_given)?;
            let Some(task) = request.task_id.clone().filter(|task| !task.is_empty()) else {
                return Err(invalid("params.taskId: required".to_owned()));
            };
            read_agents_view(state, caller, agent, &task).await?;
            let config = request
                .checked(&task, caller, state.a2a_push_allow_private())
                .await
                .map_err(|why| invalid(format!("params.{why}")))?;
            Ok(push::config_json(&push::set(state, config).await?))
        }
        "GetTaskPushNotificationConfig" => {
            let request: push::ConfigId = params(params_given)?;
            read_agents_view(state, caller, agent, &request.task_id).await?;
            let configs = push::of_task(state, &request.task_id).await?;
            configs
                .iter()
                .find(|config| config.id == request.id && &*config.owner == caller)
                .map(push::config_json)
                .ok_or_else(|| {
                    rpc_error(
                        code::TASK_NOT_FOUND,
                        format!(
                            "task `{}` has no push config `{}` of yours",
                            request.task_id, request.id
                        ),
                    )
                })
        }
        "ListTaskPushNotificationConfigs" => {
            let request: push::ConfigList = params(params_given)?;
            read_agents_view(state, caller, agent, &request.task_id).await?;
            let configs: Vec<Value> = push::of_task(state, &request.task_id)
                .await?
                .iter()
                .filter(|config| &*config.owner == caller)
                .map(push::config_json)
                .collect();
            Ok(json!({"configs": configs, "nextPageToken": ""}))
        }
        "DeleteTaskPushNotificationConfig" => {
            let request: push::ConfigId = params(params_given)?;
            read_agents_view(state, caller, agent, &request.task_id).await?;
            let configs = push::of_task(state, &request.task_id).await?;
            let someone_elses = configs
                .iter()
                .any(|config| config.id == request.id && &*config.owner != caller);
            if !someone_elses {
                push::delete(state, &request.task_id, &request.id).await?;
            }
            Ok(json!({}))
        }
        "GetExtendedAgentCard" => Err(rpc_error(
            code::EXTENDED_AGENT_CARD_NOT_CONFIGURED,
            "this agent has no extended agent card",
        )),
        "ListTasks" => {
            let request: v1::ListTasksRequest = params(params_given)?;
            let listing = request.checked().map_err(invalid)?;
            list_tasks(state, caller, agent, &listing).await
        }
        other => Err(no_method(other, Version::V1_0)),
    }
}

/// `ListTasks`: the caller's tasks with `agent` (conversations the caller can see that
/// `agent` takes part in), latest change first, then by id; a page token is the position
/// of a page's last task in that order. It reads every matching conversation to order and
/// count them (`totalSize`): right for the tasks one client has with one agent, not for
/// millions (that would take an index by change time).
async fn list_tasks(
    state: &AppState,
    caller: &str,
    agent: &str,
    listing: &v1::TaskListing,
) -> Result<Value, RpcError> {
    let engine = state.engine();
    let mut matching: Vec<(u64, ConversationView)> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let filter = ConversationFilter {
            participant: Some(agent.to_owned()),
            status: None,
            outcome: None,
            template: None,
            after: cursor.take(),
            limit: MAX_PAGE,
            // The order is by change time, sorted below.
            newest_first: false,
        };
        let (page, more) = engine.list(Some(caller), &filter).await;
        for summary in &page {
            if listing
                .context_id
                .as_deref()
                .is_some_and(|context| context != &*summary.id)
            {
                continue;
            }
            // Gone since it was listed (retention): not a task any more.
            let Ok(view) = engine.view(&summary.id, Some(caller)).await else {
                continue;
            };
            let changed_at = v1::changed_at(&view).unwrap_or(0);
            if listing
                .changed_since
                .is_some_and(|since| changed_at < since)
            {
                continue;
            }
            if let Some(state) = &listing.state
                && *state != v1::task_state(&task_of(&view).status.state)
            {
                continue;
            }
            matching.push((changed_at, view));
        }
        match page.last() {
            Some(last) if more => cursor = Some(last.id.to_string()),
            _ => break,
        }
    }
    matching.sort_by(|(at_a, a), (at_b, b)| at_b.cmp(at_a).then_with(|| a.id.cmp(&b.id)));
    let total_size = matching.len();
    let mut following = matching.into_iter().filter(|(changed_at, view)| {
        listing
            .after
            .as_ref()
            .is_none_or(|position| position.is_followed_by(*changed_at, &view.id))
    });
    let page: Vec<(u64, ConversationView)> = following.by_ref().take(listing.page_size).collect();
    let next_page_token = match (following.next(), page.last()) {
        (Some(_), Some((changed_at, view))) => v1::PagePosition {
            changed_at: *changed_at,
            id: view.id.to_string(),
        }
        .token(),
        _ => String::new(),
    };
    let tasks: Vec<Value> = page
        .iter()
        .map(|(_, view)| {
            let mut task = v1::task(&task_of(view), view, Some(listing.history_length));
            if let Some(fields) = task.as_object_mut() {
                if listing.include_artifacts {
                    fields.entry("artifacts").or_insert_with(|| json!([]));
                } else {
                    fields.remove("artifacts");
                }
            }
            task
        })
        .collect();
    Ok(json!({
        "tasks": tasks,
        "nextPageToken": next_page_token,
        "pageSize": listing.page_size,
        "totalSize": total_size,
    }))
}

/// What a streaming call does before it streams.
#[derive(Clone, Copy, Debug)]
pub(super) enum Streamed {
    /// Sends the message (starting a task or continuing one), then follows the task.
    Send,
    /// Follows a task that has not ended.
    Subscribe,
}

/// Opens the event stream of a streaming call: `SendStreamingMessage` / `message/stream`
/// send first (without waiting), `SubscribeToTask` / `tasks/resubscribe` check the task is
/// still going (an ended one is `UnsupportedOperationError`, as the spec says).
pub(super) async fn open_stream(
    state: &AppState,
    caller: &str,
    agent: &str,
    version: Version,
    streamed: Streamed,
    params_given: Value,
    envelope: Envelope,
) -> Result<SseStream, RpcError> {
    let invalid = |why: String| rpc_error(code::INVALID_PARAMS, why);
    let id = match (streamed, version) {
        (Streamed::Send, Version::V1_0) => {
            let mut request: v1::SendMessageRequest = params(params_given)?;
            let push = take_push(state, &mut request).await?;
            let mut sent = request.into_v03().map_err(invalid)?;
            sent.configuration = None;
            let id = send(state, caller, agent, sent).await?.id;
            attach_push(state, caller, &id, push).await?;
            id
        }
        (Streamed::Send, Version::V0_3) => {
            let mut sent: MessageSendParams = params(params_given)?;
            sent.configuration = None;
            send(state, caller, agent, sent).await?.id
        }
        (Streamed::Subscribe, _) => {
            let task: TaskIdParams = params(params_given)?;
            let view = read_agents_view(state, caller, agent, &task.id).await?;
            if stream::is_terminal(&task_of(&view).status.state) {
                return Err(rpc_error(
                    code::UNSUPPORTED_OPERATION,
                    format!(
                        "task `{}` has ended: there is nothing to subscribe to; GetTask \
                         reads it",
                        task.id
                    ),
                ));
            }
            task.id
        }
    };
    let until = match streamed {
        Streamed::Send => stream::Until::Settled,
        Streamed::Subscribe => stream::Until::Ended,
    };
    Ok(stream::follow(
        state.clone(),
        caller.to_owned(),
        id,
        version,
        envelope,
        until,
    ))
}

/// A method this endpoint does not know in `version`, naming the version that has it.
fn no_method(method: &str, version: Version) -> RpcError {
    let (spoken, other, header) = match version {
        Version::V0_3 => (V03_METHODS, V1_METHODS, "A2A-Version: 1.0"),
        Version::V1_0 => (V1_METHODS, V03_METHODS, "no A2A-Version header, or 0.3"),
    };
    let hint = if other.contains(&method) {
        format!(" (`{method}` is a method of the other version: send it with {header})")
    } else {
        String::new()
    };
    rpc_error(
        code::METHOD_NOT_FOUND,
        format!(
            "no method `{method}` here{hint}; in this version this endpoint takes {}",
            spoken.join(", ")
        ),
    )
}

/// A JSON-RPC request as a client sends it (its id may be a string or a number).
#[derive(serde::Deserialize)]
struct Call {
    jsonrpc: String,
    #[serde(default)]
    id: Value,
    method: String,
    #[serde(default)]
    params: Value,
}

/// The JSON-RPC response: `result` or `error`, always with status 200.
fn answer(id: Value, result: Result<Value, RpcError>) -> Response {
    #[derive(Serialize)]
    struct Answer {
        jsonrpc: &'static str,
        id: Value,
        #[serde(skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<RpcError>,
    }
    let (result, error) = match result {
        Ok(result) => (Some(result), None),
        Err(error) => (None, Some(error)),
    };
    JsonResponse(Answer {
        jsonrpc: "2.0",
        id,
        result,
        error,
    })
    .into_response()
}

pub(super) fn rpc_error(code: i64, message: impl Into<String>) -> RpcError {
    RpcError {
        code,
        message: message.into(),
        data: None,
    }
}

fn params<P: DeserializeOwned>(params: Value) -> Result<P, RpcError> {
    serde_json::from_value(params)
        .map_err(|error| rpc_error(code::INVALID_PARAMS, format!("params: {error}")))
}

/// An engine error as a JSON-RPC error: what the caller got wrong is invalid params, a
/// conversation it cannot see is a task not found, the rest an internal error.
fn engine_error(error: EngineError) -> RpcError {
    if matches!(
        error,
        EngineError::Store(colloquy_core::store::StoreError::Fenced(_))
    ) {
        // Not applied: on a cluster of owners, routed again to the new owner instead.
        crate::ownership::note_fenced();
    }
    match error.kind() {
        ErrorKind::NotFound | ErrorKind::Forbidden => {
            rpc_error(code::TASK_NOT_FOUND, error.to_string())
        }
        ErrorKind::Unavailable | ErrorKind::Internal => {
            tracing::warn!(%error, "A2A call failed in the engine");
            rpc_error(
                code::INTERNAL_ERROR,
                "the engine could not do it now; try again",
            )
        }
        _ => rpc_error(code::INVALID_PARAMS, error.to_string()),
    }
}

/// A refused start as a JSON-RPC error: there is no task yet, so what is not found (a
/// template) is the caller's invalid params.
fn start_error(error: EngineError) -> RpcError {
    match error.kind() {
        ErrorKind::NotFound => rpc_error(code::INVALID_PARAMS, error.to_string()),
        _ => engine_error(error),
    }
}

/// `message/send`: a new conversation with `agent`, or a message into the task it names.
async fn send(
    state: &AppState,
    caller: &str,
    agent: &str,
    params: MessageSendParams,
) -> Result<Task, RpcError> {
    let message = params.message;
    let named = |field: &str| {
        message
            .metadata
            .as_ref()
            .and_then(|metadata| metadata.get("colloquy"))
            .and_then(|colloquy| colloquy.get(field))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let content = content_of(&message.parts);
    let engine = state.engine();
    let id = match &message.task_id {
        Some(task) => {
            let performative = match named("performative") {
                Some(performative) => performative,
                None => the_only_move(state, caller, task).await?,
            };
            let mut send = SendMessage::new(&performative, content);
            send.message_id = Some(message.message_id.clone());
            engine
                .send(task, caller, send)
                .await
                .map_err(engine_error)?;
            task.clone()
        }
        None => {
            if agent == caller {
                return Err(rpc_error(
                    code::INVALID_PARAMS,
                    format!("`{caller}` cannot open a task with itself"),
                ));
            }
            let template = named("template").unwrap_or_else(|| state.a2a_template().to_owned());
            let opening = match named("performative") {
                Some(performative) => performative,
                None => engine
                    .latest_template(&template)
                    .and_then(|compiled| opening_performative(&compiled))
                    .ok_or_else(|| {
                        rpc_error(
                            code::INVALID_PARAMS,
                            format!("no template `{template}` an initiator can open"),
                        )
                    })?,
            };
            let mut opening = SendMessage::new(&opening, content);
            opening.message_id = Some(message.message_id.clone());
            let retry_safe = named("conversation").is_some();
            let id = if retry_safe {
                derived_task_id(caller, agent, &message.message_id)
            } else {
                fresh_task_id(state)
            };
            let start = StartConversation {
                template,
                participants: vec![agent.to_owned()],
                conversation_id: Some(id.clone()),
                message: Some(opening),
                ..StartConversation::default()
            };
            match engine.start(caller, start).await {
                Ok(view) => view.id.to_string(),
                // A retry of a send that started it: that task.
                Err(error) if error.code() == "duplicate_conversation" => id,
                Err(error) => return Err(start_error(error)),
            }
        }
    };
    let blocking = params.configuration.is_some_and(|c| c.blocking);
    if blocking {
        wait_until_settled(state, caller, &id).await?;
    }
    read_task(state, caller, &id).await
}

/// The performative a message to a running task means when its metadata names none: the
/// one move the task's protocol lets the caller make now besides `cancel` (in `a2a-task`,
/// the `inform` that answers the participant's question). Refused when there is no such
/// move, or more than one.
async fn the_only_move(state: &AppState, caller: &str, task: &str) -> Result<String, RpcError> {
    let view = read_view(state, caller, task).await?;
    // The revision the conversation is pinned to: a reload since may have changed the moves.
    let template = state
        .engine()
        .templates()
        .revision(&view.template, &view.revision);
    let mut moves: Vec<String> = match (&template, view.threads.first()) {
        (Some(template), Some(thread)) if &*view.initiator == caller => {
            let machine = &template.machine;
            machine
                .id_of(&thread.state)
                .map(|id| {
                    machine
                        .state(id)
                        .transitions
                        .iter()
                        .filter(|transition| transition.from == Role::Initiator)
                        .map(|transition| transition.performative.name().to_owned())
                        .filter(|name| name != "cancel")
                        .collect()
                })
                .unwrap_or_default()
        }
        _ => Vec::new(),
    };
    moves.dedup();
    match moves.as_slice() {
        [only] => Ok(only.clone()),
        [] => Err(rpc_error(
            code::INVALID_PARAMS,
            format!(
                "task `{task}` takes no message from you now (it is {}); name a \
                 performative in metadata.colloquy.performative, or cancel it",
                task_of(&view).status.state
            ),
        )),
        _ => Err(rpc_error(
            code::INVALID_PARAMS,
            format!(
                "task `{task}` takes one of {} from you now: name it in \
                 metadata.colloquy.performative",
                moves.join(", ")
            ),
        )),
    }
}

/// The conversation id of a new task a message from another Colloquy engine's bridge opens
/// (it names its conversation in `metadata.colloquy.conversation`). Idempotent by its
/// message id: the bridge retries a send whose answer it lost, and the retry must find the
/// first one's task, so the id is derived from caller, agent and message id. (On a cluster
/// of partition owners the router derives it too, to find the owner.)
pub(crate) fn derived_task_id(caller: &str, agent: &str, message_id: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [caller, agent, message_id] {
        hash.update(part.as_bytes());
        hash.update([0]);
    }
    let digest = hash.finalize();
    let hex: String = digest[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect();
    format!("a2a-{hex}")
}

/// The conversation id of a new task any other client's message opens: a fresh one, as A2A
/// servers do (clients, the TCK among them, send one message id more than once and expect a
/// task each time). On a cluster of partition owners it is drawn in a partition this node
/// owns, so the task is served where the call arrived.
fn fresh_task_id(state: &AppState) -> String {
    let fresh = || format!("a2a-{}", colloquy_core::engine::new_id());
    (state.ownership())
        .and_then(|ownership| ownership.own_id_drawn(fresh))
        .unwrap_or_else(fresh)
}

/// Waits until the task ends or waits for the caller's input, or [`BLOCKING_WAIT`] passes.
async fn wait_until_settled(state: &AppState, caller: &str, id: &str) -> Result<(), RpcError> {
    wait_until(state, caller, id, BLOCKING_WAIT).await
}

/// Waits until the task ends or waits for the caller's input, or `longest` passes.
async fn wait_until(
    state: &AppState,
    caller: &str,
    id: &str,
    longest: Duration,
) -> Result<(), RpcError> {
    let engine = state.engine();
    let listener = engine.listen_conversation(id);
    let give_up = tokio::time::Instant::now() + longest;
    loop {
        // Armed before the read, so a change between the two still wakes the wait.
        let rung = listener.next_ring();
        let view = engine.view(id, Some(caller)).await.map_err(engine_error)?;
        if stream::is_final(&task_of(&view).status.state) {
            return Ok(());
        }
        tokio::select! {
            _ = rung => {}
            () = tokio::time::sleep_until(give_up) => return Ok(()),
        }
    }
}

/// `configuration.taskPushNotificationConfig` of a `SendMessage`, taken out and checked
/// before the message is sent: a config that would be refused sends nothing.
async fn take_push(
    state: &AppState,
    request: &mut v1::SendMessageRequest,
) -> Result<Option<push::ConfigRequest>, RpcError> {
    let field = "params.configuration.taskPushNotificationConfig";
    let Some(given) = request
        .configuration
        .as_mut()
        .and_then(|configuration| configuration.task_push_notification_config.take())
    else {
        return Ok(None);
    };
    let invalid = |why: String| rpc_error(code::INVALID_PARAMS, format!("{field}: {why}"));
    let config: push::ConfigRequest =
        serde_json::from_value(given).map_err(|error| invalid(error.to_string()))?;
    push::check_url(&config.url, state.a2a_push_allow_private())
        .await
        .map_err(invalid)?;
    Ok(Some(config))
}

/// Sets the push config a `SendMessage` carried on the task it opened (or sent into).
async fn attach_push(
    state: &AppState,
    caller: &str,
    task: &str,
    config: Option<push::ConfigRequest>,
) -> Result<(), RpcError> {
    let Some(config) = config else {
        return Ok(());
    };
    let config = config
        .checked(task, caller, state.a2a_push_allow_private())
        .await
        .map_err(|why| {
            rpc_error(
                code::INVALID_PARAMS,
                format!("params.configuration.taskPushNotificationConfig.{why}"),
            )
        })?;
    push::set(state, config).await.map(drop)
}

/// Task `id` as the caller sees it, when `agent` (the agent of the URL it was asked
/// through) is a party of it: a task of other agents is not found here.
async fn read_agents_view(
    state: &AppState,
    caller: &str,
    agent: &str,
    id: &str,
) -> Result<ConversationView, RpcError> {
    let view = read_view(state, caller, id).await?;
    let party = &*view.initiator == agent || view.participants.iter().any(|p| &**p == agent);
    if !party {
        return Err(rpc_error(
            code::TASK_NOT_FOUND,
            format!("agent `{agent}` has no task `{id}`"),
        ));
    }
    Ok(view)
}

async fn read_task(state: &AppState, caller: &str, id: &str) -> Result<Task, RpcError> {
    Ok(task_of(&read_view(state, caller, id).await?))
}

/// The conversation `id` as `caller` may see it.
async fn read_view(state: &AppState, caller: &str, id: &str) -> Result<ConversationView, RpcError> {
    state
        .engine()
        .view(id, Some(caller))
        .await
        .map_err(engine_error)
}

/// `tasks/cancel`: the caller sends `cancel`; the protocol says what follows.
async fn cancel(state: &AppState, caller: &str, id: &str) -> Result<Task, RpcError> {
    let sent = state
        .engine()
        .send(id, caller, SendMessage::new("cancel", json!({})))
        .await;
    match sent {
        Ok(_) => {
            wait_until(state, caller, id, CANCEL_WAIT).await?;
            read_task(state, caller, id).await
        }
        Err(error) => {
            let refused = engine_error(error);
            // The cancel itself is well formed: a refusal means the protocol allows none now.
            Err(if refused.code == code::INVALID_PARAMS {
                RpcError {
                    code: code::TASK_NOT_CANCELABLE,
                    ..refused
                }
            } else {
                refused
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A commit refused by fencing is answered in JSON-RPC like any engine error, and noted
    /// for the router, which routes the call again instead (docs/scale.md).
    #[tokio::test]
    async fn a_fenced_commit_is_noted_for_the_router() {
        let answer = crate::ownership::unless_fenced("c-1", async {
            let fenced = EngineError::Store(colloquy_core::store::StoreError::Fenced(
                colloquy_cluster::Fenced {
                    partition: colloquy_cluster::PartitionId(3),
                    epoch: colloquy_cluster::Epoch(2),
                },
            ));
            assert_eq!(engine_error(fenced).code, code::INTERNAL_ERROR);
            answer(Value::Null, Ok(json!({})))
        })
        .await;
        assert_eq!(answer.status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
        assert!(answer.headers().contains_key(crate::ownership::MOVED));
    }
}
