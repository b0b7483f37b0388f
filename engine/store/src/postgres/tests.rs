//! Tests of `postgres`: every shared store fixture, and what only Postgres does (group
//! commit, migrations, several nodes on one database).

use std::collections::BTreeSet;

use super::*;
use colloquy_core::store::fixtures::{
    accepted, assert_a_large_acknowledgement_leaves_the_rest,
    assert_a_message_to_several_reaches_each, assert_a_refusal_reads_back,
    assert_acknowledged_entries_go, assert_conversation_ids_page_in_order,
    assert_inbox_agents_are_listed, assert_push_configs_are_kept_replaced_and_forgotten,
    assert_refuses_stale_writes, assert_remote_tasks_are_kept_replaced_and_forgotten,
    assert_the_archive_is_as_left, assert_the_archive_keeps_revisions_modules_and_activations,
    assert_webhook_cursors_only_advance, commit, started,
};
use futures_util::future::join_all;

/// The Postgres the tests use, from `COLLOQUY_TEST_POSTGRES` (a `postgres://` URL of a
/// database the tests may create databases from; `.ci/run` starts a cluster). Under CI
/// (`CI=true`) its absence fails the test; elsewhere the test says it was skipped.
fn test_postgres(test: &str) -> Option<String> {
    match std::env::var("COLLOQUY_TEST_POSTGRES") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("{test}: CI=true but COLLOQUY_TEST_POSTGRES is not set; .ci/run starts Postgres")
        }
        _ => {
            eprintln!(
                "SKIPPED {test}: set COLLOQUY_TEST_POSTGRES=postgres://USER@127.0.0.1:PORT/DB to run it"
            );
            None
        }
    }
}

/// A fresh, empty database of the test's own on the test server, as a URL: tests run in
/// parallel and never meet.
async fn fresh_database(test: &str) -> Option<String> {
    let base = test_postgres(test)?;
    Some(
        create_test_database(&base)
            .await
            .expect("create a database on the test Postgres"),
    )
}

async fn open_store(url: &str) -> PostgresStore {
    PostgresStore::connect(url)
        .await
        .expect("connect to the test database")
}

/// A plain connection to `url`'s database, for looking at the tables.
async fn raw(url: &str) -> tokio_postgres::Client {
    let locator = Locator::parse(url).expect("parse");
    let (client, connection) = locator.config.connect(NoTls).await.expect("connect");
    tokio::spawn(connection);
    client
}

async fn count(client: &tokio_postgres::Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).await.expect(sql).get(0)
}

#[tokio::test]
async fn a_refusal_reads_back() {
    let Some(url) = fresh_database("a_refusal_reads_back").await else {
        return;
    };
    assert_a_refusal_reads_back(&open_store(&url).await, "c1").await;
}

#[tokio::test]
async fn conversation_ids_page_in_order() {
    let Some(url) = fresh_database("conversation_ids_page_in_order").await else {
        return;
    };
    assert_conversation_ids_page_in_order(&open_store(&url).await).await;
}

#[tokio::test]
async fn commits_check_versions_and_fill_logs_and_inboxes() {
    let Some(url) = fresh_database("commits_check_versions_and_fill_logs_and_inboxes").await else {
        return;
    };
    let store = open_store(&url).await;
    store
        .commit(commit("c1", 0, vec![started("c1")], Some(100)))
        .await
        .expect("create");
    store
        .commit(commit("c1", 1, vec![accepted(2, "m1")], None))
        .await
        .expect("append");
    assert_refuses_stale_writes(&store, "c1", 2).await;

    // A second node sees the same data.
    let other = open_store(&url).await;
    let events = other.load("c1").await.expect("load").expect("exists");
    assert_eq!(events, vec![started("c1"), accepted(2, "m1")]);
    assert_eq!(
        other.events_after("c1", 1).await.expect("after"),
        vec![accepted(2, "m1")]
    );
    assert!(other.load("nope").await.expect("load").is_none());
    let batch = vec![accepted(3, "m3"), accepted(4, "m4"), accepted(5, "m5")];
    store
        .commit(commit("c1", 2, batch.clone(), None))
        .await
        .expect("append");
    // Reading from inside a commit's row skips the events before.
    assert_eq!(
        other.events_after("c1", 3).await.expect("after"),
        batch[1..].to_vec()
    );
    let inbox = other.inbox("bob", 0, 10).await.expect("inbox");
    assert_eq!(
        inbox.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    assert_eq!(&*inbox[1].message.id, "m3");
    assert_eq!(&*inbox[1].conversation_id, "c1");
    assert_eq!(other.inbox("bob", 1, 10).await.expect("inbox").len(), 3);
    assert_eq!(other.inbox("bob", 0, 1).await.expect("inbox").len(), 1);
    assert_eq!(other.inbox_head("bob").await.expect("head"), 4);
    assert_eq!(other.inbox_head("nobody").await.expect("head"), 0);
    assert_eq!(
        other.conversations_of("bob").await.expect("parties"),
        Some(vec![Arc::from("c1")])
    );
    other.remove("c1").await.expect("remove");
    assert!(store.load("c1").await.expect("load").is_none());
    assert_eq!(
        store.conversations_of("bob").await.expect("parties"),
        Some(Vec::new())
    );
    assert!(
        store
            .claim_due(u64::MAX / 2, 10)
            .await
            .expect("claim")
            .is_empty()
    );
}

/// A message to several agents is one `messages` row that their inbox rows name; a
/// message to one agent is in its row.
#[tokio::test]
async fn a_message_to_several_agents_is_stored_once() {
    let Some(url) = fresh_database("a_message_to_several_agents_is_stored_once").await else {
        return;
    };
    let store = open_store(&url).await;
    assert_a_message_to_several_reaches_each(&store, "c1").await;
    let client = raw(&url).await;
    assert_eq!(count(&client, "SELECT count(*) FROM messages").await, 1);
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM inbox WHERE message IS NULL AND shared_id = 'to-all'"
        )
        .await,
        3
    );
    assert_eq!(
        count(
            &client,
            "SELECT count(*) FROM inbox WHERE message IS NOT NULL AND shared_id IS NULL"
        )
        .await,
        1
    );
}

/// Acknowledged entries are deleted, a shared message with the last entry naming it, and
/// the sequence goes on from the head.
#[tokio::test]
async fn acknowledged_entries_and_unnamed_shared_messages_are_deleted() {
    let Some(url) =
        fresh_database("acknowledged_entries_and_unnamed_shared_messages_are_deleted").await
    else {
        return;
    };
    let store = open_store(&url).await;
    assert_a_message_to_several_reaches_each(&store, "c1").await;
    let client = Arc::new(raw(&url).await);
    assert_acknowledged_entries_go(&store, "c1", |stored| {
        let client = client.clone();
        async move {
            let rows = count(&client, "SELECT count(*) FROM messages").await;
            assert_eq!(rows, i64::from(stored), "shared message rows");
        }
    })
    .await;
    assert_eq!(
        count(&client, "SELECT count(*) FROM inbox WHERE agent <> 'bob'").await,
        0
    );
}

/// An acknowledgement of more entries than one transaction deletes takes several.
#[tokio::test]
async fn a_large_acknowledgement_runs_in_batches() {
    let Some(url) = fresh_database("a_large_acknowledgement_runs_in_batches").await else {
        return;
    };
    let store = open_store(&url).await;
    assert_a_large_acknowledgement_leaves_the_rest(&store, "c1", ACK_BATCH as u64).await;
}

/// Every node lists the agents with inbox entries.
#[tokio::test]
async fn agents_with_inbox_entries_are_listed_by_every_node() {
    let Some(url) = fresh_database("agents_with_inbox_entries_are_listed_by_every_node").await
    else {
        return;
    };
    assert_inbox_agents_are_listed(&open_store(&url).await, "c1").await;
    let listed = open_store(&url).await.inbox_agents().await.expect("agents");
    for agent in ["bob", "dave"] {
        assert!(listed.iter().any(|listed| &**listed == agent), "{listed:?}");
    }
}

/// Webhook cursors only advance and are shared: a second node reads where the first got.
#[tokio::test]
async fn webhook_cursors_only_advance_and_are_shared_by_nodes() {
    let Some(url) = fresh_database("webhook_cursors_only_advance_and_are_shared_by_nodes").await
    else {
        return;
    };
    assert_webhook_cursors_only_advance(&open_store(&url).await).await;
    let other_node = open_store(&url).await;
    assert_eq!(other_node.webhook_cursor("bob").await.expect("cursor"), 3);
}

#[tokio::test]
async fn remote_tasks_are_kept_replaced_forgotten_and_shared_by_nodes() {
    let Some(url) =
        fresh_database("remote_tasks_are_kept_replaced_forgotten_and_shared_by_nodes").await
    else {
        return;
    };
    assert_remote_tasks_are_kept_replaced_and_forgotten(&open_store(&url).await).await;
    let other_node = open_store(&url).await;
    assert_eq!(
        other_node.remote_tasks("bob").await.expect("tasks").len(),
        2
    );
}

#[tokio::test]
async fn push_configs_are_kept_replaced_forgotten_and_shared_by_nodes() {
    let Some(url) =
        fresh_database("push_configs_are_kept_replaced_forgotten_and_shared_by_nodes").await
    else {
        return;
    };
    assert_push_configs_are_kept_replaced_and_forgotten(&open_store(&url).await).await;
    let other_node = open_store(&url).await;
    assert_eq!(other_node.push_configs().await.expect("configs").len(), 2);
}

#[tokio::test]
async fn agent_keys_are_kept_replaced_and_shared_by_nodes() {
    let Some(url) = fresh_database("agent_keys_are_kept_replaced_and_shared_by_nodes").await else {
        return;
    };
    colloquy_core::store::fixtures::assert_agent_keys_are_kept_and_replaced(
        &open_store(&url).await,
    )
    .await;
    let other_node = open_store(&url).await;
    assert_eq!(other_node.agent_keys("bob").await.expect("keys").len(), 2);
}

/// The archive is in the database: a new connection reads every revision, module and
/// activation as they were.
#[tokio::test]
async fn the_archive_keeps_revisions_modules_and_activations_for_a_new_connection() {
    let Some(url) =
        fresh_database("the_archive_keeps_revisions_modules_and_activations_for_a_new_connection")
            .await
    else {
        return;
    };
    {
        let store = open_store(&url).await;
        assert_the_archive_keeps_revisions_modules_and_activations(&store).await;
    }
    assert_the_archive_is_as_left(&open_store(&url).await).await;
}

/// Commits of several conversations that wait together go into one transaction: their
/// rows carry the same `xmin` (the id of the transaction that wrote them).
#[tokio::test]
async fn commits_of_several_conversations_share_a_transaction() {
    let Some(url) = fresh_database("commits_of_several_conversations_share_a_transaction").await
    else {
        return;
    };
    let store = open_store(&url).await;
    let ids: Vec<String> = (0..20).map(|n| format!("c{n}")).collect();
    let results = join_all(
        ids.iter()
            .map(|id| store.commit(commit(id, 0, vec![started(id)], None))),
    )
    .await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let client = raw(&url).await;
    let transactions = count(
        &client,
        "SELECT count(DISTINCT xmin::text) FROM conversations",
    )
    .await;
    assert!(
        transactions < 20,
        "20 commits queued together took {transactions} transactions"
    );
    assert_eq!(count(&client, "SELECT count(*) FROM events").await, 20);
}

/// A stale commit in a batch is refused alone: the commits beside it (also a later one of
/// the same conversation, which reads the version the batch left) are applied.
#[tokio::test]
async fn a_conflict_in_a_batch_fails_only_itself() {
    let Some(url) = fresh_database("a_conflict_in_a_batch_fails_only_itself").await else {
        return;
    };
    let store = open_store(&url).await;
    for id in ["c1", "c2", "c3"] {
        store
            .commit(commit(id, 0, vec![started(id)], None))
            .await
            .expect("create");
    }
    let results = join_all([
        store.commit(commit("c1", 1, vec![accepted(2, "m2")], None)),
        store.commit(commit("c2", 5, vec![accepted(6, "stale")], None)),
        store.commit(commit("c3", 0, vec![started("c3")], None)),
        store.commit(commit("c4", 0, vec![started("c4")], None)),
        store.commit(commit("c1", 2, vec![accepted(3, "m3")], None)),
        store.commit(commit("c4", 0, vec![started("c4")], None)),
    ])
    .await;
    assert!(results[0].is_ok(), "{:?}", results[0]);
    assert!(
        matches!(
            results[1],
            Err(StoreError::Conflict {
                expected: 5,
                actual: 1,
                ..
            })
        ),
        "{:?}",
        results[1]
    );
    assert!(
        matches!(results[2], Err(StoreError::Duplicate(_))),
        "{:?}",
        results[2]
    );
    assert!(results[3].is_ok(), "{:?}", results[3]);
    assert!(results[4].is_ok(), "{:?}", results[4]);
    assert!(
        matches!(results[5], Err(StoreError::Duplicate(_))),
        "{:?}",
        results[5]
    );
    assert_eq!(store.load("c1").await.expect("load").expect("c1").len(), 3);
    assert_eq!(store.load("c2").await.expect("load").expect("c2").len(), 1);
    assert_eq!(store.load("c4").await.expect("load").expect("c4").len(), 1);
    let bob: Vec<String> = store
        .inbox("bob", 0, 10)
        .await
        .expect("inbox")
        .iter()
        .map(|entry| entry.message.id.to_string())
        .collect();
    assert_eq!(bob, ["m2", "m3"], "the stale commit delivered nothing");
}

/// Nodes starting at once on an empty database migrate it once; opening it again changes
/// nothing; the partition count is recorded; a database from a newer engine is refused.
#[tokio::test]
async fn migrations_run_once_under_concurrent_starts_and_are_idempotent() {
    let Some(url) =
        fresh_database("migrations_run_once_under_concurrent_starts_and_are_idempotent").await
    else {
        return;
    };
    let stores = join_all((0..4).map(|_| PostgresStore::connect(&url))).await;
    for store in &stores {
        assert!(store.is_ok(), "{:?}", store.as_ref().err());
    }
    let store = open_store(&url).await;
    assert_eq!(
        store.schema_version().await.expect("version"),
        schema::MIGRATIONS.len()
    );
    assert_eq!(store.partitions().await.expect("partitions"), PARTITIONS);
    let client = raw(&url).await;
    assert_eq!(
        count(&client, "SELECT count(*) FROM schema_version").await,
        schema::MIGRATIONS.len() as i64
    );
    client
        .batch_execute("INSERT INTO schema_version (version) VALUES (1000)")
        .await
        .expect("pretend a newer engine migrated");
    let refused = PostgresStore::connect(&url)
        .await
        .expect_err("a newer schema is refused")
        .to_string();
    assert!(refused.contains("newer than this engine"), "{refused}");
}

#[tokio::test]
async fn each_due_wake_up_goes_to_one_node_and_returns_after_the_lease() {
    let Some(url) =
        fresh_database("each_due_wake_up_goes_to_one_node_and_returns_after_the_lease").await
    else {
        return;
    };
    let a = Arc::new(open_store(&url).await);
    let b = Arc::new(open_store(&url).await);
    for n in 0..50 {
        let id = format!("c{n}");
        a.commit(commit(&id, 0, vec![started(&id)], Some(100 + n)))
            .await
            .expect("create");
    }
    let claims = [a.clone(), b.clone(), a.clone(), b.clone()].map(|store| {
        tokio::spawn(async move {
            let mut got = Vec::new();
            loop {
                let batch = store.claim_due(1_000, 3).await.expect("claim");
                if batch.is_empty() {
                    return got;
                }
                got.extend(batch);
            }
        })
    });
    let mut all = Vec::new();
    for claim in claims {
        all.extend(claim.await.expect("task"));
    }
    all.sort_unstable();
    let mut unique = all.clone();
    unique.dedup();
    assert_eq!(all.len(), 50, "every wake-up handed out");
    assert_eq!(unique.len(), 50, "none handed out twice");
    // Nobody committed: after the lease the wake-ups are handed out again.
    assert!(
        a.claim_due(100 + CLAIM_LEASE_MS - 1, 100)
            .await
            .expect("claim")
            .is_empty()
    );
    assert_eq!(
        b.claim_due(1_000 + CLAIM_LEASE_MS, 100)
            .await
            .expect("claim")
            .len(),
        50
    );
}

/// Two nodes delivering to one agent at once: its inbox is numbered 1..=n without gaps.
#[tokio::test]
async fn inbox_sequences_have_no_gaps_across_nodes() {
    let Some(url) = fresh_database("inbox_sequences_have_no_gaps_across_nodes").await else {
        return;
    };
    let (a, b) = (open_store(&url).await, open_store(&url).await);
    let commits = (0..40).map(|n| {
        let id = format!("c{n}");
        let store = if n % 2 == 0 { &a } else { &b };
        async move {
            store
                .commit(commit(&id, 0, vec![started(&id)], None))
                .await?;
            store
                .commit(commit(&id, 1, vec![accepted(2, &format!("m{n}"))], None))
                .await
        }
    });
    for result in join_all(commits).await {
        result.expect("commit");
    }
    let seqs: Vec<u64> = a
        .inbox("bob", 0, 100)
        .await
        .expect("inbox")
        .iter()
        .map(|entry| entry.seq)
        .collect();
    assert_eq!(seqs, (1..=40).collect::<Vec<u64>>());
    assert_eq!(b.inbox_head("bob").await.expect("head"), 40);
}

/// One node leads a role at a time; the lead passes on when its lease runs out.
#[tokio::test]
async fn one_node_leads_a_role_until_its_lease_runs_out() {
    let Some(url) = fresh_database("one_node_leads_a_role_until_its_lease_runs_out").await else {
        return;
    };
    let (a, b) = (open_store(&url).await, open_store(&url).await);
    assert!(a.lead("webhooks", 60_000).await.expect("lead"));
    assert!(!b.lead("webhooks", 60_000).await.expect("lead"));
    assert!(a.lead("webhooks", 60_000).await.expect("renew"));
    assert!(b.lead("other-role", 60_000).await.expect("another role"));
    // a stops renewing: its lease (shortened here) runs out and b takes over.
    assert!(a.lead("webhooks", 1).await.expect("renew briefly"));
    let mut waited = 0;
    while !b.lead("webhooks", 60_000).await.expect("lead") {
        waited += 1;
        assert!(waited < 500, "the lease never ran out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(!a.lead("webhooks", 60_000).await.expect("lead"));
}

/// A node hears of the commits other nodes make, each once, and not of its own.
#[tokio::test]
async fn other_nodes_hear_of_commits() {
    let Some(url) = fresh_database("other_nodes_hear_of_commits").await else {
        return;
    };
    let a = open_store(&url).await;
    let b = open_store(&url).await;
    let mut heard_by_a = a.remote_changes().expect("postgres follows changes");
    let mut heard_by_b = b.remote_changes().expect("postgres follows changes");
    a.commit(commit("c", 0, vec![started("c")], None))
        .await
        .expect("commit");
    a.commit(commit("c", 1, vec![accepted(2, "m2")], None))
        .await
        .expect("commit");
    let mut versions = Vec::new();
    while versions.len() < 2 {
        let change = tokio::time::timeout(Duration::from_secs(10), heard_by_b.recv())
            .await
            .expect("node B hears node A")
            .expect("channel open");
        assert_eq!(&*change.conversation_id, "c");
        versions.push(change.version);
    }
    assert_eq!(versions, [1, 2]);
    b.commit(commit("c", 2, vec![accepted(3, "from-b")], None))
        .await
        .expect("commit through b");
    let first = tokio::time::timeout(Duration::from_secs(10), heard_by_a.recv())
        .await
        .expect("node A hears node B")
        .expect("channel open");
    assert_eq!(first.version, 3, "A heard its own commit back: {first:?}");
    assert_eq!(first.agents, vec![Arc::from("bob")]);
    // B does not hear its own commit.
    assert!(
        tokio::time::timeout(POLL_WAIT, heard_by_b.recv())
            .await
            .is_err(),
        "B heard its own commit"
    );
}

/// A node that narrows its notices (a partition owner) hears of other nodes' commits to the
/// inboxes it wants at that moment only: none of the others, none at all while it wants
/// none, and the new ones as soon as it wants them.
#[tokio::test]
async fn a_narrowed_follower_hears_of_the_inboxes_it_wants_only() {
    let Some(url) = fresh_database("a_narrowed_follower_hears_of_the_inboxes_it_wants_only").await
    else {
        return;
    };
    let a = open_store(&url).await;
    let b = open_store(&url).await;
    let wanted: Arc<std::sync::Mutex<Vec<Arc<str>>>> =
        Arc::new(std::sync::Mutex::new(vec![Arc::from("carol")]));
    let asked = wanted.clone();
    b.narrow_remote_changes(Arc::new(move || asked.lock().expect("wanted").clone()));
    let mut heard_by_b = b.remote_changes().expect("postgres follows changes");
    let to = |agent: &str, mut commit: Commit| {
        for delivery in &mut commit.deliveries {
            delivery.agent = Arc::from(agent);
        }
        commit
    };

    // To bob, then to carol: B hears of carol's only.
    a.commit(to(
        "bob",
        commit("c1", 0, vec![started("c1"), accepted(2, "m1")], None),
    ))
    .await
    .expect("commit");
    a.commit(to(
        "carol",
        commit("c2", 0, vec![started("c2"), accepted(2, "m2")], None),
    ))
    .await
    .expect("commit");
    let heard = next(&mut heard_by_b)
        .await
        .expect("B hears of carol's inbox");
    assert_eq!(
        (&*heard.conversation_id, &heard.agents[..]),
        ("c2", &[Arc::from("carol")][..])
    );
    assert!(next(&mut heard_by_b).await.is_none(), "nothing of bob's");

    // Wanting nobody: nothing at all.
    wanted.lock().expect("wanted").clear();
    a.commit(to(
        "carol",
        commit("c3", 0, vec![started("c3"), accepted(2, "m3")], None),
    ))
    .await
    .expect("commit");
    assert!(next(&mut heard_by_b).await.is_none(), "B wants nobody now");

    // Wanting bob from now on: his next entry is heard.
    *wanted.lock().expect("wanted") = vec![Arc::from("bob")];
    a.commit(to(
        "bob",
        commit("c4", 0, vec![started("c4"), accepted(2, "m4")], None),
    ))
    .await
    .expect("commit");
    let heard = next(&mut heard_by_b).await.expect("B hears of bob's inbox");
    assert_eq!(&*heard.conversation_id, "c4");
}

/// The next notice within [`POLL_WAIT`], if any.
async fn next(receiver: &mut broadcast::Receiver<RemoteChange>) -> Option<RemoteChange> {
    let received = tokio::time::timeout(POLL_WAIT, receiver.recv()).await;
    received.ok().map(|change| change.expect("channel open"))
}

/// The CA that signed the test Postgres's certificate, from `COLLOQUY_TEST_POSTGRES_TLS_ROOT`
/// (`.ci/run` makes one and serves TLS with `ssl=on`, beside plain connections). Under CI its
/// absence fails the test; elsewhere the test says it was skipped.
fn test_tls_root(test: &str) -> Option<String> {
    match std::env::var("COLLOQUY_TEST_POSTGRES_TLS_ROOT") {
        Ok(path) if !path.is_empty() => Some(path),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("{test}: CI=true but COLLOQUY_TEST_POSTGRES_TLS_ROOT is not set")
        }
        _ => {
            eprintln!("SKIPPED {test}: set COLLOQUY_TEST_POSTGRES_TLS_ROOT=CA.pem to run it");
            None
        }
    }
}

/// Whether the store's connections are encrypted, as Postgres sees one of them.
async fn encrypted(store: &PostgresStore) -> bool {
    let rows = store
        .query(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .expect("query");
    rows[0].get(0)
}

/// Every `sslmode` does what libpq's does against a server with TLS: `disable` talks plain
/// text, `prefer` and `require` encrypt, `verify-full` encrypts once the server's certificate
/// chains to `sslrootcert` and names the host (`127.0.0.1` and `localhost` are in it; with
/// the public roots instead the store does not open, saying why), and so does `verify-ca`.
/// The whole store runs over it: a commit, and another node hearing of it.
#[tokio::test]
async fn tls_is_used_and_checked_as_sslmode_says() {
    let test = "tls_is_used_and_checked_as_sslmode_says";
    let (Some(url), Some(root)) = (fresh_database(test).await, test_tls_root(test)) else {
        return;
    };
    let with = |query: &str| format!("{}{query}", url.split('?').next().unwrap_or(&url));
    let plain = PostgresStore::connect(&with("?sslmode=disable"))
        .await
        .expect("plain");
    assert!(!encrypted(&plain).await);
    for mode in ["?sslmode=prefer", "?sslmode=require"] {
        let store = PostgresStore::connect(&with(mode)).await.expect(mode);
        assert!(encrypted(&store).await, "{mode}");
    }
    let verified = with(&format!("?sslmode=verify-full&sslrootcert={root}"));
    let a = PostgresStore::connect(&verified)
        .await
        .expect("verify-full");
    assert!(encrypted(&a).await);
    let by_name = verified.replacen("127.0.0.1", "localhost", 1);
    let b = PostgresStore::connect(&by_name)
        .await
        .expect("verify-full by name");
    let mut heard_by_b = b.remote_changes().expect("postgres follows changes");
    a.commit(commit(
        "tls",
        0,
        vec![started("tls"), accepted(2, "m")],
        None,
    ))
    .await
    .expect("commit over TLS");
    let heard = tokio::time::timeout(Duration::from_secs(10), heard_by_b.recv())
        .await
        .expect("b hears over TLS")
        .expect("channel open");
    assert_eq!(&*heard.conversation_id, "tls");

    let public_roots = PostgresStore::connect(&with("?sslmode=verify-full"))
        .await
        .expect_err("a private CA is not in the public roots");
    assert!(
        public_roots.to_string().contains("certificate"),
        "{public_roots}"
    );
    let any_name = verified.replace("verify-full", "verify-ca");
    let c = PostgresStore::connect(&any_name).await.expect("verify-ca");
    assert!(encrypted(&c).await);
}

/// A relay listening on 127.0.0.2 (loopback too, on Linux, but a name the test server's
/// certificate does not hold) that carries each connection to `upstream`. Returns its
/// address; it relays until the test's runtime ends.
async fn relay_on_an_unnamed_address(upstream: std::net::SocketAddr) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut server) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    address
}

/// `verify-full` refuses a server whose certificate does not name the host the URL gives,
/// though it chains to `sslrootcert`; `verify-ca` accepts it (the chain is all it checks).
/// The host here is 127.0.0.2, a relay to the test server, whose certificate names
/// `127.0.0.1` and `localhost` only.
#[tokio::test]
async fn verify_full_refuses_a_certificate_for_another_host_and_verify_ca_does_not() {
    let test = "verify_full_refuses_a_certificate_for_another_host_and_verify_ca_does_not";
    let (Some(url), Some(root)) = (fresh_database(test).await, test_tls_root(test)) else {
        return;
    };
    let (scheme_user, rest) = url.split_once('@').expect("user@host in the URL");
    let (authority, database) = rest.split_once('/').expect("a database in the URL");
    let upstream = tokio::net::lookup_host(authority)
        .await
        .expect("resolve the test server")
        .next()
        .expect("an address");
    let relay = relay_on_an_unnamed_address(upstream).await;
    let database = database.split('?').next().unwrap_or(database);
    let through_relay =
        |mode: &str| format!("{scheme_user}@{relay}/{database}?sslmode={mode}&sslrootcert={root}");

    let refused = PostgresStore::connect(&through_relay("verify-full"))
        .await
        .expect_err("verify-full: the certificate does not name 127.0.0.2");
    assert!(
        refused.to_string().contains("certificate") && refused.to_string().contains("name"),
        "{refused}"
    );
    let store = PostgresStore::connect(&through_relay("verify-ca"))
        .await
        .expect("verify-ca through the relay");
    assert!(encrypted(&store).await);
}

/// Longer than the follower's poll: what it has not sent by then it will not send.
const POLL_WAIT: Duration = Duration::from_millis(1500);

/// The password never shows: not in errors (a server that cannot be reached, a URL that
/// does not parse), not in the store's `Debug`.
#[tokio::test]
async fn the_password_never_appears_in_an_error() {
    const SECRET: &str = "pw-s3cret-never-shown";
    let unreachable = PostgresStore::connect(&format!("postgres://u:{SECRET}@127.0.0.1:1/d"))
        .await
        .expect_err("nothing listens on port 1");
    assert!(
        matches!(unreachable, StoreError::Unavailable(_)),
        "{unreachable:?}"
    );
    let shown = format!("{unreachable} {unreachable:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(shown.contains("postgres://u@127.0.0.1:1/d"), "{shown}");
    let from_file = Locator::parse_with("postgres://u@127.0.0.1:1/d?sslmode=allow", |name| {
        (name == super::locator::PASSWORD_ENV).then(|| SECRET.to_owned())
    })
    .err()
    .expect("refused")
    .to_string();
    assert!(!from_file.contains(SECRET), "{from_file}");

    let Some(url) = fresh_database("the_password_never_appears_in_an_error").await else {
        return;
    };
    // The test cluster trusts loopback, so any password logs in.
    let user = user_of(&url);
    let with_password = url.replacen(&format!("://{user}@"), &format!("://{user}:{SECRET}@"), 1);
    assert!(with_password.contains(SECRET));
    let store = open_store(&with_password).await;
    assert!(!format!("{store:?}").contains(SECRET));
}

/// The user of a `postgres://USER@…` URL.
fn user_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split_once('@')
        .map_or("", |(user, _)| user)
        .split(':')
        .next()
        .unwrap_or_default()
        .to_owned()
}

/// Nothing listening: every operation fails `Unavailable` (the API's 503), within the
/// deadline.
#[tokio::test]
async fn an_unreachable_database_is_unavailable() {
    let error = PostgresStore::connect("postgres://u@127.0.0.1:1/d")
        .await
        .expect_err("nothing listens on port 1");
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
}

/// Conversations listed by a party come back in id order (bytes, not the locale).
#[tokio::test]
async fn conversations_of_an_agent_are_in_id_order() {
    let Some(url) = fresh_database("conversations_of_an_agent_are_in_id_order").await else {
        return;
    };
    let store = open_store(&url).await;
    let ids = ["b", "B", "a", "_x", "A"];
    for id in ids {
        store
            .commit(commit(id, 0, vec![started(id)], None))
            .await
            .expect("create");
    }
    let listed = store
        .conversations_of("bob")
        .await
        .expect("parties")
        .expect("indexed");
    let expected: BTreeSet<&str> = ids.into_iter().collect();
    assert_eq!(
        listed.iter().map(|id| &**id).collect::<Vec<_>>(),
        expected.into_iter().collect::<Vec<_>>()
    );
}

/// Every connection of the stores is killed (as a Postgres restart or a failover does):
/// an operation fails at most once, `Unavailable`, then the pool's new connections serve
/// it, and the change follower reconnects and goes on from its cursor, so a commit made
/// meanwhile is still heard.
#[tokio::test]
async fn killed_connections_are_replaced_and_the_follower_resumes() {
    let Some(url) =
        fresh_database("killed_connections_are_replaced_and_the_follower_resumes").await
    else {
        return;
    };
    let a = open_store(&url).await;
    let b = open_store(&url).await;
    let mut heard_by_b = b.remote_changes().expect("postgres follows changes");
    a.commit(commit("c", 0, vec![started("c")], None))
        .await
        .expect("commit");
    let killer = raw(&url).await;
    let killed = count(
        &killer,
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .await;
    assert!(killed >= 2, "killed {killed} connections");
    let mut attempts = 0;
    loop {
        attempts += 1;
        match a
            .commit(commit("c", 1, vec![accepted(2, "after")], None))
            .await
        {
            Ok(()) => break,
            Err(StoreError::Unavailable(_)) if attempts < 3 => {}
            Err(error) => panic!("attempt {attempts}: {error:?}"),
        }
    }
    assert_eq!(b.load("c").await.expect("load").expect("c").len(), 2);
    let mut versions = Vec::new();
    while !versions.contains(&2) {
        let change = tokio::time::timeout(Duration::from_secs(10), heard_by_b.recv())
            .await
            .expect("B hears A's commits across the reconnection")
            .expect("channel open");
        versions.push(change.version);
    }
}

/// The lease table (`postgres/leases.rs`) keeps `colloquy_cluster`'s contract, judged by
/// the database's clock: a compare-and-set acquire that starts a new epoch (also for the
/// same owner), no acquire of another node's live lease, renewals of live leases only, a
/// release that ends the tenure it names and no other, heartbeats and leaving, and the
/// fencing check.
#[tokio::test]
async fn the_lease_table_keeps_the_ownership_contract() {
    use colloquy_cluster::{Epoch, Fence, LeaseStore, NodeId, PartitionId};
    let Some(url) = fresh_database("the_lease_table_keeps_the_ownership_contract").await else {
        return;
    };
    let (a, b) = (NodeId::new("node-a"), NodeId::new("node-b"));
    let (node_a, node_b) = (open_store(&url).await, open_store(&url).await);
    let p = PartitionId(7);

    // Membership: each heartbeat sees the live nodes; nobody owns anything yet.
    node_a
        .heartbeat(&a, "http://a", 5_000)
        .await
        .expect("a beats");
    let view = node_b
        .heartbeat(&b, "http://b", 5_000)
        .await
        .expect("b beats");
    let mut members: Vec<_> = view.members.iter().map(|m| m.node.as_str()).collect();
    members.sort_unstable();
    assert_eq!(members, ["node-a", "node-b"]);
    assert!(view.leases.is_empty(), "{view:?}");
    assert!(
        view.now > 1_700_000_000_000,
        "the database's clock in ms: {}",
        view.now
    );

    // A compare-and-set at the epoch seen: a takes p at epoch 1; b, at the same seen epoch
    // or the new one, cannot while a's lease is live.
    let lease = (node_a.acquire(p, &a, "http://a", Epoch(0), 5_000).await)
        .expect("answered")
        .expect("a takes p");
    assert_eq!((lease.owner.as_str(), lease.epoch), ("node-a", Epoch(1)));
    for seen in [Epoch(0), Epoch(1)] {
        let refused = node_b.acquire(p, &b, "http://b", seen, 5_000).await;
        assert_eq!(refused.expect("answered"), None, "seen {seen:?}");
    }
    // a re-takes its own lease: a new tenure.
    let again = (node_a.acquire(p, &a, "http://a", Epoch(1), 5_000).await)
        .expect("answered")
        .expect("a re-takes p");
    assert_eq!(again.epoch, Epoch(2));
    let fence = |node: &NodeId, epoch| Fence {
        partition: p,
        node: node.clone(),
        epoch: Epoch(epoch),
    };
    assert_eq!(
        node_b.check_fence(&fence(&a, 2)).await.expect("answered"),
        Ok(())
    );
    assert!(
        node_b
            .check_fence(&fence(&a, 1))
            .await
            .expect("answered")
            .is_err()
    );

    // Renewals extend only what is held at that epoch.
    let renewed = node_a
        .renew(&a, &[(p, Epoch(2)), (PartitionId(8), Epoch(1))], 5_000)
        .await
        .expect("answered");
    assert_eq!(renewed, [p]);
    assert_eq!(
        node_a
            .renew(&a, &[(p, Epoch(1))], 5_000)
            .await
            .expect("answered"),
        []
    );

    // A late release of an earlier tenure does nothing; the current one's ends it, and b
    // takes p at the next epoch; a's fence fails from then on.
    node_a.release(p, &a, Epoch(1)).await.expect("answered");
    assert_eq!(
        node_b
            .acquire(p, &b, "http://b", Epoch(2), 5_000)
            .await
            .expect("answered"),
        None
    );
    node_a.release(p, &a, Epoch(2)).await.expect("answered");
    assert_eq!(
        node_a
            .renew(&a, &[(p, Epoch(2))], 5_000)
            .await
            .expect("answered"),
        []
    );
    let taken = (node_b.acquire(p, &b, "http://b", Epoch(2), 5_000).await)
        .expect("answered")
        .expect("b takes the released p");
    assert_eq!(
        (taken.owner.as_str(), taken.epoch, &*taken.address),
        ("node-b", Epoch(3), "http://b")
    );
    assert!(
        node_a
            .check_fence(&fence(&a, 2))
            .await
            .expect("answered")
            .is_err()
    );

    // An expired lease is taken without a release (a short TTL, then a wait).
    let q = PartitionId(9);
    node_a
        .acquire(q, &a, "http://a", Epoch(0), 50)
        .await
        .expect("answered")
        .expect("a takes q");
    tokio::time::sleep(std::time::Duration::from_millis(120)).await;
    assert_eq!(
        node_a
            .renew(&a, &[(q, Epoch(1))], 5_000)
            .await
            .expect("answered"),
        []
    );
    let q_lease = (node_b.acquire(q, &b, "http://b", Epoch(1), 5_000).await)
        .expect("answered")
        .expect("b takes the expired q");
    assert_eq!(q_lease.epoch, Epoch(2));

    // Every partition that had an owner is in the view; a node that leaves is not.
    node_a.leave(&a).await.expect("answered");
    let view = node_b
        .heartbeat(&b, "http://b", 5_000)
        .await
        .expect("b beats");
    let members: Vec<_> = view.members.iter().map(|m| m.node.as_str()).collect();
    assert_eq!(members, ["node-b"]);
    let mut owned: Vec<_> = view
        .leases
        .iter()
        .map(|l| (l.partition.0, l.owner.as_str()))
        .collect();
    owned.sort_unstable();
    assert_eq!(owned, [(7, "node-b"), (9, "node-b")]);
    // The table has a row per recorded partition, for acquires to update.
    assert_eq!(
        count(&raw(&url).await, "SELECT count(*) FROM partition_leases").await,
        i64::from(node_a.partitions().await.expect("partitions"))
    );
}

/// `acquire_many` and `release_many` apply `acquire`'s and `release`'s rules to each
/// partition of the batch in one statement: the free ones and the node's own are taken,
/// one live for another node or at another epoch is refused alone.
#[tokio::test]
async fn batched_takes_and_give_backs_judge_each_partition_alone() {
    use colloquy_cluster::{Epoch, LeaseStore, NodeId, PartitionId};
    let Some(url) = fresh_database("batched_takes_and_give_backs_judge_each_partition_alone").await
    else {
        return;
    };
    let (a, b) = (NodeId::new("node-a"), NodeId::new("node-b"));
    let store = open_store(&url).await;
    let b_holds = (store
        .acquire(PartitionId(3), &b, "http://b", Epoch(0), 5_000)
        .await)
        .expect("answered")
        .expect("b takes p3");
    assert_eq!(b_holds.epoch, Epoch(1));

    // p0..p4 at epoch 0: p3 is b's (and at epoch 1), the rest are free; p5 is asked at a
    // wrong epoch.
    let wanted: Vec<_> = (0..5)
        .map(|p| (PartitionId(p), Epoch(0)))
        .chain([(PartitionId(5), Epoch(4))])
        .collect();
    let mut taken = store
        .acquire_many(&a, "http://a", &wanted, 5_000)
        .await
        .expect("answered");
    taken.sort_by_key(|lease| lease.partition);
    let taken_ids: Vec<u32> = taken.iter().map(|lease| lease.partition.0).collect();
    assert_eq!(taken_ids, [0, 1, 2, 4]);
    assert!(
        taken.iter().all(|lease| lease.owner == a
            && lease.epoch == Epoch(1)
            && &*lease.address == "http://a")
    );

    // Giving back p0 and p1 at their epoch, and p2 at a stale one: p0 and p1 are free to
    // b at once, p2 is still a's.
    store
        .release_many(
            &a,
            &[
                (PartitionId(0), Epoch(1)),
                (PartitionId(1), Epoch(1)),
                (PartitionId(2), Epoch(0)),
            ],
        )
        .await
        .expect("answered");
    let mut for_b = store
        .acquire_many(
            &b,
            "http://b",
            &[
                (PartitionId(0), Epoch(1)),
                (PartitionId(1), Epoch(1)),
                (PartitionId(2), Epoch(1)),
            ],
            5_000,
        )
        .await
        .expect("answered");
    for_b.sort_by_key(|lease| lease.partition);
    let for_b: Vec<(u32, Epoch)> = for_b
        .iter()
        .map(|lease| (lease.partition.0, lease.epoch))
        .collect();
    assert_eq!(for_b, [(0, Epoch(2)), (1, Epoch(2))]);
    // Empty batches need no round trip and change nothing.
    assert!(
        (store.acquire_many(&a, "http://a", &[], 5_000).await)
            .expect("answered")
            .is_empty()
    );
    store.release_many(&a, &[]).await.expect("answered");
}

/// Two nodes taking every partition at once, each in its own order (as each prefers
/// partitions in its own rendezvous order), both get an answer: no deadlock fails either
/// batch, and no partition goes to both.
#[tokio::test]
async fn two_nodes_taking_overlapping_batches_in_opposite_orders_never_deadlock() {
    use colloquy_cluster::{Epoch, LeaseStore, NodeId, PartitionId};
    let Some(url) =
        fresh_database("two_nodes_taking_overlapping_batches_in_opposite_orders_never_deadlock")
            .await
    else {
        return;
    };
    let (a, b) = (NodeId::new("node-a"), NodeId::new("node-b"));
    let (store_a, store_b) = (open_store(&url).await, open_store(&url).await);
    for round in 0..10 {
        // Every lease of the round before has run out (TTL 0): all are free at their epoch.
        let view = store_a.heartbeat(&a, "http://a", 0).await.expect("view");
        let mut epochs = vec![Epoch(0); PARTITIONS as usize];
        for lease in &view.leases {
            epochs[lease.partition.0 as usize] = lease.epoch;
        }
        let ascending: Vec<(PartitionId, Epoch)> = (0..PARTITIONS)
            .map(|p| (PartitionId(p), epochs[p as usize]))
            .collect();
        let descending: Vec<_> = ascending.iter().rev().copied().collect();
        let (for_a, for_b) = tokio::join!(
            store_a.acquire_many(&a, "http://a", &ascending, 0),
            store_b.acquire_many(&b, "http://b", &descending, 0),
        );
        let (for_a, for_b) = (
            for_a.unwrap_or_else(|error| panic!("round {round}, node-a: {error}")),
            for_b.unwrap_or_else(|error| panic!("round {round}, node-b: {error}")),
        );
        let mut taken: Vec<u32> = (for_a.iter().chain(&for_b))
            .map(|lease| lease.partition.0)
            .collect();
        taken.sort_unstable();
        let all = taken.len();
        taken.dedup();
        assert_eq!(taken.len(), all, "round {round}: a partition went to both");
    }
}

/// A commit carrying a fence is refused (`Fenced`) and writes nothing unless its node still
/// holds the partition at that epoch; in a batch, only the fenced commit is refused.
#[tokio::test]
async fn a_fenced_commit_is_refused_alone_when_its_lease_moved() {
    use colloquy_cluster::{Epoch, Fence, LeaseStore, NodeId, PartitionId, partition_of};
    use colloquy_core::store::fixtures::{commit, started};
    let Some(url) = fresh_database("a_fenced_commit_is_refused_alone_when_its_lease_moved").await
    else {
        return;
    };
    let store = open_store(&url).await;
    let partitions = store.partitions().await.expect("partitions");
    let (a, b) = (NodeId::new("node-a"), NodeId::new("node-b"));
    let (held, lost) = ("fenced-held", "fenced-lost");
    let (p_held, p_lost) = (
        partition_of(held, partitions),
        partition_of(lost, partitions),
    );
    assert_ne!(p_held, p_lost, "two ids in two partitions");
    for partition in [p_held, p_lost] {
        store
            .acquire(partition, &a, "http://a", Epoch(0), 60_000)
            .await
            .expect("answered")
            .expect("a takes it");
    }
    // b takes over `lost`'s partition after a gives it back.
    store.release(p_lost, &a, Epoch(1)).await.expect("answered");
    store
        .acquire(p_lost, &b, "http://b", Epoch(1), 60_000)
        .await
        .expect("answered")
        .expect("b takes it");

    let fenced = |id: &str, partition: PartitionId| {
        let mut commit = commit(id, 0, vec![started(id)], None);
        commit.fence = Some(Fence {
            partition,
            node: a.clone(),
            epoch: Epoch(1),
        });
        commit
    };
    let (ok, refused) = tokio::join!(
        store.commit(fenced(held, p_held)),
        store.commit(fenced(lost, p_lost)),
    );
    ok.expect("a still holds its partition");
    assert!(
        matches!(refused, Err(StoreError::Fenced(ref f)) if f.partition == p_lost && f.epoch == Epoch(1)),
        "{refused:?}"
    );
    assert!(store.load(held).await.expect("load").is_some());
    assert_eq!(
        store.load(lost).await.expect("load"),
        None,
        "nothing of it was written"
    );
    // With b's fence, the same commit goes through.
    let mut by_b = fenced(lost, p_lost);
    by_b.fence = Some(Fence {
        partition: p_lost,
        node: b.clone(),
        epoch: Epoch(2),
    });
    store.commit(by_b).await.expect("b holds it");
}

/// With ownership, a node claims the deadlines of the partitions it holds only
/// (`claim_due_in`): each new conversation's row records its partition.
#[tokio::test]
async fn deadlines_are_claimed_by_partition() {
    use colloquy_cluster::partition_of;
    use colloquy_core::store::fixtures::{commit, started};
    let Some(url) = fresh_database("deadlines_are_claimed_by_partition").await else {
        return;
    };
    let store = open_store(&url).await;
    let partitions = store.partitions().await.expect("partitions");
    let (mine, theirs) = ("due-mine", "due-theirs");
    let (p_mine, p_theirs) = (
        partition_of(mine, partitions),
        partition_of(theirs, partitions),
    );
    assert_ne!(p_mine, p_theirs);
    for id in [mine, theirs] {
        store
            .commit(commit(id, 0, vec![started(id)], Some(100)))
            .await
            .expect("commit");
    }
    let claimed = store
        .claim_due_in(1_000, 10, &[p_mine])
        .await
        .expect("claim");
    assert_eq!(claimed, [Arc::<str>::from(mine)]);
    assert!(
        store
            .claim_due_in(1_000, 10, &[])
            .await
            .expect("claim")
            .is_empty()
    );
    let claimed = store
        .claim_due_in(1_000, 10, &[p_theirs])
        .await
        .expect("claim");
    assert_eq!(claimed, [Arc::<str>::from(theirs)]);
}
