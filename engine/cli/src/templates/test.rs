//! `colloquy templates test`: runs the `*.test.yaml` cases at the paths given and reports
//! them as text, JSON or JUnit XML, with coverage on request.
//!
//! Exit codes: 0 when every case passed (and coverage is at or above `--threshold`); 1
//! when a case failed or coverage is below the threshold; 2 when a test file could not be
//! read, does not parse, or names a template that does not compile or does not exist (the
//! diagnostics go to stderr as `templates check` prints them, and the other files still
//! run).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use colloquy_core::clock::ManualClock;
use colloquy_sandbox::coverage::{Coverage, Kind};
use colloquy_sandbox::suite::load::{TemplateDirs, load};
use colloquy_sandbox::suite::run::{CaseReport, run_suite};
use colloquy_sandbox::suite::{compare::Difference, find_test_files};
use serde_json::{Value, json};

/// How the report is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per case, differences under each failure.
    Text,
    /// One JSON document, for tools.
    Json,
    /// JUnit XML, for CI systems.
    Junit,
}

/// What `templates test` was asked.
pub struct TestOptions {
    /// Files and folders.
    pub paths: Vec<PathBuf>,
    /// Only cases whose name or template contains this.
    pub filter: Option<String>,
    /// Report coverage.
    pub coverage: bool,
    /// Fail below this coverage, in percent (implies coverage).
    pub threshold: Option<f64>,
    /// How to write the report.
    pub format: Format,
}

/// Exit code of a test file that cannot be loaded.
const EXIT_UNLOADABLE: u8 = 2;

/// Runs the tests and writes the report to `out`, diagnostics to `err`.
pub fn test(
    options: &TestOptions,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    let files = find_test_files(&options.paths)?;
    if files.is_empty() {
        writeln!(
            err,
            "no test files (*.test.yaml) under {}",
            list(&options.paths)
        )?;
        return Ok(ExitCode::from(EXIT_UNLOADABLE));
    }
    let mut dirs = TemplateDirs::default();
    let mut suites = Vec::new();
    let mut unloadable = 0;
    for file in &files {
        match load(file, &mut dirs) {
            Ok(suite) => suites.push(suite),
            Err(diagnostics) => {
                unloadable += 1;
                writeln!(err, "{diagnostics}")?;
            }
        }
    }
    let clock = Arc::new(ManualClock::new(colloquy_sandbox::TEST_EPOCH_MS));
    let needs_hooks = suites.iter().any(|suite| {
        suite
            .templates
            .iter()
            .any(|template| template.hooks.is_some())
    });
    let hooks = colloquy_sandbox::hooks_on(&clock, needs_hooks)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let began = Instant::now();
    let mut reports: Vec<CaseReport> = Vec::new();
    for suite in &suites {
        let ran = runtime.block_on(run_suite(
            suite,
            &clock,
            hooks.clone(),
            options.filter.as_deref(),
        ));
        reports.extend(ran);
    }
    let seconds = began.elapsed().as_secs_f64();
    let coverage = (options.coverage || options.threshold.is_some()).then(|| {
        let mut coverage = Coverage::default();
        for report in &reports {
            coverage.add(&report.template, &report.events, &report.rules_fired);
        }
        coverage
    });
    let failed = reports.iter().filter(|report| !report.passed()).count();
    let below = match (&coverage, options.threshold) {
        (Some(coverage), Some(threshold)) => coverage.percent() < threshold,
        _ => false,
    };
    match options.format {
        Format::Text => text(out, &reports, seconds, coverage.as_ref(), options.threshold)?,
        Format::Json => {
            let document = json_report(&reports, seconds, coverage.as_ref(), unloadable);
            writeln!(out, "{}", serde_json::to_string_pretty(&document)?)?;
        }
        Format::Junit => junit(out, &reports)?,
    }
    Ok(if unloadable > 0 {
        ExitCode::from(EXIT_UNLOADABLE)
    } else if failed > 0 || below {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn list(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|path| path.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn title(report: &CaseReport) -> String {
    format!("{}: {}", report.template.name, report.name)
}

/// `path: expected …, got …` in the compiler's diagnostic style.
fn describe(step: &str, difference: &Difference) -> String {
    let mut line = step.to_owned();
    if !difference.path.is_empty() {
        line.push_str(": ");
        line.push_str(&difference.path);
    }
    line.push_str(&format!(
        ": expected {}, got {}",
        difference.expected, difference.got
    ));
    if let Some(note) = &difference.note {
        line.push_str(&format!(" ({note})"));
    }
    line
}

fn text(
    out: &mut dyn Write,
    reports: &[CaseReport],
    seconds: f64,
    coverage: Option<&Coverage>,
    threshold: Option<f64>,
) -> std::io::Result<()> {
    for report in reports {
        if report.passed() {
            writeln!(out, "ok      {}", title(report))?;
            continue;
        }
        writeln!(out, "FAILED  {}  ({})", title(report), report.at)?;
        for failure in &report.failures {
            writeln!(
                out,
                "  {}: error: {}",
                failure.at,
                describe(&failure.step, &failure.difference)
            )?;
        }
    }
    let failed = reports.iter().filter(|report| !report.passed()).count();
    let rate = if seconds > 0.0 {
        reports.len() as f64 / seconds
    } else {
        0.0
    };
    writeln!(
        out,
        "{} passed, {failed} failed: {} cases in {seconds:.3} s ({rate:.0} cases/s)",
        reports.len() - failed,
        reports.len(),
    )?;
    let Some(coverage) = coverage else {
        return Ok(());
    };
    writeln!(
        out,
        "coverage: {:.1}%{}",
        coverage.percent(),
        threshold
            .map(|t| format!(" (threshold {t}%)"))
            .unwrap_or_default()
    )?;
    for template in coverage.templates.values() {
        let counts: Vec<String> = Kind::ALL
            .iter()
            .map(|kind| {
                let (reached, total) = template.count(*kind);
                format!("{} {reached}/{total}", kind.label())
            })
            .collect();
        writeln!(out, "  {}: {}", template.template, counts.join(", "))?;
        let file = template
            .file
            .as_ref()
            .map(|f| f.display().to_string())
            .unwrap_or_default();
        for item in template.items.iter().filter(|item| !item.reached) {
            let at = match (item.line, item.column) {
                (Some(line), Some(column)) => format!("{file}:{line}:{column}"),
                _ => file.clone(),
            };
            writeln!(
                out,
                "    {at}: never reached: {} {}",
                kind_noun(item.kind),
                item.label
            )?;
        }
    }
    Ok(())
}

fn kind_noun(kind: Kind) -> &'static str {
    match kind {
        Kind::State => "state",
        Kind::Transition => "transition",
        Kind::Rule => "rule",
        Kind::CommitmentState => "commitment state",
    }
}

fn json_report(
    reports: &[CaseReport],
    seconds: f64,
    coverage: Option<&Coverage>,
    unloadable: usize,
) -> Value {
    let cases: Vec<Value> = reports
        .iter()
        .map(|report| {
            json!({
                "file": report.file,
                "template": report.template.name,
                "name": report.name,
                "at": report.at,
                "passed": report.passed(),
                "failures": report.failures.iter().map(|failure| json!({
                    "at": failure.at,
                    "step": failure.step,
                    "path": failure.difference.path,
                    "expected": failure.difference.expected,
                    "got": failure.difference.got,
                    "note": failure.difference.note,
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    let failed = reports.iter().filter(|report| !report.passed()).count();
    let mut document = json!({
        "passed": reports.len() - failed,
        "failed": failed,
        "unloadable_files": unloadable,
        "seconds": seconds,
        "cases": cases,
    });
    if let Some(coverage) = coverage {
        document["coverage"] = json!({
            "percent": coverage.percent(),
            "templates": coverage.templates.values().map(|template| {
                let counts: serde_json::Map<String, Value> = Kind::ALL.iter().map(|kind| {
                    let (reached, total) = template.count(*kind);
                    (kind.label().replace(' ', "_"), json!({ "reached": reached, "total": total }))
                }).collect();
                json!({
                    "template": template.template,
                    "file": template.file,
                    "counts": counts,
                    "unreached": template.items.iter().filter(|item| !item.reached).collect::<Vec<_>>(),
                })
            }).collect::<Vec<_>>(),
        });
    }
    document
}

fn junit(out: &mut dyn Write, reports: &[CaseReport]) -> std::io::Result<()> {
    writeln!(out, r#"<?xml version="1.0" encoding="UTF-8"?>"#)?;
    let failed = reports.iter().filter(|report| !report.passed()).count();
    writeln!(
        out,
        r#"<testsuites name="colloquy templates test" tests="{}" failures="{failed}">"#,
        reports.len()
    )?;
    let mut files: Vec<&PathBuf> = reports.iter().map(|report| &report.file).collect();
    files.dedup();
    for file in files {
        let of_file: Vec<&CaseReport> = reports
            .iter()
            .filter(|report| &report.file == file)
            .collect();
        let failures = of_file.iter().filter(|report| !report.passed()).count();
        writeln!(
            out,
            r#"  <testsuite name="{}" tests="{}" failures="{failures}">"#,
            xml(&file.display().to_string()),
            of_file.len()
        )?;
        for report in of_file {
            write!(
                out,
                r#"    <testcase classname="{}" name="{}" file="{}""#,
                xml(&report.template.name),
                xml(&report.name),
                xml(&report.at)
            )?;
            if report.passed() {
                writeln!(out, "/>")?;
                continue;
            }
            writeln!(out, ">")?;
            let details: Vec<String> = report
                .failures
                .iter()
                .map(|failure| {
                    format!(
                        "{}: {}",
                        failure.at,
                        describe(&failure.step, &failure.difference)
                    )
                })
                .collect();
            writeln!(
                out,
                r#"      <failure message="{}">{}</failure>"#,
                xml(details.first().map_or("", String::as_str)),
                xml(&details.join("\n"))
            )?;
            writeln!(out, "    </testcase>")?;
        }
        writeln!(out, "  </testsuite>")?;
    }
    writeln!(out, "</testsuites>")
}

/// Escapes text for an XML attribute or element.
fn xml(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => escaped.push(c),
        }
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSING: &str = "apiVersion: colloquy.dev/v1\nkind: TemplateTest\ntemplate: fipa-request\ncases:\n  \
        - name: refused\n    start:\n      initiator: alice\n      participants: [bob]\n      \
        message: { performative: request, content: { action: x } }\n    steps:\n      \
        - send: { from: bob, performative: refuse, content: {} }\n    expect: { outcome: refused }\n";

    /// A folder with fipa-request and the test files given.
    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("temp dir");
        let templates = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../templates");
        std::fs::copy(
            templates.join("fipa-request.yaml"),
            dir.path().join("fipa-request.yaml"),
        )
        .expect("copy");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        dir
    }

    fn run(dir: &Path, format: Format, threshold: Option<f64>) -> (ExitCode, String, String) {
        let options = TestOptions {
            paths: vec![dir.to_path_buf()],
            filter: None,
            coverage: false,
            threshold,
            format,
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = test(&options, &mut out, &mut err).expect("runs");
        (
            code,
            String::from_utf8(out).expect("UTF-8"),
            String::from_utf8(err).expect("UTF-8"),
        )
    }

    use std::path::Path;

    #[test]
    fn passing_failing_and_unloadable_files_have_their_own_exit_codes() {
        let dir = folder(&[("a.test.yaml", PASSING)]);
        let (code, out, _) = run(dir.path(), Format::Text, None);
        assert_eq!(code, ExitCode::SUCCESS, "{out}");
        assert!(out.contains("ok      fipa-request: refused"), "{out}");
        // One case reaches a few of fipa-request's items: far below 90%.
        let (code, out, _) = run(dir.path(), Format::Text, Some(90.0));
        assert_eq!(code, ExitCode::FAILURE, "{out}");

        let failing = PASSING.replace("outcome: refused", "outcome: success");
        let dir = folder(&[("a.test.yaml", &failing)]);
        let (code, out, _) = run(dir.path(), Format::Text, None);
        assert_eq!(code, ExitCode::FAILURE);
        assert!(
            out.contains(
                "a.test.yaml:12:15: error: expect: outcome: expected \"success\", got \"refused\""
            ),
            "{out}"
        );

        let dir = folder(&[("a.test.yaml", PASSING), ("b.test.yaml", "kind: [")]);
        let (code, out, err) = run(dir.path(), Format::Text, None);
        assert_eq!(code, ExitCode::from(EXIT_UNLOADABLE));
        assert!(err.contains("b.test.yaml:"), "{err}");
        assert!(
            out.contains("1 passed, 0 failed"),
            "the loadable file still runs: {out}"
        );
    }

    #[test]
    fn json_and_junit_reports_name_each_case_and_failure() {
        let failing = PASSING.replace("outcome: refused", "outcome: success");
        let dir = folder(&[("a.test.yaml", &failing)]);
        let (_, out, _) = run(dir.path(), Format::Json, None);
        let report: Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(report["failed"], 1);
        assert_eq!(report["cases"][0]["failures"][0]["path"], "outcome");
        assert_eq!(report["cases"][0]["failures"][0]["got"], "refused");
        let (_, out, _) = run(dir.path(), Format::Junit, None);
        assert!(out.starts_with("<?xml"), "{out}");
        assert!(
            out.contains(r#"<testcase classname="fipa-request" name="refused""#),
            "{out}"
        );
        assert!(out.contains("<failure message="), "{out}");
        assert!(out.trim_end().ends_with("</testsuites>"), "{out}");
    }
}
