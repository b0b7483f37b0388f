//! Tokens that change: a [`TokenProvider`] is asked for the bearer token when the client has
//! none yet, when the one it has is near its expiry (a JWT's `exp`, read without verifying:
//! the server verifies), and when the server refused it with 401 — then the request is sent
//! once more with the new token. For agents that sign in with the short-lived JWTs of an
//! identity provider (`colloquy serve --auth-jwks …`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::error::SdkError;

/// How long before a JWT's `exp` the client asks for a new one, so a token does not expire
/// on the way to the server.
pub const REFRESH_BEFORE_EXPIRY: Duration = Duration::from_secs(30);

/// What a [`TokenProvider`] returns.
pub type TokenFuture = Pin<Box<dyn Future<Output = Result<String, SdkError>> + Send>>;

/// Why the client asks for a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenRequest {
    /// It has none yet.
    First,
    /// The one it has expires within [`REFRESH_BEFORE_EXPIRY`].
    NearExpiry,
    /// The server refused the one it has (401).
    Refused,
}

/// Where a client gets its bearer token. Any `Fn(TokenRequest) -> impl Future<Output =
/// Result<String, SdkError>>` is one.
pub trait TokenProvider: Send + Sync + 'static {
    /// A token to present from now on.
    fn token(&self, why: TokenRequest) -> TokenFuture;
}

impl<F, Fut> TokenProvider for F
where
    F: Fn(TokenRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<String, SdkError>> + Send + 'static,
{
    fn token(&self, why: TokenRequest) -> TokenFuture {
        Box::pin(self(why))
    }
}

/// A provider and the token it last gave.
pub(crate) struct ProvidedToken {
    provider: Arc<dyn TokenProvider>,
    current: tokio::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for ProvidedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProvidedToken(…)")
    }
}

impl ProvidedToken {
    pub(crate) fn new(provider: Arc<dyn TokenProvider>) -> ProvidedToken {
        ProvidedToken {
            provider,
            current: tokio::sync::Mutex::new(None),
        }
    }

    /// The token to send. `refused` is the token the server just refused: a new one is
    /// asked for unless another request already replaced it.
    pub(crate) async fn get(&self, refused: Option<&str>) -> Result<String, SdkError> {
        let mut current = self.current.lock().await;
        let why = match current.as_deref() {
            None => TokenRequest::First,
            Some(token) if refused == Some(token) => TokenRequest::Refused,
            Some(token) if near_expiry(token, SystemTime::now()) => TokenRequest::NearExpiry,
            Some(token) => return Ok(token.to_owned()),
        };
        let token = self.provider.token(why).await?;
        *current = Some(token.clone());
        Ok(token)
    }
}

/// Whether `token` is a JWT whose `exp` is within [`REFRESH_BEFORE_EXPIRY`] of `now`. A
/// token that is no JWT never is (it is replaced when refused).
fn near_expiry(token: &str, now: SystemTime) -> bool {
    let exp = token
        .split('.')
        .nth(1)
        .and_then(|payload| URL_SAFE_NO_PAD.decode(payload).ok())
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
        .and_then(|claims| claims.get("exp")?.as_u64());
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    exp.is_some_and(|exp| Duration::from_secs(exp) <= now + REFRESH_BEFORE_EXPIRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(exp: u64) -> String {
        let claims = URL_SAFE_NO_PAD.encode(format!("{{\"exp\":{exp}}}"));
        format!("e30.{claims}.c2ln")
    }

    #[test]
    fn a_jwt_is_near_expiry_thirty_seconds_before_exp() {
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        assert!(!near_expiry(&jwt(1_031), now));
        assert!(near_expiry(&jwt(1_030), now));
        assert!(near_expiry(&jwt(900), now));
        assert!(!near_expiry("static-token", now));
    }

    #[tokio::test]
    async fn the_provider_is_asked_first_near_expiry_and_when_refused() {
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = asked.clone();
        let provided = ProvidedToken::new(Arc::new(move |why: TokenRequest| {
            let log = log.clone();
            async move {
                let mut log = log.lock().expect("not poisoned");
                log.push(why);
                // A static token first, then an expired JWT, then a fresh one.
                Ok(match log.len() {
                    1 => "first".to_owned(),
                    2 => jwt(1),
                    _ => jwt(u64::MAX / 2),
                })
            }
        }));
        assert_eq!(provided.get(None).await.expect("a token"), "first");
        assert_eq!(provided.get(None).await.expect("cached"), "first");
        // Another request's refusal of an older token asks for nothing.
        assert_eq!(provided.get(Some("older")).await.expect("cached"), "first");
        let expired = provided.get(Some("first")).await.expect("refreshed");
        assert_eq!(expired, jwt(1));
        let fresh = provided.get(None).await.expect("refreshed");
        assert_eq!(fresh, jwt(u64::MAX / 2));
        assert_eq!(
            *asked.lock().expect("not poisoned"),
            [
                TokenRequest::First,
                TokenRequest::Refused,
                TokenRequest::NearExpiry
            ]
        );
    }
}
