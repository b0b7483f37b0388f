//! Tests of `redis`.

use super::*;
use colloquy_core::store::fixtures::{
    accepted, assert_a_large_acknowledgement_leaves_the_rest,
    assert_a_message_to_several_reaches_each, assert_a_refusal_reads_back,
    assert_acknowledged_entries_go, assert_conversation_ids_page_in_order,
    assert_inbox_agents_are_listed, assert_refuses_stale_writes,
    assert_remote_tasks_are_kept_replaced_and_forgotten, assert_the_archive_is_as_left,
    assert_the_archive_keeps_revisions_modules_and_activations,
    assert_webhook_cursors_only_advance, commit, started,
};

/// The Redis the tests use, from `COLLOQUY_TEST_REDIS` (e.g. `redis://127.0.0.1:6390`;
/// `.ci/run` starts one). Under CI (`CI=true`) its absence fails the test; elsewhere
/// the test says it was skipped.
fn test_redis(test: &str) -> Option<String> {
    match std::env::var("COLLOQUY_TEST_REDIS") {
        Ok(url) if !url.is_empty() => Some(url),
        _ if std::env::var("CI").is_ok_and(|ci| ci == "true") => {
            panic!("{test}: CI=true but COLLOQUY_TEST_REDIS is not set; .ci/run starts Redis")
        }
        _ => {
            eprintln!("SKIPPED {test}: set COLLOQUY_TEST_REDIS=redis://127.0.0.1:PORT to run it");
            None
        }
    }
}

/// A store under a prefix of its own, so tests sharing one Redis do not meet.
async fn open_store(url: &str, prefix: &str) -> RedisStore {
    RedisStore::connect_with_prefix(url, prefix)
        .await
        .expect("connect to the test Redis")
}

fn unique_prefix(test: &str) -> String {
    format!("colloquy-test:{test}:{}", uuid::Uuid::now_v7())
}

#[tokio::test]
async fn conversation_ids_page_in_order() {
    let Some(url) = test_redis("conversation_ids_page_in_order") else {
        return;
    };
    let store = open_store(&url, &unique_prefix("ids")).await;
    assert_conversation_ids_page_in_order(&store).await;
}

#[tokio::test]
async fn a_refusal_reads_back() {
    let Some(url) = test_redis("a_refusal_reads_back") else {
        return;
    };
    let store = open_store(&url, &unique_prefix("refusal")).await;
    assert_a_refusal_reads_back(&store, "c1").await;
}

/// Conversations an engine created before the id index existed are indexed when a node
/// connects, once: a database without the index gets it built from the conversation keys.
#[tokio::test]
async fn the_id_index_is_built_for_conversations_created_before_it() {
    let Some(url) = test_redis("the_id_index_is_built_for_conversations_created_before_it") else {
        return;
    };
    let prefix = unique_prefix("ids-built");
    let store = open_store(&url, &prefix).await;
    for id in ["old-1", "old-2"] {
        store
            .commit(commit(id, 0, vec![started(id)], None))
            .await
            .expect("create");
    }
    // As an engine without the index would have left the database.
    let mut connection = store.connection.clone();
    let () = connection
        .del(&[format!("{prefix}:ids"), format!("{prefix}:ids-built")])
        .await
        .expect("del");
    assert_eq!(
        store.conversation_ids(None, 10).await.expect("ids"),
        Some(Vec::new())
    );
    let reconnected = open_store(&url, &prefix).await;
    let ids = reconnected.conversation_ids(None, 10).await.expect("ids");
    assert_eq!(ids, Some(vec![Arc::from("old-1"), Arc::from("old-2")]));
}

/// The archive is in Redis: a new connection (another node, or an engine restarted on the
/// store) reads every revision, module and activation as they were; the per-template
/// history and the whole one agree.
#[tokio::test]
async fn the_archive_keeps_revisions_modules_and_activations_for_a_new_connection() {
    let Some(url) =
        test_redis("the_archive_keeps_revisions_modules_and_activations_for_a_new_connection")
    else {
        return;
    };
    let prefix = unique_prefix("archive");
    {
        let store = open_store(&url, &prefix).await;
        assert_the_archive_keeps_revisions_modules_and_activations(&store).await;
    }
    let reconnected = open_store(&url, &prefix).await;
    assert_the_archive_is_as_left(&reconnected).await;
    let mut connection = reconnected.connection.clone();
    let whole: Vec<String> = connection
        .lrange(format!("{prefix}:activations"), 0, -1)
        .await
        .expect("the whole history");
    let of_b: Vec<String> = connection
        .lrange(format!("{prefix}:activations:b"), 0, -1)
        .await
        .expect("b's history");
    assert_eq!(
        whole
            .into_iter()
            .filter(|body| body.contains(r#""template":"b""#))
            .collect::<Vec<_>>(),
        of_b
    );
    assert_eq!(of_b.len(), 2);
}

/// Webhook cursors are shared: a second node on the same Redis reads where the first got.
#[tokio::test]
async fn webhook_cursors_only_advance_and_are_shared_by_nodes() {
    let Some(url) = test_redis("webhook_cursors_only_advance_and_are_shared_by_nodes") else {
        return;
    };
    let prefix = unique_prefix("webhook-cursors");
    assert_webhook_cursors_only_advance(&open_store(&url, &prefix).await).await;
    let other_node = open_store(&url, &prefix).await;
    assert_eq!(other_node.webhook_cursor("bob").await.expect("cursor"), 3);
}

/// Every node lists the agents with inbox entries.
#[tokio::test]
async fn agents_with_inbox_entries_are_listed_by_every_node() {
    let Some(url) = test_redis("agents_with_inbox_entries_are_listed_by_every_node") else {
        return;
    };
    let prefix = unique_prefix("inbox-agents");
    assert_inbox_agents_are_listed(&open_store(&url, &prefix).await, "c1").await;
    let listed = open_store(&url, &prefix)
        .await
        .inbox_agents()
        .await
        .expect("agents");
    for agent in ["bob", "dave"] {
        assert!(listed.iter().any(|listed| &**listed == agent), "{listed:?}");
    }
}

#[tokio::test]
async fn push_configs_are_kept_replaced_forgotten_and_shared_by_nodes() {
    let Some(url) = test_redis("push_configs_are_kept_replaced_forgotten_and_shared_by_nodes")
    else {
        return;
    };
    let prefix = unique_prefix("push-configs");
    colloquy_core::store::fixtures::assert_push_configs_are_kept_replaced_and_forgotten(
        &open_store(&url, &prefix).await,
    )
    .await;
    let other_node = open_store(&url, &prefix).await;
    assert_eq!(other_node.push_configs().await.expect("configs").len(), 2);
}

#[tokio::test]
async fn agent_keys_are_kept_replaced_and_shared_by_nodes() {
    let Some(url) = test_redis("agent_keys_are_kept_replaced_and_shared_by_nodes") else {
        return;
    };
    let prefix = unique_prefix("agent-keys");
    colloquy_core::store::fixtures::assert_agent_keys_are_kept_and_replaced(
        &open_store(&url, &prefix).await,
    )
    .await;
    let other_node = open_store(&url, &prefix).await;
    assert_eq!(other_node.agent_keys("bob").await.expect("keys").len(), 2);
}

#[tokio::test]
async fn remote_tasks_are_kept_replaced_forgotten_and_shared_by_nodes() {
    let Some(url) = test_redis("remote_tasks_are_kept_replaced_forgotten_and_shared_by_nodes")
    else {
        return;
    };
    let prefix = unique_prefix("remote-tasks");
    assert_remote_tasks_are_kept_replaced_and_forgotten(&open_store(&url, &prefix).await).await;
    let other_node = open_store(&url, &prefix).await;
    assert_eq!(
        other_node.remote_tasks("bob").await.expect("tasks").len(),
        2
    );
}

/// A message to several agents is one key that their inbox entries name; a message to
/// one agent is in its entry.
#[tokio::test]
async fn a_message_to_several_agents_is_stored_once() {
    let Some(url) = test_redis("a_message_to_several_agents_is_stored_once") else {
        return;
    };
    let prefix = unique_prefix("shared");
    let store = open_store(&url, &prefix).await;
    assert_a_message_to_several_reaches_each(&store, "c1").await;
    let mut connection = store.connection.clone();
    let shared_key = format!("{prefix}:msg:c1:to-all");
    let stored: Option<String> = connection.get(&shared_key).await.expect("get");
    assert!(stored.is_some_and(|body| body.contains("\"to-all\"")));
    let entries: Vec<StreamEntry> = connection
        .xrange_all(format!("{prefix}:inbox:bob"))
        .await
        .expect("xrange");
    assert_eq!(optional_field(&entries[0], "r"), Some(shared_key.as_str()));
    assert!(optional_field(&entries[0], "m").is_none());
    assert!(optional_field(&entries[1], "m").is_some());
}

/// Acknowledged entries leave the inbox stream; a shared message's key and count go
/// with the last entry naming it; the sequence goes on.
#[tokio::test]
async fn acknowledged_entries_and_unnamed_shared_messages_are_deleted() {
    let Some(url) = test_redis("acknowledged_entries_and_unnamed_shared_messages_are_deleted")
    else {
        return;
    };
    let prefix = unique_prefix("ack");
    let store = open_store(&url, &prefix).await;
    assert_a_message_to_several_reaches_each(&store, "c1").await;
    let shared_key = format!("{prefix}:msg:c1:to-all");
    let refs_key = format!("{prefix}:msg-refs");
    let connection = store.connection.clone();
    assert_acknowledged_entries_go(&store, "c1", |stored| {
        let (mut connection, shared_key, refs_key) =
            (connection.clone(), shared_key.clone(), refs_key.clone());
        async move {
            let exists: bool = connection.exists(&shared_key).await.expect("exists");
            let count: Option<u64> = connection.hget(&refs_key, &shared_key).await.expect("hget");
            assert_eq!(exists, stored, "shared message key");
            assert_eq!(count, stored.then_some(1), "entries naming it");
        }
    })
    .await;
    let mut connection = store.connection.clone();
    let left: usize = connection
        .xlen(format!("{prefix}:inbox:carol"))
        .await
        .expect("xlen");
    assert_eq!(left, 0);
}

/// An acknowledgement of more entries than one script run deletes takes several.
#[tokio::test]
async fn a_large_acknowledgement_runs_in_batches() {
    let Some(url) = test_redis("a_large_acknowledgement_runs_in_batches") else {
        return;
    };
    let store = open_store(&url, &unique_prefix("ack-batches")).await;
    assert_a_large_acknowledgement_leaves_the_rest(&store, "c1", ACK_BATCH as u64).await;
}

/// One node leads a role at a time; the lead passes on when its lease runs out.
#[tokio::test]
async fn one_node_leads_a_role_until_its_lease_runs_out() {
    let Some(url) = test_redis("one_node_leads_a_role_until_its_lease_runs_out") else {
        return;
    };
    let prefix = unique_prefix("lead");
    let (a, b) = (
        open_store(&url, &prefix).await,
        open_store(&url, &prefix).await,
    );
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

#[tokio::test]
async fn commits_check_versions_and_fill_logs_and_inboxes() {
    let Some(url) = test_redis("commits_check_versions_and_fill_logs_and_inboxes") else {
        return;
    };
    let prefix = unique_prefix("commits");
    let store = open_store(&url, &prefix).await;
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
    let other = open_store(&url, &prefix).await;
    let events = other.load("c1").await.expect("load").expect("exists");
    assert_eq!(events, vec![started("c1"), accepted(2, "m1")]);
    assert_eq!(
        other.events_after("c1", 1).await.expect("after"),
        vec![accepted(2, "m1")]
    );
    assert!(other.load("nope").await.expect("load").is_none());
    store
        .commit(commit("c1", 2, vec![accepted(3, "m3")], None))
        .await
        .expect("append");
    let inbox = other.inbox("bob", 0, 10).await.expect("inbox");
    assert_eq!(inbox.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert_eq!(&*inbox[1].message.id, "m3");
    assert_eq!(&*inbox[1].conversation_id, "c1");
    assert_eq!(other.inbox("bob", 1, 10).await.expect("inbox").len(), 1);
    assert_eq!(other.inbox("bob", 0, 1).await.expect("inbox").len(), 1);
    assert_eq!(other.inbox_head("bob").await.expect("head"), 2);
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

#[tokio::test]
async fn a_commit_is_one_log_entry_and_logs_of_one_entry_per_event_still_read() {
    let Some(url) =
        test_redis("a_commit_is_one_log_entry_and_logs_of_one_entry_per_event_still_read")
    else {
        return;
    };
    let prefix = unique_prefix("batches");
    let store = open_store(&url, &prefix).await;
    // A log as engines before one-entry-per-commit wrote it: an entry per event.
    let mut connection = store.connection.clone();
    let old = [started("old"), accepted(2, "m2")];
    for event in &old {
        let _: String = connection
            .xadd(
                store.keys.log("old"),
                format!("{}-0", event.seq),
                &[("e", encode(event).expect("encode"))],
            )
            .await
            .expect("xadd");
    }
    let _: i64 = connection
        .hset(store.keys.conversation("old"), "version", 2)
        .await
        .expect("hset");
    // A new commit of three events lands after them as one entry.
    let batch = vec![accepted(3, "m3"), accepted(4, "m4"), accepted(5, "m5")];
    store
        .commit(commit("old", 2, batch.clone(), None))
        .await
        .expect("append");
    let entries: Vec<StreamEntry> = connection
        .xrange_all(store.keys.log("old"))
        .await
        .expect("xrange");
    assert_eq!(entries.len(), 3, "two old entries and one for the commit");
    assert_eq!(entries[2].0, "5-0");
    let all: Vec<ConversationEvent> = old.iter().cloned().chain(batch.clone()).collect();
    assert_eq!(store.load("old").await.expect("load"), Some(all));
    // Reading from inside the commit's entry skips the events before.
    assert_eq!(
        store.events_after("old", 3).await.expect("after"),
        batch[1..].to_vec()
    );
    assert_eq!(
        store.events_after("old", 1).await.expect("after"),
        [vec![accepted(2, "m2")], batch.clone()].concat()
    );
    assert!(
        store
            .events_after("old", 5)
            .await
            .expect("after")
            .is_empty()
    );
    store
        .commit(commit("old", 4, vec![accepted(5, "again")], None))
        .await
        .expect_err("the version counts every event of the batch");
}

#[tokio::test]
async fn each_due_wake_up_goes_to_one_node_and_returns_after_the_lease() {
    let Some(url) = test_redis("each_due_wake_up_goes_to_one_node_and_returns_after_the_lease")
    else {
        return;
    };
    let prefix = unique_prefix("claims");
    let a = Arc::new(open_store(&url, &prefix).await);
    let b = Arc::new(open_store(&url, &prefix).await);
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

#[tokio::test]
async fn other_nodes_hear_of_commits() {
    let Some(url) = test_redis("other_nodes_hear_of_commits") else {
        return;
    };
    let prefix = unique_prefix("changes");
    let a = open_store(&url, &prefix).await;
    let b = open_store(&url, &prefix).await;
    let mut heard_by_b = b.remote_changes().expect("redis publishes changes");
    let mut heard_by_a = a.remote_changes().expect("redis publishes changes");
    // The subscription is set up in the background: commit until B hears one.
    let mut version = 0;
    let change = loop {
        let events = if version == 0 {
            vec![started("c")]
        } else {
            vec![accepted(version + 1, &format!("m{version}"))]
        };
        a.commit(commit("c", version, events, None))
            .await
            .expect("commit");
        version += 1;
        match tokio::time::timeout(Duration::from_millis(200), heard_by_b.recv()).await {
            Ok(change) => break change.expect("channel open"),
            Err(_) => assert!(version < 50, "node B never heard of node A's commits"),
        }
    };
    assert_eq!(&*change.conversation_id, "c");
    assert!(change.version >= 1 && change.version <= version);
    // B commits next. A hears that, and nothing of its own before it (notices on the
    // channel arrive in publication order, and A's own came first).
    b.commit(commit(
        "c",
        version,
        vec![accepted(version + 1, "from-b")],
        None,
    ))
    .await
    .expect("commit through b");
    let first = tokio::time::timeout(Duration::from_secs(10), heard_by_a.recv())
        .await
        .expect("node A hears node B")
        .expect("channel open");
    assert_eq!(
        first.version,
        version + 1,
        "A heard its own commit back: {first:?}"
    );
    assert_eq!(first.agents, vec![Arc::from("bob")]);
}
