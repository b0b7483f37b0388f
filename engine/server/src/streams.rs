//! Streams: a conversation's events and an agent's inbox as server-sent events, and the
//! long-poll inbox for clients without SSE.
//!
//! Every stream follows the same loop: take the engine's next wake-up for its key (the agent
//! of an inbox, the conversation of an event stream) first, then read the store from the
//! client's position, send what is new, and wait for that wake-up. Taking it before reading
//! is what makes the loop miss nothing; a commit wakes only the streams of its conversation
//! and of the agents it delivered to. Positions are the SSE event ids: the event `seq` for
//! conversations, the agent's inbox `seq` for inboxes, so a client that reconnects with
//! `Last-Event-ID` (or `?after=`) resumes exactly after what it saw. Delivery is
//! at-least-once: a client that loses a connection before processing an event sees it again.

use std::convert::Infallible;
use std::num::NonZeroUsize;
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use colloquy_protocol::api::InboxPage;
use colloquy_protocol::event::EventKind;
use futures_util::Stream;
use serde::Deserialize;
use tokio::sync::futures::OwnedNotified;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::{PathParams, QueryParams};
use super::json::JsonResponse;
use colloquy_core::inbox_labels::Labeller;
use colloquy_core::log_safe::LogSafe;

/// Inbox entries read from the store at a time.
pub const INBOX_BATCH: usize = 256;
/// Events a stream buffers for a slow client before it waits for the client.
pub const STREAM_BUFFER: usize = 64;
/// Interval of SSE keep-alive comments, so proxies and clients see a live connection.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// Longest long-poll wait; longer requests are cut to it (below common proxy timeouts).
pub const MAX_POLL_WAIT_MS: u64 = 30_000;

pub(crate) type SseStream =
    Sse<KeepAliveStream<Box<dyn Stream<Item = Result<Event, Infallible>> + Send + Unpin>>>;

/// Position query shared by the streams: `?after=N` (a `Last-Event-ID` header wins).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct After {
    after: Option<u64>,
}

/// The resume position: `Last-Event-ID`, else `?after=`, else the start.
fn position(headers: &HeaderMap, query: &After) -> Result<u64, ApiError> {
    match headers.get("last-event-id") {
        Some(value) => value
            .to_str()
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| ApiError::BadRequest {
                code: "invalid_last_event_id",
                message: "Last-Event-ID must be the non-negative integer id of an event".into(),
                pointer: None,
            }),
        None => Ok(query.after.unwrap_or(0)),
    }
}

pub(crate) fn sse(rx: mpsc::Receiver<Event>) -> SseStream {
    let stream = futures_util::StreamExt::map(ReceiverStream::new(rx), Ok);
    Sse::new(Box::new(stream) as Box<dyn Stream<Item = _> + Send + Unpin>)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

/// What woke a stream up.
pub(crate) enum Wake {
    /// Something may be new.
    Read,
    /// The client left or the server is closing.
    Stop,
}

/// Waits for the wake-up `rung`, for the client to leave, or for shutdown.
pub(crate) async fn wait(rung: OwnedNotified, tx: &mpsc::Sender<Event>, state: &AppState) -> Wake {
    let mut closing = state.closing();
    tokio::select! {
        () = rung => Wake::Read,
        () = tx.closed() => Wake::Stop,
        _ = closing.wait_for(|closing| *closing) => Wake::Stop,
    }
}

/// [`wait`] in a stream of conversation `id`, which also ends when, with partition owners,
/// this node stops owning the conversation (a tick saw it move, or this node's lease on it
/// lapsed): its new owner's commits would not wake it here.
/// The client reconnects and is routed to the new owner (`Last-Event-ID` resumes an event
/// stream where it left; an A2A client subscribes to its task again).
pub(crate) async fn wait_as_owner(
    rung: OwnedNotified,
    tx: &mpsc::Sender<Event>,
    state: &AppState,
    id: &str,
) -> Wake {
    let Some(ownership) = state.ownership() else {
        return wait(rung, tx, state).await;
    };
    let mut closing = state.closing();
    tokio::select! {
        () = rung => Wake::Read,
        () = tx.closed() => Wake::Stop,
        _ = closing.wait_for(|closing| *closing) => Wake::Stop,
        () = ownership.until_moved(id) => {
            tracing::debug!("the conversation is no longer this node's: its stream ends here");
            Wake::Stop
        }
    }
}

/// `GET /v1/conversations/{id}/events`: the conversation's events as SSE (`id` = seq,
/// `event` = the event type, `data` = the event), from the resume position on. The stream
/// ends after the `completed` event.
pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<String>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<After>,
) -> Result<SseStream, ApiError> {
    let after = position(&headers, &query)?;
    let viewer = caller.viewer().map(str::to_owned);
    let listener = state.engine().listen_conversation(&id);
    let mut rung = listener.next_ring();
    // Read once before answering, so an unknown conversation or a stranger gets a status code.
    let (first, mut read_to) = state
        .engine()
        .events_read(&id, viewer.as_deref(), after)
        .await?;
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    // Resuming after the end of an ended conversation: nothing will come, close at once.
    if first.is_empty() && state.engine().is_completed(&id).await? {
        return Ok(sse(rx));
    }
    let span = tracing::info_span!("conversation", id = %LogSafe(&id));
    let task = async move {
        let mut batch = first;
        loop {
            let mut ended = false;
            for event in batch {
                ended |= matches!(event.kind, EventKind::Completed { .. });
                let sse = match Event::default()
                    .id(event.seq.to_string())
                    .event(event_type(&event.kind))
                    .json_data(&event)
                {
                    Ok(sse) => sse,
                    Err(error) => {
                        tracing::error!(%error, "event not serializable");
                        return;
                    }
                };
                if tx.send(sse).await.is_err() {
                    return;
                }
            }
            if ended {
                return;
            }
            if matches!(wait_as_owner(rung, &tx, &state, &id).await, Wake::Stop) {
                return;
            }
            rung = listener.next_ring();
            (batch, read_to) = match state
                .engine()
                .events_read(&id, viewer.as_deref(), read_to)
                .await
            {
                Ok(read) => read,
                // Removed by retention or unreadable now: the stream is over.
                Err(error) => {
                    tracing::debug!(%error, "event stream ends");
                    return;
                }
            };
        }
    };
    tokio::spawn(tracing::Instrument::instrument(task, span));
    Ok(sse(rx))
}

/// The `type` tag of an event, as serialized.
fn event_type(kind: &EventKind) -> &'static str {
    match kind {
        EventKind::Started(_) => "started",
        EventKind::MessageAccepted { .. } => "message_accepted",
        EventKind::MessageRefused(_) => "message_refused",
        EventKind::ThreadExpired(_) => "thread_expired",
        EventKind::ThreadDeadlineSet { .. } => "thread_deadline_set",
        EventKind::ViolationRecorded(_) => "violation_recorded",
        EventKind::CommitmentCreated(_) => "commitment_created",
        EventKind::CommitmentMoved { .. } => "commitment_moved",
        EventKind::VarsMerged { .. } => "vars_merged",
        EventKind::DeadlineSet { .. } => "deadline_set",
        EventKind::RetryScheduled { .. } => "retry_scheduled",
        EventKind::RetryFired { .. } => "retry_fired",
        EventKind::Escalated { .. } => "escalated",
        EventKind::Completed { .. } => "completed",
    }
}

/// `GET /v1/agents/{id}/inbox`: the agent's messages as SSE (`id` = inbox seq, `event` =
/// `message`, `data` = an inbox item), in order, from the resume position on. Never ends on
/// its own.
pub async fn inbox(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(agent): PathParams<String>,
    headers: HeaderMap,
    QueryParams(query): QueryParams<After>,
) -> Result<SseStream, ApiError> {
    caller.check_inbox_owner(&agent, "read")?;
    let mut after = position(&headers, &query)?;
    if after_the_end(&state, &agent, after).await? {
        after = 0;
    }
    let (tx, rx) = mpsc::channel(STREAM_BUFFER);
    let span = tracing::info_span!("inbox", agent = %LogSafe(&agent));
    let task = async move {
        let listener = state.engine().listen_inbox(&agent);
        let mut labeller = Labeller::new();
        loop {
            let rung = listener.next_ring();
            let entries = match state
                .engine()
                .store()
                .inbox(&agent, after, INBOX_BATCH)
                .await
            {
                Ok(entries) => entries,
                Err(error) => {
                    tracing::warn!(%error, "inbox read failed; the stream ends");
                    return;
                }
            };
            let full = entries.len() == INBOX_BATCH;
            for entry in entries {
                after = entry.seq;
                let item = labeller.item(state.engine(), entry).await;
                let sse = match Event::default()
                    .id(item.seq.to_string())
                    .event("message")
                    .json_data(&item)
                {
                    Ok(sse) => sse,
                    Err(error) => {
                        tracing::error!(%error, "inbox item not serializable");
                        return;
                    }
                };
                if tx.send(sse).await.is_err() {
                    return;
                }
            }
            if full {
                continue;
            }
            if matches!(wait(rung, &tx, &state).await, Wake::Stop) {
                return;
            }
        }
    };
    tokio::spawn(tracing::Instrument::instrument(task, span));
    Ok(sse(rx))
}

/// Whether `after` is past the newest entry of `agent`'s inbox. A position comes from an entry
/// the client was served, so that happens only when the store was reset while the client
/// kept its position (a `--store memory` server restarted, say). Every entry in the inbox is
/// then new to the client, and reading starts over from the beginning: entries are
/// delivered at least once, so reading from 0 loses nothing, where waiting past the end would
/// hide every message until the new sequence caught up with the old.
async fn after_the_end(state: &AppState, agent: &str, after: u64) -> Result<bool, ApiError> {
    if after == 0 {
        return Ok(false);
    }
    let head = state
        .engine()
        .store()
        .inbox_head(agent)
        .await
        .map_err(colloquy_core::EngineError::from)?;
    Ok(after > head)
}

/// Query of the long-poll inbox.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollQuery {
    after: Option<u64>,
    /// 0 is refused (400) rather than read as 1.
    limit: Option<NonZeroUsize>,
    wait_ms: Option<u64>,
}

/// `GET /v1/agents/{id}/inbox/poll?after=&limit=&wait_ms=`: the entries after `after`; when
/// there are none, waits up to `wait_ms` (default 0, at most [`MAX_POLL_WAIT_MS`]) for one.
pub async fn poll(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(agent): PathParams<String>,
    QueryParams(query): QueryParams<PollQuery>,
) -> Result<JsonResponse<InboxPage>, ApiError> {
    caller.check_inbox_owner(&agent, "read")?;
    let mut after = query.after.unwrap_or(0);
    let limit = query
        .limit
        .map_or(INBOX_BATCH, NonZeroUsize::get)
        .min(INBOX_BATCH);
    let wait_for = Duration::from_millis(query.wait_ms.unwrap_or(0).min(MAX_POLL_WAIT_MS));
    let listener = state.engine().listen_inbox(&agent);
    let mut rung = listener.next_ring();
    let store = state.engine().store();
    let mut entries = store
        .inbox(&agent, after, limit)
        .await
        .map_err(colloquy_core::EngineError::from)?;
    // Only an empty page can be past the end; a page with entries needs no second look.
    if entries.is_empty() && after_the_end(&state, &agent, after).await? {
        after = 0;
        entries = store
            .inbox(&agent, after, limit)
            .await
            .map_err(colloquy_core::EngineError::from)?;
    }
    // A ring need not be for an entry after `after` (another node's missed notices ring
    // every listener), so the wait goes on until an entry comes or the time is up.
    let deadline = tokio::time::Instant::now() + wait_for;
    while entries.is_empty()
        && !wait_for.is_zero()
        && tokio::time::timeout_at(deadline, rung).await.is_ok()
    {
        rung = listener.next_ring();
        entries = store
            .inbox(&agent, after, limit)
            .await
            .map_err(colloquy_core::EngineError::from)?;
    }
    let next_after = entries.last().map_or(after, |entry| entry.seq);
    let mut labeller = Labeller::new();
    let mut items = Vec::with_capacity(entries.len());
    for entry in entries {
        items.push(labeller.item(state.engine(), entry).await);
    }
    Ok(JsonResponse(InboxPage { items, next_after }))
}
