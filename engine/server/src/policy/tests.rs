use axum::body::Body;
use axum::http::Request;
use colloquy_policy::live::{Checked, CompileListener};
use colloquy_protocol::ErrorBody;
use http_body_util::BodyExt as _;
use tower::ServiceExt as _;

use super::*;

const TEMPLATE: &str = "apiVersion: colloquy.dev/v1\nkind: ConversationTemplate\nmetadata:\n  name: ping\n  version: 1.0.0\nspec:\n  roles:\n    participants: { min: 1, max: 1 }\n  thread:\n    initial: start\n    on_expiry: expired\n    states:\n      start:\n        transitions:\n          - { performative: request, from: initiator, to: done }\n      done: { terminal: success }\n      expired: { terminal: timeout }\n";

fn app(dir: &std::path::Path) -> (Router, Arc<LiveCatalog>) {
    std::fs::write(dir.join("ping.yaml"), TEMPLATE).expect("fixture");
    let live = Arc::new(LiveCatalog::open(dir).expect("compiles"));
    let (_, closing) = watch::channel(false);
    let state = PolicyState::new(
        live.clone(),
        Writes::AdminToken("root".into()),
        Reads::Public,
        closing,
    );
    (router(state), live)
}

async fn call(app: &Router, request: Request<Body>) -> (StatusCode, HeaderMap, Bytes) {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let (parts, body) = response.into_parts();
    let bytes = body.collect().await.expect("body").to_bytes();
    (parts.status, parts.headers, bytes)
}

#[tokio::test]
async fn templates_are_served_as_yaml_or_json_with_etags() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, live) = app(dir.path());
    let revision = live.latest("ping").expect("ping").revision.to_string();

    let get = |accept: &str| {
        Request::get("/v1/templates/ping")
            .header("accept", accept)
            .body(Body::empty())
            .expect("request")
    };
    let (status, headers, body) = call(&app, get("*/*")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers[header::ETAG], format!("\"{revision}\""));
    assert_eq!(headers[header::CONTENT_TYPE], YAML_MEDIA_TYPE);
    assert_eq!(body, TEMPLATE.as_bytes());

    let (status, _, body) = call(&app, get("application/json")).await;
    assert_eq!(status, StatusCode::OK);
    let document: TemplateDocument = serde_json::from_slice(&body).expect("document");
    assert_eq!(document.revision, revision);
    assert_eq!(document.template["metadata"]["name"], "ping");

    let conditional = Request::get("/v1/templates/ping")
        .header("if-none-match", format!("\"{revision}\""))
        .body(Body::empty())
        .expect("request");
    let (status, _, body) = call(&app, conditional).await;
    assert_eq!(status, StatusCode::NOT_MODIFIED);
    assert!(body.is_empty());

    let (status, _, body) = call(
        &app,
        Request::get("/v1/templates/nope")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let error: ErrorBody = serde_json::from_slice(&body).expect("error body");
    assert!(error.error.message.contains("nope"));
}

#[tokio::test]
async fn writes_need_the_admin_token_and_broken_uploads_are_422() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, _live) = app(dir.path());
    let put = |token: Option<&str>, body: &str| {
        let mut request = Request::put("/v1/templates/ping");
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.body(Body::from(body.to_owned())).expect("request")
    };
    let (status, _, _) = call(&app, put(None, TEMPLATE)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, _) = call(&app, put(Some("wrong"), TEMPLATE)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let broken = TEMPLATE.replace("to: done", "to: nowhere");
    let (status, _, body) = call(&app, put(Some("root"), &broken)).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let rejected: TemplateRejected = serde_json::from_slice(&body).expect("422 body");
    assert_eq!(rejected.error.code, "invalid_template");
    assert!(
        rejected
            .diagnostics
            .iter()
            .any(|d| d.line.is_some() && d.path.contains("transitions"))
    );

    let edited = TEMPLATE.replace("version: 1.0.0", "version: 1.0.1");
    let (status, _, body) = call(&app, put(Some("root"), &edited)).await;
    assert_eq!(status, StatusCode::OK);
    let summary: TemplateSummary = serde_json::from_slice(&body).expect("summary");
    let revisions = Request::get("/v1/templates/ping/revisions")
        .body(Body::empty())
        .expect("request");
    let (_, _, body) = call(&app, revisions).await;
    let list: RevisionList = serde_json::from_slice(&body).expect("revisions");
    assert_eq!(list.revisions.len(), 2);
    assert_eq!(list.revisions[0].revision, summary.revision);
    assert!(list.revisions[0].current && !list.revisions[1].current);
}

#[tokio::test]
async fn hook_modules_upload_before_the_templates_that_name_them() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (app, live) = app(dir.path());
    let put = |uri: &str, token: Option<&str>, body: Vec<u8>| {
        let mut request = Request::put(uri);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        request.body(Body::from(body)).expect("request")
    };
    let module = wat::parse_str("(module (memory (export \"memory\") 1))").expect("wat");
    let (status, _, _) = call(&app, put("/v1/modules/ping.wasm", None, module.clone())).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _, body) = call(
        &app,
        put("/v1/modules/ping.wasm", Some("root"), b"not wasm".to_vec()),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let error: ErrorBody = serde_json::from_slice(&body).expect("error body");
    assert_eq!(error.error.code, "invalid_module");
    let (status, _, _) = call(
        &app,
        put("/v1/modules/..%2Fescape.wasm", Some("root"), module.clone()),
    )
    .await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "no path outside the directory"
    );
    assert!(!dir.path().join("escape.wasm").exists());
    assert!(
        !dir.path().join("ping.wasm").exists(),
        "refused uploads write nothing"
    );

    let (status, _, _) = call(
        &app,
        put("/v1/modules/ping.wasm", Some("root"), module.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(
        std::fs::read(dir.path().join("ping.wasm")).expect("written"),
        module
    );
    let hooked = format!("{TEMPLATE}  hooks:\n    module: ping.wasm\n    events: [on_message]\n");
    let (status, _, _) = call(
        &app,
        put("/v1/templates/ping", Some("root"), hooked.into_bytes()),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let before = live
        .snapshot()
        .catalog
        .latest("ping")
        .expect("ping")
        .revision
        .clone();
    let rebuilt = wat::parse_str("(module (memory (export \"memory\") 2))").expect("wat");
    let (status, _, _) = call(&app, put("/v1/modules/ping.wasm", Some("root"), rebuilt)).await;
    assert_eq!(status, StatusCode::OK, "a replacement");
    let after = live
        .snapshot()
        .catalog
        .latest("ping")
        .expect("ping")
        .revision
        .clone();
    assert_ne!(before, after, "the template's revision covers its module");
}

/// A hook check standing in for the runtime's: a module compiles until the test says
/// it is done.
#[derive(Clone, Default)]
struct FakeCompiles {
    done: Arc<std::sync::Mutex<Vec<String>>>,
    running: Arc<std::sync::Mutex<Vec<(String, CompileListener)>>>,
}

impl FakeCompiles {
    fn check(&self) -> Box<colloquy_policy::live::TemplateCheck> {
        let compiles = self.clone();
        Box::new(move |template, listener| {
            let Some(module) = &template.hook_module else {
                return Checked::Ready;
            };
            let sha256 = module.sha256.to_string();
            if compiles.done.lock().expect("lock").contains(&sha256) {
                return Checked::Ready;
            }
            compiles
                .running
                .lock()
                .expect("lock")
                .push((sha256, listener.clone()));
            Checked::Compiling
        })
    }

    /// Ends every compile running, as the runtime's compile thread does.
    fn finish(&self) {
        let running = std::mem::take(&mut *self.running.lock().expect("lock"));
        for (sha256, listener) in running {
            self.done.lock().expect("lock").push(sha256.clone());
            listener(&sha256);
        }
    }
}

#[tokio::test]
async fn an_upload_whose_hook_compiles_answers_202_and_serves_once_compiled() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("ping.yaml"), TEMPLATE).expect("fixture");
    let compiles = FakeCompiles::default();
    let live = Arc::new(LiveCatalog::new(dir.path()).with_check(compiles.check()));
    live.reload().expect("compiles");
    let (_, closing) = watch::channel(false);
    let app = router(PolicyState::new(
        live.clone(),
        Writes::AdminToken("root".into()),
        Reads::Public,
        closing,
    ));
    let put = |uri: &str, body: Vec<u8>| {
        Request::put(uri)
            .header("authorization", "Bearer root")
            .body(Body::from(body))
            .expect("request")
    };
    let served = || live.latest("ping").expect("ping").revision.to_string();
    let first = served();

    let module = wat::parse_str("(module (memory (export \"memory\") 1))").expect("wat");
    let (status, _, _) = call(&app, put("/v1/modules/ping.wasm", module)).await;
    assert_eq!(status, StatusCode::CREATED, "no template names it yet");
    let hooked = format!("{TEMPLATE}  hooks:\n    module: ping.wasm\n    events: [on_message]\n");
    let (status, headers, body) = call(&app, put("/v1/templates/ping", hooked.into_bytes())).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert!(headers.get(header::ETAG).is_none());
    let uploaded: TemplateUploaded = serde_json::from_slice(&body).expect("body");
    let compiling = uploaded.compiling.expect("compiling");
    assert_eq!(compiling.revision, uploaded.revision);
    assert_eq!(served(), first, "the previous revision serves meanwhile");
    let (_, _, body) = call(
        &app,
        Request::get("/v1/status")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    let status: PolicyStatus = serde_json::from_slice(&body).expect("status");
    assert_eq!(status.compiling, vec![compiling]);

    compiles.finish();
    assert_eq!(served(), uploaded.revision, "serves once compiled");
    let (_, _, body) = call(
        &app,
        Request::get("/v1/status")
            .body(Body::empty())
            .expect("request"),
    )
    .await;
    let status: PolicyStatus = serde_json::from_slice(&body).expect("status");
    assert!(status.compiling.is_empty());

    let rebuilt = wat::parse_str("(module (memory (export \"memory\") 2))").expect("wat");
    let (status, _, body) = call(&app, put("/v1/modules/ping.wasm", rebuilt)).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let accepted: ModuleUploaded = serde_json::from_slice(&body).expect("body");
    assert_eq!(accepted.compiling.len(), 1);
    assert_eq!(accepted.compiling[0].template, "ping");
    assert_eq!(served(), uploaded.revision);
    compiles.finish();
    assert_eq!(served(), accepted.compiling[0].revision);
}
