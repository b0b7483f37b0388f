//! `POST /v1/templates/{name}/replay[?since=MS][&limit=N]`: the admin's replay over HTTP.
//! The body is a candidate revision's YAML; the answer, the report `colloquy templates
//! replay --format json` prints ([`ReplayReport`]): the template's recorded conversations in
//! the engine's store, re-driven against the candidate in memory, hooks included. It reads
//! the store and never writes to it.

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use colloquy_core::clock::ManualClock;
use colloquy_core::store::ConversationStore;
use colloquy_protocol::event::EventKind;
use colloquy_sandbox::replay::{ReplayReport, replay};
use serde::Deserialize;

use crate::error::ApiError;
use crate::extract::{PathParams, QueryParams, RawBody};
use crate::json::JsonResponse;
use crate::policy::{PolicyError, PolicyState, authorize, blocking_with};

/// Conversations replayed unless told (`?limit=`), and at most.
pub const DEFAULT_LIMIT: usize = 1_000;
/// The most `?limit=` may ask for: a replay runs on one thread while the caller waits.
pub const MAX_LIMIT: usize = 10_000;
/// Conversation ids read from the store per page.
const PAGE: usize = 1_000;

/// Query of `POST …/replay`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReplayQuery {
    /// Only conversations started at or after this (Unix milliseconds).
    #[serde(default)]
    since: Option<u64>,
    /// At most this many conversations, in id order.
    #[serde(default)]
    limit: Option<usize>,
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
enum ReplayFailure {
    #[error(transparent)]
    Rollout(#[from] colloquy_policy::live::RolloutError),
    #[error(transparent)]
    Api(#[from] ApiError),
}

impl From<ReplayFailure> for PolicyError {
    fn from(failure: ReplayFailure) -> PolicyError {
        match failure {
            ReplayFailure::Rollout(error) => error.into(),
            ReplayFailure::Api(error) => error.into(),
        }
    }
}

/// `POST /v1/templates/{name}/replay`.
pub(super) async fn replay_route(
    State(state): State<PolicyState>,
    PathParams(name): PathParams<String>,
    QueryParams(query): QueryParams<ReplayQuery>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<JsonResponse<ReplayReport>, PolicyError> {
    authorize(&state, &headers)?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT);
    if limit > MAX_LIMIT {
        return Err(ApiError::BadRequest {
            code: "invalid_query",
            message: format!("limit {limit} is over {MAX_LIMIT}"),
            pointer: None,
        }
        .into());
    }
    let store = state.store().cloned().ok_or_else(|| ApiError::Conflict {
        code: "no_store",
        message: "this server has no conversation store to replay from (the standalone policy \
                  manager): replay on an engine"
            .into(),
    })?;
    let yaml = crate::policy::template_text(body)?;
    let live = state.live().clone();
    let since = query.since.unwrap_or(0);
    let report = blocking_with(move || -> Result<ReplayReport, ReplayFailure> {
        let candidate = Arc::new(live.compile_candidate(&name, &yaml)?);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|error| internal(error.to_string()))?;
        runtime.block_on(run(&*store, &name, candidate, since, limit))
    })
    .await?;
    Ok(JsonResponse(report))
}

fn internal(message: String) -> ApiError {
    ApiError::Engine(colloquy_core::error::EngineError::Store(
        colloquy_core::store::StoreError::Internal(message),
    ))
}

async fn run(
    store: &dyn ConversationStore,
    name: &str,
    candidate: Arc<colloquy_policy::CompiledTemplate>,
    since: u64,
    limit: usize,
) -> Result<ReplayReport, ReplayFailure> {
    let began = std::time::Instant::now();
    let clock = Arc::new(ManualClock::new(0));
    let hooks = colloquy_sandbox::hooks_on(&clock, candidate.hooks.is_some())
        .map_err(|error| internal(format!("hook runtime: {error}")))?;
    let mut report = ReplayReport::new(name, &candidate);
    let mut after: Option<Arc<str>> = None;
    'pages: loop {
        let store_error = |error: colloquy_core::store::StoreError| {
            ApiError::Engine(colloquy_core::error::EngineError::Store(error))
        };
        let Some(ids) = store
            .conversation_ids(after.as_deref(), PAGE)
            .await
            .map_err(store_error)?
        else {
            return Err(ApiError::Conflict {
                code: "store_not_listable",
                message: "this engine's store keeps no list of conversations (the memory \
                          store): replay reads a durable store (SQLite, Redis)"
                    .into(),
            }
            .into());
        };
        let Some(last) = ids.last().cloned() else {
            break;
        };
        for id in ids {
            if report.conversations >= limit {
                break 'pages;
            }
            let Some(log) = store.load(&id).await.map_err(store_error)? else {
                continue;
            };
            let Some(first) = log.first() else { continue };
            let EventKind::Started(started) = &first.kind else {
                continue;
            };
            if *started.template != *name || first.at < since {
                continue;
            }
            let verdict = replay(&log, &candidate, &clock, hooks.clone())
                .await
                .map_err(|error| internal(error.to_string()))?;
            report.add(&id, &log, verdict);
        }
        after = Some(last);
    }
    report.seconds = began.elapsed().as_secs_f64();
    report.note_if_empty("this engine's store", since);
    Ok(report)
}
