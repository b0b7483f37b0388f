//! [`ApiError`]: the one error type of the HTTP service, and the one place where failures
//! become status codes. 4xx bodies say what was wrong and where; 5xx bodies are generic and
//! the details go to the log.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use colloquy_protocol::ErrorBody;

use super::json::JsonResponse;
use colloquy_core::error::{EngineError, ErrorKind};

/// `Retry-After` of a 503: store outages (a Redis restart, a failover) last seconds, and
/// a message retried with the same `message_id` is never applied twice.
pub const RETRY_AFTER_SECONDS: &str = "1";

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The engine refused or failed.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// The request is malformed (unreadable JSON, a wrong field, a bad query string).
    #[error("{message}")]
    BadRequest {
        /// A stable code: `malformed_json`, `invalid_body`, `invalid_query`, ….
        code: &'static str,
        /// What is wrong.
        message: String,
        /// JSON pointer into the body, when the problem is in a field.
        pointer: Option<String>,
    },
    /// No credentials, or credentials nobody issued.
    #[error("{0}")]
    Unauthenticated(String),
    /// Authenticated, but this caller may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// No such route or resource.
    #[error("{0}")]
    NotFound(String),
    /// No such resource, of a kind its code names (`unknown_agent`, `unknown_key`, …): a
    /// route that exists, asked about something that does not.
    #[error("{message}")]
    Absent {
        /// A stable code naming what is missing.
        code: &'static str,
        /// What is missing.
        message: String,
    },
    /// The request is well formed but the resource's state refuses it (promoting a revision
    /// that is not the candidate, a rollback with nothing to go back to).
    #[error("{message}")]
    Conflict {
        /// A stable code: `not_the_candidate`, `no_previous_revision`, ….
        code: &'static str,
        /// What conflicts.
        message: String,
    },
    /// The route exists but not with this method.
    #[error("method not allowed")]
    MethodNotAllowed,
    /// The body is over the limit.
    #[error("request body is over the limit of {0} bytes")]
    TooLarge(usize),
    /// The body did not arrive in time.
    #[error("the request body did not arrive within {0} s")]
    BodyTimeout(u64),
    /// The server failed outside the engine (its audit key could not sign).
    #[error("{0}")]
    Internal(String),
    /// Nobody can serve it just now (a conversation changing owner): retry.
    #[error("{0}")]
    Unavailable(String),
}

impl ApiError {
    /// The status code this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Engine(error) => match error.kind() {
                ErrorKind::BadRequest => StatusCode::BAD_REQUEST,
                ErrorKind::Forbidden => StatusCode::FORBIDDEN,
                ErrorKind::NotFound => StatusCode::NOT_FOUND,
                ErrorKind::Conflict => StatusCode::CONFLICT,
                ErrorKind::Gone => StatusCode::GONE,
                ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
                ErrorKind::Unprocessable => StatusCode::UNPROCESSABLE_ENTITY,
                ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
                ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
            },
            ApiError::BadRequest { .. } => StatusCode::BAD_REQUEST,
            ApiError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) | ApiError::Absent { .. } => StatusCode::NOT_FOUND,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The machine-readable code of the error body.
    pub fn code(&self) -> &'static str {
        match self {
            ApiError::Engine(error) => error.code(),
            ApiError::BadRequest { code, .. } => code,
            ApiError::Unauthenticated(_) => "unauthenticated",
            ApiError::Forbidden(_) => "forbidden",
            ApiError::NotFound(_) => "not_found",
            ApiError::Absent { code, .. } => code,
            ApiError::Conflict { code, .. } => code,
            ApiError::MethodNotAllowed => "method_not_allowed",
            ApiError::TooLarge(_) => "body_too_large",
            ApiError::BodyTimeout(_) => "body_timeout",
            ApiError::Internal(_) => "internal",
            ApiError::Unavailable(_) => "unavailable",
        }
    }

    /// The JSON body.
    pub fn body(&self) -> ErrorBody {
        match self {
            ApiError::Engine(error) => error.to_body(),
            ApiError::BadRequest { pointer, .. } => {
                ErrorBody::new(self.code(), self.to_string(), pointer.clone())
            }
            _ => ErrorBody::new(self.code(), self.to_string(), None),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(error = %self, debug = ?self, "request failed");
        }
        let mut response = (status, JsonResponse(self.body())).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"colloquy\""),
            );
        }
        if matches!(
            self,
            ApiError::Engine(EngineError::Store(
                colloquy_core::store::StoreError::Fenced(_)
            ))
        ) {
            // Nothing was applied: the ownership layer routes the request again.
            response
                .headers_mut()
                .insert(crate::ownership::MOVED, HeaderValue::from_static("fenced"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            // The store is out of reach (e.g. Redis restarting), or the hook pool is full;
            // the write did not happen.
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colloquy_core::store::StoreError;

    #[test]
    fn server_errors_hide_their_details() {
        let error = ApiError::from(EngineError::Store(StoreError::Internal(
            "disk on fire at /var/secret".into(),
        )));
        assert_eq!(error.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = serde_json::to_string(&error.body()).expect("serializable");
        assert!(!body.contains("secret"), "{body}");
    }

    #[test]
    fn every_engine_kind_has_its_status() {
        let conflict = ApiError::from(EngineError::OutOfProtocol("no".into()));
        assert_eq!(conflict.status(), StatusCode::CONFLICT);
        let gone = ApiError::from(EngineError::ConversationEnded("c".into()));
        assert_eq!(gone.status(), StatusCode::GONE);
    }
}
