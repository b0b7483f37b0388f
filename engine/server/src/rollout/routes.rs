//! The rollout routes of the policy API (issue 39): stage a candidate, read what its shadow
//! found, ramp it, promote it, roll back, read the history. Writes need the admin, as every
//! template write does (an agent's token gets 403); reads of candidates show their source,
//! so they need the admin too; the history is for any caller.
//!
//! - `POST /v1/templates/{name}/candidates[?sample=0.1]`: the YAML as body → `201`.
//! - `GET /v1/templates/{name}/candidates`.
//! - `GET /v1/templates/{name}/candidates/{revision}/diff`: what the candidate changes from
//!   the active revision, in the protocol's terms ([`colloquy_sandbox::diff`]); the web
//!   inspector's candidate view reads it.
//! - `POST /v1/templates/{name}/candidates/{revision}/promote`.
//! - `POST /v1/templates/{name}/candidates/{revision}/ramp?percent=N[&abort_on=…][&min_conversations=50]`.
//! - `POST /v1/templates/{name}/rollback`.
//! - `POST /v1/templates/{name}/replay[?since=MS][&limit=N]`: the YAML as body; the
//!   template's recorded conversations re-driven against it ([`super::replay`]).
//! - `GET /v1/templates/{name}/history`: on a route of its own beside `…/revisions`, because
//!   the history holds events (who made which revision active when), the revisions list
//!   holds things (the revisions kept).

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use colloquy_policy::live::RolloutError;
use colloquy_protocol::rollout::{Activated, CandidateList, CandidateStaged, History};
use colloquy_sandbox::diff::DiffReport;
use serde::Deserialize;

use crate::error::ApiError;
use crate::extract::{PathParams, QueryParams, RawBody};
use crate::json::JsonResponse;
use crate::policy::{PolicyError, PolicyState, ReadNeeds, authorize, blocking_with};

/// The rollout routes, as (method, path), for the policy router's route list.
pub const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/templates/{name}/candidates"),
    ("get", "/v1/templates/{name}/candidates"),
    ("get", "/v1/templates/{name}/candidates/{revision}/diff"),
    ("post", "/v1/templates/{name}/candidates/{revision}/promote"),
    ("post", "/v1/templates/{name}/candidates/{revision}/ramp"),
    ("post", "/v1/templates/{name}/rollback"),
    ("get", "/v1/templates/{name}/history"),
    ("post", "/v1/templates/{name}/replay"),
];

/// The routes, on the policy state.
pub fn router() -> Router<PolicyState> {
    Router::new()
        .route(
            "/v1/templates/{name}/candidates",
            post(stage).get(candidates),
        )
        .route(
            "/v1/templates/{name}/candidates/{revision}/diff",
            get(candidate_diff),
        )
        .route(
            "/v1/templates/{name}/candidates/{revision}/promote",
            post(promote),
        )
        .route(
            "/v1/templates/{name}/candidates/{revision}/ramp",
            post(ramp),
        )
        .route("/v1/templates/{name}/rollback", post(rollback))
        .route("/v1/templates/{name}/history", get(history))
        .route(
            "/v1/templates/{name}/replay",
            post(super::replay::replay_route),
        )
}

impl From<RolloutError> for PolicyError {
    fn from(error: RolloutError) -> PolicyError {
        let conflict = |code| {
            PolicyError::Api(ApiError::Conflict {
                code,
                message: error.to_string(),
            })
        };
        match &error {
            RolloutError::UnknownTemplate(_) => {
                PolicyError::Api(ApiError::NotFound(error.to_string()))
            }
            RolloutError::NotTheCandidate { .. } => conflict("not_the_candidate"),
            RolloutError::AlreadyActive { .. } => conflict("already_active"),
            RolloutError::NoPrevious { .. } => conflict("no_previous_revision"),
            RolloutError::Compiling(_) => conflict("hook_compiling"),
            RolloutError::Invalid(_) => PolicyError::Api(ApiError::BadRequest {
                code: "invalid_query",
                message: error.to_string(),
                pointer: None,
            }),
            RolloutError::Rejected(diagnostics) => PolicyError::Rejected(diagnostics.clone()),
        }
    }
}

/// Query of `POST …/candidates`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct StageQuery {
    /// The share of new conversations shadowed, 0 to 1.
    #[serde(default)]
    sample: Option<f64>,
}

/// `POST /v1/templates/{name}/candidates[?sample=0.1]`: compiles the body and stages it;
/// `201` with the candidate's revision, `422` with diagnostics when it does not compile,
/// `404` for an unknown template, `409` when it is the active revision already.
async fn stage(
    State(state): State<PolicyState>,
    PathParams(name): PathParams<String>,
    QueryParams(query): QueryParams<StageQuery>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> Result<Response, PolicyError> {
    authorize(&state, &headers)?;
    let yaml = crate::policy::template_text(body)?;
    let sample = query.sample.unwrap_or(1.0);
    let live = state.live().clone();
    let staged = name.clone();
    let candidate = blocking_with(move || live.stage(&staged, &yaml, sample, "admin")).await?;
    let active = state
        .live()
        .snapshot()
        .catalog
        .latest(&name)
        .map(|t| t.revision.to_string());
    let body = CandidateStaged {
        name,
        revision: candidate.template.revision.to_string(),
        active,
        sample,
    };
    Ok((StatusCode::CREATED, JsonResponse(body)).into_response())
}

/// `GET /v1/templates/{name}/candidates`.
async fn candidates(
    State(state): State<PolicyState>,
    PathParams(name): PathParams<String>,
    headers: HeaderMap,
) -> Result<JsonResponse<CandidateList>, PolicyError> {
    state.check_read(&headers, ReadNeeds::Admin)?;
    let snapshot = state.live().snapshot();
    let active = snapshot
        .catalog
        .latest(&name)
        .ok_or_else(|| ApiError::NotFound(format!("no template named `{name}`")))?;
    let candidates = snapshot
        .candidates
        .get(name.as_str())
        .map(|candidate| match state.rollouts() {
            Some(rollouts) => rollouts.report(&name, candidate),
            None => crate::rollout::Rollouts::report_without_shadow(candidate),
        })
        .into_iter()
        .collect();
    Ok(JsonResponse(CandidateList {
        name,
        active: Some(active.revision.to_string()),
        candidates,
    }))
}

/// `GET …/candidates/{revision}/diff`: what the staged candidate changes from the active
/// revision, as `colloquy templates diff --json` prints it. Admin only, as the candidates'
/// report (the changes tell what the candidate's source holds); `404` for an unknown
/// template, `409` when `revision` is not the staged candidate.
async fn candidate_diff(
    State(state): State<PolicyState>,
    PathParams((name, revision)): PathParams<(String, String)>,
    headers: HeaderMap,
) -> Result<JsonResponse<DiffReport>, PolicyError> {
    state.check_read(&headers, ReadNeeds::Admin)?;
    let snapshot = state.live().snapshot();
    let active = snapshot
        .catalog
        .latest(&name)
        .ok_or_else(|| RolloutError::UnknownTemplate(name.clone()))?;
    let staged = snapshot.candidates.get(name.as_str());
    let candidate = match staged {
        Some(candidate) if *candidate.template.revision == *revision => candidate,
        _ => {
            return Err(RolloutError::NotTheCandidate {
                name,
                revision,
                staged: staged.map(|candidate| candidate.template.revision.to_string()),
            }
            .into());
        }
    };
    Ok(JsonResponse(DiffReport::between(
        &active,
        &candidate.template,
    )))
}

/// `POST …/candidates/{revision}/promote`: the candidate serves new conversations; `409`
/// when `revision` is not the staged candidate.
async fn promote(
    State(state): State<PolicyState>,
    PathParams((name, revision)): PathParams<(String, String)>,
    headers: HeaderMap,
) -> Result<JsonResponse<Activated>, PolicyError> {
    authorize(&state, &headers)?;
    let live = state.live().clone();
    let promoted = name.clone();
    let activation = blocking_with(move || live.promote(&promoted, &revision, "admin")).await?;
    Ok(JsonResponse(Activated { name, activation }))
}

/// Query of `POST …/ramp`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RampQuery {
    /// The share of new conversations started on the candidate, 0 to 100.
    percent: u8,
    /// Gates: `refusal_rate:5,hook_failure_rate:2`.
    #[serde(default)]
    abort_on: Option<String>,
    /// Conversations each side needs before the gates are judged.
    #[serde(default)]
    min_conversations: Option<u64>,
}

/// Conversations each side of a ramp needs before its gates are judged, unless told.
pub const DEFAULT_MIN_CONVERSATIONS: u64 = 50;

/// `POST …/candidates/{revision}/ramp?percent=N`: `percent` of new conversations start on
/// the candidate, for real; `0` stops the ramp.
async fn ramp(
    State(state): State<PolicyState>,
    PathParams((name, revision)): PathParams<(String, String)>,
    QueryParams(query): QueryParams<RampQuery>,
    headers: HeaderMap,
) -> Result<JsonResponse<Activated>, PolicyError> {
    authorize(&state, &headers)?;
    let live = state.live().clone();
    let ramped = name.clone();
    let activation = blocking_with(move || {
        live.ramp(
            &ramped,
            &revision,
            query.percent,
            query.abort_on.as_deref(),
            query.min_conversations.unwrap_or(DEFAULT_MIN_CONVERSATIONS),
            "admin",
        )
    })
    .await?;
    Ok(JsonResponse(Activated { name, activation }))
}

/// `POST /v1/templates/{name}/rollback`: the revision active before the last change serves
/// again; `409` when there is none.
async fn rollback(
    State(state): State<PolicyState>,
    PathParams(name): PathParams<String>,
    headers: HeaderMap,
) -> Result<JsonResponse<Activated>, PolicyError> {
    authorize(&state, &headers)?;
    let live = state.live().clone();
    let rolled = name.clone();
    let activation = blocking_with(move || live.rollback(&rolled, "admin")).await?;
    Ok(JsonResponse(Activated { name, activation }))
}

/// `GET /v1/templates/{name}/history`: every activation, oldest first.
async fn history(
    State(state): State<PolicyState>,
    PathParams(name): PathParams<String>,
    headers: HeaderMap,
) -> Result<JsonResponse<History>, PolicyError> {
    state.check_read(&headers, ReadNeeds::AnyCaller)?;
    let activations = state.live().history(Some(&name));
    let active = state
        .live()
        .snapshot()
        .catalog
        .latest(&name)
        .map(|t| t.revision.to_string());
    if activations.is_empty() && active.is_none() {
        return Err(ApiError::NotFound(format!("no template named `{name}`")).into());
    }
    Ok(JsonResponse(History {
        name,
        active,
        activations,
    }))
}
