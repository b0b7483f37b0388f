//! [`Client`]: one agent's connection to a Colloquy server, with a method per endpoint.

use std::sync::Arc;

use colloquy_protocol::ErrorBody;
use colloquy_protocol::api::{CommitmentList, ConversationPage, InboxAck, InboxAcked, InboxPage};
use colloquy_protocol::conversation::{CommitmentView, ConversationView, OpenMove, SendReceipt};
use colloquy_protocol::message::{SendMessage, StartConversation};
use reqwest::{Method, RequestBuilder, Response};
use serde::de::DeserializeOwned;

use crate::error::SdkError;
use crate::stream::{EventStream, InboxStream};

/// How long an idle pooled connection is kept: under the server's 30 s idle cut-off.
const POOL_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

/// The header naming the caller when the server runs without an agents file.
pub const AGENT_HEADER: &str = "x-agent-id";

/// An agent's client. Cheap to clone: clones share one connection pool.
#[derive(Clone, Debug)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
    /// The agent's private key, when its messages are signed ([`Client::signing_with`]).
    signer: Option<Arc<colloquy_trust::jws::Signer>>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
    pub(crate) agent: String,
    pub(crate) token: Option<String>,
    /// Where tokens come from when they change ([`Client::with_token_provider`]).
    pub(crate) provider: Option<crate::token::ProvidedToken>,
}

/// Filters of [`Client::conversations`].
#[derive(Clone, Debug, Default)]
pub struct ConversationQuery {
    /// Only those this agent takes part in.
    pub participant: Option<String>,
    /// `active` or `completed`.
    pub state: Option<String>,
    /// Only this template's.
    pub template: Option<String>,
    /// The previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size.
    pub limit: Option<usize>,
}

impl Client {
    /// A client for `agent` at `url` (such as `http://127.0.0.1:7700`), authenticating with
    /// `token`; without a token it names itself with `X-Agent-Id`, which only a server in
    /// open development mode accepts. Checks that the server is ready.
    pub async fn connect(url: &str, agent: &str, token: Option<&str>) -> Result<Client, SdkError> {
        let client = Client::new(url, agent, token)?;
        let response = client.inner.http.get(client.url("/readyz")).send().await?;
        check(response).await?;
        Ok(client)
    }

    /// Like [`Client::connect`], without contacting the server.
    pub fn new(url: &str, agent: &str, token: Option<&str>) -> Result<Client, SdkError> {
        Client::build(url, agent, token.map(str::to_owned), None)
    }

    fn build(
        url: &str,
        agent: &str,
        token: Option<String>,
        provider: Option<crate::token::ProvidedToken>,
    ) -> Result<Client, SdkError> {
        // Idle pooled connections are dropped before the server closes them (it closes a
        // connection that has been idle for 30 s), so a request never goes out on a
        // connection the server is closing at that moment.
        let http = reqwest::Client::builder()
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build()?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                base: url.trim_end_matches('/').to_owned(),
                agent: agent.to_owned(),
                token,
                provider,
            }),
            signer: None,
        })
    }

    /// This client, signing every message it sends (and the opening message of every
    /// conversation it starts) with `key`, whose public half the server has for this agent
    /// (`signing_keys` in the agents file). A message without an id, or a start without a
    /// conversation id, gets a fresh UUIDv7 one: the signature covers both.
    pub fn signing_with(mut self, key: colloquy_trust::jws::Signer) -> Client {
        self.signer = Some(Arc::new(key));
        self
    }

    /// `message` as this client sends it in `conversation_id`: signed, with an id, when the
    /// client has a key; as it is otherwise.
    fn signed(
        &self,
        conversation_id: &str,
        message: &SendMessage,
    ) -> Result<Option<SendMessage>, SdkError> {
        let Some(signer) = &self.signer else {
            return Ok(None);
        };
        let mut signed = message.clone();
        signed
            .message_id
            .get_or_insert_with(|| uuid::Uuid::now_v7().to_string());
        colloquy_trust::message::sign(signer, conversation_id, &self.inner.agent, &mut signed)
            .map_err(SdkError::Signing)?;
        Ok(Some(signed))
    }

    /// A client for `agent` at `url` whose bearer token comes from `provider`, asked when
    /// the client has none, when the token is near its expiry, and when the server refuses
    /// it with 401 (the request is then sent once more). Checks that the server is ready.
    pub async fn connect_with_token_provider(
        url: &str,
        agent: &str,
        provider: impl crate::token::TokenProvider,
    ) -> Result<Client, SdkError> {
        let client = Client::with_token_provider(url, agent, provider)?;
        let response = client.inner.http.get(client.url("/readyz")).send().await?;
        check(response).await?;
        Ok(client)
    }

    /// Like [`Client::connect_with_token_provider`], without contacting the server.
    pub fn with_token_provider(
        url: &str,
        agent: &str,
        provider: impl crate::token::TokenProvider,
    ) -> Result<Client, SdkError> {
        let provided = crate::token::ProvidedToken::new(Arc::new(provider));
        Client::build(url, agent, None, Some(provided))
    }

    /// The agent this client acts for.
    pub fn agent(&self) -> &str {
        &self.inner.agent
    }

    /// The server's base URL.
    pub fn base_url(&self) -> &str {
        &self.inner.base
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.inner.base)
    }

    pub(crate) fn http_request(&self, method: Method, path: &str) -> RequestBuilder {
        let builder = self.inner.http.request(method, self.url(path));
        match (&self.inner.token, &self.inner.provider) {
            // The provider's token is set as the request goes out ([`Client::send_request`]).
            (_, Some(_)) => builder,
            (Some(token), None) => builder.bearer_auth(token),
            (None, None) => builder.header(AGENT_HEADER, &self.inner.agent),
        }
    }

    /// Sends a request of [`Client::http_request`]: with a token provider, with its token,
    /// and once more with a new one if the server refuses it with 401.
    pub(crate) async fn send_request(&self, builder: RequestBuilder) -> Result<Response, SdkError> {
        let Some(provided) = &self.inner.provider else {
            return Ok(builder.send().await?);
        };
        let request = builder.build()?;
        let again = request.try_clone();
        let token = provided.get(None).await?;
        let response = self
            .inner
            .http
            .execute(with_bearer(request, &token)?)
            .await?;
        match again {
            Some(again) if response.status() == reqwest::StatusCode::UNAUTHORIZED => {
                let token = provided.get(Some(&token)).await?;
                Ok(self.inner.http.execute(with_bearer(again, &token)?).await?)
            }
            _ => Ok(response),
        }
    }

    async fn call<T: DeserializeOwned>(&self, builder: RequestBuilder) -> Result<T, SdkError> {
        let response = check(self.send_request(builder).await?).await?;
        let bytes = response.bytes().await?;
        serde_json::from_slice(&bytes).map_err(|error| SdkError::Decode(error.to_string()))
    }

    /// `POST /v1/conversations`: starts a conversation with this agent as the initiator.
    pub async fn start(&self, request: &StartConversation) -> Result<ConversationView, SdkError> {
        let mut signed = None;
        if let (Some(_), Some(message)) = (&self.signer, &request.message) {
            let mut start = request.clone();
            let id = start
                .conversation_id
                .get_or_insert_with(|| uuid::Uuid::now_v7().to_string())
                .clone();
            start.message = self.signed(&id, message)?;
            signed = Some(start);
        }
        let request = signed.as_ref().unwrap_or(request);
        self.call(
            self.http_request(Method::POST, "/v1/conversations")
                .json(request),
        )
        .await
    }

    /// `POST /v1/conversations/{id}/messages`: sends a message as this agent.
    pub async fn send(
        &self,
        conversation_id: &str,
        message: &SendMessage,
    ) -> Result<SendReceipt, SdkError> {
        let path = format!("/v1/conversations/{}/messages", segment(conversation_id));
        let signed = self.signed(conversation_id, message)?;
        let message = signed.as_ref().unwrap_or(message);
        self.call(self.http_request(Method::POST, &path).json(message))
            .await
    }

    /// `GET /v1/conversations/{id}`.
    pub async fn conversation(&self, conversation_id: &str) -> Result<ConversationView, SdkError> {
        let path = format!("/v1/conversations/{}", segment(conversation_id));
        self.call(self.http_request(Method::GET, &path)).await
    }

    /// `GET /v1/conversations/{id}/moves`: what this agent may send now, to whom, and the
    /// guard each must satisfy, in template order.
    pub async fn moves(&self, conversation_id: &str) -> Result<Vec<OpenMove>, SdkError> {
        #[derive(serde::Deserialize)]
        struct Moves {
            moves: Vec<OpenMove>,
        }
        let path = format!("/v1/conversations/{}/moves", segment(conversation_id));
        let answer: Moves = self.call(self.http_request(Method::GET, &path)).await?;
        Ok(answer.moves)
    }

    /// `GET /v1/conversations/{id}/audit`: the conversation's audit record as this agent may
    /// have it (the events it may not see as their digests). Check it with
    /// [`crate::trust::record::verify`] and the engine's key (`GET /v1/audit/keys`), offline.
    pub async fn audit(
        &self,
        conversation_id: &str,
    ) -> Result<crate::trust::record::AuditRecord, SdkError> {
        let path = format!("/v1/conversations/{}/audit", segment(conversation_id));
        self.call(self.http_request(Method::GET, &path)).await
    }

    /// `GET /v1/conversations`: a page of the conversations this agent may read.
    pub async fn conversations(
        &self,
        query: &ConversationQuery,
    ) -> Result<ConversationPage, SdkError> {
        let mut params: Vec<(&str, String)> = Vec::new();
        let fields = [
            ("participant", &query.participant),
            ("state", &query.state),
            ("template", &query.template),
            ("cursor", &query.cursor),
        ];
        for (name, value) in fields {
            if let Some(value) = value {
                params.push((name, value.clone()));
            }
        }
        if let Some(limit) = query.limit {
            params.push(("limit", limit.to_string()));
        }
        self.call(
            self.http_request(Method::GET, "/v1/conversations")
                .query(&params),
        )
        .await
    }

    /// `GET /v1/commitments`: this agent's commitments, optionally by `role` (`debtor` or
    /// `creditor`) and `state`; every page of them, in id order.
    pub async fn commitments(
        &self,
        role: Option<&str>,
        state: Option<&str>,
    ) -> Result<Vec<CommitmentView>, SdkError> {
        let mut commitments = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut params = Vec::new();
            params.extend(role.map(|role| ("role", role)));
            params.extend(state.map(|state| ("state", state)));
            params.extend(cursor.as_deref().map(|cursor| ("cursor", cursor)));
            let page: CommitmentList = self
                .call(
                    self.http_request(Method::GET, "/v1/commitments")
                        .query(&params),
                )
                .await?;
            commitments.extend(page.commitments);
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(commitments),
            }
        }
    }

    /// `POST /v1/commitments/{id}/release`: waives a commitment owed to this agent.
    pub async fn release_commitment(&self, id: &str) -> Result<CommitmentView, SdkError> {
        let path = format!("/v1/commitments/{}/release", segment(id));
        self.call(self.http_request(Method::POST, &path)).await
    }

    /// `POST /v1/commitments/{id}/cancel`: withdraws from a commitment this agent owes.
    pub async fn cancel_commitment(&self, id: &str) -> Result<CommitmentView, SdkError> {
        let path = format!("/v1/commitments/{}/cancel", segment(id));
        self.call(self.http_request(Method::POST, &path)).await
    }

    /// `GET /v1/agents/{me}/inbox/poll`: inbox items after `after`, waiting up to `wait_ms`
    /// for the first one.
    pub async fn poll_inbox(&self, after: u64, wait_ms: u64) -> Result<InboxPage, SdkError> {
        let path = format!("/v1/agents/{}/inbox/poll", segment(self.agent()));
        let params = [("after", after), ("wait_ms", wait_ms)];
        self.call(self.http_request(Method::GET, &path).query(&params))
            .await
    }

    /// `POST /v1/agents/{me}/inbox/ack`: this agent has handled its inbox up to and including
    /// `through`, and the server deletes those entries. [`Client::serve`] acknowledges what
    /// it handles on its own; an agent reading its inbox otherwise calls this, or the
    /// server keeps every message it was ever sent.
    pub async fn acknowledge(&self, through: u64) -> Result<InboxAcked, SdkError> {
        let path = format!("/v1/agents/{}/inbox/ack", segment(self.agent()));
        self.call(
            self.http_request(Method::POST, &path)
                .json(&InboxAck { through }),
        )
        .await
    }

    /// Acknowledges this agent's whole inbox as it stands, for an agent that only starts
    /// conversations. [`Client::request`], [`Client::query`] and
    /// [`Client::call_for_proposals`] follow a conversation's events, not the inbox, yet the
    /// replies land in the inbox too, and a durable store keeps them until they are
    /// acknowledged. It deletes entries nobody has read: an agent that also reads its inbox
    /// ([`Client::serve`], [`Client::inbox`]) must not call it.
    pub async fn acknowledge_inbox(&self) -> Result<InboxAcked, SdkError> {
        // `through: 0` acknowledges nothing and answers the head.
        let asked = self.acknowledge(0).await?;
        if asked.head == 0 {
            return Ok(asked);
        }
        self.acknowledge(asked.head).await
    }

    /// The inbox as a stream of items after `after` (0: from the start), reconnecting and
    /// resuming on its own.
    pub fn inbox(&self, after: u64) -> InboxStream {
        InboxStream::new(self.clone(), after)
    }

    /// A conversation's events after `after`, ending after its `completed` event.
    pub fn events(&self, conversation_id: &str, after: u64) -> EventStream {
        EventStream::new(self.clone(), conversation_id, after)
    }
}

/// Turns an error status into [`SdkError::Api`].
pub(crate) async fn check(response: Response) -> Result<Response, SdkError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let bytes = response.bytes().await?;
    let body = serde_json::from_slice::<ErrorBody>(&bytes).unwrap_or_else(|_| {
        ErrorBody::new(
            "http_error",
            String::from_utf8_lossy(&bytes).into_owned(),
            None,
        )
    });
    Err(SdkError::Api {
        status: status.as_u16(),
        body,
    })
}

/// `request` with `Authorization: Bearer <token>`.
fn with_bearer(mut request: reqwest::Request, token: &str) -> Result<reqwest::Request, SdkError> {
    let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| SdkError::Token("it gave a token that is no header value".into()))?;
    request
        .headers_mut()
        .insert(reqwest::header::AUTHORIZATION, value);
    Ok(request)
}

/// Percent-encodes one path segment (commitment ids contain `/`).
pub(crate) fn segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~' | b':') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_escape_slashes() {
        assert_eq!(segment("0197-ab/1"), "0197-ab%2F1");
        assert_eq!(segment("a b"), "a%20b");
    }
}
