//! Operations endpoints: liveness, readiness, Prometheus metrics, the OpenAPI document, and
//! the JSON answers for unknown routes and methods.

use super::json::JsonResponse;
use axum::extract::State;
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use colloquy_protocol::ErrorBody;
use colloquy_protocol::api::Readiness;
use serde_json::json;

use super::AppState;
use super::error::ApiError;

/// The OpenAPI 3.1 document of this service, written by hand next to the router.
pub const OPENAPI: &str = include_str!("openapi.json");

/// `GET /healthz`: the process is up.
pub async fn healthz() -> JsonResponse<serde_json::Value> {
    JsonResponse(json!({"status": "ok"}))
}

/// `GET /readyz`: ready for traffic (templates loaded, not shutting down); 503 otherwise.
pub async fn readyz(State(state): State<AppState>) -> Response {
    if *state.closing().borrow() {
        let body = ErrorBody::new("shutting_down", "the server is shutting down", None);
        return (StatusCode::SERVICE_UNAVAILABLE, JsonResponse(body)).into_response();
    }
    // The live catalog, so a reload (or a remote engine's first sync) shows here.
    let templates: Vec<String> = state
        .engine()
        .template_names()
        .iter()
        .map(|n| n.to_string())
        .collect();
    if templates.is_empty() {
        let body = ErrorBody::new("no_templates", "no templates are loaded yet", None);
        return (StatusCode::SERVICE_UNAVAILABLE, JsonResponse(body)).into_response();
    }
    JsonResponse(Readiness {
        status: "ready".into(),
        templates,
    })
    .into_response()
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(state): State<AppState>) -> Response {
    let hooks = state.engine().hooks().map(|hooks| hooks.latency());
    let figures = colloquy_core::metrics::EngineFigures {
        live_conversations: state.engine().live_count(),
        inbox_entries_expired: state.engine().inbox_entries_expired(),
        remote_notices: state.engine().remote_notices(),
    };
    let text = state.metrics().render(figures, hooks);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// `GET /v1/openapi.json`.
pub async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

/// Any path no route serves.
pub async fn not_found(uri: Uri) -> ApiError {
    ApiError::NotFound(format!("no route for {}", uri.path()))
}

/// A served path with a method it does not take.
pub async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}
