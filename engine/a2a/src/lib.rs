//! Colloquy's A2A (Agent2Agent) bridge to remote agents, and signed agent cards.
//!
//! # Layout
//! - [`outward`]: remote A2A agents as conversation parties: the bridge that sends them their
//!   inbox and records their answers as replies (`outward::dialect` speaks v1.0 or v0.3,
//!   `outward::lanes` keeps one lane per agent, `outward::updates` reads streamed events).
//! - [`signing`]: signed agent cards: JWS over the RFC 8785 canonical card, and the trust
//!   store that verifies remote ones.
//! - [`endpoint`]: where a remote agent is reached (from the agents file).
//! - [`timestamp`]: A2A's RFC 3339 timestamps.
//!
//! The wire types (JSON-RPC envelopes, messages, tasks, agent cards) are
//! `colloquy_protocol::a2a`, shared with the SDK. The inward side, Colloquy agents served to
//! A2A clients, is HTTP handlers over the server's state, extractors and errors: it is
//! `colloquy_server::a2a`.
//!
//! # Dependencies
//! The core (the engine, its store trait, metrics, retries) and the protocol; reqwest for
//! its calls out. No HTTP server framework: nothing of `colloquy-server`.

pub mod endpoint;
pub use colloquy_trust::jcs;
pub mod outward;
pub mod signing;
pub mod timestamp;

pub use endpoint::{A2A_TIMEOUT, Endpoint};
pub use outward::{Lanes, MAX_IN_FLIGHT, Peer};

/// The HTTP header that names the A2A protocol version of a request, lowercase as HTTP/2
/// and `http::HeaderName` want it (`A2A-Version` on the wire is the same header).
pub const VERSION_HEADER: &str = "a2a-version";
