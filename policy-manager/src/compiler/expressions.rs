//! CEL expressions: compiling them and checking that they only use the variables the engine
//! provides where they run.
//!
//! `cel::Program::references()` also lists the variables that comprehension macros bind
//! (`t` in `threads.all(t, t.outcome == 'success')`), so it cannot tell a typo from a bound
//! name. [`free_variables`] walks the expression instead and leaves bound names out.

use std::collections::BTreeSet;
use std::panic::{AssertUnwindSafe, catch_unwind};

use crate::compiled::CostShape;
use cel::common::ast::{EntryExpr, Expr, IdedExpr, operators};

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
    /// Its comprehensions (`all`, `exists`, `exists_one`, `map`, `filter`) run inside each
    /// other's loops deeper than [`MAX_COMPREHENSION_NESTING`].
    #[error(
        "CEL expression nests comprehensions {0} deep (one inside another's loop); the limit \
         is {MAX_COMPREHENSION_NESTING}: each level multiplies the work by the length of a list"
    )]
    LoopsTooDeep(u32),
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
            _ => match cost_shape(&program).nesting {
                nesting if nesting > MAX_COMPREHENSION_NESTING => {
                    Err(ExpressionError::LoopsTooDeep(nesting))
                }
                _ => Ok(program),
            },
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

/// Deepest nesting of comprehensions accepted (one running inside another's loop; one in
/// another's range runs once and does not count). Each level multiplies an evaluation's work
/// by the length of a list the message or the conversation supplies, so the engine bounds
/// the cost at run time from this nesting (`CostShape::estimate`); above three levels that
/// bound refuses all but the tiniest lists, and no protocol rule seen needs more than two.
pub(crate) const MAX_COMPREHENSION_NESTING: u32 = 3;

/// Operators whose time grows with the size of their operands, lists or strings: `in` scans
/// a list, equality compares whole values, `+` copies lists and strings.
const SIZED_FUNCTIONS: &[&str] = &[
    operators::IN,
    operators::EQUALS,
    operators::NOT_EQUALS,
    operators::ADD,
];

/// Operators and functions whose time grows with the length of strings only (CEL orders no
/// lists or maps): ordering and substring tests.
const STRING_FUNCTIONS: &[&str] = &[
    operators::LESS,
    operators::LESS_EQUALS,
    operators::GREATER,
    operators::GREATER_EQUALS,
    "contains",
    "startsWith",
    "endsWith",
];

/// The shape of `program` that bounds what evaluating it costs.
pub(crate) fn cost_shape(program: &cel::Program) -> CostShape {
    let mut shape = CostShape::default();
    let mut accumulators = Vec::new();
    walk_cost(&program.expression().expr, 0, &mut accumulators, &mut shape);
    shape
}

/// Adds `expr`, evaluated inside `loops` nested comprehension loops, to `shape`.
/// `accumulators` are the enclosing comprehensions' accumulator names: the `@result + [x]`
/// step of `map` and `filter` appends in place, so it is not a sized operation.
fn walk_cost<'e>(
    expr: &'e Expr,
    loops: u32,
    accumulators: &mut Vec<&'e str>,
    shape: &mut CostShape,
) {
    shape.nodes = shape.nodes.saturating_add(1);
    match expr {
        Expr::Call(call) => {
            let operands: Vec<&IdedExpr> =
                call.target.iter().map(|t| &**t).chain(&call.args).collect();
            // An operand written as a literal, or built here as a list or map, is as small
            // as the expression's text; only two values from outside make a sized operation.
            let unbounded = operands
                .iter()
                .filter(|operand| match &operand.expr {
                    Expr::Literal(_) | Expr::List(_) | Expr::Map(_) | Expr::Struct(_) => false,
                    Expr::Ident(name) => !accumulators.contains(&name.as_str()),
                    _ => true,
                })
                .count();
            if unbounded == operands.len() && operands.len() >= 2 {
                let function = call.func_name.as_str();
                if SIZED_FUNCTIONS.contains(&function) {
                    shape.sized_degree = shape.sized_degree.max(loops + 1);
                } else if STRING_FUNCTIONS.contains(&function) {
                    shape.string_degree = shape.string_degree.max(loops + 1);
                }
            }
            for operand in operands {
                walk_cost(&operand.expr, loops, accumulators, shape);
            }
        }
        Expr::Select(select) => walk_cost(&select.operand.expr, loops, accumulators, shape),
        Expr::List(list) => {
            for element in &list.elements {
                walk_cost(&element.expr, loops, accumulators, shape);
            }
        }
        Expr::Map(map) => {
            for value in entry_values(map.entries.iter().map(|entry| &entry.expr)) {
                walk_cost(&value.expr, loops, accumulators, shape);
            }
        }
        Expr::Struct(object) => {
            for value in entry_values(object.entries.iter().map(|entry| &entry.expr)) {
                walk_cost(&value.expr, loops, accumulators, shape);
            }
        }
        Expr::Comprehension(c) => {
            // The range and the initial value are evaluated once, the result once after
            // the loop; the condition and the step once per element.
            walk_cost(&c.iter_range.expr, loops, accumulators, shape);
            walk_cost(&c.accu_init.expr, loops, accumulators, shape);
            shape.nesting = shape.nesting.max(loops + 1);
            accumulators.push(&c.accu_var);
            walk_cost(&c.loop_cond.expr, loops + 1, accumulators, shape);
            walk_cost(&c.loop_step.expr, loops + 1, accumulators, shape);
            accumulators.pop();
            walk_cost(&c.result.expr, loops, accumulators, shape);
        }
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

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

    fn shape(source: &str) -> CostShape {
        cost_shape(&compile(source).expect("valid CEL"))
    }

    #[test]
    fn loops_nest_inside_loops_not_inside_ranges() {
        let quadratic =
            shape("content.items.exists(x, content.items.exists(y, x == y + 100000000))");
        assert_eq!(quadratic.nesting, 2);
        // `x == y + 1` compares two values from outside the expression, in the inner loop.
        assert_eq!(quadratic.sized_degree, 3);
        let flat = shape("threads.all(t, t.outcome == 'success')");
        assert_eq!(
            (flat.nesting, flat.sized_degree),
            (1, 0),
            "a literal operand is small"
        );
        // The range of the outer `exists` runs once: one loop after another, not nested.
        let chained = shape("content.items.filter(x, x > 0).map(x, x * 2).exists(y, y == 4)");
        assert_eq!(chained.nesting, 1);
        assert_eq!(
            chained.sized_degree, 0,
            "map's `@result + [x]` appends in place"
        );
        let scan = shape("content.items.exists(x, x in parameters.allowed)");
        assert_eq!((scan.nesting, scan.sized_degree), (1, 2));
        let plain = shape("content.price > parameters.budget");
        assert_eq!((plain.nesting, plain.string_degree), (0, 1));
        assert!(!plain.needs_bound());
        assert!(plain.nodes >= 5, "{plain:?}");
    }

    #[test]
    fn the_estimate_grows_with_the_lists_and_the_nesting() {
        let quadratic =
            shape("content.items.exists(x, content.items.exists(y, x == y + 100000000))");
        let nodes = u64::from(quadratic.nodes);
        assert!(quadratic.estimate(4_000, 10) > nodes * 4_000 * 4_000);
        assert!(quadratic.estimate(10, 10) < quadratic.estimate(100, 10));
        let flat = shape("content.items.exists(x, x.price > 100)");
        assert_eq!(flat.estimate(1_000, 10), nodes_of(&flat) * 1_001);
        // A long string does not make loops longer; it makes sized operations on it longer.
        assert_eq!(flat.estimate(1_000, 1_000_000), flat.estimate(1_000, 0));
        let search = shape("content.words.exists(w, content.text.contains(w))");
        assert_eq!((search.nesting, search.string_degree), (1, 2));
        assert!(search.estimate(10, 1_000_000) > search.estimate(10, 0));
        assert_eq!(
            flat.estimate(usize::MAX, 0),
            u64::MAX,
            "saturates, never wraps"
        );
    }

    fn nodes_of(shape: &CostShape) -> u64 {
        u64::from(shape.nodes)
    }

    #[test]
    fn comprehensions_nested_too_deep_are_refused() {
        let three = "a.all(x, b.all(y, c.all(z, x + y + z > 0)))";
        assert_eq!(shape(three).nesting, MAX_COMPREHENSION_NESTING);
        let four = "a.all(w, b.all(x, c.all(y, d.all(z, w + x + y + z > 0))))";
        assert!(
            matches!(compile(four), Err(ExpressionError::LoopsTooDeep(4))),
            "four loops deep"
        );
        // As deep in text, but each in the previous one's range: they run one after another.
        let ranges = "a.filter(w, w > 0).filter(x, x > 1).filter(y, y > 2).all(z, z > 3)";
        assert_eq!(shape(ranges).nesting, 1);
    }
}
