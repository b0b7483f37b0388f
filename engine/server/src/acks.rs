//! Inbox acknowledgements: an agent says how far it has handled its inbox, and the store
//! deletes those entries. Without them a durable store keeps every message ever delivered.

use axum::extract::State;
use colloquy_protocol::api::{InboxAck, InboxAcked};

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::extract::{JsonBody, PathParams};
use super::json::JsonResponse;

/// `POST /v1/agents/{id}/inbox/ack` `{"through": seq}`: deletes the agent's inbox entries up
/// to and including `seq`. The agent acknowledges its own inbox; the administrator any
/// (to drain the inbox of an agent that is gone). Acknowledging less than before changes
/// nothing; past the newest entry is a 422.
pub async fn acknowledge(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(agent): PathParams<String>,
    JsonBody(ack): JsonBody<InboxAck>,
) -> Result<JsonResponse<InboxAcked>, ApiError> {
    caller.check_inbox_owner(&agent, "acknowledge")?;
    let head = state
        .engine()
        .acknowledge_inbox(&agent, ack.through)
        .await?;
    Ok(JsonResponse(InboxAcked {
        through: ack.through,
        head,
    }))
}
