//! The writer thread: applies every commit waiting in its queue in one transaction (group
//! commit), answers them once the batch is durable (through the syncer thread under
//! [`Synchronous::Full`]), and keeps the versions and inbox heads it has written in memory so
//! that a stale commit is refused before any SQL runs. See the parent module's docs.

use super::*;

/// The writer thread's state: its connection and what it remembers of the tables.
pub(super) struct Writer {
    pub(super) connection: Connection,
    /// Conversation id → version (0: does not exist), as of the writer's last statement.
    pub(super) versions: Remembered<Arc<str>>,
    /// Agent → last inbox sequence number written.
    pub(super) inbox_heads: Remembered<AgentId>,
    /// Rows in the recent tables; `None`: count them.
    pub(super) recent: Option<Recent>,
    /// For [`Synchronous::Full`]: where committed batches go to wait for their fsync.
    pub(super) syncer: Option<mpsc::Sender<Vec<Answer>>>,
    /// Joined when the writer stops.
    pub(super) syncer_thread: Option<thread::JoinHandle<()>>,
    /// Decides when the WAL is checkpointed, and mostly does it on its own thread.
    pub(super) checkpointer: checkpoint::Checkpointer,
    /// Held for as long as the writer runs; see the module docs.
    pub(super) _lock: File,
}

/// Rows waiting in `inbox_recent` and `parties_recent`.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Recent {
    pub(super) inbox: usize,
    pub(super) parties: usize,
}

impl Recent {
    fn count(connection: &Connection) -> Result<Recent, rusqlite::Error> {
        let rows = |table: &str| -> Result<usize, rusqlite::Error> {
            let rows: i64 =
                connection.query_row(&format!("SELECT count(*) FROM {table}"), [], |row| {
                    row.get(0)
                })?;
            Ok(usize::try_from(rows).unwrap_or(0))
        };
        Ok(Recent {
            inbox: rows("inbox_recent")?,
            parties: rows("parties_recent")?,
        })
    }

    /// Moves the recent rows into the tables clustered by agent once there are enough.
    fn settle(&mut self, connection: &Connection) -> Result<(), rusqlite::Error> {
        if self.inbox >= RECENT_ROWS {
            move_recent_inbox(connection)?;
            self.inbox = 0;
        }
        if self.parties >= RECENT_ROWS {
            connection.execute_batch(
                "INSERT OR IGNORE INTO parties (agent, conversation_id)
                     SELECT agent, conversation_id FROM parties_recent
                     ORDER BY agent, conversation_id;
                 DELETE FROM parties_recent;",
            )?;
            self.parties = 0;
        }
        Ok(())
    }
}

/// Moves every row of `inbox_recent` into `inbox`, clustered by agent.
pub(super) fn move_recent_inbox(connection: &Connection) -> Result<(), rusqlite::Error> {
    connection.execute_batch(
        "INSERT INTO inbox (agent, seq, conversation_id, message, message_row)
             SELECT agent, seq, conversation_id, message, message_row FROM inbox_recent
             ORDER BY agent, seq;
         DELETE FROM inbox_recent;",
    )
}

pub(super) enum Answer {
    Commit(
        oneshot::Sender<Result<(), StoreError>>,
        Result<(), StoreError>,
    ),
    Claim(
        oneshot::Sender<Result<Vec<Arc<str>>, StoreError>>,
        Result<Vec<Arc<str>>, StoreError>,
    ),
    /// A job whose answer is only that it was applied: a removal, a webhook cursor, a write
    /// to the revision archive.
    Done(
        oneshot::Sender<Result<(), StoreError>>,
        Result<(), StoreError>,
    ),
    Acknowledge(
        oneshot::Sender<Result<bool, StoreError>>,
        Result<bool, StoreError>,
    ),
}

impl Writer {
    /// Waits for a job, takes every job queued behind it, applies them in one transaction,
    /// answers them all.
    pub(super) fn run(mut self, queue: mpsc::Receiver<Job>) {
        while let Ok(first) = queue.recv() {
            let mut batch = vec![first];
            while batch.len() < MAX_GROUP_COMMIT {
                match queue.try_recv() {
                    Ok(job) => batch.push(job),
                    Err(_) => break,
                }
            }
            self.apply_batch(batch);
        }
        // Let the syncer answer what it holds, then stop.
        self.syncer = None;
        if let Some(syncer) = self.syncer_thread.take() {
            // A panicked syncer has nothing left to clean up.
            let _ = syncer.join();
        }
    }

    fn apply_batch(&mut self, batch: Vec<Job>) {
        let mut answers = Vec::with_capacity(batch.len());
        let Writer {
            connection,
            versions,
            inbox_heads,
            recent,
            ..
        } = self;
        let outcome = (|| -> Result<Recent, rusqlite::Error> {
            let transaction = connection.transaction()?;
            let mut counts = match *recent {
                Some(counts) => counts,
                None => Recent::count(&transaction)?,
            };
            for job in batch {
                answers.push(match job {
                    Job::Commit(commit, reply) => {
                        let result =
                            apply_commit(&transaction, versions, inbox_heads, &mut counts, commit)?;
                        Answer::Commit(reply, result)
                    }
                    Job::ClaimDue(now, limit, reply) => {
                        Answer::Claim(reply, Ok(claim_due(&transaction, now, limit)?))
                    }
                    Job::Remove(id, reply) => {
                        remove(&transaction, &id)?;
                        versions.insert(Arc::from(id), 0);
                        Answer::Done(reply, Ok(()))
                    }
                    Job::Acknowledge(agent, through, reply) => {
                        let complete = acknowledge(&transaction, &agent, through, &mut counts)?;
                        Answer::Acknowledge(reply, Ok(complete))
                    }
                    Job::AdvanceWebhookCursor(agent, seq, reply) => {
                        advance_webhook_cursor(&transaction, &agent, seq)?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::KeepRemoteTask(agent, task, reply) => {
                        keep_remote_task(&transaction, &agent, &task)?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::KeepPushConfig(config, reply) => {
                        let body = serde_json::to_string(&config).unwrap_or_default();
                        transaction
                            .prepare_cached(
                                "INSERT OR REPLACE INTO push_configs (conversation_id, id, body)
                                 VALUES (?1, ?2, ?3)",
                            )?
                            .execute(params![&*config.conversation_id, config.id, body])?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::KeepAgentKey(key, reply) => {
                        let body = serde_json::to_string(&key).unwrap_or_default();
                        transaction
                            .prepare_cached(
                                "INSERT OR REPLACE INTO agent_keys (agent, kid, body)
                                 VALUES (?1, ?2, ?3)",
                            )?
                            .execute(params![&*key.agent, key.kid, body])?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::ForgetPushConfig(conversation, id, reply) => {
                        transaction
                            .prepare_cached(
                                "DELETE FROM push_configs WHERE conversation_id = ?1 AND id = ?2",
                            )?
                            .execute(params![conversation, id])?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::Archive(write, reply) => {
                        write.apply(&transaction)?;
                        Answer::Done(reply, Ok(()))
                    }
                    Job::ForgetRemoteTask(agent, conversation, message, reply) => {
                        transaction
                            .prepare_cached(
                                "DELETE FROM remote_tasks
                                 WHERE agent = ?1 AND conversation_id = ?2 AND message_id = ?3",
                            )?
                            .execute(params![agent, conversation, message])?;
                        Answer::Done(reply, Ok(()))
                    }
                });
            }
            counts.settle(&transaction)?;
            transaction.commit()?;
            Ok(counts)
        })();
        *recent = outcome.as_ref().ok().copied();
        let outcome = outcome.map(|_| ());
        if outcome.is_err() || versions.len() > MAX_REMEMBERED {
            // Rolled back: what the maps say of this batch never happened.
            versions.clear();
        }
        if outcome.is_err() || inbox_heads.len() > MAX_REMEMBERED {
            inbox_heads.clear();
        }
        match outcome {
            Ok(()) => match &self.syncer {
                // Answered once the WAL is on disk.
                Some(syncer) => {
                    if let Err(mpsc::SendError(answers)) = syncer.send(answers) {
                        send_answers(answers, Some("the WAL syncer has stopped"));
                    }
                }
                None => send_answers(answers, None),
            },
            Err(error) => {
                tracing::error!(%error, "SQLite transaction failed; its commits were refused");
                send_answers(answers, Some(&format!("SQLite write failed: {error}")));
                return;
            }
        }
        self.checkpointer.after_commit(&self.connection);
    }
}

/// Answers every job of a batch: with its result, or all with
/// [`StoreError::Unavailable`] for `failure`.
pub(super) fn send_answers(answers: Vec<Answer>, failure: Option<&str>) {
    let refused = || StoreError::Unavailable(failure.unwrap_or_default().to_owned());
    for answer in answers {
        // A dropped receiver means its caller went away; nothing to tell.
        match (answer, failure) {
            (Answer::Commit(reply, result), None) => drop(reply.send(result)),
            (Answer::Claim(reply, result), None) => drop(reply.send(result)),
            (Answer::Done(reply, result), None) => drop(reply.send(result)),
            (Answer::Acknowledge(reply, result), None) => drop(reply.send(result)),
            (Answer::Commit(reply, _), Some(_)) => drop(reply.send(Err(refused()))),
            (Answer::Claim(reply, _), Some(_)) => drop(reply.send(Err(refused()))),
            (Answer::Done(reply, _), Some(_)) => drop(reply.send(Err(refused()))),
            (Answer::Acknowledge(reply, _), Some(_)) => drop(reply.send(Err(refused()))),
        }
    }
}

/// The WAL syncer of [`Synchronous::Full`]: takes the answers of every batch the writer has
/// committed (with `synchronous = NORMAL`: written to the WAL, not yet synced), syncs the
/// WAL file once for all of them and answers them. The writer meanwhile applies the next
/// batch, so the fsync no longer stalls it.
pub(super) fn sync_loop(wal_path: &Path, queue: mpsc::Receiver<Vec<Answer>>) {
    let mut wal: Option<File> = None;
    while let Ok(mut answers) = queue.recv() {
        while let Ok(more) = queue.try_recv() {
            answers.extend(more);
        }
        let synced = match &wal {
            Some(file) => file.sync_data(),
            None => match File::options().write(true).open(wal_path) {
                Ok(file) => file.sync_data().map(|()| wal = Some(file)),
                // No WAL yet: the batch wrote nothing (every commit in it was refused).
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(error) => Err(error),
            },
        };
        match synced {
            Ok(()) => send_answers(answers, None),
            Err(error) => {
                tracing::error!(%error, "cannot sync the SQLite WAL; its commits were refused");
                send_answers(answers, Some(&format!("cannot sync the WAL: {error}")));
            }
        }
    }
}

/// The stored version of a conversation, 0 if there is none.
pub(super) fn stored_version(connection: &Connection, id: &str) -> Result<u64, rusqlite::Error> {
    let version: Option<i64> = connection
        .prepare_cached("SELECT version FROM conversations WHERE id = ?1")?
        .query_row(params![id], |row| row.get(0))
        .optional()?;
    Ok(version.map(from_sql).unwrap_or(0))
}

/// Applies one commit. The outer error is an SQL failure, which fails the whole batch; the
/// inner one refuses this commit, before any of its statements ran.
pub(super) fn apply_commit(
    connection: &Connection,
    versions: &mut Remembered<Arc<str>>,
    inbox_heads: &mut Remembered<AgentId>,
    recent: &mut Recent,
    commit: Encoded,
) -> Result<Result<(), StoreError>, rusqlite::Error> {
    let id = &commit.conversation_id;
    let known = versions.get(&**id).copied();
    if commit.expected_version == 0 {
        if known.is_some_and(|version| version != 0) {
            return Ok(Err(StoreError::Duplicate(id.clone())));
        }
        let inserted = connection
            .prepare_cached(
                "INSERT INTO conversations (id, version, wake_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (id) DO NOTHING",
            )?
            .execute(params![&**id, to_sql(commit.new_version), commit.wake_at])?;
        if inserted == 0 {
            versions.insert(id.clone(), stored_version(connection, id)?);
            return Ok(Err(StoreError::Duplicate(id.clone())));
        }
        let mut insert_party = connection.prepare_cached(
            "INSERT INTO parties_recent (agent, conversation_id) VALUES (?1, ?2)",
        )?;
        for agent in &commit.parties {
            insert_party.execute(params![&**agent, &**id])?;
            recent.parties += 1;
        }
    } else {
        let actual = match known {
            Some(version) => version,
            None => stored_version(connection, id)?,
        };
        if actual != commit.expected_version {
            versions.insert(id.clone(), actual);
            return Ok(Err(StoreError::Conflict {
                id: id.clone(),
                expected: commit.expected_version,
                actual,
            }));
        }
        let updated = connection
            .prepare_cached("UPDATE conversations SET version = ?1, wake_at = ?2 WHERE id = ?3")?
            .execute(params![to_sql(commit.new_version), commit.wake_at, &**id])?;
        if updated == 0 {
            // The map said it exists and the table says it does not: something else wrote
            // the file. Nothing of this commit ran; forget what was remembered.
            versions.remove(&**id);
            return Ok(Err(StoreError::Internal(format!(
                "conversation `{id}` vanished from the database"
            ))));
        }
    }
    versions.insert(id.clone(), commit.new_version);
    if let Some(events) = &commit.events {
        connection
            .prepare_cached(
                "INSERT INTO events (conversation_id, last_seq, body) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![&**id, to_sql(commit.new_version), events])?;
    }
    if !commit.deliveries.is_empty() {
        let mut insert_entry = connection.prepare_cached(
            "INSERT INTO inbox_recent (agent, seq, conversation_id, message, message_row)
             VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (message, receivers) in &commit.deliveries {
            // Inline for one receiver (the common case: no extra row); stored once and
            // named for several.
            let (inline, row) = if receivers.len() > 1 {
                connection
                    .prepare_cached("INSERT INTO messages (body) VALUES (?1)")?
                    .execute(params![message])?;
                ("", Some(connection.last_insert_rowid()))
            } else {
                (message.as_str(), None)
            };
            for (agent, conversation_id) in receivers {
                let seq = match inbox_heads.get(&**agent) {
                    Some(head) => head + 1,
                    None => inbox_head(connection, agent)? + 1,
                };
                insert_entry.execute(params![
                    &**agent,
                    to_sql(seq),
                    &**conversation_id,
                    inline,
                    row
                ])?;
                inbox_heads.insert(agent.clone(), seq);
                recent.inbox += 1;
            }
        }
    }
    Ok(Ok(()))
}
