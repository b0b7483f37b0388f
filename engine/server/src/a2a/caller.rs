//! Who calls an A2A route: as on `/v1` (a bearer token from the agents file, or in open
//! development mode the `X-Agent-Id` header), except that in open mode a caller that names
//! itself nowhere is [`ANONYMOUS_CLIENT`]. A2A clients know nothing of `X-Agent-Id`; in
//! open mode nobody is checked anyway, so an unnamed client gets a name rather than a 401.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::AppState;
use crate::auth::{AGENT_HEADER, Caller, Identity};
use crate::error::ApiError;

/// The initiator of the tasks of an A2A client that names itself nowhere (open mode only).
pub const ANONYMOUS_CLIENT: &str = "a2a-client";

/// The caller of an A2A route.
pub struct A2aCaller(pub Caller);

impl FromRequestParts<AppState> for A2aCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<A2aCaller, ApiError> {
        let identity = state.identity();
        if matches!(identity, Identity::Open) && !parts.headers.contains_key(AGENT_HEADER) {
            return Ok(A2aCaller(Caller::Agent(Arc::from(ANONYMOUS_CLIENT))));
        }
        identity.identify(parts).map(A2aCaller)
    }
}
