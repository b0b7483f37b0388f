//! Rollouts end to end (issue 39): a candidate staged over HTTP beside the active revision
//! of a watched template, shadowed on live traffic on a real SQLite store, its divergences
//! read back, promoted, rolled back, and the history read again by an engine started anew
//! on the same store. Waits poll with a bound.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use colloquy_core::store::ConversationStore;
use colloquy_policy::{Catalog, LiveCatalog};
use colloquy_server::policy::{self, PolicyState, Reads, Writes};
use colloquy_server::rollout::archive::{StoreArchive, load};
use colloquy_server::rollout::{Rollouts, ShadowSettings};
use colloquy_server::{self as api, RunningService, ServiceOptions};
use colloquy_tests::http::{ADMIN_TOKEN, call, raw};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// A one-step protocol: alice requests, bob informs (`inform`) or, in the candidate,
/// must agree first: the candidate takes bob's inform elsewhere than the live revision.
fn errand(answer: &str) -> String {
    format!(
        "apiVersion: colloquy.dev/v1
kind: ConversationTemplate
metadata:
  name: errand
  version: 1.0.0
spec:
  roles:
    participants: {{ min: 1, max: 1 }}
  enforcement: enforce
  thread:
    initial: start
    on_expiry: expired
    states:
      start:
        transitions:
          - {{ performative: request, from: initiator, to: asked }}
      asked:
        transitions:
          - {{ performative: {answer}, from: participant, to: done }}
      done: {{ terminal: success }}
      expired: {{ terminal: timeout }}
"
    )
}

struct Engine {
    service: RunningService,
    live: Arc<LiveCatalog>,
    _closing: watch::Sender<bool>,
}

/// An engine as `colloquy serve --agents … --store sqlite:…` runs it: the template directory,
/// the store's archive seeded in, the rollout routes, the commit observer.
async fn engine(dir: &Path, store: Arc<dyn ConversationStore>) -> Engine {
    let (sources, history) = load(&*store).await.expect("archive readable");
    let live = LiveCatalog::new(dir)
        .with_archive(StoreArchive::start(store.clone()))
        .seed(sources, history);
    live.reload().unwrap_or_else(|d| panic!("{d}"));
    let live = Arc::new(live);
    let identity = colloquy_tests::http::identity(&[]);
    let rollouts = Rollouts::new(live.clone(), ShadowSettings::default());
    let (closing, closing_rx) = watch::channel(false);
    let state = PolicyState::new(
        live.clone(),
        Writes::AdminToken(ADMIN_TOKEN.into()),
        Reads::Tokens(Arc::new(identity.clone())),
        closing_rx,
    )
    .with_rollouts(rollouts.clone())
    .with_store(store.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let options = ServiceOptions {
        identity,
        store: Some(store),
        templates: Some(live.clone()),
        routes: Some(policy::router(state)),
        commit_observer: Some(rollouts),
        scheduler_period: Duration::from_millis(10),
        ..ServiceOptions::default()
    };
    Engine {
        service: api::launch(Catalog::default(), listener, options).expect("service starts"),
        live,
        _closing: closing,
    }
}

fn admin(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    request.bearer_auth(ADMIN_TOKEN)
}

/// alice asks bob; bob informs, which the revision the conversation started on accepts.
async fn errand_run(url: &str) -> String {
    let (id, status) = errand_informed(url).await;
    assert_eq!(status, 202, "bob's inform in {id}");
    id
}

/// alice asks bob; bob informs: the conversation and the status bob's inform got.
async fn errand_informed(url: &str) -> (String, u16) {
    let (status, body) = call(
        raw()
            .post(format!("{url}/v1/conversations"))
            .bearer_auth("alice-token")
            .json(&json!({
                "template": "errand",
                "participants": ["bob"],
                "message": {"performative": "request", "content": {}},
            })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    let id = body["id"].as_str().expect("id").to_owned();
    let (status, _) = call(
        raw()
            .post(format!("{url}/v1/conversations/{id}/messages"))
            .bearer_auth("bob-token")
            .json(&json!({"performative": "inform", "content": {}})),
    )
    .await;
    (id, status)
}

async fn candidates(url: &str) -> Value {
    let (status, body) = call(admin(
        raw().get(format!("{url}/v1/templates/errand/candidates")),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    body
}

#[tokio::test]
async fn a_candidate_is_shadowed_promoted_rolled_back_and_remembered_across_a_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("errand.yaml"), errand("inform")).expect("write");
    let db = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn ConversationStore> =
        Arc::new(colloquy_store::SqliteStore::open(db.path().join("colloquy.db")).expect("sqlite"));
    let first = engine(dir.path(), store.clone()).await;
    let url = first.service.url();
    let active = first
        .live
        .latest("errand")
        .expect("errand")
        .revision
        .to_string();

    // Writes need the admin: an agent's token is known but not allowed (403), a made-up
    // one is not known (401); a candidate that does not compile is 422 and stages nothing.
    let stage = |token: &'static str, body: String| {
        raw()
            .post(format!("{url}/v1/templates/errand/candidates"))
            .bearer_auth(token)
            .body(body)
    };
    assert_eq!(call(stage("alice-token", errand("agree"))).await.0, 403);
    assert_eq!(call(stage("nobody", errand("agree"))).await.0, 401);
    let (status, body) = call(stage(ADMIN_TOKEN, "kind: nope".into())).await;
    assert_eq!(status, 422, "{body}");
    assert!(
        candidates(&url).await["candidates"]
            .as_array()
            .expect("list")
            .is_empty()
    );
    let (status, body) = call(
        admin(raw().post(format!("{url}/v1/templates/nope/candidates"))).body(errand("agree")),
    )
    .await;
    assert_eq!(status, 404, "{body}");

    let (status, staged) = call(stage(ADMIN_TOKEN, errand("agree"))).await;
    assert_eq!(status, 201, "{staged}");
    let candidate = staged["revision"].as_str().expect("revision").to_owned();
    assert_ne!(candidate, active);

    // Live traffic runs on the active revision; each conversation's twin on the candidate
    // refuses bob's inform.
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(errand_run(&url).await);
    }
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    let report = loop {
        let report = candidates(&url).await;
        if report["candidates"][0]["shadow"]["diverged"] == json!(3) {
            break report;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "no divergences: {report}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let shadow = &report["candidates"][0]["shadow"];
    assert_eq!(shadow["shadowed"], json!(3), "{report}");
    assert_eq!(shadow["by_kind"]["refused"], json!(3), "{report}");
    let sample = &shadow["samples"][0];
    assert!(ids.contains(&sample["conversation_id"].as_str().expect("id").to_owned()));
    assert_eq!(sample["detail"], json!("out_of_protocol"), "{sample}");

    // The same counts in /metrics.
    let metrics = raw()
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    let line = format!(
        "colloquy_shadow_diverged_total{{template=\"errand\",candidate=\"{candidate}\"}} 3"
    );
    assert!(metrics.contains(&line), "{line} in:\n{metrics}");

    // The same change replayed against the recorded conversations: each diverges where the
    // candidate refuses bob's inform; against the active revision, none does.
    let replay = |token: &'static str, body: String| {
        raw()
            .post(format!("{url}/v1/templates/errand/replay"))
            .bearer_auth(token)
            .body(body)
    };
    assert_eq!(call(replay("alice-token", errand("agree"))).await.0, 403);
    let (status, report) = call(replay(ADMIN_TOKEN, errand("agree"))).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["conversations"], json!(3), "{report}");
    assert_eq!(report["diverged"], json!(3), "{report}");
    assert_eq!(report["by_kind"]["refused"], json!(3), "{report}");
    let (status, report) = call(replay(ADMIN_TOKEN, errand("inform"))).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        (report["same"].clone(), report["diverged"].clone()),
        (json!(3), json!(0)),
        "{report}"
    );

    // Promote: 409 for a revision that is not the candidate, then the candidate serves.
    let promote = |revision: &str| {
        admin(raw().post(format!(
            "{url}/v1/templates/errand/candidates/{revision}/promote"
        )))
    };
    assert_eq!(call(promote(&active)).await.0, 409);
    let (status, body) = call(promote(&candidate)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        first
            .live
            .latest("errand")
            .expect("errand")
            .revision
            .to_string(),
        candidate
    );

    // Roll back in one call, then once more goes back to the candidate; history in order.
    let rollback = || admin(raw().post(format!("{url}/v1/templates/errand/rollback")));
    let (status, body) = call(rollback()).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["activation"]["revision"], json!(active));
    assert_eq!(
        first
            .live
            .latest("errand")
            .expect("errand")
            .revision
            .to_string(),
        active
    );
    let (status, history) = call(
        raw()
            .get(format!("{url}/v1/templates/errand/history"))
            .bearer_auth("alice-token"),
    )
    .await;
    assert_eq!(status, 200, "{history}");
    let kinds: Vec<&str> = history["activations"]
        .as_array()
        .expect("activations")
        .iter()
        .map(|a| a["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(
        kinds,
        ["reload", "stage", "promote", "rollback"],
        "{history}"
    );

    // An engine started anew on the store finds the history and can roll back again.
    let _ = first._closing.send(true);
    drop(first);
    // The archive writer writes within milliseconds of each change.
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    while store
        .activations(Some("errand"), 100)
        .await
        .expect("history")
        .len()
        < 4
    {
        assert!(tokio::time::Instant::now() < until, "archive not written");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let second = engine(dir.path(), store.clone()).await;
    let url = second.service.url();
    let (status, history) = call(
        raw()
            .get(format!("{url}/v1/templates/errand/history"))
            .bearer_auth("alice-token"),
    )
    .await;
    assert_eq!(status, 200, "{history}");
    assert_eq!(
        history["activations"].as_array().expect("list").len(),
        4,
        "{history}"
    );
    let (status, body) = call(admin(
        raw().post(format!("{url}/v1/templates/errand/rollback")),
    ))
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["activation"]["revision"], json!(candidate), "{body}");
    assert_eq!(
        second
            .live
            .latest("errand")
            .expect("errand")
            .revision
            .to_string(),
        candidate
    );
}

/// `GET …/candidates/{revision}/diff` (the inspector's candidate view reads it): what the
/// staged candidate changes from the active revision, in the protocol's terms; the admin's
/// alone, as the candidates' report is; 404 for an unknown template, 409 for a revision that
/// is not the staged candidate (also while none is staged).
#[tokio::test]
async fn a_candidates_semantic_diff_is_for_the_admin_and_of_the_candidate_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("errand.yaml"), errand("inform")).expect("write");
    let store: Arc<dyn ConversationStore> = Arc::new(colloquy_core::store::MemoryStore::new());
    let engine = engine(dir.path(), store).await;
    let url = engine.service.url();
    let active = engine
        .live
        .latest("errand")
        .expect("errand")
        .revision
        .to_string();
    let diff = |template: &str, revision: &str, token: &str| {
        raw()
            .get(format!(
                "{url}/v1/templates/{template}/candidates/{revision}/diff"
            ))
            .bearer_auth(token)
    };
    let (status, body) = call(diff("errand", &active, ADMIN_TOKEN)).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], json!("not_the_candidate"), "{body}");

    let (status, staged) = call(
        admin(raw().post(format!("{url}/v1/templates/errand/candidates"))).body(errand("agree")),
    )
    .await;
    assert_eq!(status, 201, "{staged}");
    let candidate = staged["revision"].as_str().expect("revision").to_owned();

    let (status, body) = call(diff("errand", &candidate, ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({
            "old": {"name": "errand", "revision": active},
            "new": {"name": "errand", "revision": candidate},
            "changes": [
                {"path": "spec.thread.states.asked", "what": "asked: agree/participant added (→ done)"},
                {"path": "spec.thread.states.asked", "what": "asked: inform/participant removed (was → done)"},
            ],
        })
    );

    // An agent's token is known but not allowed; a made-up one is not known.
    let (status, body) = call(diff("errand", &candidate, "alice-token")).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(call(diff("errand", &candidate, "nobody")).await.0, 401);
    let (status, body) = call(diff("nope", &candidate, ADMIN_TOKEN)).await;
    assert_eq!(status, 404, "{body}");
    // The active revision is not the candidate: 409, naming the one that is.
    let (status, body) = call(diff("errand", &active, ADMIN_TOKEN)).await;
    assert_eq!(status, 409, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|message| message.contains(&candidate)),
        "{body}"
    );
}

#[tokio::test]
async fn a_ramp_whose_candidate_refuses_more_is_stopped_by_its_gate() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("errand.yaml"), errand("inform")).expect("write");
    let db = tempfile::tempdir().expect("temp dir");
    let store: Arc<dyn ConversationStore> =
        Arc::new(colloquy_store::SqliteStore::open(db.path().join("colloquy.db")).expect("sqlite"));
    let engine = engine(dir.path(), store).await;
    let url = engine.service.url();
    let (status, staged) = call(
        admin(raw().post(format!("{url}/v1/templates/errand/candidates"))).body(errand("agree")),
    )
    .await;
    assert_eq!(status, 201, "{staged}");
    let candidate = staged["revision"].as_str().expect("revision").to_owned();
    // Half of new conversations on the candidate, which refuses bob's inform; stopped when
    // its refusal rate is more than 5 points above the active revision's, from 3 each.
    let (status, body) = call(admin(raw().post(format!(
        "{url}/v1/templates/errand/candidates/{candidate}/ramp?percent=50&abort_on=refusal_rate:5&min_conversations=3"
    ))))
    .await;
    assert_eq!(status, 200, "{body}");
    let mut refused = 0;
    for _ in 0..8 {
        let (_, status) = errand_informed(&url).await;
        if status == 422 || status == 409 {
            refused += 1;
        }
    }
    assert!(
        refused >= 3,
        "the candidate's conversations refuse bob's inform ({refused})"
    );
    let until = tokio::time::Instant::now() + Duration::from_secs(10);
    let report = loop {
        let report = candidates(&url).await;
        if report["candidates"][0]["ramp"]["aborted"].is_string() {
            break report;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "the gate did not trip: {report}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let ramp = &report["candidates"][0]["ramp"];
    assert!(
        ramp["aborted"]
            .as_str()
            .expect("why")
            .starts_with("refusal_rate"),
        "{ramp}"
    );
    assert!(
        ramp["candidate"]["refused"].as_u64().expect("count") >= 3,
        "{ramp}"
    );
    assert_eq!(ramp["active"]["refused"], json!(0), "{ramp}");
    // Stopped: every new conversation starts on the active revision again.
    let active = engine
        .live
        .snapshot()
        .catalog
        .latest("errand")
        .expect("errand")
        .revision
        .clone();
    for _ in 0..4 {
        assert_eq!(
            engine.live.latest("errand").expect("errand").revision,
            active
        );
    }
    let (_, history) = call(
        raw()
            .get(format!("{url}/v1/templates/errand/history"))
            .bearer_auth("alice-token"),
    )
    .await;
    let last = history["activations"]
        .as_array()
        .expect("list")
        .last()
        .cloned();
    assert_eq!(
        last.as_ref().map(|a| a["kind"].clone()),
        Some(json!("abort")),
        "{history}"
    );
    assert_eq!(last.map(|a| a["by"].clone()), Some(json!("canary gate")));
}
