//! Spans at the service's edges, for exported traces (`crate::trace_export`): a server span
//! per HTTP request, its parent read from the request's W3C `traceparent`/`tracestate`, and
//! client spans for webhook pushes, whose context goes out in the same headers. Installed
//! only when traces are exported ([`colloquy_core::trace_origins::exporting`]): otherwise
//! the router has no such layer and pushes skip it all.
//!
//! Attributes follow OpenTelemetry's HTTP semantic conventions (`http.request.method`,
//! `http.route`, `url.path`, `server.address`, `http.response.status_code`); the span is
//! named `{method} {route}`. Conversation ids, templates and revisions are on the engine's
//! spans below it (`colloquy.*`); no message content is recorded anywhere.

use axum::extract::{MatchedPath, Request};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use colloquy_core::engine::Engine;
use opentelemetry::propagation::TextMapPropagator as _;
use opentelemetry::trace::TraceContextExt as _;
use opentelemetry_http::{HeaderExtractor, HeaderInjector};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Wraps a request in its server span (`axum::middleware::from_fn`, through
/// `Router::layer` so that the matched route is known).
pub async fn trace_request(request: Request, next: Next) -> Response {
    let method = request.method().as_str().to_owned();
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned());
    // Semantic conventions: `{method} {route}`, or the method alone when no route matched
    // (a path would make names unbounded).
    let name = match &route {
        Some(route) => format!("{method} {route}"),
        None => method.clone(),
    };
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .map(|host| {
            host.rsplit_once(':')
                .map_or(host, |(name, _)| name)
                .to_owned()
        });
    let span = tracing::debug_span!(
        "HTTP request",
        otel.name = name.as_str(),
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        http.request.method = method.as_str(),
        http.route = route.as_deref(),
        url.path = request.uri().path(),
        url.scheme = "http",
        server.address = host.as_deref(),
        http.response.status_code = tracing::field::Empty,
    );
    // Before the span is first entered: afterwards its parent is fixed.
    let _ = span.set_parent(parent_of(request.headers()));
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status();
    span.record("http.response.status_code", status.as_u16());
    if status.is_server_error() {
        span.record("otel.status_code", "error");
    }
    response
}

/// The trace context a caller sent (`traceparent`, `tracestate`); an empty context, so a
/// new trace, without.
pub fn parent_of(headers: &HeaderMap) -> opentelemetry::Context {
    TraceContextPropagator::new().extract(&HeaderExtractor(headers))
}

/// Writes `span`'s trace context into outgoing `headers` (`traceparent`, `tracestate`).
pub fn inject(span: &tracing::Span, headers: &mut HeaderMap) {
    TraceContextPropagator::new().inject_context(&span.context(), &mut HeaderInjector(headers));
}

/// The client span of one webhook POST of `conversation_id`'s message to `agent`, a child
/// of the span the conversation started in when this engine remembers it. Disabled (and
/// free) when traces are not exported.
pub fn webhook_span(
    engine: &Engine,
    agent: &str,
    conversation_id: &str,
    url: &str,
) -> tracing::Span {
    if !colloquy_core::trace_origins::exporting() {
        return tracing::Span::none();
    }
    let target = reqwest::Url::parse(url).ok();
    let span = tracing::debug_span!(
        "webhook",
        otel.name = "POST",
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        http.request.method = "POST",
        server.address = target.as_ref().and_then(|url| url.host_str()),
        server.port = target.as_ref().and_then(|url| url.port_or_known_default()),
        http.response.status_code = tracing::field::Empty,
        colloquy.conversation.id = conversation_id,
        colloquy.agent = agent,
    );
    if let Some(origin) = engine.trace_origins().origin(conversation_id) {
        let parent = opentelemetry::Context::new().with_remote_span_context(origin);
        let _ = span.set_parent(parent);
    }
    span
}

/// Records on a client span the status its request got, and whether it failed.
pub fn record_status(span: &tracing::Span, result: &reqwest::Result<reqwest::Response>) {
    let status = match result {
        Ok(response) => Some(response.status()),
        Err(error) => error.status(),
    };
    record_outcome(span, status, result.is_err());
}

/// Records on a client span the status its request got (none when it got no answer), and
/// whether it failed.
pub fn record_outcome(span: &tracing::Span, status: Option<reqwest::StatusCode>, failed: bool) {
    if span.is_disabled() {
        return;
    }
    if let Some(status) = status {
        span.record("http.response.status_code", status.as_u16());
    }
    if failed {
        span.record("otel.status_code", "error");
    }
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;
    use opentelemetry::trace::{SpanId, TraceId};

    use super::*;

    const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn reads_a_callers_traceparent() {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", HeaderValue::from_static(TRACEPARENT));
        headers.insert("tracestate", HeaderValue::from_static("vendor=abc"));
        let parent = parent_of(&headers);
        let context = parent.span().span_context().clone();
        assert!(context.is_remote() && context.is_sampled());
        assert_eq!(
            context.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(
            context.span_id(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        assert_eq!(context.trace_state().get("vendor"), Some("abc"));
    }

    #[test]
    fn a_missing_or_garbled_traceparent_starts_a_new_trace() {
        assert!(
            !parent_of(&HeaderMap::new())
                .span()
                .span_context()
                .is_valid()
        );
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", HeaderValue::from_static("00-zz-00-01"));
        assert!(!parent_of(&headers).span().span_context().is_valid());
    }

    #[test]
    fn nothing_is_injected_outside_an_exported_span() {
        let mut headers = HeaderMap::new();
        inject(&tracing::Span::none(), &mut headers);
        assert!(headers.get("traceparent").is_none());
    }
}
