//! The web inspector: one HTML page, its two scripts and its style sheet, embedded in the
//! binary and served at `/inspect` (`docs/inspector.md`).
//!
//! The page is a static shell: it needs no credentials and holds no data. Everything it
//! shows it reads from the API with the token the user types in (kept in the tab's
//! `sessionStorage`, sent as an `Authorization` header, never in a URL), so it sees exactly
//! what that token may see. It changes nothing: it only calls `GET` routes.
//!
//! No framework, no CDN, no build step: plain modern JavaScript, written as it is served.

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use super::{AppState, Identity};

/// The page.
pub const PAGE: &str = include_str!("inspect/index.html");
/// Its script.
pub const SCRIPT: &str = include_str!("inspect/inspector.js");
/// The script of its template pages (list, state machine, hooks, candidate and history),
/// loaded before [`SCRIPT`].
pub const TEMPLATES_SCRIPT: &str = include_str!("inspect/templates.js");
/// Its style sheet.
pub const STYLE: &str = include_str!("inspect/inspector.css");
/// Its icon, also answered at `/favicon.ico`, which browsers ask for on every page they
/// load from a host (without it, each load of the inspector logged a 404).
pub const ICON: &str = include_str!("inspect/favicon.svg");

/// Where the page says how callers are identified; [`page`] replaces it.
const MODE_MARK: &str = "{{auth_mode}}";

/// What the page and its assets may load: only themselves and this origin's API, so a
/// conversation's content, drawn into the page, cannot pull anything in or run as script.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; \
     form-action 'none'; frame-ancestors 'none'";

/// The inspector's routes: the page at `/inspect`, its assets under `/inspect/assets/`, and
/// its icon at `/favicon.ico` too.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/inspect", get(page))
        .route("/inspect/", get(page))
        .route("/inspect/assets/inspector.js", get(script))
        .route("/inspect/assets/templates.js", get(templates_script))
        .route("/inspect/assets/inspector.css", get(style))
        .route("/inspect/assets/favicon.svg", get(icon))
        .route("/favicon.ico", get(icon))
}

/// `GET /inspect`: the page, told whether the server runs in open development mode (then it
/// asks for an agent id to view as, not a token).
async fn page(State(state): State<AppState>) -> Response {
    let mode = match state.identity() {
        Identity::Open => "open",
        Identity::Tokens { .. } => "tokens",
    };
    asset(
        "text/html; charset=utf-8",
        PAGE.replacen(MODE_MARK, mode, 1),
    )
}

/// `GET /inspect/assets/inspector.js`.
async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `GET /inspect/assets/templates.js`.
async fn templates_script() -> Response {
    asset("text/javascript; charset=utf-8", TEMPLATES_SCRIPT)
}

/// `GET /inspect/assets/inspector.css`.
async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// `GET /inspect/assets/favicon.svg` and `GET /favicon.ico`.
async fn icon() -> Response {
    asset("image/svg+xml", ICON)
}

fn asset(content_type: &'static str, body: impl IntoResponse) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    // The assets change with the binary: a browser revalidates rather than keep an old
    // script next to a new server.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use http_body_util::BodyExt as _;
    use tokio::sync::watch;
    use tower::ServiceExt as _;

    use super::*;
    use colloquy_core::clock::ManualClock;
    use colloquy_core::engine::{Engine, EngineConfig};
    use colloquy_core::metrics::Metrics;
    use colloquy_core::store::MemoryStore;

    fn app(identity: Identity) -> Router {
        let engine = Arc::new(Engine::new(
            Arc::new(colloquy_policy::Catalog::default()),
            Arc::new(MemoryStore::new()),
            Arc::new(ManualClock::new(0)),
            EngineConfig::default(),
        ));
        let (_, closing) = watch::channel(false);
        super::super::router(AppState::new(
            engine,
            identity,
            Arc::new(Metrics::new()),
            closing,
        ))
    }

    fn with_tokens() -> Identity {
        Identity::from_yaml(
            "admin_token: root\nagents: [{id: alice, token: alice-token}]",
            "test",
        )
        .expect("a valid agents file")
    }

    async fn get(app: Router, path: &str) -> (StatusCode, Option<String>, String) {
        let request = Request::get(path).body(Body::empty()).expect("request");
        let response = app.oneshot(request).await.expect("infallible service");
        let status = response.status();
        let content_type = response
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .map(str::to_owned);
        let bytes = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        let body = String::from_utf8(bytes.to_vec()).expect("UTF-8");
        (status, content_type, body)
    }

    #[tokio::test]
    async fn the_page_and_its_assets_need_no_token_but_the_data_does() {
        for (path, content_type, contains) in [
            ("/inspect", "text/html; charset=utf-8", "inspector.js"),
            ("/inspect/", "text/html; charset=utf-8", "inspector.css"),
            (
                "/inspect/assets/inspector.js",
                "text/javascript; charset=utf-8",
                "Last-Event-ID",
            ),
            (
                "/inspect/assets/templates.js",
                "text/javascript; charset=utf-8",
                "candidates",
            ),
            (
                "/inspect/assets/inspector.css",
                "text/css; charset=utf-8",
                "@media",
            ),
            ("/inspect/assets/favicon.svg", "image/svg+xml", "<svg"),
            ("/favicon.ico", "image/svg+xml", "<svg"),
        ] {
            let (status, served_type, body) = get(app(with_tokens()), path).await;
            assert_eq!(status, StatusCode::OK, "{path}");
            assert_eq!(served_type.as_deref(), Some(content_type), "{path}");
            assert!(body.contains(contains), "{path} lacks {contains}");
        }
        let (status, _, body) = get(app(with_tokens()), "/v1/conversations").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
        let (status, _, _) = get(app(with_tokens()), "/inspect/assets/nope.js").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
    }

    #[tokio::test]
    async fn the_page_says_how_callers_are_identified() {
        let (_, _, page) = get(app(with_tokens()), "/inspect").await;
        assert!(page.contains(r#"data-auth-mode="tokens""#));
        let (_, _, page) = get(app(Identity::Open), "/inspect").await;
        assert!(page.contains(r#"data-auth-mode="open""#));
        assert!(!page.contains(MODE_MARK));
    }

    #[tokio::test]
    async fn the_assets_load_nothing_from_elsewhere() {
        let request = Request::get("/inspect")
            .body(Body::empty())
            .expect("request");
        let response = app(Identity::Open)
            .oneshot(request)
            .await
            .expect("infallible service");
        let policy = response.headers()[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .expect("ASCII");
        assert!(policy.contains("connect-src 'self'"));
        // Nothing fetched from another origin: the only absolute URL is the SVG namespace.
        for asset in [PAGE, SCRIPT, TEMPLATES_SCRIPT, STYLE, ICON] {
            let outside = asset.replace("http://www.w3.org/2000/svg", "");
            assert!(!outside.contains("http://") && !outside.contains("https://"));
        }
    }
}
