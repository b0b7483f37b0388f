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

    let Upload {
        snapshot,
        created,
        compiling,
    } = live.put("b", &template("b", "done")).expect("valid upload");
    assert!(compiling.is_empty(), "no check, nothing compiles");
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

/// A wasm module's framing with a custom section holding `marker`, so modules differ.
fn module(marker: u8) -> Vec<u8> {
    let mut bytes = b"\0asm\x01\0\0\0".to_vec();
    bytes.extend([0, 3, 1, b'x', marker]);
    bytes
}

/// `template(name, done)` with `hook.wasm` as its hook module.
fn hooked(name: &str, done: &str) -> String {
    format!(
        "{}  hooks:\n    module: hook.wasm\n    events: [on_message]\n",
        template(name, done)
    )
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[test]
fn a_retired_revision_compiles_again_with_the_module_it_was_compiled_with() {
    let dir = dir_with(&[("a.yaml", hooked("a", "done"))]);
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

/// A check standing in for the engine's hook compiler: a module compiles in the background
/// until the test ends its compile, as ready or refused.
#[derive(Clone, Default)]
struct FakeCompiler(Arc<Mutex<FakeCompiles>>);

#[derive(Default)]
struct FakeCompiles {
    /// Compiles ended, by module hash.
    ended: HashMap<String, Result<(), String>>,
    /// Compiles running, with the listener to tell when they end.
    running: HashMap<String, CompileListener>,
    /// How many compiles were started.
    started: usize,
}

impl FakeCompiler {
    fn check(&self) -> Box<TemplateCheck> {
        let compiles = self.0.clone();
        Box::new(
            move |template: &CompiledTemplate, listener: &CompileListener| {
                let Some(module) = &template.hook_module else {
                    return Checked::Ready;
                };
                let mut compiles = lock(&compiles);
                match compiles.ended.get(&*module.sha256) {
                    Some(Ok(())) => Checked::Ready,
                    Some(Err(message)) => Checked::Refused(message.clone()),
                    None => {
                        if !compiles.running.contains_key(&*module.sha256) {
                            compiles.started += 1;
                        }
                        compiles
                            .running
                            .insert(module.sha256.to_string(), listener.clone());
                        Checked::Compiling
                    }
                }
            },
        )
    }

    /// Marks `bytes` compiled before anything asks for them.
    fn compiled(&self, bytes: &[u8]) {
        lock(&self.0).ended.insert(sha256_hex(bytes), Ok(()));
    }

    /// Ends the compile of `bytes` with `outcome` and tells the catalog, as the engine's
    /// hook runtime does from its compile thread.
    fn end(&self, bytes: &[u8], outcome: Result<(), String>) {
        let sha256 = sha256_hex(bytes);
        let listener = {
            let mut compiles = lock(&self.0);
            compiles.ended.insert(sha256.clone(), outcome);
            compiles.running.remove(&sha256)
        };
        listener.expect("the catalog asked for this compile")(&sha256);
    }

    fn started(&self) -> usize {
        lock(&self.0).started
    }
}

#[test]
fn a_revision_whose_hook_compiles_waits_while_the_other_templates_swap_in() {
    let dir = dir_with(&[
        ("a.yaml", hooked("a", "done")),
        ("b.yaml", template("b", "done")),
    ]);
    fs::write(dir.path().join("hook.wasm"), module(1)).expect("module");
    let compiler = FakeCompiler::default();
    compiler.compiled(&module(1));
    let live = LiveCatalog::new(dir.path()).with_check(compiler.check());
    live.reload().expect("compiles");
    let first_a = live.latest("a").expect("a").revision.clone();
    let first_b = live.latest("b").expect("b").revision.clone();

    // A new module for a (still compiling) and an edit of b: b swaps in at once.
    fs::write(dir.path().join("hook.wasm"), module(2)).expect("new module");
    fs::write(dir.path().join("b.yaml"), template("b", "finished")).expect("edit b");
    assert!(matches!(live.reload(), Ok(Reloaded::Swapped(_))));
    assert_ne!(
        live.latest("b").expect("b").revision,
        first_b,
        "b swapped in"
    );
    assert_eq!(
        live.latest("a").expect("a").revision,
        first_a,
        "the previous a serves while its new hook compiles"
    );
    assert!(live.last_error().is_none());
    let compiling = live.compiling();
    assert_eq!(compiling.len(), 1);
    assert_eq!(compiling[0].template, "a");
    assert_ne!(compiling[0].revision, *first_a);
    assert_eq!(compiling[0].hook_sha256, sha256_hex(&module(2)));
    assert!(compiling[0].since > 0);

    // Reloads meanwhile keep it waiting, and start no second compile.
    assert!(matches!(live.reload(), Ok(Reloaded::Unchanged(_))));
    assert_eq!(live.compiling(), compiling, "still listed, since unchanged");
    assert_eq!(compiler.started(), 1);

    // The compile ends: the catalog reloads by itself and the new a serves.
    compiler.end(&module(2), Ok(()));
    let second_a = live.latest("a").expect("a").revision.clone();
    assert_eq!(*second_a, compiling[0].revision);
    assert!(live.compiling().is_empty());
    assert!(
        live.revision("a", &first_a).is_some(),
        "the old a is retired"
    );

    // Another module fails to compile: reported like a refused check, the previous a serves.
    fs::write(dir.path().join("hook.wasm"), module(3)).expect("broken module");
    live.reload().expect("waits for the compile");
    assert_eq!(live.compiling().len(), 1);
    compiler.end(
        &module(3),
        Err("hook module refused: it does not link".to_owned()),
    );
    assert!(live.compiling().is_empty());
    assert_eq!(live.latest("a").expect("a").revision, second_a);
    let error = live.last_error().expect("the failed compile is reported");
    assert_eq!(error.diagnostics.len(), 1);
    assert_eq!(error.diagnostics[0].path, "spec.hooks.module");
    assert_eq!(
        error.diagnostics[0].message,
        "hook module refused: it does not link"
    );
    assert!(
        error.diagnostics[0]
            .file
            .as_deref()
            .is_some_and(|file| file.ends_with("a.yaml"))
    );
}

#[test]
fn a_new_template_whose_hook_compiles_is_absent_until_it_is_compiled() {
    let dir = dir_with(&[("b.yaml", template("b", "done"))]);
    fs::write(dir.path().join("hook.wasm"), module(1)).expect("module");
    let compiler = FakeCompiler::default();
    let live = LiveCatalog::new(dir.path()).with_check(compiler.check());
    live.reload().expect("compiles");

    // An upload answers at once: accepted, compiling.
    let upload = live.put("a", &hooked("a", "done")).expect("accepted");
    assert!(upload.created);
    assert!(upload.snapshot.catalog.latest("a").is_none());
    assert_eq!(upload.compiling.len(), 1);
    assert_eq!(upload.compiling[0].template, "a");
    assert_eq!(live.compiling(), upload.compiling);
    assert!(live.latest("a").is_none(), "not served while compiling");
    assert!(dir.path().join("a.yaml").is_file(), "written");

    // A module upload whose compile is running says so too.
    let replaced = live.put_module("hook.wasm", &module(2)).expect("accepted");
    assert_eq!(replaced.compiling.len(), 1);
    assert_eq!(replaced.compiling[0].hook_sha256, sha256_hex(&module(2)));
    assert_eq!(
        live.compiling(),
        replaced.compiling,
        "module 1 is no longer waited for"
    );

    // The first module's compile ending changes nothing any more; the second's serves a.
    compiler.end(&module(1), Ok(()));
    assert!(live.latest("a").is_none());
    compiler.end(&module(2), Ok(()));
    assert_eq!(
        *live.latest("a").expect("served").revision,
        replaced.compiling[0].revision
    );
    assert!(live.compiling().is_empty());
}

#[test]
fn a_settled_reload_waits_for_the_compiles_it_started() {
    let dir = dir_with(&[("a.yaml", hooked("a", "done"))]);
    fs::write(dir.path().join("hook.wasm"), module(1)).expect("module");
    let compiler = FakeCompiler::default();
    let live = Arc::new(LiveCatalog::new(dir.path()).with_check(compiler.check()));
    let ender = {
        let compiler = compiler.clone();
        let live = live.clone();
        std::thread::spawn(move || {
            let until = Instant::now() + Duration::from_secs(10);
            while live.compiling().is_empty() {
                assert!(Instant::now() < until, "the reload never started a compile");
                std::thread::sleep(Duration::from_millis(5));
            }
            compiler.end(&module(1), Ok(()));
        })
    };
    live.reload_settled().expect("compiles");
    assert!(live.latest("a").is_some(), "served once its hook compiled");
    ender.join().expect("ender");
}
