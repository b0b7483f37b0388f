//! The policy manager's HTTP API over a [`LiveCatalog`], served alone by `colloquy
//! policy-manager serve` ([`launch`]) or merged into `colloquy serve` ([`router`]).
//!
//! It lives here rather than in the policy-manager crate because axum lives only in
//! `colloquy-server` (STYLE 6), which the `colloquy` binary mounts anyway; the
//! domain (compiling, reloading, uploads, the mirror of remote engines) stays in
//! `colloquy_policy`, and this module is its thin HTTP skin.
//!
//! - `GET /v1/templates`: names and revisions.
//! - `GET /v1/templates/{name}`: the YAML as compiled (default, `application/yaml`) or a JSON
//!   document (`Accept: application/json`); `ETag` is the revision, `If-None-Match` with it
//!   answers `304`.
//! - `GET /v1/templates/{name}/revisions`, `GET /v1/templates/{name}/modules/{sha256}`.
//! - `PUT` / `DELETE /v1/templates/{name}` with `Authorization: Bearer <admin token>`.
//! - `GET /v1/watch`: server-sent events, one `catalog` entry per swap (the first is the
//!   catalog at connection time).
//! - `GET /v1/status`: the catalog revision, when it loaded, the last reload error, the new
//!   revisions waiting for their hook module to compile.
//!
//! Reads follow [`Reads`]: with an agents file, a token is needed (the admin's for sources
//! and module bytes) unless the operator made templates public.

use std::convert::Infallible;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use colloquy_policy::live::{ChangeError, diagnostic_bodies};
use colloquy_policy::{Diagnostics, LiveCatalog, Snapshot};
use colloquy_protocol::ErrorDetail;
use colloquy_protocol::policy::{
    CATALOG_EVENT, CatalogChange, ModuleRef, ModuleUploaded, PolicyStatus, RevisionInfo,
    RevisionList, TemplateDocument, TemplateList, TemplateRejected, TemplateSummary,
    TemplateUploaded, YAML_MEDIA_TYPE,
};
use futures_util::Stream;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::error::ApiError;
use super::extract::{PathParams, RawBody, unreadable};
use super::json::JsonResponse;
use super::ops;

/// Largest template upload: templates are a few KiB; a megabyte is a mistake, not a policy.
pub const MAX_TEMPLATE_BYTES: usize = 1024 * 1024;
/// Largest hook module upload (the compiler's own cap on a module's size).
pub const MAX_MODULE_BYTES: usize = 64 * 1024 * 1024;
/// How often an idle change feed sends a keep-alive comment (remote engines drop a feed
/// silent for `colloquy_policy::follower::IDLE_TIMEOUT`).
pub const WATCH_KEEP_ALIVE: Duration = Duration::from_secs(5);

/// What the policy handlers share.
#[derive(Clone)]
pub struct PolicyState(Arc<PolicyShared>);

struct PolicyShared {
    live: Arc<LiveCatalog>,
    writes: Writes,
    reads: Reads,
    closing: watch::Receiver<bool>,
    /// The engine's rollouts (shadow twins, ramp tallies), where an engine serves these
    /// routes; the standalone policy manager has none.
    rollouts: Option<Arc<crate::rollout::Rollouts>>,
    /// Who the tokens name, so an agent's token on a write gets 403, not 401.
    identity: Option<Arc<super::Identity>>,
    /// The engine's conversation store, which replays read.
    store: Option<Arc<dyn colloquy_core::store::ConversationStore>>,
}

/// Who may read templates, their sources and modules, the change feed and the status.
#[derive(Clone, Debug)]
pub enum Reads {
    /// Anyone: open development mode (no agents file), the standalone policy manager (which
    /// has no agents), or an operator who opted in (`colloquy serve --public-templates`).
    Public,
    /// Callers with a token of this identity (an agents file): any agent or the
    /// administrator for the list, revisions, change feed and status; the administrator
    /// alone for what a template is made of, its source (`GET /v1/templates/{name}`) and
    /// its hook module's bytes.
    Tokens(Arc<super::Identity>),
}

/// What a read needs under [`Reads::Tokens`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReadNeeds {
    /// A valid token, any caller.
    AnyCaller,
    /// The administrator's token.
    Admin,
}

/// Who may upload and delete templates.
#[derive(Clone, Debug)]
pub enum Writes {
    /// Callers presenting this bearer token (the standalone policy manager, and a server
    /// in open development mode given `--admin-token`).
    AdminToken(String),
    /// Callers this identity names the administrator: the agents file's admin token, or a
    /// JWT with the admin claim (`--auth-admin-claim`). The one notion of admin of a server
    /// with an identity: the same caller reads everything and changes templates.
    Identity(Arc<super::Identity>),
    /// Nobody: no admin token was configured.
    Disabled,
    /// Nobody here: this engine mirrors the policy manager at this URL; write there.
    Follower(String),
}

impl PolicyState {
    /// State over `live`. `closing` turning `true` ends every change feed (so a graceful
    /// shutdown does not wait for them forever).
    pub fn new(
        live: Arc<LiveCatalog>,
        writes: Writes,
        reads: Reads,
        closing: watch::Receiver<bool>,
    ) -> Self {
        let identity = match &reads {
            Reads::Tokens(identity) => Some(identity.clone()),
            Reads::Public => None,
        };
        PolicyState(Arc::new(PolicyShared {
            live,
            writes,
            reads,
            closing,
            rollouts: None,
            identity,
            store: None,
        }))
    }

    /// With the engine's rollouts, whose shadow findings the candidate routes report.
    ///
    /// # Panics
    /// If the state was cloned already: configure it before building the router.
    pub fn with_rollouts(mut self, rollouts: Arc<crate::rollout::Rollouts>) -> Self {
        Arc::get_mut(&mut self.0)
            .expect("a policy state is configured before it is shared")
            .rollouts = Some(rollouts);
        self
    }

    /// With the identity the tokens belong to (when templates are public, the reads do not
    /// carry it), so an agent's token on a write is told 403.
    ///
    /// # Panics
    /// As [`PolicyState::with_rollouts`].
    pub fn with_identity(mut self, identity: Arc<super::Identity>) -> Self {
        Arc::get_mut(&mut self.0)
            .expect("a policy state is configured before it is shared")
            .identity = Some(identity);
        self
    }

    /// With the engine's conversation store, so the admin can replay its recorded
    /// conversations against a candidate.
    ///
    /// # Panics
    /// As [`PolicyState::with_rollouts`].
    pub fn with_store(mut self, store: Arc<dyn colloquy_core::store::ConversationStore>) -> Self {
        Arc::get_mut(&mut self.0)
            .expect("a policy state is configured before it is shared")
            .store = Some(store);
        self
    }

    /// The engine's conversation store, if an engine serves these routes.
    pub(crate) fn store(&self) -> Option<&Arc<dyn colloquy_core::store::ConversationStore>> {
        self.0.store.as_ref()
    }

    /// The live catalog.
    pub(crate) fn live(&self) -> &Arc<LiveCatalog> {
        &self.0.live
    }

    /// The engine's rollouts, if an engine serves these routes.
    pub(crate) fn rollouts(&self) -> Option<&Arc<crate::rollout::Rollouts>> {
        self.0.rollouts.as_ref()
    }

    /// 401 without a valid token, 403 for an agent where the administrator is needed;
    /// nothing under [`Reads::Public`].
    pub(crate) fn check_read(&self, headers: &HeaderMap, needs: ReadNeeds) -> Result<(), ApiError> {
        let Reads::Tokens(identity) = &self.0.reads else {
            return Ok(());
        };
        match (identity.identify_headers(headers)?, needs) {
            (_, ReadNeeds::AnyCaller) | (super::Caller::Admin, ReadNeeds::Admin) => Ok(()),
            (super::Caller::Agent(agent), ReadNeeds::Admin) => Err(ApiError::Forbidden(format!(
                "`{agent}` may list templates but not read their sources or hook modules: \
                 that needs the admin token"
            ))),
        }
    }
}

/// Every route [`router`] serves, as (method, path). `/v1/openapi.json` documents exactly
/// these under the tag `policy` (a test compares the two).
pub const ROUTES: &[(&str, &str)] = &[
    ("get", "/v1/templates"),
    ("get", "/v1/templates/{name}"),
    ("put", "/v1/templates/{name}"),
    ("delete", "/v1/templates/{name}"),
    ("get", "/v1/templates/{name}/revisions"),
    ("get", "/v1/templates/{name}/modules/{sha256}"),
    ("put", "/v1/modules/{file}"),
    ("get", "/v1/watch"),
    ("get", "/v1/status"),
    ("post", "/v1/templates/{name}/candidates"),
    ("get", "/v1/templates/{name}/candidates"),
    ("get", "/v1/templates/{name}/candidates/{revision}/diff"),
    ("post", "/v1/templates/{name}/candidates/{revision}/promote"),
    ("post", "/v1/templates/{name}/candidates/{revision}/ramp"),
    ("post", "/v1/templates/{name}/rollback"),
    ("get", "/v1/templates/{name}/history"),
    ("post", "/v1/templates/{name}/replay"),
];

/// The policy routes, without a fallback, so they can be merged into another router.
pub fn router(state: PolicyState) -> Router {
    Router::new()
        .route("/v1/templates", get(list))
        .route("/v1/templates/{name}", get(show).put(upload).delete(remove))
        .route("/v1/templates/{name}/revisions", get(revisions))
        .route("/v1/templates/{name}/modules/{sha256}", get(module))
        .route("/v1/watch", get(watch_feed))
        .merge(crate::rollout::routes::router())
        .route("/v1/status", get(status))
        .layer(DefaultBodyLimit::max(MAX_TEMPLATE_BYTES))
        .merge(
            Router::new()
                .route("/v1/modules/{file}", put(upload_module))
                .layer(DefaultBodyLimit::max(MAX_MODULE_BYTES)),
        )
        .with_state(state)
}

/// Why a policy request failed: any [`ApiError`], or an upload the compiler refused (a 422
/// whose body is the usual error body plus every diagnostic).
#[derive(Debug)]
pub enum PolicyError {
    /// A plain API error.
    Api(ApiError),
    /// The upload, or the directory with it, does not compile.
    Rejected(Diagnostics),
}

impl From<ApiError> for PolicyError {
    fn from(error: ApiError) -> PolicyError {
        PolicyError::Api(error)
    }
}

impl From<ChangeError> for PolicyError {
    fn from(error: ChangeError) -> PolicyError {
        match error {
            ChangeError::Rejected(diagnostics) => PolicyError::Rejected(diagnostics),
            ChangeError::UnknownTemplate(name) => {
                PolicyError::Api(ApiError::NotFound(unknown(&name)))
            }
            ChangeError::InvalidName(_) => PolicyError::Api(ApiError::BadRequest {
                code: "invalid_template_name",
                message: error.to_string(),
                pointer: None,
            }),
            ChangeError::InvalidModule(_) => PolicyError::Api(ApiError::BadRequest {
                code: "invalid_module",
                message: error.to_string(),
                pointer: None,
            }),
            ChangeError::FileTaken { .. } => PolicyError::Api(ApiError::BadRequest {
                code: "template_file_taken",
                message: error.to_string(),
                pointer: None,
            }),
            ChangeError::Io(io) => {
                PolicyError::Api(ApiError::Engine(colloquy_core::error::EngineError::Store(
                    colloquy_core::store::StoreError::Internal(format!("template directory: {io}")),
                )))
            }
        }
    }
}

impl IntoResponse for PolicyError {
    fn into_response(self) -> Response {
        match self {
            PolicyError::Api(error) => error.into_response(),
            PolicyError::Rejected(diagnostics) => {
                let count = diagnostics.count();
                let body = TemplateRejected {
                    error: ErrorDetail {
                        code: "invalid_template".to_owned(),
                        message: format!(
                            "the template does not compile ({count} problem{}); nothing changed",
                            if count == 1 { "" } else { "s" }
                        ),
                        pointer: None,
                    },
                    diagnostics: diagnostic_bodies(&diagnostics),
                };
                (StatusCode::UNPROCESSABLE_ENTITY, JsonResponse(body)).into_response()
            }
        }
    }
}

fn unknown(name: &str) -> String {
    format!("no template named `{name}`")
}

/// `GET /v1/templates`.
async fn list(
    State(state): State<PolicyState>,
    headers: HeaderMap,
) -> Result<JsonResponse<TemplateList>, PolicyError> {
    state.check_read(&headers, ReadNeeds::AnyCaller)?;
    let snapshot = state.0.live.snapshot();
    Ok(JsonResponse(TemplateList {
        revision: snapshot.revision.to_string(),
        templates: snapshot.summaries(),
    }))
}

/// Whether `If-None-Match` names `tag` (or `*`).
fn matches_etag(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .map(|candidate| {
            let candidate = candidate.trim();
            let candidate = candidate.strip_prefix("W/").unwrap_or(candidate);
            candidate.trim_matches('"')
        })
        .any(|candidate| candidate == tag || candidate == "*")
}

fn etag(tag: &str) -> HeaderValue {
    // Revisions and hashes are `sha256:` plus hex digits: always a valid header value.
    HeaderValue::from_str(&format!("\"{tag}\"")).unwrap_or(HeaderValue::from_static("\"\""))
}

fn wants_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|accept| accept.contains("application/json") || accept.contains("+json"))
}

/// `GET /v1/templates/{name}`.
async fn show(
    State(state): State<PolicyState>,
    PathParams(name): PathParams<String>,
    headers: HeaderMap,
) -> Result<Response, PolicyError> {
    state.check_read(&headers, ReadNeeds::Admin)?;
    let snapshot = state.0.live.snapshot();
    let template = snapshot
        .catalog
        .latest(&name)
        .ok_or_else(|| ApiError::NotFound(unknown(&name)))?;
    let tag = etag(&template.revision);
    let vary = (header::VARY, HeaderValue::from_static("accept"));
    if matches_etag(&headers, &template.revision) {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, tag), vary]).into_response());
    }
    let source = snapshot
        .source(&name, &template.revision)
        .map(|s| s.text.to_string())
        .unwrap_or_default();
    if wants_json(&headers) {
        let document = TemplateDocument {
            name: name.clone(),
            revision: template.revision.to_string(),
            source,
            hook_module: template.hook_module.as_ref().map(|module| ModuleRef {
                module: template
                    .hooks
                    .as_ref()
                    .map(|hooks| hooks.module.clone())
                    .unwrap_or_default(),
                sha256: module.sha256.to_string(),
                size: module.bytes.len() as u64,
                kind: colloquy_hooks::BinaryForm::of(&module.bytes)
                    .ok()
                    .map(|form| match form {
                        colloquy_hooks::BinaryForm::Core => "core_module".to_owned(),
                        colloquy_hooks::BinaryForm::Component => "component".to_owned(),
                    }),
            }),
            template: serde_json::to_value(&template.source).unwrap_or_default(),
        };
        return Ok(([(header::ETAG, tag), vary], JsonResponse(document)).into_response());
    }
    Ok((
        [
            (header::ETAG, tag),
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(YAML_MEDIA_TYPE),
            ),
            vary,
        ],
        source,
    )
        .into_response())
}

/// `GET /v1/templates/{name}/revisions`: newest first.
async fn revisions(
    State(state): State<PolicyState>,
    PathParams(name): PathParams<String>,
    headers: HeaderMap,
) -> Result<JsonResponse<RevisionList>, PolicyError> {
    state.check_read(&headers, ReadNeeds::AnyCaller)?;
    let snapshot = state.0.live.snapshot();
    let current = snapshot.catalog.latest(&name).map(|t| t.revision.clone());
    let mut revisions: Vec<RevisionInfo> = snapshot
        .revisions_of(&name)
        .into_iter()
        .map(|(revision, source)| RevisionInfo {
            current: current.as_ref() == Some(&revision),
            revision: revision.to_string(),
            loaded_at: source.loaded_at,
        })
        .collect();
    if revisions.is_empty() {
        return Err(ApiError::NotFound(unknown(&name)).into());
    }
    revisions.sort_by(|a, b| {
        (b.current, b.loaded_at, &b.revision).cmp(&(a.current, a.loaded_at, &a.revision))
    });
    Ok(JsonResponse(RevisionList { name, revisions }))
}

/// `GET /v1/templates/{name}/modules/{sha256}`: the bytes of a hook module of any revision
/// of the template kept.
async fn module(
    State(state): State<PolicyState>,
    PathParams((name, sha256)): PathParams<(String, String)>,
    headers: HeaderMap,
) -> Result<Response, PolicyError> {
    state.check_read(&headers, ReadNeeds::Admin)?;
    let snapshot = state.0.live.snapshot();
    let module = snapshot
        .revisions_of(&name)
        .into_iter()
        .filter_map(|(_, source)| source.hook_module.clone())
        .find(|module| *module.sha256 == *sha256)
        .ok_or_else(|| {
            ApiError::NotFound(format!("template `{name}` has no hook module {sha256}"))
        })?;
    let tag = etag(&module.sha256);
    if matches_etag(&headers, &module.sha256) {
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, tag)]).into_response());
    }
    Ok((
        [
            (header::ETAG, tag),
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/wasm"),
            ),
        ],
        Bytes::from(module.bytes.to_vec()),
    )
        .into_response())
}

/// The admin check of writes: 401 without a token or with one nobody issued, 403 for an
/// agent's.
pub(crate) fn authorize(state: &PolicyState, headers: &HeaderMap) -> Result<(), ApiError> {
    match &state.0.writes {
        Writes::Disabled => Err(ApiError::Forbidden(
            "template uploads are disabled: no admin token is configured".into(),
        )),
        Writes::Follower(url) => Err(ApiError::Forbidden(format!(
            "this engine follows the policy manager at {url}; change templates there"
        ))),
        Writes::Identity(identity) => match identity.identify_headers(headers)? {
            super::Caller::Admin => Ok(()),
            super::Caller::Agent(agent) => Err(ApiError::Forbidden(format!(
                "`{agent}` is an agent: changing templates needs the administrator (the admin \
                 token, or a JWT with the admin claim)"
            ))),
        },
        Writes::AdminToken(token) => match super::auth::bearer_token(headers)? {
            None => Err(ApiError::Unauthenticated(
                "changing templates needs `Authorization: Bearer <admin token>`".into(),
            )),
            Some(presented) if same_secret(presented, token) => Ok(()),
            Some(_) => match state
                .0
                .identity
                .as_ref()
                .and_then(|identity| identity.identify_headers(headers).ok())
            {
                Some(super::Caller::Agent(agent)) => Err(ApiError::Forbidden(format!(
                    "`{agent}` is an agent: changing templates needs the admin token"
                ))),
                _ => Err(ApiError::Unauthenticated("unknown token".into())),
            },
        },
    }
}

/// Compares secrets in time independent of where they first differ.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

/// A request body that must be a template: UTF-8 text within [`MAX_TEMPLATE_BYTES`].
pub(crate) fn template_text(
    body: Result<Bytes, super::extract::BodyError>,
) -> Result<String, ApiError> {
    let body = body.map_err(|error| unreadable(error, MAX_TEMPLATE_BYTES))?;
    String::from_utf8(body.to_vec()).map_err(|_| ApiError::BadRequest {
        code: "invalid_body",
        message: "a template is UTF-8 YAML text".into(),
        pointer: None,
    })
}

/// `PUT /v1/templates/{name}`: body = the template's YAML. `201` for a new template, `200`
/// for a new revision of an existing one; `202` when the revision waits for its hook module
/// to compile (it serves once `GET /v1/status` no longer lists it under `compiling`, unless
/// `last_error` then names it); `422` with diagnostics when it does not compile.
async fn upload(
    State(state): State<PolicyState>,
    PathParams(name): PathParams<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, PolicyError> {
    authorize(&state, &headers)?;
    let yaml = template_text(body)?;
    let live = state.0.live.clone();
    let uploaded = name.clone();
    let upload = blocking(move || live.put(&uploaded, &yaml)).await?;
    let compiling = upload.compiling.into_iter().next();
    let (status, revision) = match &compiling {
        Some(waiting) => (StatusCode::ACCEPTED, waiting.revision.clone()),
        None => (
            if upload.created {
                StatusCode::CREATED
            } else {
                StatusCode::OK
            },
            upload
                .snapshot
                .catalog
                .latest(&name)
                .map(|t| t.revision.to_string())
                .unwrap_or_default(),
        ),
    };
    let body = JsonResponse(TemplateUploaded {
        name,
        revision: revision.clone(),
        compiling,
    });
    if status == StatusCode::ACCEPTED {
        // No `ETag`: the revision is not what `GET /v1/templates/{name}` serves yet.
        return Ok((status, body).into_response());
    }
    Ok((status, [(header::ETAG, etag(&revision))], body).into_response())
}

/// `PUT /v1/modules/{file}`: body = a wasm hook module, stored as `file` in the template
/// directory for templates to name in `spec.hooks.module`. `201` for a new file, `200` for a
/// replacement (every template naming it gets a new revision); `202` with the revisions
/// waiting for it to compile (`{"compiling": [...]}`, as in `GET /v1/status`); `400` when it
/// is not a wasm module; `422` with diagnostics when a template using it no longer passes.
async fn upload_module(
    State(state): State<PolicyState>,
    PathParams(file): PathParams<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, PolicyError> {
    authorize(&state, &headers)?;
    let body = body.map_err(|error| unreadable(error, MAX_MODULE_BYTES))?;
    let live = state.0.live.clone();
    let upload = blocking(move || live.put_module(&file, &body)).await?;
    if !upload.compiling.is_empty() {
        let body = ModuleUploaded {
            compiling: upload.compiling,
        };
        return Ok((StatusCode::ACCEPTED, JsonResponse(body)).into_response());
    }
    Ok(if upload.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    }
    .into_response())
}

/// `DELETE /v1/templates/{name}`: `204`; new conversations of it are refused from then on,
/// running ones finish on their revision.
async fn remove(
    State(state): State<PolicyState>,
    PathParams(name): PathParams<String>,
    headers: HeaderMap,
) -> Result<StatusCode, PolicyError> {
    authorize(&state, &headers)?;
    let live = state.0.live.clone();
    blocking(move || live.delete(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Runs a blocking catalog change off the async workers.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, ChangeError> + Send + 'static,
) -> Result<T, PolicyError> {
    blocking_with(work).await
}

/// [`blocking`] for any error a policy answer can be made of.
pub(crate) async fn blocking_with<T: Send + 'static, E: Into<PolicyError> + Send + 'static>(
    work: impl FnOnce() -> Result<T, E> + Send + 'static,
) -> Result<T, PolicyError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result.map_err(Into::into),
        Err(join) => Err(ChangeError::Io(io::Error::other(join.to_string())).into()),
    }
}

/// `GET /v1/status`.
async fn status(
    State(state): State<PolicyState>,
    headers: HeaderMap,
) -> Result<JsonResponse<PolicyStatus>, PolicyError> {
    state.check_read(&headers, ReadNeeds::AnyCaller)?;
    let live = &state.0.live;
    let snapshot = live.snapshot();
    Ok(JsonResponse(PolicyStatus {
        revision: snapshot.revision.to_string(),
        loaded_at: snapshot.loaded_at,
        generation: snapshot.generation,
        templates: snapshot.catalog.names().len(),
        source: live.origin().to_owned(),
        last_error: live.last_error().map(|failure| (*failure).clone()),
        compiling: live.compiling(),
    }))
}

/// `GET /v1/watch`: one `catalog` event now, then one per swap, until shutdown.
async fn watch_feed(
    State(state): State<PolicyState>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, PolicyError> {
    state.check_read(&headers, ReadNeeds::AnyCaller)?;
    let mut changes = state.0.live.subscribe();
    changes.mark_changed();
    let feed = Feed {
        changes,
        closing: state.0.closing.clone(),
        sent: Vec::new(),
    };
    let stream = futures_util::stream::unfold(feed, |mut feed| async move {
        let snapshot = feed.next().await?;
        let event = feed.entry(&snapshot);
        Some((Ok(event), feed))
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(WATCH_KEEP_ALIVE)))
}

/// One subscriber's change feed.
struct Feed {
    changes: watch::Receiver<Arc<Snapshot>>,
    closing: watch::Receiver<bool>,
    /// What this subscriber was last told.
    sent: Vec<TemplateSummary>,
}

impl Feed {
    /// The next snapshot to announce; `None` at shutdown.
    async fn next(&mut self) -> Option<Arc<Snapshot>> {
        if *self.closing.borrow() {
            return None;
        }
        tokio::select! {
            changed = self.changes.changed() => {
                changed.ok()?;
                Some(self.changes.borrow_and_update().clone())
            }
            _ = self.closing.wait_for(|closing| *closing) => None,
        }
    }

    fn entry(&mut self, snapshot: &Snapshot) -> Event {
        let templates = snapshot.summaries();
        let changed = templates
            .iter()
            .filter(|t| !self.sent.contains(t))
            .map(|t| t.name.clone())
            .collect();
        let removed = self
            .sent
            .iter()
            .filter(|old| !templates.iter().any(|t| t.name == old.name))
            .map(|old| old.name.clone())
            .collect();
        let change = CatalogChange {
            revision: snapshot.revision.to_string(),
            loaded_at: snapshot.loaded_at,
            templates: templates.clone(),
            changed,
            removed,
        };
        self.sent = templates;
        Event::default()
            .event(CATALOG_EVENT)
            .id(snapshot.generation.to_string())
            .json_data(&change)
            .unwrap_or_else(|_| Event::default().comment("unserializable entry"))
    }
}

/// A standalone policy manager accepting requests. Dropping it stops it at once;
/// [`RunningPolicyManager::shutdown`] lets requests in flight finish.
pub struct RunningPolicyManager {
    /// Where it listens.
    pub addr: SocketAddr,
    /// Its catalog.
    pub live: Arc<LiveCatalog>,
    closing: watch::Sender<bool>,
    server: Option<JoinHandle<io::Result<()>>>,
}

impl RunningPolicyManager {
    /// `http://addr`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Ends the change feeds, stops accepting connections, waits for requests in flight.
    pub async fn shutdown(mut self) -> io::Result<()> {
        // Fails only when no receiver is left: nothing to end.
        let _ = self.closing.send(true);
        match self.server.take() {
            Some(server) => server
                .await
                .unwrap_or_else(|error| Err(io::Error::other(error))),
            None => Ok(()),
        }
    }
}

impl Drop for RunningPolicyManager {
    fn drop(&mut self) {
        if let Some(server) = self.server.take() {
            server.abort();
        }
    }
}

/// Serves the policy API alone (plus `/healthz`) over `live` on `listener`. Watching the
/// directory is the caller's choice ([`colloquy_policy::watcher::watch`]). Reads are
/// public: the standalone manager knows no agents, and the engines following it read
/// without a token.
pub fn launch(
    live: Arc<LiveCatalog>,
    listener: TcpListener,
    admin_token: Option<String>,
) -> io::Result<RunningPolicyManager> {
    let addr = listener.local_addr()?;
    let (closing, closing_rx) = watch::channel(false);
    let writes = admin_token.map_or(Writes::Disabled, Writes::AdminToken);
    let app = router(PolicyState::new(
        live.clone(),
        writes,
        Reads::Public,
        closing_rx.clone(),
    ))
    .route("/healthz", get(ops::healthz))
    .fallback(ops::not_found)
    .method_not_allowed_fallback(ops::method_not_allowed);
    let mut shutdown = closing_rx;
    let server = super::listen::spawn(listener, app, async move {
        // An error means the sender is gone: shut down as well.
        let _ = shutdown.wait_for(|closing| *closing).await;
    });
    Ok(RunningPolicyManager {
        addr,
        live,
        closing,
        server: Some(server),
    })
}

#[cfg(test)]
mod tests;
