//! Identity over HTTP: bearer tokens name the caller, agents see only their own
//! conversations, inboxes and commitments, and open development mode trusts `X-Agent-Id`.

use colloquy_tests::http::{ADMIN_TOKEN, Server, call};
use reqwest::Method;
use serde_json::json;

async fn start_as(server: &Server, agent: &str, participant: &str) -> String {
    let (status, body) = call(
        server
            .as_agent(Method::POST, "/v1/conversations", agent)
            .json(&json!({
                "template": "fipa-query",
                "participants": [participant],
                "message": {"performative": "query-ref", "content": {"ref": "x"}}
            })),
    )
    .await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().expect("id").to_owned()
}

#[tokio::test]
async fn missing_and_unknown_tokens_are_unauthorized() {
    let server = Server::start().await;
    for request in [
        server.anonymous(Method::GET, "/v1/conversations"),
        server
            .anonymous(Method::GET, "/v1/conversations")
            .bearer_auth("forged-token"),
        // A header naming an agent is not a credential once tokens are required.
        server
            .anonymous(Method::GET, "/v1/conversations")
            .header("x-agent-id", "alice"),
    ] {
        let response = request.send().await.expect("sent");
        assert_eq!(response.status().as_u16(), 401);
        assert!(
            response.headers().contains_key("www-authenticate"),
            "401 says how to authenticate"
        );
    }
}

#[tokio::test]
async fn the_token_decides_who_sends() {
    let server = Server::start().await;
    let id = start_as(&server, "carol", "dave").await;
    // mallory holds her own token: she cannot answer for dave, whatever the body says.
    let (status, body) = call(
        server
            .as_agent(
                Method::POST,
                &format!("/v1/conversations/{id}/messages"),
                "mallory",
            )
            .json(&json!({"performative": "inform", "content": {"value": 1}})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = call(
        server
            .as_agent(
                Method::POST,
                &format!("/v1/conversations/{id}/messages"),
                "mallory",
            )
            .json(&json!({"performative": "inform", "sender": "dave"})),
    )
    .await;
    assert_eq!(
        status, 400,
        "a sender field is refused, not trusted: {body}"
    );
}

#[tokio::test]
async fn agents_see_only_their_own_inbox_conversations_and_commitments() {
    let server = Server::start().await;
    let id = start_as(&server, "carol", "dave").await;
    let (status, _) =
        call(server.as_agent(Method::GET, "/v1/agents/dave/inbox/poll", "carol")).await;
    assert_eq!(status, 403);
    let (status, body) =
        call(server.as_agent(Method::GET, "/v1/agents/dave/inbox/poll", "dave")).await;
    assert_eq!(status, 200);
    assert_eq!(body["items"][0]["conversation_id"], id.as_str());
    let (status, _) = call(server.as_agent(Method::GET, "/v1/agents/dave/inbox", "carol")).await;
    assert_eq!(status, 403, "the SSE inbox is guarded the same way");
    let (status, _) =
        call(server.as_agent(Method::GET, "/v1/commitments?agent=dave", "carol")).await;
    assert_eq!(status, 403);
    let (status, body) = call(server.as_agent(Method::GET, "/v1/conversations", "mallory")).await;
    assert_eq!(status, 200);
    assert_eq!(body["conversations"].as_array().map(Vec::len), Some(0));
    let (status, _) = call(server.as_agent(
        Method::GET,
        &format!("/v1/conversations/{id}/events"),
        "mallory",
    ))
    .await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn the_admin_reads_everything_and_acts_as_nobody() {
    let server = Server::start().await;
    let id = start_as(&server, "carol", "dave").await;
    let admin = |method, path: &str| server.anonymous(method, path).bearer_auth(ADMIN_TOKEN);
    let (status, _) = call(admin(Method::GET, &format!("/v1/conversations/{id}"))).await;
    assert_eq!(status, 200);
    let (status, body) = call(admin(Method::GET, "/v1/conversations")).await;
    assert_eq!(status, 200);
    assert_eq!(body["conversations"].as_array().map(Vec::len), Some(1));
    let (status, _) = call(admin(Method::GET, "/v1/commitments")).await;
    assert_eq!(status, 400, "the admin must name the agent");
    let (status, body) = call(
        admin(Method::POST, &format!("/v1/conversations/{id}/messages"))
            .json(&json!({"performative": "inform"})),
    )
    .await;
    assert_eq!(status, 403, "{body}");
}

#[tokio::test]
async fn open_mode_names_the_caller_by_header() {
    let server = Server::open().await;
    let (status, body) = call(server.anonymous(Method::GET, "/v1/conversations")).await;
    assert_eq!(status, 401, "{body}");
    let (status, _) = call(
        server
            .anonymous(Method::GET, "/v1/conversations")
            .header("x-agent-id", "not a valid id"),
    )
    .await;
    assert_eq!(status, 401);
    // Nobody speaks as the engine, whose own messages carry that name.
    let (status, body) = call(
        server
            .anonymous(Method::GET, "/v1/agents/colloquy:engine/inbox/poll")
            .header("x-agent-id", "colloquy:engine"),
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("reserved"))
    );
    let id = start_as(&server, "carol", "dave").await;
    let (status, body) =
        call(server.as_agent(Method::GET, &format!("/v1/conversations/{id}"), "carol")).await;
    assert_eq!(status, 200);
    assert_eq!(body["initiator"], "carol");
}
