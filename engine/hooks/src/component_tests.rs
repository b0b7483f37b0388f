//! Unit tests of the component form, on components written in the WAT text format (the
//! Python and JavaScript builds run end to end in `tests/tests/e2e/components.rs`).

use super::tests::{call, runtime, scratch, template_from_bytes};
use super::*;

/// A component of the hooks world whose `message` answers `{"actions":["continue"]}`, and
/// loops forever when `loop` is set.
fn component(imports: &str, message: &str, body: &str) -> String {
    format!(
        r#"(component
  {imports}
  (core module $m
    (memory (export "memory") 1)
    (global $bump (mut i32) (i32.const 4096))
    (func (export "realloc") (param i32 i32 i32 i32) (result i32)
      (local $at i32)
      (local.set $at (global.get $bump))
      (global.set $bump (i32.add (global.get $bump) (local.get 3)))
      (local.get $at))
    (data (i32.const 0) "{{\"actions\":[\"continue\"]}}")
    (func (export "message") (param i32 i32) (result i32)
      {body}
      (i32.store (i32.const 512) (i32.const 0))
      (i32.store (i32.const 516) (i32.const 24))
      (i32.const 512)))
  (core instance $i (instantiate $m))
  (func (export "{message}") (param "event" string) (result string)
    (canon lift (core func $i "message") (memory (core memory $i "memory"))
      (realloc (core func $i "realloc")))))"#
    )
}

fn load(name: &str, wat: &str) -> Result<HookOutput, HookFailure> {
    let bytes = wat::parse_str(wat).expect("component WAT");
    call(&runtime(None), &template_from_bytes(name, &bytes))
}

#[test]
fn a_component_of_the_hooks_world_answers_and_is_reused() {
    let runtime = runtime(None);
    let bytes = wat::parse_str(component("", "message", "")).expect("WAT");
    assert_eq!(BinaryForm::of(&bytes), Ok(BinaryForm::Component));
    let template = template_from_bytes("component-good", &bytes);
    for _ in 0..3 {
        let output = call(&runtime, &template).expect("call");
        assert_eq!(output.actions.len(), 1);
    }
    let module = runtime.module(&template).expect("loaded");
    assert_eq!(module.form(), BinaryForm::Component);
    assert_eq!(module.idle_count(), 1, "one instance served every call");
}

#[test]
fn a_component_importing_wasi_is_refused_with_the_flag_that_drops_it() {
    let wasi = r#"(import "wasi:cli/environment@0.2.0" (instance
        (export "get-arguments" (func (result (list string))))))"#;
    match load("component-wasi", &component(wasi, "message", "")) {
        Err(HookFailure::World(detail)) => {
            assert!(detail.contains("`wasi:cli/environment@0.2.0`"), "{detail}");
            assert!(detail.contains("--stub-wasi"), "{detail}");
        }
        other => panic!("expected a world failure, got {other:?}"),
    }
}

#[test]
fn a_component_of_another_world_is_refused() {
    match load("component-other", &component("", "run", "")) {
        Err(HookFailure::World(detail)) => {
            assert!(detail.contains("none of `start`, `message`"), "{detail}")
        }
        other => panic!("expected a world failure, got {other:?}"),
    }
    let mistyped = r#"(component
  (core module $m (func (export "f") (param i32) (result i32) (local.get 0)))
  (core instance $i (instantiate $m))
  (func (export "message") (param "n" u32) (result u32) (canon lift (core func $i "f"))))"#;
    match load("component-mistyped", mistyped) {
        Err(HookFailure::World(detail)) => {
            assert!(
                detail.contains("expected `func(event: string) -> string`"),
                "{detail}"
            )
        }
        other => panic!("expected a world failure, got {other:?}"),
    }
}

#[test]
fn a_truncated_component_is_refused_at_load() {
    let bytes = wat::parse_str(component("", "message", "")).expect("WAT");
    let truncated = &bytes[..bytes.len() / 2];
    match call(
        &runtime(None),
        &template_from_bytes("component-cut", truncated),
    ) {
        Err(HookFailure::Compile(_)) => {}
        other => panic!("expected a compile failure, got {other:?}"),
    }
}

#[test]
fn a_looping_component_is_stopped_at_its_budget_and_replaced() {
    let runtime = runtime(None);
    let bytes = wat::parse_str(component("", "message", "(loop $spin (br $spin))")).expect("WAT");
    let template = template_from_bytes("component-loop", &bytes);
    let limit = template.hooks.as_ref().expect("hooks").limits.timeout_ms;
    assert_eq!(
        call(&runtime, &template),
        Err(HookFailure::Timeout { ms: limit })
    );
    let module = runtime.module(&template).expect("loaded");
    assert_eq!(module.idle_count(), 0, "a stopped instance is not reused");
}

#[test]
fn a_compiled_component_is_read_back_from_the_aot_cache() {
    let dir = scratch("aot-component");
    let bytes = wat::parse_str(component("", "message", "")).expect("WAT");
    let template = template_from_bytes("component-aot", &bytes);
    call(&runtime(Some(dir.clone())), &template).expect("first call compiles");
    let files: Vec<_> = std::fs::read_dir(&dir).expect("cache dir").collect();
    assert_eq!(files.len(), 1);
    call(&runtime(Some(dir)), &template).expect("from the cache");
}

#[test]
fn a_component_that_cannot_load_is_refused_before_it_compiles() {
    let parse = |wat: &str| wat::parse_str(wat).expect("component WAT");
    assert_eq!(
        module::precheck(&parse(&component("", "message", ""))),
        Ok(())
    );
    let wasi = r#"(import "wasi:cli/environment@0.2.0" (instance
        (export "get-arguments" (func (result (list string))))))"#;
    match module::precheck(&parse(&component(wasi, "message", ""))) {
        Err(HookFailure::World(detail)) => {
            assert!(detail.contains("`wasi:cli/environment@0.2.0`"), "{detail}");
            assert!(detail.contains("--stub-wasi"), "{detail}");
        }
        other => panic!("expected a world failure, got {other:?}"),
    }
    assert!(matches!(
        module::precheck(&parse(&component("", "run", ""))),
        Err(HookFailure::World(_))
    ));
    let bytes = parse(&component("", "message", ""));
    assert!(matches!(
        module::precheck(&bytes[..bytes.len() / 2]),
        Err(HookFailure::Compile(_))
    ));
    // The same words as the check after compiling.
    let engine = wasmtime::Engine::default();
    for bytes in [
        parse(&component(wasi, "message", "")),
        parse(&component("", "run", "")),
    ] {
        let compiled = wasmtime::component::Component::new(&engine, &bytes).expect("compiles");
        assert_eq!(
            component::check_world(&engine, &compiled).map(|_| ()),
            module::precheck(&bytes)
        );
    }
}
