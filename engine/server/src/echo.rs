//! The baseline of the HTTP benchmark: an axum server that parses a JSON body into a
//! `serde_json::Value` and answers it back. Measured in the same run as `colloquy serve`,
//! it tells what the machine, axum and JSON cost before any conversation work.

use axum::routing::post;
use axum::{Json, Router};

/// `POST /echo`: the body back, parsed and re-serialized.
pub fn router() -> Router {
    Router::new().route(
        "/echo",
        post(|Json(body): Json<serde_json::Value>| async move { Json(body) }),
    )
}

/// Serves [`router`] on `listener` until the process ends, with the service's accept loop
/// (so the comparison is fair).
pub async fn serve(listener: tokio::net::TcpListener) -> std::io::Result<()> {
    super::listen::serve(listener, router(), std::future::pending()).await
}
