//! [`SdkError`]: everything a call can fail with.

use colloquy_protocol::ErrorBody;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum SdkError {
    /// The server answered with an error body.
    #[error("HTTP {status}: {} ({})", .body.error.message, .body.error.code)]
    Api {
        /// The status code.
        status: u16,
        /// The server's explanation.
        body: ErrorBody,
    },
    /// The server could not be reached, or the connection broke.
    #[error("transport: {0}")]
    Transport(#[from] reqwest::Error),
    /// The server answered something this client cannot read.
    #[error("unexpected answer: {0}")]
    Decode(String),
    /// A helper's time ran out before the final answer.
    #[error("no final answer in conversation `{conversation_id}` within the timeout")]
    Timeout {
        /// The conversation, which goes on without the helper.
        conversation_id: String,
    },
    /// A stream ended before the answer (the conversation was removed).
    #[error("the stream of conversation `{0}` ended before its final answer")]
    StreamEnded(String),
    /// The token provider failed, or gave something that is no token.
    #[error("token provider: {0}")]
    Token(String),
    /// A handler failed.
    #[error("handler: {0}")]
    Handler(String),
    /// A message could not be signed with the client's key.
    #[error("signing: {0}")]
    Signing(String),
}

impl SdkError {
    /// The HTTP status of an [`SdkError::Api`] error.
    pub fn status(&self) -> Option<u16> {
        match self {
            SdkError::Api { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// The error code of an [`SdkError::Api`] error.
    pub fn code(&self) -> Option<&str> {
        match self {
            SdkError::Api { body, .. } => Some(&body.error.code),
            _ => None,
        }
    }

    /// Whether retrying later may succeed (transport failures, 5xx).
    pub fn is_transient(&self) -> bool {
        match self {
            SdkError::Transport(_) | SdkError::StreamEnded(_) => true,
            SdkError::Api { status, .. } => *status >= 500,
            _ => false,
        }
    }
}
