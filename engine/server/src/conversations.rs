//! Starting, messaging, reading and listing conversations.

use std::num::NonZeroUsize;

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use colloquy_protocol::api::ConversationPage;
use colloquy_protocol::conversation::{
    ConversationStatus, ConversationView, OpenMove, Outcome, SendReceipt,
};
use colloquy_protocol::message::{SendMessage, StartConversation};
use serde::Deserialize;
use tracing::Instrument as _;

use super::AppState;
use super::auth::{Caller, MAX_AGENT_ID_LEN, valid_agent_id};
use super::error::ApiError;
use super::extract::{JsonBody, PathParams, QueryParams};
use super::json::JsonResponse;
use colloquy_core::error::ErrorKind;
use colloquy_core::listing::ConversationFilter;
use colloquy_core::log_safe::LogSafe;

/// Page size of `GET /v1/conversations` when the caller names none.
pub const DEFAULT_PAGE: usize = 50;

/// Where a started conversation is read: this, then its id (the `Location` of a start).
const LOCATION_PREFIX: &str = "/v1/conversations/";

/// `POST /v1/conversations` → 201 with the conversation view.
pub async fn start(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(mut request): JsonBody<StartConversation>,
) -> Result<Response, ApiError> {
    let agent = caller.agent()?;
    // The engine takes any printable name; over HTTP a participant must be able to sign in.
    if let Some((index, name)) =
        (request.participants.iter().enumerate()).find(|(_, name)| !valid_agent_id(name))
    {
        return Err(colloquy_core::EngineError::invalid(
            &format!("/participants/{index}"),
            format!(
                "participant {:?} could never sign in: agent ids are 1 to {MAX_AGENT_ID_LEN} \
                 characters of A-Z a-z 0-9 - _ . :",
                name
            ),
        )
        .into());
    }
    super::signatures::check_start(&state, agent, &request).await?;
    // The id is chosen here, not in the engine, so that the span (and every log line of the
    // start, the opening message's included) carries it.
    let id = request
        .conversation_id
        .get_or_insert_with(|| colloquy_core::engine::new_id().to_string());
    let span = tracing::info_span!(
        "conversation",
        id = %LogSafe(id),
        template = %LogSafe(&request.template)
    );
    let opening = request.message.as_ref().map(|m| m.performative.clone());
    let result = state
        .engine()
        .start(agent, request)
        .instrument(span.clone())
        .await;
    let view: ConversationView = match result {
        Ok(view) => view,
        Err(error) => {
            if let Some(performative) = opening {
                state.metrics().refused(None, &performative, error.code());
            }
            span.in_scope(|| tracing::debug!(%error, "start refused"));
            return Err(error.into());
        }
    };
    span.in_scope(|| tracing::debug!(conversation = %view.id, "started"));
    let mut response = (StatusCode::CREATED, JsonResponse(&view)).into_response();
    // Written straight into its buffer, which the header value then owns: `format!` and
    // `HeaderValue::from_str` went through the formatting machinery and copied it again.
    let mut location = String::with_capacity(LOCATION_PREFIX.len() + view.id.len());
    location.push_str(LOCATION_PREFIX);
    location.push_str(&view.id);
    if let Ok(location) = HeaderValue::try_from(location) {
        response.headers_mut().insert(header::LOCATION, location);
    }
    Ok(response)
}

/// `POST /v1/conversations/{id}/messages` → 202 with the receipt.
pub async fn send(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<String>,
    JsonBody(message): JsonBody<SendMessage>,
) -> Result<(StatusCode, JsonResponse<SendReceipt>), ApiError> {
    let agent = caller.agent()?;
    super::signatures::check(&state, agent, &id, &message).await?;
    let span = tracing::info_span!("conversation", id = %LogSafe(&id));
    let performative = message.performative.clone();
    match state
        .engine()
        .send(&id, agent, message)
        .instrument(span)
        .await
    {
        Ok(receipt) => Ok((StatusCode::ACCEPTED, JsonResponse(receipt))),
        Err(error) => {
            // Only refusals pay for the lookup (a store read when the conversation is not
            // loaded); an unknown conversation is labelled `unknown`. Not when the store is
            // out of reach: the failed commit dropped the cached copy, so the lookup would
            // wait for the store a second time before the caller gets its 503.
            let template = match error.kind() {
                ErrorKind::Unavailable => None,
                _ => state.engine().template_of(&id).await.ok(),
            };
            state
                .metrics()
                .refused(template, &performative, error.code());
            Err(error.into())
        }
    }
}

/// `GET /v1/conversations/{id}`: the whole conversation, for its parties and observers.
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<String>,
) -> Result<JsonResponse<ConversationView>, ApiError> {
    let view = state.engine().view(&id, caller.viewer()).await?;
    Ok(JsonResponse(view))
}

/// `GET /v1/conversations/{id}/moves` → 200: what the caller may send now, and to whom.
pub async fn moves(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(id): PathParams<String>,
) -> Result<JsonResponse<MovesView>, ApiError> {
    let agent = caller.agent()?;
    let moves = state.engine().moves_open_to(&id, agent).await?;
    Ok(JsonResponse(MovesView { moves }))
}

/// The answer of `GET /v1/conversations/{id}/moves`.
#[derive(Debug, serde::Serialize)]
pub struct MovesView {
    /// The moves, in template order.
    pub moves: Vec<OpenMove>,
}

/// Query of `GET /v1/conversations`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    participant: Option<String>,
    state: Option<ConversationStatus>,
    outcome: Option<Outcome>,
    template: Option<String>,
    cursor: Option<String>,
    /// 0 is refused (400) rather than read as 1.
    limit: Option<NonZeroUsize>,
    order: Option<ListOrder>,
}

/// The order of `GET /v1/conversations`: by id, oldest first (`asc`, the default) or newest
/// first (`desc`).
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ListOrder {
    /// Ascending ids: oldest first.
    Asc,
    /// Descending ids: newest first.
    Desc,
}

/// `GET /v1/conversations?participant=&state=&template=&cursor=&limit=&order=`: the
/// conversations the caller may read, by id, a page at a time.
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    QueryParams(query): QueryParams<ListQuery>,
) -> Result<JsonResponse<ConversationPage>, ApiError> {
    let filter = ConversationFilter {
        participant: query.participant,
        status: query.state,
        outcome: query.outcome,
        template: query.template,
        after: query.cursor,
        newest_first: query.order == Some(ListOrder::Desc),
        limit: query.limit.map_or(DEFAULT_PAGE, NonZeroUsize::get),
    };
    let (conversations, more) = state.engine().list(caller.viewer(), &filter).await;
    let next_cursor = super::next_cursor(&conversations, more, |c| &c.id);
    Ok(JsonResponse(ConversationPage {
        conversations,
        next_cursor,
    }))
}
