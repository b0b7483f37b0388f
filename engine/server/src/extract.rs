//! Request extractors whose failures are [`ApiError`]s: JSON bodies that name where they
//! are wrong, query strings, and the body's size limit and deadline.

use std::convert::Infallible;
use std::future::Future;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use futures_util::FutureExt as _;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};
use serde::de::DeserializeOwned;

use super::error::ApiError;

/// Largest request body accepted: well above any message or start request the built-in
/// templates expect (their context caps are a few KiB), small enough that one request cannot
/// hold much memory.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// A JSON body of at most [`MAX_BODY_BYTES`]. Syntax errors answer 400 `malformed_json`
/// with the line and column; a body of the wrong shape (a missing, unknown or mistyped
/// field) answers 400 `invalid_body` with a JSON pointer to the field; an oversized body
/// answers 413.
///
/// The limit is the extractor's own, not a `DefaultBodyLimit` layer's: `Router::layer`
/// wraps every route in a boxed copy of a layer, and each request then pays for cloning it.
#[derive(Debug)]
pub struct JsonBody<T>(pub T);

impl<T, S> FromRequest<S> for JsonBody<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(request: Request, _: &S) -> Result<Self, ApiError> {
        let bytes = read_capped(request)
            .await
            .map_err(|error| unreadable(error, MAX_BODY_BYTES))?;
        parse(&bytes).map(JsonBody)
    }
}

/// The body, in full within [`BODY_READ_TIMEOUT`], if it is at most [`MAX_BODY_BYTES`].
async fn read_capped(request: Request) -> Result<Bytes, BodyError> {
    let limited = Limited::new(request.into_body(), MAX_BODY_BYTES);
    within_deadline(async {
        match limited.collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) if error.is::<LengthLimitError>() => Err(BodyError::TooLarge),
            Err(error) => Err(BodyError::Unreadable(format!(
                "failed to read the request body: {error}"
            ))),
        }
    })
    .await
}

/// A request body of at most [`MAX_BODY_BYTES`], as [`JsonBody`] reads it, with a failure
/// kept rather than rejected (as [`RawBody`] keeps it), for handlers that answer a bad body
/// in their own protocol's shape (A2A's JSON-RPC errors). [`RawBody`] takes the route's
/// `DefaultBodyLimit` instead, which is axum's 2 MB where none is set.
#[derive(Debug)]
pub struct CappedBody(pub Result<Bytes, BodyError>);

impl<S: Send + Sync> FromRequest<S> for CappedBody {
    type Rejection = Infallible;

    async fn from_request(request: Request, _: &S) -> Result<Self, Infallible> {
        Ok(CappedBody(read_capped(request).await))
    }
}

/// How long a request body may take to arrive, in full. Bodies are small (1 MiB at most,
/// except module uploads); without a deadline, a client that announces a body and sends it a
/// byte at a time, or never, holds a connection and a task for as long as it likes.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// A request body read in full within [`BODY_READ_TIMEOUT`], at most as large as the route's
/// `DefaultBodyLimit`. A failure is kept rather than rejected, so a handler can check who
/// calls before it says what was wrong with the body.
#[derive(Debug)]
pub struct RawBody(pub Result<Bytes, BodyError>);

/// Why a body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// Over the limit.
    TooLarge,
    /// The connection failed, or the body was not valid HTTP; what the reader said.
    Unreadable(String),
    /// Not in full within [`BODY_READ_TIMEOUT`].
    TimedOut,
}

impl<S: Send + Sync> FromRequest<S> for RawBody {
    type Rejection = Infallible;

    async fn from_request(request: Request, state: &S) -> Result<Self, Infallible> {
        let read = within_deadline(async {
            Bytes::from_request(request, state)
                .await
                .map_err(|rejection| {
                    if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                        BodyError::TooLarge
                    } else {
                        BodyError::Unreadable(rejection.body_text())
                    }
                })
        })
        .await;
        Ok(RawBody(read))
    }
}

/// Runs a body read to its end within [`BODY_READ_TIMEOUT`]. Nearly every body has arrived
/// with its headers: such a read finishes without arming a timer.
async fn within_deadline(
    read: impl Future<Output = Result<Bytes, BodyError>>,
) -> Result<Bytes, BodyError> {
    let mut read = std::pin::pin!(read);
    match read.as_mut().now_or_never() {
        Some(read) => read,
        None => tokio::time::timeout(BODY_READ_TIMEOUT, read)
            .await
            .unwrap_or(Err(BodyError::TimedOut)),
    }
}

/// The error for a body that could not be read: 413 when it is over `limit` (the route's
/// body limit), 408 when it was too slow, else 400 `unreadable_body`.
pub fn unreadable(error: BodyError, limit: usize) -> ApiError {
    match error {
        BodyError::TooLarge => ApiError::TooLarge(limit),
        BodyError::Unreadable(message) => ApiError::BadRequest {
            code: "unreadable_body",
            message,
            pointer: None,
        },
        BodyError::TimedOut => ApiError::BodyTimeout(BODY_READ_TIMEOUT.as_secs()),
    }
}

/// Parses a JSON body, reporting where it is wrong.
///
/// Well-formed bodies take serde_json's plain path; only a body that fails is parsed again
/// with path tracking, which costs an allocation per key and would otherwise be paid on
/// every request. The body's UTF-8 is checked once, up front: parsing bytes, serde_json
/// checks every string it reads on its own, about a hundred instructions each.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|text| serde_json::from_str(text).ok())
        .map_or_else(|| parse_tracking_path(bytes), Ok)
}

/// [`parse`] with the failing field's JSON pointer in the error.
fn parse_tracking_path<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut deserializer = serde_json::Deserializer::from_slice(bytes);
    let value: T = serde_path_to_error::deserialize(&mut deserializer).map_err(|error| {
        let pointer = pointer(error.path());
        let inner = error.into_inner();
        match inner.classify() {
            serde_json::error::Category::Data => ApiError::BadRequest {
                code: "invalid_body",
                message: format!("{}: {inner}", pointer.as_deref().unwrap_or("body")),
                pointer,
            },
            _ => ApiError::BadRequest {
                code: "malformed_json",
                message: format!("request body is not JSON: {inner}"),
                pointer: None,
            },
        }
    })?;
    // Trailing characters after the document.
    deserializer.end().map_err(|error| ApiError::BadRequest {
        code: "malformed_json",
        message: format!("request body is not JSON: {error}"),
        pointer: None,
    })?;
    Ok(value)
}

/// The serde path as a JSON pointer (RFC 6901), `None` for the whole document.
fn pointer(path: &serde_path_to_error::Path) -> Option<String> {
    use serde_path_to_error::Segment;
    let mut out = String::new();
    for segment in path.iter() {
        match segment {
            Segment::Seq { index } => out.push_str(&format!("/{index}")),
            Segment::Map { key } => {
                out.push('/');
                out.push_str(&key.replace('~', "~0").replace('/', "~1"));
            }
            Segment::Enum { variant } => {
                out.push('/');
                out.push_str(variant);
            }
            Segment::Unknown => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

/// A query string; a malformed one answers 400 `invalid_query`.
#[derive(Debug)]
pub struct QueryParams<T>(pub T);

impl<T, S> FromRequestParts<S> for QueryParams<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        Query::<T>::try_from_uri(&parts.uri)
            .map(|Query(value)| QueryParams(value))
            .map_err(|rejection| ApiError::BadRequest {
                code: "invalid_query",
                message: rejection.body_text(),
                pointer: None,
            })
    }
}

/// Path parameters; a malformed one (percent-encoded bytes that are not UTF-8) answers 400
/// `invalid_path` naming the parameter, where axum's own `Path` answers in plain text.
#[derive(Debug)]
pub struct PathParams<T>(pub T);

impl<T, S> FromRequestParts<S> for PathParams<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        Path::<T>::from_request_parts(parts, state)
            .await
            .map(|Path(value)| PathParams(value))
            .map_err(|rejection| ApiError::BadRequest {
                code: "invalid_path",
                message: rejection.body_text(),
                pointer: None,
            })
    }
}

#[cfg(test)]
mod tests {
    use std::io;

    use colloquy_protocol::message::StartConversation;

    use super::*;

    /// What a remote A2A agent may answer is what a caller may send the API.
    #[test]
    fn an_a2a_answer_may_be_as_large_as_a_request_to_the_api() {
        assert_eq!(colloquy_a2a::outward::MAX_ANSWER_BYTES, MAX_BODY_BYTES);
    }

    /// A body that never arrives is answered 408 at the deadline; one that has arrived is read
    /// at once. (Paused time: the deadline passes as soon as nothing else can run.)
    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_arrives_is_a_timeout() {
        use axum::body::Body;

        async fn read(body: Body) -> Result<serde_json::Value, ApiError> {
            let request = Request::builder()
                .method("POST")
                .uri("/")
                .body(body)
                .expect("request");
            JsonBody::from_request(request, &())
                .await
                .map(|JsonBody(value)| value)
        }
        let never = Body::from_stream(futures_util::stream::pending::<Result<Bytes, io::Error>>());
        let started = tokio::time::Instant::now();
        match read(never).await {
            Err(error) => {
                assert_eq!(error.status(), StatusCode::REQUEST_TIMEOUT);
                assert_eq!(error.code(), "body_timeout");
            }
            Ok(value) => panic!("read {value}"),
        }
        assert_eq!(started.elapsed(), BODY_READ_TIMEOUT);
        let value = read(Body::from(r#"{"a": 1}"#)).await.expect("read");
        assert_eq!(value["a"], 1);
    }

    /// The limit is `JsonBody`'s own (no `DefaultBodyLimit` layer around it): a body of
    /// exactly [`MAX_BODY_BYTES`] is read (and then found not to be JSON), one byte more is 413.
    #[tokio::test]
    async fn a_json_body_over_the_limit_is_refused_at_one_byte_over() {
        async fn status(len: usize) -> (StatusCode, &'static str) {
            let request = Request::builder()
                .method("POST")
                .uri("/")
                .body(axum::body::Body::from("x".repeat(len)))
                .expect("request");
            match JsonBody::<serde_json::Value>::from_request(request, &()).await {
                Err(error) => (error.status(), error.code()),
                Ok(value) => panic!("read {value:?}"),
            }
        }
        assert_eq!(
            status(MAX_BODY_BYTES).await,
            (StatusCode::BAD_REQUEST, "malformed_json")
        );
        assert_eq!(
            status(MAX_BODY_BYTES + 1).await,
            (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large")
        );
    }

    fn bad(body: &str) -> (String, Option<String>) {
        match parse::<StartConversation>(body.as_bytes()) {
            Err(ApiError::BadRequest { code, pointer, .. }) => (code.to_owned(), pointer),
            other => panic!("expected a bad request, got {other:?}"),
        }
    }

    #[test]
    fn syntax_errors_are_malformed_json() {
        assert_eq!(bad("{\"template\": ").0, "malformed_json");
        let trailing = r#"{"template": "t", "participants": []} trailing"#;
        assert_eq!(bad(trailing).0, "malformed_json");
    }

    #[test]
    fn bodies_that_are_not_utf8_are_malformed_json() {
        let body = b"{\"template\": \"t\xff\", \"participants\": []}";
        match parse::<StartConversation>(body) {
            Err(ApiError::BadRequest { code, message, .. }) => {
                assert_eq!(code, "malformed_json");
                assert!(message.contains("line 1 column"), "{message}");
            }
            other => panic!("expected a bad request, got {other:?}"),
        }
    }

    #[test]
    fn well_formed_bodies_parse_with_their_escapes() {
        let body = r#"{"template": "fipa-\u0072equest", "participants": ["b\u00f6b"]}"#;
        let start: StartConversation = parse(body.as_bytes()).expect("parses");
        assert_eq!(start.template, "fipa-request");
        assert_eq!(start.participants, vec!["böb".to_owned()]);
    }

    #[test]
    fn wrong_fields_are_named_by_pointer() {
        let (code, pointer) = bad(r#"{"template": "t", "participants": [1]}"#);
        assert_eq!(code, "invalid_body");
        assert_eq!(pointer.as_deref(), Some("/participants/0"));
        let (code, pointer) = bad(
            r#"{"template": "t", "participants": [], "message": {"performative": "inform", "sender": "x"}}"#,
        );
        assert_eq!(code, "invalid_body");
        assert_eq!(
            pointer.as_deref(),
            Some("/message/sender"),
            "unknown fields are named"
        );
    }
}
