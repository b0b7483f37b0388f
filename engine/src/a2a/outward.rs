//! Outward: remote A2A agents as conversation parties (the A2A bridge).
//!
//! An agent with an `a2a` endpoint in the agents file lives elsewhere and speaks A2A
//! (Agent2Agent, JSON-RPC 2.0), not Colloquy. Its inbox is followed like a webhook's
//! (`crate::delivery`: one worker per agent, from a cursor kept in the store, on the node
//! that leads push delivery; several messages at a time, each conversation's in order:
//! [`Lanes`]), and each message in it becomes one A2A `message/send`. The worker reads the
//! agent's card first ([`Link`]): one that lists a JSON-RPC interface at v1.0 is spoken to
//! in v1.0 (`SendMessage`, `GetTask`, `CancelTask`, v1.0's shapes: [`Dialect`]), any other
//! in v0.3; the calls are written, and the answers read, in v0.3's types either way:
//! - the conversation is the A2A *context* (`contextId` = the conversation id) and the
//!   Colloquy message id is the A2A `messageId`; every message starts a new A2A task, as A2A
//!   wants for a context whose last task ended;
//! - the content is one part: `data` (a JSON string becomes a `text` part);
//! - `metadata.colloquy` says what A2A has no field for: the performative, the sender, the
//!   conversation and its template.
//!
//! The agent's answer becomes its reply in the conversation, sent as that agent (`in_reply_to`
//! the bridged message). A2A has no performatives, so the reply's is chosen from what the
//! agent's thread may send next ([`Engine::replies_open_to`]), by what the answer says
//! ([`Verdict`]): a finished task (or a plain message) is an `inform` where the thread may
//! inform, a `propose` where it is called for proposals; a rejected task a `refuse`; a
//! failed one a `failure`; an error a `not-understood`. A task that wants input asks its
//! question as a `query-ref` where the thread may ask one (`a2a-task`), and is recorded as
//! waiting: the initiator's next message in the conversation is sent into that task
//! (`taskId`), not as a new one; where the thread may not ask, it is a `not-understood`. An
//! agent that knows Colloquy can name the performative itself
//! (`metadata.colloquy.performative`).
//! A task still running when `message/send` returns gets an `agree` where the thread may
//! agree, and is then polled with `tasks/get` until it ends. To a v1.0 agent that streams,
//! the message goes out as `SendStreamingMessage` ([`Updates`]): a task is agreed to when it
//! shows `working` and then followed over its stream, polled only once that ends early. Running tasks are recorded in
//! the store ([`RemoteTask`]): an engine restarted on it, or the node that takes over the
//! agent's delivery, goes on following them. A `cancel` from the initiator while the agent
//! runs a task in the conversation becomes A2A's `tasks/cancel` for that task, not a new
//! `message/send`: a `canceled` task confirms the cancel (`inform`), a refusal is a
//! `failure` with the agent's reason.
//!
//! Delivery is at least once: a restart goes on from the cursor, and the replies' ids are
//! derived from the bridged message's, so a repeated answer is a duplicate, not a second
//! reply. An agent that cannot be reached (8 attempts, as webhooks) gives no answer; the
//! conversation's deadlines deal with silence as they do for any agent.

use std::sync::Arc;
use std::time::Duration;

use colloquy_protocol::a2a::{
    A2aMessage, MessageSendParams, Part, Request, Response, RpcError, SendConfiguration,
    SendResult, Task, TaskQueryParams,
};
use colloquy_protocol::api::InboxItem;
use colloquy_protocol::conversation::ConversationStatus;
use colloquy_protocol::message::{AgentId, SendMessage};
use serde_json::{Map, Value, json};

use super::Endpoint;
use crate::engine::{Engine, MAX_ID_LEN};
use crate::error::EngineError;
use crate::metrics::{A2aCallResult, Metrics};
use crate::retries::{ATTEMPTS, FIRST_BACKOFF, MAX_BACKOFF};
use crate::store::RemoteTask;

mod dialect;
mod lanes;
mod updates;
pub use dialect::Dialect;
pub use lanes::{Lanes, MAX_IN_FLIGHT};
pub use updates::Updates;

/// First wait before asking again about a task still running; doubled up to
/// [`POLL_MAX_WAIT`].
pub const POLL_FIRST_WAIT: Duration = Duration::from_millis(500);
/// Longest wait between two `tasks/get`.
pub const POLL_MAX_WAIT: Duration = Duration::from_secs(30);
/// Largest answer read from an agent: as large as the HTTP API's largest request body
/// (`api::extract::MAX_BODY_BYTES`; a test keeps the two equal).
pub const MAX_ANSWER_BYTES: usize = 1024 * 1024;
/// Most `tasks/get` calls for one task (about two hours at the longest wait), unless the
/// conversation leaves the agent nothing to answer first.
pub const MAX_POLLS: u32 = 250;
/// How often a worker forgets the tasks that wait for an answer nobody will give (their
/// conversation ended or is gone): [`sweep_waiting`]. Also when it takes up the agent.
pub const WAITING_SWEEP: Duration = Duration::from_secs(600);
/// Longest wait for an agent's card (less when the endpoint's timeout is shorter): a card
/// is a small static document, and the worker's first call waits for it.
pub const CARD_TIMEOUT: Duration = Duration::from_secs(10);

/// What an answer of the remote agent amounts to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Done, with a result (a `completed` task or a plain message).
    Done,
    /// It will not do it (`rejected`).
    Refused,
    /// It tried and failed, or the task was cancelled (`failed`, `canceled`).
    Failed,
    /// It could not take the message: a JSON-RPC error, a task that wants
    /// authentication, or a state this engine does not know.
    NotUnderstood,
    /// Still at it (`submitted`, `working`).
    Working,
    /// It asks the sender something first (`input-required`).
    WantsInput,
}

impl Verdict {
    /// The verdict of a task state.
    pub fn of_state(state: &str) -> Verdict {
        match state {
            "completed" => Verdict::Done,
            "rejected" => Verdict::Refused,
            "failed" | "canceled" => Verdict::Failed,
            "submitted" | "working" => Verdict::Working,
            "input-required" => Verdict::WantsInput,
            _ => Verdict::NotUnderstood,
        }
    }

    /// The performatives that carry it, most fitting first.
    fn performatives(self) -> &'static [&'static str] {
        match self {
            Verdict::Done => &["inform", "propose", "confirm", "agree"],
            Verdict::Refused => &["refuse", "reject-proposal"],
            Verdict::Failed => &["failure"],
            Verdict::NotUnderstood => &["not-understood", "failure"],
            Verdict::Working => &["agree"],
            // A question where the thread may ask one back, else it could not go on.
            Verdict::WantsInput => &["query-ref", "not-understood", "failure"],
        }
    }
}

/// The reply an answer makes: its performative (when the thread may send one that fits)
/// and content.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    /// The performative.
    pub performative: String,
    /// The content.
    pub content: Value,
}

/// The reply to `answer` in a thread that may send `open`; `None` when nothing fits. A
/// performative the agent names itself is taken as it is, fitting or not (the conversation
/// then judges it as any message).
pub fn reply_to(answer: &Answer, open: &[Arc<str>]) -> Option<Reply> {
    let performative = match answer.named_performative() {
        Some(named) => named,
        None => answer
            .verdict()
            .performatives()
            .iter()
            .find(|wanted| open.iter().any(|open| &**open == **wanted))?,
    };
    let content = match performative {
        // The answers that say why not carry the agent's words as their reason.
        "refuse" | "reject-proposal" | "failure" | "not-understood" => {
            json!({ "reason": answer.reason() })
        }
        "agree" if answer.verdict() == Verdict::Working => json!({}),
        // The question is the task's status message.
        "query-ref" if answer.verdict() == Verdict::WantsInput => content_of(answer.status_parts()),
        _ => content_of(answer.parts()),
    };
    Some(Reply {
        performative: performative.to_owned(),
        content,
    })
}

/// What the remote agent answered a call with.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// A task or a message.
    Result(Box<SendResult>),
    /// A JSON-RPC error.
    Error(RpcError),
}

/// An [`Answer`], looked into.
enum Said<'a> {
    Task(&'a Task),
    Message(&'a A2aMessage),
    Error(&'a RpcError),
}

impl Answer {
    fn said(&self) -> Said<'_> {
        match self {
            Answer::Result(result) => match &**result {
                SendResult::Task(task) => Said::Task(task),
                SendResult::Message(message) => Said::Message(message),
            },
            Answer::Error(error) => Said::Error(error),
        }
    }

    /// What it amounts to.
    pub fn verdict(&self) -> Verdict {
        match self.said() {
            Said::Task(task) => Verdict::of_state(&task.status.state),
            Said::Message(_) => Verdict::Done,
            Said::Error(_) => Verdict::NotUnderstood,
        }
    }

    /// The parts that carry its result: a task's artifacts (or else its status message), a
    /// message's own.
    fn parts(&self) -> Vec<&Part> {
        match self.said() {
            Said::Task(task) => {
                let artifacts: Vec<&Part> = task.artifacts.iter().flat_map(|a| &a.parts).collect();
                if artifacts.is_empty() {
                    task.status.message.iter().flat_map(|m| &m.parts).collect()
                } else {
                    artifacts
                }
            }
            Said::Message(message) => message.parts.iter().collect(),
            Said::Error(_) => Vec::new(),
        }
    }

    /// The parts of a task's status message (what a task that wants input asks).
    fn status_parts(&self) -> Vec<&Part> {
        match self.said() {
            Said::Task(task) => task.status.message.iter().flat_map(|m| &m.parts).collect(),
            _ => Vec::new(),
        }
    }

    /// Whether it is a task that asks for input and `reply` asks the question in the
    /// conversation: then the task waits for the initiator's answer.
    fn asks(&self, reply: Option<&Reply>) -> bool {
        self.verdict() == Verdict::WantsInput
            && reply.is_some_and(|reply| reply.performative == "query-ref")
    }

    /// Why, for a refusal or a failure: the agent's words, or the state it named.
    fn reason(&self) -> String {
        match self.said() {
            Said::Error(error) => error.message.clone(),
            Said::Task(task) => {
                let said = texts(task.status.message.iter().flat_map(|m| &m.parts));
                if said.is_empty() {
                    format!("the A2A task ended `{}`", task.status.state)
                } else {
                    said
                }
            }
            Said::Message(message) => {
                let said = texts(&message.parts);
                if said.is_empty() {
                    "the A2A agent gave no reason".to_owned()
                } else {
                    said
                }
            }
        }
    }

    /// The performative the agent named in `metadata.colloquy.performative`, on the task,
    /// its status message, or the message.
    fn named_performative(&self) -> Option<&str> {
        fn named(metadata: Option<&Map<String, Value>>) -> Option<&str> {
            metadata?
                .get("colloquy")?
                .get("performative")?
                .as_str()
                .filter(|name| !name.is_empty())
        }
        match self.said() {
            Said::Task(task) => named(task.metadata.as_ref())
                .or_else(|| named(task.status.message.as_ref()?.metadata.as_ref())),
            Said::Message(message) => named(message.metadata.as_ref()),
            Said::Error(_) => None,
        }
    }
}

/// The text parts, joined by newlines.
fn texts<'a>(parts: impl IntoIterator<Item = &'a Part>) -> String {
    parts
        .into_iter()
        .filter_map(|part| match part {
            Part::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A reply's content from the parts of an answer: the value of a lone data part (the
/// usual answer of an agent that returns structured results), else `{"text": …}` with the
/// text parts joined, plus `"data"` and `"files"` lists when there are such parts.
pub fn content_of(parts: Vec<&Part>) -> Value {
    if let [Part::Data { data }] = parts.as_slice() {
        return data.clone();
    }
    let mut content = Map::new();
    let text = texts(parts.iter().copied());
    if !text.is_empty() {
        content.insert("text".to_owned(), Value::String(text));
    }
    let (mut data, mut files) = (Vec::new(), Vec::new());
    for part in &parts {
        match part {
            Part::Data { data: value } => data.push(value.clone()),
            Part::File { file } => files.push(file.clone()),
            Part::Text { .. } => {}
        }
    }
    for (key, values) in [("data", data), ("files", files)] {
        if !values.is_empty() {
            content.insert(key.to_owned(), Value::Array(values));
        }
    }
    Value::Object(content)
}

/// The parts a message's content shows as in A2A, the inverse of [`content_of`]: a string
/// is one text part; an object of only `text` (a string), `data` (a list) and `files` (a
/// list of A2A file objects) is those parts, in that order; any other value is one data
/// part. So a participant answers with text (`"done"`), files
/// (`{"files": [{"name": "a.txt", "mimeType": "text/plain", "bytes": "…"}]}`) or data
/// (`{"total": 42}`), and an answer that came from A2A parts goes back as the same parts.
pub fn parts_of(content: &Value) -> Vec<Part> {
    if let Value::String(text) = content {
        return vec![Part::Text { text: text.clone() }];
    }
    let as_parts = content.as_object().filter(|fields| {
        !fields.is_empty()
            && fields.iter().all(|(key, value)| match key.as_str() {
                "text" => value.is_string(),
                "data" => value.is_array(),
                "files" => value
                    .as_array()
                    .is_some_and(|files| files.iter().all(Value::is_object)),
                _ => false,
            })
    });
    let Some(fields) = as_parts else {
        return vec![Part::Data {
            data: content.clone(),
        }];
    };
    let mut parts = Vec::new();
    if let Some(Value::String(text)) = fields.get("text") {
        parts.push(Part::Text { text: text.clone() });
    }
    for (key, wrap) in [
        ("data", (|data| Part::Data { data }) as fn(Value) -> Part),
        ("files", |file| Part::File { file }),
    ] {
        if let Some(Value::Array(values)) = fields.get(key) {
            parts.extend(values.iter().cloned().map(wrap));
        }
    }
    parts
}

/// The `message/send` request for one inbox item.
pub fn message_send(item: &InboxItem) -> Request<MessageSendParams> {
    let message = &item.message;
    let content = message.content.value();
    let part = match content {
        Value::String(text) => Part::Text { text },
        data => Part::Data { data },
    };
    let mut colloquy = Map::new();
    colloquy.insert("conversation".into(), json!(&*item.conversation_id));
    if let Some(template) = &item.template {
        colloquy.insert("template".into(), json!(&**template));
    }
    colloquy.insert("performative".into(), json!(message.performative.name()));
    colloquy.insert("sender".into(), json!(&*message.sender));
    if let Some(in_reply_to) = &message.in_reply_to {
        colloquy.insert("in_reply_to".into(), json!(&**in_reply_to));
    }
    if let Some(reply_by) = message.reply_by {
        colloquy.insert("reply_by".into(), json!(reply_by));
    }
    let mut metadata = Map::new();
    metadata.insert("colloquy".into(), Value::Object(colloquy));
    Request::new(
        format!("{}/{}", item.conversation_id, message.id),
        "message/send",
        MessageSendParams {
            message: A2aMessage {
                kind: "message".to_owned(),
                role: "user".to_owned(),
                message_id: message.id.to_string(),
                context_id: Some(item.conversation_id.to_string()),
                task_id: None,
                parts: vec![part],
                metadata: Some(metadata),
            },
            configuration: Some(SendConfiguration { blocking: true }),
        },
    )
}

/// Why a call got no answer.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Not reached, or not 2xx, after every attempt.
    #[error("{0}")]
    Unreachable(String),
    /// Answered with something that is no JSON-RPC response of A2A's, or too large; not
    /// asked again, as the same call would get the same.
    #[error("{0}")]
    Broken(String),
    /// No answer within the endpoint's timeout. A `message/send` is not sent again: the
    /// agent may be at work on it, and a second one would start the work twice.
    #[error("{0}")]
    TimedOut(String),
}

/// One remote agent as the bridge sees it: who it is, where, and what calling it needs.
#[derive(Clone)]
pub struct Peer {
    /// Its id.
    pub agent: AgentId,
    /// Where it is reached.
    pub endpoint: Endpoint,
    /// The engine its answers go to.
    pub engine: Arc<Engine>,
    /// Counts its calls.
    pub metrics: Arc<Metrics>,
    /// Makes the calls.
    pub client: reqwest::Client,
    /// The keys the agent's card must be signed by, when the operator configured them
    /// (`--a2a-trust-store`): a card that does not verify is not believed (the agent is
    /// spoken to in v0.3, as if it had none).
    pub trust: Option<Arc<super::signing::TrustStore>>,
}

/// A worker's line to its remote agent: the [`Peer`], and the A2A version its card calls
/// for ([`Dialect`]), read once per worker ([`Lanes::new`] makes one) before its first call.
/// A card that cannot be fetched (the agent unreachable, a 5xx) is asked for again at the
/// next call, which meanwhile speaks v0.3; an agent without a card (a 4xx) or whose card
/// lists no v1.0 JSON-RPC interface is spoken to in v0.3 for the worker's life.
#[derive(Clone)]
pub struct Link {
    /// The agent.
    pub peer: Peer,
    dialect: Arc<tokio::sync::OnceCell<Dialect>>,
}

impl Link {
    /// A line to `peer` whose card is not read yet.
    pub fn new(peer: Peer) -> Link {
        Link {
            peer,
            dialect: Arc::new(tokio::sync::OnceCell::new()),
        }
    }

    /// How to speak to the agent: from its card, read at the first call.
    pub async fn dialect(&self) -> Dialect {
        let peer = &self.peer;
        match self.dialect.get_or_try_init(|| read_dialect(peer)).await {
            Ok(dialect) => dialect.clone(),
            Err(error) => {
                tracing::debug!(agent = %peer.agent, %error, "cannot read the A2A agent's card; speaking v0.3 until it can be read");
                Dialect::V0_3
            }
        }
    }
}

/// The dialect the agent's card calls for ([`Dialect::of_card`]), looked for below its URL,
/// then at its origin ([`dialect::card_urls`]); v0.3 when there is none. `Err` when it
/// could not be asked (unreachable, a 5xx).
async fn read_dialect(peer: &Peer) -> Result<Dialect, CallError> {
    let endpoint = &peer.endpoint;
    for (index, url) in dialect::card_urls(&endpoint.url).iter().enumerate() {
        let response = peer
            .client
            .get(url)
            .timeout(endpoint.timeout.min(CARD_TIMEOUT))
            .send()
            .await
            .map_err(|error| failed(error, endpoint))?;
        let status = response.status();
        if status.is_server_error() {
            return Err(CallError::Unreachable(format!("{url} answered {status}")));
        }
        if !status.is_success() {
            continue;
        }
        let body = read_capped(response, endpoint).await?;
        let Ok(card) = serde_json::from_slice::<Value>(&body) else {
            continue;
        };
        if let Some(trust) = &peer.trust {
            match trust.verify(&card) {
                Ok(kid) => {
                    tracing::debug!(agent = %peer.agent, kid, "the A2A agent's card is signed by a trusted key");
                }
                Err(why) => {
                    tracing::warn!(agent = %peer.agent, card = url, "the A2A agent's card is not believed ({why}): speaking v0.3");
                    return Ok(Dialect::V0_3);
                }
            }
        }
        let dialect = Dialect::of_card(&card, &endpoint.url, index == 0);
        tracing::debug!(agent = %peer.agent, card = url, ?dialect, "read the A2A agent's card");
        return Ok(dialect);
    }
    Ok(Dialect::V0_3)
}

/// A task the agent still runs, to follow ([`follow_task`]), with the stream of its
/// updates when it came over one.
pub struct Running {
    /// The task, as recorded.
    pub task: RemoteTask,
    /// Its updates, when the agent streams them.
    pub updates: Option<Box<Updates>>,
}

/// Bridges one inbox item: sends it and records the answer as the agent's reply. Returns
/// the agent's task when it is still running, for [`follow_task`]; it is recorded in the
/// store before the reply, so a restart goes on following it. To an agent that streams
/// ([`Dialect::streams`]) the message goes out as `SendStreamingMessage`, and the task is
/// handed to its follower, stream and all, once the agent works on it: a long task holds
/// up none of its conversation's next messages (a `cancel`). A `cancel` in a conversation
/// where the agent runs a task becomes `tasks/cancel` (`cancel_tasks`). A message in a
/// conversation where the agent's task waits for input (it asked with `query-ref`) is sent
/// into that task, as the answer to its question. Failures are logged; nothing is recorded
/// for them.
pub async fn bridge(link: &Link, item: &InboxItem) -> Option<Running> {
    let peer = &link.peer;
    let conversation = &item.conversation_id;
    let tasks = tasks_in(peer, conversation).await;
    if item.message.performative.name() == "cancel"
        && let Some(follow) = cancel_tasks(link, item, &tasks).await
    {
        return follow.map(|task| Running {
            task,
            updates: None,
        });
    }
    let mut request = message_send(item);
    let asked = tasks.iter().find(|task| task.awaits_input);
    if let Some(asked) = asked {
        // The answer to the task's question goes into that task; its context is the
        // agent's, which may not be the conversation's id.
        request.params.message.task_id = Some(asked.task_id.clone());
        request.params.message.context_id = None;
    }
    let (answer, updates) = match send(link, request).await {
        Ok(sent) => sent,
        Err(error) => {
            tracing::warn!(agent = %peer.agent, %error, conversation = %conversation,
                message = %item.message.id, "no answer from the A2A agent; none is recorded");
            return None;
        }
    };
    let answer = with_question(link, answer).await;
    if let Some(asked) = asked {
        forget(peer, asked).await;
    }
    let task = |awaits_input| match answer.said() {
        Said::Task(task) => Some(RemoteTask {
            conversation_id: conversation.clone(),
            message_id: item.message.id.clone(),
            task_id: task.id.clone(),
            cancel: None,
            awaits_input,
        }),
        _ => None,
    };
    let open = open_to(peer, conversation).await;
    let reply = open.as_deref().and_then(|open| reply_to(&answer, open));
    let running = if answer.verdict() == Verdict::Working {
        task(false)
    } else {
        None
    };
    let waiting = if answer.asks(reply.as_ref()) {
        task(true)
    } else {
        None
    };
    for task in running.iter().chain(&waiting) {
        keep(peer, task).await;
    }
    send_reply(peer, conversation, &item.message.id, reply).await;
    running.map(|task| Running { task, updates })
}

/// Sends a message: as one blocking call, or to an agent that streams as
/// `SendStreamingMessage`, read until the task ends, wants input or is `working` (then its
/// stream comes back with it, for its follower). A stream that ends or breaks while the
/// task is only `submitted` leaves it to be polled.
async fn send(
    link: &Link,
    mut request: Request<MessageSendParams>,
) -> Result<(Answer, Option<Box<Updates>>), CallError> {
    if !link.dialect().await.streams() {
        return call(link, &request).await.map(|answer| (answer, None));
    }
    request.method = STREAM_METHOD.to_owned();
    let mut updates = match call_any(link, &request).await? {
        Received::Answer(answer) => return Ok((answer, None)),
        Received::Updates(updates) => updates,
    };
    let mut submitted = None;
    loop {
        match updates.next().await {
            Ok(Some(answer)) if answer.verdict() != Verdict::Working => return Ok((answer, None)),
            Ok(Some(answer)) if is_working(&answer) => return Ok((answer, Some(updates))),
            Ok(Some(answer)) => submitted = Some(answer),
            Ok(None) => {
                return submitted.map(|answer| (answer, None)).ok_or_else(|| {
                    CallError::Broken("the stream ended before it showed a task".to_owned())
                });
            }
            Err(error) => return submitted.map(|answer| (answer, None)).ok_or(error),
        }
    }
}

/// The v0.3 name of a streamed send; v1.0's `SendStreamingMessage`.
const STREAM_METHOD: &str = "message/stream";

/// Whether the agent works on the task (`working`, not only `submitted`).
fn is_working(answer: &Answer) -> bool {
    matches!(answer.said(), Said::Task(task) if task.status.state == "working")
}

/// A task that wants input without saying what (a v1.0 stream's status update carries
/// neither a message nor the history): the whole task from `GetTask`, whose history has
/// the question ([`dialect`] reads it from there). As it was when that fails.
async fn with_question(link: &Link, answer: Answer) -> Answer {
    let silent = match answer.said() {
        Said::Task(task) if answer.verdict() == Verdict::WantsInput => {
            task.status.message.is_none().then(|| task.id.clone())
        }
        _ => None,
    };
    let Some(task_id) = silent.filter(|id| !id.is_empty()) else {
        return answer;
    };
    if !link.dialect().await.is_v1() {
        return answer;
    }
    let request = Request::new(
        format!("{task_id}/question"),
        "tasks/get",
        TaskQueryParams { id: task_id },
    );
    match call(link, &request).await {
        Ok(whole) if whole.verdict() == Verdict::WantsInput => whole,
        _ => answer,
    }
}

/// The agent's tasks recorded in `conversation` (none when the store cannot say).
async fn tasks_in(peer: &Peer, conversation: &str) -> Vec<RemoteTask> {
    match peer.engine.store.remote_tasks(&peer.agent).await {
        Ok(tasks) => tasks
            .into_iter()
            .filter(|task| &*task.conversation_id == conversation)
            .collect(),
        Err(error) => {
            tracing::warn!(agent = %peer.agent, %error, "cannot read the A2A agent's tasks");
            Vec::new()
        }
    }
}

/// Asks the agent to cancel `tasks` (its tasks in the conversation of `cancel`, the
/// initiator's `cancel`), and answers that message as the agent: `inform` when a task is
/// canceled, `failure` with why when the agent will not; a task still winding down is
/// answered by its follower when it ends. `None` when the agent runs no task there: then
/// the cancel goes out as any message. Else a task to follow: one that waited for input
/// (so had no follower) and now winds down.
async fn cancel_tasks(
    link: &Link,
    cancel: &InboxItem,
    tasks: &[RemoteTask],
) -> Option<Option<RemoteTask>> {
    let peer = &link.peer;
    let agent = &peer.agent;
    let mut follow = None;
    for task in tasks {
        let request = Request::new(
            format!("{}/{}/cancel", cancel.conversation_id, cancel.message.id),
            "tasks/cancel",
            TaskQueryParams {
                id: task.task_id.clone(),
            },
        );
        let answer = match call(link, &request).await {
            Ok(answer) => answer,
            Err(error) => {
                tracing::warn!(%agent, %error, task = task.task_id, "no answer from the A2A agent to a cancel; none is recorded");
                continue;
            }
        };
        if answer.verdict() == Verdict::Working {
            // Winding down: its follower answers the cancel when the task ends.
            let cancelling = RemoteTask {
                cancel: Some(cancel.message.id.clone()),
                awaits_input: false,
                ..task.clone()
            };
            keep(peer, &cancelling).await;
            if task.awaits_input {
                follow = Some(cancelling);
            }
            continue;
        }
        if task.awaits_input && matches!(answer.said(), Said::Task(_)) {
            // Ended; a task that waited for input has no follower to forget it.
            forget(peer, task).await;
        }
        answer_in_conversation(peer, &cancel.conversation_id, &cancel.message.id, |open| {
            cancel_reply(&answer, open)
        })
        .await;
    }
    (!tasks.is_empty()).then_some(follow)
}
/// The reply to a cancel the agent was asked to carry out, once its task has ended (or
/// the agent refused): `inform` when the task is `canceled`, `failure` with why otherwise (an
/// error, or a task that ended another way first). `None` when the thread may send neither.
pub fn cancel_reply(answer: &Answer, open: &[Arc<str>]) -> Option<Reply> {
    let canceled = matches!(answer.said(), Said::Task(task) if task.status.state == "canceled");
    let (performative, content) = if canceled {
        ("inform", json!({}))
    } else {
        let why = match answer.said() {
            Said::Task(task) => format!("the A2A task had already ended `{}`", task.status.state),
            _ => answer.reason(),
        };
        (
            "failure",
            json!({ "reason": format!("the A2A agent did not cancel its task: {why}") }),
        )
    };
    open.iter()
        .any(|open| &**open == performative)
        .then(|| Reply {
            performative: performative.to_owned(),
            content,
        })
}

/// Follows a running task until it ends, over its stream of updates while there is one,
/// else by polling, and answers with its end; stops early when the conversation leaves
/// the agent nothing to say. Either way the task is then forgotten
/// (its record in the store goes). A task the agent was asked to cancel answers the cancel
/// first. A task that comes to want input and asks in the conversation (`query-ref`) is
/// kept as waiting for it instead. A task that ends `canceled` without a cancel recorded for
/// it was cancelled by the call that answers the cancel (`cancel_tasks`): the request gets
/// no `failure` for it. Returns the task, so its runner knows it is no longer followed.
pub async fn follow_task(
    link: Link,
    task: RemoteTask,
    updates: Option<Box<Updates>>,
) -> RemoteTask {
    let peer = &link.peer;
    let agent = &peer.agent;
    let conversation = &*task.conversation_id;
    let mut updates = updates;
    let mut wait = POLL_FIRST_WAIT;
    let mut polls = 1..=MAX_POLLS;
    let ended = loop {
        if let Some(stream) = updates.as_mut() {
            match tokio::time::timeout(POLL_MAX_WAIT, stream.next()).await {
                Ok(Ok(Some(answer))) if answer.verdict() == Verdict::Working => continue,
                Ok(Ok(Some(answer))) => break Some(answer),
                Ok(Ok(None)) => {
                    tracing::debug!(%agent, task = task.task_id, "the A2A task's stream ended before the task; polling it");
                    updates = None;
                }
                Ok(Err(error)) => {
                    tracing::debug!(%agent, %error, task = task.task_id, "the A2A task's stream broke; polling it");
                    updates = None;
                }
                // Quiet for a while: is the task still awaited at all?
                Err(_) => {
                    match still_awaited(peer.engine.replies_open_to(conversation, agent).await) {
                        Awaited::No => break None,
                        Awaited::Yes | Awaited::CannotTell(_) => continue,
                    }
                }
            }
        }
        let Some(poll) = polls.next() else {
            tracing::warn!(%agent, task = task.task_id, conversation, "A2A task still running after {MAX_POLLS} polls; no longer followed");
            break None;
        };
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(POLL_MAX_WAIT);
        match still_awaited(peer.engine.replies_open_to(conversation, agent).await) {
            Awaited::Yes => {}
            Awaited::No => break None,
            Awaited::CannotTell(error) => {
                tracing::warn!(%agent, %error, conversation, task = task.task_id, "cannot read the conversation of an A2A task; asking again later");
                continue;
            }
        }
        let request = Request::new(
            format!("{conversation}/{}/{poll}", task.message_id),
            "tasks/get",
            TaskQueryParams {
                id: task.task_id.clone(),
            },
        );
        match call(&link, &request).await {
            Ok(answer) if answer.verdict() == Verdict::Working => {}
            Ok(answer) => break Some(answer),
            Err(error) => {
                tracing::warn!(%agent, %error, task = task.task_id, "no answer from the A2A agent about its task; asking again later");
            }
        }
    };
    let mut waits = false;
    if let Some(answer) = ended {
        let answer = with_question(&link, answer).await;
        // The record, not `task`: a cancel may have come since the follower started.
        let cancel = recorded(peer, &task).await.and_then(|task| task.cancel);
        if let Some(cancel) = &cancel {
            answer_in_conversation(peer, conversation, cancel, |open| {
                cancel_reply(&answer, open)
            })
            .await;
        } else if matches!(answer.said(), Said::Task(ended) if ended.status.state == "canceled") {
            forget(peer, &task).await;
            return task;
        }
        let open = open_to(peer, conversation).await;
        let reply = open.as_deref().and_then(|open| reply_to(&answer, open));
        if answer.asks(reply.as_ref()) {
            waits = true;
            let waiting = RemoteTask {
                cancel: None,
                awaits_input: true,
                ..task.clone()
            };
            keep(peer, &waiting).await;
        }
        send_reply(peer, conversation, &task.message_id, reply).await;
    }
    if !waits {
        forget(peer, &task).await;
    }
    task
}

/// Forgets the agent's tasks that wait for input in conversations that have ended (or are
/// gone): nobody will answer their questions. Nothing when the store cannot say.
pub async fn sweep_waiting(peer: Peer) {
    let Ok(tasks) = peer.engine.store.remote_tasks(&peer.agent).await else {
        return;
    };
    for task in tasks.iter().filter(|task| task.awaits_input) {
        let over = match peer.engine.view(&task.conversation_id, None).await {
            Ok(view) => view.status == ConversationStatus::Completed,
            Err(EngineError::UnknownConversation(_)) => true,
            Err(_) => false,
        };
        if over {
            forget(&peer, task).await;
        }
    }
}

/// Whether a conversation still waits for a running task's answer.
#[derive(Debug)]
enum Awaited {
    Yes,
    /// The conversation is gone (retention removed it) or leaves the agent no reply.
    No,
    /// The conversation could not be read (the store is down): the record must stay, so
    /// the follower asks again later rather than forget a task it may still answer.
    CannotTell(EngineError),
}

/// [`Awaited`] from the replies a conversation leaves open to the agent.
fn still_awaited(open: Result<Vec<Arc<str>>, EngineError>) -> Awaited {
    match open {
        Ok(open) if open.is_empty() => Awaited::No,
        Ok(_) => Awaited::Yes,
        Err(EngineError::UnknownConversation(_)) => Awaited::No,
        Err(error) => Awaited::CannotTell(error),
    }
}

/// Records `task` as running, so a restart goes on following it. Not fatal when the
/// store cannot: this process follows it all the same.
async fn keep(peer: &Peer, task: &RemoteTask) {
    if let Err(error) = peer.engine.store.keep_remote_task(&peer.agent, task).await {
        tracing::warn!(agent = %peer.agent, %error, task = task.task_id, "cannot record a running A2A task; a restart will not follow it");
    }
}

/// Forgets the record of `task`. Not fatal when the store cannot: a follower taking it up
/// later finds the conversation done with it.
async fn forget(peer: &Peer, task: &RemoteTask) {
    let store = &peer.engine.store;
    if let Err(error) = store
        .forget_remote_task(&peer.agent, &task.conversation_id, &task.message_id)
        .await
    {
        tracing::warn!(agent = %peer.agent, %error, task = task.task_id, "cannot forget an A2A task");
    }
}

/// The store's record of `task` now.
async fn recorded(peer: &Peer, task: &RemoteTask) -> Option<RemoteTask> {
    let tasks = peer.engine.store.remote_tasks(&peer.agent).await.ok()?;
    tasks.into_iter().find(|kept| {
        kept.conversation_id == task.conversation_id && kept.message_id == task.message_id
    })
}

/// Sends the reply `choose` picks from what the agent's thread may send now, in reply to
/// message `replied`; nothing when it picks none.
async fn answer_in_conversation(
    peer: &Peer,
    conversation: &str,
    replied: &str,
    choose: impl FnOnce(&[Arc<str>]) -> Option<Reply>,
) {
    if let Some(open) = open_to(peer, conversation).await {
        send_reply(peer, conversation, replied, choose(&open)).await;
    }
}

/// The replies the agent's thread may send now; `None` (logged) when the conversation
/// cannot be read.
async fn open_to(peer: &Peer, conversation: &str) -> Option<Vec<Arc<str>>> {
    let agent = &*peer.agent;
    match peer.engine.replies_open_to(conversation, agent).await {
        Ok(open) => Some(open),
        Err(error) => {
            tracing::warn!(%agent, %error, conversation, "cannot answer for an A2A agent");
            None
        }
    }
}

/// Sends `reply` as the agent, in reply to message `replied`; nothing when there is none.
async fn send_reply(peer: &Peer, conversation: &str, replied: &str, reply: Option<Reply>) {
    let (engine, agent) = (&peer.engine, &*peer.agent);
    let Some(reply) = reply else {
        tracing::debug!(%agent, conversation, "nothing for the A2A agent's answer to say here");
        return;
    };
    let message_id = format!("a2a:{replied}:{}", reply.performative);
    let mut message = SendMessage::new(&reply.performative, reply.content);
    message.in_reply_to = Some(replied.to_owned());
    message.message_id = (message_id.len() <= MAX_ID_LEN).then_some(message_id);
    if let Err(error) = engine.send(conversation, agent, message).await {
        tracing::warn!(%agent, %error, conversation, performative = reply.performative, "the A2A agent's answer was not accepted");
    }
}

/// The body of `response`, refused past [`MAX_ANSWER_BYTES`]: an agent's answer is
/// recorded in the conversation, so it gets no more room than a message sent over HTTP.
async fn read_capped(
    mut response: reqwest::Response,
    endpoint: &Endpoint,
) -> Result<Vec<u8>, CallError> {
    let too_large = || CallError::Broken(format!("an answer over {MAX_ANSWER_BYTES} bytes"));
    if response
        .content_length()
        .is_some_and(|length| length > MAX_ANSWER_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| failed(error, endpoint))?
    {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Why a call failed on the way: no answer in time, or not reached (or not 2xx).
fn failed(error: reqwest::Error, endpoint: &Endpoint) -> CallError {
    if error.is_timeout() {
        CallError::TimedOut(format!("no answer within {:?}", endpoint.timeout))
    } else {
        CallError::Unreachable(error.to_string())
    }
}

/// What a call got back: an answer, or (`SendStreamingMessage`) a stream of them.
enum Received {
    Answer(Answer),
    Updates(Box<Updates>),
}

/// One JSON-RPC call with retries, in the agent's [`Dialect`] (`request` is written in
/// v0.3's names and shapes): the answer, or why there was none.
async fn call<P: serde::Serialize>(link: &Link, request: &Request<P>) -> Result<Answer, CallError> {
    match call_any(link, request).await? {
        Received::Answer(answer) => Ok(answer),
        // Only a streamed send is read as a stream.
        Received::Updates(_) => Err(CallError::Broken(format!(
            "{} answered with a stream",
            request.method
        ))),
    }
}

/// [`call`], or for [`STREAM_METHOD`] its stream of updates when the agent answers with
/// one (it may answer a JSON-RPC response instead, an error say).
async fn call_any<P: serde::Serialize>(
    link: &Link,
    request: &Request<P>,
) -> Result<Received, CallError> {
    let Peer {
        agent,
        endpoint,
        metrics,
        client,
        ..
    } = &link.peer;
    let dialect = link.dialect().await;
    // The methods the bridge calls, as metric labels, in the version spoken.
    let (method, sends) = match (request.method.as_str(), dialect.is_v1()) {
        ("tasks/get", false) => ("tasks/get", false),
        ("tasks/cancel", false) => ("tasks/cancel", false),
        (_, false) => ("message/send", true),
        ("tasks/get", true) => ("GetTask", false),
        ("tasks/cancel", true) => ("CancelTask", false),
        (STREAM_METHOD, true) => ("SendStreamingMessage", true),
        (_, true) => ("SendMessage", true),
    };
    let (url, body) = match &dialect {
        Dialect::V0_3 => (endpoint.url.as_str(), serde_json::to_value(request)),
        Dialect::V1_0 { url, .. } => (
            url.as_str(),
            serde_json::to_value(dialect::spelt_v1(request)),
        ),
    };
    let body = body.map_err(|error| CallError::Broken(format!("unwritable request: {error}")))?;
    let mut backoff = FIRST_BACKOFF;
    let mut last = String::new();
    for attempt in 1..=ATTEMPTS {
        match call_once(client, endpoint, url, &dialect, &body, method).await {
            Ok(answer) => {
                metrics.a2a_call(method, A2aCallResult::Answered);
                return Ok(answer);
            }
            Err(CallError::Unreachable(error)) => {
                tracing::debug!(%agent, attempt, %error, method, "A2A call failed");
                last = error;
            }
            // Asking about a task again, or asking again to cancel it, is harmless.
            Err(CallError::TimedOut(error)) if !sends => {
                tracing::debug!(%agent, attempt, %error, method, "A2A call timed out");
                last = error;
            }
            Err(broken) => {
                metrics.a2a_call(method, A2aCallResult::Failed);
                return Err(broken);
            }
        }
        if attempt < ATTEMPTS {
            metrics.a2a_call(method, A2aCallResult::Retried);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }
    metrics.a2a_call(method, A2aCallResult::Failed);
    Err(CallError::Unreachable(format!(
        "{method} failed {ATTEMPTS} times, last: {last}"
    )))
}

/// One attempt of a call. The endpoint's timeout covers a stream too: one that outlasts
/// it breaks, and its task is polled from then on.
async fn call_once(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    url: &str,
    dialect: &Dialect,
    request: &Value,
    method: &str,
) -> Result<Received, CallError> {
    let streamed = method == "SendStreamingMessage";
    let mut post = client.post(url).timeout(endpoint.timeout).json(request);
    if dialect.is_v1() {
        post = post.header(super::v1::VERSION_HEADER, dialect::V1_VERSION);
    }
    if streamed {
        post = post.header(reqwest::header::ACCEPT, "text/event-stream");
    }
    if let Some(token) = &endpoint.token {
        post = post.bearer_auth(token);
    }
    let response = post
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|error| failed(error, endpoint))?;
    let is_stream = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/event-stream"));
    if streamed && is_stream {
        return Ok(Received::Updates(Box::new(Updates::new(response))));
    }
    let body = read_capped(response, endpoint).await?;
    let broken = |error: &dyn std::fmt::Display| {
        CallError::Broken(format!(
            "{method} answered no A2A JSON-RPC response: {error}"
        ))
    };
    let (result, error) = if dialect.is_v1() {
        let response: Response<Value> =
            serde_json::from_slice(&body).map_err(|error| broken(&error))?;
        let result = response
            .result
            .map(dialect::answer_from_v1)
            .transpose()
            .map_err(|error| broken(&error))?;
        (result, response.error)
    } else {
        let response: Response<SendResult> =
            serde_json::from_slice(&body).map_err(|error| broken(&error))?;
        (response.result, response.error)
    };
    match (result, error) {
        (_, Some(error)) => Ok(Received::Answer(Answer::Error(error))),
        (Some(result), None) => Ok(Received::Answer(Answer::Result(Box::new(result)))),
        (None, None) => Err(CallError::Broken(format!(
            "{method} answered a JSON-RPC response with neither result nor error"
        ))),
    }
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn an_answer_may_be_as_large_as_a_request_to_the_api() {
        assert_eq!(MAX_ANSWER_BYTES, crate::api::extract::MAX_BODY_BYTES);
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
        use crate::store::StoreError;
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
        use crate::clock::SystemClock;
        use crate::engine::EngineConfig;
        use crate::store::MemoryStore;
        use colloquy_policy::{Catalog, TemplateCompiler};
        use colloquy_protocol::message::StartConversation;

        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates/a2a-task.yaml");
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
        let store = &engine.store;
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
}
