//! Events and commits the store backends' unit tests write: one conversation of
//! `fipa-request` between alice and bob, its first message delivered to bob.

use std::sync::Arc;

use colloquy_protocol::event::{ConversationEvent, EventKind, Refusal, Started};
use colloquy_protocol::message::{Content, Message};
use colloquy_protocol::performative::{FipaAct, Performative};

use super::{
    Activation, AgentKey, ArchivedRevision, Commit, ConversationStore, Delivery, KeySource,
    PushAuthentication, PushConfig, RemoteTask, StoreError,
};

/// The `started` event (seq 1) of conversation `id`.
pub fn started(id: &str) -> ConversationEvent {
    ConversationEvent {
        seq: 1,
        at: 10,
        prev: None,
        kind: EventKind::Started(Arc::new(Started {
            id: Arc::from(id),
            template: Arc::from("fipa-request"),
            revision: Arc::from("sha256:0"),
            initiator: Arc::from("alice"),
            participants: vec![Arc::from("bob")],
            parameters: serde_json::json!({}),
            context: serde_json::Value::Null,
            deadline: None,
            trace: None,
        })),
    }
}

/// alice's request to bob, with message id `id`.
pub fn message(id: &str) -> Arc<Message> {
    Arc::new(Message {
        id: Arc::from(id),
        performative: Performative::Fipa(FipaAct::Request),
        sender: Arc::from("alice"),
        receivers: vec![Arc::from("bob")],
        content: Content::from_value(&serde_json::json!({"action": "x"})),
        in_reply_to: None,
        reply_by: None,
        sent_at: 11,
        signature: None,
    })
}

/// The `message_accepted` event at `seq` of message `id`.
pub fn accepted(seq: u64, id: &str) -> ConversationEvent {
    ConversationEvent {
        seq,
        at: 11,
        prev: None,
        kind: EventKind::MessageAccepted {
            message: message(id),
            transitions: Vec::new(),
        },
    }
}

/// The `message_refused` event at `seq`: bob's `agree` with message id `id`, refused as out
/// of protocol.
pub fn refused(seq: u64, id: &str) -> ConversationEvent {
    ConversationEvent {
        seq,
        at: 12,
        prev: None,
        kind: EventKind::MessageRefused(Box::new(Refusal {
            message_id: Some(Arc::from(id)),
            sender: Arc::from("bob"),
            performative: "agree".to_owned(),
            to: vec![Arc::from("alice")],
            code: "out_of_protocol".to_owned(),
            pointer: None,
        })),
    }
}

/// Commits conversation `id` with alice's request to bob, then a refusal of bob's (its own
/// commit, delivering nothing), and checks that the log reads back whole and in order and
/// that bob's inbox holds the request alone.
pub async fn assert_a_refusal_reads_back(store: &dyn ConversationStore, id: &str) {
    let first = vec![started(id), accepted(2, "m1")];
    store
        .commit(commit(id, 0, first, Some(500)))
        .await
        .expect("commit the start");
    store
        .commit(commit(id, 2, vec![refused(3, "b1")], Some(500)))
        .await
        .expect("commit the refusal");
    let log = store.load(id).await.expect("load").expect("stored");
    assert_eq!(log, [started(id), accepted(2, "m1"), refused(3, "b1")]);
    let after = store.events_after(id, 2).await.expect("events");
    assert_eq!(after, [refused(3, "b1")]);
    let inbox = store.inbox("bob", 0, 10).await.expect("inbox");
    let ids: Vec<&str> = inbox.iter().map(|entry| &*entry.message.id).collect();
    assert_eq!(ids, ["m1"], "a refusal is delivered to nobody");
}

/// A commit of `events` to conversation `id` at version `expected`, delivering every
/// accepted message to bob.
pub fn commit(
    id: &str,
    expected: u64,
    events: Vec<ConversationEvent>,
    wake: Option<u64>,
) -> Commit {
    let deliveries = events
        .iter()
        .filter_map(|event| match &event.kind {
            EventKind::MessageAccepted { message, .. } => Some(Delivery {
                agent: Arc::from("bob"),
                conversation_id: Arc::from(id),
                message: message.clone(),
            }),
            _ => None,
        })
        .collect();
    Commit {
        conversation_id: Arc::from(id),
        template: Arc::from("fixture"),
        expected_version: expected,
        events,
        deliveries,
        wake_at: wake,
        fence: None,
    }
}

/// Checks that `store`, holding conversation `id` at `version` (at least 1), refuses what
/// optimistic concurrency must refuse: creating `id` again, a commit from a writer that read
/// `version - 1`, and a commit to a conversation that does not exist.
pub async fn assert_refuses_stale_writes(store: &dyn ConversationStore, id: &str, version: u64) {
    let duplicate = store.commit(commit(id, 0, vec![started(id)], None)).await;
    assert!(
        matches!(duplicate, Err(StoreError::Duplicate(_))),
        "{duplicate:?}"
    );
    let stale = store
        .commit(commit(
            id,
            version - 1,
            vec![accepted(version, "stale")],
            None,
        ))
        .await;
    assert!(
        matches!(stale, Err(StoreError::Conflict { expected, actual, .. })
            if expected == version - 1 && actual == version),
        "{stale:?}"
    );
    let unknown = store
        .commit(commit(
            "no-such-conversation",
            version,
            vec![accepted(version + 1, "lost")],
            None,
        ))
        .await;
    assert!(
        matches!(unknown, Err(StoreError::Conflict { actual: 0, .. })),
        "{unknown:?}"
    );
}

/// Commits conversation `id` with a message from alice to bob, carol and dave (one message,
/// three deliveries) and then one to bob alone, and checks that every inbox reads what was
/// sent, in order. A durable store keeps the shared message once; its own test checks how.
pub async fn assert_a_message_to_several_reaches_each(store: &dyn ConversationStore, id: &str) {
    let receivers = ["bob", "carol", "dave"];
    let shared = Arc::new(Message {
        receivers: receivers.iter().map(|agent| Arc::from(*agent)).collect(),
        ..(*message("to-all")).clone()
    });
    let alone = message("to-bob");
    let mut deliveries: Vec<Delivery> = receivers
        .iter()
        .map(|agent| Delivery {
            agent: Arc::from(*agent),
            conversation_id: Arc::from(id),
            message: shared.clone(),
        })
        .collect();
    deliveries.push(Delivery {
        agent: Arc::from("bob"),
        conversation_id: Arc::from(id),
        message: alone.clone(),
    });
    let accepted = |seq, message: &Arc<Message>| ConversationEvent {
        seq,
        at: 11,
        prev: None,
        kind: EventKind::MessageAccepted {
            message: message.clone(),
            transitions: Vec::new(),
        },
    };
    store
        .commit(Commit {
            conversation_id: Arc::from(id),
            template: Arc::from("fixture"),
            expected_version: 0,
            events: vec![started(id), accepted(2, &shared), accepted(3, &alone)],
            deliveries,
            wake_at: None,
            fence: None,
        })
        .await
        .expect("commit");
    for agent in receivers {
        let inbox = store.inbox(agent, 0, 10).await.expect("inbox");
        let expected: Vec<&Message> = if agent == "bob" {
            vec![&*shared, &*alone]
        } else {
            vec![&*shared]
        };
        let read: Vec<&Message> = inbox.iter().map(|entry| &*entry.message).collect();
        assert_eq!(read, expected, "{agent}'s inbox");
        assert!(inbox.iter().all(|entry| &*entry.conversation_id == id));
    }
}

/// The seqs and message ids in `agent`'s inbox.
async fn inbox_of(store: &dyn ConversationStore, agent: &str) -> Vec<(u64, String)> {
    store
        .inbox(agent, 0, 100)
        .await
        .expect("inbox")
        .iter()
        .map(|entry| (entry.seq, entry.message.id.to_string()))
        .collect()
}

/// After [`assert_a_message_to_several_reaches_each`] on conversation `id` (bob holds the
/// shared message at 1 and his own at 2; carol and dave the shared one at 1): acknowledged
/// entries go and only those, the shared message stays readable until every receiver has
/// acknowledged it, an acknowledgement below an earlier one changes nothing, and bob's
/// sequence goes on from its head after his inbox was emptied. `shared_stored(true)` runs
/// when carol has acknowledged the shared message and dave has not, `shared_stored(false)`
/// when both have: a durable store checks there that it still holds the message, then not.
pub async fn assert_acknowledged_entries_go<F, Fut>(
    store: &dyn ConversationStore,
    id: &str,
    mut shared_stored: F,
) where
    F: FnMut(bool) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let owned = |entries: &[(u64, &str)]| -> Vec<(u64, String)> {
        entries
            .iter()
            .map(|(seq, id)| (*seq, (*id).to_owned()))
            .collect()
    };
    store.acknowledge("bob", 1).await.expect("ack");
    assert_eq!(inbox_of(store, "bob").await, owned(&[(2, "to-bob")]));
    store.acknowledge("bob", 2).await.expect("ack");
    assert_eq!(inbox_of(store, "bob").await, Vec::new());
    assert_eq!(store.inbox_head("bob").await.expect("head"), 2);
    store.acknowledge("bob", 1).await.expect("an older ack");
    assert_eq!(store.inbox_head("bob").await.expect("head"), 2);

    assert_eq!(inbox_of(store, "carol").await, owned(&[(1, "to-all")]));
    store.acknowledge("carol", 1).await.expect("ack");
    assert_eq!(inbox_of(store, "carol").await, Vec::new());
    assert_eq!(inbox_of(store, "dave").await, owned(&[(1, "to-all")]));
    shared_stored(true).await;
    store.acknowledge("dave", 1).await.expect("ack");
    assert_eq!(inbox_of(store, "dave").await, Vec::new());
    shared_stored(false).await;

    store
        .commit(commit(id, 3, vec![accepted(4, "later")], None))
        .await
        .expect("commit");
    assert_eq!(inbox_of(store, "bob").await, owned(&[(3, "later")]));
}

/// Commits conversation `id` with `batch * 2 + 5` messages to bob, acknowledges all but the
/// last, and checks that exactly the last is left and the head stays: a store that deletes
/// `batch` entries per step takes three steps and must not lose count between them.
pub async fn assert_a_large_acknowledgement_leaves_the_rest(
    store: &dyn ConversationStore,
    id: &str,
    batch: u64,
) {
    store
        .commit(commit(id, 0, vec![started(id)], None))
        .await
        .expect("start");
    let total = batch * 2 + 5;
    let events = (2..total + 2)
        .map(|seq| accepted(seq, &format!("m{seq}")))
        .collect();
    store
        .commit(commit(id, 1, events, None))
        .await
        .expect("commit");
    store.acknowledge("bob", total - 1).await.expect("ack");
    let left = store.inbox("bob", 0, 10).await.expect("inbox");
    assert_eq!(
        left.iter().map(|entry| entry.seq).collect::<Vec<_>>(),
        [total]
    );
    assert_eq!(store.inbox_head("bob").await.expect("head"), total);
}

/// A fresh store lists no inbox agents; once a message reaches bob, carol and dave, it lists
/// them; after carol acknowledged everything, it still lists bob and dave (carol may stay).
/// Returns with bob and dave holding entries, for a durable store's test to list again after
/// a reopen.
pub async fn assert_inbox_agents_are_listed(store: &dyn ConversationStore, id: &str) {
    let sorted = |mut agents: Vec<Arc<str>>| {
        agents.sort();
        agents
    };
    assert!(store.inbox_agents().await.expect("agents").is_empty());
    assert_a_message_to_several_reaches_each(store, id).await;
    let everyone: Vec<Arc<str>> = ["bob", "carol", "dave"].map(Arc::from).into();
    assert_eq!(
        sorted(store.inbox_agents().await.expect("agents")),
        everyone
    );
    let head = store.inbox_head("carol").await.expect("head");
    store.acknowledge("carol", head).await.expect("ack");
    let listed = store.inbox_agents().await.expect("agents");
    for agent in ["bob", "dave"] {
        assert!(listed.iter().any(|listed| &**listed == agent), "{listed:?}");
    }
}

/// Webhook cursors start at 0, are kept per agent and never move back. Returns with bob's
/// cursor at 3, for a durable store's test to read again after a reopen.
pub async fn assert_webhook_cursors_only_advance(store: &dyn ConversationStore) {
    assert_eq!(store.webhook_cursor("bob").await.expect("cursor"), 0);
    store
        .advance_webhook_cursor("bob", 3)
        .await
        .expect("advance");
    store
        .advance_webhook_cursor("bob", 2)
        .await
        .expect("a lower seq");
    assert_eq!(store.webhook_cursor("bob").await.expect("cursor"), 3);
    assert_eq!(store.webhook_cursor("carol").await.expect("cursor"), 0);
}

/// bob's task `task_id` for message `message_id` of conversation `conversation_id`.
pub fn remote_task(conversation_id: &str, message_id: &str, task_id: &str) -> RemoteTask {
    RemoteTask {
        conversation_id: Arc::from(conversation_id),
        message_id: Arc::from(message_id),
        task_id: task_id.to_owned(),
        cancel: None,
        awaits_input: false,
    }
}

/// Remote tasks are kept per agent and per conversation and message (a second record for
/// the same message replaces the first) and forgotten one by one. Returns with bob's tasks
/// `t-2` (for c1/m1, cancelled by m9) and `t-3` (c2/m1, awaiting input), for a durable
/// store's test to read again after a reopen.
pub async fn assert_remote_tasks_are_kept_replaced_and_forgotten(store: &dyn ConversationStore) {
    let sorted = |mut tasks: Vec<RemoteTask>| {
        tasks.sort_by(|a, b| a.task_id.cmp(&b.task_id));
        tasks
    };
    assert_eq!(store.remote_tasks("bob").await.expect("tasks"), vec![]);
    let waiting = RemoteTask {
        awaits_input: true,
        ..remote_task("c2", "m1", "t-3")
    };
    for task in [
        remote_task("c1", "m1", "t-1"),
        waiting.clone(),
        remote_task("c1", "m2", "t-4"),
    ] {
        store.keep_remote_task("bob", &task).await.expect("keep");
    }
    store
        .keep_remote_task("carol", &remote_task("c1", "m1", "t-9"))
        .await
        .expect("keep");
    let cancelling = RemoteTask {
        cancel: Some(Arc::from("m9")),
        ..remote_task("c1", "m1", "t-2")
    };
    store
        .keep_remote_task("bob", &cancelling)
        .await
        .expect("replace");
    store
        .forget_remote_task("bob", "c1", "m2")
        .await
        .expect("forget");
    store
        .forget_remote_task("bob", "c9", "m9")
        .await
        .expect("forgetting what is not there");
    assert_eq!(
        sorted(store.remote_tasks("bob").await.expect("tasks")),
        vec![cancelling, waiting]
    );
    assert_eq!(
        store.remote_tasks("carol").await.expect("tasks"),
        vec![remote_task("c1", "m1", "t-9")]
    );
    assert_eq!(store.remote_tasks("dave").await.expect("tasks"), vec![]);
}

/// Push config `id` of conversation `conversation_id`, set by alice, pushed through `delivered`.
pub fn push_config(conversation_id: &str, id: &str, delivered: u64) -> PushConfig {
    PushConfig {
        conversation_id: Arc::from(conversation_id),
        id: id.to_owned(),
        owner: Arc::from("alice"),
        url: format!("https://hooks.example/{id}"),
        token: Some("tok".to_owned()),
        authentication: Some(PushAuthentication {
            scheme: "Bearer".to_owned(),
            credentials: "secret".to_owned(),
        }),
        delivered,
    }
}

/// Push configs are kept per conversation and id (keeping one again replaces it: its cursor
/// moves), and forgotten one by one. Returns with `c1/p1` (delivered 3) and `c2/p1`, for a
/// durable store's test to read again after a reopen.
pub async fn assert_push_configs_are_kept_replaced_and_forgotten(store: &dyn ConversationStore) {
    let sorted = |mut configs: Vec<PushConfig>| {
        configs.sort_by(|a, b| (&a.conversation_id, &a.id).cmp(&(&b.conversation_id, &b.id)));
        configs
    };
    assert_eq!(store.push_configs().await.expect("configs"), vec![]);
    for config in [
        push_config("c1", "p1", 0),
        push_config("c1", "p2", 0),
        push_config("c2", "p1", 0),
    ] {
        store.keep_push_config(&config).await.expect("keep");
    }
    store
        .keep_push_config(&push_config("c1", "p1", 3))
        .await
        .expect("move the cursor");
    store.forget_push_config("c1", "p2").await.expect("forget");
    store
        .forget_push_config("c9", "p9")
        .await
        .expect("forgetting what is not there");
    assert_eq!(
        sorted(store.push_configs().await.expect("configs")),
        vec![push_config("c1", "p1", 3), push_config("c2", "p1", 0)]
    );
}

/// Key `kid` of `agent` as the administrator registered it at `registered_at`.
pub fn agent_key(agent: &str, kid: &str, registered_at: u64) -> AgentKey {
    AgentKey {
        agent: Arc::from(agent),
        kid: kid.to_owned(),
        jwk: serde_json::json!({
            "kty": "OKP", "crv": "Ed25519", "kid": kid,
            "x": "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
        }),
        source: KeySource::Admin,
        registered_at,
        valid_until: None,
        revoked_at: None,
    }
}

/// Agents' keys are kept per agent and kid (keeping one again replaces it: a revocation, a
/// later expiry) and read back per agent. Returns with bob's `b1` (revoked at 9) and `b2`
/// (bound by a token of `https://idp.example`), and alice's `a1`, for a durable store's
/// test to read again after a reopen.
pub async fn assert_agent_keys_are_kept_and_replaced(store: &dyn ConversationStore) {
    let sorted = |mut keys: Vec<AgentKey>| {
        keys.sort_by(|a, b| a.kid.cmp(&b.kid));
        keys
    };
    assert_eq!(store.agent_keys("bob").await.expect("keys"), vec![]);
    let mut bound = agent_key("bob", "b2", 2);
    bound.source = KeySource::Cnf {
        issuer: "https://idp.example".to_owned(),
    };
    bound.valid_until = Some(5_000);
    for key in [
        agent_key("bob", "b1", 1),
        bound.clone(),
        agent_key("alice", "a1", 3),
    ] {
        store.keep_agent_key(&key).await.expect("keep");
    }
    let mut revoked = agent_key("bob", "b1", 1);
    revoked.revoked_at = Some(9);
    store.keep_agent_key(&revoked).await.expect("revoke");
    assert_eq!(
        sorted(store.agent_keys("bob").await.expect("keys")),
        vec![revoked, bound]
    );
    assert_eq!(
        store.agent_keys("alice").await.expect("keys"),
        vec![agent_key("alice", "a1", 3)]
    );
    assert_eq!(store.agent_keys("carol").await.expect("keys"), vec![]);
}

/// The store's id index pages through conversations in id order, whatever order they were
/// created in, and forgets a removed one.
pub async fn assert_conversation_ids_page_in_order(store: &dyn ConversationStore) {
    for id in ["c1", "c3", "c2"] {
        store
            .commit(commit(id, 0, vec![started(id)], None))
            .await
            .expect("create");
    }
    let ids = |ids: Option<Vec<Arc<str>>>| -> Vec<String> {
        ids.expect("a durable store indexes ids")
            .iter()
            .map(|id| id.to_string())
            .collect()
    };
    let first = store.conversation_ids(None, 2).await.expect("first page");
    assert_eq!(ids(first), ["c1", "c2"]);
    let next = store
        .conversation_ids(Some("c2"), 2)
        .await
        .expect("next page");
    assert_eq!(ids(next), ["c3"]);
    let newest = store
        .conversation_ids_before(None, 2)
        .await
        .expect("newest page");
    assert_eq!(ids(newest), ["c3", "c2"]);
    let older = store
        .conversation_ids_before(Some("c2"), 2)
        .await
        .expect("older page");
    assert_eq!(ids(older), ["c1"]);
    store.remove("c2").await.expect("remove");
    let all = store.conversation_ids(None, 10).await.expect("all");
    assert_eq!(ids(all), ["c1", "c3"]);
}

/// Revision `revision` of `template`, first seen at `first_seen`, with a source that names
/// both (the revision `r1` of `a` also its file and hook module, [`HOOK_SHA256`]).
pub fn archived(template: &str, revision: &str, first_seen: u64) -> ArchivedRevision {
    let hooked = (template, revision) == ("a", "r1");
    ArchivedRevision {
        template: Arc::from(template),
        revision: Arc::from(revision),
        source: Arc::from(format!(
            "name: {template}\n# revision {revision}\ndescription: \"quoted \\\"text\\\" — é\"\n"
        )),
        path: hooked.then(|| format!("templates/{template}.yaml")),
        hook_sha256: hooked.then(|| Arc::from(HOOK_SHA256)),
        hook_path: hooked.then(|| format!("hooks/{template}.wasm")),
        first_seen,
    }
}

/// The hash [`archived`] revisions name their module by (the store does not check it).
pub const HOOK_SHA256: &str = "5f0c2e7a9b1d3f4e6a8c0b2d4f6e8a0c1b3d5f7e9a2c4e6b8d0f1a3c5e7b9d2f";

/// The hash of a second module, [`SMALL_MODULE`].
pub const SMALL_MODULE_SHA256: &str =
    "0d9b8a7c6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b";

/// A module header: the second module the archive keeps.
pub const SMALL_MODULE: &[u8] = b"\0asm\x01\0\0\0";

/// A module's bytes: every byte value (NUL, invalid UTF-8), over 64 KiB.
pub fn module_bytes() -> Vec<u8> {
    (0..=255u8).cycle().take(70_001).collect()
}

/// An activation of `template` by `kind` to `revision` from `previous`, at `at`.
pub fn activation(
    template: &str,
    kind: &str,
    revision: Option<&str>,
    previous: Option<&str>,
    at: u64,
) -> Activation {
    Activation {
        template: Arc::from(template),
        kind: kind.to_owned(),
        revision: revision.map(Arc::from),
        previous: previous.map(Arc::from),
        at,
        by: if kind == "reload" { "watcher" } else { "admin" }.to_owned(),
        detail: (kind == "ramp").then(|| "25% of new conversations".to_owned()),
    }
}

/// The activations [`assert_the_archive_keeps_revisions_modules_and_activations`] records,
/// in order. The last is stamped earlier than the one before it (another node's clock):
/// the history is in the order recorded, not by `at`.
pub fn activation_history() -> Vec<Activation> {
    vec![
        activation("a", "reload", Some("r1"), None, 100),
        activation("b", "upload", Some("r0"), None, 110),
        activation("a", "stage", Some("r2"), Some("r1"), 120),
        activation("a", "ramp", Some("r2"), Some("r1"), 130),
        activation("b", "delete", None, Some("r0"), 140),
        activation("a", "promote", Some("r2"), Some("r1"), 125),
    ]
}

/// Every revision the archive fixture keeps, in listing order.
fn every_archived_revision() -> Vec<ArchivedRevision> {
    vec![
        archived("a", "r3", 50),
        archived("a", "r1", 100),
        // Seen in the same millisecond as a's r1: after it, by template.
        archived("b", "r0", 100),
        archived("a", "r2", 200),
        archived("b", "r1", 300),
    ]
}

/// The revision archive's contract, on a fresh store: a revision kept again (with another
/// source and a later `first_seen`) stays as first kept; listings filter by template and
/// are ordered by `first_seen` (then template), not by when they were kept; modules read
/// back byte for byte and are not replaced; activations come back in the order recorded,
/// filtered by template, the newest `limit` of them. Removing a conversation leaves the
/// archive alone. Returns with the archive as [`assert_the_archive_is_as_left`] checks it,
/// for a durable store's test to check again after a reopen.
pub async fn assert_the_archive_keeps_revisions_modules_and_activations(
    store: &dyn ConversationStore,
) {
    assert_eq!(store.archived_revisions(None).await.expect("list"), []);
    assert_eq!(store.archived_revision("a", "r1").await.expect("get"), None);
    assert_eq!(store.archived_module(HOOK_SHA256).await.expect("get"), None);
    assert_eq!(store.activations(None, 10).await.expect("history"), []);

    // Kept in another order than they list in.
    for (template, revision, first_seen) in [
        ("b", "r1", 300),
        ("a", "r1", 100),
        ("a", "r2", 200),
        ("b", "r0", 100),
        ("a", "r3", 50),
    ] {
        store
            .archive_revision(&archived(template, revision, first_seen))
            .await
            .expect("archive");
    }
    let again = ArchivedRevision {
        source: Arc::from("name: a\n# a different source under the same revision\n"),
        path: None,
        first_seen: 900,
        ..archived("a", "r1", 100)
    };
    store
        .archive_revision(&again)
        .await
        .expect("archiving again is no error");
    assert_eq!(
        store.archived_revision("a", "r1").await.expect("get"),
        Some(archived("a", "r1", 100)),
        "the first kept stays"
    );
    assert_eq!(store.archived_revision("a", "r9").await.expect("get"), None);
    assert_eq!(store.archived_revision("c", "r1").await.expect("get"), None);
    assert_eq!(
        store.archived_revisions(Some("a")).await.expect("list"),
        [
            archived("a", "r3", 50),
            archived("a", "r1", 100),
            archived("a", "r2", 200)
        ]
    );
    assert_eq!(store.archived_revisions(Some("c")).await.expect("list"), []);

    store
        .archive_module(HOOK_SHA256, &module_bytes())
        .await
        .expect("module");
    store
        .archive_module(SMALL_MODULE_SHA256, SMALL_MODULE)
        .await
        .expect("module");
    store
        .archive_module(HOOK_SHA256, b"other bytes")
        .await
        .expect("archiving again is no error");

    for activation in activation_history() {
        store.record_activation(&activation).await.expect("record");
    }
    let history = activation_history();
    let of_a: Vec<Activation> = history
        .iter()
        .filter(|activation| &*activation.template == "a")
        .cloned()
        .collect();
    assert_eq!(store.activations(Some("a"), 100).await.expect("a"), of_a);
    assert_eq!(
        store.activations(Some("a"), 2).await.expect("a's newest"),
        of_a[2..]
    );
    assert_eq!(
        store.activations(None, 3).await.expect("the newest"),
        history[3..]
    );
    assert_eq!(store.activations(None, 0).await.expect("none"), []);
    assert_eq!(store.activations(Some("c"), 10).await.expect("c"), []);

    // Retention removes conversations, never the archive.
    store
        .commit(commit("archived-c", 0, vec![started("archived-c")], None))
        .await
        .expect("create");
    store.remove("archived-c").await.expect("remove");
    assert_the_archive_is_as_left(store).await;
}

/// The archive as [`assert_the_archive_keeps_revisions_modules_and_activations`] leaves it:
/// every revision, both modules byte for byte, the whole history in order.
pub async fn assert_the_archive_is_as_left(store: &dyn ConversationStore) {
    assert_eq!(
        store.archived_revisions(None).await.expect("list"),
        every_archived_revision()
    );
    let module = store
        .archived_module(HOOK_SHA256)
        .await
        .expect("get")
        .expect("kept");
    assert!(*module == *module_bytes(), "the module's bytes, exactly");
    assert_eq!(
        store
            .archived_module(SMALL_MODULE_SHA256)
            .await
            .expect("get")
            .as_deref(),
        Some(SMALL_MODULE)
    );
    assert_eq!(store.archived_module("0000").await.expect("get"), None);
    assert_eq!(
        store.activations(None, 100).await.expect("history"),
        activation_history()
    );
}
