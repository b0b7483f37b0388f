//! The one JSON error body every Colloquy API answers with:
//! `{"error": {"code", "message", "pointer"?}}`.

use serde::{Deserialize, Serialize};

/// The body of every error response.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong.
    pub error: ErrorDetail,
}

/// What went wrong, and where.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// A stable, machine-readable code such as `schema_violation` or `out_of_protocol`.
    pub code: String,
    /// A sentence for humans.
    pub message: String,
    /// JSON pointer into the request (RFC 6901) naming the offending field, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pointer: Option<String>,
}

/// Longest message or pointer an error body carries. Messages quote what the request said
/// (an unknown performative, template or field); a request of a megabyte must not come back
/// as an error of a megabyte, or three (the message, the pointer and the log).
pub const MAX_ERROR_TEXT_BYTES: usize = 512;

impl ErrorBody {
    /// An error body with a code, a message and an optional pointer, each cut to
    /// [`MAX_ERROR_TEXT_BYTES`].
    pub fn new(code: &str, message: impl Into<String>, pointer: Option<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: shortened(message.into()),
                pointer: pointer.map(shortened),
            },
        }
    }
}

/// `text` cut at a character boundary to at most [`MAX_ERROR_TEXT_BYTES`] (and what was cut
/// counted), or as it is.
fn shortened(text: String) -> String {
    if text.len() <= MAX_ERROR_TEXT_BYTES {
        return text;
    }
    let note = format!("… ({} bytes cut)", text.len());
    let mut end = MAX_ERROR_TEXT_BYTES - note.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let cut = text.len() - end;
    format!("{}… ({cut} bytes cut)", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_and_pointers_are_cut_and_short_ones_kept() {
        let short = ErrorBody::new("invalid", "no template named `x`", Some("/template".into()));
        assert_eq!(short.error.message, "no template named `x`");
        assert_eq!(short.error.pointer.as_deref(), Some("/template"));
        let name = "é".repeat(100_000);
        let long = ErrorBody::new(
            "unknown_template",
            format!("no template named `{name}`"),
            Some(format!("/{name}")),
        );
        for text in [
            &long.error.message,
            long.error.pointer.as_ref().expect("pointer"),
        ] {
            assert!(text.len() <= MAX_ERROR_TEXT_BYTES, "{} bytes", text.len());
            assert!(text.ends_with("bytes cut)"), "{text}");
        }
        assert!(long.error.message.starts_with("no template named `é"));
    }
}
