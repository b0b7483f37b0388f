//! Where a remote A2A agent is reached: what the agents file says of it, read by the API's
//! identity (`colloquy_server::auth`) and used by push delivery and the bridge. A leaf: it
//! depends on nothing else in the crate.

use std::time::Duration;

/// How long one A2A call may take unless the agents file says otherwise (`a2a_timeout_s`):
/// `message/send` asks the agent to answer when the work is done, which can take a while.
pub const A2A_TIMEOUT: Duration = Duration::from_secs(300);
/// Where a remote A2A agent is reached, and how the engine authenticates there.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Its JSON-RPC URL.
    pub url: String,
    /// Sent as `Authorization: Bearer …` with every call, when the agent wants one.
    pub token: Option<String>,
    /// How long one call may take.
    pub timeout: Duration,
}

impl std::fmt::Debug for Endpoint {
    /// Without the token, which must not reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &self.url)
            .field("token", &self.token.as_ref().map(|_| "…"))
            .field("timeout", &self.timeout)
            .finish()
    }
}
