//! A2A v1.0's HTTP+JSON binding (spec §11) of a Colloquy agent, under `/a2a/{agent}/rest`:
//! the same calls as the JSON-RPC endpoint's v1.0 methods ([`super::inward`]), addressed by
//! path and HTTP method, answered with the bare result and errors in the AIP-193 shape
//! (`{"error": {"code": 404, "status": "NOT_FOUND", "message", "details": [ErrorInfo]}}`).
//!
//! | call | path |
//! |---|---|
//! | `SendMessage` | `POST /message:send` |
//! | `SendStreamingMessage` | `POST /message:stream` (server-sent events) |
//! | `GetTask` | `GET /tasks/{id}?historyLength=` |
//! | `ListTasks` | `GET /tasks?contextId=&status=&pageSize=&pageToken=…` |
//! | `CancelTask` | `POST /tasks/{id}:cancel` |
//! | `SubscribeToTask` | `GET` or `POST /tasks/{id}:subscribe` (server-sent events) |
//!
//! `extendedAgentCard` answers the spec's error: there is none. The router cannot match a
//! suffix after a path parameter, so `tasks/{task}` takes `ID`, `ID:cancel` or
//! `ID:subscribe` whole and [`task_and_verb`] splits it. This binding speaks v1.0 only: an
//! `A2A-Version` header, when given, must say 1.0.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::caller::A2aCaller;
use super::inward::{self, Streamed, code};
use super::stream::Envelope;
use super::v1::{self, Version};
use crate::AppState;
use crate::auth::Caller;
use crate::error::ApiError;
use crate::extract::{BodyError, CappedBody, MAX_BODY_BYTES, PathParams, QueryParams};
use crate::streams::SseStream;
use colloquy_protocol::a2a::RpcError;

/// `GET /tasks/{id}`'s query.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskQuery {
    #[serde(default)]
    history_length: Option<i32>,
}

/// `POST /a2a/{agent}/rest/message:send`.
pub async fn send_message(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams(agent): PathParams<String>,
    headers: HeaderMap,
    CappedBody(body): CappedBody,
) -> Result<Response, ApiError> {
    call(&state, &caller, &agent, &headers, "SendMessage", || {
        read_json(body)
    })
    .await
}

/// One v1.0 call of this binding, answered in its shape: as the caller's agent, once the
/// version header is checked, with the params `read` gives (read after those checks, so a
/// body is looked at only once who calls is known).
async fn call(
    state: &AppState,
    caller: &Caller,
    agent: &str,
    headers: &HeaderMap,
    method: &str,
    read: impl FnOnce() -> Result<Result<Value, RpcError>, ApiError>,
) -> Result<Response, ApiError> {
    let caller = caller.agent()?;
    if let Err(refused) = check_version(headers) {
        return Ok(error_response(&refused));
    }
    let params = match read()? {
        Ok(params) => params,
        Err(refused) => return Ok(error_response(&refused)),
    };
    Ok(respond(
        inward::call_v1(state, caller, agent, method, params).await,
    ))
}

/// `POST /a2a/{agent}/rest/message:stream`: `SendStreamingMessage`, the task's events as
/// server-sent events (each a bare `StreamResponse`).
pub async fn stream_message(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams(agent): PathParams<String>,
    headers: HeaderMap,
    CappedBody(body): CappedBody,
) -> Result<Response, ApiError> {
    let caller = caller.agent()?.clone();
    if let Err(refused) = check_version(&headers) {
        return Ok(error_response(&refused));
    }
    let params = match read_json(body)? {
        Ok(params) => params,
        Err(refused) => return Ok(error_response(&refused)),
    };
    let opened = inward::open_stream(
        &state,
        &caller,
        &agent,
        Version::V1_0,
        Streamed::Send,
        params,
        Envelope::Bare,
    )
    .await;
    Ok(stream_or_error(opened))
}

/// A request body as JSON: `Err` for what the API answers itself (too large, too slow),
/// `Ok(Err)` for the caller's invalid argument.
fn read_json(body: Result<bytes::Bytes, BodyError>) -> Result<Result<Value, RpcError>, ApiError> {
    match body {
        Ok(body) => Ok(
            serde_json::from_slice(&body).map_err(|error| invalid(format!("not JSON: {error}")))
        ),
        Err(BodyError::TooLarge) => Err(ApiError::TooLarge(MAX_BODY_BYTES)),
        Err(BodyError::TimedOut) => Err(ApiError::BodyTimeout(
            crate::extract::BODY_READ_TIMEOUT.as_secs(),
        )),
        Err(BodyError::Unreadable(why)) => Ok(Err(invalid(why))),
    }
}

fn stream_or_error(opened: Result<SseStream, RpcError>) -> Response {
    match opened {
        Ok(stream) => stream.into_response(),
        Err(error) => error_response(&error),
    }
}

/// `{task}:subscribe`: `SubscribeToTask`, as server-sent events.
async fn subscribe(state: &AppState, caller: &str, agent: &str, id: &str) -> Response {
    let opened = inward::open_stream(
        state,
        caller,
        agent,
        Version::V1_0,
        Streamed::Subscribe,
        json!({"id": id}),
        Envelope::Bare,
    )
    .await;
    stream_or_error(opened)
}

/// `GET /a2a/{agent}/rest/tasks/{task}`: the task (`ID`), or its events (`ID:subscribe`).
pub async fn get_task(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams((agent, task)): PathParams<(String, String)>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<TaskQuery>,
) -> Result<Response, ApiError> {
    let caller = caller.agent()?.clone();
    if let Err(refused) = check_version(&headers) {
        return Ok(error_response(&refused));
    }
    let (id, verb) = task_and_verb(&task);
    let answer = match verb {
        None => {
            let mut params = json!({"id": id});
            if let Some(length) = query.history_length {
                params["historyLength"] = json!(length);
            }
            inward::call_v1(&state, &caller, &agent, "GetTask", params).await
        }
        Some("subscribe") => return Ok(subscribe(&state, &caller, &agent, id).await),
        Some(other) => Err(no_such_verb(other)),
    };
    Ok(respond(answer))
}

/// `POST /a2a/{agent}/rest/tasks/{task}`: `ID:cancel`, or `ID:subscribe`.
pub async fn task_action(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams((agent, task)): PathParams<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let caller = caller.agent()?.clone();
    if let Err(refused) = check_version(&headers) {
        return Ok(error_response(&refused));
    }
    let answer = match task_and_verb(&task) {
        (id, Some("cancel")) => {
            inward::call_v1(&state, &caller, &agent, "CancelTask", json!({"id": id})).await
        }
        (id, Some("subscribe")) => return Ok(subscribe(&state, &caller, &agent, id).await),
        (_, Some(other)) => Err(no_such_verb(other)),
        (_, None) => Err(invalid(
            "POST on a task takes a verb: tasks/{id}:cancel".to_owned(),
        )),
    };
    Ok(respond(answer))
}

/// `GET /a2a/{agent}/rest/tasks?contextId=&status=&pageSize=&pageToken=&historyLength=&statusTimestampAfter=&includeArtifacts=`:
/// `ListTasks`, its params as the query (camelCase, as the spec's §11.5 names them).
pub async fn list_tasks(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams(agent): PathParams<String>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<Response, ApiError> {
    call(&state, &caller, &agent, &headers, "ListTasks", || {
        Ok(Ok(serde_json::to_value(query).unwrap_or_default()))
    })
    .await
}

/// `GET /tasks`' query: `ListTasks`' params.
#[derive(Debug, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    page_size: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    page_token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    history_length: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    status_timestamp_after: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    include_artifacts: Option<bool>,
}

/// `GET /a2a/{agent}/rest/extendedAgentCard`: there is none.
pub async fn extended_agent_card(A2aCaller(caller): A2aCaller) -> Result<Response, ApiError> {
    caller.agent()?;
    Ok(error_response(&unsupported(
        code::EXTENDED_AGENT_CARD_NOT_CONFIGURED,
        "this agent has no extended agent card",
    )))
}

/// `POST /a2a/{agent}/rest/tasks/{task}/pushNotificationConfigs`: sets a push config (the
/// body, a `TaskPushNotificationConfig`) on the task.
pub async fn create_push_config(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams((agent, task)): PathParams<(String, String)>,
    headers: HeaderMap,
    CappedBody(body): CappedBody,
) -> Result<Response, ApiError> {
    let method = "CreateTaskPushNotificationConfig";
    call(&state, &caller, &agent, &headers, method, || {
        Ok(read_json(body)?.map(|mut params| {
            if let Some(fields) = params.as_object_mut() {
                fields.insert("taskId".to_owned(), json!(task));
                fields.remove("task_id");
            }
            params
        }))
    })
    .await
}

/// `GET /a2a/{agent}/rest/tasks/{task}/pushNotificationConfigs`: the caller's push configs of
/// the task.
pub async fn list_push_configs(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams((agent, task)): PathParams<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let method = "ListTaskPushNotificationConfigs";
    call(&state, &caller, &agent, &headers, method, || {
        Ok(Ok(json!({"taskId": task})))
    })
    .await
}

/// `GET /a2a/{agent}/rest/tasks/{task}/pushNotificationConfigs/{config}`: one of them.
pub async fn get_push_config(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams((agent, task, config)): PathParams<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let method = "GetTaskPushNotificationConfig";
    call(&state, &caller, &agent, &headers, method, || {
        Ok(Ok(json!({"taskId": task, "id": config})))
    })
    .await
}

/// `DELETE /a2a/{agent}/rest/tasks/{task}/pushNotificationConfigs/{config}`: forgets it (no
/// error when there is none).
pub async fn delete_push_config(
    State(state): State<AppState>,
    A2aCaller(caller): A2aCaller,
    PathParams((agent, task, config)): PathParams<(String, String, String)>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let method = "DeleteTaskPushNotificationConfig";
    call(&state, &caller, &agent, &headers, method, || {
        Ok(Ok(json!({"taskId": task, "id": config})))
    })
    .await
}

/// `ID:verb` split at its last colon, when what follows is a word; else the whole as the id
/// (task ids here never hold a colon, but a client's may reach us).
pub(crate) fn task_and_verb(task: &str) -> (&str, Option<&str>) {
    match task.rsplit_once(':') {
        Some((id, verb)) if !verb.is_empty() && verb.bytes().all(|b| b.is_ascii_alphabetic()) => {
            (id, Some(verb))
        }
        _ => (task, None),
    }
}

fn no_such_verb(verb: &str) -> RpcError {
    invalid(format!(
        "no task verb `{}` here; this binding takes :cancel and :subscribe",
        colloquy_core::log_safe::LogSafe(verb)
    ))
}

fn invalid(message: String) -> RpcError {
    RpcError {
        code: code::INVALID_PARAMS,
        message,
        data: None,
    }
}

fn unsupported(code: i64, message: &str) -> RpcError {
    RpcError {
        code,
        message: message.to_owned(),
        data: None,
    }
}

/// `Err` (the error to answer) when the request names a version other than 1.0.
fn check_version(headers: &HeaderMap) -> Result<(), RpcError> {
    let refused = |message: String| RpcError {
        code: code::VERSION_NOT_SUPPORTED,
        message,
        data: None,
    };
    if headers.get(v1::VERSION_HEADER).is_none() {
        return Ok(());
    }
    match v1::version(headers) {
        Ok(Version::V1_0) => Ok(()),
        Ok(Version::V0_3) => Err(refused(
            "the HTTP+JSON binding here speaks A2A 1.0; v0.3 clients use the JSON-RPC endpoint"
                .to_owned(),
        )),
        Err(why) => Err(refused(why)),
    }
}

fn respond(answer: Result<Value, RpcError>) -> Response {
    match answer {
        Ok(result) => (StatusCode::OK, axum::Json(result)).into_response(),
        Err(error) => error_response(&error),
    }
}

/// An A2A error in the HTTP+JSON binding's shape, with the status of spec §5.4.
pub fn error_response(error: &RpcError) -> Response {
    let (status, grpc, reason) = error_kind(error.code);
    let mut body = json!({"error": {
        "code": status.as_u16(),
        "status": grpc,
        "message": error.message,
    }});
    if let Some(reason) = reason {
        body["error"]["details"] = json!([error_info(reason)]);
    }
    (status, axum::Json(body)).into_response()
}

/// A `google.rpc.ErrorInfo` naming an A2A error's reason, as v1.0 errors carry it (in
/// `details` here, in `data` on JSON-RPC).
fn error_info(reason: &str) -> Value {
    json!({
        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
        "reason": reason,
        "domain": "a2a-protocol.org",
    })
}

/// A JSON-RPC error as v1.0 answers it: an A2A error (not JSON-RPC's own) with its
/// `ErrorInfo` in `data`.
pub fn with_error_info(error: RpcError) -> RpcError {
    match error_kind(error.code) {
        (_, _, Some(reason)) => RpcError {
            data: Some(json!([error_info(reason)])),
            ..error
        },
        _ => error,
    }
}

/// A JSON-RPC error code's HTTP status, gRPC status name and A2A reason (spec §5.4, §11.6).
fn error_kind(rpc_code: i64) -> (StatusCode, &'static str, Option<&'static str>) {
    match rpc_code {
        code::TASK_NOT_FOUND => (StatusCode::NOT_FOUND, "NOT_FOUND", Some("TASK_NOT_FOUND")),
        code::TASK_NOT_CANCELABLE => (
            StatusCode::CONFLICT,
            "FAILED_PRECONDITION",
            Some("TASK_NOT_CANCELABLE"),
        ),
        code::PUSH_NOTIFICATION_NOT_SUPPORTED => (
            StatusCode::BAD_REQUEST,
            "UNIMPLEMENTED",
            Some("PUSH_NOTIFICATION_NOT_SUPPORTED"),
        ),
        code::UNSUPPORTED_OPERATION => (
            StatusCode::BAD_REQUEST,
            "UNIMPLEMENTED",
            Some("UNSUPPORTED_OPERATION"),
        ),
        code::EXTENDED_AGENT_CARD_NOT_CONFIGURED => (
            StatusCode::BAD_REQUEST,
            "FAILED_PRECONDITION",
            Some("EXTENDED_AGENT_CARD_NOT_CONFIGURED"),
        ),
        code::CONTENT_TYPE_NOT_SUPPORTED => (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "INVALID_ARGUMENT",
            Some("CONTENT_TYPE_NOT_SUPPORTED"),
        ),
        code::VERSION_NOT_SUPPORTED => (
            StatusCode::BAD_REQUEST,
            "UNIMPLEMENTED",
            Some("VERSION_NOT_SUPPORTED"),
        ),
        code::INTERNAL_ERROR => (StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", None),
        _ => (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_path_segment_splits_into_id_and_verb() {
        assert_eq!(task_and_verb("a2a-1"), ("a2a-1", None));
        assert_eq!(task_and_verb("a2a-1:cancel"), ("a2a-1", Some("cancel")));
        assert_eq!(
            task_and_verb("a2a-1:subscribe"),
            ("a2a-1", Some("subscribe"))
        );
        assert_eq!(task_and_verb("urn:x:1"), ("urn:x:1", None));
    }

    #[test]
    fn a2a_errors_get_the_status_and_reason_of_the_spec() {
        assert_eq!(
            error_kind(code::TASK_NOT_FOUND),
            (StatusCode::NOT_FOUND, "NOT_FOUND", Some("TASK_NOT_FOUND"))
        );
        assert_eq!(
            error_kind(code::TASK_NOT_CANCELABLE).0,
            StatusCode::CONFLICT
        );
        assert_eq!(
            error_kind(code::INVALID_PARAMS),
            (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", None)
        );
    }
}
