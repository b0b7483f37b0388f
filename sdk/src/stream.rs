//! Server-sent event streams that survive disconnects: on a broken connection they wait a
//! little (exponential backoff), reconnect with `Last-Event-ID` set to the last event they
//! handed out, and go on. Nothing is skipped; an event may be seen twice only if the caller
//! had not taken it yet, so processing stays at-least-once.

use std::collections::VecDeque;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use colloquy_protocol::api::InboxItem;
use colloquy_protocol::event::ConversationEvent;
use futures_util::{Stream, StreamExt};
use reqwest::Method;

use crate::client::{Client, check, segment};
use crate::error::SdkError;
use crate::sse::{SseEvent, SseParser};

/// First wait before a reconnect; doubled after each failed attempt.
pub const FIRST_RECONNECT_DELAY: Duration = Duration::from_millis(50);
/// Longest wait between reconnects.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);

type Body = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// One SSE resource, reconnecting on transport failures.
struct Reader {
    client: Client,
    path: String,
    last_id: u64,
    body: Option<Body>,
    parser: SseParser,
    pending: VecDeque<SseEvent>,
    delay: Duration,
}

impl Reader {
    fn new(client: Client, path: String, after: u64) -> Reader {
        Reader {
            client,
            path,
            last_id: after,
            body: None,
            parser: SseParser::default(),
            pending: VecDeque::new(),
            delay: FIRST_RECONNECT_DELAY,
        }
    }

    /// The next event; `Ok(None)` when the server ended the stream on purpose. Transport
    /// failures and 5xx answers are retried; any other error answer is returned.
    async fn next(&mut self, end_means_done: bool) -> Result<Option<SseEvent>, SdkError> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                if let Some(id) = event.id.as_deref().and_then(|id| id.parse().ok()) {
                    self.last_id = id;
                }
                return Ok(Some(event));
            }
            let Some(body) = self.body.as_mut() else {
                match connect(&self.client, &self.path, self.last_id).await {
                    Ok(body) => {
                        self.body = Some(body);
                        self.delay = FIRST_RECONNECT_DELAY;
                    }
                    Err(error) if error.is_transient() => self.back_off(&error).await,
                    Err(error) => return Err(error),
                }
                continue;
            };
            match body.next().await {
                Some(Ok(chunk)) => self.pending.extend(self.parser.push(&chunk)),
                Some(Err(error)) => {
                    self.reset();
                    self.back_off(&SdkError::Transport(error)).await;
                }
                None => {
                    self.reset();
                    if end_means_done {
                        return Ok(None);
                    }
                    self.back_off(&SdkError::StreamEnded(self.path.clone()))
                        .await;
                }
            }
        }
    }

    fn reset(&mut self) {
        self.body = None;
        self.parser = SseParser::default();
    }

    async fn back_off(&mut self, error: &SdkError) {
        tracing::debug!(path = %self.path, %error, delay_ms = self.delay.as_millis() as u64, "stream reconnects");
        tokio::time::sleep(self.delay).await;
        self.delay = (self.delay * 2).min(MAX_RECONNECT_DELAY);
    }
}

/// Opens the stream after `last_id`. (A free function: the reader's body is not `Sync`, so a
/// future must not hold a reference to the whole reader.)
async fn connect(client: &Client, path: &str, last_id: u64) -> Result<Body, SdkError> {
    let request = client
        .http_request(Method::GET, path)
        .header("accept", "text/event-stream")
        .header("last-event-id", last_id.to_string());
    let response = client.send_request(request).await?;
    let response = check(response).await?;
    Ok(Box::pin(response.bytes_stream()))
}

/// An agent's inbox as a stream: every message addressed to it, in order.
pub struct InboxStream {
    reader: Reader,
}

impl InboxStream {
    pub(crate) fn new(client: Client, after: u64) -> InboxStream {
        let path = format!("/v1/agents/{}/inbox", segment(client.agent()));
        InboxStream {
            reader: Reader::new(client, path, after),
        }
    }

    /// The next item. Waits as long as it takes, reconnecting as needed; fails only when
    /// the server refuses the stream (401, 403).
    pub async fn next(&mut self) -> Result<InboxItem, SdkError> {
        loop {
            let Some(event) = self.reader.next(false).await? else {
                continue;
            };
            if event.event.as_deref() != Some("message") {
                continue;
            }
            return serde_json::from_str(&event.data)
                .map_err(|error| SdkError::Decode(format!("inbox item: {error}")));
        }
    }

    /// The `seq` of the last item handed out: pass it to [`Client::inbox`] to resume later.
    pub fn position(&self) -> u64 {
        self.reader.last_id
    }
}

/// A conversation's events as a stream, ending after its `completed` event.
pub struct EventStream {
    reader: Reader,
}

impl EventStream {
    pub(crate) fn new(client: Client, conversation_id: &str, after: u64) -> EventStream {
        let path = format!("/v1/conversations/{}/events", segment(conversation_id));
        EventStream {
            reader: Reader::new(client, path, after),
        }
    }

    /// The next event, or `None` once the conversation completed (or was removed).
    pub async fn next(&mut self) -> Result<Option<ConversationEvent>, SdkError> {
        match self.reader.next(true).await? {
            None => Ok(None),
            Some(event) => serde_json::from_str(&event.data)
                .map(Some)
                .map_err(|error| SdkError::Decode(format!("event: {error}"))),
        }
    }
}
