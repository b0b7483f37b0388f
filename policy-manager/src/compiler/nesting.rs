//! A linear pre-check of how deeply a template nests flow collections (`[...]`, `{...}`),
//! before any YAML parser sees it.
//!
//! The YAML scanner behind serde (libyaml's) looks at every open flow level for each token it
//! reads, so its time grows with tokens × depth: a 200 KB file of nested `[` took 19 s before
//! the parser's recursion limit (128) refused it. No template nests flow collections that
//! deeply, so a deeper one is refused here, in one pass, with its position.
//!
//! The count skips quoted scalars and comments. It does not know block scalars (`|`, `>`),
//! whose text is counted like the rest: it only errs towards counting brackets in prose,
//! and [`MAX_FLOW_DEPTH`] is far above the parser's own limit, so no template the parser
//! accepts is refused.

/// Deepest flow nesting let through to the parser, which refuses anything past 128 itself.
pub const MAX_FLOW_DEPTH: usize = 256;

/// Where flow nesting first passes [`MAX_FLOW_DEPTH`]: 1-based line and column.
#[derive(Debug, PartialEq, Eq)]
pub struct TooDeep {
    pub line: usize,
    pub column: usize,
}

/// `None` when `source` never nests flow collections past `MAX_FLOW_DEPTH`.
pub fn too_deep(source: &str) -> Option<TooDeep> {
    #[derive(PartialEq)]
    enum In {
        Plain,
        Single,
        Double,
        Comment,
    }
    let mut state = In::Plain;
    let mut depth = 0usize;
    let (mut line, mut column) = (1, 0);
    let mut previous = '\n';
    let mut chars = source.chars();
    while let Some(c) = chars.next() {
        column += 1;
        match state {
            In::Plain => match c {
                '[' | '{' => {
                    depth += 1;
                    if depth > MAX_FLOW_DEPTH {
                        return Some(TooDeep { line, column });
                    }
                }
                ']' | '}' => depth = depth.saturating_sub(1),
                '"' => state = In::Double,
                '\'' => state = In::Single,
                '#' if previous.is_whitespace() => state = In::Comment,
                _ => {}
            },
            In::Double => match c {
                '\\' => {
                    // The escaped character cannot end the scalar.
                    if chars.next() == Some('\n') {
                        (line, column) = (line + 1, 0);
                    } else {
                        column += 1;
                    }
                }
                '"' => state = In::Plain,
                _ => {}
            },
            // A doubled quote inside is read as an end and a start: same state after both.
            In::Single if c == '\'' => state = In::Plain,
            In::Single | In::Comment => {}
        }
        if c == '\n' {
            (line, column) = (line + 1, 0);
            if state == In::Comment {
                state = In::Plain;
            }
        }
        previous = c;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nested(depth: usize) -> String {
        format!("a: {}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn nesting_up_to_the_limit_passes_and_past_it_is_placed() {
        assert_eq!(too_deep(&nested(MAX_FLOW_DEPTH)), None);
        assert_eq!(
            too_deep(&format!("x: 1\n{}", nested(MAX_FLOW_DEPTH + 1))),
            Some(TooDeep {
                line: 2,
                column: 4 + MAX_FLOW_DEPTH
            })
        );
        // Closed collections do not add up.
        assert_eq!(too_deep(&"[]{}".repeat(10_000)), None);
    }

    #[test]
    fn brackets_in_quotes_and_comments_do_not_count() {
        let open = "[".repeat(MAX_FLOW_DEPTH + 1);
        assert_eq!(too_deep(&format!("a: \"{open}\"\n")), None);
        assert_eq!(too_deep(&format!("a: \"\\\"{open}\"\n")), None);
        assert_eq!(too_deep(&format!("a: 'it''s {open}'\n")), None);
        assert_eq!(too_deep(&format!("a: 1 # {open}\nb: 2\n")), None);
        // A `#` inside a word is not a comment.
        assert!(too_deep(&format!("a: x#{open}\n")).is_some());
    }
}
