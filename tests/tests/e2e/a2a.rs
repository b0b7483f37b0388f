//! The A2A bridge over real HTTP: an agent declared with `a2a: URL` in the agents file is a
//! remote agent speaking A2A (JSON-RPC 2.0). Each message to it is POSTed there as
//! `message/send`, and the engine answers in the conversation as that agent, from the
//! remote's Task or Message. The remote here is a fake A2A agent on `127.0.0.1:0` that
//! records every request and answers from a per-test script. It has no agent card unless a
//! test gives it one ([`FakeAgent::serve_card`]): without, the bridge speaks v0.3; with a
//! card listing JSON-RPC 1.0, v1.0.
//!
//! Why one file of 1,300 lines: the fake A2A agent and its scripts are shared by every
//! scenario here; each test reads alone.

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use colloquy_server::Identity;
use colloquy_tests::http::{ADMIN_TOKEN, STEP, Server, call};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::net::TcpListener;

use crate::support::{json_performatives, poll_until};

/// One request the fake A2A agent received.
#[derive(Clone, Debug)]
struct Seen {
    content_type: Option<String>,
    /// The `A2A-Version` header.
    version: Option<String>,
    /// The JSON-RPC request (`null` if the body was not JSON).
    body: Value,
}

/// What the fake answers one request.
struct Answer {
    /// `body` is a list of JSON-RPC results, sent as server-sent events (one event each,
    /// then the stream ends).
    sse: bool,
    status: u16,
    body: Value,
}

/// A fake remote A2A agent: every request is recorded, then answered by `script(request,
/// attempt)`, where `attempt` counts the earlier requests with the same JSON-RPC method
/// (0 for the first `message/send`, 0 for the first `tasks/get`, ...).
struct FakeAgent {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    /// The card served at `/.well-known/agent-card.json` (none: 404), and how often it was
    /// read.
    card: Arc<Mutex<(Option<Value>, usize)>>,
}

type Script = dyn Fn(&Value, usize) -> Answer + Send + Sync;

/// Runs before the script answers a request (after it is recorded): holds the answer back
/// for as long as it takes.
type Gate =
    dyn Fn(Value) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> + Send + Sync;

impl FakeAgent {
    async fn start(script: impl Fn(&Value, usize) -> Answer + Send + Sync + 'static) -> FakeAgent {
        FakeAgent::gated(script, Arc::new(|_| Box::pin(async {}))).await
    }

    /// A fake whose answers wait for `gate` first.
    async fn gated(
        script: impl Fn(&Value, usize) -> Answer + Send + Sync + 'static,
        gate: Arc<Gate>,
    ) -> FakeAgent {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let card = Arc::new(Mutex::new((None, 0)));
        let script: Arc<Script> = Arc::new(script);
        let (log, served) = (Arc::clone(&seen), Arc::clone(&card));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (log, script, gate, served) = (
                    Arc::clone(&log),
                    Arc::clone(&script),
                    Arc::clone(&gate),
                    Arc::clone(&served),
                );
                let service = service_fn(move |request: Request<Incoming>| {
                    let (log, script, gate, served) = (
                        Arc::clone(&log),
                        Arc::clone(&script),
                        Arc::clone(&gate),
                        Arc::clone(&served),
                    );
                    async move {
                        let answer = if request.method() == hyper::Method::GET {
                            card_answer(&request, &served)
                        } else {
                            answer(request, &log, &*script, &*gate).await
                        };
                        let (content_type, body) = if answer.sse {
                            let events = answer.body.as_array().cloned().unwrap_or_default();
                            let text: String = events
                                .iter()
                                .map(|event| format!("data: {event}\n\n"))
                                .collect();
                            ("text/event-stream", text)
                        } else {
                            ("application/json", answer.body.to_string())
                        };
                        let response = Response::builder()
                            .status(answer.status)
                            .header(CONTENT_TYPE, content_type)
                            .body(Full::new(Bytes::from(body)))
                            .expect("a response");
                        Ok::<_, Infallible>(response)
                    }
                });
                // hyper's server side comes with `colloquy-server`, whose accept loop is
                // hyper's HTTP/1 server.
                tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service));
            }
        });
        FakeAgent { url, seen, card }
    }

    /// Serves a v1.0 card listing `interfaces` (`{url}` in a URL is the fake's).
    fn serve_card(&self, interfaces: Value) {
        self.serve_card_with(interfaces, json!({}));
    }

    /// [`FakeAgent::serve_card`] with `capabilities`.
    fn serve_card_with(&self, interfaces: Value, capabilities: Value) {
        let interfaces = interfaces
            .to_string()
            .replace("{url}", self.url.trim_end_matches('/'));
        let card = json!({"name": "translator", "description": "a fake", "version": "1",
            "supportedInterfaces": serde_json::from_str::<Value>(&interfaces).expect("json"),
            "capabilities": capabilities, "defaultInputModes": [], "defaultOutputModes": [], "skills": []});
        self.card.lock().expect("lock").0 = Some(card);
    }

    /// How often the card was read.
    fn card_reads(&self) -> usize {
        self.card.lock().expect("lock").1
    }

    /// The JSON-RPC requests received so far with this method.
    fn requests(&self, method: &str) -> Vec<Seen> {
        let seen = self.seen.lock().expect("lock");
        seen.iter()
            .filter(|s| s.body["method"] == method)
            .cloned()
            .collect()
    }

    /// Asserts that `method` was called `count` times (`why` says what that shows).
    fn assert_calls(&self, method: &str, count: usize, why: &str) {
        assert_eq!(
            self.requests(method).len(),
            count,
            "{why}: {:#}",
            Value::from(self.all())
        );
    }

    /// Every request body received so far, for failure messages.
    fn all(&self) -> Vec<Value> {
        let seen = self.seen.lock().expect("lock");
        seen.iter().map(|s| s.body.clone()).collect()
    }
}

/// The card, at its well-known path, if the fake has one; else 404.
fn card_answer(request: &Request<Incoming>, served: &Mutex<(Option<Value>, usize)>) -> Answer {
    let mut served = served.lock().expect("lock");
    served.1 += 1;
    match &served.0 {
        Some(card) if request.uri().path() == "/.well-known/agent-card.json" => Answer {
            sse: false,
            status: 200,
            body: card.clone(),
        },
        _ => Answer {
            sse: false,
            status: 404,
            body: json!({"error": "no card"}),
        },
    }
}

/// Records `request` and asks the script for its answer.
async fn answer(
    request: Request<Incoming>,
    log: &Mutex<Vec<Seen>>,
    script: &Script,
    gate: &Gate,
) -> Answer {
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let version = request
        .headers()
        .get("a2a-version")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes = request
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let attempt = {
        let mut log = log.lock().expect("lock");
        let attempt = log
            .iter()
            .filter(|s| s.body["method"] == body["method"])
            .count();
        log.push(Seen {
            content_type,
            version,
            body: body.clone(),
        });
        attempt
    };
    gate(body.clone()).await;
    script(&body, attempt)
}

/// A JSON-RPC success answering `request`.
fn result(request: &Value, result: Value) -> Answer {
    Answer {
        sse: false,
        status: 200,
        body: json!({"jsonrpc": "2.0", "id": request["id"], "result": result}),
    }
}

/// Server-sent events answering `request`: one JSON-RPC success per result.
fn events(request: &Value, results: Vec<Value>) -> Answer {
    Answer {
        sse: true,
        status: 200,
        body: Value::Array(
            results
                .into_iter()
                .map(|result| json!({"jsonrpc": "2.0", "id": request["id"], "result": result}))
                .collect(),
        ),
    }
}

/// A JSON-RPC error answering `request`.
fn rpc_error(request: &Value, code: i64, message: &str) -> Answer {
    Answer {
        sse: false,
        status: 200,
        body: json!({"jsonrpc": "2.0", "id": request["id"], "error": {"code": code, "message": message}}),
    }
}

/// An A2A Task in `state`.
fn task(id: &str, state: &str) -> Value {
    json!({"kind": "task", "id": id, "contextId": "remote-context", "status": {"state": state}})
}

/// A completed Task with one artifact holding one data part.
fn completed(id: &str, data: Value) -> Value {
    let mut task = task(id, "completed");
    task["artifacts"] = json!([{"artifactId": "a1", "parts": [{"kind": "data", "data": data}]}]);
    task
}

/// A Task in `state` whose status message says `text`.
fn explained(id: &str, state: &str, text: &str) -> Value {
    let mut task = task(id, state);
    task["status"]["message"] = json!({
        "kind": "message", "role": "agent", "messageId": format!("{id}-status"),
        "parts": [{"kind": "text", "text": text}]
    });
    task
}

/// The agents file: alice and bob with tokens (`<id>-token`), translator behind the bridge.
fn agents(a2a_url: &str) -> Identity {
    let yaml = format!(
        "admin_token: {ADMIN_TOKEN}\n\
         agents:\n  \
           - id: alice\n    token: alice-token\n  \
           - id: bob\n    token: bob-token\n  \
           - id: translator\n    a2a: \"{a2a_url}\"\n"
    );
    Identity::from_yaml(&yaml, "a2a agents fixture").unwrap_or_else(|error| panic!("{error}"))
}

/// A server whose `translator` is `fake`.
async fn server_for(fake: &FakeAgent) -> Server {
    Server::with(agents(&fake.url), Vec::new()).await
}

/// Alice starts `template` with `participants` and an opening `performative`; returns the
/// conversation's id and the opening message's id.
async fn start(
    server: &Server,
    template: &str,
    participants: &[&str],
    performative: &str,
    content: &Value,
) -> (String, String) {
    let (status, body) = call(
        server
            .as_agent(Method::POST, "/v1/conversations", "alice")
            .json(&json!({
                "template": template,
                "participants": participants,
                "message": {"performative": performative, "content": content}
            })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().expect("a conversation id").to_owned();
    let opening = body["messages"][0]["id"]
        .as_str()
        .expect("the opening message's id")
        .to_owned();
    (id, opening)
}

/// Polls the conversation (as alice, who sees all of it) until `done` holds of it, and
/// returns it; fails after [`STEP`] with what it last saw and what the fake received.
async fn until(
    server: &Server,
    fake: &FakeAgent,
    id: &str,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    let look = || async {
        let (status, view) =
            call(server.as_agent(Method::GET, &format!("/v1/conversations/{id}"), "alice")).await;
        assert_eq!(status, 200, "{view}");
        view
    };
    poll_until(look, done).await.unwrap_or_else(|last| {
        panic!(
            "no {what} within {STEP:?}\nlast view: {last:#}\nthe fake received: {:#}",
            Value::from(fake.all())
        )
    })
}

/// Alice asks translator (behind the bridge) for `content` in a fipa-request: the
/// conversation's id and the request's id.
async fn ask_translator(server: &Server, content: Value) -> (String, String) {
    start(server, "fipa-request", &["translator"], "request", &content).await
}

/// Alice asks translator (behind the bridge) for `content` in a fipa-request and waits for
/// the conversation to end: its id, the request's id and the ended conversation.
async fn request_until_ended(
    server: &Server,
    fake: &FakeAgent,
    content: Value,
) -> (String, String, Value) {
    let (id, request_id) = ask_translator(server, content).await;
    let view = until(server, fake, &id, "completed conversation", completed_view).await;
    (id, request_id, view)
}

fn completed_view(view: &Value) -> bool {
    view["status"] == "completed"
}

fn last_message(view: &Value) -> &Value {
    view["messages"]
        .as_array()
        .and_then(|m| m.last())
        .expect("a message")
}

/// The request goes out as one A2A `message/send` (the data part, the colloquy message id,
/// the conversation as context, who sent what in the metadata), and a completed Task's one
/// data artifact comes back as translator's `inform` answering it: fipa-request succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_task_comes_back_as_an_inform_with_its_artifact() {
    let fake = FakeAgent::start(|request, _| {
        result(request, completed("t-1", json!({"translated": "hallo"})))
    })
    .await;
    let server = server_for(&fake).await;
    let content = json!({"action": "translate", "text": "hello", "to": "de"});
    let (id, request_id, view) = request_until_ended(&server, &fake, content.clone()).await;
    assert_eq!(view["outcome"], "success", "{view:#}");
    assert_eq!(json_performatives(&view), ["request", "inform"], "{view:#}");
    let reply = last_message(&view);
    assert_eq!(reply["sender"], "translator", "{reply}");
    assert_eq!(reply["content"], json!({"translated": "hallo"}), "{reply}");
    assert_eq!(reply["in_reply_to"], request_id.as_str(), "{reply}");

    let sent = fake.requests("message/send");
    assert_eq!(
        sent.len(),
        1,
        "one message/send: {:#}",
        Value::from(fake.all())
    );
    let rpc = &sent[0].body;
    assert!(
        sent[0]
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("application/json")),
        "content type {:?}",
        sent[0].content_type
    );
    assert_eq!(rpc["jsonrpc"], "2.0", "{rpc:#}");
    assert!(rpc["id"].is_string(), "a string JSON-RPC id: {rpc:#}");
    assert_eq!(rpc["params"]["configuration"]["blocking"], true, "{rpc:#}");
    let message = &rpc["params"]["message"];
    assert_eq!(message["kind"], "message", "{rpc:#}");
    assert_eq!(message["role"], "user", "{rpc:#}");
    assert_eq!(message["messageId"], request_id.as_str(), "{rpc:#}");
    assert_eq!(message["contextId"], id.as_str(), "{rpc:#}");
    assert_eq!(
        message["parts"],
        json!([{"kind": "data", "data": content}]),
        "{rpc:#}"
    );
    let colloquy = &message["metadata"]["colloquy"];
    assert_eq!(colloquy["conversation"], id.as_str(), "{rpc:#}");
    assert_eq!(colloquy["template"], "fipa-request", "{rpc:#}");
    assert_eq!(colloquy["performative"], "request", "{rpc:#}");
    assert_eq!(colloquy["sender"], "alice", "{rpc:#}");
}

/// A `rejected` Task comes back as a `refuse` whose reason is the status message's text:
/// fipa-request ends `refused`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_task_comes_back_as_a_refusal_with_its_reason() {
    let fake =
        FakeAgent::start(|request, _| result(request, explained("t-1", "rejected", "not my job")))
            .await;
    let server = server_for(&fake).await;
    let (_, request_id, view) =
        request_until_ended(&server, &fake, json!({"action": "wash-car"})).await;
    assert_eq!(view["outcome"], "refused", "{view:#}");
    assert_eq!(json_performatives(&view), ["request", "refuse"], "{view:#}");
    let reply = last_message(&view);
    assert_eq!(reply["sender"], "translator", "{reply}");
    assert_eq!(reply["content"], json!({"reason": "not my job"}), "{reply}");
    assert_eq!(reply["in_reply_to"], request_id.as_str(), "{reply}");
}

/// A Task still `working` when `message/send` returns is an `agree`; the engine then polls
/// `tasks/get` for it (here once more while it is still working) and answers the completed
/// Task with an `inform`: fipa-request's agree-then-inform path, ending `success`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_working_task_is_agreed_then_polled_until_it_completes() {
    let fake = FakeAgent::start(|request, attempt| match request["method"].as_str() {
        Some("message/send") => result(request, task("t-1", "working")),
        Some("tasks/get") if attempt == 0 => result(request, task("t-1", "working")),
        Some("tasks/get") => result(request, completed("t-1", json!({"translated": "hallo"}))),
        _ => rpc_error(request, -32601, "method not found"),
    })
    .await;
    let server = server_for(&fake).await;
    let (_, request_id, view) = request_until_ended(
        &server,
        &fake,
        json!({"action": "translate", "text": "hello"}),
    )
    .await;
    assert_eq!(view["outcome"], "success", "{view:#}");
    assert_eq!(
        json_performatives(&view),
        ["request", "agree", "inform"],
        "{view:#}"
    );
    let messages = view["messages"].as_array().expect("messages");
    let (agree, inform) = (&messages[1], &messages[2]);
    assert_eq!(agree["sender"], "translator", "{agree}");
    assert_eq!(agree["content"], json!({}), "{agree}");
    assert_eq!(agree["in_reply_to"], request_id.as_str(), "{agree}");
    assert_eq!(inform["sender"], "translator", "{inform}");
    assert_eq!(
        inform["content"],
        json!({"translated": "hallo"}),
        "{inform}"
    );
    assert_eq!(inform["in_reply_to"], request_id.as_str(), "{inform}");

    let polls = fake.requests("tasks/get");
    assert!(
        polls.len() >= 2,
        "polled until the task left `working`: {:#}",
        Value::from(fake.all())
    );
    for poll in &polls {
        assert_eq!(poll.body["jsonrpc"], "2.0", "{:#}", poll.body);
        assert_eq!(poll.body["params"]["id"], "t-1", "{:#}", poll.body);
    }
    fake.assert_calls("message/send", 1, "sent once, then only polled");
}

/// A JSON-RPC error answer comes back as `not-understood` whose reason is the error's
/// message: fipa-request ends `not_understood` (its terminal state's outcome).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_rpc_error_comes_back_as_not_understood_with_its_message() {
    let fake = FakeAgent::start(|request, _| rpc_error(request, -32602, "bad params")).await;
    let server = server_for(&fake).await;
    let (_, request_id, view) =
        request_until_ended(&server, &fake, json!({"action": "translate"})).await;
    assert_eq!(view["outcome"], "not_understood", "{view:#}");
    assert_eq!(
        json_performatives(&view),
        ["request", "not-understood"],
        "{view:#}"
    );
    let reply = last_message(&view);
    assert_eq!(reply["sender"], "translator", "{reply}");
    assert_eq!(reply["content"], json!({"reason": "bad params"}), "{reply}");
    assert_eq!(reply["in_reply_to"], request_id.as_str(), "{reply}");
    fake.assert_calls(
        "message/send",
        1,
        "a JSON-RPC error is an answer, not retried",
    );
}

/// An HTTP 500 from the remote is a transport failure: the same message is sent again, and
/// the answer to the retry comes back as the `inform`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_post_is_retried_and_the_retry_answered() {
    let fake = FakeAgent::start(|request, attempt| {
        if attempt == 0 {
            Answer {
                sse: false,
                status: 500,
                body: json!({"error": "try again"}),
            }
        } else {
            result(request, completed("t-1", json!({"translated": "hallo"})))
        }
    })
    .await;
    let server = server_for(&fake).await;
    let (_, request_id, view) = request_until_ended(
        &server,
        &fake,
        json!({"action": "translate", "text": "hello"}),
    )
    .await;
    assert_eq!(view["outcome"], "success", "{view:#}");
    assert_eq!(json_performatives(&view), ["request", "inform"], "{view:#}");
    let reply = last_message(&view);
    assert_eq!(reply["sender"], "translator", "{reply}");
    assert_eq!(reply["content"], json!({"translated": "hallo"}), "{reply}");
    assert_eq!(reply["in_reply_to"], request_id.as_str(), "{reply}");

    let sent = fake.requests("message/send");
    assert_eq!(
        sent.len(),
        2,
        "one failure, one retry: {:#}",
        Value::from(fake.all())
    );
    for attempt in &sent {
        assert_eq!(
            attempt.body["params"]["message"]["messageId"],
            request_id.as_str(),
            "the retry carries the same message: {:#}",
            attempt.body
        );
    }
    let metrics = server.metrics().await;
    for line in [
        r#"colloquy_a2a_calls_total{method="message/send",result="retried"} 1"#,
        r#"colloquy_a2a_calls_total{method="message/send",result="answered"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in:\n{metrics}");
    }
}

/// In a Contract-Net the bridged agent bids like any other: the manager's `cfp` reaches the
/// remote as `message/send`, and its completed answer is translator's `propose` carrying
/// the data, moving only translator's thread (bob, a token agent, has not answered).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_completed_task_answers_a_call_for_proposals_with_a_proposal() {
    let fake =
        FakeAgent::start(|request, _| result(request, completed("t-1", json!({"price": 10}))))
            .await;
    let server = server_for(&fake).await;
    let task = json!({"action": "translate", "words": 1200});
    let (id, cfp_id) = start(
        &server,
        "fipa-contract-net",
        &["translator", "bob"],
        "cfp",
        &task,
    )
    .await;

    let proposed = |view: &Value| {
        view["messages"]
            .as_array()
            .is_some_and(|m| m.iter().any(|m| m["sender"] == "translator"))
    };
    let view = until(&server, &fake, &id, "answer from translator", proposed).await;
    let reply = view["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["sender"] == "translator")
        .expect("translator's answer");
    assert_eq!(reply["performative"], "propose", "{view:#}");
    assert_eq!(reply["content"], json!({"price": 10}), "{reply}");
    assert_eq!(reply["in_reply_to"], cfp_id.as_str(), "{reply}");
    let state = |who: &str| {
        view["threads"]
            .as_array()
            .expect("threads")
            .iter()
            .find(|t| t["participant"] == who)
            .map(|t| t["state"].clone())
    };
    assert_eq!(state("translator"), Some(json!("proposed")), "{view:#}");
    assert_eq!(state("bob"), Some(json!("called")), "{view:#}");
    assert_eq!(view["status"], "active", "{view:#}");

    let sent = fake.requests("message/send");
    assert_eq!(
        sent.len(),
        1,
        "only translator's cfp is bridged: {:#}",
        Value::from(fake.all())
    );
    let message = &sent[0].body["params"]["message"];
    assert_eq!(
        message["metadata"]["colloquy"]["performative"], "cfp",
        "{message:#}"
    );
    assert_eq!(
        message["metadata"]["colloquy"]["template"], "fipa-contract-net",
        "{message:#}"
    );
    assert_eq!(
        message["parts"],
        json!([{"kind": "data", "data": task}]),
        "{message:#}"
    );
}

/// An agent that names its performative (`metadata.colloquy.performative`) is taken at its
/// word, here on a plain Message: a `failure`, whose reason is the message's text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_performative_the_agent_names_is_taken_at_its_word() {
    let fake = FakeAgent::start(|request, _| {
        result(
            request,
            json!({"kind": "message", "role": "agent", "messageId": "r-1",
                "parts": [{"kind": "text", "text": "the printer is on fire"}],
                "metadata": {"colloquy": {"performative": "failure"}}}),
        )
    })
    .await;
    let server = server_for(&fake).await;
    let (id, request_id) = ask_translator(&server, json!({"action": "print"})).await;
    let view = until(
        &server,
        &fake,
        &id,
        "completed conversation",
        completed_view,
    )
    .await;
    assert_eq!(view["outcome"], "failure", "{view:#}");
    assert_eq!(
        json_performatives(&view),
        ["request", "failure"],
        "{view:#}"
    );
    let reply = last_message(&view);
    assert_eq!(
        reply["content"],
        json!({"reason": "the printer is on fire"}),
        "{reply}"
    );
    assert_eq!(reply["in_reply_to"], request_id.as_str(), "{reply}");
}

/// An answer that is no A2A JSON-RPC response records nothing and is not asked for again
/// (the same call would get the same); the agent's next message still goes out and is
/// answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_garbled_answer_records_nothing_and_the_next_message_goes_out() {
    // Chosen by the message, not by arrival: the two conversations' messages go out at
    // once (one lane each), in either order.
    let fake = FakeAgent::start(|request, _| {
        if text_of(request) == "first" {
            Answer {
                sse: false,
                status: 200,
                body: json!({"hello": "not json-rpc"}),
            }
        } else {
            result(request, completed("t-2", json!({"translated": "hallo"})))
        }
    })
    .await;
    let server = server_for(&fake).await;
    let (garbled, _) =
        ask_translator(&server, json!({"action": "translate", "text": "first"})).await;
    let (answered, _) =
        ask_translator(&server, json!({"action": "translate", "text": "second"})).await;
    let view = until(
        &server,
        &fake,
        &answered,
        "completed conversation",
        completed_view,
    )
    .await;
    assert_eq!(json_performatives(&view), ["request", "inform"], "{view:#}");
    // The garbled answer's call is over once it is counted as failed.
    let garbled_call = r#"colloquy_a2a_calls_total{method="message/send",result="failed"} 1"#;
    poll_until(
        || async { json!(server.metrics().await) },
        |text| {
            text.as_str()
                .is_some_and(|text| text.contains(garbled_call))
        },
    )
    .await
    .expect("the garbled answer's call is counted as failed");
    let (status, view) = call(server.as_agent(
        Method::GET,
        &format!("/v1/conversations/{garbled}"),
        "alice",
    ))
    .await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["status"], "active", "{view:#}");
    assert_eq!(json_performatives(&view), ["request"], "{view:#}");
    fake.assert_calls("message/send", 2, "one call per message, none repeated");
}

/// The text of a bridged message's data content (`{"text": …}`).
fn text_of(request: &Value) -> String {
    request["params"]["message"]["parts"][0]["data"]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A slow agent does not hold up its other conversations: the first message's answer waits
/// until the second message (of another conversation) has arrived, which it does only if
/// the engine sends it while the first call is still open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_answer_does_not_hold_up_other_conversations() {
    let second_arrived = Arc::new(tokio::sync::Notify::new());
    let overlapped = Arc::new(AtomicBool::new(false));
    let gate: Arc<Gate> = {
        let (second_arrived, overlapped) = (second_arrived.clone(), overlapped.clone());
        Arc::new(move |request: Value| {
            let (second_arrived, overlapped) = (second_arrived.clone(), overlapped.clone());
            Box::pin(async move {
                match text_of(&request).as_str() {
                    "first" => {
                        let waited =
                            tokio::time::timeout(Duration::from_secs(5), second_arrived.notified())
                                .await;
                        overlapped.store(waited.is_ok(), Ordering::SeqCst);
                    }
                    // `notify_one` keeps the permit if the first is not waiting yet.
                    _ => second_arrived.notify_one(),
                }
            })
        })
    };
    let fake = FakeAgent::gated(
        |request, _| {
            result(
                request,
                completed("t", json!({"translated": text_of(request)})),
            )
        },
        gate,
    )
    .await;
    let server = server_for(&fake).await;
    let (first, _) = ask_translator(&server, json!({"action": "translate", "text": "first"})).await;
    let (second, _) =
        ask_translator(&server, json!({"action": "translate", "text": "second"})).await;
    for id in [&first, &second] {
        let view = until(&server, &fake, id, "completed conversation", completed_view).await;
        assert_eq!(view["outcome"], "success", "{view:#}");
    }
    assert!(
        overlapped.load(Ordering::SeqCst),
        "the second message went out only after the first was answered: {:#}",
        Value::from(fake.all())
    );
}

/// Within one conversation the agent's messages still go out in order: alice's `cancel`
/// reaches the agent only after its answer to her `request`, though she sent it while the
/// request's call was open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_conversations_messages_go_out_one_after_another() {
    let holding = Arc::new(AtomicBool::new(false));
    let release = Arc::new(tokio::sync::Notify::new());
    let overtaken = Arc::new(AtomicBool::new(false));
    let gate: Arc<Gate> = {
        let (holding, release, overtaken) = (holding.clone(), release.clone(), overtaken.clone());
        Arc::new(move |request: Value| {
            let (holding, release, overtaken) =
                (holding.clone(), release.clone(), overtaken.clone());
            Box::pin(async move {
                let performative =
                    &request["params"]["message"]["metadata"]["colloquy"]["performative"];
                if performative == "request" {
                    holding.store(true, Ordering::SeqCst);
                    // Held until the test has sent the cancel and given it time to overtake.
                    let _ = tokio::time::timeout(STEP, release.notified()).await;
                    holding.store(false, Ordering::SeqCst);
                } else if holding.load(Ordering::SeqCst) {
                    overtaken.store(true, Ordering::SeqCst);
                }
            })
        })
    };
    let fake = FakeAgent::gated(
        |request, _| result(request, completed("t", json!({"done": true}))),
        gate,
    )
    .await;
    let server = server_for(&fake).await;
    let (id, _) = ask_translator(&server, json!({"action": "print"})).await;
    tokio::time::timeout(STEP, async {
        while fake.requests("message/send").is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the request reaches the agent");
    let (status, body) = call(
        server
            .as_agent(
                Method::POST,
                &format!("/v1/conversations/{id}/messages"),
                "alice",
            )
            .json(&json!({"performative": "cancel"})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    // Room for a cancel that would overtake the request; the order is checked, not the time.
    tokio::time::sleep(Duration::from_millis(300)).await;
    release.notify_one();
    tokio::time::timeout(STEP, async {
        while fake.requests("message/send").len() < 2 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the cancel reaches the agent too");
    assert!(
        !overtaken.load(Ordering::SeqCst),
        "the cancel went out while the request was unanswered: {:#}",
        Value::from(fake.all())
    );
    let sent = fake.requests("message/send");
    assert_eq!(
        sent[1].body["params"]["message"]["metadata"]["colloquy"]["performative"],
        "cancel",
        "{:#}",
        Value::from(fake.all())
    );
}

/// A `message/send` that gets no answer within the agent's `a2a_timeout_s` is not sent
/// again (the agent may be at work on it), and nothing is recorded for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_that_times_out_is_not_sent_twice() {
    let gate: Arc<Gate> = Arc::new(|_| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(3)).await;
        })
    });
    let fake = FakeAgent::gated(
        |request, _| result(request, completed("t", json!({"done": true}))),
        gate,
    )
    .await;
    let yaml = format!(
        "agents:\n  - {{id: alice, token: alice-token}}\n  \
         - {{id: translator, a2a: \"{}\", a2a_timeout_s: 1}}\n",
        fake.url
    );
    let identity =
        Identity::from_yaml(&yaml, "a2a timeout fixture").unwrap_or_else(|error| panic!("{error}"));
    let server = Server::with(identity, Vec::new()).await;
    let (id, _) = ask_translator(&server, json!({"action": "slow"})).await;
    let given_up = r#"colloquy_a2a_calls_total{method="message/send",result="failed"} 1"#;
    let metrics = poll_until(
        || async { json!(server.metrics().await) },
        |text| text.as_str().is_some_and(|text| text.contains(given_up)),
    )
    .await
    .expect("the send is given up");
    let metrics = metrics.as_str().unwrap_or_default();
    assert!(!metrics.contains(r#"result="retried""#), "{metrics}");
    // The agent's late answer changes nothing.
    tokio::time::sleep(Duration::from_secs(3)).await;
    fake.assert_calls("message/send", 1, "a send that timed out is not sent again");
    let (status, view) =
        call(server.as_agent(Method::GET, &format!("/v1/conversations/{id}"), "alice")).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(json_performatives(&view), ["request"], "{view:#}");
}

/// The fake for the cancel tests: `message/send` starts task `t-1`, which works until the
/// engine asks to cancel it; `tasks/cancel` answers `on_cancel` (and from then on the task
/// is `canceled`).
async fn cancellable_fake(on_cancel: &'static str) -> FakeAgent {
    let cancelled = Arc::new(AtomicBool::new(false));
    FakeAgent::start(move |request, _| match request["method"].as_str() {
        Some("message/send") => result(request, task("t-1", "working")),
        Some("tasks/get") if cancelled.load(Ordering::SeqCst) => {
            result(request, task("t-1", "canceled"))
        }
        Some("tasks/get") => result(request, task("t-1", "working")),
        Some("tasks/cancel") => {
            cancelled.store(true, Ordering::SeqCst);
            result(request, task("t-1", on_cancel))
        }
        _ => rpc_error(request, -32601, "method not found"),
    })
    .await
}

/// Alice asks translator, waits for its `agree` (the task runs), cancels, and waits for the
/// conversation to end: the cancel's id and the ended conversation.
async fn cancel_the_running_task(server: &Server, fake: &FakeAgent) -> (String, Value) {
    let (id, _) = ask_translator(server, json!({"action": "translate", "text": "hello"})).await;
    until(server, fake, &id, "agree", |view| {
        json_performatives(view).contains(&"agree")
    })
    .await;
    let (status, body) = call(
        server
            .as_agent(
                Method::POST,
                &format!("/v1/conversations/{id}/messages"),
                "alice",
            )
            .json(&json!({"performative": "cancel", "content": {"why": "changed my mind"}})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let cancel_id = body["message_id"]
        .as_str()
        .expect("the cancel's id")
        .to_owned();
    let view = until(server, fake, &id, "completed conversation", completed_view).await;
    (cancel_id, view)
}

/// Asserts that the conversation ended with translator's `inform` answering the cancel.
fn assert_the_cancel_is_confirmed(view: &Value, cancel_id: &str) {
    assert_eq!(
        json_performatives(view),
        ["request", "agree", "cancel", "inform"],
        "{view:#}"
    );
    let confirmed = last_message(view);
    assert_eq!(confirmed["sender"], "translator", "{confirmed}");
    assert_eq!(confirmed["in_reply_to"], cancel_id, "{confirmed}");
}

/// A `cancel` while the agent runs the request's task is A2A's `tasks/cancel` for that task,
/// not a new `message/send`; the task's `canceled` state confirms the cancel as translator's
/// `inform` in reply to it, and fipa-request ends cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_of_a_running_task_is_sent_as_tasks_cancel_and_confirmed() {
    let fake = cancellable_fake("canceled").await;
    let server = server_for(&fake).await;
    let (cancel_id, view) = cancel_the_running_task(&server, &fake).await;
    assert_the_cancel_is_confirmed(&view, &cancel_id);
    fake.assert_calls("tasks/cancel", 1, "one tasks/cancel for the cancel");
    let cancels = fake.requests("tasks/cancel");
    assert_eq!(
        cancels[0].body["params"]["id"], "t-1",
        "{:#}",
        cancels[0].body
    );
    fake.assert_calls("message/send", 1, "the cancel is no message/send");
}

/// A task that is still winding down when `tasks/cancel` answers confirms the cancel when
/// it ends `canceled`: the follower answers the cancel, not the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_still_winding_down_is_confirmed_when_the_task_ends() {
    let fake = cancellable_fake("working").await;
    let server = server_for(&fake).await;
    let (cancel_id, view) = cancel_the_running_task(&server, &fake).await;
    assert_the_cancel_is_confirmed(&view, &cancel_id);
    fake.assert_calls("tasks/cancel", 1, "one tasks/cancel for the cancel");
}

/// An agent that will not cancel (a JSON-RPC error) gets its reason recorded as a
/// `failure` answering the cancel; the task goes on and its result still completes the
/// request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_the_agent_refuses_is_a_failure_and_the_result_still_comes() {
    let cancel_refused = Arc::new(AtomicBool::new(false));
    let fake = FakeAgent::start({
        let cancel_refused = cancel_refused.clone();
        move |request, _| match request["method"].as_str() {
            Some("message/send") => result(request, task("t-1", "working")),
            Some("tasks/get") if cancel_refused.load(Ordering::SeqCst) => {
                result(request, completed("t-1", json!({"translated": "hallo"})))
            }
            Some("tasks/get") => result(request, task("t-1", "working")),
            Some("tasks/cancel") => {
                cancel_refused.store(true, Ordering::SeqCst);
                rpc_error(request, -32002, "Task cannot be canceled")
            }
            _ => rpc_error(request, -32601, "method not found"),
        }
    })
    .await;
    let server = server_for(&fake).await;
    let (cancel_id, view) = cancel_the_running_task(&server, &fake).await;
    assert_eq!(
        json_performatives(&view),
        ["request", "agree", "cancel", "failure", "inform"],
        "{view:#}"
    );
    let messages = view["messages"].as_array().expect("messages");
    assert_eq!(messages[3]["in_reply_to"], cancel_id.as_str(), "{view:#}");
    assert_eq!(
        messages[3]["content"]["reason"],
        "the A2A agent did not cancel its task: Task cannot be canceled",
        "{view:#}"
    );
    assert_eq!(
        messages[4]["content"],
        json!({"translated": "hallo"}),
        "{view:#}"
    );
    assert_eq!(view["outcome"], "success", "{view:#}");
}

/// An agent whose card lists a JSON-RPC 1.0 interface is spoken to in v1.0: `SendMessage`
/// and `GetTask` with `A2A-Version: 1.0`, a message without `kind`, role `ROLE_USER`, parts
/// without `kind`. Its v1.0 answers (`{"task"}`, a bare task, `TASK_STATE_*`) come back as
/// the v0.3 ones do: agree, then inform with the artifact. The card is read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_card_lists_v1_is_spoken_to_in_v1() {
    let fake = FakeAgent::start(|request, attempt| match request["method"].as_str() {
        Some("SendMessage") => result(
            request,
            json!({"task": {"id": "t-1", "contextId": "remote-context",
                "status": {"state": "TASK_STATE_WORKING"}}}),
        ),
        Some("GetTask") if attempt == 0 => result(
            request,
            json!({"id": "t-1", "status": {"state": "TASK_STATE_WORKING"}}),
        ),
        Some("GetTask") => result(
            request,
            json!({"id": "t-1", "status": {"state": "TASK_STATE_COMPLETED"},
                "artifacts": [{"artifactId": "a1", "parts": [{"data": {"translated": "hallo"}}]}]}),
        ),
        _ => rpc_error(request, -32601, "method not found"),
    })
    .await;
    fake.serve_card(json!([
        {"url": "{url}", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
        {"url": "{url}", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"}
    ]));
    let server = server_for(&fake).await;
    let content = json!({"action": "translate", "text": "hello"});
    let (id, request_id, view) = request_until_ended(&server, &fake, content.clone()).await;
    assert_eq!(
        json_performatives(&view),
        ["request", "agree", "inform"],
        "{view:#}"
    );
    assert_eq!(
        last_message(&view)["content"],
        json!({"translated": "hallo"}),
        "{view:#}"
    );
    fake.assert_calls("message/send", 0, "no v0.3 call");
    let sent = fake.requests("SendMessage");
    assert_eq!(sent.len(), 1, "{:#}", Value::from(fake.all()));
    assert_eq!(sent[0].version.as_deref(), Some("1.0"));
    let params = &sent[0].body["params"];
    assert_eq!(
        params["message"],
        json!({"messageId": request_id, "contextId": id, "role": "ROLE_USER",
            "parts": [{"data": content}],
            "metadata": {"colloquy": {"conversation": id, "template": "fipa-request",
                "performative": "request", "sender": "alice"}}}),
        "{params:#}"
    );
    assert_eq!(params["configuration"], json!({"returnImmediately": false}));
    let polls = fake.requests("GetTask");
    assert_eq!(polls.len(), 2, "{:#}", Value::from(fake.all()));
    for poll in &polls {
        assert_eq!(poll.version.as_deref(), Some("1.0"));
        assert_eq!(poll.body["params"], json!({"id": "t-1"}));
    }
    assert_eq!(fake.card_reads(), 1, "the card is read once per worker");
}

/// An agent without a card, or whose card lists no JSON-RPC 1.0 interface, is spoken to
/// in v0.3, without an `A2A-Version` header.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_without_a_v1_card_is_spoken_to_in_v0_3() {
    for card in [
        None,
        Some(json!([{"url": "{url}", "protocolBinding": "HTTP+JSON", "protocolVersion": "1.0"}])),
    ] {
        let fake = FakeAgent::start(|request, _| {
            result(request, completed("t-1", json!({"translated": "hallo"})))
        })
        .await;
        if let Some(card) = &card {
            fake.serve_card(card.clone());
        }
        let server = server_for(&fake).await;
        request_until_ended(&server, &fake, json!({"action": "translate"})).await;
        let sent = fake.requests("message/send");
        assert_eq!(sent.len(), 1, "{card:?}: {:#}", Value::from(fake.all()));
        assert_eq!(sent[0].version, None, "{card:?}");
        assert!(fake.card_reads() >= 1, "the card was looked for");
    }
}

/// A task that wants input becomes translator's `query-ref` (its status message as
/// content) where the thread may ask back (`a2a-task`); alice's `inform` answering it goes
/// into that task (`taskId`), not into a new one, and the task's end answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_wants_input_asks_and_the_answer_goes_into_it() {
    let fake = FakeAgent::start(|request, attempt| match request["method"].as_str() {
        Some("message/send") if attempt == 0 => result(
            request,
            explained("t-1", "input-required", "which language?"),
        ),
        Some("message/send") => result(request, completed("t-1", json!({"translated": "hallo"}))),
        _ => rpc_error(request, -32601, "method not found"),
    })
    .await;
    let server = server_for(&fake).await;
    let (id, request_id) = start(
        &server,
        "a2a-task",
        &["translator"],
        "request",
        &json!({"text": "hello"}),
    )
    .await;
    let asked = until(&server, &fake, &id, "query-ref", |view| {
        json_performatives(view).contains(&"query-ref")
    })
    .await;
    let question = last_message(&asked);
    assert_eq!(question["sender"], "translator", "{asked:#}");
    assert_eq!(question["in_reply_to"], request_id.as_str(), "{asked:#}");
    assert_eq!(
        question["content"],
        json!({"text": "which language?"}),
        "{asked:#}"
    );
    let (status, body) = call(
        server
            .as_agent(
                Method::POST,
                &format!("/v1/conversations/{id}/messages"),
                "alice",
            )
            .json(&json!({"performative": "inform", "content": {"language": "de"}})),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let view = until(
        &server,
        &fake,
        &id,
        "completed conversation",
        completed_view,
    )
    .await;
    assert_eq!(view["outcome"], "success", "{view:#}");
    assert_eq!(
        json_performatives(&view),
        ["request", "query-ref", "inform", "inform"],
        "{view:#}"
    );
    assert_eq!(
        last_message(&view)["content"],
        json!({"translated": "hallo"})
    );
    let sent = fake.requests("message/send");
    assert_eq!(sent.len(), 2, "{:#}", Value::from(fake.all()));
    let answer = &sent[1].body["params"]["message"];
    assert_eq!(answer["taskId"], "t-1", "{answer:#}");
    assert_eq!(
        answer["parts"],
        json!([{"kind": "data", "data": {"language": "de"}}])
    );
    assert!(answer.get("contextId").is_none(), "{answer:#}");
}

/// Where the thread may not ask back (`fipa-request`), a task that wants input is a
/// `not-understood` with its question as the reason, and nothing waits for an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_wants_input_is_not_understood_where_the_thread_cannot_ask() {
    let fake = FakeAgent::start(|request, _| {
        result(
            request,
            explained("t-1", "input-required", "which language?"),
        )
    })
    .await;
    let server = server_for(&fake).await;
    let (_, _, view) = request_until_ended(&server, &fake, json!({"text": "hello"})).await;
    assert_eq!(
        json_performatives(&view),
        ["request", "not-understood"],
        "{view:#}"
    );
    assert_eq!(
        last_message(&view)["content"],
        json!({"reason": "which language?"})
    );
}

/// A v1.0 agent whose card says `streaming: true` is sent `SendStreamingMessage`, and its
/// events make the task as they come: `working` is an `agree`, an artifact sent in two
/// appended pieces is one result. A stream that ends while the task still works leaves it
/// to `GetTask`, whose end answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_agent_is_followed_over_its_events_then_polled() {
    let status =
        |state: &str| json!({"statusUpdate": {"taskId": "t-1", "status": {"state": state}}});
    let piece = |text: &str, append: bool| {
        json!({"artifactUpdate": {"taskId": "t-1", "append": append,
            "artifact": {"artifactId": "a1", "parts": [{"text": text}]}}})
    };
    let fake = FakeAgent::start(move |request, attempt| match request["method"].as_str() {
        // The first message's stream goes to the end; the second one's stops while the
        // task works.
        Some("SendStreamingMessage") if attempt == 0 => events(
            request,
            vec![
                json!({"task": {"id": "t-1", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
                status("TASK_STATE_WORKING"),
                piece("hal", false),
                piece("lo", true),
                status("TASK_STATE_COMPLETED"),
            ],
        ),
        Some("SendStreamingMessage") => events(
            request,
            vec![json!({"task": {"id": "t-2", "status": {"state": "TASK_STATE_WORKING"}}})],
        ),
        Some("GetTask") => result(
            request,
            json!({"id": "t-2", "status": {"state": "TASK_STATE_COMPLETED"},
                "artifacts": [{"artifactId": "a2", "parts": [{"text": "tschüss"}]}]}),
        ),
        _ => rpc_error(request, -32601, "method not found"),
    })
    .await;
    fake.serve_card_with(
        json!([{"url": "{url}", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]),
        json!({"streaming": true}),
    );
    let server = server_for(&fake).await;
    for (text, said) in [("hello", "hallo"), ("bye", "tschüss")] {
        let (_, request_id, view) =
            request_until_ended(&server, &fake, json!({"text": text})).await;
        assert_eq!(
            json_performatives(&view),
            ["request", "agree", "inform"],
            "{view:#}"
        );
        let inform = last_message(&view);
        assert_eq!(inform["content"], json!({"text": said}), "{view:#}");
        assert_eq!(inform["in_reply_to"], request_id.as_str(), "{view:#}");
    }
    fake.assert_calls("SendStreamingMessage", 2, "each message streamed");
    fake.assert_calls("SendMessage", 0, "no blocking send");
    assert!(
        !fake.requests("GetTask").is_empty(),
        "the cut stream's task is polled"
    );
    let sent = fake.requests("SendStreamingMessage");
    assert_eq!(sent[0].version.as_deref(), Some("1.0"));
}
