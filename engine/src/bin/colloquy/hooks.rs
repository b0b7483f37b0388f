//! `colloquy hooks call TEMPLATE EVENT`: runs a template's hook once on an event, outside
//! any server, so a hook author sees what the engine would see: the answer, or the failure
//! in the words the engine logs, with how long the load and the calls took.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use colloquy_engine::runtime::{HookRuntime, HookRuntimeConfig};
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
