//! Push delivery: messages also go to an agent's webhook URL, when it has one.
//!
//! Every message already sits in the receiver's inbox in the store when the engine
//! publishes its commit notice; webhooks are a second, best-effort copy. One worker per
//! agent follows its inbox from a cursor and POSTs each [`InboxItem`] in order, retrying a
//! failed POST with exponential backoff. Workers are woken by the engine's notices and never
//! hold anything the pipeline waits for: a slow or dead webhook delays only its own agent's
//! pushes, and the inbox (SSE or long-poll) still has every message.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use colloquy_protocol::api::InboxItem;
use colloquy_protocol::message::AgentId;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;

use crate::api::streams::Labeller;
use crate::engine::Engine;
use crate::metrics::{Metrics, WebhookResult};

/// Attempts per message before it is given up (it stays in the inbox).
pub const WEBHOOK_ATTEMPTS: u32 = 8;
/// Wait before the first retry; doubled after each failure.
pub const WEBHOOK_FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between two attempts.
pub const WEBHOOK_MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long one POST may take.
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);
/// Inbox entries a worker reads at a time.
const WEBHOOK_BATCH: usize = 64;
/// Header naming the agent a push is for.
pub const AGENT_HEADER: &str = "x-colloquy-agent";

/// Starts one worker per agent in `webhooks` and the task that wakes them. Aborting the
/// returned task stops the workers too.
pub fn spawn_webhooks(
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    webhooks: HashMap<AgentId, String>,
) -> JoinHandle<()> {
    let client = reqwest::Client::builder()
        .timeout(WEBHOOK_TIMEOUT)
        .build()
        .unwrap_or_else(|error| {
            tracing::warn!(%error, "webhook client settings refused; using defaults");
            reqwest::Client::new()
        });
    let mut notices = engine.subscribe();
    let mut bells: HashMap<AgentId, Arc<Notify>> = HashMap::new();
    let mut workers = Vec::new();
    for (agent, url) in webhooks {
        let bell = Arc::new(Notify::new());
        // Deliver whatever is already in the inbox.
        bell.notify_one();
        bells.insert(agent.clone(), bell.clone());
        workers.push(tokio::spawn(worker(
            engine.clone(),
            metrics.clone(),
            client.clone(),
            agent,
            url,
            bell,
        )));
    }
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

async fn worker(
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    client: reqwest::Client,
    agent: AgentId,
    url: String,
    bell: Arc<Notify>,
) {
    let mut after = 0;
    let mut labeller = Labeller::new();
    loop {
        bell.notified().await;
        loop {
            let entries = match engine.store.inbox(&agent, after, WEBHOOK_BATCH).await {
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
                push(&client, &metrics, &agent, &url, &item).await;
            }
        }
    }
}

/// POSTs one item, retrying with exponential backoff.
async fn push(
    client: &reqwest::Client,
    metrics: &Metrics,
    agent: &str,
    url: &str,
    item: &InboxItem,
) {
    let mut backoff = WEBHOOK_FIRST_BACKOFF;
    for attempt in 1..=WEBHOOK_ATTEMPTS {
        let result = client
            .post(url)
            .header(AGENT_HEADER, agent)
            .json(item)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status);
        match result {
            Ok(_) => {
                metrics.webhook(WebhookResult::Delivered);
                return;
            }
            Err(error) if attempt < WEBHOOK_ATTEMPTS => {
                metrics.webhook(WebhookResult::Retried);
                tracing::debug!(%agent, attempt, %error, conversation = %item.conversation_id, "webhook failed; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(WEBHOOK_MAX_BACKOFF);
            }
            Err(error) => {
                metrics.webhook(WebhookResult::Dropped);
                tracing::warn!(%agent, %error, conversation = %item.conversation_id, seq = item.seq, "webhook gave up; the message stays in the inbox");
            }
        }
    }
}
