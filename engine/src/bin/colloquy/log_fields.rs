//! How log lines write their fields: as tracing-subscriber's default does (`name=value`,
//! separated by spaces, the message bare), but plain strings go straight to the line.
//!
//! Why: every request runs inside a `conversation` span whose `id` field the fmt layer
//! formats when the span is created, so it can print it on any line logged inside. The
//! default formatter writes every field through `Debug`, one `core::fmt` call per piece;
//! for the id of one span that was about 3,300 instructions, a tenth of what the whole
//! request costs outside the kernel (`valgrind --tool=callgrind` over `--bench api` with the
//! `serve` subscriber). Ids and names are plain (letters, digits and a few marks, as the
//! API allows for ids), so they are written as they are; any other string is quoted and
//! escaped as before.

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The `colloquy` binary's field formatter; see the module docs.
#[derive(Clone, Copy, Debug, Default)]
pub struct LogFields;

impl<'writer> FormatFields<'writer> for LogFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = FieldWriter {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct FieldWriter<'writer> {
    writer: Writer<'writer>,
    first: bool,
    result: fmt::Result,
}

impl FieldWriter<'_> {
    /// Writes the separator and `name=`, or nothing before the message.
    fn name(&mut self, field: &Field) -> fmt::Result {
        if !std::mem::take(&mut self.first) {
            self.writer.write_char(' ')?;
        }
        match field.name() {
            "message" => Ok(()),
            name => {
                let name = name.strip_prefix("r#").unwrap_or(name);
                if self.writer.has_ansi_escapes() {
                    // As the default formatter styles them: the name italic, `=` dimmed.
                    write!(self.writer, "\x1b[3m{name}\x1b[0m\x1b[2m=\x1b[0m")
                } else {
                    self.writer.write_str(name)?;
                    self.writer.write_char('=')
                }
            }
        }
    }
}

impl FieldWriter<'_> {
    /// The separator, `name=` and a plain `value` in one piece, if it fits.
    fn assembled(&mut self, field: &Field, value: &str) -> Option<Piece> {
        let name = field.name();
        let name = name.strip_prefix("r#").unwrap_or(name);
        let separator: &[u8] = if self.first { b"" } else { b" " };
        let mut piece = Piece::default();
        for part in [separator, name.as_bytes(), b"=", value.as_bytes()] {
            piece.push(part)?;
        }
        self.first = false;
        Some(piece)
    }
}

/// A short piece of a line, on the stack.
struct Piece {
    bytes: [u8; 128],
    len: usize,
}

impl Default for Piece {
    fn default() -> Piece {
        Piece {
            bytes: [0; 128],
            len: 0,
        }
    }
}

impl Piece {
    fn push(&mut self, part: &[u8]) -> Option<()> {
        let end = self.len + part.len();
        self.bytes.get_mut(self.len..end)?.copy_from_slice(part);
        self.len = end;
        Some(())
    }

    fn as_str(&self) -> &str {
        // Field names are identifiers and plain values ASCII: always UTF-8.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl Visit for FieldWriter<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        if field.name() == "message" || !is_plain(value) {
            return self.record_debug(field, &value);
        }
        if !self.writer.has_ansi_escapes()
            && let Some(piece) = self.assembled(field, value)
        {
            // One write, so the span's string is allocated once, at its size.
            self.result = self.writer.write_str(piece.as_str());
            return;
        }
        self.result = self.name(field).and_then(|()| self.writer.write_str(value));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        self.result = self
            .name(field)
            .and_then(|()| write!(self.writer, "{value:?}"));
    }
}

/// Whether `value` reads the same unquoted: non-empty, and only letters, digits and
/// `- _ . : / ( )`.
fn is_plain(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || b"-_.:/()".contains(&byte))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::fmt::MakeWriter;

    use super::*;

    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("lock").extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Captured {
            self.clone()
        }
    }

    fn logged<N>(fields: N) -> String
    where
        N: for<'w> FormatFields<'w> + Send + Sync + 'static,
    {
        let captured = Captured::default();
        let subscriber = tracing_subscriber::fmt()
            .fmt_fields(fields)
            .with_writer(captured.clone())
            .with_ansi(false)
            .without_time()
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            let id = "01a22c0a-f4fd-73df-a800-9f00448001fb";
            let span = tracing::info_span!("conversation", id, template = "fipa-request");
            span.in_scope(|| {
                tracing::warn!(
                    agent = "bob",
                    reason = "a \"quoted\" reason",
                    attempts = 3,
                    empty = "",
                    "hook failed: {}",
                    "trap"
                );
            });
        });
        let bytes = captured.0.lock().expect("lock").clone();
        String::from_utf8(bytes).expect("utf-8")
    }

    #[test]
    fn lines_read_as_with_the_default_formatter() {
        let ours = logged(LogFields);
        assert_eq!(
            ours,
            " WARN conversation{id=01a22c0a-f4fd-73df-a800-9f00448001fb template=fipa-request}: \
             colloquy::log_fields::tests: hook failed: trap agent=bob \
             reason=\"a \\\"quoted\\\" reason\" attempts=3 empty=\"\"\n"
        );
        // The default writes plain strings quoted; everything else the same.
        let default = logged(tracing_subscriber::fmt::format::DefaultFields::new());
        assert_eq!(
            default,
            ours.replace(
                "=01a22c0a-f4fd-73df-a800-9f00448001fb",
                "=\"01a22c0a-f4fd-73df-a800-9f00448001fb\""
            )
            .replace("=fipa-request", "=\"fipa-request\"")
            .replace("agent=bob", "agent=\"bob\"")
        );
    }

    #[test]
    fn only_strings_of_the_id_alphabet_are_plain() {
        assert!(is_plain("01a22c0a-f4fd-73df-a800-9f00448001fb"));
        assert!(is_plain("fipa-request"));
        assert!(is_plain("(new)"));
        assert!(!is_plain(""));
        assert!(!is_plain("two words"));
        assert!(!is_plain("quote\""));
        assert!(!is_plain("line\nbreak"));
        assert!(!is_plain("équipe"));
    }
}
