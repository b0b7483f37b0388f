//! `GET /v1/agents`: the agents a caller may see, with what this node knows of their inboxes
//! now (open streams, head, entries not yet acknowledged). Read by the web inspector's
//! Agents page; it changes nothing.

use axum::extract::State;
use colloquy_protocol::api::{AgentInfo, AgentKind, AgentList};
use colloquy_protocol::message::AgentId;

use super::AppState;
use super::auth::{Caller, Identity};
use super::error::ApiError;
use super::json::JsonResponse;

/// `GET /v1/agents`: every agent of the agents file for the administrator; the caller alone
/// for an agent (in open development mode too, where there is no list of agents).
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
) -> Result<JsonResponse<AgentList>, ApiError> {
    let ids: Vec<AgentId> = match &caller {
        Caller::Agent(me) => vec![me.clone()],
        Caller::Admin => state.identity().agents(),
    };
    let identity = state.identity();
    let (webhooks, a2a, inboxless) = (
        identity.webhooks(),
        identity.a2a_agents(),
        identity.inboxless(),
    );
    let engine = state.engine();
    let mut agents = Vec::with_capacity(ids.len());
    for id in ids {
        let store = engine.store();
        let inbox_head = store
            .inbox_head(&id)
            .await
            .map_err(colloquy_core::EngineError::from)?;
        // Reading from 0 starts at the oldest entry kept: everything from it to the head
        // waits for an acknowledgement.
        let oldest = store
            .inbox(&id, 0, 1)
            .await
            .map_err(colloquy_core::EngineError::from)?
            .first()
            .map(|entry| entry.seq);
        let kind = match (a2a.contains_key(&id), identity) {
            (true, Identity::Tokens { .. }) => AgentKind::A2a,
            _ => AgentKind::Token,
        };
        agents.push(AgentInfo {
            kind,
            inbox: !inboxless.contains(&id),
            webhook: webhooks.contains_key(&id),
            inbox_streams: engine.inbox_listeners(&id),
            inbox_head,
            unacknowledged: oldest.map_or(0, |oldest| inbox_head.saturating_sub(oldest) + 1),
            id,
        });
    }
    Ok(JsonResponse(AgentList { agents }))
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

    async fn agents(engine: &Arc<Engine>, token: &str) -> (StatusCode, serde_json::Value) {
        let identity = Identity::from_yaml(
            "admin_token: root\nagents: [{id: bob, token: bob-t}, {id: alice, token: alice-t}, \
             {id: carol, token: carol-t, inbox: false}]",
            "test",
        )
        .expect("a valid agents file");
        let (_, closing) = watch::channel(false);
        let app = super::super::router(AppState::new(
            engine.clone(),
            identity,
            Arc::new(Metrics::new()),
            closing,
        ));
        let request = Request::get("/v1/agents")
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .expect("request");
        let response = app.oneshot(request).await.expect("infallible service");
        let status = response.status();
        let bytes = response.into_body().collect().await.expect("body");
        (
            status,
            serde_json::from_slice(&bytes.to_bytes()).expect("JSON"),
        )
    }

    #[tokio::test]
    async fn the_admin_sees_every_agent_and_an_agent_itself() {
        let engine = Arc::new(Engine::new(
            Arc::new(colloquy_policy::Catalog::default()),
            Arc::new(MemoryStore::new()),
            Arc::new(ManualClock::new(0)),
            EngineConfig::default(),
        ));
        let _stream = engine.listen_inbox("bob");
        let (status, body) = agents(&engine, "root").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let ids: Vec<&str> = (body["agents"].as_array().expect("a list").iter())
            .map(|agent| agent["id"].as_str().expect("an id"))
            .collect();
        assert_eq!(ids, ["alice", "bob", "carol"]);
        assert_eq!(body["agents"][1]["inbox_streams"], 1);
        assert_eq!(body["agents"][0]["inbox_streams"], 0);
        assert_eq!(body["agents"][2]["inbox"], false);
        let (status, body) = agents(&engine, "alice-t").await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["agents"].as_array().map(Vec::len), Some(1));
        assert_eq!(body["agents"][0]["id"], "alice");
        assert_eq!(body["agents"][0]["unacknowledged"], 0);
        let (status, _) = agents(&engine, "nobody").await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
}
