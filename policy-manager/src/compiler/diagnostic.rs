//! What the compiler says about a broken template: one [`Diagnostic`] per problem, printed in
//! the `file:line:column: error: path: message` style of compilers so editors and terminals
//! can jump to it, and [`Diagnostics`], the error of every compile call.

use std::fmt;
use std::path::PathBuf;

/// One problem in a template.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Diagnostic {
    /// The template file, when the template came from one.
    pub file: Option<PathBuf>,
    /// 1-based line in the file, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// Where in the template, e.g. `spec.thread.states.requested.transitions[1].to`; empty for
    /// the document as a whole.
    pub path: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it, when the compiler has an idea.
    pub hint: Option<String>,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut wrote_location = false;
        if let Some(file) = &self.file {
            write!(f, "{}", file.display())?;
            wrote_location = true;
        }
        if let Some(line) = self.line {
            if wrote_location {
                f.write_str(":")?;
            }
            write!(f, "{line}")?;
            if let Some(column) = self.column {
                write!(f, ":{column}")?;
            }
            wrote_location = true;
        }
        if wrote_location {
            f.write_str(": ")?;
        }
        f.write_str("error: ")?;
        if !self.path.is_empty() {
            write!(f, "{}: ", self.path)?;
        }
        f.write_str(&self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// The problems found, ordered by file, then line and column (problems without a position
/// first within their file); at most 100 per file are listed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}", render(&self.list))]
pub struct Diagnostics {
    /// The problems listed; a file with more than 100 ends with one saying how many more it
    /// has.
    pub list: Vec<Diagnostic>,
    /// How many problems were found, listed or not.
    pub total: usize,
}

impl From<Vec<Diagnostic>> for Diagnostics {
    /// Every one listed, as they come (quotes cut, see [`MAX_QUOTED_CHARS`]).
    fn from(mut list: Vec<Diagnostic>) -> Diagnostics {
        list.iter_mut().for_each(Diagnostic::cut_quotes);
        Diagnostics {
            total: list.len(),
            list,
        }
    }
}

/// Longest text quoted in a diagnostic (between `"` or backticks), in characters; longer
/// quotes keep their start and end in `…`. Diagnostics go to logs, upload answers and
/// `/v1/status`: serde quotes a whole scalar, and a file that is not a template at all (a
/// link to `/etc/passwd` in the watched directory reads as one multi-line string) would be
/// quoted in full. The start says which text is at fault; what follows is the file's.
pub const MAX_QUOTED_CHARS: usize = 60;

/// Longest path, in characters: a path is made of the keys leading to a place, and a key
/// can be a whole line of a file.
pub const MAX_PATH_CHARS: usize = 200;

/// Longest message or hint, in characters (the longest the compiler writes, a list of the
/// fields allowed somewhere, is a few hundred).
pub const MAX_MESSAGE_CHARS: usize = 1000;

impl Diagnostic {
    /// Cuts quoted text past [`MAX_QUOTED_CHARS`], the message and hint past
    /// [`MAX_MESSAGE_CHARS`] and the path past [`MAX_PATH_CHARS`].
    fn cut_quotes(&mut self) {
        if let Some((end, _)) = self.path.char_indices().nth(MAX_PATH_CHARS) {
            self.path = format!("{}…", &self.path[..end]);
        }
        self.message = cut(&self.message);
        if let Some(hint) = &mut self.hint {
            *hint = cut(hint);
        }
    }
}

/// `text` with each quote (`"…"`, honouring `\` escapes, or `` `…` ``) longer than
/// [`MAX_QUOTED_CHARS`] cut to its start and `…`, and the whole cut at
/// [`MAX_MESSAGE_CHARS`].
fn cut(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_MESSAGE_CHARS + 8));
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        out.push(c);
        if c != '"' && c != '`' {
            continue;
        }
        let mut quoted = 0;
        let mut closed = false;
        while let Some(inner) = chars.next() {
            if inner == c {
                closed = true;
                break;
            }
            let escaped = (c == '"' && inner == '\\').then(|| chars.next()).flatten();
            quoted += 1;
            if quoted <= MAX_QUOTED_CHARS {
                out.push(inner);
                out.extend(escaped);
            } else if quoted == MAX_QUOTED_CHARS + 1 {
                out.push('…');
            }
        }
        if closed {
            out.push(c);
        }
    }
    match out.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((end, _)) => format!("{}…", &out[..end]),
        None => out,
    }
}

/// Problems listed per file; the rest are counted in one last diagnostic. A generated
/// template with a mistake repeated on every line would otherwise answer a 1.5 MB file with
/// 15 MB of errors (60 000 unknown fields), on the terminal or in an upload's 422 body.
pub(crate) const MAX_LISTED_PER_FILE: usize = 100;

impl Diagnostics {
    /// Wraps and orders diagnostics, listing at most [`MAX_LISTED_PER_FILE`] per file. The
    /// sort is stable, so problems at one position keep the order the checks found them in.
    pub fn sorted(mut diagnostics: Vec<Diagnostic>) -> Diagnostics {
        let total = diagnostics.len();
        diagnostics.iter_mut().for_each(Diagnostic::cut_quotes);
        diagnostics.sort_by(|a, b| (&a.file, a.line, a.column).cmp(&(&b.file, b.line, b.column)));
        let mut listed: Vec<Diagnostic> = Vec::with_capacity(diagnostics.len().min(256));
        let mut in_file = 0;
        let mut unlisted = 0;
        for diagnostic in diagnostics {
            let same_file = listed
                .last()
                .is_some_and(|last: &Diagnostic| last.file == diagnostic.file);
            if !same_file {
                push_unlisted(&mut listed, unlisted);
                in_file = 0;
                unlisted = 0;
            }
            if in_file < MAX_LISTED_PER_FILE {
                in_file += 1;
                listed.push(diagnostic);
            } else {
                unlisted += 1;
            }
        }
        push_unlisted(&mut listed, unlisted);
        Diagnostics {
            list: listed,
            total,
        }
    }

    /// How many problems were found: in messages, "N problems".
    pub fn count(&self) -> usize {
        self.total
    }
}

/// After the problems listed for a file: how many more it has, if any.
fn push_unlisted(listed: &mut Vec<Diagnostic>, unlisted: usize) {
    if unlisted == 0 {
        return;
    }
    let file = listed.last().and_then(|last| last.file.clone());
    listed.push(Diagnostic {
        file,
        line: None,
        column: None,
        path: String::new(),
        message: format!(
            "{unlisted} more problems in this file are not listed (only the first \
             {MAX_LISTED_PER_FILE} are)"
        ),
        hint: Some("fix the ones above and check again".to_owned()),
    });
}

fn render(diagnostics: &[Diagnostic]) -> String {
    diagnostics
        .iter()
        .map(Diagnostic::to_string)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Longest edit distance at which a name still counts as a likely typo.
const MAX_TYPO_DISTANCE: usize = 2;

/// The candidate closest to `name` if it is close enough to be a likely typo.
pub(crate) fn closest<'c>(
    name: &str,
    candidates: impl IntoIterator<Item = &'c str>,
) -> Option<&'c str> {
    candidates
        .into_iter()
        .map(|candidate| (edit_distance(name, candidate), candidate))
        .filter(|(distance, candidate)| {
            *distance > 0 && *distance <= MAX_TYPO_DISTANCE.min(candidate.len() / 2)
        })
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}

/// Levenshtein distance, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut current = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != *cb);
            current[j + 1] = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
        }
        previous = current;
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diagnostic(file: Option<&str>, line: Option<usize>, path: &str) -> Diagnostic {
        Diagnostic {
            file: file.map(PathBuf::from),
            line,
            column: line.map(|_| 7),
            path: path.to_owned(),
            message: "state `agred` does not exist".to_owned(),
            hint: None,
        }
    }

    #[test]
    fn display_omits_what_is_unknown() {
        let mut full = diagnostic(Some("t.yaml"), Some(12), "spec.x");
        full.hint = Some("known states: agreed".to_owned());
        assert_eq!(
            full.to_string(),
            "t.yaml:12:7: error: spec.x: state `agred` does not exist\n  hint: known states: agreed"
        );
        assert_eq!(
            diagnostic(Some("t.yaml"), None, "").to_string(),
            "t.yaml: error: state `agred` does not exist"
        );
        assert_eq!(
            diagnostic(None, Some(3), "a").to_string(),
            "3:7: error: a: state `agred` does not exist"
        );
        assert_eq!(
            diagnostic(None, None, "").to_string(),
            "error: state `agred` does not exist"
        );
    }

    #[test]
    fn diagnostics_are_ordered_by_file_then_line() {
        let sorted = Diagnostics::sorted(vec![
            diagnostic(Some("b.yaml"), Some(1), "first-b"),
            diagnostic(Some("a.yaml"), Some(9), "late-a"),
            diagnostic(Some("a.yaml"), Some(2), "early-a"),
        ]);
        let paths: Vec<_> = sorted.list.iter().map(|d| d.path.as_str()).collect();
        assert_eq!(paths, ["early-a", "late-a", "first-b"]);
    }

    #[test]
    fn at_most_a_hundred_problems_are_listed_per_file() {
        let mut many: Vec<Diagnostic> = (1..=250)
            .map(|line| diagnostic(Some("a.yaml"), Some(line), "a"))
            .collect();
        many.push(diagnostic(Some("b.yaml"), Some(1), "b"));
        let sorted = Diagnostics::sorted(many);
        assert_eq!(sorted.list.len(), MAX_LISTED_PER_FILE + 2);
        assert_eq!(sorted.count(), 251);
        let summary = &sorted.list[MAX_LISTED_PER_FILE];
        assert_eq!(summary.file, Some(PathBuf::from("a.yaml")));
        assert!(
            summary.message.starts_with("150 more problems"),
            "{summary}"
        );
        // The first lines are the ones kept, and the next file is listed on its own.
        assert_eq!(sorted.list[MAX_LISTED_PER_FILE - 1].line, Some(100));
        assert_eq!(sorted.list[MAX_LISTED_PER_FILE + 1].path, "b");
    }

    #[test]
    fn long_quotes_are_cut_to_their_start() {
        let secret = format!("root:x:0:0 {}", "SECRET-".repeat(100));
        let message = format!("invalid type: string {secret:?}, expected struct Template");
        let cut = cut(&message);
        assert!(
            cut.starts_with("invalid type: string \"root:x:0:0 SECRET-"),
            "{cut}"
        );
        assert!(cut.ends_with("…\", expected struct Template"), "{cut}");
        assert!(cut.chars().count() < 120, "{cut}");
        assert_eq!(cut.matches("SECRET").count(), 7);
        // Escapes are kept whole; short quotes and text outside quotes stay.
        assert_eq!(super::cut(r#"a "b\"c" `d` e"#), r#"a "b\"c" `d` e"#);
        let long_key = format!("unknown field `{}`", "k".repeat(500));
        assert_eq!(
            super::cut(&long_key).chars().count(),
            15 + MAX_QUOTED_CHARS + 2
        );
        let long = "x".repeat(MAX_MESSAGE_CHARS * 2);
        assert_eq!(super::cut(&long).chars().count(), MAX_MESSAGE_CHARS + 1);
    }

    #[test]
    fn close_names_are_suggested() {
        assert_eq!(closest("agred", ["agreed", "done"]), Some("agreed"));
        assert_eq!(closest("requets", ["request", "refuse"]), Some("request"));
        assert_eq!(closest("zzz", ["agreed", "done"]), None);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
