use std::time::{Duration, Instant};

use super::*;

/// A small valid template named `name`; `states` picks the terminal state's name so edits
/// make new revisions.
fn template(name: &str, done: &str) -> String {
    format!(
        "apiVersion: colloquy.dev/v1\nkind: ConversationTemplate\nmetadata:\n  name: {name}\n  version: 1.0.0\nspec:\n  roles:\n    participants: {{ min: 1, max: 1 }}\n  thread:\n    initial: start\n    on_expiry: expired\n    states:\n      start:\n        transitions:\n          - {{ performative: request, from: initiator, to: {done} }}\n      {done}: {{ terminal: success }}\n      expired: {{ terminal: timeout }}\n"
    )
}

fn dir_with(files: &[(&str, String)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for (file, text) in files {
        fs::write(dir.path().join(file), text).expect("write fixture");
    }
    dir
}

#[test]
fn a_reload_swaps_new_revisions_in_and_keeps_old_ones_reachable() {
    let dir = dir_with(&[("a.yaml", template("a", "done"))]);
    let live = LiveCatalog::open(dir.path()).expect("compiles");
    let first = live.latest("a").expect("loaded");
    assert_eq!(live.snapshot().generation, 1);

    fs::write(dir.path().join("a.yaml"), template("a", "finished")).expect("edit");
    assert!(matches!(live.reload(), Ok(Reloaded::Swapped(_))));
    let second = live.latest("a").expect("still there");
    assert_ne!(first.revision, second.revision);
    assert!(
        live.revision("a", &first.revision).is_some(),
        "old revision pinned"
    );
    assert_eq!(live.snapshot().generation, 2);

    // Same files again: nothing to swap.
    assert!(matches!(live.reload(), Ok(Reloaded::Unchanged(_))));
    assert_eq!(live.snapshot().generation, 2);
}

#[test]
fn a_broken_file_keeps_the_last_good_catalog_and_is_reported_until_fixed() {
    let dir = dir_with(&[("a.yaml", template("a", "done"))]);
    let live = LiveCatalog::open(dir.path()).expect("compiles");
    let good = live.snapshot().revision.clone();

    fs::write(
        dir.path().join("a.yaml"),
        "apiVersion: colloquy.dev/v1\nkind: nope\n",
    )
    .expect("break");
    assert!(live.reload().is_err());
    assert_eq!(live.snapshot().revision, good);
    assert!(live.latest("a").is_some());
    let error = live.last_error().expect("reported");
    assert!(!error.diagnostics.is_empty());
    assert!(
        error.diagnostics[0]
            .file
            .as_deref()
            .is_some_and(|f| f.ends_with("a.yaml"))
    );

    fs::write(dir.path().join("a.yaml"), template("a", "finished")).expect("fix");
    live.reload().expect("compiles again");
    assert!(live.last_error().is_none());
}

#[test]
fn deleting_a_file_removes_the_template_for_new_conversations_only() {
    let dir = dir_with(&[
        ("a.yaml", template("a", "done")),
        ("b.yaml", template("b", "done")),
    ]);
    let live = LiveCatalog::open(dir.path()).expect("compiles");
    let revision = live.latest("a").expect("loaded").revision.clone();
    fs::remove_file(dir.path().join("a.yaml")).expect("delete");
    live.reload().expect("compiles");
    assert!(live.latest("a").is_none());
    assert!(live.revision("a", &revision).is_some());
    assert_eq!(live.snapshot().catalog.names().len(), 1);
}

#[test]
fn uploads_compile_first_and_roll_back_when_the_set_breaks() {
    let dir = dir_with(&[("a.yaml", template("a", "done"))]);
    let live = LiveCatalog::open(dir.path()).expect("compiles");

    let (snapshot, created) = live.put("b", &template("b", "done")).expect("valid upload");
    assert!(created);
    assert!(snapshot.catalog.latest("b").is_some());
    assert!(dir.path().join("b.yaml").is_file());
    let source = snapshot
        .source("b", &snapshot.catalog.latest("b").expect("b").revision)
        .expect("source kept");
    assert_eq!(&*source.text, template("b", "done"));

    let Err(ChangeError::Rejected(diagnostics)) = live.put("c", "kind: nope\n") else {
        panic!("a broken upload is rejected");
    };
    assert!(!diagnostics.list.is_empty());
    assert!(!dir.path().join("c.yaml").exists(), "nothing written");

    let Err(ChangeError::Rejected(diagnostics)) = live.put("c", &template("a", "done")) else {
        panic!("an upload naming another template is rejected");
    };
    assert_eq!(diagnostics.list[0].path, "metadata.name");

    // Valid alone, but another file in the directory is broken: the set fails, so c.yaml
    // is removed again and the catalog is untouched.
    let before = live.snapshot().revision.clone();
    fs::write(dir.path().join("z.yaml"), "kind: [").expect("break another file");
    let Err(ChangeError::Rejected(_)) = live.put("c", &template("c", "done")) else {
        panic!("an upload into a broken set is rejected");
    };
    assert!(!dir.path().join("c.yaml").exists(), "rolled back");
    assert_eq!(live.snapshot().revision, before);
    fs::remove_file(dir.path().join("z.yaml")).expect("repair");

    assert!(matches!(
        live.put("../x", "x"),
        Err(ChangeError::InvalidName(_))
    ));
    live.delete("b").expect("deleted");
    assert!(live.latest("b").is_none());
    assert!(matches!(
        live.delete("b"),
        Err(ChangeError::UnknownTemplate(_))
    ));
}

#[test]
fn the_watcher_reloads_after_writes_and_atomic_saves() {
    let dir = dir_with(&[("a.yaml", template("a", "done"))]);
    let live = Arc::new(LiveCatalog::open(dir.path()).expect("compiles"));
    let _watcher = crate::watcher::watch(live.clone()).expect("watching");
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let until = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < until, "the watcher did not pick up {what}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };

    fs::write(dir.path().join("b.yaml"), template("b", "done")).expect("create");
    wait_for("a new file", &|| live.latest("b").is_some());

    let before = live.latest("a").expect("a").revision.clone();
    // An editor's atomic save: write a temporary file, rename it over the original.
    let temp = dir.path().join(".a.yaml.swp");
    fs::write(&temp, template("a", "finished")).expect("temp");
    fs::rename(&temp, dir.path().join("a.yaml")).expect("rename");
    wait_for("an atomic save", &|| {
        live.latest("a").is_some_and(|t| t.revision != before)
    });

    fs::write(dir.path().join("b.yaml"), "broken: [").expect("break");
    wait_for("a broken file", &|| live.last_error().is_some());
    assert!(live.latest("b").is_some(), "the last good b serves");

    fs::rename(dir.path().join("b.yaml"), dir.path().join("b.txt")).expect("rename away");
    wait_for("a rename", &|| {
        live.latest("b").is_none() && live.last_error().is_none()
    });
}

#[test]
fn retired_revisions_stay_in_memory_only_while_held_and_compile_again_on_demand() {
    let dir = dir_with(&[("a.yaml", template("a", "done"))]);
    let live = LiveCatalog::open(dir.path()).expect("compiles");
    let held = live.latest("a").expect("loaded");
    let held_revision = held.revision.clone();
    let unheld = {
        live.put("a", &template("a", "second")).expect("upload");
        let second = live.latest("a").expect("a");
        (Arc::downgrade(&second), second.revision.clone())
    };
    live.put("a", &template("a", "third")).expect("upload");

    // A revision a running conversation holds is the very same compiled template.
    let looked_up = live.revision("a", &held_revision).expect("held");
    assert!(Arc::ptr_eq(&looked_up, &held));
    // One nobody holds is gone from memory (it was kept for ever before) ...
    assert!(unheld.0.upgrade().is_none(), "the unheld revision is freed");
    // ... and compiles again, the same revision, when a conversation pinned to it loads.
    let again = live.revision("a", &unheld.1).expect("compiled again");
    assert_eq!(again.revision, unheld.1);
    assert!(again.machine.id_of("second").is_some());
    let same = live.revision("a", &unheld.1).expect("held now");
    assert!(Arc::ptr_eq(&again, &same), "compiled once while held");
    // Every kept revision is still listed.
    assert_eq!(live.snapshot().revisions_of("a").len(), 3);
    // Back to an older text: the held compiled form serves again, not a copy.
    drop((looked_up, again, same));
    live.put("a", &template("a", "done")).expect("upload");
    assert!(Arc::ptr_eq(&live.latest("a").expect("a"), &held));
}

#[test]
fn at_most_the_newest_retired_texts_are_kept_per_template() {
    let dir = dir_with(&[("a.yaml", template("a", "s0"))]);
    let live = LiveCatalog::open(dir.path()).expect("compiles");
    let first = live.latest("a").expect("a").revision.clone();
    let held = {
        live.put("a", &template("a", "s1")).expect("upload");
        live.latest("a").expect("a")
    };
    for edit in 2..=MAX_RETIRED_SOURCES + 3 {
        live.put("a", &template("a", &format!("s{edit}")))
            .expect("upload");
    }
    let snapshot = live.snapshot();
    assert_eq!(
        snapshot.revisions_of("a").len(),
        MAX_RETIRED_SOURCES + 1,
        "the current one and the newest retired"
    );
    assert!(
        live.revision("a", &first).is_none(),
        "the oldest unheld one is gone"
    );
    assert!(
        live.revision("a", &held.revision).is_some(),
        "a held one is kept, however old"
    );
}

#[test]
fn a_retired_revision_compiles_again_with_the_module_it_was_compiled_with() {
    let module = |marker: u8| {
        let mut bytes = b"\0asm\x01\0\0\0".to_vec();
        // A custom section, so two modules differ.
        bytes.extend([0, 3, 1, b'x', marker]);
        bytes
    };
    let hooked = format!(
        "{}  hooks:\n    module: hook.wasm\n    events: [on_message]\n",
        template("a", "done")
    );
    let dir = dir_with(&[("a.yaml", hooked)]);
    fs::write(dir.path().join("hook.wasm"), module(1)).expect("module");
    let live = LiveCatalog::open(dir.path()).expect("compiles");
    let old = live.latest("a").expect("a").revision.clone();
    live.put_module("hook.wasm", &module(2)).expect("replaced");
    assert_ne!(live.latest("a").expect("a").revision, old);

    let again = live.revision("a", &old).expect("compiled again");
    assert_eq!(again.revision, old);
    let bytes = &again.hook_module.as_ref().expect("module").bytes;
    assert_eq!(
        bytes.last(),
        Some(&1),
        "the module of that revision, not the file's"
    );
}
