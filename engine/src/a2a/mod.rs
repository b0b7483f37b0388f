//! A2A (Agent2Agent), both directions, in one place:
//!
//! | module | what |
//! |---|---|
//! | [`inward`] | Colloquy agents served to A2A clients: agent cards and the JSON-RPC endpoint (`/a2a/{agent}`), each A2A task a conversation |
//! | [`outward`] | remote A2A agents as conversation parties: the bridge that sends them their inbox and records their answers as replies |
//! | [`rest`] | A2A v1.0's HTTP+JSON binding of the same calls, under `/a2a/{agent}/rest` |
//! | [`stream`] | a task followed over server-sent events (`SendStreamingMessage`, `SubscribeToTask`, v0.3's `message/stream`, `tasks/resubscribe`) |
//! | [`v1`] | A2A v1.0 on the inward JSON-RPC endpoint, beside v0.3: the `A2A-Version` header, v1.0's methods and JSON shapes |
//! | [`caller`] | who calls an A2A route (an unnamed client in open mode included) |
//! | [`push`] | push notifications: clients' webhooks for their tasks' updates, durable, retried, never to private addresses unless allowed |
//! | [`signing`] | signed agent cards: JWS over the RFC 8785 canonical card, and the trust store that verifies remote ones |
//! | [`endpoint`] | where a remote agent is reached (from the agents file) |
//!
//! The wire types (JSON-RPC envelopes, messages, tasks, agent cards) are
//! `colloquy_protocol::a2a`, shared with the SDK. Push delivery ([`crate::delivery`]) runs
//! the outward bridge for agents with an A2A endpoint; it and the bridge retry alike
//! ([`crate::retries`]). Dependencies run one way: the API's identity and push delivery use
//! this module; of the API, only [`inward`] uses its plumbing (state, extractors, errors),
//! and the API's router mounts [`inward`]'s handlers.

pub mod caller;
pub mod endpoint;
pub mod inward;
pub mod outward;
pub mod push;
pub mod rest;
pub mod signing;
pub mod stream;
pub mod timestamp;
pub mod v1;

pub use endpoint::{A2A_TIMEOUT, Endpoint};

/// How the engine serves A2A clients (`colloquy serve`'s `--a2a-*` options).
#[derive(Clone, Debug)]
pub struct Settings {
    /// The template an A2A task starts when its message names none.
    pub template: String,
    /// Whether push notifications may go to loopback and private addresses (development,
    /// tests): off by default, against SSRF.
    pub push_allow_private: bool,
    /// Signs the v1.0 agent cards, when the operator gave a key.
    pub card_signer: Option<std::sync::Arc<signing::CardSigner>>,
    /// The keys remote agents' cards must be signed by, when the operator gave them.
    pub trust_store: Option<std::sync::Arc<signing::TrustStore>>,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            template: inward::DEFAULT_TEMPLATE.to_owned(),
            push_allow_private: false,
            card_signer: None,
            trust_store: None,
        }
    }
}
pub use outward::{Lanes, MAX_IN_FLIGHT, Peer};
