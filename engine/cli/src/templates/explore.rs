//! `colloquy templates explore`: runs the model checker over one template and reports its
//! findings, each with a test case that shows it.
//!
//! Exit codes: 0 with no findings, 1 with findings, 2 when the template cannot be loaded.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use colloquy_core::clock::ManualClock;
use colloquy_policy::CompiledTemplate;
use colloquy_sandbox::explore::{Limits, explore};
use colloquy_sandbox::suite::load::{TemplateDirs, find_template, is_template_path};

/// What `templates explore` was asked.
pub struct ExploreOptions {
    /// A template name (in `dir`) or a template file.
    pub template: String,
    /// Where named templates are.
    pub dir: PathBuf,
    /// The search's bounds.
    pub limits: Limits,
    /// JSON instead of text.
    pub json: bool,
}

/// Runs the search and writes its report to `out`, problems loading to `err`.
pub fn run(
    options: &ExploreOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let template = match find(&options.template, &options.dir) {
        Ok(template) => template,
        Err(problem) => {
            writeln!(err, "{problem}")?;
            return Ok(ExitCode::from(2));
        }
    };
    let clock = Arc::new(ManualClock::new(colloquy_sandbox::TEST_EPOCH_MS));
    let hooks = colloquy_sandbox::hooks_on(&clock, template.hooks.is_some())?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let exploration = runtime.block_on(explore(&template, options.limits, &clock, hooks));
    if options.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&exploration)?)?;
    } else {
        let rate = exploration.sequences as f64 / exploration.seconds.max(1e-9);
        writeln!(
            out,
            "{}: {} sequences run, {} distinct states, participants {:?}, depth {}, in {:.3} s ({rate:.0} sequences/s){}",
            exploration.template,
            exploration.sequences,
            exploration.distinct_states,
            exploration.participant_counts,
            options.limits.depth,
            exploration.seconds,
            if exploration.stopped_at_limit {
                format!(
                    "; stopped at --max-states {} before exhausting the depth",
                    options.limits.max_states
                )
            } else {
                String::new()
            },
        )?;
        for finding in &exploration.findings {
            match &finding.at {
                Some(at) => writeln!(out, "{at}: {:?}: {}", finding.kind, finding.message)?,
                None => writeln!(out, "{:?}: {}", finding.kind, finding.message)?,
            }
            if let Some(case) = &finding.case {
                for line in case.lines() {
                    writeln!(out, "    {line}")?;
                }
            }
        }
        if exploration.findings.is_empty() {
            writeln!(out, "no findings")?;
        }
    }
    Ok(if exploration.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// A template by path (as given), or by name among `dir`'s.
fn find(reference: &str, dir: &Path) -> Result<Arc<CompiledTemplate>, String> {
    // A path is the caller's (relative to the working directory), not `dir`'s.
    let base = if is_template_path(reference) {
        Path::new("")
    } else {
        dir
    };
    find_template(base, reference, &mut TemplateDirs::default()).map_err(|(problem, hint)| {
        match hint {
            Some(hint) => format!("{problem}\n  hint: {hint}"),
            None => problem,
        }
    })
}
