//! Warnings `colloquy templates check` prints beside the compiler's errors: findings of the
//! explorer's kind that need no search, because the template's text alone shows them.
//! The compiler's errors stay errors; these only warn (`--deny warnings` makes them fail a
//! CI run).
//!
//! - an outcome rule that can never decide: an earlier rule has no condition;
//! - a commitment deadline armed in a state the commitment can never be in.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;

use colloquy_policy::CompiledTemplate;
use colloquy_policy::locations::Locations;

/// One warning, placed in the template.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Warning {
    /// The template file.
    pub file: Option<PathBuf>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// Where in the template, e.g. `spec.outcome.rules[2]`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}:", file.display())?;
        }
        if let (Some(line), Some(column)) = (self.line, self.column) {
            write!(f, "{line}:{column}:")?;
        }
        write!(f, " warning: {}: {}", self.path, self.message)
    }
}

/// The warnings of `template`, in template order.
pub fn warnings(template: &CompiledTemplate) -> Vec<Warning> {
    let locations = template
        .source_path
        .as_ref()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .map(|source| Locations::index(&source));
    let mut found = Vec::new();
    let mut warn = |path: String, message: String| {
        let at = locations.as_ref().and_then(|l| l.nearest(&path));
        found.push(Warning {
            file: template.source_path.clone(),
            line: at.map(|at| at.line),
            column: at.map(|at| at.column),
            path,
            message,
        });
    };
    let spec = &template.source.spec;
    let rules = &spec.outcome.rules;
    if let Some(default) = rules.iter().position(|rule| rule.when.is_none()) {
        for index in default + 1..rules.len() {
            warn(
                format!("spec.outcome.rules[{index}]"),
                format!("never decides: rules[{default}] has no `when` and always matches first"),
            );
        }
    }
    for (index, commitment) in spec.commitments.iter().enumerate() {
        let Some(deadline) = &commitment.deadline else {
            continue;
        };
        let reachable: HashSet<_> = std::iter::once(commitment.initial)
            .chain(
                commitment
                    .transitions
                    .iter()
                    .map(|transition| transition.to),
            )
            .collect();
        for state in &deadline.armed_in {
            if !reachable.contains(state) {
                warn(
                    format!("spec.commitments[{index}].deadline.armed_in"),
                    format!(
                        "the deadline never arms in `{}`: the commitment starts `{}` and no \
                         transition leads to `{}`",
                        state.name(),
                        commitment.initial.name(),
                        state.name()
                    ),
                );
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use colloquy_policy::TemplateCompiler;

    use super::*;

    #[test]
    fn the_built_in_templates_have_no_warnings() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
        for template in TemplateCompiler::new().compile_dir(&dir).expect("compile") {
            assert_eq!(warnings(&template), [], "{}", template.name);
        }
    }

    #[test]
    fn shadowed_outcome_rules_and_unarmed_deadlines_are_placed() {
        // fipa-query's `answer` starts `active` and never goes back to `pending`.
        let source = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../templates/fipa-query.yaml"),
        )
        .expect("read")
        .replace("        armed_in: [active]", "        armed_in: [active, pending]")
        .replace(
            "  commitments:\n",
            "  outcome:\n    rules:\n      - outcome: success\n      - outcome: failure\n  commitments:\n",
        );
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("t.yaml");
        std::fs::write(&path, &source).expect("write");
        let template = TemplateCompiler::new()
            .compile_file(&path)
            .expect("compiles");
        let lines: Vec<String> = warnings(&template)
            .iter()
            .map(|w| {
                format!(
                    "{}:{}: {}",
                    w.line.unwrap_or(0),
                    w.column.unwrap_or(0),
                    w.path
                )
            })
            .collect();
        assert_eq!(
            lines,
            [
                "79:9: spec.outcome.rules[1]",
                "94:9: spec.commitments[0].deadline.armed_in"
            ]
        );
    }
}
