//! `colloquy hooks call TEMPLATE EVENT`: runs a template's hook once on an event, outside
//! any server, so a hook author sees what the engine would see: the answer, or the failure
//! in the words the engine logs, with how long the load and the calls took.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use colloquy_hooks::{HookRuntime, HookRuntimeConfig};
use colloquy_policy::TemplateCompiler;
use colloquy_protocol::hook::HookInput;

/// Compiles the template at `template`, loads its hook and calls it `repeat` times with the
/// event in the JSON file `event` (the hook input of docs/hook-input.schema.json; its `hook`
/// field names the lifecycle event). Writes the answer as JSON to `out`, timings to `err`.
pub fn call(
    template: &Path,
    event: &Path,
    repeat: u32,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let template = match TemplateCompiler::new().compile_file(template) {
        Ok(template) => template,
        Err(diagnostics) => {
            writeln!(err, "{diagnostics}")?;
            return Ok(ExitCode::FAILURE);
        }
    };
    let text = std::fs::read_to_string(event)
        .with_context(|| format!("cannot read {}", event.display()))?;
    let input: HookInput<'_> = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a hook event", event.display()))?;
    let runtime = HookRuntime::new(HookRuntimeConfig::default())?;
    let loading = Instant::now();
    if let Err(failure) = runtime.prepare(&template) {
        writeln!(err, "hook refused: {failure}")?;
        return Ok(ExitCode::FAILURE);
    }
    let loaded = loading.elapsed();
    let mut took = Vec::with_capacity(repeat as usize);
    let mut answer = None;
    for _ in 0..repeat.max(1) {
        let started = Instant::now();
        match runtime.call(&template, input.hook, &input) {
            Ok(output) => answer = Some(output),
            Err(failure) => {
                writeln!(err, "hook failed: {failure}")?;
                return Ok(ExitCode::FAILURE);
            }
        }
        took.push(started.elapsed());
    }
    if let Some(answer) = answer {
        writeln!(out, "{}", serde_json::to_string_pretty(&answer)?)?;
    }
    let first = took[0];
    took.sort();
    writeln!(
        err,
        "loaded in {}, first call {}, median of {} calls {}",
        shown(loaded),
        shown(first),
        took.len(),
        shown(took[took.len() / 2]),
    )?;
    Ok(ExitCode::SUCCESS)
}

fn shown(duration: Duration) -> String {
    if duration < Duration::from_millis(1) {
        format!("{} µs", duration.as_micros())
    } else {
        format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEMPLATE: &str = r#"
apiVersion: colloquy.dev/v1
kind: ConversationTemplate
metadata: { name: unit, version: 1.0.0 }
spec:
  roles: { participants: { min: 1 } }
  thread:
    initial: open
    on_expiry: done
    states:
      open: { transitions: [{ performative: inform, from: initiator, to: done }] }
      done: { terminal: success }
  hooks: { module: hook.wasm, events: [on_message] }
"#;

    const EVENT: &str = r#"{"abi_version": 1, "hook": "on_message", "now": 1,
        "conversation": {"id": "c", "status": "active", "retry_attempts": 0},
        "config": null}"#;

    /// A module whose `message` runs `body`, then answers `{"actions":["continue"]}`.
    fn module(body: &str) -> Vec<u8> {
        wat::parse_str(format!(
            r#"(module
  (memory (export "memory") 1)
  (data (i32.const 0) "{{\"actions\":[\"continue\"]}}")
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 4096))
  (func (export "message") (param i32 i32) (result i32)
    {body}
    (i32.store (i32.const 2048) (i32.const 0))
    (i32.store (i32.const 2052) (i32.const 24))
    (i32.const 2048)))"#
        ))
        .expect("WAT")
    }

    fn run(body: &str, event: &str) -> (anyhow::Result<ExitCode>, String, String) {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("unit.yaml"), TEMPLATE).expect("template");
        std::fs::write(dir.path().join("hook.wasm"), module(body)).expect("module");
        std::fs::write(dir.path().join("event.json"), event).expect("event");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = call(
            &dir.path().join("unit.yaml"),
            &dir.path().join("event.json"),
            3,
            &mut out,
            &mut err,
        );
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("UTF-8");
        (code, text(out), text(err))
    }

    #[test]
    fn a_hook_is_called_and_its_answer_printed() {
        let (code, out, err) = run("", EVENT);
        assert_eq!(code.expect("runs"), ExitCode::SUCCESS, "{err}");
        let answer: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(answer["actions"], serde_json::json!(["continue"]));
        assert!(err.contains("median of 3 calls"), "{err}");
    }

    #[test]
    fn a_failing_hook_and_a_bad_event_are_reported() {
        let (code, out, err) = run("unreachable", EVENT);
        assert_eq!(code.expect("runs"), ExitCode::FAILURE);
        assert!(out.is_empty(), "{out}");
        assert!(err.contains("hook failed: the hook trapped"), "{err}");
        let (code, _, _) = run("", r#"{"hook": "on_message"}"#);
        let error = code.expect_err("not an event");
        assert!(
            format!("{error:#}").contains("is not a hook event"),
            "{error:#}"
        );
    }
}
