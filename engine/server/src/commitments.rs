//! Commitments: who owes what to whom, and the two ways out of one (the creditor releases,
//! the debtor cancels).

use std::num::NonZeroUsize;

use axum::extract::State;
use colloquy_protocol::api::CommitmentList;
use colloquy_protocol::conversation::{CommitmentState, CommitmentView};
use serde::Deserialize;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::{PathParams, QueryParams};
use super::json::JsonResponse;

/// Which side of a commitment an agent is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Owes it.
    Debtor,
    /// Is owed it.
    Creditor,
}

/// Commitments per page of `GET /v1/commitments`, unless the caller asks for fewer.
pub const MAX_COMMITMENT_PAGE: usize = 500;

/// Query of `GET /v1/commitments`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitmentQuery {
    agent: Option<String>,
    role: Option<Role>,
    state: Option<CommitmentState>,
    /// The previous page's `next_cursor`: commitments with ids after it.
    cursor: Option<String>,
    /// At most this many (at most [`MAX_COMMITMENT_PAGE`]); 0 is refused.
    limit: Option<NonZeroUsize>,
}

/// `GET /v1/commitments?agent=&role=debtor|creditor&state=&cursor=&limit=`: an agent's
/// commitments (the caller's own; the administrator names any agent), ordered by
/// conversation and id, a page at a time: an agent party to many conversations would
/// otherwise get all of theirs in one answer, and each page reads only the conversations it
/// reaches.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(query): QueryParams<CommitmentQuery>,
) -> Result<JsonResponse<CommitmentList>, ApiError> {
    let agent = match (&caller, query.agent) {
        (Caller::Agent(me), Some(agent)) if **me != *agent => {
            return Err(ApiError::Forbidden(format!(
                "`{me}` may list only its own commitments, not `{agent}`'s"
            )));
        }
        (_, Some(agent)) => agent,
        (Caller::Agent(me), None) => me.to_string(),
        (Caller::Admin, None) => {
            return Err(ApiError::BadRequest {
                code: "invalid_query",
                message: "name the agent whose commitments to list: ?agent=".into(),
                pointer: None,
            });
        }
    };
    // Also the conversations this node has not loaded (after a restart, or on another node).
    let limit = query
        .limit
        .map_or(MAX_COMMITMENT_PAGE, NonZeroUsize::get)
        .min(MAX_COMMITMENT_PAGE);
    let (commitments, more) = state
        .engine()
        .commitments(&agent, query.cursor.as_deref(), limit, |c| {
            let role = match query.role {
                None => true,
                Some(Role::Debtor) => *c.debtor == *agent,
                Some(Role::Creditor) => *c.creditor == *agent,
            };
            role && query.state.is_none_or(|s| c.state == s)
        })
        .await?;
    let next_cursor = super::next_cursor(&commitments, more, |c| &c.id);
    Ok(JsonResponse(CommitmentList {
        commitments,
        next_cursor,
    }))
}

/// `POST /v1/commitments/{id}/release`: the creditor waives it.
///
/// Commitment ids are `<conversation id>/<n>`. Routed twice: `{id}` takes the id with its
/// slash percent-encoded (`%2F`), `{conversation}/{n}` the id written as it is; the path's
/// segments joined with `/` give the id either way.
pub async fn release(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(segments): PathParams<Vec<String>>,
) -> Result<JsonResponse<CommitmentView>, ApiError> {
    let agent = caller.agent()?;
    let id = segments.join("/");
    Ok(JsonResponse(
        state.engine().release_commitment(&id, agent).await?,
    ))
}

/// `POST /v1/commitments/{id}/cancel`: the debtor withdraws from it. Routed like
/// [`release`].
pub async fn cancel(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(segments): PathParams<Vec<String>>,
) -> Result<JsonResponse<CommitmentView>, ApiError> {
    let agent = caller.agent()?;
    let id = segments.join("/");
    Ok(JsonResponse(
        state.engine().cancel_commitment(&id, agent).await?,
    ))
}
