//! Outside text as it may appear in a log line: it must not start a new line or send a
//! terminal escape sequence.
//!
//! - [`LogSafe`], for ids from a request. A conversation id from a URL path or a start body,
//!   a template name or an agent id from a path goes into the request's span before anything
//!   has checked it, and tracing-subscriber writes span fields as they are. A valid id
//!   ([`crate::ids::is_id`]) is written unchanged, anything else quoted and escaped, and
//!   cut after [`MAX_SHOWN_CHARS`] characters.
//! - [`OneLine`], for prose from a hook (its `log` lines). tracing-subscriber escapes ESC and
//!   a few other control characters in a message, but not line breaks; this escapes every
//!   control character.

use std::fmt;

/// A request-supplied string, written safely by `Display`; see the module docs.
pub struct LogSafe<'a>(pub &'a str);

/// Characters of a string that is not an id written before the rest is elided: enough to
/// recognise it, while a megabyte "template name" stays a short log field.
pub const MAX_SHOWN_CHARS: usize = 128;

impl fmt::Display for LogSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if crate::ids::is_id(self.0) {
            return f.write_str(self.0);
        }
        match self.0.char_indices().nth(MAX_SHOWN_CHARS) {
            None => write!(f, "{:?}", self.0),
            Some((end, _)) => write!(f, "{:?}…({} bytes)", &self.0[..end], self.0.len()),
        }
    }
}

/// Prose written on one line, its control characters escaped (`\n`, `\u{1b}`); see the
/// module docs.
pub struct OneLine<'a>(pub &'a str);

impl fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        while let Some(at) = rest.find(char::is_control) {
            f.write_str(&rest[..at])?;
            let control = rest[at..].chars().next().unwrap_or_default();
            write!(f, "{}", control.escape_default())?;
            rest = &rest[at + control.len_utf8()..];
        }
        f.write_str(rest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_written_as_they_are_and_anything_else_quoted_and_escaped() {
        let shown = |text: &str| LogSafe(text).to_string();
        assert_eq!(
            shown("01a22c91-4a94-70a5:x_y.z"),
            "01a22c91-4a94-70a5:x_y.z"
        );
        assert_eq!(shown("a\n2026 INFO forged"), "\"a\\n2026 INFO forged\"");
        assert_eq!(shown("\u{1b}[31mred"), "\"\\u{1b}[31mred\"");
        assert_eq!(shown(""), "\"\"");
        assert_eq!(
            shown(&"a".repeat(300)),
            format!("{:?}…(300 bytes)", "a".repeat(MAX_SHOWN_CHARS))
        );
    }

    #[test]
    fn prose_stays_on_one_line() {
        let shown = |text: &str| OneLine(text).to_string();
        assert_eq!(shown("score 640, référé"), "score 640, référé");
        assert_eq!(
            shown("done\n2026-11-30 INFO forged\r\u{1b}[2J\u{85}"),
            "done\\n2026-11-30 INFO forged\\r\\u{1b}[2J\\u{85}"
        );
    }
}
