//! Group commit: one task takes every commit waiting in its queue, applies them in one
//! transaction and answers each once that transaction has committed (durably:
//! `synchronous_commit = on`). See the parent module's docs for the order of the batch's
//! statements and why it keeps each commit's refusal to itself.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use colloquy_core::store::{Commit, StoreError};
use colloquy_protocol::event::EventKind;
use colloquy_protocol::message::AgentId;
use deadpool_postgres::Pool;
use tokio::sync::{mpsc, oneshot};
use tokio_postgres::types::ToSql;

use super::{
    CHANGES_KEPT, CHANGES_LOCK, OPERATION_DEADLINE, encode, pool_error, sql_error, to_sql,
};

/// Most commits applied in one transaction: bounds the latency a large batch adds to the
/// first commit in it (as the SQLite store's `MAX_GROUP_COMMIT`).
pub const MAX_GROUP_COMMIT: usize = 512;

/// How often the writer trims `changes` of rows older than [`CHANGES_KEPT`].
const TRIM_EVERY: Duration = Duration::from_secs(30);

/// A commit with its JSON already encoded (by the caller, off the writer task).
pub(super) struct Encoded {
    conversation_id: Arc<str>,
    expected_version: u64,
    new_version: u64,
    wake_at: Option<i64>,
    /// The events as one JSON array, or `None` for a commit without events.
    events: Option<String>,
    /// The parties to index (each once), for a commit that starts the conversation.
    parties: Vec<AgentId>,
    /// Each delivered message once.
    deliveries: Vec<EncodedMessage>,
    /// The receivers, each once, as a JSON array: the change notice's `agents`.
    agents: String,
    /// The same receivers, for the batch's `NOTIFY` payload.
    receivers: Vec<AgentId>,
    /// The lease the committing node holds the conversation's partition by, if it is to be
    /// checked (`Commit::fence`).
    fence: Option<colloquy_cluster::Fence>,
}

impl Encoded {
    pub(super) fn new(commit: Commit) -> Result<Encoded, StoreError> {
        let Commit {
            conversation_id,
            expected_version,
            events,
            deliveries,
            wake_at,
            fence,
            ..
        } = commit;
        let mut parties: Vec<AgentId> = Vec::new();
        if let Some(EventKind::Started(started)) = events.first().map(|event| &event.kind)
            && expected_version == 0
        {
            for agent in std::iter::once(&started.initiator).chain(&started.participants) {
                if !parties.contains(agent) {
                    parties.push(agent.clone());
                }
            }
        }
        let mut agents: Vec<&AgentId> = Vec::new();
        for delivery in &deliveries {
            if !agents.contains(&&delivery.agent) {
                agents.push(&delivery.agent);
            }
        }
        let receivers: Vec<AgentId> = agents.iter().map(|agent| (*agent).clone()).collect();
        let agents = encode(&agents)?;
        let deliveries = colloquy_core::store::by_message(&deliveries)
            .into_iter()
            .map(|(message, group)| {
                let receivers = group
                    .iter()
                    .map(|delivery| (delivery.agent.clone(), delivery.conversation_id.clone()))
                    .collect();
                Ok((message.id.clone(), encode(&**message)?, receivers))
            })
            .collect::<Result<_, StoreError>>()?;
        Ok(Encoded {
            conversation_id,
            expected_version,
            new_version: expected_version + events.len() as u64,
            wake_at: wake_at.map(to_sql),
            events: if events.is_empty() {
                None
            } else {
                Some(encode(&events)?)
            },
            parties,
            deliveries,
            agents,
            receivers,
            fence,
        })
    }
}

/// A delivered message: its id, its JSON and its receivers (agent, conversation).
type EncodedMessage = (Arc<str>, String, Vec<(AgentId, Arc<str>)>);

/// Inbox rows as `unnest` columns: agent, seq, conversation, inline message, shared id.
type InboxColumns<'a> = (
    Vec<&'a str>,
    Vec<i64>,
    Vec<&'a str>,
    Vec<Option<&'a str>>,
    Vec<Option<&'a str>>,
);

/// A queued commit and where its answer goes.
pub(super) type Job = (Encoded, oneshot::Sender<Result<(), StoreError>>);

/// The writer task's state.
pub(super) struct Writer {
    pub(super) pool: Pool,
    /// This node's id, written into each `changes` row.
    pub(super) node: Arc<str>,
    /// The channel each batch notifies.
    pub(super) channel: String,
    /// The partition count `settings` records: each new conversation's row gets its
    /// partition, for the deadlines of owned partitions (`claim_due_in`).
    pub(super) partitions: u32,
}

impl Writer {
    /// Waits for a commit, takes every commit queued behind it, applies them in one
    /// transaction, answers them all; until the store is dropped.
    pub(super) async fn run(self, mut queue: mpsc::UnboundedReceiver<Job>) {
        let mut last_trim = Instant::now();
        while let Some(first) = queue.recv().await {
            let mut batch = vec![first];
            while batch.len() < MAX_GROUP_COMMIT {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            let (commits, replies): (Vec<Encoded>, Vec<_>) = batch.into_iter().unzip();
            let outcome = match tokio::time::timeout(OPERATION_DEADLINE, self.apply(&commits)).await
            {
                Ok(outcome) => outcome,
                Err(_) => Err(StoreError::Unavailable(format!(
                    "no answer from Postgres within {OPERATION_DEADLINE:?}"
                ))),
            };
            match outcome {
                Ok(results) => {
                    for (reply, result) in replies.into_iter().zip(results) {
                        // A dropped receiver means its caller went away; nothing to tell.
                        let _ = reply.send(result);
                    }
                }
                Err(error) => {
                    tracing::warn!(%error, commits = replies.len(), "Postgres batch failed; its commits were refused");
                    let refused = error.to_string();
                    for reply in replies {
                        let _ = reply.send(Err(StoreError::Unavailable(refused.clone())));
                    }
                }
            }
            if last_trim.elapsed() >= TRIM_EVERY {
                last_trim = Instant::now();
                tokio::spawn(trim_changes(self.pool.clone()));
            }
        }
    }

    /// Applies `commits` in one transaction: the outer error fails them all (nothing was
    /// written), the inner results refuse single commits.
    async fn apply(&self, commits: &[Encoded]) -> Result<Vec<Result<(), StoreError>>, StoreError> {
        let mut client = self.pool.get().await.map_err(pool_error)?;
        let transaction = client.transaction().await.map_err(sql_error)?;

        // 0. The fences: each fenced commit's partition lease, read and locked `FOR SHARE`
        //    (an acquire of it waits for this transaction), must still be its node's at its
        //    epoch and live by the database's clock; a commit that fails it is refused
        //    below and writes nothing (`postgres/leases.rs`).
        let fenced = fenced_commits(&transaction, commits).await?;

        // 1. Lock the batch's conversations, in id order (two nodes' batches lock them in
        //    one order, so they queue instead of deadlocking), and read their versions.
        let mut ids: Vec<&str> = commits
            .iter()
            .map(|commit| &*commit.conversation_id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        let lock_rows = transaction
            .prepare_cached(
                "SELECT id, version FROM conversations WHERE id = ANY($1)
                 ORDER BY id FOR UPDATE",
            )
            .await
            .map_err(sql_error)?;
        let mut versions: HashMap<String, u64> = HashMap::with_capacity(ids.len());
        for row in transaction
            .query(&lock_rows, &[&ids])
            .await
            .map_err(sql_error)?
        {
            versions.insert(row.get(0), super::from_sql(row.get(1)));
        }

        // 2. Create the rows of new conversations (version 0 until step 4). One a concurrent
        //    node created first is not inserted; its row is locked and read instead, and the
        //    creation is then refused as a duplicate below.
        let mut creations: Vec<&str> = commits
            .iter()
            .enumerate()
            .filter(|(index, commit)| {
                commit.expected_version == 0
                    && !versions.contains_key(&*commit.conversation_id)
                    && !fenced.contains(index)
            })
            .map(|(_, commit)| commit)
            .map(|commit| &*commit.conversation_id)
            .collect();
        creations.sort_unstable();
        creations.dedup();
        let mut placeholders: HashSet<String> = HashSet::new();
        if !creations.is_empty() {
            let create = transaction
                .prepare_cached(
                    "INSERT INTO conversations (id, version, partition)
                     SELECT id, 0, partition
                       FROM unnest($1::text[], $2::integer[]) AS created(id, partition)
                      ORDER BY id
                     ON CONFLICT (id) DO NOTHING RETURNING id",
                )
                .await
                .map_err(sql_error)?;
            let partitions: Vec<i32> = (creations.iter())
                .map(|id| {
                    let partition = colloquy_cluster::partition_of(id, self.partitions);
                    i32::try_from(partition.0).unwrap_or(i32::MAX)
                })
                .collect();
            for row in transaction
                .query(&create, &[&creations, &partitions])
                .await
                .map_err(sql_error)?
            {
                placeholders.insert(row.get(0));
            }
            let raced: Vec<&str> = creations
                .iter()
                .copied()
                .filter(|id| !placeholders.contains(*id))
                .collect();
            if !raced.is_empty() {
                for row in transaction
                    .query(&lock_rows, &[&raced])
                    .await
                    .map_err(sql_error)?
                {
                    versions.insert(row.get(0), super::from_sql(row.get(1)));
                }
            }
        }

        // 3. Check every commit in queue order against the versions as the batch leaves
        //    them: a refused commit writes nothing, and the others go on.
        let mut results = Vec::with_capacity(commits.len());
        let mut accepted: Vec<&Encoded> = Vec::with_capacity(commits.len());
        for (index, commit) in commits.iter().enumerate() {
            let id = &*commit.conversation_id;
            let actual = versions.get(id).copied();
            let verdict =
                if let Some(fence) = commit.fence.as_ref().filter(|_| fenced.contains(&index)) {
                    Err(StoreError::Fenced(colloquy_cluster::Fenced {
                        partition: fence.partition,
                        epoch: fence.epoch,
                    }))
                } else if commit.expected_version == 0 {
                    if placeholders.remove(id) {
                        Ok(())
                    } else {
                        Err(StoreError::Duplicate(commit.conversation_id.clone()))
                    }
                } else if actual == Some(commit.expected_version) {
                    Ok(())
                } else {
                    Err(StoreError::Conflict {
                        id: commit.conversation_id.clone(),
                        expected: commit.expected_version,
                        actual: actual.unwrap_or(0),
                    })
                };
            if verdict.is_ok() {
                versions.insert(id.to_owned(), commit.new_version);
                accepted.push(commit);
            }
            results.push(verdict);
        }

        // 4. What the accepted commits write, as `unnest` columns.
        let mut last: BTreeMap<&str, (i64, Option<i64>)> = BTreeMap::new();
        for commit in &accepted {
            // Each conversation's final version and wake-up: its last accepted commit's.
            last.insert(
                &commit.conversation_id,
                (to_sql(commit.new_version), commit.wake_at),
            );
        }
        let (updated, rest): (Vec<&str>, Vec<(i64, Option<i64>)>) = last.into_iter().unzip();
        let (new_versions, wakes): (Vec<i64>, Vec<Option<i64>>) = rest.into_iter().unzip();
        let logged: Vec<&Encoded> = accepted
            .iter()
            .copied()
            .filter(|commit| commit.events.is_some())
            .collect();
        let logged_ids: Vec<&str> = logged.iter().map(|c| &*c.conversation_id).collect();
        let logged_seqs: Vec<i64> = logged.iter().map(|c| to_sql(c.new_version)).collect();
        let bodies: Vec<&str> = logged
            .iter()
            .map(|c| c.events.as_deref().unwrap_or_default())
            .collect();
        let notice_agents: Vec<&str> = logged.iter().map(|c| c.agents.as_str()).collect();
        let (party_agents, party_ids): (Vec<&str>, Vec<&str>) = accepted
            .iter()
            .flat_map(|commit| {
                commit
                    .parties
                    .iter()
                    .map(|agent| (&**agent, &*commit.conversation_id))
            })
            .unzip();
        let mut counts: BTreeMap<&str, i64> = BTreeMap::new();
        let mut shared: BTreeMap<(&str, &str), &str> = BTreeMap::new();
        for commit in &accepted {
            for (message_id, body, receivers) in &commit.deliveries {
                if receivers.len() > 1 {
                    shared.insert((&commit.conversation_id, message_id), body);
                }
                for (agent, _) in receivers {
                    *counts.entry(agent).or_default() += 1;
                }
            }
        }
        let mut shared_columns: (Vec<&str>, Vec<&str>, Vec<&str>) = Default::default();
        for ((conversation, message), body) in &shared {
            shared_columns.0.push(conversation);
            shared_columns.1.push(message);
            shared_columns.2.push(body);
        }
        let (head_agents, added): (Vec<&str>, Vec<i64>) =
            counts.iter().map(|(agent, n)| (*agent, *n)).unzip();

        // Every statement prepared before any is sent: then the pipelines below send their
        // statements in the order written, which the lock before `changes` relies on.
        let statements = futures_util::future::try_join_all(
            BATCH_STATEMENTS
                .iter()
                .map(|sql| transaction.prepare_cached(sql)),
        )
        .await
        .map_err(sql_error)?;
        let [
            update,
            events,
            parties,
            messages,
            heads,
            inbox,
            changes,
            lock,
            notify,
        ] = &statements[..]
        else {
            return Err(StoreError::Internal(
                "the batch's statements did not prepare".to_owned(),
            ));
        };

        let update_params: [&(dyn ToSql + Sync); 3] = [&updated, &new_versions, &wakes];
        let events_params: [&(dyn ToSql + Sync); 3] = [&logged_ids, &logged_seqs, &bodies];
        let parties_params: [&(dyn ToSql + Sync); 2] = [&party_agents, &party_ids];
        let messages_params: [&(dyn ToSql + Sync); 3] =
            [&shared_columns.0, &shared_columns.1, &shared_columns.2];
        let heads_params: [&(dyn ToSql + Sync); 2] = [&head_agents, &added];

        // 5. One pipeline (one round trip): versions and wake-ups, the events (one row per
        //    commit), the party index of new conversations, shared messages once, and each
        //    agent's inbox head moved by its entries (rows locked in agent order, as the
        //    conversations are).
        let (_, _, _, _, head_rows) = tokio::try_join!(
            skip_or(updated.is_empty(), || transaction
                .execute(update, &update_params)),
            skip_or(logged.is_empty(), || transaction
                .execute(events, &events_params)),
            skip_or(party_agents.is_empty(), || transaction
                .execute(parties, &parties_params)),
            skip_or(shared.is_empty(), || transaction
                .execute(messages, &messages_params)),
            async {
                if counts.is_empty() {
                    Ok(Vec::new())
                } else {
                    transaction.query(heads, &heads_params).await
                }
            },
        )
        .map_err(sql_error)?;

        // 6. The inbox entries, numbered from the old heads in queue order.
        let mut next: HashMap<String, i64> = HashMap::with_capacity(head_rows.len());
        for row in &head_rows {
            let agent: String = row.get(0);
            let head: i64 = row.get(1);
            let count = counts.get(agent.as_str()).copied().unwrap_or(0);
            next.insert(agent, head - count + 1);
        }
        let mut rows: InboxColumns<'_> = Default::default();
        for commit in &accepted {
            for (message_id, body, receivers) in &commit.deliveries {
                let is_shared = receivers.len() > 1;
                for (agent, conversation) in receivers {
                    let seq = next.get_mut(&**agent).ok_or_else(|| {
                        StoreError::Internal(format!("no inbox head came back for `{agent}`"))
                    })?;
                    rows.0.push(agent);
                    rows.1.push(*seq);
                    rows.2.push(conversation);
                    rows.3.push((!is_shared).then_some(body.as_str()));
                    rows.4.push(is_shared.then_some(&**message_id));
                    *seq += 1;
                }
            }
        }

        // 7. Another pipeline: the entries, and the change notices for other nodes, under a
        //    lock so `changes.seq` is handed out in commit order (see `postgres/changes.rs`),
        //    with one NOTIFY for the batch.
        let node: &str = &self.node;
        let inbox_params: [&(dyn ToSql + Sync); 5] = [&rows.0, &rows.1, &rows.2, &rows.3, &rows.4];
        let lock_params: [&(dyn ToSql + Sync); 1] = [&CHANGES_LOCK];
        let changes_params: [&(dyn ToSql + Sync); 4] =
            [&node, &logged_ids, &logged_seqs, &notice_agents];
        let payload = notify_payload(node, logged.iter().flat_map(|c| &c.receivers));
        let notify_params: [&(dyn ToSql + Sync); 2] = [&self.channel, &payload];
        tokio::try_join!(
            skip_or(rows.0.is_empty(), || transaction
                .execute(inbox, &inbox_params)),
            skip_or(logged.is_empty(), || transaction
                .execute(lock, &lock_params)),
            skip_or(logged.is_empty(), || transaction
                .execute(changes, &changes_params)),
            skip_or(logged.is_empty(), || transaction
                .execute(notify, &notify_params)),
        )
        .map_err(sql_error)?;
        transaction.commit().await.map_err(sql_error)?;
        Ok(results)
    }
}

/// The `NOTIFY` payload of a batch: the writing node's id, then each agent whose inbox the
/// batch grew, one per line (`postgres/changes.rs` reads it). Past [`NOTIFY_RECEIVERS_MAX`]
/// bytes the list ends with `*`, "too many to name": a follower then reads the rows.
pub(super) fn notify_payload<'a>(
    node: &str,
    receivers: impl IntoIterator<Item = &'a AgentId>,
) -> String {
    let mut payload = node.to_owned();
    let mut named = std::collections::BTreeSet::new();
    for agent in receivers {
        if !named.insert(&**agent) {
            continue;
        }
        if payload.len() + agent.len() + 1 > NOTIFY_RECEIVERS_MAX {
            payload.push_str("\n*");
            break;
        }
        payload.push('\n');
        payload.push_str(agent);
    }
    payload
}

/// The longest `NOTIFY` payload the writer sends (Postgres refuses 8000 bytes and more).
const NOTIFY_RECEIVERS_MAX: usize = 7_000;

/// The statements of a batch after its checks, in the order [`Writer::apply`] names them.
const BATCH_STATEMENTS: [&str; 9] = [
    "UPDATE conversations AS c SET version = u.version, wake_at = u.wake_at
     FROM unnest($1::text[], $2::bigint[], $3::bigint[]) AS u(id, version, wake_at)
     WHERE c.id = u.id",
    "INSERT INTO events (conversation_id, last_seq, body)
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[])",
    "INSERT INTO parties (agent, conversation_id)
     SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING",
    "INSERT INTO messages (conversation_id, message_id, body)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
     ON CONFLICT (conversation_id, message_id) DO UPDATE SET body = excluded.body",
    "INSERT INTO inbox_heads (agent, head)
     SELECT * FROM unnest($1::text[], $2::bigint[])
     ON CONFLICT (agent) DO UPDATE SET head = inbox_heads.head + excluded.head
     RETURNING agent, head",
    "INSERT INTO inbox (agent, seq, conversation_id, message, shared_id)
     SELECT * FROM unnest($1::text[], $2::bigint[], $3::text[], $4::text[], $5::text[])",
    "INSERT INTO changes (node, conversation_id, version, agents)
     SELECT $1, * FROM unnest($2::text[], $3::bigint[], $4::text[])",
    "SELECT pg_advisory_xact_lock($1)",
    "SELECT pg_notify($1, $2)",
];

/// `statement()` unless `skip` (nothing to write), as one future type for `try_join!`.
async fn skip_or<F>(skip: bool, statement: impl FnOnce() -> F) -> Result<u64, tokio_postgres::Error>
where
    F: Future<Output = Result<u64, tokio_postgres::Error>>,
{
    if skip { Ok(0) } else { statement().await }
}

/// Deletes `changes` rows older than [`CHANGES_KEPT`]; a failure waits for the next turn.
async fn trim_changes(pool: Pool) {
    let trimmed = async {
        let client = pool.get().await.map_err(pool_error)?;
        client
            .execute(
                "DELETE FROM changes WHERE at < now() - make_interval(secs => $1)",
                &[&(CHANGES_KEPT.as_secs_f64())],
            )
            .await
            .map_err(sql_error)
    };
    match tokio::time::timeout(OPERATION_DEADLINE, trimmed).await {
        Ok(Ok(rows)) => tracing::debug!(rows, "trimmed Postgres change notices"),
        Ok(Err(error)) => tracing::debug!(%error, "cannot trim Postgres change notices"),
        Err(_) => tracing::debug!("trimming Postgres change notices timed out"),
    }
}

/// The indexes of the fenced commits of `commits` whose fence does not hold: the partition's
/// lease is another node's, at another epoch, or has run out by the database's clock. The
/// lease rows are locked `FOR SHARE` until the batch commits, so no acquire slips between
/// this check and the batch's writes.
async fn fenced_commits(
    transaction: &tokio_postgres::Transaction<'_>,
    commits: &[Encoded],
) -> Result<HashSet<usize>, StoreError> {
    let mut partitions: Vec<i32> = (commits.iter())
        .filter_map(|commit| commit.fence.as_ref())
        .map(|fence| i32::try_from(fence.partition.0).unwrap_or(i32::MAX))
        .collect();
    if partitions.is_empty() {
        return Ok(HashSet::new());
    }
    partitions.sort_unstable();
    partitions.dedup();
    let rows = transaction
        .query(
            "SELECT partition, owner, epoch FROM partition_leases
              WHERE partition = ANY($1)
                AND expires_at > (extract(epoch FROM now()) * 1000)::bigint
              ORDER BY partition FOR SHARE",
            &[&partitions],
        )
        .await
        .map_err(sql_error)?;
    let held: HashMap<i32, (Option<String>, i64)> = rows
        .iter()
        .map(|row| (row.get(0), (row.get(1), row.get(2))))
        .collect();
    Ok((commits.iter().enumerate())
        .filter(|(_, commit)| {
            commit.fence.as_ref().is_some_and(|fence| {
                let partition = i32::try_from(fence.partition.0).unwrap_or(i32::MAX);
                let epoch = i64::try_from(fence.epoch.0).unwrap_or(i64::MAX);
                let holds = held.get(&partition).is_some_and(|(owner, held_epoch)| {
                    owner.as_deref() == Some(fence.node.as_str()) && *held_epoch == epoch
                });
                !holds
            })
        })
        .map(|(index, _)| index)
        .collect())
}
