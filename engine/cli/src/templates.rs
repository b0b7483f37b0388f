//! `colloquy templates …`: check a template directory, print the template format's schema
//! (or the test format's), run template tests ([`test`]), search a template's conversations
//! ([`explore`]), replay recorded conversations against a candidate ([`replay`]), and stage,
//! ramp, promote or roll back a template on a running server ([`rollout`]).

pub mod explore;
pub mod replay;
pub mod rollout;
pub mod test;

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use colloquy_policy::TemplateCompiler;
use colloquy_protocol::template::template_json_schema;

/// Compiles every template in `dir`. On success writes one line per template (name,
/// revision, number of states, file) to `out`, and the templates' warnings
/// ([`colloquy_sandbox::lint`]) to `err`; on failure writes the compiler's diagnostics to
/// `err` and returns a failing exit code. With `deny_warnings`, a warning fails too.
pub fn check(
    dir: &Path,
    deny_warnings: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let templates = match TemplateCompiler::new().compile_dir(dir) {
        Ok(templates) => templates,
        Err(diagnostics) => {
            writeln!(err, "{diagnostics}")?;
            let count = diagnostics.count();
            let noun = if count == 1 { "problem" } else { "problems" };
            writeln!(err, "{}: {count} {noun}, no template loaded", dir.display())?;
            return Ok(ExitCode::FAILURE);
        }
    };
    let name_width = templates.iter().map(|t| t.name.len()).max().unwrap_or(0);
    for template in &templates {
        let file = template
            .source_path
            .as_deref()
            .map_or_else(|| "-".to_owned(), |path| path.display().to_string());
        writeln!(
            out,
            "{:<name_width$}  {}  {:>3} states  {file}",
            template.name,
            template.revision,
            template.machine.states.len(),
        )?;
    }
    let warnings: Vec<_> = templates
        .iter()
        .flat_map(colloquy_sandbox::lint::warnings)
        .collect();
    for warning in &warnings {
        writeln!(err, "{warning}")?;
    }
    if deny_warnings && !warnings.is_empty() {
        let noun = if warnings.len() == 1 {
            "warning"
        } else {
            "warnings"
        };
        writeln!(
            err,
            "{}: {} {noun}, denied (--deny warnings)",
            dir.display(),
            warnings.len()
        )?;
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// `templates diff OLD NEW`: what changes between two revisions of a template, in the
/// protocol's terms ([`colloquy_sandbox::diff`]). Exit 0 when nothing does, 1 when something
/// does, 2 when either file does not compile (its diagnostics on `err`).
pub fn diff(
    old: &Path,
    new: &Path,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let compiler = TemplateCompiler::new();
    let (before, after) = match (compiler.compile_file(old), compiler.compile_file(new)) {
        (Ok(before), Ok(after)) => (before, after),
        (before, after) => {
            for diagnostics in [before.err(), after.err()].into_iter().flatten() {
                writeln!(err, "{diagnostics}")?;
            }
            return Ok(ExitCode::from(2));
        }
    };
    let report = colloquy_sandbox::diff::DiffReport::between(&before, &after);
    let changes = &report.changes;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        writeln!(
            out,
            "{} {} → {} {}: {} change{}",
            before.name,
            before.revision,
            after.name,
            after.revision,
            changes.len(),
            if changes.len() == 1 { "" } else { "s" }
        )?;
        for change in changes {
            writeln!(out, "  {}: {}", change.path, change.what)?;
        }
    }
    Ok(if changes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Which format `templates schema` describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemaKind {
    /// A conversation template.
    Template,
    /// A template test file (`*.test.yaml`).
    Test,
}

/// Writes the JSON Schema of the template format (or the test file format), pretty-printed.
pub fn schema(kind: SchemaKind, out: &mut dyn Write) -> anyhow::Result<()> {
    let schema = match kind {
        SchemaKind::Template => template_json_schema(),
        SchemaKind::Test => colloquy_sandbox::suite::file::test_json_schema(),
    };
    let schema = serde_json::to_string_pretty(&schema)?;
    writeln!(out, "{schema}")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_lists_the_built_in_templates() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = check(&dir, true, &mut out, &mut err).expect("writes to memory");
        let out = String::from_utf8(out).expect("UTF-8");
        assert_eq!(code, ExitCode::SUCCESS, "{}", String::from_utf8_lossy(&err));
        let names: Vec<&str> = out
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert_eq!(
            names,
            [
                "a2a-task",
                "fipa-contract-net",
                "fipa-query",
                "fipa-request"
            ]
        );
        assert!(
            out.lines()
                .all(|l| l.contains("sha256:") && l.contains(" states ")),
            "{out}"
        );
    }

    #[test]
    fn diff_exits_0_for_the_same_revision_1_for_a_change_2_for_a_broken_file() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
        let request = dir.join("fipa-request.yaml");
        let run = |old: &Path, new: &Path| {
            let (mut out, mut err) = (Vec::new(), Vec::new());
            let code = diff(old, new, false, &mut out, &mut err).expect("writes to memory");
            (
                code,
                String::from_utf8(out).expect("UTF-8") + &String::from_utf8_lossy(&err),
            )
        };
        let (code, out) = run(&request, &request);
        assert_eq!(code, ExitCode::SUCCESS, "{out}");
        assert!(out.contains(": 0 changes"), "{out}");
        let (code, out) = run(&request, &dir.join("fipa-query.yaml"));
        assert_eq!(code, ExitCode::FAILURE, "{out}");
        assert!(out.contains("state queried added"), "{out}");
        let scratch = tempfile::tempdir().expect("temp dir");
        let broken = scratch.path().join("broken.yaml");
        std::fs::write(&broken, "kind: [").expect("write");
        let (code, out) = run(&request, &broken);
        assert_eq!(code, ExitCode::from(2), "{out}");
        assert!(out.contains("broken.yaml"), "{out}");
    }
}
