//! The MCP surface's only way into the engine: in-process requests to the HTTP API's own
//! router, carrying the MCP caller's credentials. A tool can therefore see and do exactly
//! what that agent may over HTTP (the same identity check, sight rules, validation and error
//! codes), and no MCP code decides who may read what.

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode, header};
use futures_util::StreamExt as _;
use http_body_util::BodyExt as _;
use serde_json::Value;
use tower::ServiceExt as _;

use crate::auth::AGENT_HEADER;

/// The credential an MCP request came with, passed on to every API call it makes.
#[derive(Clone, Debug)]
pub enum Credential {
    /// `Authorization: Bearer …` (an agents-file token).
    Bearer(HeaderValue),
    /// `X-Agent-Id` (open development mode).
    AgentHeader(HeaderValue),
}

/// A caller of the API: the router and whom to call it as.
#[derive(Clone)]
pub struct Api {
    router: Router,
    credential: Credential,
}

/// An answer the API gave with a 4xx or 5xx: its status and its JSON error body.
#[derive(Clone, Debug)]
pub struct Refused {
    /// The status.
    pub status: StatusCode,
    /// `error.code` of the body (`out_of_protocol`, `not_a_party`, …).
    pub code: String,
    /// `error.message`.
    pub message: String,
    /// `error.pointer`, when the problem is in a field.
    pub pointer: Option<String>,
}

impl Refused {
    fn from_body(status: StatusCode, body: &[u8]) -> Refused {
        let parsed: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let error = &parsed["error"];
        let text = |key: &str| error[key].as_str().map(str::to_owned);
        Refused {
            status,
            code: text("code").unwrap_or_else(|| "http_".to_owned() + status.as_str()),
            message: text("message").unwrap_or_else(|| {
                status
                    .canonical_reason()
                    .unwrap_or("request failed")
                    .to_owned()
            }),
            pointer: text("pointer"),
        }
    }

    /// As a JSON object, for a tool result.
    pub fn to_json(&self) -> Value {
        let mut error = serde_json::json!({
            "status": self.status.as_u16(),
            "code": self.code,
            "message": self.message,
        });
        if let Some(pointer) = &self.pointer {
            error["pointer"] = Value::String(pointer.clone());
        }
        error
    }
}

impl Api {
    /// Calls `router` as the holder of `credential`.
    pub fn new(router: Router, credential: Credential) -> Api {
        Api { router, credential }
    }

    /// `GET path` → its JSON body.
    pub async fn get(&self, path: &str) -> Result<Value, Refused> {
        self.call(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body → its JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, Refused> {
        self.call(Method::POST, path, Some(body)).await
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, Refused> {
        let response = self.send(method, path, body).await?;
        let bytes = read_all(response.into_body())
            .await
            .map_err(|error| internal(format!("the API's answer could not be read: {error}")))?;
        serde_json::from_slice(&bytes)
            .map_err(|error| internal(format!("the API answered with something not JSON: {error}")))
    }

    /// The API's answer to the request, or its refusal read from a 4xx or 5xx body.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<axum::response::Response, Refused> {
        let request = self.request(method, path, body)?;
        let response = self
            .router
            .clone()
            .oneshot(request)
            .await
            .unwrap_or_else(|never| match never {});
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let bytes = read_all(response.into_body()).await.unwrap_or_default();
        Err(Refused::from_body(status, &bytes))
    }

    /// `GET path` as a server-sent event stream: calls `on_event` after each event until the
    /// stream ends or `on_event` returns false. What a subscription follows.
    pub async fn follow_events<F, Fut>(&self, path: &str, mut on_event: F) -> Result<(), Refused>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let response = self.send(Method::GET, path, None).await?;
        let mut body = response.into_body().into_data_stream();
        let mut pending = String::new();
        while let Some(chunk) = body.next().await {
            let Ok(chunk) = chunk else { break };
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                // Comment lines (keep-alives) carry no event.
                if event.lines().any(|line| line.starts_with("data:")) && !on_event().await {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Request<Body>, Refused> {
        let mut request = Request::builder().method(method).uri(path);
        request = match &self.credential {
            Credential::Bearer(value) => request.header(header::AUTHORIZATION, value.clone()),
            Credential::AgentHeader(value) => request.header(AGENT_HEADER, value.clone()),
        };
        let body = match body {
            Some(value) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Body::from(value.to_string())
            }
            None => Body::empty(),
        };
        request.body(body).map_err(|error| Refused {
            status: StatusCode::BAD_REQUEST,
            code: "invalid".into(),
            message: format!("cannot make a request of {path:?}: {error}"),
            pointer: None,
        })
    }
}

/// A body in full.
async fn read_all(body: Body) -> Result<bytes::Bytes, axum::Error> {
    Ok(body.collect().await?.to_bytes())
}

/// A failure of this side, not the caller's: a 500 refusal saying what broke.
fn internal(message: String) -> Refused {
    Refused {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        code: "internal".into(),
        message,
        pointer: None,
    }
}

/// `text` as one segment of a path or a query value: every byte but the unreserved
/// characters of RFC 3986 percent-encoded, so an id from a tool argument can never change
/// which route or parameter it reaches.
pub fn encode(text: &str) -> String {
    let mut encoded = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

#[cfg(test)]
mod tests {
    use super::encode;

    #[test]
    fn ids_cannot_leave_their_segment() {
        assert_eq!(encode("conv-1.a_b~"), "conv-1.a_b~");
        assert_eq!(encode("../agents?x=1#"), "..%2Fagents%3Fx%3D1%23");
        assert_eq!(encode("é"), "%C3%A9");
    }
}
