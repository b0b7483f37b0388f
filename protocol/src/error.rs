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

impl ErrorBody {
    /// An error body with a code, a message and an optional pointer.
    pub fn new(code: &str, message: impl Into<String>, pointer: Option<String>) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: code.to_owned(),
                message: message.into(),
                pointer,
            },
        }
    }
}
