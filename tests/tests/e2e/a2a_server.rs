//! The inbound A2A server over real HTTP: a Colloquy agent is reachable by A2A clients at
//! `/a2a/{agent}`. Its agent card is public (`/a2a/{agent}/.well-known/agent-card.json`);
//! JSON-RPC 2.0 calls to `/a2a/{agent}` carry the caller's bearer token. `message/send`
//! starts a conversation with the caller as initiator and `{agent}` as participant (or sends
//! into one with `taskId`), and every answer shows the conversation as an A2A Task: its
//! state from the conversation's status and outcome, one artifact per result the
//! participant sent. Participants here are SDK agents serving their inboxes; the A2A client
//! is raw JSON-RPC over `reqwest`.
//!
//! Why one file of 2,400 lines: each test is one A2A scenario that reads alone, over
//! shared servers and clients defined at the top; split by topic, every part would repeat
//! that set-up.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use colloquy_sdk::{Client, Handlers};
use colloquy_tests::http::{STEP, Server, call};
use reqwest::Method;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::support::{json_performatives, poll_until};

/// JSON-RPC error codes of the A2A binding.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const TASK_NOT_FOUND: i64 = -32001;
const TASK_NOT_CANCELABLE: i64 = -32002;

/// An SDK agent serving its inbox; stopped when dropped.
struct Agent(JoinHandle<()>);

impl Drop for Agent {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `handlers` for `client` until the returned [`Agent`] is dropped.
fn serve(client: Client, handlers: Handlers) -> Agent {
    Agent(tokio::spawn(async move {
        // The server refusing the stream ends the agent; the test then times out on its
        // own assertion, which names what was missing.
        let _ = client.serve(handlers, 0).await;
    }))
}

/// bob: agrees to every request, then informs `result`.
async fn bob_agrees_then_informs(server: &Server, result: Value) -> Agent {
    serve(
        server.client("bob").await,
        Handlers::new().on("fipa-request", "request", move |msg| {
            let result = result.clone();
            async move {
                msg.agree(json!({})).await?;
                msg.inform(result).await?;
                Ok(())
            }
        }),
    )
}

/// A fresh JSON-RPC request id (numbers; one test uses a string).
fn next_id() -> Value {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    json!(NEXT.fetch_add(1, Ordering::Relaxed))
}

/// The path of `agent`'s A2A endpoint.
fn endpoint(agent: &str) -> String {
    format!("/a2a/{agent}")
}

/// POSTs a JSON-RPC request `body` as `caller` to `agent`'s endpoint and returns the
/// response, having checked what every JSON-RPC answer has: HTTP 200, `"jsonrpc": "2.0"`,
/// the request's `id`, and exactly one of `result` and `error`.
async fn post_rpc(server: &Server, caller: &str, agent: &str, body: &Value) -> Value {
    let (status, response) = call(
        server
            .as_agent(Method::POST, &endpoint(agent), caller)
            .json(body),
    )
    .await;
    assert_eq!(status, 200, "{body:#}\n→ {response:#}");
    assert_eq!(response["jsonrpc"], "2.0", "{body:#}\n→ {response:#}");
    assert_eq!(response["id"], body["id"], "{body:#}\n→ {response:#}");
    let has = |key: &str| response.get(key).is_some_and(|v| !v.is_null());
    assert!(
        has("result") != has("error"),
        "exactly one of result and error: {body:#}\n→ {response:#}"
    );
    response
}

/// Calls `method` with `params` as `caller` on `agent`'s endpoint; the whole response.
async fn rpc(server: &Server, caller: &str, agent: &str, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": next_id(), "method": method, "params": params});
    post_rpc(server, caller, agent, &body).await
}

/// The `result` of a call that must succeed.
async fn rpc_ok(server: &Server, caller: &str, agent: &str, method: &str, params: Value) -> Value {
    let response = rpc(server, caller, agent, method, params.clone()).await;
    assert!(
        response.get("error").is_none(),
        "{method} {params:#} as {caller} to {agent} failed: {response:#}"
    );
    response["result"].clone()
}

/// The `error` of a call that must fail with `code`; it has a message.
async fn rpc_err(
    server: &Server,
    caller: &str,
    agent: &str,
    method: &str,
    params: Value,
    code: i64,
) -> Value {
    let response = rpc(server, caller, agent, method, params.clone()).await;
    check_error(&response, code, &format!("{method} {params:#}"));
    response["error"].clone()
}

/// Checks `response` is a JSON-RPC error with `code` and a message.
fn check_error(response: &Value, code: i64, what: &str) {
    assert_eq!(
        response["error"]["code"].as_i64(),
        Some(code),
        "{what}\n→ {response:#}"
    );
    assert!(
        response["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "an error message: {response:#}"
    );
    assert!(response.get("result").is_none(), "{response:#}");
}

/// An A2A user message with one data part.
fn data_message(message_id: &str, data: Value) -> Value {
    json!({"kind": "message", "role": "user", "messageId": message_id,
        "parts": [{"kind": "data", "data": data}]})
}

/// `message` naming the template and performative to open with.
fn naming(mut message: Value, template: &str, performative: &str) -> Value {
    message["metadata"] = json!({"colloquy": {"template": template, "performative": performative}});
    message
}

/// `message/send` params: blocking (`configuration.blocking: true`) or not (no
/// configuration at all).
fn send_params(message: Value, blocking: bool) -> Value {
    if blocking {
        json!({"message": message, "configuration": {"blocking": true}})
    } else {
        json!({"message": message})
    }
}

/// `message/send` as `caller` to `agent`; returns the Task, checked for its shape.
async fn send(server: &Server, caller: &str, agent: &str, message: Value, blocking: bool) -> Value {
    let task = rpc_ok(
        server,
        caller,
        agent,
        "message/send",
        send_params(message, blocking),
    )
    .await;
    check_task(&task);
    task
}

/// `tasks/get` of `id` as `caller` (through `agent`'s endpoint); the Task, checked.
async fn get_task(server: &Server, caller: &str, agent: &str, id: &str) -> Value {
    let task = rpc_ok(server, caller, agent, "tasks/get", json!({"id": id})).await;
    check_task(&task);
    assert_eq!(task["id"], id, "{task:#}");
    task
}

/// What every Task has: `kind: task`, a string id equal to its `contextId`, a status with
/// a state, the colloquy metadata with the template and the conversation's status.
fn check_task(task: &Value) {
    assert_eq!(task["kind"], "task", "{task:#}");
    assert!(
        task["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{task:#}"
    );
    assert_eq!(task["contextId"], task["id"], "{task:#}");
    assert!(task["status"]["state"].is_string(), "{task:#}");
    assert!(
        task["metadata"]["colloquy"]["template"].is_string(),
        "{task:#}"
    );
    let status = &task["metadata"]["colloquy"]["status"];
    assert!(status == "active" || status == "completed", "{task:#}");
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or("?")
}

fn task_id(task: &Value) -> String {
    task["id"].as_str().expect("a task id").to_owned()
}

/// The Task's artifacts; a missing `artifacts` is none.
fn artifacts(task: &Value) -> Vec<Value> {
    match &task["artifacts"] {
        Value::Null => Vec::new(),
        Value::Array(list) => list.clone(),
        other => panic!("artifacts is not an array: {other:#}"),
    }
}

/// Checks `artifact` is the data part `data` of a `name` message.
fn check_artifact(artifact: &Value, name: &str, data: &Value) {
    assert!(artifact["artifactId"].is_string(), "{artifact:#}");
    assert_eq!(artifact["name"], name, "{artifact:#}");
    assert_eq!(
        artifact["parts"],
        json!([{"kind": "data", "data": data}]),
        "{artifact:#}"
    );
}

/// Checks the ended Task's status message: an agent message with one text part, `reason`.
fn check_reason(task: &Value, reason: &str) {
    let message = &task["status"]["message"];
    assert_eq!(message["kind"], "message", "{task:#}");
    assert_eq!(message["role"], "agent", "{task:#}");
    assert_eq!(
        message["parts"],
        json!([{"kind": "text", "text": reason}]),
        "{task:#}"
    );
}

/// Polls `tasks/get` (as `caller`, through `agent`'s endpoint) until `done` holds of the
/// Task and returns it; fails after [`STEP`] with the last Task seen.
async fn until_task(
    server: &Server,
    caller: &str,
    agent: &str,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    poll_until(|| get_task(server, caller, agent, id), done)
        .await
        .unwrap_or_else(|last| panic!("no {what} within {STEP:?}\nlast task: {last:#}"))
}

/// The conversation as `agent` sees it through the native API.
async fn view(server: &Server, agent: &str, id: &str) -> Value {
    let (status, view) =
        call(server.as_agent(Method::GET, &format!("/v1/conversations/{id}"), agent)).await;
    assert_eq!(status, 200, "{view}");
    view
}

/// The conversations `agent` can list.
async fn listed(server: &Server, agent: &str) -> Vec<Value> {
    let (status, body) = call(server.as_agent(Method::GET, "/v1/conversations", agent)).await;
    assert_eq!(status, 200, "{body}");
    body["conversations"]
        .as_array()
        .expect("a conversations list")
        .clone()
}

/// bob's agent card is public and describes him as an A2A JSON-RPC agent: protocol 0.3.0,
/// his own URL (from the Host header the client used), the engine's version, streaming but
/// no push, JSON and text in and out, a skill per template (fipa-request among them) and
/// bearer security (token mode). An agent not in the agents file has no card (404).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_card_is_public_and_names_the_agent_its_skills_and_bearer_security() {
    let server = Server::start().await;
    // v1.0's card has the endpoints in supportedInterfaces only, and v1.0's security shape.
    let (status, v1) =
        call(server.anonymous(Method::GET, "/a2a/bob/.well-known/agent-card.json")).await;
    assert_eq!(status, 200, "{v1:#}");
    for legacy in ["protocolVersion", "url", "preferredTransport", "security"] {
        assert!(
            v1.get(legacy).is_none(),
            "no {legacy} in v1.0's card: {v1:#}"
        );
    }
    assert_eq!(v1["supportedInterfaces"][0]["protocolBinding"], "JSONRPC");
    assert_eq!(v1["supportedInterfaces"][0]["protocolVersion"], "1.0");
    assert_eq!(
        v1["supportedInterfaces"][0]["url"],
        format!("{}/a2a/bob", server.url)
    );
    assert_eq!(
        v1["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"], "bearer",
        "{v1:#}"
    );
    assert_eq!(
        v1["securityRequirements"],
        json!([{"schemes": {"bearer": {}}}])
    );
    // v0.3 clients read v0.3's shape from the card's earlier name.
    let (status, card) =
        call(server.anonymous(Method::GET, "/a2a/bob/.well-known/agent.json")).await;
    assert_eq!(status, 200, "{card:#}");
    assert_eq!(card["protocolVersion"], "0.3.0", "{card:#}");
    assert_eq!(card["name"], "bob", "{card:#}");
    assert!(card["description"].is_string(), "{card:#}");
    assert_eq!(card["url"], format!("{}/a2a/bob", server.url), "{card:#}");
    assert_eq!(card["preferredTransport"], "JSONRPC", "{card:#}");
    assert_eq!(card["version"], env!("CARGO_PKG_VERSION"), "{card:#}");
    assert_eq!(
        card["capabilities"],
        json!({"streaming": true, "pushNotifications": false}),
        "{card:#}"
    );
    for modes in ["defaultInputModes", "defaultOutputModes"] {
        for mode in ["application/json", "text/plain"] {
            assert!(
                card[modes]
                    .as_array()
                    .is_some_and(|m| m.contains(&json!(mode))),
                "{modes} has {mode}: {card:#}"
            );
        }
    }
    let skills = card["skills"].as_array().expect("skills");
    let skill = |id: &str| skills.iter().find(|s| s["id"] == id);
    let request = skill("fipa-request").unwrap_or_else(|| panic!("a fipa-request skill: {card:#}"));
    assert_eq!(request["name"], "fipa-request", "{request:#}");
    assert!(
        request["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty()),
        "{request:#}"
    );
    for tag in ["colloquy", "request"] {
        assert!(
            request["tags"]
                .as_array()
                .is_some_and(|t| t.contains(&json!(tag))),
            "tag {tag}: {request:#}"
        );
    }
    for template in ["fipa-query", "fipa-contract-net"] {
        assert!(skill(template).is_some(), "a {template} skill: {card:#}");
    }
    assert_eq!(
        card["securitySchemes"],
        json!({"bearer": {"type": "http", "scheme": "bearer"}}),
        "{card:#}"
    );
    assert_eq!(card["security"], json!([{"bearer": []}]), "{card:#}");

    // The URL follows the Host the client called.
    let (status, card) = call(
        server
            .anonymous(Method::GET, "/a2a/alice/.well-known/agent-card.json")
            .header("host", "colloquy.example:8443"),
    )
    .await;
    assert_eq!(status, 200, "{card:#}");
    assert_eq!(card["name"], "alice", "{card:#}");
    assert!(
        card["supportedInterfaces"][0]["url"]
            .as_str()
            .is_some_and(|u| u.ends_with("//colloquy.example:8443/a2a/alice")),
        "{card:#}"
    );
    // Cacheable: a client that names the card's ETag gets 304.
    let response = server
        .anonymous(Method::GET, "/a2a/bob/.well-known/agent-card.json")
        .send()
        .await
        .expect("a response");
    let etag = response.headers()["etag"].clone();
    assert!(
        response.headers()["cache-control"]
            .to_str()
            .is_ok_and(|c| c.contains("max-age"))
    );
    let again = server
        .anonymous(Method::GET, "/a2a/bob/.well-known/agent-card.json")
        .header("if-none-match", etag)
        .send()
        .await
        .expect("a response");
    assert_eq!(again.status(), 304);

    let (status, body) =
        call(server.anonymous(Method::GET, "/a2a/nobody/.well-known/agent-card.json")).await;
    assert_eq!(status, 404, "{body:#}");
    assert_eq!(body["error"]["code"], "not_found", "{body:#}");
}

/// A blocking `message/send` from alice to bob opens a fipa-request (alice initiator, bob
/// participant, the data part as the request's content, the A2A messageId as its id) and
/// answers once the conversation completes: a `completed` Task whose id is the
/// conversation's, with bob's inform as its one artifact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blocking_send_answers_the_completed_task_with_the_inform_as_artifact() {
    let server = Server::start().await;
    let _bob = bob_agrees_then_informs(&server, json!({"booking": "LV-1"})).await;
    let content = json!({"action": "book-room", "room": "Lovelace"});
    let task = send(
        &server,
        "alice",
        "bob",
        data_message("a2a-book-1", content.clone()),
        true,
    )
    .await;
    assert_eq!(state(&task), "completed", "{task:#}");
    let colloquy = &task["metadata"]["colloquy"];
    assert_eq!(colloquy["template"], "fipa-request", "{task:#}");
    assert_eq!(colloquy["status"], "completed", "{task:#}");
    assert_eq!(colloquy["outcome"], "success", "{task:#}");
    let artifacts = artifacts(&task);
    assert_eq!(artifacts.len(), 1, "{task:#}");
    check_artifact(&artifacts[0], "inform", &json!({"booking": "LV-1"}));

    let id = task_id(&task);
    let view = view(&server, "alice", &id).await;
    assert_eq!(view["id"], id.as_str(), "{view:#}");
    assert_eq!(view["template"], "fipa-request", "{view:#}");
    assert_eq!(view["initiator"], "alice", "{view:#}");
    assert_eq!(view["participants"], json!(["bob"]), "{view:#}");
    assert_eq!(view["status"], "completed", "{view:#}");
    assert_eq!(
        json_performatives(&view),
        ["request", "agree", "inform"],
        "{view:#}"
    );
    let messages = view["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["id"], "a2a-book-1", "{view:#}");
    assert_eq!(messages[0]["sender"], "alice", "{view:#}");
    assert_eq!(messages[0]["content"], content, "{view:#}");
    assert_eq!(messages[2]["sender"], "bob", "{view:#}");
    assert_eq!(
        artifacts[0]["artifactId"], messages[2]["id"],
        "the artifact is the inform: {view:#}"
    );
}

/// A `message/send` without `configuration.blocking` answers at once: while bob has sent
/// nothing the Task is `submitted` (active, no artifacts), and `tasks/get` shows it so until
/// bob answers; once he has, `tasks/get` shows it `completed` with his inform as artifact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_blocking_send_answers_at_once_and_tasks_get_follows_the_conversation() {
    let server = Server::start().await;
    let go = Arc::new(Notify::new());
    let signal = Arc::clone(&go);
    let _bob = serve(
        server.client("bob").await,
        Handlers::new().on("fipa-request", "request", move |msg| {
            let signal = Arc::clone(&signal);
            async move {
                signal.notified().await;
                msg.agree(json!({})).await?;
                msg.inform(json!({"booking": "LV-2"})).await?;
                Ok(())
            }
        }),
    );
    let task = send(
        &server,
        "alice",
        "bob",
        data_message("a2a-book-2", json!({"action": "book-room"})),
        false,
    )
    .await;
    assert_eq!(state(&task), "submitted", "{task:#}");
    assert_eq!(task["metadata"]["colloquy"]["status"], "active", "{task:#}");
    assert!(
        task["metadata"]["colloquy"].get("outcome").is_none()
            || task["metadata"]["colloquy"]["outcome"].is_null(),
        "{task:#}"
    );
    assert!(artifacts(&task).is_empty(), "{task:#}");
    let id = task_id(&task);

    let again = get_task(&server, "alice", "bob", &id).await;
    assert_eq!(
        state(&again),
        "submitted",
        "bob has not answered: {again:#}"
    );

    go.notify_one();
    let done = until_task(&server, "alice", "bob", &id, "completed task", |t| {
        state(t) == "completed"
    })
    .await;
    assert_eq!(
        done["metadata"]["colloquy"]["status"], "completed",
        "{done:#}"
    );
    assert_eq!(
        done["metadata"]["colloquy"]["outcome"], "success",
        "{done:#}"
    );
    let artifacts = artifacts(&done);
    assert_eq!(artifacts.len(), 1, "{done:#}");
    check_artifact(&artifacts[0], "inform", &json!({"booking": "LV-2"}));
}

/// bob refusing with a reason ends the Task `rejected`, its status message the reason's
/// text, with no artifacts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_a_rejected_task_whose_status_message_is_the_reason() {
    let server = Server::start().await;
    let _bob = serve(
        server.client("bob").await,
        Handlers::new().on("fipa-request", "request", |msg| async move {
            msg.refuse(json!({"reason": "fully booked"})).await?;
            Ok(())
        }),
    );
    let task = send(
        &server,
        "alice",
        "bob",
        data_message("a2a-book-3", json!({"action": "book-room"})),
        true,
    )
    .await;
    assert_eq!(state(&task), "rejected", "{task:#}");
    check_reason(&task, "fully booked");
    assert!(artifacts(&task).is_empty(), "{task:#}");
    assert_eq!(
        task["metadata"]["colloquy"]["status"], "completed",
        "{task:#}"
    );
    assert_eq!(
        task["metadata"]["colloquy"]["outcome"], "refused",
        "{task:#}"
    );
}

/// `metadata.colloquy` names the template and the opening performative: alice's send to
/// dave opens a fipa-query with `query-ref` (not `query-if`, the template's first), the
/// data part as its content; dave's inform is the Task's artifact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_names_the_template_and_the_opening_performative() {
    let server = Server::start().await;
    let _dave = serve(
        server.client("dave").await,
        Handlers::new().on("fipa-query", "query-ref", |msg| async move {
            msg.inform(json!({"value": 42})).await?;
            Ok(())
        }),
    );
    let query = json!({"ref": "price of oak chairs"});
    let message = naming(
        data_message("a2a-query-1", query.clone()),
        "fipa-query",
        "query-ref",
    );
    let task = send(&server, "alice", "dave", message, true).await;
    assert_eq!(state(&task), "completed", "{task:#}");
    assert_eq!(
        task["metadata"]["colloquy"]["template"], "fipa-query",
        "{task:#}"
    );
    let artifacts = artifacts(&task);
    assert_eq!(artifacts.len(), 1, "{task:#}");
    check_artifact(&artifacts[0], "inform", &json!({"value": 42}));

    let view = view(&server, "alice", &task_id(&task)).await;
    assert_eq!(view["template"], "fipa-query", "{view:#}");
    assert_eq!(view["participants"], json!(["dave"]), "{view:#}");
    assert_eq!(
        json_performatives(&view),
        ["query-ref", "inform"],
        "{view:#}"
    );
    assert_eq!(view["messages"][0]["content"], query, "{view:#}");
}

/// Text parts become the content `{"text": <the parts joined by newlines>}`: bob, who
/// echoes what he was asked, sees it, and his inform comes back as the artifact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_parts_become_a_text_content_joined_by_newlines() {
    let server = Server::start().await;
    let _bob = serve(
        server.client("bob").await,
        Handlers::new().on("fipa-request", "request", |msg| async move {
            msg.inform(json!({"echo": msg.content()})).await?;
            Ok(())
        }),
    );
    let message = json!({"kind": "message", "role": "user", "messageId": "a2a-text-1",
        "parts": [{"kind": "text", "text": "book a room"}, {"kind": "text", "text": "for Tuesday"}]});
    let task = send(&server, "alice", "bob", message, true).await;
    assert_eq!(state(&task), "completed", "{task:#}");
    let text = json!({"text": "book a room\nfor Tuesday"});
    let artifacts = artifacts(&task);
    assert_eq!(artifacts.len(), 1, "{task:#}");
    check_artifact(&artifacts[0], "inform", &json!({"echo": text}));

    let view = view(&server, "alice", &task_id(&task)).await;
    assert_eq!(view["template"], "fipa-request", "{view:#}");
    assert_eq!(json_performatives(&view), ["request", "inform"], "{view:#}");
    assert_eq!(view["messages"][0]["content"], text, "{view:#}");
}

/// `message/send` with a `taskId` sends into that conversation as the caller, with the
/// performative its metadata names: bob, the participant, answers alice's request through
/// A2A (agree, then inform), and alice's Task completes with his inform as its one
/// artifact. alice's own inform in between (out of protocol, which fipa-request only
/// reports) is recorded as hers and is no artifact: artifacts are the participant's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_with_a_task_id_is_sent_into_that_conversation_as_the_caller() {
    let server = Server::start().await;
    let task = send(
        &server,
        "alice",
        "bob",
        data_message("a2a-book-4", json!({"action": "book-room"})),
        false,
    )
    .await;
    let id = task_id(&task);
    let into = [
        ("bob", "alice", "agree", json!({})),
        ("alice", "bob", "inform", json!({"note": "alice's own"})),
        ("bob", "alice", "inform", json!({"booking": "LV-4"})),
    ];
    for (n, (caller, agent, performative, content)) in into.into_iter().enumerate() {
        let mut message = naming(
            data_message(&format!("a2a-into-{n}"), content),
            "fipa-request",
            performative,
        );
        message["taskId"] = json!(id);
        let answer = send(&server, caller, agent, message, false).await;
        assert_eq!(answer["id"], id.as_str(), "{answer:#}");
    }
    let done = get_task(&server, "alice", "bob", &id).await;
    assert_eq!(state(&done), "completed", "{done:#}");
    let artifacts = artifacts(&done);
    assert_eq!(artifacts.len(), 1, "{done:#}");
    check_artifact(&artifacts[0], "inform", &json!({"booking": "LV-4"}));

    let view = view(&server, "alice", &id).await;
    assert_eq!(
        json_performatives(&view),
        ["request", "agree", "inform", "inform"],
        "{view:#}"
    );
    let senders: Vec<&Value> = view["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| &m["sender"])
        .collect();
    assert_eq!(senders, ["alice", "bob", "alice", "bob"], "{view:#}");
}

/// `tasks/cancel` sends alice's `cancel` into the conversation (bob had agreed); bob
/// confirms with an inform, the thread ends `cancelled`, and `tasks/get` shows the Task
/// `canceled` with the outcome as its status message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_sends_a_cancel_and_the_confirmed_task_is_canceled() {
    let server = Server::start().await;
    let _bob = serve(
        server.client("bob").await,
        Handlers::new()
            .on("fipa-request", "request", |msg| async move {
                msg.agree(json!({})).await?;
                Ok(())
            })
            .on("fipa-request", "cancel", |msg| async move {
                msg.inform(json!({})).await?;
                Ok(())
            }),
    );
    let task = send(
        &server,
        "alice",
        "bob",
        data_message("a2a-book-5", json!({"action": "book-room"})),
        false,
    )
    .await;
    let id = task_id(&task);
    until_task(&server, "alice", "bob", &id, "working task", |t| {
        state(t) == "working"
    })
    .await;

    let cancelled = rpc_ok(&server, "alice", "bob", "tasks/cancel", json!({"id": id})).await;
    check_task(&cancelled);
    assert_eq!(cancelled["id"], id.as_str(), "{cancelled:#}");
    // bob may confirm before the answer is written.
    assert!(
        ["working", "canceled"].contains(&state(&cancelled)),
        "{cancelled:#}"
    );

    let done = until_task(&server, "alice", "bob", &id, "canceled task", |t| {
        state(t) == "canceled"
    })
    .await;
    assert_eq!(
        done["metadata"]["colloquy"]["status"], "completed",
        "{done:#}"
    );
    assert_eq!(
        done["metadata"]["colloquy"]["outcome"], "cancelled",
        "{done:#}"
    );
    check_reason(&done, "cancelled");
    assert_eq!(
        done["artifacts"],
        json!([]),
        "the inform that confirms the cancel is no result: {done:#}"
    );

    let view = view(&server, "alice", &id).await;
    assert_eq!(
        json_performatives(&view),
        ["request", "agree", "cancel", "inform"],
        "{view:#}"
    );
    assert_eq!(view["messages"][2]["sender"], "alice", "{view:#}");
    assert_eq!(view["threads"][0]["state"], "cancelled", "{view:#}");
}

/// A Task whose conversation has ended cannot be cancelled: `tasks/cancel` is a -32002 and
/// the conversation is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_task_is_not_cancelable() {
    let server = Server::start().await;
    let _bob = bob_agrees_then_informs(&server, json!({"booking": "LV-6"})).await;
    let task = send(
        &server,
        "alice",
        "bob",
        data_message("a2a-book-6", json!({"action": "book-room"})),
        true,
    )
    .await;
    assert_eq!(state(&task), "completed", "{task:#}");
    let id = task_id(&task);
    rpc_err(
        &server,
        "alice",
        "bob",
        "tasks/cancel",
        json!({"id": id}),
        TASK_NOT_CANCELABLE,
    )
    .await;
    let view = view(&server, "alice", &id).await;
    assert_eq!(
        json_performatives(&view),
        ["request", "agree", "inform"],
        "{view:#}"
    );
    assert_eq!(
        state(&get_task(&server, "alice", "bob", &id).await),
        "completed"
    );
}

/// Calls that are no A2A call get the JSON-RPC errors, as HTTP 200: an unknown method is
/// -32601 (its id echoed, a string here), a body that is not JSON -32700 with a null id,
/// JSON without a method or with params of the wrong shape -32600 or -32602.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_are_no_a2a_call_get_json_rpc_errors() {
    let server = Server::start().await;
    let unknown =
        json!({"jsonrpc": "2.0", "id": "call-1", "method": "tasks/frobnicate", "params": {}});
    let response = post_rpc(&server, "alice", "bob", &unknown).await;
    check_error(&response, METHOD_NOT_FOUND, "an unknown method");

    let (status, response) = call(
        server
            .as_agent(Method::POST, &endpoint("bob"), "alice")
            .header("content-type", "application/json")
            .body("{\"jsonrpc\": \"2.0\", \"id\": 3, \"method\": "),
    )
    .await;
    assert_eq!(status, 200, "{response:#}");
    assert_eq!(response["jsonrpc"], "2.0", "{response:#}");
    assert!(
        response.get("id").is_some_and(Value::is_null),
        "id null: {response:#}"
    );
    check_error(&response, PARSE_ERROR, "a body that is not JSON");

    let no_method = json!({"jsonrpc": "2.0", "id": 7, "params": {}});
    let response = post_rpc(&server, "alice", "bob", &no_method).await;
    let code = response["error"]["code"].as_i64();
    assert!(
        code == Some(INVALID_REQUEST) || code == Some(INVALID_PARAMS),
        "no method: {response:#}"
    );

    let response = rpc(&server, "alice", "bob", "tasks/get", json!({"id": 5})).await;
    let code = response["error"]["code"].as_i64();
    assert!(
        code == Some(INVALID_REQUEST) || code == Some(INVALID_PARAMS),
        "a numeric task id: {response:#}"
    );
    let response = rpc(
        &server,
        "alice",
        "bob",
        "message/send",
        json!({"message": "hi"}),
    )
    .await;
    let code = response["error"]["code"].as_i64();
    assert!(
        code == Some(INVALID_REQUEST) || code == Some(INVALID_PARAMS),
        "a message that is a string: {response:#}"
    );
    assert!(listed(&server, "alice").await.is_empty(), "nothing started");
}

/// `tasks/get` finds only conversations the caller takes part in: an unknown id is -32001,
/// and so is alice's conversation with bob to carol; alice and bob get it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_get_finds_only_the_callers_conversations() {
    let server = Server::start().await;
    rpc_err(
        &server,
        "alice",
        "bob",
        "tasks/get",
        json!({"id": "no-such-conversation"}),
        TASK_NOT_FOUND,
    )
    .await;
    let task = send(
        &server,
        "alice",
        "bob",
        data_message("a2a-book-7", json!({"action": "book-room"})),
        false,
    )
    .await;
    let id = task_id(&task);
    rpc_err(
        &server,
        "carol",
        "bob",
        "tasks/get",
        json!({"id": id}),
        TASK_NOT_FOUND,
    )
    .await;
    rpc_err(
        &server,
        "carol",
        "alice",
        "tasks/get",
        json!({"id": id}),
        TASK_NOT_FOUND,
    )
    .await;
    get_task(&server, "alice", "bob", &id).await;
    get_task(&server, "bob", "alice", &id).await;
}

/// What the engine refuses of the caller's input is -32602 and starts nothing: an unknown
/// template; a text part where fipa-query's `query-ref` schema requires `ref`; a send to
/// oneself; a message into a task without a performative.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_the_engine_refuses_are_invalid_params() {
    let server = Server::start().await;
    let unknown = naming(
        data_message("a2a-bad-1", json!({"action": "x"})),
        "no-such-template",
        "request",
    );
    let error = rpc_err(
        &server,
        "alice",
        "bob",
        "message/send",
        send_params(unknown, true),
        INVALID_PARAMS,
    )
    .await;
    assert!(
        error["message"]
            .as_str()
            .is_some_and(|m| m.contains("no-such-template")),
        "the engine's message names the template: {error:#}"
    );

    let text = json!({"kind": "message", "role": "user", "messageId": "a2a-bad-2",
        "parts": [{"kind": "text", "text": "price of oak chairs"}]});
    rpc_err(
        &server,
        "alice",
        "dave",
        "message/send",
        send_params(naming(text, "fipa-query", "query-ref"), true),
        INVALID_PARAMS,
    )
    .await;

    rpc_err(
        &server,
        "alice",
        "alice",
        "message/send",
        send_params(data_message("a2a-bad-3", json!({"action": "x"})), true),
        INVALID_PARAMS,
    )
    .await;
    assert!(
        listed(&server, "alice").await.is_empty(),
        "no refused send started a conversation"
    );

    let task = send(
        &server,
        "alice",
        "bob",
        data_message("a2a-book-8", json!({"action": "book-room"})),
        false,
    )
    .await;
    let id = task_id(&task);
    let mut message = data_message("a2a-bob-8", json!({}));
    message["taskId"] = json!(id);
    rpc_err(
        &server,
        "bob",
        "alice",
        "message/send",
        send_params(message, false),
        INVALID_PARAMS,
    )
    .await;
    let view = view(&server, "alice", &id).await;
    assert_eq!(json_performatives(&view), ["request"], "{view:#}");
}

/// JSON-RPC calls need the caller's token: without one, or with an unknown one, the answer
/// is the API's HTTP 401, not a JSON-RPC error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_without_a_valid_token_are_http_401() {
    let server = Server::start().await;
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send",
        "params": send_params(data_message("a2a-anon-1", json!({"action": "x"})), false)});
    let (status, response) =
        call(server.anonymous(Method::POST, &endpoint("bob")).json(&body)).await;
    assert_eq!(status, 401, "{response:#}");
    assert_eq!(response["error"]["code"], "unauthenticated", "{response:#}");
    let (status, response) = call(
        server
            .anonymous(Method::POST, &endpoint("bob"))
            .bearer_auth("not-a-token")
            .json(&body),
    )
    .await;
    assert_eq!(status, 401, "{response:#}");
    assert_eq!(response["error"]["code"], "unauthenticated", "{response:#}");
    assert!(listed(&server, "alice").await.is_empty(), "nothing started");
}

/// Both directions at once: engine A knows `remote-bob` only as an A2A endpoint, which is
/// engine B's `/a2a/bob` (A presents carol's token there). alice's request on A goes out as
/// A2A `message/send`, becomes on B a conversation carol → bob that bob answers, and the
/// completed task comes back to A as remote-bob's `inform`: two Colloquy engines talking A2A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_talk_a2a_to_each_other() {
    let b = Server::start().await;
    let _bob = bob_agrees_then_informs(&b, json!({"booking": "LV-7"})).await;
    let identity = colloquy_server::Identity::from_yaml(
        &format!(
            "agents:\n  - {{id: alice, token: alice-token}}\n  \
             - {{id: remote-bob, a2a: \"{}/a2a/bob\", a2a_token: carol-token}}\n",
            b.url
        ),
        "engine A's agents",
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let a = Server::with(identity, Vec::new()).await;
    let (status, started) = call(a.as_agent(Method::POST, "/v1/conversations", "alice").json(
        &json!({
            "template": "fipa-request",
            "participants": ["remote-bob"],
            "message": {"performative": "request", "content": {"action": "book-room"}}
        }),
    ))
    .await;
    assert_eq!(status, 201, "{started}");
    let id = started["id"].as_str().expect("id").to_owned();
    let ended = ended_on_a(&a, &id).await;
    assert_eq!(ended["outcome"], "success", "{ended:#}");
    // B streams: A's bridge agrees for remote-bob when B's task shows bob working, unless
    // B's events show the task done by then.
    assert_eq!(without_agree(&ended), ["request", "inform"], "{ended:#}");
    let reply = last(&ended);
    assert_eq!(reply["sender"], "remote-bob", "{ended:#}");
    assert_eq!(reply["content"], json!({"booking": "LV-7"}), "{ended:#}");

    // On B, the same request is a conversation carol started with bob.
    let (status, listed) = call(b.as_agent(Method::GET, "/v1/conversations", "carol")).await;
    assert_eq!(status, 200, "{listed}");
    let on_b = listed["conversations"]
        .as_array()
        .and_then(|all| all.first())
        .expect("a conversation on B");
    let there = view(&b, "carol", on_b["id"].as_str().expect("id")).await;
    assert_eq!(there["initiator"], "carol", "{there:#}");
    assert_eq!(there["participants"], json!(["bob"]), "{there:#}");
    assert_eq!(
        json_performatives(&there),
        ["request", "agree", "inform"],
        "{there:#}"
    );
    assert_eq!(
        there["messages"][0]["id"], ended["messages"][0]["id"],
        "B's request carries A's message id (the A2A messageId)"
    );
}

/// The conversation's performatives without its `agree`s (whether a streamed task shows
/// `working` before it ends depends on when the remote's events are written).
fn without_agree(view: &Value) -> Vec<&str> {
    json_performatives(view)
        .into_iter()
        .filter(|performative| *performative != "agree")
        .collect()
}

/// The conversation's last message.
fn last(view: &Value) -> &Value {
    view["messages"]
        .as_array()
        .and_then(|messages| messages.last())
        .expect("a message")
}

/// Engine A, whose `remote-bob` is bob of engine `b` (reached with carol's token there),
/// and alice, who talks to it.
async fn engine_a_with_remote_bob(b: &Server) -> Server {
    engine_a_with(b, colloquy_server::a2a::Settings::default()).await
}

/// [`engine_a_with_remote_bob`], serving A2A as `a2a` says (a trust store, say).
async fn engine_a_with(b: &Server, a2a: colloquy_server::a2a::Settings) -> Server {
    let identity = colloquy_server::Identity::from_yaml(
        &format!(
            "agents:\n  - {{id: alice, token: alice-token}}\n  \
             - {{id: remote-bob, a2a: \"{}/a2a/bob\", a2a_token: carol-token}}\n",
            b.url
        ),
        "engine A's agents",
    )
    .unwrap_or_else(|error| panic!("{error}"));
    let options = colloquy_server::ServiceOptions {
        identity,
        a2a,
        // Deadlines in these scenarios are short; check them often (as `Server::with`).
        scheduler_period: std::time::Duration::from_millis(10),
        ..colloquy_server::ServiceOptions::default()
    };
    Server::with_options(Vec::new(), options).await
}

/// Alice starts `template` on A with remote-bob: the conversation's id.
async fn alice_asks_remote_bob(a: &Server, template: &str) -> String {
    let (status, started) = call(a.as_agent(Method::POST, "/v1/conversations", "alice").json(
        &json!({
            "template": template,
            "participants": ["remote-bob"],
            "message": {"performative": "request", "content": {"action": "book-room"}}
        }),
    ))
    .await;
    assert_eq!(status, 201, "{started}");
    started["id"].as_str().expect("id").to_owned()
}

/// Conversation `id` on engine A as alice sees it once it has ended.
async fn ended_on_a(a: &Server, id: &str) -> Value {
    poll_until(
        || view(a, "alice", id),
        |here| here["status"] == "completed",
    )
    .await
    .unwrap_or_else(|last| panic!("the conversation on A did not end: {last:#}"))
}

/// Alice sends `performative` with `content` into conversation `id` on A.
async fn alice_says(a: &Server, id: &str, performative: &str, content: Value) {
    let (status, body) = call(
        a.as_agent(
            Method::POST,
            &format!("/v1/conversations/{id}/messages"),
            "alice",
        )
        .json(&json!({"performative": performative, "content": content})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
}

/// The one conversation carol has on B (the bridge's calls), as it stands.
async fn the_conversation_on_b(b: &Server) -> Value {
    let (status, listed) = call(b.as_agent(Method::GET, "/v1/conversations", "carol")).await;
    assert_eq!(status, 200, "{listed}");
    let all = listed["conversations"].as_array().expect("conversations");
    assert_eq!(all.len(), 1, "one conversation on B: {listed:#}");
    view(b, "carol", all[0]["id"].as_str().expect("id")).await
}

/// B's card lists JSON-RPC 1.0 and streaming, so A's bridge speaks v1.0 to it and streams
/// (A counts its calls as `SendStreamingMessage`, never `message/send`). Across the engines
/// an `a2a-task` asks back: bob's `query-ref` on B makes the task input-required, which A's
/// bridge records as remote-bob's `query-ref` with B's question (from the task's history:
/// `GetTask`); alice's `inform` answering it goes into the same task on B (one
/// conversation there), and bob's result completes both. B's task shows `working` once
/// alice has answered (bob has spoken before), which A may record as an `agree`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_engines_speak_v1_and_a_question_is_answered_across_them() {
    let b = Server::start().await;
    let _bob = serve(
        b.client("bob").await,
        Handlers::new()
            .on("a2a-task", "request", |msg| async move {
                msg.reply("query-ref", json!({"question": "which city?"}))
                    .await?;
                Ok(())
            })
            .on("a2a-task", "inform", |msg| async move {
                msg.inform(json!("booked in Lisbon")).await?;
                Ok(())
            }),
    );
    let a = engine_a_with_remote_bob(&b).await;
    let id = alice_asks_remote_bob(&a, "a2a-task").await;
    let asked = poll_until(
        || view(&a, "alice", &id),
        |here| json_performatives(here).contains(&"query-ref"),
    )
    .await
    .unwrap_or_else(|last| panic!("no question on A: {last:#}"));
    let question = &asked["messages"][1];
    assert_eq!(question["sender"], "remote-bob", "{asked:#}");
    assert_eq!(
        question["content"],
        json!({"question": "which city?"}),
        "{asked:#}"
    );
    alice_says(&a, &id, "inform", json!({"city": "Lisbon"})).await;
    let ended = ended_on_a(&a, &id).await;
    assert_eq!(ended["outcome"], "success", "{ended:#}");
    assert_eq!(
        without_agree(&ended),
        ["request", "query-ref", "inform", "inform"],
        "{ended:#}"
    );
    assert_eq!(
        last(&ended)["content"],
        json!({"text": "booked in Lisbon"}),
        "{ended:#}"
    );

    let there = the_conversation_on_b(&b).await;
    assert_eq!(
        json_performatives(&there),
        ["request", "query-ref", "inform", "inform"],
        "alice's answer went into the task that asked: {there:#}"
    );
    assert_eq!(there["messages"][2]["content"], json!({"city": "Lisbon"}));

    let metrics = a.metrics().await;
    assert!(
        metrics.contains(
            r#"colloquy_a2a_calls_total{method="SendStreamingMessage",result="answered"} 2"#
        ),
        "{metrics}"
    );
    assert!(!metrics.contains(r#"method="message/send""#), "{metrics}");
}

/// Alice on A cancels while bob on B works (agreed, no result): A's bridge asks B to
/// cancel the task (v1.0 `CancelTask`), B sends the cancel into its conversation, bob
/// confirms it, and the confirmation ends A's conversation cancelled. A's bridge streams the
/// task, so bob's `agree` reaches A as it comes and the running task holds up nothing; the
/// stream's `canceled` answers nothing twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_on_one_engine_cancels_the_task_on_the_other() {
    let b = Server::start().await;
    let _bob = serve(
        b.client("bob").await,
        Handlers::new()
            .on("fipa-request", "request", |msg| async move {
                msg.agree(json!({})).await?;
                Ok(())
            })
            .on("fipa-request", "cancel", |msg| async move {
                msg.inform(json!({})).await?;
                Ok(())
            }),
    );
    let a = engine_a_with_remote_bob(&b).await;
    let id = alice_asks_remote_bob(&a, "fipa-request").await;
    poll_until(
        || view(&a, "alice", &id),
        |here| json_performatives(here).contains(&"agree"),
    )
    .await
    .unwrap_or_else(|last| panic!("no agree on A: {last:#}"));
    alice_says(&a, &id, "cancel", json!({"why": "changed my mind"})).await;
    let ended = ended_on_a(&a, &id).await;
    assert_eq!(ended["outcome"], "cancelled", "{ended:#}");
    assert_eq!(
        json_performatives(&ended),
        ["request", "agree", "cancel", "inform"],
        "{ended:#}"
    );
    assert_eq!(
        ended["messages"][3]["in_reply_to"], ended["messages"][2]["id"],
        "remote-bob's inform confirms the cancel: {ended:#}"
    );

    let there = the_conversation_on_b(&b).await;
    assert_eq!(there["outcome"], "cancelled", "{there:#}");
    assert_eq!(
        json_performatives(&there),
        ["request", "agree", "cancel", "inform"],
        "{there:#}"
    );
    let metrics = a.metrics().await;
    assert!(
        metrics.contains(r#"colloquy_a2a_calls_total{method="CancelTask",result="answered"} 1"#),
        "{metrics}"
    );
}

/// A `message/send` from another engine's bridge (it names its conversation in
/// `metadata.colloquy.conversation`) sent again with the same `messageId` (the bridge lost
/// the first answer) gets the task the first one started, not a second conversation. A
/// plain client's message sent twice opens two tasks, as A2A servers do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_repeated_with_its_message_id_gets_the_same_task() {
    let server = Server::start().await;
    let plain = data_message("a2a-twice", json!({"action": "book-room"}));
    let one = send(&server, "alice", "bob", plain.clone(), false).await;
    let two = send(&server, "alice", "bob", plain, false).await;
    assert_ne!(task_id(&one), task_id(&two), "{one:#}\n{two:#}");
    let (status, listed) = call(server.as_agent(Method::GET, "/v1/conversations", "alice")).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed["conversations"].as_array().map(Vec::len), Some(2));

    let server = Server::start().await;
    let mut message = data_message("a2a-once", json!({"action": "book-room"}));
    message["metadata"] = json!({"colloquy": {"conversation": "on-engine-a"}});
    let first = send(&server, "alice", "bob", message.clone(), false).await;
    let again = send(&server, "alice", "bob", message.clone(), false).await;
    assert_eq!(task_id(&first), task_id(&again), "{first:#}\n{again:#}");
    let (status, listed) = call(server.as_agent(Method::GET, "/v1/conversations", "alice")).await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(
        listed["conversations"].as_array().map(Vec::len),
        Some(1),
        "{listed:#}"
    );
    // Another caller's message with the same id is its own task.
    let carols = send(&server, "carol", "bob", message, false).await;
    assert_ne!(task_id(&carols), task_id(&first), "{carols:#}");
}

/// A JSON-RPC call with an `A2A-Version` header (`None`: without one); the whole response,
/// checked as [`post_rpc`] checks it.
async fn rpc_as(server: &Server, version: Option<&str>, method: &str, params: Value) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": next_id(), "method": method, "params": params});
    let mut request = server
        .as_agent(Method::POST, &endpoint("bob"), "alice")
        .json(&body);
    if let Some(version) = version {
        request = request.header("A2A-Version", version);
    }
    let (status, response) = call(request).await;
    assert_eq!(status, 200, "{body:#}\n→ {response:#}");
    assert_eq!(response["id"], body["id"], "{body:#}\n→ {response:#}");
    response
}

/// The `result` of a v1.0 call that must succeed.
async fn v1_ok(server: &Server, method: &str, params: Value) -> Value {
    let response = rpc_as(server, Some("1.0"), method, params.clone()).await;
    assert!(
        response.get("error").is_none(),
        "{method} {params:#} failed: {response:#}"
    );
    response["result"].clone()
}

/// No `kind` anywhere in `value`: v1.0 dropped it.
fn assert_no_kind(value: &Value, whole: &Value) {
    match value {
        Value::Object(map) => {
            assert!(!map.contains_key("kind"), "v1.0 has no `kind`: {whole:#}");
            map.values().for_each(|inner| assert_no_kind(inner, whole));
        }
        Value::Array(items) => items.iter().for_each(|inner| assert_no_kind(inner, whole)),
        _ => {}
    }
}

/// With `A2A-Version: 1.0`, `SendMessage` waits for the task to end (v1.0's default) and
/// answers `{"task": …}` in v1.0's shapes: `TASK_STATE_COMPLETED`, parts without `kind`,
/// the history with `ROLE_USER` for alice and `ROLE_AGENT` for bob. `GetTask` cuts the
/// history to `historyLength` (0: none) and refuses a negative one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_client_sends_and_gets_tasks_in_v1_names_and_shapes() {
    let server = Server::start().await;
    let _bob = bob_agrees_then_informs(&server, json!({"booking": "LV-9"})).await;
    let sent = v1_ok(
        &server,
        "SendMessage",
        json!({"message": {"messageId": "v1-book-1", "role": "ROLE_USER",
            "parts": [{"data": {"action": "book-room"}}]}}),
    )
    .await;
    let task = &sent["task"];
    assert_no_kind(&sent, &sent);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{sent:#}");
    assert_eq!(task["contextId"], task["id"], "{sent:#}");
    assert_eq!(
        task["artifacts"][0]["parts"],
        json!([{"data": {"booking": "LV-9"}}]),
        "{sent:#}"
    );
    let roles: Vec<&str> = task["history"]
        .as_array()
        .expect("a history")
        .iter()
        .map(|message| message["role"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(roles, ["ROLE_USER", "ROLE_AGENT", "ROLE_AGENT"], "{sent:#}");
    assert_eq!(
        task["history"][0]["parts"],
        json!([{"data": {"action": "book-room"}}]),
        "{sent:#}"
    );

    let id = task["id"].as_str().expect("an id");
    let last = v1_ok(&server, "GetTask", json!({"id": id, "historyLength": 1})).await;
    assert_eq!(last["id"], id, "{last:#}");
    assert_eq!(
        last["history"][0]["metadata"]["colloquy"]["performative"], "inform",
        "{last:#}"
    );
    assert_eq!(
        last["history"].as_array().map(Vec::len),
        Some(1),
        "{last:#}"
    );
    let bare = v1_ok(&server, "GetTask", json!({"id": id, "historyLength": 0})).await;
    assert!(bare.get("history").is_none(), "{bare:#}");
    let negative = rpc_as(
        &server,
        Some("1.0"),
        "GetTask",
        json!({"id": id, "historyLength": -1}),
    )
    .await;
    check_error(&negative, INVALID_PARAMS, "a negative history length");
    let unknown = rpc_as(&server, Some("1.0"), "GetTask", json!({"id": "a2a-nope"})).await;
    check_error(&unknown, TASK_NOT_FOUND, "an unknown task");
}

/// `CancelTask` sends alice's `cancel` as `tasks/cancel` does; the task ends
/// `TASK_STATE_CANCELED`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1_client_cancels_a_running_task() {
    let server = Server::start().await;
    let _bob = serve(
        server.client("bob").await,
        Handlers::new()
            .on("fipa-request", "request", |msg| async move {
                msg.agree(json!({})).await?;
                Ok(())
            })
            .on("fipa-request", "cancel", |msg| async move {
                msg.inform(json!({})).await?;
                Ok(())
            }),
    );
    let sent = v1_ok(
        &server,
        "SendMessage",
        json!({"message": {"messageId": "v1-book-2", "role": "ROLE_USER",
            "parts": [{"text": "book a room"}]},
            "configuration": {"returnImmediately": true}}),
    )
    .await;
    let id = sent["task"]["id"].as_str().expect("an id").to_owned();
    until_task(&server, "alice", "bob", &id, "working task", |t| {
        state(t) == "working"
    })
    .await;
    let cancelled = v1_ok(&server, "CancelTask", json!({"id": id})).await;
    assert!(
        ["TASK_STATE_WORKING", "TASK_STATE_CANCELED"]
            .contains(&cancelled["status"]["state"].as_str().unwrap_or_default()),
        "{cancelled:#}"
    );
    poll_until(
        || v1_ok(&server, "GetTask", json!({"id": id})),
        |task| task["status"]["state"] == "TASK_STATE_CANCELED",
    )
    .await
    .unwrap_or_else(|last| panic!("no canceled v1 task within {STEP:?}\nlast: {last:#}"));
}

/// The `A2A-Version` header chooses the version: an unknown one is -32009; a v1.0 name
/// without the header, or a v0.3 name with `1.0`, is -32601 saying which header has it;
/// v0.3 enum spellings under 1.0 are invalid params; methods of capabilities the card does
/// not claim get their own errors; the card lists both versions' interfaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_version_header_chooses_names_and_shapes() {
    let server = Server::start().await;
    let message = json!({"message": {"messageId": "v1-x", "role": "ROLE_USER",
        "parts": [{"text": "hi"}]}});
    let unsupported = rpc_as(&server, Some("0.5"), "SendMessage", message.clone()).await;
    check_error(&unsupported, -32009, "an unsupported version");
    let unversioned = rpc_as(&server, None, "SendMessage", message.clone()).await;
    check_error(
        &unversioned,
        METHOD_NOT_FOUND,
        "a v1.0 name without the header",
    );
    assert!(
        unversioned["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("A2A-Version: 1.0")),
        "{unversioned:#}"
    );
    let old_name = rpc_as(&server, Some("1.0"), "message/send", message.clone()).await;
    check_error(&old_name, METHOD_NOT_FOUND, "a v0.3 name with 1.0");
    let old_role = rpc_as(
        &server,
        Some("1.0"),
        "SendMessage",
        json!({"message": {"messageId": "v1-y", "role": "user", "parts": [{"text": "hi"}]}}),
    )
    .await;
    check_error(&old_role, INVALID_PARAMS, "a v0.3 role spelling");
    let nothing = rpc_as(
        &server,
        Some("1.0"),
        "SubscribeToTask",
        json!({"id": "a2a-nope"}),
    )
    .await;
    check_error(
        &nothing,
        TASK_NOT_FOUND,
        "a subscription to an unknown task",
    );
    let _ = message;
    let push = rpc_as(
        &server,
        Some("1.0"),
        "CreateTaskPushNotificationConfig",
        json!({}),
    )
    .await;
    check_error(
        &push,
        INVALID_PARAMS,
        "a push config without its url and task",
    );

    let (status, card) =
        call(server.anonymous(Method::GET, "/a2a/bob/.well-known/agent-card.json")).await;
    assert_eq!(status, 200, "{card:#}");
    let url = format!("{}/a2a/bob", server.url);
    assert_eq!(
        card["supportedInterfaces"],
        json!([
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
            {"url": format!("{url}/rest"), "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"},
        ]),
        "{card:#}"
    );
}

/// A v1.0 call over the HTTP+JSON binding as alice: status and body.
async fn rest(server: &Server, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    let mut request = server
        .as_agent(method, &format!("/a2a/bob/rest{path}"), "alice")
        .header("A2A-Version", "1.0");
    if let Some(body) = body {
        request = request.json(&body);
    }
    call(request).await
}

/// An HTTP+JSON error: `status`, the AIP-193 shape, and the A2A reason when there is one.
fn check_rest_error(answer: &(u16, Value), status: u16, reason: Option<&str>) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body:#}");
    assert_eq!(body["error"]["code"], status, "{body:#}");
    assert!(body["error"]["status"].is_string(), "{body:#}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{body:#}"
    );
    if let Some(reason) = reason {
        assert_eq!(body["error"]["details"][0]["reason"], reason, "{body:#}");
        assert_eq!(
            body["error"]["details"][0]["domain"], "a2a-protocol.org",
            "{body:#}"
        );
    }
}

/// The HTTP+JSON binding (`/a2a/{agent}/rest`): `POST message:send` answers `{"task"}` as
/// `SendMessage` does, `GET tasks/{id}` the task (cut to `historyLength`), `POST
/// tasks/{id}:cancel` of an ended task is 409 `TASK_NOT_CANCELABLE`; an unknown task is 404
/// `TASK_NOT_FOUND`, a bad body 400, a v0.3 or unknown version 400 `VERSION_NOT_SUPPORTED`,
/// a subscription to an ended task 400 `UNSUPPORTED_OPERATION`; `GET /tasks` lists (a bad
/// page size is 400).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_json_binding_sends_gets_and_refuses_as_the_spec_says() {
    let server = Server::start().await;
    let _bob = bob_agrees_then_informs(&server, json!({"booking": "LV-10"})).await;
    let (status, sent) = rest(
        &server,
        Method::POST,
        "/message:send",
        Some(
            json!({"message": {"messageId": "rest-book-1", "role": "ROLE_USER",
            "parts": [{"data": {"action": "book-room"}}]}}),
        ),
    )
    .await;
    assert_eq!(status, 200, "{sent:#}");
    assert_eq!(
        sent["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{sent:#}"
    );
    assert_no_kind(&sent, &sent);
    let id = sent["task"]["id"].as_str().expect("an id").to_owned();

    let (status, task) = rest(
        &server,
        Method::GET,
        &format!("/tasks/{id}?historyLength=1"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{task:#}");
    assert_eq!(task["id"], id.as_str(), "{task:#}");
    assert_eq!(
        task["history"].as_array().map(Vec::len),
        Some(1),
        "{task:#}"
    );

    let ended = rest(&server, Method::POST, &format!("/tasks/{id}:cancel"), None).await;
    check_rest_error(&ended, 409, Some("TASK_NOT_CANCELABLE"));
    let unknown = rest(&server, Method::GET, "/tasks/a2a-nope", None).await;
    check_rest_error(&unknown, 404, Some("TASK_NOT_FOUND"));
    let garbled = rest(
        &server,
        Method::POST,
        "/message:send",
        Some(json!({"message": {"role": "user"}})),
    )
    .await;
    check_rest_error(&garbled, 400, None);
    let streaming = rest(&server, Method::POST, "/message:stream", Some(json!({}))).await;
    check_rest_error(&streaming, 400, None);
    let ended = rest(
        &server,
        Method::POST,
        &format!("/tasks/{id}:subscribe"),
        None,
    )
    .await;
    check_rest_error(&ended, 400, Some("UNSUPPORTED_OPERATION"));
    let (status, listing) = rest(&server, Method::GET, "/tasks?pageSize=10", None).await;
    assert_eq!(status, 200, "{listing:#}");
    assert_eq!(listing["tasks"][0]["id"], id.as_str(), "{listing:#}");
    let bad_size = rest(&server, Method::GET, "/tasks?pageSize=0", None).await;
    check_rest_error(&bad_size, 400, None);
    let old = call(
        server
            .as_agent(Method::GET, &format!("/a2a/bob/rest/tasks/{id}"), "alice")
            .header("A2A-Version", "0.3"),
    )
    .await;
    check_rest_error(&old, 400, Some("VERSION_NOT_SUPPORTED"));
}

/// `ListTasks` pages alice's tasks with bob, latest change first: `totalSize` counts them all,
/// `nextPageToken` leads to the rest and is "" on the last page; `status` and `contextId`
/// filter; artifacts only with `includeArtifacts`; another caller sees none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_tasks_pages_the_callers_tasks_latest_first() {
    let server = Server::start().await;
    let _bob = bob_agrees_then_informs(&server, json!({"booking": "LV-11"})).await;
    let mut ids = Vec::new();
    for n in 0..3 {
        let sent = v1_ok(
            &server,
            "SendMessage",
            json!({"message": {"messageId": format!("v1-list-{n}"), "role": "ROLE_USER",
                "parts": [{"text": "book"}]}}),
        )
        .await;
        assert_eq!(
            sent["task"]["status"]["state"], "TASK_STATE_COMPLETED",
            "{sent:#}"
        );
        ids.push(sent["task"]["id"].as_str().expect("an id").to_owned());
        // Each task's last change at a later millisecond than the one before.
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let first = v1_ok(&server, "ListTasks", json!({"pageSize": 2})).await;
    assert_eq!(first["totalSize"], 3, "{first:#}");
    assert_eq!(first["pageSize"], 2, "{first:#}");
    let listed = |page: &Value| -> Vec<String> {
        page["tasks"]
            .as_array()
            .expect("tasks")
            .iter()
            .map(|task| task["id"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    assert_eq!(
        listed(&first),
        [ids[2].clone(), ids[1].clone()],
        "{first:#}"
    );
    assert!(first["tasks"][0].get("artifacts").is_none(), "{first:#}");
    assert!(first["tasks"][0].get("history").is_none(), "{first:#}");
    let token = first["nextPageToken"].as_str().expect("a token");
    assert!(!token.is_empty(), "{first:#}");
    let rest = v1_ok(
        &server,
        "ListTasks",
        json!({"pageSize": 2, "pageToken": token}),
    )
    .await;
    assert_eq!(listed(&rest), [ids[0].clone()], "{rest:#}");
    assert_eq!(rest["nextPageToken"], "", "{rest:#}");

    let completed = v1_ok(
        &server,
        "ListTasks",
        json!({"status": "TASK_STATE_COMPLETED", "includeArtifacts": true, "historyLength": 1}),
    )
    .await;
    assert_eq!(completed["totalSize"], 3, "{completed:#}");
    assert_eq!(
        completed["tasks"][0]["artifacts"][0]["parts"],
        json!([{"data": {"booking": "LV-11"}}]),
        "{completed:#}"
    );
    assert_eq!(
        completed["tasks"][0]["history"].as_array().map(Vec::len),
        Some(1)
    );
    let working = v1_ok(
        &server,
        "ListTasks",
        json!({"status": "TASK_STATE_WORKING"}),
    )
    .await;
    assert_eq!(
        (working["totalSize"].clone(), working["tasks"].clone()),
        (json!(0), json!([]))
    );
    let one = v1_ok(&server, "ListTasks", json!({"contextId": ids[1]})).await;
    assert_eq!(listed(&one), [ids[1].clone()], "{one:#}");

    let body = json!({"jsonrpc": "2.0", "id": next_id(), "method": "ListTasks", "params": {}});
    let (status, carols) = call(
        server
            .as_agent(Method::POST, &endpoint("bob"), "carol")
            .header("A2A-Version", "1.0")
            .json(&body),
    )
    .await;
    assert_eq!(status, 200, "{carols:#}");
    assert_eq!(carols["result"]["totalSize"], 0, "{carols:#}");
}

/// The events of a server-sent event stream, read as they come.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn open(request: reqwest::RequestBuilder) -> Events {
        let response = tokio::time::timeout(STEP, request.send())
            .await
            .expect("the stream opened in time")
            .expect("sent");
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Events {
            response,
            buffer: String::new(),
        }
    }

    /// The next event's data as JSON; `None` once the stream has ended.
    async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: String = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(str::trim_start)
                    .collect();
                if data.is_empty() {
                    continue; // a keep-alive comment
                }
                return Some(serde_json::from_str(&data).expect("an event is JSON"));
            }
            let chunk = tokio::time::timeout(STEP, self.response.chunk())
                .await
                .expect("an event or the end in time")
                .expect("the stream read");
            self.buffer.push_str(&String::from_utf8_lossy(&chunk?));
        }
    }
}

/// bob: agrees at once, informs `{"booking": "LV-12"}` when `go` is notified.
fn bob_informs_when_told(bob: Client, go: Arc<Notify>) -> Agent {
    serve(
        bob,
        Handlers::new().on("fipa-request", "request", move |msg| {
            let go = go.clone();
            async move {
                msg.agree(json!({})).await?;
                go.notified().await;
                msg.inform(json!({"booking": "LV-12"})).await?;
                Ok(())
            }
        }),
    )
}

/// `SendStreamingMessage` (v1.0, JSON-RPC) streams the task: first the task, then bob's
/// result as an artifact update and the completion as a status update, each a JSON-RPC
/// response to the request's id, and the stream ends with the task. v0.3's `message/stream`
/// writes the same in v0.3's shapes, its last status update `final`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_send_streams_the_task_until_it_ends() {
    let server = Server::start().await;
    let go = Arc::new(Notify::new());
    let _bob = bob_informs_when_told(server.client("bob").await, go.clone());

    let body = json!({"jsonrpc": "2.0", "id": 77, "method": "SendStreamingMessage",
        "params": {"message": {"messageId": "v1-stream-1", "role": "ROLE_USER",
            "parts": [{"text": "book"}]}}});
    let mut events = Events::open(
        server
            .as_agent(Method::POST, &endpoint("bob"), "alice")
            .header("A2A-Version", "1.0")
            .json(&body),
    )
    .await;
    let first = events.next().await.expect("the task first");
    assert_eq!(first["id"], 77, "{first:#}");
    let task = first["result"]["task"].clone();
    let state = task["status"]["state"].as_str().unwrap_or_default();
    assert!(
        ["TASK_STATE_SUBMITTED", "TASK_STATE_WORKING"].contains(&state),
        "{first:#}"
    );
    go.notify_one();
    let mut rest = Vec::new();
    while let Some(event) = events.next().await {
        assert_eq!(event["id"], 77, "{event:#}");
        rest.push(event["result"].clone());
    }
    let artifact = rest
        .iter()
        .find(|event| event.get("artifactUpdate").is_some())
        .unwrap_or_else(|| panic!("an artifact update: {rest:#?}"));
    assert_eq!(
        artifact["artifactUpdate"]["artifact"]["parts"],
        json!([{"data": {"booking": "LV-12"}}]),
        "{rest:#?}"
    );
    let last = rest.last().expect("updates after the task");
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{rest:#?}"
    );
    assert_eq!(last["statusUpdate"]["taskId"], task["id"], "{rest:#?}");

    // v0.3's message/stream.
    let body = json!({"jsonrpc": "2.0", "id": "s", "method": "message/stream",
        "params": {"message": data_message("v03-stream-1", json!({"action": "book"}))}});
    let mut events = Events::open(
        server
            .as_agent(Method::POST, &endpoint("bob"), "alice")
            .json(&body),
    )
    .await;
    let first = events.next().await.expect("the task first");
    assert_eq!(first["result"]["kind"], "task", "{first:#}");
    go.notify_one();
    let mut last = Value::Null;
    while let Some(event) = events.next().await {
        last = event;
    }
    assert_eq!(last["result"]["kind"], "status-update", "{last:#}");
    assert_eq!(last["result"]["status"]["state"], "completed", "{last:#}");
    assert_eq!(last["result"]["final"], true, "{last:#}");
}

/// `SubscribeToTask` on a running task (HTTP+JSON, `tasks/{id}:subscribe`) streams bare
/// `StreamResponse`s from the task as it stands to its end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_follows_a_running_task_to_its_end() {
    let server = Server::start().await;
    let go = Arc::new(Notify::new());
    let _bob = bob_informs_when_told(server.client("bob").await, go.clone());
    let sent = v1_ok(
        &server,
        "SendMessage",
        json!({"message": {"messageId": "v1-sub-1", "role": "ROLE_USER",
            "parts": [{"text": "book"}]}, "configuration": {"returnImmediately": true}}),
    )
    .await;
    let id = sent["task"]["id"].as_str().expect("an id").to_owned();
    until_task(&server, "alice", "bob", &id, "working task", |t| {
        state(t) == "working"
    })
    .await;
    let mut events = Events::open(
        server
            .as_agent(
                Method::GET,
                &format!("/a2a/bob/rest/tasks/{id}:subscribe"),
                "alice",
            )
            .header("A2A-Version", "1.0"),
    )
    .await;
    let first = events.next().await.expect("the task first");
    assert_eq!(
        first["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{first:#}"
    );
    go.notify_one();
    let mut last = Value::Null;
    while let Some(event) = events.next().await {
        last = event;
    }
    assert_eq!(
        last["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{last:#}"
    );
}

/// v1.0 over `a2a-task`: bob asks back (`query-ref`), so alice's blocking `SendMessage`
/// answers at once with the task `TASK_STATE_INPUT_REQUIRED`; her next message to the task,
/// naming no performative, is the one move the protocol leaves her (`inform`, the answer),
/// and bob's text `inform` completes the task with a text artifact. A request bob answers
/// with `reply` gets a Message, not a Task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_task_waits_for_input_and_a_direct_reply_is_a_message() {
    let server = Server::start().await;
    let _bob = serve(
        server.client("bob").await,
        Handlers::new()
            .on("a2a-task", "request", |msg| async move {
                if msg.content()["text"] == "hello" {
                    msg.reply("reply", json!("hi")).await?;
                } else {
                    msg.reply("query-ref", json!({"question": "which city?"}))
                        .await?;
                }
                Ok(())
            })
            .on("a2a-task", "inform", |msg| async move {
                msg.inform(json!("booked in Lisbon")).await?;
                Ok(())
            }),
    );
    let message = |id: &str, text: &str| {
        json!({"messageId": id, "role": "ROLE_USER", "parts": [{"text": text}],
            "metadata": {"colloquy": {"template": "a2a-task"}}})
    };
    let asked = v1_ok(
        &server,
        "SendMessage",
        json!({"message": message("a2a-ask-1", "book a room")}),
    )
    .await;
    assert_eq!(
        asked["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked:#}"
    );
    // The question is the status message.
    assert_eq!(
        asked["task"]["status"]["message"]["parts"],
        json!([{"data": {"question": "which city?"}}]),
        "{asked:#}"
    );
    assert_eq!(asked["task"]["status"]["message"]["role"], "ROLE_AGENT");
    let id = asked["task"]["id"].as_str().expect("a task id").to_owned();
    let mut answer = message("a2a-ask-2", "Lisbon");
    answer["taskId"] = json!(id);
    answer["metadata"] = json!({});
    let done = v1_ok(&server, "SendMessage", json!({"message": answer})).await;
    assert_eq!(
        done["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done:#}"
    );
    assert_eq!(
        done["task"]["artifacts"][0]["parts"],
        json!([{"text": "booked in Lisbon"}]),
        "{done:#}"
    );
    let view = view(&server, "alice", &id).await;
    assert_eq!(
        json_performatives(&view),
        ["request", "query-ref", "inform", "inform"],
        "{view:#}"
    );

    let direct = v1_ok(
        &server,
        "SendMessage",
        json!({"message": message("a2a-hello", "hello")}),
    )
    .await;
    assert!(direct.get("task").is_none(), "{direct:#}");
    assert_eq!(direct["message"]["role"], "ROLE_AGENT", "{direct:#}");
    assert_eq!(
        direct["message"]["parts"],
        json!([{"text": "hi"}]),
        "{direct:#}"
    );
}

/// A push receiver on loopback: answers its first request 500 (so the engine retries), the
/// rest 200, and hands each accepted request's head (lowercased) and JSON body over.
async fn push_receiver() -> (
    String,
    tokio::sync::mpsc::UnboundedReceiver<(String, Value)>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let url = format!("http://{}/a2a-push", listener.local_addr().expect("addr"));
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut first = true;
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buffer = Vec::new();
            let mut chunk = [0u8; 4096];
            loop {
                if let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                    let head = String::from_utf8_lossy(&buffer[..end]).to_ascii_lowercase();
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse().ok())
                        .unwrap_or(0);
                    if buffer.len() >= end + 4 + length {
                        let body: Vec<u8> =
                            buffer.drain(..end + 4 + length).skip(end + 4).collect();
                        let answer: &[u8] = if std::mem::take(&mut first) {
                            b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n"
                        } else {
                            let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
                            let _ = tx.send((head, body));
                            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"
                        };
                        if socket.write_all(answer).await.is_err() {
                            break;
                        }
                        continue;
                    }
                }
                match socket.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            }
        }
    });
    (url, rx)
}

/// The next push `push_receiver` took, within [`STEP`].
async fn next_push(
    pushed: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Value)>,
) -> (String, Value) {
    tokio::time::timeout(STEP, pushed.recv())
        .await
        .expect("a push in time")
        .expect("a push")
}

/// Push notifications, v1.0: alice's `SendMessage` names a webhook (with a token and bearer
/// credentials); bob asks back, so the webhook gets the task's move to input-required (after
/// one retry: the receiver fails its first request); alice answers, bob informs, and the
/// webhook gets the artifact and the completion, each a `StreamResponse`, each with the
/// credentials. The config is read back, listed and deleted. A server that does not allow
/// private addresses refuses a loopback webhook and opens no task.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_notifications_follow_a_task_to_its_webhook() {
    let server = Server::with_options(
        Vec::new(),
        colloquy_server::ServiceOptions {
            identity: colloquy_tests::http::identity(&[]),
            a2a: colloquy_server::a2a::Settings {
                template: "a2a-task".to_owned(),
                push_allow_private: true,
                ..colloquy_server::a2a::Settings::default()
            },
            ..colloquy_server::ServiceOptions::default()
        },
    )
    .await;
    let _bob = serve(
        server.client("bob").await,
        Handlers::new()
            .on("a2a-task", "request", |msg| async move {
                msg.reply("query-ref", json!({"question": "which city?"}))
                    .await?;
                Ok(())
            })
            .on("a2a-task", "inform", |msg| async move {
                msg.inform(json!("booked")).await?;
                Ok(())
            }),
    );
    let (url, mut pushed) = push_receiver().await;
    let config = json!({"id": "hook-1", "url": url, "token": "tok-1",
        "authentication": {"scheme": "Bearer", "credentials": "secret-1"}});
    let asked = v1_ok(
        &server,
        "SendMessage",
        json!({"message": {"messageId": "push-1", "role": "ROLE_USER",
            "parts": [{"text": "book a room"}]},
            "configuration": {"taskPushNotificationConfig": config}}),
    )
    .await;
    let id = asked["task"]["id"].as_str().expect("a task id").to_owned();
    let (head, body) = next_push(&mut pushed).await;
    assert!(head.contains("authorization: bearer secret-1"), "{head}");
    assert!(head.contains("x-a2a-notification-token: tok-1"), "{head}");
    assert_eq!(body["statusUpdate"]["taskId"], id.as_str(), "{body:#}");
    assert_eq!(
        body["statusUpdate"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{body:#}"
    );

    let read = v1_ok(
        &server,
        "GetTaskPushNotificationConfig",
        json!({"taskId": id, "id": "hook-1"}),
    )
    .await;
    assert_eq!(read["url"], url.as_str(), "{read:#}");
    assert_eq!(read["taskId"], id.as_str(), "{read:#}");
    let configs = v1_ok(
        &server,
        "ListTaskPushNotificationConfigs",
        json!({"taskId": id}),
    )
    .await;
    assert_eq!(
        configs["configs"].as_array().map(Vec::len),
        Some(1),
        "{configs:#}"
    );

    let answer = json!({"messageId": "push-2", "role": "ROLE_USER", "taskId": id,
        "parts": [{"text": "Lisbon"}]});
    v1_ok(&server, "SendMessage", json!({"message": answer})).await;
    // Every step shows, however fast bob answered: alice's answer set the task working.
    let (_, working) = next_push(&mut pushed).await;
    assert_eq!(
        working["statusUpdate"]["status"]["state"], "TASK_STATE_WORKING",
        "{working:#}"
    );
    let (_, artifact) = next_push(&mut pushed).await;
    assert_eq!(
        artifact["artifactUpdate"]["artifact"]["parts"],
        json!([{"text": "booked"}]),
        "{artifact:#}"
    );
    let (head, done) = next_push(&mut pushed).await;
    assert!(head.contains("authorization: bearer secret-1"), "{head}");
    assert_eq!(
        done["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done:#}"
    );

    v1_ok(
        &server,
        "DeleteTaskPushNotificationConfig",
        json!({"taskId": id, "id": "hook-1"}),
    )
    .await;
    let gone = rpc_as(
        &server,
        Some("1.0"),
        "GetTaskPushNotificationConfig",
        json!({"taskId": id, "id": "hook-1"}),
    )
    .await;
    assert_eq!(gone["error"]["code"], -32001, "{gone:#}");

    // A config set on a task that has ended gets every step of it, from the log, through
    // the HTTP+JSON binding this time.
    let ended = v1_ok(
        &server,
        "SendMessage",
        json!({"message": {"messageId": "push-4", "role": "ROLE_USER",
            "parts": [{"text": "Porto, please"}]}}),
    )
    .await;
    let ended = ended["task"]["id"].as_str().expect("a task id").to_owned();
    let answer = json!({"messageId": "push-5", "role": "ROLE_USER", "taskId": ended,
        "parts": [{"text": "Porto"}]});
    v1_ok(&server, "SendMessage", json!({"message": answer})).await;
    let (status, created) = call(
        server
            .as_agent(
                Method::POST,
                &format!("/a2a/bob/rest/tasks/{ended}/pushNotificationConfigs"),
                "alice",
            )
            .json(&json!({"url": url})),
    )
    .await;
    assert_eq!(status, 200, "{created:#}");
    assert!(
        created["id"].as_str().is_some_and(|id| !id.is_empty()),
        "{created:#}"
    );
    let mut states = Vec::new();
    loop {
        let (_, event) = next_push(&mut pushed).await;
        if let Some(state) = event["statusUpdate"]["status"]["state"].as_str() {
            states.push(state.to_owned());
            if state == "TASK_STATE_COMPLETED" {
                break;
            }
        }
    }
    assert_eq!(
        states,
        [
            "TASK_STATE_INPUT_REQUIRED",
            "TASK_STATE_WORKING",
            "TASK_STATE_COMPLETED"
        ]
    );

    // Without --a2a-push-allow-private, a loopback webhook is refused and nothing is sent.
    let strict = Server::start().await;
    let refused = rpc_as(
        &strict,
        Some("1.0"),
        "SendMessage",
        json!({"message": {"messageId": "push-3", "role": "ROLE_USER",
            "parts": [{"text": "book"}]},
            "configuration": {"taskPushNotificationConfig": {"url": "http://127.0.0.1:9/x"}}}),
    )
    .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused:#}");
    let why = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        why.contains("private") && why.contains("taskPushNotificationConfig"),
        "{why}"
    );
    assert!(listed(&strict, "alice").await.is_empty());
}

/// With a key, the v1.0 card is served signed: a client that trusts the key's JWK verifies
/// it, and the card it verifies is the card it got (altered, it does not verify). A signed
/// card is still cacheable: the same bytes, the same ETag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_is_served_signed_and_verifies_against_the_trusted_key() {
    use colloquy_a2a::signing::{CardSigner, TrustStore};
    let der = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/a2a-card-key.der"),
    )
    .expect("the test key");
    let signer = Arc::new(CardSigner::from_pkcs8(&der, "colloquy-test-1").expect("a key"));
    let trusted = TrustStore::from_jwks(&json!({"keys": [signer.public_jwk()]})).expect("jwks");
    let server = Server::with_options(
        Vec::new(),
        colloquy_server::ServiceOptions {
            identity: colloquy_tests::http::identity(&[]),
            a2a: colloquy_server::a2a::Settings {
                card_signer: Some(signer),
                ..colloquy_server::a2a::Settings::default()
            },
            ..colloquy_server::ServiceOptions::default()
        },
    )
    .await;
    let (status, card) =
        call(server.anonymous(Method::GET, "/a2a/bob/.well-known/agent-card.json")).await;
    assert_eq!(status, 200, "{card:#}");
    assert_eq!(
        card["signatures"].as_array().map(Vec::len),
        Some(1),
        "{card:#}"
    );
    assert_eq!(trusted.verify(&card).as_deref(), Ok("colloquy-test-1"));
    let mut altered = card.clone();
    altered["skills"] = json!([]);
    assert!(trusted.verify(&altered).is_err());
    let (_, again) =
        call(server.anonymous(Method::GET, "/a2a/bob/.well-known/agent-card.json")).await;
    assert_eq!(trusted.verify(&again).as_deref(), Ok("colloquy-test-1"));
}

/// With a trust store, engine A believes B's card only when it is signed by a trusted key:
/// B signs its cards; an A that trusts B's key speaks v1.0 to bob (streaming), an A that
/// trusts another key ignores the card and speaks v0.3 (`message/send`). Either way the
/// request is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_card_is_believed_only_when_a_trusted_key_signed_it() {
    use colloquy_a2a::signing::{CardSigner, TrustStore};
    let key = |file: &str| {
        std::fs::read(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(file))
            .expect("the test key")
    };
    let b_key = Arc::new(
        CardSigner::from_pkcs8(&key("fixtures/a2a-card-key.der"), "engine-b").expect("a key"),
    );
    let b = Server::with_options(
        Vec::new(),
        colloquy_server::ServiceOptions {
            identity: colloquy_tests::http::identity(&[]),
            a2a: colloquy_server::a2a::Settings {
                card_signer: Some(b_key.clone()),
                ..colloquy_server::a2a::Settings::default()
            },
            ..colloquy_server::ServiceOptions::default()
        },
    )
    .await;
    let _bob = bob_agrees_then_informs(&b, json!({"booked": true})).await;
    let mut stranger = b_key.public_jwk();
    stranger["x"] = json!("11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo");
    for (trusted, method) in [
        (b_key.public_jwk(), "SendStreamingMessage"),
        (stranger, "message/send"),
    ] {
        let trust = TrustStore::from_jwks(&json!({"keys": [trusted]})).expect("jwks");
        let a = engine_a_with(
            &b,
            colloquy_server::a2a::Settings {
                trust_store: Some(Arc::new(trust)),
                ..colloquy_server::a2a::Settings::default()
            },
        )
        .await;
        let id = alice_asks_remote_bob(&a, "fipa-request").await;
        let ended = ended_on_a(&a, &id).await;
        assert_eq!(ended["outcome"], "success", "{ended:#}");
        let metrics = a.metrics().await;
        assert!(
            metrics.contains(&format!(r#"method="{method}",result="answered""#)),
            "{method}: {metrics}"
        );
    }
}

/// On a durable store an A2A task outlives its server: alice's task (bob agreed, no result
/// yet) has a push config; the server stops and another starts on the same SQLite file. A
/// subscription there shows the task as it stands and follows it, the push config goes on
/// from its cursor, and bob's result reaches both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_and_a_push_go_on_after_a_restart_on_sqlite() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("a2a.db");
    let options = || colloquy_server::ServiceOptions {
        identity: colloquy_tests::http::identity(&[]),
        store: Some(Arc::new(
            colloquy_store::SqliteStore::open(&path).expect("the SQLite store"),
        )),
        a2a: colloquy_server::a2a::Settings {
            push_allow_private: true,
            ..colloquy_server::a2a::Settings::default()
        },
        ..colloquy_server::ServiceOptions::default()
    };
    let first = Server::with_options(Vec::new(), options()).await;
    let bob = serve(
        first.client("bob").await,
        Handlers::new().on("fipa-request", "request", |msg| async move {
            msg.agree(json!({})).await?;
            Ok(())
        }),
    );
    let (url, mut pushed) = push_receiver().await;
    let sent = v1_ok(
        &first,
        "SendMessage",
        json!({"message": {"messageId": "restart-1", "role": "ROLE_USER",
            "parts": [{"text": "book"}]},
            "configuration": {"returnImmediately": true,
                "taskPushNotificationConfig": {"id": "hook", "url": url}}}),
    )
    .await;
    let id = sent["task"]["id"].as_str().expect("an id").to_owned();
    let (_, working) = next_push(&mut pushed).await;
    assert_eq!(
        working["statusUpdate"]["status"]["state"], "TASK_STATE_WORKING",
        "{working:#}"
    );
    drop(bob);
    first
        .service
        .shutdown()
        .await
        .expect("the first server stops");

    let second = Server::with_options(Vec::new(), options()).await;
    let mut events = Events::open(
        second
            .as_agent(
                Method::GET,
                &format!("/a2a/bob/rest/tasks/{id}:subscribe"),
                "alice",
            )
            .header("A2A-Version", "1.0"),
    )
    .await;
    let now = events.next().await.expect("the task as it stands");
    assert_eq!(
        now["task"]["status"]["state"], "TASK_STATE_WORKING",
        "{now:#}"
    );
    let (status, body) = call(
        second
            .as_agent(
                Method::POST,
                &format!("/v1/conversations/{id}/messages"),
                "bob",
            )
            .json(&json!({"performative": "inform", "content": {"booking": "R-1"}})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let mut streamed = Vec::new();
    while let Some(event) = events.next().await {
        streamed.push(event);
    }
    assert_eq!(
        streamed
            .last()
            .map(|e| &e["statusUpdate"]["status"]["state"]),
        Some(&json!("TASK_STATE_COMPLETED")),
        "{streamed:#?}"
    );
    let (_, artifact) = next_push(&mut pushed).await;
    assert_eq!(
        artifact["artifactUpdate"]["artifact"]["parts"],
        json!([{"data": {"booking": "R-1"}}]),
        "{artifact:#}"
    );
    let (_, done) = next_push(&mut pushed).await;
    assert_eq!(
        done["statusUpdate"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{done:#}"
    );
}

/// A body over the API's limit is refused before it is read through, on the JSON-RPC
/// endpoint and on the HTTP+JSON binding alike: 413 with a JSON error saying the limit, and
/// no task opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_a2a_body_is_413_and_opens_no_task() {
    let server = Server::start().await;
    let limit = colloquy_server::extract::MAX_BODY_BYTES;
    let text = "x".repeat(limit + 1);
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": {"messageId": "big-1", "role": "ROLE_USER",
            "parts": [{"text": text}]}}});
    for (path, payload) in [
        (endpoint("bob"), body.clone()),
        (
            "/a2a/bob/rest/message:send".to_owned(),
            body["params"].clone(),
        ),
    ] {
        let (status, answer) = call(
            server
                .as_agent(Method::POST, &path, "alice")
                .header("A2A-Version", "1.0")
                .json(&payload),
        )
        .await;
        assert_eq!(status, 413, "{path}: {answer:#}");
        assert!(
            answer["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains(&limit.to_string())),
            "{path}: {answer:#}"
        );
    }
    assert!(listed(&server, "alice").await.is_empty());
}
