//! Tests of `sqlite`.

use super::schema::MIGRATIONS;
use super::writer::move_recent_inbox;
use super::*;
use colloquy_core::store::Delivery;
use colloquy_core::store::fixtures::{
    accepted, activation, activation_history, archived,
    assert_a_large_acknowledgement_leaves_the_rest, assert_a_message_to_several_reaches_each,
    assert_a_refusal_reads_back, assert_acknowledged_entries_go,
    assert_conversation_ids_page_in_order, assert_inbox_agents_are_listed,
    assert_refuses_stale_writes, assert_remote_tasks_are_kept_replaced_and_forgotten,
    assert_the_archive_is_as_left, assert_the_archive_keeps_revisions_modules_and_activations,
    assert_webhook_cursors_only_advance, commit, message, refused, remote_task, started,
};

fn temp_db(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "colloquy-sqlite-{}-{name}-{}",
        std::process::id(),
        uuid::Uuid::now_v7()
    ));
    dir.join("colloquy.db")
}

/// A message to several agents is one `messages` row that their inbox rows name, and
/// reads the same from each inbox, before and after the rows move to `inbox` and across
/// a reopen; a message to one agent stays in its row.
#[tokio::test]
async fn a_message_to_several_agents_is_stored_once() {
    let path = temp_db("shared");
    {
        let store = SqliteStore::open(&path).expect("open");
        assert_a_message_to_several_reaches_each(&store, "c1").await;
    }
    let connection = Connection::open(&path).expect("open the file");
    let count = |sql: &str| -> i64 {
        connection
            .query_row(sql, [], |row| row.get(0))
            .expect("count")
    };
    assert_eq!(count("SELECT count(*) FROM messages"), 1);
    assert_eq!(
        count("SELECT count(*) FROM inbox_recent WHERE message = '' AND message_row = 1"),
        3
    );
    assert_eq!(
        count("SELECT count(*) FROM inbox_recent WHERE message <> '' AND message_row IS NULL"),
        1
    );
    // Moved in bulk into `inbox` (as every RECENT_ROWS rows), still read through.
    move_recent_inbox(&connection).expect("settle");
    drop(connection);
    let store = SqliteStore::open(&path).expect("reopen");
    let carol = store.inbox("carol", 0, 10).await.expect("inbox");
    assert_eq!(carol.len(), 1);
    assert_eq!(&*carol[0].message.id, "to-all");
    assert_eq!(carol[0].message.receivers.len(), 3);
    let bob = store.inbox("bob", 1, 10).await.expect("inbox");
    assert_eq!(&*bob[0].message.id, "to-bob");
}

/// Acknowledged entries are deleted from both inbox tables, a shared message with the
/// last entry naming it, and an inbox emptied by acknowledgements goes on numbering
/// from its head after a reopen.
#[tokio::test]
async fn acknowledged_entries_and_unnamed_shared_messages_are_deleted() {
    let path = temp_db("ack");
    {
        let store = SqliteStore::open(&path).expect("open");
        assert_a_message_to_several_reaches_each(&store, "c1").await;
    }
    // The entries so far in `inbox` (moved as every RECENT_ROWS rows); later ones stay
    // in `inbox_recent`.
    let connection = Connection::open(&path).expect("open the file");
    move_recent_inbox(&connection).expect("settle");
    let messages = || -> i64 {
        connection
            .query_row("SELECT count(*) FROM messages", [], |row| row.get(0))
            .expect("count")
    };
    let store = SqliteStore::open(&path).expect("reopen");
    assert_acknowledged_entries_go(&store, "c1", |stored| {
        let rows = messages();
        async move { assert_eq!(rows, i64::from(stored), "shared message rows") }
    })
    .await;
    store.acknowledge("bob", 3).await.expect("ack");
    drop(store);
    let count = |sql: &str| -> i64 {
        connection
            .query_row(sql, [], |row| row.get(0))
            .expect("count")
    };
    assert_eq!(count("SELECT count(*) FROM inbox"), 0);
    assert_eq!(count("SELECT count(*) FROM inbox_recent"), 0);
    let store = SqliteStore::open(&path).expect("reopen");
    assert_eq!(store.inbox_head("bob").await.expect("head"), 3);
    store
        .commit(commit("c1", 4, vec![accepted(5, "after-reopen")], None))
        .await
        .expect("commit");
    let bob = store.inbox("bob", 0, 10).await.expect("inbox");
    assert_eq!(bob.iter().map(|entry| entry.seq).collect::<Vec<_>>(), [4]);
}

/// An acknowledgement of more entries than one job deletes takes several, and leaves the
/// rest.
#[tokio::test]
async fn a_large_acknowledgement_runs_in_batches() {
    let store = SqliteStore::open(temp_db("ack-batches")).expect("open");
    assert_a_large_acknowledgement_leaves_the_rest(&store, "c1", ACK_BATCH).await;
}

#[tokio::test]
async fn conversation_ids_page_in_order() {
    let store = SqliteStore::open(temp_db("ids")).expect("open");
    assert_conversation_ids_page_in_order(&store).await;
}

/// A restarted engine's webhook delivery goes on where the last one got.
#[tokio::test]
async fn webhook_cursors_only_advance_and_survive_a_reopen() {
    let path = temp_db("webhook-cursors");
    {
        let store = SqliteStore::open(&path).expect("open");
        assert_webhook_cursors_only_advance(&store).await;
    }
    let store = SqliteStore::open(&path).expect("reopen");
    assert_eq!(store.webhook_cursor("bob").await.expect("cursor"), 3);
}

#[tokio::test]
async fn agents_with_inbox_entries_are_listed_also_after_a_reopen() {
    let path = temp_db("inbox-agents");
    {
        let store = SqliteStore::open(&path).expect("open");
        assert_inbox_agents_are_listed(&store, "c1").await;
    }
    let store = SqliteStore::open(&path).expect("reopen");
    let mut listed = store.inbox_agents().await.expect("agents");
    listed.sort();
    assert_eq!(listed, ["bob", "dave"].map(AgentId::from));
}

#[tokio::test]
async fn push_configs_are_kept_replaced_forgotten_and_survive_a_reopen() {
    let path = temp_db("push-configs");
    {
        let store = SqliteStore::open(&path).expect("open");
        colloquy_core::store::fixtures::assert_push_configs_are_kept_replaced_and_forgotten(&store)
            .await;
    }
    let store = SqliteStore::open(&path).expect("reopen");
    let mut configs = store.push_configs().await.expect("configs");
    configs.sort_by(|a, b| a.conversation_id.cmp(&b.conversation_id));
    assert_eq!(
        configs,
        [
            colloquy_core::store::fixtures::push_config("c1", "p1", 3),
            colloquy_core::store::fixtures::push_config("c2", "p1", 0),
        ]
    );
}

#[tokio::test]
async fn agent_keys_are_kept_replaced_and_survive_a_reopen() {
    let path = temp_db("agent-keys");
    {
        let store = SqliteStore::open(&path).expect("open");
        colloquy_core::store::fixtures::assert_agent_keys_are_kept_and_replaced(&store).await;
    }
    let store = SqliteStore::open(&path).expect("reopen");
    assert_eq!(store.agent_keys("bob").await.expect("keys").len(), 2);
    assert_eq!(
        store.agent_keys("alice").await.expect("keys"),
        [colloquy_core::store::fixtures::agent_key("alice", "a1", 3)]
    );
}

/// The archive is in the file: a reopened store lists every revision, module and activation
/// as they were, still keeps the first of a revision archived again, and appends the next
/// activation after the old ones.
#[tokio::test]
async fn the_archive_keeps_revisions_modules_and_activations_and_survives_a_reopen() {
    let path = temp_db("archive");
    {
        let store = SqliteStore::open(&path).expect("open");
        assert_the_archive_keeps_revisions_modules_and_activations(&store).await;
    }
    let store = SqliteStore::open(&path).expect("reopen");
    assert_the_archive_is_as_left(&store).await;
    let again = ArchivedRevision {
        source: Arc::from("after the reopen"),
        ..archived("b", "r0", 1)
    };
    store.archive_revision(&again).await.expect("again");
    assert_eq!(
        store.archived_revision("b", "r0").await.expect("get"),
        Some(archived("b", "r0", 100))
    );
    let next = activation("b", "upload", Some("r2"), None, 10);
    store.record_activation(&next).await.expect("record");
    let mut history = activation_history();
    // b's newest before the reopen: its deletion.
    let deleted = history[4].clone();
    assert_eq!((&*deleted.template, &*deleted.kind), ("b", "delete"));
    history.push(next.clone());
    assert_eq!(
        store.activations(None, 100).await.expect("history"),
        history
    );
    assert_eq!(
        store.activations(Some("b"), 2).await.expect("b's newest"),
        [deleted, next]
    );
}

/// The read-only opener reads a store whose server predates the archive (schema version 8)
/// as well as a current one, and refuses a newer store and one from before the log's layout.
#[tokio::test]
async fn recorded_logs_read_older_schemas_since_the_log_layout_and_refuse_newer_ones() {
    let path = temp_db("recorded");
    {
        let store = SqliteStore::open(&path).expect("open");
        store
            .commit(commit(
                "c1",
                0,
                vec![started("c1"), accepted(2, "m1")],
                None,
            ))
            .await
            .expect("create");
    }
    let read = |path: &Path| -> Result<Vec<ConversationEvent>, StoreError> {
        let logs = recorded::RecordedLogs::open(path)?;
        assert_eq!(logs.conversation_ids()?, ["c1"]);
        logs.load("c1")
    };
    let expected = vec![started("c1"), accepted(2, "m1")];
    assert_eq!(read(&path).expect("the current schema"), expected);
    let connection = Connection::open(&path).expect("open the file");
    // As a server of schema version 8 left the file: no archive tables.
    connection
        .execute_batch("DROP TABLE revisions; DROP TABLE modules; DROP TABLE activations;")
        .expect("drop the archive");
    connection
        .pragma_update(None, "user_version", MIGRATIONS.len() - 1)
        .expect("version");
    assert_eq!(
        read(&path).expect("the schema before the archive"),
        expected
    );
    for (version, says) in [(MIGRATIONS.len() + 1, "newer"), (1, "migrate")] {
        connection
            .pragma_update(None, "user_version", version)
            .expect("version");
        let refused = recorded::RecordedLogs::open(&path).map(|_| ());
        assert!(
            matches!(&refused, Err(StoreError::Unavailable(reason)) if reason.contains(says)),
            "version {version}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn remote_tasks_are_kept_replaced_forgotten_and_survive_a_reopen() {
    let path = temp_db("remote-tasks");
    {
        let store = SqliteStore::open(&path).expect("open");
        assert_remote_tasks_are_kept_replaced_and_forgotten(&store).await;
    }
    let store = SqliteStore::open(&path).expect("reopen");
    let mut tasks = store.remote_tasks("bob").await.expect("tasks");
    tasks.sort_by(|a, b| a.task_id.cmp(&b.task_id));
    assert_eq!(
        tasks,
        vec![
            RemoteTask {
                cancel: Some(Arc::from("m9")),
                ..remote_task("c1", "m1", "t-2")
            },
            RemoteTask {
                awaits_input: true,
                ..remote_task("c2", "m1", "t-3")
            }
        ]
    );
}

#[tokio::test]
async fn commits_are_durable_across_reopen_and_versions_are_checked() {
    let path = temp_db("durable");
    {
        let store = SqliteStore::open(&path).expect("open");
        store
            .commit(commit("c1", 0, vec![started("c1")], Some(100)))
            .await
            .expect("create");
        store
            .commit(commit("c1", 1, vec![accepted(2, "m1")], Some(50)))
            .await
            .expect("append");
        assert_refuses_stale_writes(&store, "c1", 2).await;
    }
    let store = SqliteStore::open(&path).expect("reopen");
    let events = store.load("c1").await.expect("load").expect("exists");
    assert_eq!(events.len(), 2);
    assert_eq!(events[1], accepted(2, "m1"));
    assert_eq!(store.events_after("c1", 1).await.expect("after").len(), 1);
    assert!(store.load("nope").await.expect("load").is_none());
    let inbox = store.inbox("bob", 0, 10).await.expect("inbox");
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].seq, 1);
    assert_eq!(&*inbox[0].message.id, "m1");
    assert!(store.inbox("bob", 1, 10).await.expect("inbox").is_empty());
}

#[tokio::test]
async fn a_refusal_reads_back_also_after_a_reopen() {
    let path = temp_db("refusal");
    {
        let store = SqliteStore::open(&path).expect("open");
        assert_a_refusal_reads_back(&store, "c1").await;
    }
    let store = SqliteStore::open(&path).expect("reopen");
    let log = store.load("c1").await.expect("load").expect("exists");
    assert_eq!(log.last(), Some(&refused(3, "b1")));
}

#[tokio::test]
async fn due_wake_ups_are_claimed_once() {
    let store = SqliteStore::open(temp_db("claim")).expect("open");
    store
        .commit(commit("early", 0, vec![started("early")], Some(100)))
        .await
        .expect("c");
    store
        .commit(commit("late", 0, vec![started("late")], Some(500)))
        .await
        .expect("c");
    assert_eq!(
        store.claim_due(99, 10).await.expect("claim"),
        Vec::<Arc<str>>::new()
    );
    assert_eq!(
        store.claim_due(100, 10).await.expect("claim"),
        vec![Arc::from("early")]
    );
    assert!(
        store.claim_due(200, 10).await.expect("claim").is_empty(),
        "claimed once"
    );
    store.remove("late").await.expect("remove");
    // The claimer committed: its commit replaced the lease with the next wake-up.
    store
        .commit(commit("early", 1, Vec::new(), Some(2_000)))
        .await
        .expect("commit");
    assert!(store.claim_due(1_000, 10).await.expect("claim").is_empty());
    assert!(store.load("late").await.expect("load").is_none());
    assert_eq!(
        store.claim_due(2_000, 10).await.expect("claim"),
        vec![Arc::from("early")]
    );
}

#[tokio::test]
async fn a_claim_whose_claimer_died_is_handed_out_again_after_the_lease() {
    let store = SqliteStore::open(temp_db("lease")).expect("open");
    store
        .commit(commit("c", 0, vec![started("c")], Some(100)))
        .await
        .expect("c");
    assert_eq!(store.claim_due(100, 10).await.expect("claim").len(), 1);
    // No commit follows (the node died): the entry comes back after the lease only.
    let lease_end = 100 + CLAIM_LEASE_MS;
    assert!(
        store
            .claim_due(lease_end - 1, 10)
            .await
            .expect("claim")
            .is_empty()
    );
    assert_eq!(
        store.claim_due(lease_end, 10).await.expect("claim"),
        vec![Arc::from("c")]
    );
}

#[tokio::test]
async fn parties_are_indexed_for_commitment_lookups() {
    let store = SqliteStore::open(temp_db("parties")).expect("open");
    store
        .commit(commit("b-conv", 0, vec![started("b-conv")], None))
        .await
        .expect("c");
    store
        .commit(commit("a-conv", 0, vec![started("a-conv")], None))
        .await
        .expect("c");
    let ids = |list: Option<Vec<Arc<str>>>| list.expect("indexed");
    assert_eq!(
        ids(store.conversations_of("bob").await.expect("query")),
        vec![Arc::from("a-conv"), Arc::from("b-conv")]
    );
    assert_eq!(
        ids(store.conversations_of("alice").await.expect("query")).len(),
        2
    );
    assert!(ids(store.conversations_of("carol").await.expect("query")).is_empty());
    store.remove("a-conv").await.expect("remove");
    assert_eq!(
        ids(store.conversations_of("bob").await.expect("query")),
        vec![Arc::from("b-conv")]
    );
}

#[tokio::test]
async fn concurrent_commits_are_grouped_and_all_answered() {
    let store = Arc::new(SqliteStore::open(temp_db("group")).expect("open"));
    let mut tasks = Vec::new();
    for n in 0..64 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let id = format!("c{n}");
            store.commit(commit(&id, 0, vec![started(&id)], None)).await
        }));
    }
    for task in tasks {
        task.await.expect("task").expect("commit");
    }
    for n in 0..64 {
        assert!(store.load(&format!("c{n}")).await.expect("load").is_some());
    }
}

/// Stores `events` (and bob's inbox entries for the accepted messages) the way schema
/// version 1 did: one row per event, inbox heads in their own table.
fn write_version_1(path: &Path, id: &str, events: &[ConversationEvent]) {
    std::fs::create_dir_all(path.parent().expect("dir")).expect("dir");
    let connection = Connection::open(path).expect("open");
    connection.execute_batch(MIGRATIONS[0]).expect("schema 1");
    connection
        .pragma_update(None, "user_version", 1)
        .expect("version");
    connection
        .execute(
            "INSERT INTO conversations (id, version, wake_at) VALUES (?1, ?2, 100)",
            params![id, events.len() as i64],
        )
        .expect("conversation");
    let mut inbox = 0;
    for event in events {
        connection
            .execute(
                "INSERT INTO events (conversation_id, seq, body) VALUES (?1, ?2, ?3)",
                params![id, event.seq as i64, encode(event).expect("json")],
            )
            .expect("event");
        if let EventKind::MessageAccepted { message, .. } = &event.kind {
            inbox += 1;
            connection
                .execute(
                    "INSERT INTO inbox (agent, seq, conversation_id, message)
                     VALUES ('bob', ?1, ?2, ?3)",
                    params![inbox, id, encode(&**message).expect("json")],
                )
                .expect("inbox");
        }
    }
    connection
        .execute(
            "INSERT INTO inbox_heads (agent, last_seq) VALUES ('bob', ?1)",
            params![inbox],
        )
        .expect("head");
}

#[tokio::test]
async fn a_version_1_database_is_migrated_with_its_events_and_inbox_sequences() {
    let path = temp_db("migrate");
    let old = vec![started("c1"), accepted(2, "m1"), accepted(3, "m2")];
    write_version_1(&path, "c1", &old);
    let store = SqliteStore::open(&path).expect("open and migrate");
    assert_eq!(store.load("c1").await.expect("load"), Some(old.clone()));
    assert_eq!(
        store.events_after("c1", 2).await.expect("after"),
        old[2..].to_vec()
    );
    // The version, the wake-up and the inbox sequence carry over.
    let stale = store
        .commit(commit("c1", 2, vec![accepted(3, "x")], None))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { actual: 3, .. })),
        "{stale:?}"
    );
    assert_eq!(
        store.claim_due(100, 10).await.expect("claim"),
        vec![Arc::from("c1")]
    );
    store
        .commit(commit("c1", 3, vec![accepted(4, "m3")], None))
        .await
        .expect("append");
    let inbox = store.inbox("bob", 0, 10).await.expect("inbox");
    assert_eq!(
        inbox.iter().map(|entry| entry.seq).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(&*inbox[2].message.id, "m3");
    let version: usize = store
        .reader
        .lock()
        .expect("reader")
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .expect("user_version");
    assert_eq!(version, MIGRATIONS.len());
}

#[tokio::test]
async fn versions_and_inbox_sequences_are_checked_and_continued_after_a_restart() {
    let path = temp_db("restart");
    {
        let store = SqliteStore::open(&path).expect("open");
        store
            .commit(commit(
                "c1",
                0,
                vec![started("c1"), accepted(2, "m1")],
                None,
            ))
            .await
            .expect("create");
        store
            .commit(commit("c1", 2, vec![accepted(3, "m2")], None))
            .await
            .expect("append");
    }
    let store = SqliteStore::open(&path).expect("reopen");
    assert_refuses_stale_writes(&store, "c1", 3).await;
    // Refused commits left nothing behind; the next one continues the inbox.
    store
        .commit(commit("c1", 3, vec![accepted(4, "m4")], None))
        .await
        .expect("append after restart");
    let inbox = store.inbox("bob", 0, 10).await.expect("inbox");
    assert_eq!(
        inbox
            .iter()
            .map(|entry| (entry.seq, entry.message.id.to_string()))
            .collect::<Vec<_>>(),
        vec![
            (1, "m1".to_owned()),
            (2, "m2".to_owned()),
            (3, "m4".to_owned())
        ]
    );
    assert_eq!(store.inbox_head("bob").await.expect("head"), 3);
    assert_eq!(store.inbox_head("nobody").await.expect("head"), 0);
    assert_eq!(
        store.load("c1").await.expect("load").expect("exists").len(),
        4
    );
    assert_eq!(
        store
            .events_after("c1", 1)
            .await
            .expect("after")
            .iter()
            .map(|event| event.seq)
            .collect::<Vec<_>>(),
        vec![2, 3, 4]
    );
}

#[tokio::test]
async fn recent_inbox_entries_and_parties_are_moved_in_bulk_and_read_throughout() {
    let path = temp_db("recent");
    let conversations = RECENT_ROWS / 2 + 10;
    {
        let store = Arc::new(SqliteStore::open(&path).expect("open"));
        let tasks: Vec<_> = (0..conversations)
            .map(|n| {
                let store = store.clone();
                tokio::spawn(async move {
                    let id = format!("c{n:05}");
                    store
                        .commit(commit(&id, 0, vec![started(&id), accepted(2, &id)], None))
                        .await
                })
            })
            .collect();
        for task in tasks {
            task.await.expect("task").expect("commit");
        }
        // Past the threshold: the parties (alice, bob per conversation) moved at least once.
        let moved: i64 = store
            .reader
            .lock()
            .expect("reader")
            .query_row("SELECT count(*) FROM parties", [], |row| row.get(0))
            .expect("count");
        assert!(moved >= RECENT_ROWS as i64, "{moved}");
        // One large commit fills bob's inbox past the threshold too.
        let deliveries = (0..RECENT_ROWS)
            .map(|n| Delivery {
                agent: Arc::from("bob"),
                conversation_id: Arc::from("c00000"),
                message: message(&format!("bulk{n}")),
            })
            .collect();
        store
            .commit(Commit {
                conversation_id: Arc::from("c00000"),
                template: Arc::from("fixture"),
                expected_version: 2,
                events: Vec::new(),
                deliveries,
                wake_at: None,
                fence: None,
            })
            .await
            .expect("bulk deliveries");
    }
    let store = SqliteStore::open(&path).expect("reopen");
    store
        .commit(commit("c00001", 2, vec![accepted(3, "last")], None))
        .await
        .expect("append");
    let total = conversations + RECENT_ROWS + 1;
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let page = store.inbox("bob", after, 500).await.expect("inbox");
        let Some(last) = page.last() else { break };
        after = last.seq;
        seen.extend(page.into_iter().map(|entry| entry.seq));
    }
    assert_eq!(seen, (1..=total as u64).collect::<Vec<_>>());
    let last = store
        .inbox("bob", total as u64 - 1, 10)
        .await
        .expect("inbox");
    assert_eq!(&*last[0].message.id, "last");
    let listed = store
        .conversations_of("alice")
        .await
        .expect("query")
        .expect("indexed");
    assert_eq!(listed.len(), conversations);
    assert!(
        listed.windows(2).all(|pair| pair[0] < pair[1]),
        "in id order"
    );
    store.remove("c00000").await.expect("remove");
    store
        .remove(&listed[conversations - 1])
        .await
        .expect("remove");
    let listed = store
        .conversations_of("bob")
        .await
        .expect("query")
        .expect("indexed");
    assert_eq!(listed.len(), conversations - 2);
    assert_eq!(&*listed[0], "c00001");
}

/// Under steady commits the WAL is checkpointed and starts again from its beginning, so
/// it stays within the force size however much is written, even while a slow disk holds
/// up the background passes (each commit here is a transaction
/// of a few pages: without checkpoints the WAL would hold thousands of frames), and
/// everything written is in the database after a reopen.
#[tokio::test]
async fn the_wal_is_checkpointed_and_restarted_under_steady_writes() {
    let path = temp_db("checkpoint");
    let limits = checkpoint::Limits {
        background: 64,
        finish: 16,
        passes: 3,
        force: 512,
    };
    let conversations = 2_000;
    {
        let store =
            SqliteStore::open_with_limits(&path, Synchronous::Normal, limits).expect("open");
        for n in 0..conversations {
            let id = format!("c{n}");
            store
                .commit(commit(&id, 0, vec![started(&id)], None))
                .await
                .expect("commit");
        }
        let mut wal = path.clone().into_os_string();
        wal.push("-wal");
        // The WAL file keeps its largest size when it starts again: its high-water mark.
        let bytes = std::fs::metadata(&wal).expect("the WAL").len();
        let frames = bytes.saturating_sub(32) / (4096 + 24);
        // Past the force size the writer checkpoints (waiting for a background pass under
        // way), so the WAL ends at most one commit's few pages past it.
        assert!(
            frames <= limits.force + 64,
            "the WAL grew to {frames} frames for {conversations} commits"
        );
    }
    let store = SqliteStore::open(&path).expect("reopen");
    let ids = store
        .conversation_ids(None, 2 * conversations)
        .await
        .expect("ids")
        .expect("listed");
    assert_eq!(ids.len(), conversations);
    let last = format!("c{}", conversations - 1);
    assert_eq!(
        store.load(&last).await.expect("load").expect("stored"),
        vec![started(&last)]
    );
}

#[tokio::test]
async fn a_removed_conversation_can_be_created_again() {
    let store = SqliteStore::open(temp_db("recreate")).expect("open");
    store
        .commit(commit("c", 0, vec![started("c")], None))
        .await
        .expect("create");
    store.remove("c").await.expect("remove");
    let stale = store
        .commit(commit("c", 1, vec![accepted(2, "m")], None))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { actual: 0, .. })),
        "{stale:?}"
    );
    store
        .commit(commit("c", 0, vec![started("c")], None))
        .await
        .expect("create again");
    assert_eq!(
        store.load("c").await.expect("load").expect("exists").len(),
        1
    );
}

#[tokio::test]
async fn a_second_store_on_the_same_file_is_refused_until_the_first_is_dropped() {
    let path = temp_db("lock");
    let first = SqliteStore::open(&path).expect("open");
    let refused = lock(&path, Duration::ZERO);
    assert!(
        matches!(&refused, Err(StoreError::Unavailable(reason)) if reason.contains("in use")),
        "{refused:?}"
    );
    drop(first);
    let second = SqliteStore::open(&path).expect("reopen after drop");
    assert!(second.load("c").await.expect("load").is_none());
}
