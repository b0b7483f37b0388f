//! CEL expressions: compiling them and checking that they only use the variables the engine
//! provides where they run.
//!
//! `cel::Program::references()` also lists the variables that comprehension macros bind
//! (`t` in `threads.all(t, t.outcome == 'success')`), so it cannot tell a typo from a bound
//! name. [`free_variables`] walks the expression instead and leaves bound names out.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};

/// Where an expression runs, which decides the variables it sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// `actions.on_start`: no message yet.
    Start,
    /// Transition guards, routing rules, `actions.on_message`: about one message.
    Message,
    /// `outcome.rules`: over the threads of a finished conversation.
    Outcome,
    /// `actions.on_timeout`: a deadline passed or a retry came due.
    Timeout,
}

/// Variables every expression sees.
const COMMON_VARIABLES: &[&str] = &["parameters", "vars", "context", "conversation", "now"];
/// Added for expressions about a message.
const MESSAGE_VARIABLES: &[&str] = &["message", "content", "sender", "performative"];
/// Added for outcome rules.
const OUTCOME_VARIABLES: &[&str] = &["threads"];
/// Added for `on_timeout` rules.
const TIMEOUT_VARIABLES: &[&str] = &["timeout", "retry"];
/// CEL's type names, which are identifiers too (`type(x) == int`).
const CEL_TYPE_NAMES: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "int",
    "list",
    "map",
    "null_type",
    "string",
    "type",
    "uint",
];

/// Longest expression accepted. The parser recurses on nesting, so an unbounded expression
/// could exhaust the stack; real guards and rules are one line.
pub(crate) const MAX_EXPRESSION_BYTES: usize = 8 * 1024;

impl Scope {
    /// The variables an expression here may use, in the order diagnostics list them.
    pub(crate) fn variables(self) -> Vec<&'static str> {
        let extra: &[&str] = match self {
            Scope::Start => &[],
            Scope::Message => MESSAGE_VARIABLES,
            Scope::Outcome => OUTCOME_VARIABLES,
            Scope::Timeout => TIMEOUT_VARIABLES,
        };
        COMMON_VARIABLES.iter().chain(extra).copied().collect()
    }
}

/// Why an expression was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ExpressionError {
    /// It does not parse; one entry per parser error, with the position inside the expression.
    #[error("invalid CEL expression")]
    Syntax(Vec<String>),
    /// It is longer than [`MAX_EXPRESSION_BYTES`].
    #[error("CEL expression is {0} bytes long; the limit is {MAX_EXPRESSION_BYTES}")]
    TooLong(usize),
    /// It nests deeper than [`MAX_EXPRESSION_DEPTH`].
    #[error("CEL expression nests {0} levels deep; the limit is {MAX_EXPRESSION_DEPTH}")]
    TooDeep(usize),
    /// The parser panicked (a bug in the `cel` crate); the template is refused, not the process.
    #[error("the CEL parser failed on this expression")]
    ParserPanicked,
}

/// Parses `source`.
pub(crate) fn compile(source: &str) -> Result<cel::Program, ExpressionError> {
    if source.len() > MAX_EXPRESSION_BYTES {
        return Err(ExpressionError::TooLong(source.len()));
    }
    // `Program::compile` takes only the source text, so nothing is left half-updated if it
    // unwinds; a panic here must not take down a policy manager serving other templates.
    match catch_unwind(AssertUnwindSafe(|| cel::Program::compile(source))) {
        Ok(Ok(program)) => match depth(&program.expression().expr) {
            depth if depth > MAX_EXPRESSION_DEPTH => Err(ExpressionError::TooDeep(depth)),
            _ => Ok(program),
        },
        Ok(Err(errors)) => Err(ExpressionError::Syntax(
            errors
                .errors
                .iter()
                .map(|error| format!("{} (at {}:{})", error.msg, error.pos.0, error.pos.1))
                .collect(),
        )),
        Err(_) => Err(ExpressionError::ParserPanicked),
    }
}

/// Deepest nesting accepted. The engine evaluates expressions recursively on its worker
/// threads (2 MiB stacks), so depth, not length, is what could exhaust a stack; real
/// conditions nest a handful of levels.
pub(crate) const MAX_EXPRESSION_DEPTH: usize = 64;

/// How deeply `expr` nests.
fn depth(expr: &Expr) -> usize {
    let children: Vec<&IdedExpr> = match expr {
        Expr::Select(select) => vec![&select.operand],
        Expr::Call(call) => call
            .target
            .iter()
            .map(|t| &**t)
            .chain(call.args.iter())
            .collect(),
        Expr::List(list) => list.elements.iter().collect(),
        Expr::Map(map) => entry_values(map.entries.iter().map(|entry| &entry.expr)),
        Expr::Struct(object) => entry_values(object.entries.iter().map(|entry| &entry.expr)),
        Expr::Comprehension(c) => {
            vec![
                &c.iter_range,
                &c.accu_init,
                &c.loop_cond,
                &c.loop_step,
                &c.result,
            ]
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    };
    1 + children
        .into_iter()
        .map(|child| depth(&child.expr))
        .max()
        .unwrap_or(0)
}

/// The key and value expressions of map or struct entries.
fn entry_values<'e>(entries: impl Iterator<Item = &'e EntryExpr>) -> Vec<&'e IdedExpr> {
    entries
        .flat_map(|entry| match entry {
            EntryExpr::StructField(field) => vec![&field.value],
            EntryExpr::MapEntry(entry) => vec![&entry.key, &entry.value],
        })
        .collect()
}

/// The variables `program` uses without binding them itself, sorted.
pub(crate) fn free_variables(program: &cel::Program) -> BTreeSet<String> {
    let mut free = BTreeSet::new();
    let mut bound = Vec::new();
    collect(program.expression(), &mut bound, &mut free);
    free
}

/// Names free in `expr` given the names `bound` by enclosing comprehensions.
fn collect(expr: &IdedExpr, bound: &mut Vec<String>, free: &mut BTreeSet<String>) {
    match &expr.expr {
        Expr::Ident(name) => {
            if !bound.contains(name) {
                free.insert(name.clone());
            }
        }
        Expr::Select(select) => collect(&select.operand, bound, free),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                collect(target, bound, free);
            }
            for arg in &call.args {
                collect(arg, bound, free);
            }
        }
        Expr::List(list) => {
            for element in &list.elements {
                collect(element, bound, free);
            }
        }
        Expr::Map(map) => entries(map.entries.iter().map(|entry| &entry.expr), bound, free),
        Expr::Struct(object) => {
            entries(object.entries.iter().map(|entry| &entry.expr), bound, free);
        }
        Expr::Comprehension(comprehension) => {
            collect(&comprehension.iter_range, bound, free);
            collect(&comprehension.accu_init, bound, free);
            let depth = bound.len();
            bound.push(comprehension.iter_var.clone());
            bound.extend(comprehension.iter_var2.clone());
            bound.push(comprehension.accu_var.clone());
            collect(&comprehension.loop_cond, bound, free);
            collect(&comprehension.loop_step, bound, free);
            collect(&comprehension.result, bound, free);
            bound.truncate(depth);
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn entries<'e>(
    entries: impl Iterator<Item = &'e EntryExpr>,
    bound: &mut Vec<String>,
    free: &mut BTreeSet<String>,
) {
    for expr in entry_values(entries) {
        collect(expr, bound, free);
    }
}

/// The free variables of `program` that `scope` does not provide.
pub(crate) fn unknown_variables(program: &cel::Program, scope: Scope) -> Vec<String> {
    let allowed = scope.variables();
    free_variables(program)
        .into_iter()
        .filter(|name| {
            !allowed.contains(&name.as_str()) && !CEL_TYPE_NAMES.contains(&name.as_str())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn free(source: &str) -> Vec<String> {
        free_variables(&compile(source).expect("valid CEL"))
            .into_iter()
            .collect()
    }

    #[test]
    fn comprehension_variables_are_bound_not_free() {
        // `references()` reports `t` here; the walk must not.
        let program = compile("threads.all(t, t.outcome == 'success')").expect("valid CEL");
        assert!(program.references().has_variable("t"));
        assert_eq!(free("threads.all(t, t.outcome == 'success')"), ["threads"]);
        assert_eq!(
            free("threads.exists(t, t.state == vars.best)"),
            ["threads", "vars"]
        );
        assert_eq!(
            free("threads.filter(t, t.outcome == 'success').map(t, t.participant).size() > n"),
            ["n", "threads"]
        );
        assert_eq!(free("[1, 2].all(x, x > 0) && x"), ["x"]);
    }

    #[test]
    fn variables_in_every_kind_of_node_are_found() {
        assert_eq!(
            free("has(message.a) && {content.k: sender}[content.k] == [performative][0] && f(now)"),
            ["content", "message", "now", "performative", "sender"]
        );
    }

    #[test]
    fn scopes_decide_what_is_unknown() {
        let program =
            compile("content.amount > parameters.limit && threads.size() > 0").expect("valid CEL");
        assert_eq!(unknown_variables(&program, Scope::Message), ["threads"]);
        assert_eq!(unknown_variables(&program, Scope::Outcome), ["content"]);
        assert_eq!(
            unknown_variables(&program, Scope::Start),
            ["content", "threads"]
        );
        let typed = compile("type(retry) == int").expect("valid CEL");
        assert!(unknown_variables(&typed, Scope::Timeout).is_empty());
    }

    #[test]
    fn syntax_errors_and_oversized_expressions_are_refused() {
        assert!(
            matches!(compile("a +"), Err(ExpressionError::Syntax(errors)) if !errors.is_empty())
        );
        let long = "1 + ".repeat(MAX_EXPRESSION_BYTES) + "1";
        assert!(matches!(compile(&long), Err(ExpressionError::TooLong(_))));
        let deep = "1 + ".repeat(MAX_EXPRESSION_DEPTH + 1) + "1";
        assert!(
            matches!(compile(&deep), Err(ExpressionError::TooDeep(_))),
            "deep nesting"
        );
        assert!(
            compile(&("1 + ".repeat(20) + "1")).is_ok(),
            "ordinary nesting"
        );
    }
}
