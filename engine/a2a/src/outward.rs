//! Outward: remote A2A agents as conversation parties (the A2A bridge).
//!
//! An agent with an `a2a` endpoint in the agents file lives elsewhere and speaks A2A
//! (Agent2Agent, JSON-RPC 2.0), not Colloquy. Its inbox is followed like a webhook's
//! (`colloquy_server::delivery`: one worker per agent, from a cursor kept in the store, on the node
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
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_http::HeaderInjector;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value, json};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use super::Endpoint;
use colloquy_core::engine::Engine;
use colloquy_core::error::EngineError;
use colloquy_core::ids::MAX_ID_LEN;
use colloquy_core::metrics::{A2aCallResult, Metrics};
use colloquy_core::retries::{ATTEMPTS, FIRST_BACKOFF, MAX_BACKOFF};
use colloquy_core::store::RemoteTask;

mod answer;
mod dialect;
mod lanes;
mod updates;
pub use answer::*;
pub use dialect::Dialect;
pub use lanes::{Lanes, MAX_IN_FLIGHT};
pub use updates::Updates;

/// First wait before asking again about a task still running; doubled up to
/// [`POLL_MAX_WAIT`].
pub const POLL_FIRST_WAIT: Duration = Duration::from_millis(500);
/// Longest wait between two `tasks/get`.
pub const POLL_MAX_WAIT: Duration = Duration::from_secs(30);
/// Largest answer read from an agent: as large as the HTTP API's largest request body
/// (`colloquy_server::extract::MAX_BODY_BYTES`; a test there keeps the two equal).
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

/// Where the bridge sends an agent's answers, as that agent: into the engine, or, with
/// partition owners, to the node that owns the conversation (the node running the bridge
/// leads delivery, which says nothing of who owns a conversation; its own commits there
/// would be refused by fencing). `Err` says why the answer was not accepted.
pub trait Replies: Send + Sync {
    /// Sends `message` into `conversation` as `agent`.
    fn send_as<'a>(
        &'a self,
        conversation: &'a str,
        agent: &'a str,
        message: SendMessage,
    ) -> futures_util::future::BoxFuture<'a, Result<(), String>>;
}

/// One node serving every conversation: answers go straight into its engine.
impl Replies for Engine {
    fn send_as<'a>(
        &'a self,
        conversation: &'a str,
        agent: &'a str,
        message: SendMessage,
    ) -> futures_util::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            (self.send(conversation, agent, message).await)
                .map(drop)
                .map_err(|error| error.to_string())
        })
    }
}

/// One remote agent as the bridge sees it: who it is, where, and what calling it needs.
#[derive(Clone)]
pub struct Peer {
    /// Its id.
    pub agent: AgentId,
    /// Where it is reached.
    pub endpoint: Endpoint,
    /// The engine the bridge reads its conversations and tasks from.
    pub engine: Arc<Engine>,
    /// Where its answers go (the engine itself, or the conversations' owners).
    pub replies: Arc<dyn Replies>,
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
        let span = card_span(url);
        let get = (peer.client.get(url)).timeout(endpoint.timeout.min(CARD_TIMEOUT));
        let sent = traced(get, &span).send().instrument(span.clone()).await;
        match &sent {
            Ok(response) => {
                span.record("http.response.status_code", response.status().as_u16());
                if response.status().is_server_error() {
                    span.record("otel.status_code", "error");
                }
            }
            Err(_) => {
                span.record("otel.status_code", "error");
            }
        }
        let response = sent.map_err(|error| failed(error, endpoint))?;
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
    match peer.engine.store().remote_tasks(&peer.agent).await {
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
    let Ok(tasks) = peer.engine.store().remote_tasks(&peer.agent).await else {
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
    if let Err(error) = peer
        .engine
        .store()
        .keep_remote_task(&peer.agent, task)
        .await
    {
        tracing::warn!(agent = %peer.agent, %error, task = task.task_id, "cannot record a running A2A task; a restart will not follow it");
    }
}

/// Forgets the record of `task`. Not fatal when the store cannot: a follower taking it up
/// later finds the conversation done with it.
async fn forget(peer: &Peer, task: &RemoteTask) {
    let store = peer.engine.store();
    if let Err(error) = store
        .forget_remote_task(&peer.agent, &task.conversation_id, &task.message_id)
        .await
    {
        tracing::warn!(agent = %peer.agent, %error, task = task.task_id, "cannot forget an A2A task");
    }
}

/// The store's record of `task` now.
async fn recorded(peer: &Peer, task: &RemoteTask) -> Option<RemoteTask> {
    let tasks = peer.engine.store().remote_tasks(&peer.agent).await.ok()?;
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
    let agent = &*peer.agent;
    let Some(reply) = reply else {
        tracing::debug!(%agent, conversation, "nothing for the A2A agent's answer to say here");
        return;
    };
    let message_id = format!("a2a:{replied}:{}", reply.performative);
    let mut message = SendMessage::new(&reply.performative, reply.content);
    message.in_reply_to = Some(replied.to_owned());
    message.message_id = (message_id.len() <= MAX_ID_LEN).then_some(message_id);
    if let Err(error) = peer.replies.send_as(conversation, agent, message).await {
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

/// The span one bridged message's calls and its reply run in (when traces are exported): a
/// child of the span its conversation started in, when this engine remembers it, so the
/// remote agent's side of the call joins the conversation's trace.
pub(crate) fn bridge_span(peer: &Peer, item: &InboxItem) -> tracing::Span {
    if !colloquy_core::trace_origins::exporting() {
        return tracing::Span::none();
    }
    let span = tracing::debug_span!(
        "a2a bridge",
        colloquy.conversation.id = %item.conversation_id,
        colloquy.agent = %peer.agent,
    );
    if let Some(origin) = peer.engine.trace_origins().origin(&item.conversation_id) {
        let parent = opentelemetry::Context::new().with_remote_span_context(origin);
        let _ = span.set_parent(parent);
    }
    span
}

/// `request` carrying `span`'s W3C trace context (`traceparent`, `tracestate`), when the
/// span is exported.
fn traced(request: reqwest::RequestBuilder, span: &tracing::Span) -> reqwest::RequestBuilder {
    if span.is_disabled() {
        return request;
    }
    let mut headers = reqwest::header::HeaderMap::new();
    TraceContextPropagator::new()
        .inject_context(&span.context(), &mut HeaderInjector(&mut headers));
    request.headers(headers)
}

/// The client span of one GET of a remote agent's card (while traces are exported).
fn card_span(url: &str) -> tracing::Span {
    if !colloquy_core::trace_origins::exporting() {
        return tracing::Span::none();
    }
    let target = reqwest::Url::parse(url).ok();
    tracing::debug_span!(
        "a2a card",
        otel.name = "GET",
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        http.request.method = "GET",
        server.address = target.as_ref().and_then(|url| url.host_str()),
        server.port = target.as_ref().and_then(|url| url.port_or_known_default()),
        url.path = target.as_ref().map(reqwest::Url::path),
        http.response.status_code = tracing::field::Empty,
    )
}

/// The client span of one A2A call (JSON-RPC over HTTP), named by its method as the RPC
/// semantic conventions name spans.
fn call_span(url: &str, method: &str) -> tracing::Span {
    if !colloquy_core::trace_origins::exporting() {
        return tracing::Span::none();
    }
    let target = reqwest::Url::parse(url).ok();
    tracing::debug_span!(
        "a2a call",
        otel.name = method,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        rpc.system = "jsonrpc",
        rpc.method = method,
        server.address = target.as_ref().and_then(|url| url.host_str()),
        server.port = target.as_ref().and_then(|url| url.port_or_known_default()),
        http.response.status_code = tracing::field::Empty,
    )
}

/// One attempt of a call, in its client span, which the remote learns of (`traceparent`).
async fn call_once(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    url: &str,
    dialect: &Dialect,
    request: &Value,
    method: &str,
) -> Result<Received, CallError> {
    let span = call_span(url, method);
    let answer = call_traced(client, endpoint, url, dialect, request, method, &span)
        .instrument(span.clone())
        .await;
    if answer.is_err() {
        span.record("otel.status_code", "error");
    }
    answer
}

/// One attempt of a call. The endpoint's timeout covers a stream too: one that outlasts
/// it breaks, and its task is polled from then on.
async fn call_traced(
    client: &reqwest::Client,
    endpoint: &Endpoint,
    url: &str,
    dialect: &Dialect,
    request: &Value,
    method: &str,
    span: &tracing::Span,
) -> Result<Received, CallError> {
    let streamed = method == "SendStreamingMessage";
    let mut post = traced(
        client.post(url).timeout(endpoint.timeout).json(request),
        span,
    );
    if dialect.is_v1() {
        post = post.header(crate::VERSION_HEADER, dialect::V1_VERSION);
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
        .and_then(reqwest::Response::error_for_status);
    if let Some(status) = match &response {
        Ok(response) => Some(response.status()),
        Err(error) => error.status(),
    } {
        span.record("http.response.status_code", status.as_u16());
    }
    let response = response.map_err(|error| failed(error, endpoint))?;
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
mod tests;
