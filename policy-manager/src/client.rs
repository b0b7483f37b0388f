//! [`PolicyClient`]: the HTTP client of a policy manager's API, used by remote engines (see
//! [`crate::follower`]) and by tests.

use std::pin::Pin;
use std::time::Duration;

use colloquy_protocol::policy::{CATALOG_EVENT, CatalogChange, TemplateDocument, TemplateList};
use futures_util::{Stream, StreamExt as _};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, ETAG, IF_NONE_MATCH};

/// How long an idle pooled connection is kept: under the manager's 30 s idle cut-off.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long connecting to the policy manager may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long one fetch (a template, a module, a listing) may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a call to the policy manager failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Unreachable, or the connection broke.
    #[error("policy manager unreachable: {0}")]
    Transport(#[from] reqwest::Error),
    /// It answered with an unexpected status.
    #[error("policy manager answered {status} to {what}")]
    Status {
        /// The status.
        status: StatusCode,
        /// What was asked.
        what: String,
    },
    /// It answered something that is not what the API promises.
    #[error("policy manager sent a malformed {what}: {message}")]
    Malformed {
        /// What was read.
        what: &'static str,
        /// Why it is malformed.
        message: String,
    },
}

/// A conditional fetch's result.
#[derive(Debug)]
pub enum Fetched<T> {
    /// `304 Not Modified`: the revision named in `If-None-Match` is current.
    NotModified,
    /// A new representation.
    Modified(T),
    /// `404`: no such template (any more).
    Gone,
}

/// A stream of change-feed entries.
pub type ChangeStream = Pin<Box<dyn Stream<Item = Result<CatalogChange, ClientError>> + Send>>;

/// A client of one policy manager.
#[derive(Clone, Debug)]
pub struct PolicyClient {
    http: reqwest::Client,
    base: String,
}

impl PolicyClient {
    /// A client of the policy manager at `base_url` (`http://host:port`).
    pub fn new(base_url: &str) -> Result<PolicyClient, ClientError> {
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // Under the manager's 30 s idle cut-off, so no request goes out on a pooled
            // connection the manager is closing.
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .build()?;
        Ok(PolicyClient {
            http,
            base: base_url.trim_end_matches('/').to_owned(),
        })
    }

    /// The base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// `GET /v1/templates`.
    pub async fn list(&self) -> Result<TemplateList, ClientError> {
        let url = format!("{}/v1/templates", self.base);
        let response = self.http.get(&url).timeout(REQUEST_TIMEOUT).send().await?;
        expect_ok(&response, &url)?;
        Ok(response.json().await?)
    }

    /// `GET /v1/templates/{name}` as JSON, conditional on `known_revision` (its `ETag`).
    pub async fn document(
        &self,
        name: &str,
        known_revision: Option<&str>,
    ) -> Result<Fetched<TemplateDocument>, ClientError> {
        let url = format!("{}/v1/templates/{name}", self.base);
        let mut request = self
            .http
            .get(&url)
            .header(ACCEPT, "application/json")
            .timeout(REQUEST_TIMEOUT);
        if let Some(revision) = known_revision {
            request = request.header(IF_NONE_MATCH, format!("\"{revision}\""));
        }
        let response = request.send().await?;
        match response.status() {
            StatusCode::NOT_MODIFIED => return Ok(Fetched::NotModified),
            StatusCode::NOT_FOUND => return Ok(Fetched::Gone),
            _ => expect_ok(&response, &url)?,
        }
        let etag = response
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim_matches('"').to_owned());
        let document: TemplateDocument = response.json().await?;
        if etag.as_deref() != Some(document.revision.as_str()) {
            return Err(ClientError::Malformed {
                what: "template",
                message: format!("ETag {etag:?} is not its revision {}", document.revision),
            });
        }
        Ok(Fetched::Modified(document))
    }

    /// `GET /v1/templates/{name}/modules/{sha256}`: the module's bytes.
    pub async fn module(&self, name: &str, sha256: &str) -> Result<Fetched<Vec<u8>>, ClientError> {
        let url = format!("{}/v1/templates/{name}/modules/{sha256}", self.base);
        let response = self.http.get(&url).timeout(REQUEST_TIMEOUT).send().await?;
        if response.status() == StatusCode::NOT_FOUND {
            return Ok(Fetched::Gone);
        }
        expect_ok(&response, &url)?;
        Ok(Fetched::Modified(response.bytes().await?.to_vec()))
    }

    /// `GET /v1/watch`: the change feed, starting with the catalog at connection time. The
    /// stream ends when the connection does.
    pub async fn watch(&self) -> Result<ChangeStream, ClientError> {
        let url = format!("{}/v1/watch", self.base);
        let response = self
            .http
            .get(&url)
            .header(ACCEPT, "text/event-stream")
            .send()
            .await?;
        expect_ok(&response, &url)?;
        let mut bytes = response.bytes_stream();
        let mut parser = SseParser::default();
        let stream = async_stream(move |mut emit| async move {
            while let Some(chunk) = bytes.next().await {
                let chunk = match chunk {
                    Ok(chunk) => chunk,
                    Err(error) => {
                        emit(Err(error.into()));
                        return;
                    }
                };
                for (event, data) in parser.push(&chunk) {
                    if event == CATALOG_EVENT {
                        emit(
                            serde_json::from_str(&data).map_err(|error| ClientError::Malformed {
                                what: "change-feed entry",
                                message: error.to_string(),
                            }),
                        );
                    }
                }
            }
        });
        Ok(stream)
    }
}

fn expect_ok(response: &reqwest::Response, what: &str) -> Result<(), ClientError> {
    if response.status().is_success() {
        Ok(())
    } else {
        Err(ClientError::Status {
            status: response.status(),
            what: what.to_owned(),
        })
    }
}

/// A stream fed by a producer task through a channel (no extra crate for generators).
fn async_stream<F, Fut>(produce: F) -> ChangeStream
where
    F: FnOnce(Box<dyn FnMut(Result<CatalogChange, ClientError>) + Send>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let emit = Box::new(move |item| {
        // The consumer dropped the stream: the producer ends with the connection below.
        let _ = tx.send(item);
    });
    let task = tokio::spawn(produce(emit));
    let stream = futures_util::stream::unfold((rx, AbortOnDrop(task)), |(mut rx, task)| async {
        rx.recv().await.map(|item| (item, (rx, task)))
    });
    Box::pin(stream)
}

/// Stops the producer (and closes its connection) when the stream is dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Splits a `text/event-stream` into `(event, data)` pairs.
#[derive(Default)]
struct SseParser {
    buffer: Vec<u8>,
    event: String,
    data: String,
}

impl SseParser {
    fn push(&mut self, chunk: &[u8]) -> Vec<(String, String)> {
        self.buffer.extend_from_slice(chunk);
        let mut out = Vec::new();
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() || !self.event.is_empty() {
                    let event = std::mem::take(&mut self.event);
                    let event = if event.is_empty() {
                        "message".to_owned()
                    } else {
                        event
                    };
                    out.push((event, std::mem::take(&mut self.data)));
                }
                continue;
            }
            if line.starts_with(':') {
                continue;
            }
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => self.event = value.to_owned(),
                "data" => {
                    if !self.data.is_empty() {
                        self.data.push('\n');
                    }
                    self.data.push_str(value);
                }
                _ => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_across_chunks_and_comments_are_skipped() {
        let mut parser = SseParser::default();
        assert!(parser.push(b": keep-alive\n\nevent: cat").is_empty());
        let events = parser.push(b"alog\r\ndata: {\"a\":\ndata: 1}\r\n\r\nevent: x\ndata: y\n\n");
        assert_eq!(
            events,
            [
                ("catalog".to_owned(), "{\"a\":\n1}".to_owned()),
                ("x".to_owned(), "y".to_owned())
            ]
        );
    }
}
