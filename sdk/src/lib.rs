//! An async client for agents that talk through a Colloquy server.
//!
//! ```no_run
//! # async fn demo() -> Result<(), colloquy_sdk::SdkError> {
//! use colloquy_sdk::{AskOptions, Client};
//! use serde_json::json;
//!
//! let alice = Client::connect("http://127.0.0.1:7700", "alice", Some("alice-token")).await?;
//! let answer = alice
//!     .request("bob", json!({"action": "book-room"}), AskOptions::default())
//!     .await?;
//! println!("{:?}: {:?}", answer.outcome, answer.reply);
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`client`]: [`Client`]: connect, and one method per HTTP endpoint.
//! - [`ask`]: the initiator's helpers — [`Client::request`], [`Client::query`],
//!   [`Client::call_for_proposals`] — that resolve on the final answer.
//! - [`agent`]: the participant's side: [`Handlers`] by template and performative, run over
//!   the inbox stream by [`Client::serve`] (which acknowledges what it handled), and the
//!   reply helpers of [`Incoming`].
//! - [`stream`]: [`InboxStream`] and [`EventStream`], server-sent event streams that
//!   reconnect and resume on their own.
//! - [`token`]: [`TokenProvider`], for tokens that change (short-lived JWTs): asked when the
//!   token is near expiry or refused with 401.
//! - [`error`]: [`SdkError`], what a call can fail with.
#![deny(missing_docs)]

pub mod agent;
pub mod ask;
pub mod client;
pub mod error;
mod sse;
pub mod stream;
pub mod token;

pub use agent::{Handlers, Incoming};
pub use ask::{Answer, AskOptions, Proposals};
pub use client::Client;
pub use error::SdkError;
pub use stream::{EventStream, InboxStream};
pub use token::{TokenProvider, TokenRequest};

pub use colloquy_protocol as protocol;
/// Audit records and their offline verification, JWS keys (`colloquy-trust`).
pub use colloquy_trust as trust;
