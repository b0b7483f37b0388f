//! Push delivery: messages also go to an agent's webhook URL, when it has one, or to its A2A
//! endpoint, when it is a remote A2A agent ([`crate::a2a`]).
//!
//! Every message already sits in the receiver's inbox in the store when the engine
//! publishes its commit notice; webhooks are a second, best-effort copy. One worker per
//! agent follows its inbox from a cursor and POSTs each [`InboxItem`] in order, retrying a
//! failed POST with exponential backoff. Workers are woken by the engine's notices and never
//! hold anything the pipeline waits for: a slow or dead webhook delays only its own agent's
//! pushes, and the inbox (SSE or long-poll) still has every message. An A2A agent's worker
//! sends each item as an A2A message and records the answer as the agent's reply; as
//! nothing else reads that inbox, it acknowledges each batch it has handled.
//!
//! Engine nodes sharing a store (Redis) would each push every message, so the workers push
//! only while their node leads the `webhooks` role ([`ConversationStore::lead`]), renewed
//! every [`LEAD_RENEW`]; when a node dies, another takes over within [`LEAD_LEASE_MS`].
//!
//! How far each agent's pushes got is kept in the store, the agent's webhook cursor
//! ([`ConversationStore::webhook_cursor`]), advanced after every batch of at most
//! [`WEBHOOK_BATCH`] entries. A worker that starts leading (also at start-up) goes on after
//! the cursor, so a restart or a change of leader pushes again only the entries of the
//! batch that was under way: at least once, never the whole inbox. An entry given up after
//! [`ATTEMPTS`] counts as pushed; it stays in the inbox for the agent to read.
//!
//! [`ConversationStore::lead`]: colloquy_core::store::ConversationStore::lead
//! [`ConversationStore::webhook_cursor`]: colloquy_core::store::ConversationStore::webhook_cursor

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use colloquy_protocol::api::InboxItem;
use colloquy_protocol::message::AgentId;
use tokio::sync::{Notify, broadcast, watch};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use colloquy_a2a::{Endpoint, Lanes, Peer};
use colloquy_core::engine::Engine;
use colloquy_core::inbox_labels::Labeller;
use colloquy_core::metrics::{Metrics, WebhookResult};
use colloquy_core::retries::{ATTEMPTS, FIRST_BACKOFF, MAX_BACKOFF};

/// How long one POST may take.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// Inbox entries a worker reads at a time, and pushes between two records of its cursor.
pub const WEBHOOK_BATCH: usize = 64;
/// How long a node's lead of webhook delivery lasts unless renewed.
pub const LEAD_LEASE_MS: u64 = 10_000;
/// How often the leading node renews its lead (and the others try to take it).
pub const LEAD_RENEW: Duration = Duration::from_secs(3);
/// The role webhook delivery is led under.
const WEBHOOKS_ROLE: &str = "webhooks";

/// Header naming the agent a push is for.
pub const AGENT_HEADER: &str = "x-colloquy-agent";

/// Where an agent's inbox is pushed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Channel {
    /// POSTed to this webhook URL, as is.
    Webhook(String),
    /// Sent to the remote A2A agent at this endpoint, whose answers become its replies.
    A2a(Endpoint),
}

/// Starts one worker per agent in `channels` and the task that wakes them. Aborting the
/// returned task stops the workers too.
pub fn spawn_push(
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    channels: HashMap<AgentId, Channel>,
    trust: Option<Arc<colloquy_a2a::signing::TrustStore>>,
    replies: Arc<dyn colloquy_a2a::outward::Replies>,
) -> JoinHandle<()> {
    // Each call sets its own timeout: a webhook's is short, an A2A call waits for the work.
    let client = reqwest::Client::new();
    let mut notices = engine.subscribe();
    let (leads, leading) = watch::channel(false);
    let lead = tokio::spawn(keep_the_lead(engine.clone(), leads));
    // With partition owners, this node hears of other nodes' commits to these inboxes only
    // because it asks to.
    engine.follow_inboxes(channels.keys().cloned());
    let mut bells: HashMap<AgentId, Arc<Notify>> = HashMap::new();
    let mut workers = Vec::new();
    for (agent, channel) in channels {
        let bell = Arc::new(Notify::new());
        // Deliver whatever is already in the inbox.
        bell.notify_one();
        bells.insert(agent.clone(), bell.clone());
        workers.push(tokio::spawn(worker(
            engine.clone(),
            metrics.clone(),
            Outbound {
                client: client.clone(),
                trust: trust.clone(),
                replies: replies.clone(),
            },
            agent,
            channel,
            bell,
            leading.clone(),
        )));
    }
    workers.push(lead);
    tokio::spawn(async move {
        let _workers = AbortOnDrop(workers);
        loop {
            match notices.recv().await {
                Ok(notice) => {
                    for agent in notice.agents.iter() {
                        if let Some(bell) = bells.get(agent) {
                            bell.notify_one();
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    bells.values().for_each(|bell| bell.notify_one());
                }
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}

struct AbortOnDrop(Vec<JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.iter().for_each(JoinHandle::abort);
    }
}

/// Asks for the lead of webhook delivery every [`LEAD_RENEW`] and publishes whether this node
/// has it. A store that cannot be reached means not leading: another node may have it.
async fn keep_the_lead(engine: Arc<Engine>, leads: watch::Sender<bool>) {
    loop {
        let leading = match engine.store().lead(WEBHOOKS_ROLE, LEAD_LEASE_MS).await {
            Ok(leading) => leading,
            Err(error) => {
                tracing::debug!(%error, "cannot renew the lead of webhook delivery");
                false
            }
        };
        leads.send_if_modified(|led| std::mem::replace(led, leading) != leading);
        tokio::time::sleep(LEAD_RENEW).await;
    }
}

/// How a worker calls out: the HTTP client, the keys remote agents' cards must be signed
/// by (when configured), and where a remote A2A agent's answers go.
struct Outbound {
    client: reqwest::Client,
    trust: Option<Arc<colloquy_a2a::signing::TrustStore>>,
    replies: Arc<dyn colloquy_a2a::outward::Replies>,
}

async fn worker(
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    Outbound {
        client,
        trust,
        replies,
    }: Outbound,
    agent: AgentId,
    channel: Channel,
    bell: Arc<Notify>,
    mut leading: watch::Receiver<bool>,
) {
    // How far this node's pushes got; read from the store on taking the lead.
    let mut cursor: Option<u64> = None;
    // An A2A agent's messages under way (several at a time) are dropped (stopped) with the
    // worker.
    let mut pusher = match channel {
        Channel::Webhook(url) => Pusher::Webhook(url),
        Channel::A2a(endpoint) => Pusher::A2a(Box::new(Lanes::new(Peer {
            agent: agent.clone(),
            endpoint,
            engine: engine.clone(),
            replies,
            metrics: metrics.clone(),
            client: client.clone(),
            trust,
        }))),
    };
    let mut labeller = Labeller::new();
    loop {
        tokio::select! {
            () = bell.notified() => {}
            changed = leading.changed() => {
                if changed.is_err() {
                    return;
                }
            }
            handled = settle(&mut pusher) => {
                if let Some(through) = handled {
                    record(&engine, &agent, through, true).await;
                }
                continue;
            }
        }
        if !*leading.borrow_and_update() {
            // Another node pushes, and records how far it gets.
            cursor = None;
            continue;
        }
        if cursor.is_none()
            && let Pusher::A2a(lanes) = &mut pusher
        {
            // Taking up the agent: the tasks it runs, recorded by an earlier run or node.
            lanes.resume().await;
        }
        let mut after = match cursor {
            Some(after) => after,
            None => match engine.store().webhook_cursor(&agent).await {
                Ok(after) => after,
                Err(error) => {
                    tracing::warn!(%agent, %error, "webhook worker cannot read how far it got");
                    continue;
                }
            },
        };
        // Until the backlog is pushed, or the lead moves to another node.
        while *leading.borrow() {
            let entries = match engine.store().inbox(&agent, after, WEBHOOK_BATCH).await {
                Ok(entries) => entries,
                Err(error) => {
                    tracing::warn!(%agent, %error, "webhook worker cannot read the inbox");
                    break;
                }
            };
            if entries.is_empty() {
                break;
            }
            for entry in entries {
                after = entry.seq;
                let item = labeller.item(&engine, entry).await;
                match &mut pusher {
                    Pusher::Webhook(url) => {
                        push(&engine, &client, &metrics, &agent, url, &item).await
                    }
                    Pusher::A2a(lanes) => {
                        if let Some(through) = lanes.start(item).await {
                            record(&engine, &agent, through, true).await;
                        }
                    }
                }
            }
            // An A2A agent's position moves as its messages are answered (above and in
            // `settle`), not when they are sent.
            if let Pusher::Webhook(_) = pusher {
                record(&engine, &agent, after, false).await;
            }
        }
        cursor = Some(after);
    }
}

/// How a worker pushes its agent's inbox.
enum Pusher {
    /// One POST after another.
    Webhook(String),
    /// Several A2A calls at a time.
    A2a(Box<Lanes>),
}

/// Waits until one of an A2A agent's messages under way is done: how far its inbox is now
/// handled, if that moved. Never ready for a webhook, or while nothing is under way.
async fn settle(pusher: &mut Pusher) -> Option<u64> {
    match pusher {
        Pusher::A2a(lanes) if lanes.busy() => lanes.settle().await,
        _ => std::future::pending().await,
    }
}

/// Records that `agent`'s pushes got through `seq`; an A2A agent's inbox, which nothing else
/// reads, is also acknowledged that far.
async fn record(engine: &Engine, agent: &str, seq: u64, acknowledge: bool) {
    if let Err(error) = engine.store().advance_webhook_cursor(agent, seq).await {
        // Not fatal: this node goes on from its own cursor; the next record covers it.
        tracing::warn!(%agent, %error, "push worker cannot record how far it got");
    }
    if acknowledge && let Err(error) = engine.acknowledge_inbox(agent, seq).await {
        // Not fatal either: the entries stay until a later acknowledgement.
        tracing::warn!(%agent, %error, "A2A bridge cannot acknowledge the inbox");
    }
}

/// POSTs one item, retrying with exponential backoff.
async fn push(
    engine: &Engine,
    client: &reqwest::Client,
    metrics: &Metrics,
    agent: &str,
    url: &str,
    item: &InboxItem,
) {
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=ATTEMPTS {
        let span = crate::request_spans::webhook_span(engine, agent, &item.conversation_id, url);
        let mut post = client
            .post(url)
            .timeout(WEBHOOK_TIMEOUT)
            .header(AGENT_HEADER, agent)
            .json(item);
        if !span.is_disabled() {
            let mut headers = reqwest::header::HeaderMap::new();
            crate::request_spans::inject(&span, &mut headers);
            post = post.headers(headers);
        }
        let result = post
            .send()
            .instrument(span.clone())
            .await
            .and_then(reqwest::Response::error_for_status);
        crate::request_spans::record_status(&span, &result);
        match result {
            Ok(_) => {
                metrics.webhook(WebhookResult::Delivered);
                return;
            }
            Err(error) if attempt < ATTEMPTS => {
                metrics.webhook(WebhookResult::Retried);
                tracing::debug!(%agent, attempt, %error, conversation = %item.conversation_id, "webhook failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(error) => {
                metrics.webhook(WebhookResult::Dropped);
                tracing::warn!(%agent, %error, conversation = %item.conversation_id, seq = item.seq, "webhook gave up; the message stays in the inbox");
            }
        }
    }
}
