//! JSON response bodies, serialized into one buffer sized for the common response. Every
//! JSON answer of the API goes through [`JsonResponse`]; only the echo server, the HTTP
//! benchmark's baseline, keeps `axum::Json`.
//!
//! `axum::Json` serializes through a `BytesMut` writer that starts at 128 bytes: a
//! conversation view (about 700 bytes) or a send receipt (about 300) grows it two or three
//! times, and every small write serde_json makes (a key, a quote, a number) goes through
//! `BufMut`'s checks. Here the body goes into a `Vec` of [`INITIAL_CAPACITY`], which becomes
//! the response body without a copy. For the hot handlers (start and send) that cut the
//! instructions spent serializing those two bodies by a fifth (`valgrind --tool=callgrind` over
//! `--bench api`).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// Bytes reserved for a response body: a started conversation's view fits.
pub const INITIAL_CAPACITY: usize = 1024;

/// A JSON response body; see the module docs.
#[derive(Clone, Copy, Debug)]
pub struct JsonResponse<T>(pub T);

impl<T: Serialize> IntoResponse for JsonResponse<T> {
    fn into_response(self) -> Response {
        let mut body = Vec::with_capacity(INITIAL_CAPACITY);
        match serde_json::to_writer(&mut body, &self.0) {
            // The response built here, with its one header: `([(CONTENT_TYPE, ..)], body)`
            // answered `body` as `Vec<u8>` first, which set `Content-Type:
            // application/octet-stream`, and the header then replaced it (two header-map
            // insertions, the first for nothing).
            Ok(()) => {
                let mut response = Response::new(Body::from(body));
                response.headers_mut().insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("application/json"),
                );
                response
            }
            // Only a type that cannot be JSON (a map with non-string keys) gets here: the
            // engine's bug, not the caller's.
            Err(error) => {
                tracing::error!(%error, "cannot serialize a response body");
                StatusCode::INTERNAL_SERVER_ERROR.into_response()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use http_body_util::BodyExt as _;

    use super::*;

    async fn body(response: Response) -> String {
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        String::from_utf8(bytes.to_vec()).expect("utf-8")
    }

    #[tokio::test]
    async fn answers_the_same_bytes_and_type_as_axum_json() {
        let value = serde_json::json!({"id": "c-1", "threads": [{"state": "agreed"}], "n": 3});
        let ours = JsonResponse(&value).into_response();
        let axums = axum::Json(&value).into_response();
        assert_eq!(ours.status(), axums.status());
        assert_eq!(
            ours.headers().get(header::CONTENT_TYPE),
            axums.headers().get(header::CONTENT_TYPE)
        );
        assert_eq!(body(ours).await, body(axums).await);
    }

    #[tokio::test]
    async fn a_value_that_cannot_be_json_is_a_server_error() {
        let mut map = BTreeMap::new();
        map.insert(vec![1u8], "keys must be strings");
        let response = JsonResponse(&map).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
