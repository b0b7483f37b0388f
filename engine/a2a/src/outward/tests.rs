//! Tests of `outward`.

use super::*;
use colloquy_protocol::a2a::{Artifact, TaskStatus};
use colloquy_protocol::message::{Content, Message};
use colloquy_protocol::{FipaAct, Performative};

#[test]
fn content_shows_as_the_parts_it_came_from() {
    let file = json!({"name": "a.txt", "mimeType": "text/plain", "bytes": "dGNr"});
    let parts = vec![
        Part::Text { text: "hi".into() },
        Part::Data { data: json!(1) },
        Part::Data {
            data: json!({"k": 2}),
        },
        Part::File { file: file.clone() },
    ];
    let content = content_of(parts.iter().collect());
    assert_eq!(parts_of(&content), parts, "{content}");
    assert_eq!(
        parts_of(&json!("done")),
        [Part::Text {
            text: "done".into()
        }]
    );
    // Any other value is one data part, keys that only look like parts' included.
    for data in [
        json!({"total": 42}),
        json!({"text": 7}),
        json!([1]),
        json!({}),
    ] {
        assert_eq!(parts_of(&data), [Part::Data { data: data.clone() }]);
    }
}

fn open(names: &[&str]) -> Vec<Arc<str>> {
    names.iter().map(|name| Arc::from(*name)).collect()
}

fn task(state: &str, status_text: Option<&str>, artifacts: Vec<Part>) -> Answer {
    Answer::Result(Box::new(SendResult::Task(colloquy_protocol::a2a::Task {
        kind: "task".to_owned(),
        id: "t".to_owned(),
        context_id: None,
        status: TaskStatus {
            state: state.to_owned(),
            message: status_text.map(|text| agent_message(vec![text_part(text)], None)),
        },
        artifacts: if artifacts.is_empty() {
            Vec::new()
        } else {
            vec![Artifact {
                artifact_id: Some("a".to_owned()),
                name: None,
                parts: artifacts,
            }]
        },
        metadata: None,
    })))
}

fn agent_message(parts: Vec<Part>, metadata: Option<Value>) -> A2aMessage {
    A2aMessage {
        kind: "message".to_owned(),
        role: "agent".to_owned(),
        message_id: "r".to_owned(),
        context_id: None,
        task_id: None,
        parts,
        metadata: metadata.and_then(|m| m.as_object().cloned()),
    }
}

fn text_part(text: &str) -> Part {
    Part::Text {
        text: text.to_owned(),
    }
}

fn data_part(data: Value) -> Part {
    Part::Data { data }
}

fn performative(reply: Option<Reply>) -> Option<String> {
    reply.map(|reply| reply.performative)
}

/// The same finished task informs where the thread may inform (a request) and proposes
/// where it is called for proposals (a contract-net), carrying the artifact's data.
#[test]
fn a_finished_task_answers_with_what_the_thread_may_send() {
    let done = task("completed", None, vec![data_part(json!({"price": 10}))]);
    let request = open(&["agree", "refuse", "inform", "failure", "not-understood"]);
    assert_eq!(
        reply_to(&done, &request),
        Some(Reply {
            performative: "inform".to_owned(),
            content: json!({"price": 10})
        })
    );
    let called = open(&["propose", "refuse", "failure", "not-understood"]);
    assert_eq!(
        performative(reply_to(&done, &called)).as_deref(),
        Some("propose")
    );
    // Nothing fits an ended thread.
    assert_eq!(reply_to(&done, &[]), None);
}

#[test]
fn refusals_failures_and_errors_carry_a_reason() {
    let request = open(&["agree", "refuse", "inform", "failure", "not-understood"]);
    let refused = reply_to(&task("rejected", Some("not my job"), vec![]), &request);
    assert_eq!(
        refused,
        Some(Reply {
            performative: "refuse".to_owned(),
            content: json!({"reason": "not my job"})
        })
    );
    let failed = reply_to(&task("canceled", None, vec![]), &request).expect("failure");
    assert_eq!(failed.performative, "failure");
    assert_eq!(
        failed.content,
        json!({"reason": "the A2A task ended `canceled`"})
    );
    let error = Answer::Error(RpcError {
        code: -32602,
        message: "bad params".to_owned(),
        data: None,
    });
    assert_eq!(
        reply_to(&error, &request),
        Some(Reply {
            performative: "not-understood".to_owned(),
            content: json!({"reason": "bad params"})
        })
    );
    let wants_input = task("input-required", Some("which language?"), vec![]);
    assert_eq!(
        performative(reply_to(&wants_input, &open(&["failure"]))).as_deref(),
        Some("failure"),
        "not-understood where the thread may not say it"
    );
}

/// A task that wants input asks its status message as a `query-ref` where the thread
/// may ask back; elsewhere it could not go on.
#[test]
fn a_task_that_wants_input_asks_where_the_thread_may_ask() {
    let wants_input = task("input-required", Some("which room?"), vec![]);
    let requested = open(&["agree", "query-ref", "inform", "failure", "not-understood"]);
    let asked = reply_to(&wants_input, &requested);
    assert_eq!(
        asked,
        Some(Reply {
            performative: "query-ref".to_owned(),
            content: json!({"text": "which room?"})
        })
    );
    assert!(wants_input.asks(asked.as_ref()));
    let elsewhere = reply_to(&wants_input, &open(&["inform", "not-understood"]));
    assert_eq!(
        elsewhere,
        Some(Reply {
            performative: "not-understood".to_owned(),
            content: json!({"reason": "which room?"})
        })
    );
    assert!(!wants_input.asks(elsewhere.as_ref()));
    // A finished task is no question, wherever the thread may ask one.
    let done = task("completed", None, vec![data_part(json!(1))]);
    assert!(!done.asks(reply_to(&done, &requested).as_ref()));
}

#[test]
fn a_running_task_agrees_only_where_agreeing_is_open() {
    let working = task("working", None, vec![]);
    assert_eq!(
        reply_to(&working, &open(&["agree", "inform"])),
        Some(Reply {
            performative: "agree".to_owned(),
            content: json!({})
        })
    );
    assert_eq!(reply_to(&working, &open(&["inform"])), None);
}

#[test]
fn an_agent_may_name_its_performative() {
    let message = Answer::Result(Box::new(SendResult::Message(agent_message(
        vec![text_part("tomorrow at nine")],
        Some(json!({"colloquy": {"performative": "propose"}})),
    ))));
    assert_eq!(
        reply_to(&message, &open(&["inform"])),
        Some(Reply {
            performative: "propose".to_owned(),
            content: json!({"text": "tomorrow at nine"})
        })
    );
    // A named refusal carries the agent's words as its reason, like a rejected task's.
    let refusal = Answer::Result(Box::new(SendResult::Message(agent_message(
        vec![text_part("booked out")],
        Some(json!({"colloquy": {"performative": "refuse"}})),
    ))));
    assert_eq!(
        reply_to(&refusal, &open(&["refuse"])),
        Some(Reply {
            performative: "refuse".to_owned(),
            content: json!({"reason": "booked out"})
        })
    );
}

#[test]
fn content_is_a_lone_data_value_or_the_parts_by_kind() {
    assert_eq!(content_of(vec![&data_part(json!([1, 2]))]), json!([1, 2]));
    let (a, b, c) = (
        text_part("one"),
        text_part("two"),
        data_part(json!({"x": 1})),
    );
    assert_eq!(
        content_of(vec![&a, &b, &c]),
        json!({"text": "one\ntwo", "data": [{"x": 1}]})
    );
    assert_eq!(content_of(Vec::new()), json!({}));
}

#[test]
fn a_message_becomes_a_message_send_in_its_conversations_context() {
    let item = InboxItem {
        seq: 3,
        conversation_id: Arc::from("c-1"),
        template: Some(Arc::from("fipa-request")),
        message: Message {
            id: Arc::from("m-1"),
            performative: Performative::Fipa(FipaAct::Request),
            sender: Arc::from("alice"),
            receivers: vec![Arc::from("translator")],
            content: Content::from_value(&json!({"text": "hello"})),
            in_reply_to: None,
            reply_by: Some(5),
            sent_at: 1,
            signature: None,
        },
    };
    assert_eq!(
        serde_json::to_value(message_send(&item)).expect("json"),
        json!({"jsonrpc": "2.0", "id": "c-1/m-1", "method": "message/send", "params": {
            "message": {"kind": "message", "role": "user", "messageId": "m-1",
                "contextId": "c-1", "parts": [{"kind": "data", "data": {"text": "hello"}}],
                "metadata": {"colloquy": {"conversation": "c-1", "template": "fipa-request",
                    "performative": "request", "sender": "alice", "reply_by": 5}}},
            "configuration": {"blocking": true}}})
    );
    let text = InboxItem {
        message: Message {
            content: Content::from_value(&json!("hello")),
            ..item.message.clone()
        },
        ..item
    };
    assert_eq!(
        message_send(&text).params.message.parts,
        [text_part("hello")]
    );
}

/// A follower stops only when the conversation is gone or has nothing left to answer;
/// a store it cannot read keeps it (and the task's record) going.
#[test]
fn a_task_is_followed_until_its_conversation_no_longer_waits_for_it() {
    use colloquy_core::store::StoreError;
    assert!(matches!(
        still_awaited(Ok(open(&["inform", "failure"]))),
        Awaited::Yes
    ));
    assert!(matches!(still_awaited(Ok(Vec::new())), Awaited::No));
    assert!(matches!(
        still_awaited(Err(EngineError::UnknownConversation("c".to_owned()))),
        Awaited::No
    ));
    assert!(matches!(
        still_awaited(Err(EngineError::Store(StoreError::Unavailable(
            "connection refused".to_owned()
        )))),
        Awaited::CannotTell(_)
    ));
}

/// A task waiting for input is swept away once its conversation has ended or is gone;
/// one in a conversation still going, and a running task, stay.
#[tokio::test]
async fn waiting_tasks_of_conversations_that_are_over_are_swept() {
    use colloquy_core::clock::SystemClock;
    use colloquy_core::engine::EngineConfig;
    use colloquy_core::store::MemoryStore;
    use colloquy_policy::{Catalog, TemplateCompiler};
    use colloquy_protocol::message::StartConversation;

    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/a2a-task.yaml");
    let template = TemplateCompiler::new()
        .compile_file(&path)
        .unwrap_or_else(|diagnostics| panic!("{diagnostics}"));
    let engine = Arc::new(Engine::new(
        Arc::new(Catalog::new([Arc::new(template)])),
        Arc::new(MemoryStore::new()),
        Arc::new(SystemClock),
        EngineConfig::default(),
    ));
    for id in ["going", "ended"] {
        let request = StartConversation {
            template: "a2a-task".to_owned(),
            participants: vec!["bob".to_owned()],
            conversation_id: Some(id.to_owned()),
            message: Some(SendMessage::new("request", json!({"action": "x"}))),
            ..StartConversation::default()
        };
        engine.start("alice", request).await.expect("start");
    }
    engine
        .send("ended", "bob", SendMessage::new("refuse", json!({})))
        .await
        .expect("refuse");
    let waiting = |conversation: &str| RemoteTask {
        conversation_id: Arc::from(conversation),
        message_id: Arc::from("m"),
        task_id: format!("t-{conversation}"),
        cancel: None,
        awaits_input: true,
    };
    let running = RemoteTask {
        awaits_input: false,
        ..waiting("ended")
    };
    let store = engine.store();
    for task in [waiting("going"), waiting("gone"), running.clone()] {
        store.keep_remote_task("bob", &task).await.expect("keep");
    }
    store
        .keep_remote_task(
            "bob",
            &RemoteTask {
                message_id: Arc::from("m2"),
                ..waiting("ended")
            },
        )
        .await
        .expect("keep");
    let peer = Peer {
        agent: Arc::from("bob"),
        endpoint: Endpoint {
            url: "http://127.0.0.1:9/".to_owned(),
            token: None,
            timeout: Duration::from_secs(1),
        },
        engine: engine.clone(),
        replies: engine.clone(),
        metrics: Arc::new(Metrics::new()),
        client: reqwest::Client::new(),
        trust: None,
    };
    sweep_waiting(peer).await;
    let mut left = store.remote_tasks("bob").await.expect("tasks");
    left.sort_by(|a, b| a.conversation_id.cmp(&b.conversation_id));
    assert_eq!(left, [running, waiting("going")]);
}

/// A canceled task confirms the cancel; an error, or a task that ended another way
/// first, is a failure saying why; nothing fits a thread that may send neither.
#[test]
fn a_cancel_is_confirmed_by_a_canceled_task_and_refused_otherwise() {
    let cancelling = open(&["inform", "failure", "not-understood"]);
    assert_eq!(
        cancel_reply(&task("canceled", None, vec![]), &cancelling),
        Some(Reply {
            performative: "inform".to_owned(),
            content: json!({})
        })
    );
    let refused = Answer::Error(RpcError {
        code: -32002,
        message: "Task cannot be canceled".to_owned(),
        data: None,
    });
    assert_eq!(
        cancel_reply(&refused, &cancelling),
        Some(Reply {
            performative: "failure".to_owned(),
            content: json!({"reason": "the A2A agent did not cancel its task: Task cannot be canceled"})
        })
    );
    let finished = task("completed", None, vec![data_part(json!({"done": true}))]);
    assert_eq!(
        cancel_reply(&finished, &cancelling),
        Some(Reply {
            performative: "failure".to_owned(),
            content: json!({"reason": "the A2A agent did not cancel its task: the A2A task had already ended `completed`"})
        })
    );
    assert_eq!(cancel_reply(&task("canceled", None, vec![]), &[]), None);
}
