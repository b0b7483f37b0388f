use std::fs;
use std::sync::Mutex;

use super::*;

/// A small valid template named `name` whose terminal state is `done` (a new name, a new
/// revision).
fn template(name: &str, done: &str) -> String {
    format!(
        "apiVersion: colloquy.dev/v1\nkind: ConversationTemplate\nmetadata:\n  name: {name}\n  version: 1.0.0\nspec:\n  roles:\n    participants: {{ min: 1, max: 1 }}\n  thread:\n    initial: start\n    on_expiry: expired\n    states:\n      start:\n        transitions:\n          - {{ performative: request, from: initiator, to: {done} }}\n      {done}: {{ terminal: success }}\n      expired: {{ terminal: timeout }}\n"
    )
}

fn catalog(mode: RolloutMode, text: &str) -> (tempfile::TempDir, LiveCatalog) {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("a.yaml"), text).expect("write");
    let live = LiveCatalog::new(dir.path()).with_rollout(mode);
    live.reload().expect("compiles");
    (dir, live)
}

fn active(live: &LiveCatalog) -> Arc<str> {
    live.snapshot()
        .catalog
        .latest("a")
        .expect("a")
        .revision
        .clone()
}

fn kinds(live: &LiveCatalog) -> Vec<String> {
    live.history(Some("a"))
        .into_iter()
        .map(|a| a.kind)
        .collect()
}

#[test]
fn a_staged_candidate_serves_nobody_until_promoted_and_rollback_undoes_the_promotion() {
    let (_dir, live) = catalog(RolloutMode::Immediate, &template("a", "done"));
    let first = active(&live);
    let candidate = live
        .stage("a", &template("a", "finished"), 0.5, "admin")
        .expect("staged");
    assert_ne!(candidate.template.revision, first);
    assert_eq!(active(&live), first, "a candidate serves nobody");
    for _ in 0..10 {
        assert_eq!(live.latest("a").expect("a").revision, first);
    }
    assert!(
        live.revision("a", &candidate.template.revision).is_some(),
        "the candidate can be looked up (ramped conversations are pinned to it)"
    );

    let wrong = live.promote("a", &first, "admin");
    assert!(matches!(wrong, Err(RolloutError::NotTheCandidate { .. })));
    let promoted = live
        .promote("a", &candidate.template.revision, "admin")
        .expect("promoted");
    assert_eq!(promoted.previous.as_deref(), Some(&*first));
    assert_eq!(active(&live), candidate.template.revision);
    assert!(
        live.candidate("a").is_none(),
        "promotion uses the candidate up"
    );

    let back = live.rollback("a", "admin").expect("rolled back");
    assert_eq!(back.revision.as_deref(), Some(&*first));
    assert_eq!(active(&live), first);
    assert_eq!(kinds(&live), ["reload", "stage", "promote", "rollback"]);
}

#[test]
fn rollback_without_a_previous_revision_is_refused() {
    let (_dir, live) = catalog(RolloutMode::Immediate, &template("a", "done"));
    assert!(matches!(
        live.rollback("a", "admin"),
        Err(RolloutError::NoPrevious { .. })
    ));
    assert!(matches!(
        live.rollback("nope", "admin"),
        Err(RolloutError::UnknownTemplate(_))
    ));
}

#[test]
fn under_immediate_a_rollback_holds_until_the_file_changes_again() {
    let (dir, live) = catalog(RolloutMode::Immediate, &template("a", "done"));
    let first = active(&live);
    fs::write(dir.path().join("a.yaml"), template("a", "finished")).expect("edit");
    live.reload().expect("reload");
    let second = active(&live);
    assert_ne!(first, second);
    live.rollback("a", "admin").expect("rolled back");
    assert_eq!(active(&live), first);
    // The file still holds the rolled-back text: a reload (the watcher) keeps the rollback.
    live.reload().expect("reload");
    assert_eq!(active(&live), first);
    // A new edit serves, as always under `immediate`.
    fs::write(dir.path().join("a.yaml"), template("a", "over")).expect("edit");
    live.reload().expect("reload");
    assert_ne!(active(&live), first);
    assert_ne!(active(&live), second);
}

#[test]
fn under_shadow_an_edited_file_becomes_the_candidate() {
    let (dir, live) = catalog(RolloutMode::Shadow, &template("a", "done"));
    let first = active(&live);
    fs::write(dir.path().join("a.yaml"), template("a", "finished")).expect("edit");
    live.reload().expect("reload");
    assert_eq!(active(&live), first, "the edit does not serve");
    let candidate = live.candidate("a").expect("staged from the file");
    assert_eq!(candidate.staged_by, "watcher");
    assert!(candidate.text.contains("finished"));
    // Reloading the same files changes nothing.
    live.reload().expect("reload");
    assert_eq!(
        live.candidate("a").expect("still").template.revision,
        candidate.template.revision
    );
    live.promote("a", &candidate.template.revision, "admin")
        .expect("promote");
    assert_eq!(active(&live), candidate.template.revision);
    // The file holds the promoted text: no candidate comes back.
    live.reload().expect("reload");
    assert!(live.candidate("a").is_none());
    // Editing the file back to the old text makes that the candidate.
    fs::write(dir.path().join("a.yaml"), template("a", "done")).expect("edit back");
    live.reload().expect("reload");
    assert_eq!(
        live.candidate("a")
            .expect("the old text is a candidate now")
            .template
            .revision,
        first
    );
}

#[test]
fn a_ramp_starts_exactly_its_share_on_the_candidate_and_an_abort_stops_it() {
    let (_dir, live) = catalog(RolloutMode::Immediate, &template("a", "done"));
    let first = active(&live);
    let candidate = live
        .stage("a", &template("a", "finished"), 1.0, "admin")
        .expect("staged");
    let revision = candidate.template.revision.clone();
    live.ramp("a", &revision, 20, Some("refusal_rate:5"), 10, "admin")
        .expect("ramp");
    let on_candidate = (0..100)
        .filter(|_| live.latest("a").expect("a").revision == revision)
        .count();
    assert_eq!(on_candidate, 20);
    assert!(matches!(
        live.ramp("a", &first, 20, None, 10, "admin"),
        Err(RolloutError::NotTheCandidate { .. })
    ));
    assert!(matches!(
        live.ramp("a", &revision, 101, None, 10, "admin"),
        Err(RolloutError::Invalid(_))
    ));
    assert!(matches!(
        live.ramp("a", &revision, 10, Some("latency:5"), 10, "admin"),
        Err(RolloutError::Invalid(_))
    ));
    live.abort_ramp("a", &revision, "refusal_rate 9.0% against 1.0%")
        .expect("abort");
    assert!((0..100).all(|_| live.latest("a").expect("a").revision == first));
    let ramp = live
        .candidate("a")
        .and_then(|c| c.ramp.clone())
        .expect("kept");
    assert_eq!(
        ramp.aborted.as_deref(),
        Some("refusal_rate 9.0% against 1.0%")
    );
    assert_eq!(kinds(&live), ["reload", "stage", "ramp", "abort"]);
}

#[test]
fn staging_the_active_revision_or_a_broken_one_is_refused() {
    let (_dir, live) = catalog(RolloutMode::Immediate, &template("a", "done"));
    assert!(matches!(
        live.stage("a", &template("a", "done"), 1.0, "admin"),
        Err(RolloutError::AlreadyActive { .. })
    ));
    assert!(matches!(
        live.stage("a", "kind: nope", 1.0, "admin"),
        Err(RolloutError::Rejected(_))
    ));
    assert!(matches!(
        live.stage("b", &template("b", "done"), 1.0, "admin"),
        Err(RolloutError::UnknownTemplate(_))
    ));
    assert!(matches!(
        live.stage("a", &template("b", "done"), 1.0, "admin"),
        Err(RolloutError::Invalid(_))
    ));
    assert!(matches!(
        live.stage("a", &template("a", "x"), 1.5, "admin"),
        Err(RolloutError::Invalid(_))
    ));
    assert!(live.candidate("a").is_none());
}

/// An archive that remembers what it was told.
#[derive(Default)]
struct Remembered {
    sources: Mutex<Vec<ArchivedSource>>,
    history: Mutex<Vec<Activation>>,
}

impl Archive for Remembered {
    fn revision_loaded(&self, name: &str, revision: &str, source: &LoadedSource) {
        self.sources.lock().expect("lock").push((
            Arc::from(name),
            Arc::from(revision),
            source.clone(),
        ));
    }
    fn activated(&self, activation: &Activation) {
        self.history.lock().expect("lock").push(activation.clone());
    }
}

#[test]
fn after_a_restart_the_archive_gives_back_the_active_revision_and_rollback() {
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("a.yaml"), template("a", "done")).expect("write");
    let archive = Arc::new(Remembered::default());
    let live = LiveCatalog::new(dir.path())
        .with_rollout(RolloutMode::Shadow)
        .with_archive(archive.clone());
    live.reload().expect("compiles");
    let first = active(&live);
    let candidate = live
        .stage("a", &template("a", "finished"), 1.0, "admin")
        .expect("staged");
    live.promote("a", &candidate.template.revision, "admin")
        .expect("promote");
    drop(live);

    // The file still holds the first text; the archive says the candidate was promoted.
    let sources = archive.sources.lock().expect("lock").clone();
    let history = archive.history.lock().expect("lock").clone();
    assert_eq!(sources.len(), 2, "the file's revision and the candidate's");
    let restarted = LiveCatalog::new(dir.path())
        .with_rollout(RolloutMode::Shadow)
        .seed(sources.clone(), history.clone());
    restarted.reload().expect("compiles");
    assert_eq!(
        active(&restarted),
        candidate.template.revision,
        "under shadow the archive's active revision serves after a restart"
    );
    assert_eq!(
        restarted
            .candidate("a")
            .expect("the differing file")
            .template
            .revision,
        first
    );
    let back = restarted
        .rollback("a", "admin")
        .expect("rollback after restart");
    assert_eq!(back.revision.as_deref(), Some(&*first));

    // Under immediate the file decides after a restart; the history stays.
    let immediate = LiveCatalog::new(dir.path()).seed(sources, history);
    immediate.reload().expect("compiles");
    assert_eq!(active(&immediate), first);
    assert!(immediate.history(Some("a")).len() >= 3);
}
