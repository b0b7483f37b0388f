//! Other nodes' commits: the `changes` table read after a cursor, woken by `LISTEN`.
//!
//! Each batch the writer commits adds a `changes` row per commit with events and sends one
//! `NOTIFY` whose payload is the writing node's id. The NOTIFY is a wake-up only: the
//! follower, on a connection of its own, reads the rows after its cursor and passes on
//! those other nodes wrote. It ignores its own node's NOTIFYs (nothing to read there) and
//! also reads every [`POLL_EVERY`], so a NOTIFY lost while its connection was down delays a
//! notice, never loses it: a reconnected follower goes on from its cursor.
//!
//! The cursor is only right because `changes.seq` is handed out in commit order: the
//! writer takes a transaction-level advisory lock ([`super::CHANGES_LOCK`]) before it inserts
//! its rows and holds it until the commit, so a row with a lower seq is committed (or
//! rolled back) before a higher one is handed out. Once the follower sees `max(seq) = M`,
//! no row at or below M can still appear.
//!
//! Each NOTIFY's payload is the writing node's id, then the agents whose inboxes the batch
//! grew, one per line (`*` when too many to name): so a narrowed follower wakes only for a
//! batch that names an agent it wants, and otherwise polls.
//!
//! **Narrowed** ([`narrow_remote_changes`](colloquy_core::store::ConversationStore::narrow_remote_changes),
//! partition owners): the
//! follower reads only the rows whose `agents` include one the engine wants at that
//! moment (Postgres filters them, `agents::jsonb ?| $wanted`), and none when it wants
//! none; the cursor moves on over the rest.
//!
//! Rows older than `CHANGES_KEPT` are trimmed (`postgres/writer.rs`): a follower cut off for
//! longer skips what was trimmed, as a Redis subscriber misses what was published while it
//! was away.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use colloquy_core::store::{RemoteChange, WantedAgents};
use colloquy_protocol::message::AgentId;
use futures_util::StreamExt as _;
use tokio::sync::{broadcast, mpsc, oneshot};

/// How often the follower reads `changes` without being woken.
pub const POLL_EVERY: Duration = Duration::from_secs(1);
/// Longest pause between reconnection attempts of the follower.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(2);
/// Rows read per query.
const PAGE: i64 = 1000;

/// Follows `changes` through `config` until the store is dropped; `ready` is told once the
/// first `LISTEN` is in place and the cursor set at the newest row ("from now on").
pub(super) async fn follow(
    config: Connecting,
    channel: String,
    node: Arc<str>,
    (changes, wanted): (broadcast::Sender<RemoteChange>, Arc<OnceLock<WantedAgents>>),
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut cursor: Option<i64> = None;
    let mut delay = Duration::from_millis(50);
    loop {
        let error = follow_once(
            &config,
            &channel,
            &node,
            (&changes, &wanted),
            (&mut cursor, &mut ready, &mut delay),
        )
        .await;
        tracing::debug!(%error, "Postgres change follower lost its connection");
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
    }
}

/// How the follower connects: the config, and the TLS connector unless `sslmode=disable`.
type Connecting = (
    tokio_postgres::Config,
    Option<tokio_postgres_rustls::MakeRustlsConnect>,
);

/// What the follower keeps across connections: its cursor, the readiness signal not yet
/// sent, the pause before the next reconnection.
type Progress<'a> = (
    &'a mut Option<i64>,
    &'a mut Option<oneshot::Sender<()>>,
    &'a mut Duration,
);

/// One connection's worth of following, until the connection fails.
/// Where the follower's notices go, and which it wants when narrowed.
type Sinks<'a> = (
    &'a broadcast::Sender<RemoteChange>,
    &'a Arc<OnceLock<WantedAgents>>,
);

async fn follow_once(
    config: &Connecting,
    channel: &str,
    node: &Arc<str>,
    sinks: Sinks<'_>,
    (cursor, ready, delay): Progress<'_>,
) -> tokio_postgres::Error {
    match follow_connected(config, channel, node, sinks, cursor, ready, delay).await {
        Ok(never) => match never {},
        Err(error) => error,
    }
}

async fn follow_connected(
    (config, tls): &Connecting,
    channel: &str,
    node: &Arc<str>,
    (changes, wanted): Sinks<'_>,
    cursor: &mut Option<i64>,
    ready: &mut Option<oneshot::Sender<()>>,
    delay: &mut Duration,
) -> Result<std::convert::Infallible, tokio_postgres::Error> {
    // The connection's messages: NOTIFYs go to `wakes` (a woken flag is all they carry);
    // the task ends with the connection.
    let (wakes, mut woken) = mpsc::channel::<()>(1);
    let listening = (node.to_string(), wanted.clone(), wakes);
    let (client, driver) = match tls {
        Some(tls) => {
            let (client, connection) = config.connect(tls.clone()).await?;
            (client, tokio::spawn(drive(connection, listening)))
        }
        None => {
            let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
            (client, tokio::spawn(drive(connection, listening)))
        }
    };
    let _driver = AbortOnDrop(driver);
    client
        .batch_execute(&format!("LISTEN {}", quote_identifier(channel)))
        .await?;
    if cursor.is_none() {
        let newest: i64 = client
            .query_one("SELECT coalesce(max(seq), 0) FROM changes", &[])
            .await?
            .get(0);
        *cursor = Some(newest);
    }
    if let Some(ready) = ready.take() {
        let _ = ready.send(());
    }
    *delay = Duration::from_millis(50);
    let newest = client
        .prepare("SELECT coalesce(max(seq), 0) FROM changes")
        .await?;
    let others = client
        .prepare(
            "SELECT seq, conversation_id, version, agents FROM changes
             WHERE seq > $1 AND seq <= $2 AND node <> $3 ORDER BY seq LIMIT $4",
        )
        .await?;
    let narrowed = client
        .prepare(
            "SELECT seq, conversation_id, version, agents FROM changes
             WHERE seq > $1 AND seq <= $2 AND node <> $3 AND agents::jsonb ?| $5::text[]
             ORDER BY seq LIMIT $4",
        )
        .await?;
    loop {
        let top: i64 = client.query_one(&newest, &[]).await?.get(0);
        let mut from = cursor.unwrap_or(top);
        let wanted: Option<Vec<String>> = wanted
            .get()
            .map(|wanted| wanted().iter().map(|agent| agent.to_string()).collect());
        if wanted.as_ref().is_some_and(Vec::is_empty) {
            from = top;
        }
        while from < top {
            let rows = match &wanted {
                Some(agents) => {
                    client
                        .query(&narrowed, &[&from, &top, &&**node, &PAGE, agents])
                        .await?
                }
                None => {
                    client
                        .query(&others, &[&from, &top, &&**node, &PAGE])
                        .await?
                }
            };
            let full = rows.len() as i64 == PAGE;
            for row in &rows {
                from = row.get(0);
                let conversation: String = row.get(1);
                let version: i64 = row.get(2);
                let agents: String = row.get(3);
                let agents: Vec<AgentId> = match serde_json::from_str(&agents) {
                    Ok(agents) => agents,
                    Err(error) => {
                        tracing::warn!(%error, "unreadable agents in a Postgres change notice");
                        Vec::new()
                    }
                };
                // No receiver: no engine follows this store (yet).
                let _ = changes.send(RemoteChange {
                    conversation_id: Arc::from(conversation),
                    version: super::from_sql(version),
                    agents,
                });
            }
            if !full {
                from = top;
            }
        }
        *cursor = Some(from);
        tokio::select! {
            wake = woken.recv() => if wake.is_none() {
                // The connection ended: this query fails and says why.
                client.batch_execute("SELECT 1").await?;
            },
            () = tokio::time::sleep(POLL_EVERY) => {}
        }
    }
}

/// Polls `connection` until it ends, passing on the wake-ups worth a read.
async fn drive<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    (own, wanted, wakes): (String, Arc<OnceLock<WantedAgents>>, mpsc::Sender<()>),
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
    while let Some(message) = messages.next().await {
        match message {
            Ok(tokio_postgres::AsyncMessage::Notification(notice))
                if worth_reading(notice.payload(), &own, &wanted) =>
            {
                let _ = wakes.try_send(());
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
}

/// Whether a `NOTIFY` (its payload: the writing node, then the agents whose inboxes its
/// batch grew, one per line, `*` for too many to name) may bring rows this follower passes
/// on: not its own node's, and, when narrowed, only one naming an agent it wants. A payload
/// that names nobody (a batch that grew no inbox, or a node of an older version) wakes a
/// narrowed follower not at all: its poll reads the rows within [`POLL_EVERY`].
fn worth_reading(payload: &str, own: &str, wanted: &OnceLock<WantedAgents>) -> bool {
    let mut lines = payload.split('\n');
    if lines.next() == Some(own) {
        return false;
    }
    let Some(wanted) = wanted.get() else {
        return true;
    };
    let receivers: Vec<&str> = lines.collect();
    if receivers.is_empty() {
        return false;
    }
    if receivers.contains(&"*") {
        return true;
    }
    let wanted = wanted();
    receivers
        .iter()
        .any(|receiver| wanted.iter().any(|agent| &**agent == *receiver))
}

/// Aborts the task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `name` as a quoted SQL identifier.
pub(super) fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::postgres::writer::notify_payload;

    fn wanting(agents: &[&str]) -> OnceLock<WantedAgents> {
        let agents: Vec<AgentId> = agents.iter().map(|agent| Arc::from(*agent)).collect();
        let wanted = OnceLock::new();
        let _ = wanted.set(Arc::new(move || agents.clone()) as WantedAgents);
        wanted
    }

    #[test]
    fn a_narrowed_follower_wakes_for_a_batch_naming_an_agent_it_wants_only() {
        let (bob, carol) = (Arc::from("bob"), Arc::from("carol"));
        let for_bob = notify_payload("node-b", [&bob, &bob]);
        assert_eq!(for_bob, "node-b\nbob");
        let for_carol = notify_payload("node-b", [&carol]);
        let everyone = OnceLock::new();
        // Not narrowed: every other node's batch; never its own.
        assert!(worth_reading(&for_carol, "node-a", &everyone));
        assert!(!worth_reading(&for_carol, "node-b", &everyone));
        // Narrowed to bob: his batches only, and one too long to name everyone.
        let bob_only = wanting(&["bob"]);
        assert!(worth_reading(&for_bob, "node-a", &bob_only));
        assert!(!worth_reading(&for_carol, "node-a", &bob_only));
        assert!(
            !worth_reading("node-b", "node-a", &bob_only),
            "names nobody"
        );
        let many: Vec<AgentId> = (0..2_000)
            .map(|n| Arc::from(format!("agent-{n}")))
            .collect();
        let crowded = notify_payload("node-b", &many);
        assert!(
            crowded.len() < 8_000 && crowded.ends_with("\n*"),
            "{}",
            crowded.len()
        );
        assert!(worth_reading(&crowded, "node-a", &bob_only));
        assert!(!worth_reading(&for_bob, "node-a", &wanting(&[])));
    }
}
