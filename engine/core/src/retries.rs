//! How the engine retries a push to another service: a webhook POST (`colloquy_server::delivery`)
//! and a call to a remote A2A agent (`colloquy_a2a::outward`) alike, with exponential
//! backoff. A leaf, so both directions of push depend on it and not on each other.

use std::time::Duration;

/// Attempts per message before it is given up (it stays in the inbox).
pub const ATTEMPTS: u32 = 8;
/// Wait before the first retry; doubled after each failure.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Longest wait between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
