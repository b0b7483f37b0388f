//! A2A's inward side: Colloquy agents served to A2A clients.
//!
//! | module | what |
//! |---|---|
//! | [`inward`] | agent cards and the JSON-RPC endpoint (`/a2a/{agent}`), each A2A task a conversation |
//! | [`rest`] | A2A v1.0's HTTP+JSON binding of the same calls, under `/a2a/{agent}/rest` |
//! | [`stream`] | a task followed over server-sent events (`SendStreamingMessage`, `SubscribeToTask`, v0.3's `message/stream`, `tasks/resubscribe`) |
//! | [`v1`] | A2A v1.0 on the inward JSON-RPC endpoint, beside v0.3: the `A2A-Version` header, v1.0's methods and JSON shapes |
//! | [`caller`] | who calls an A2A route (an unnamed client in open mode included) |
//! | [`push`] | push notifications: clients' webhooks for their tasks' updates, durable, retried, never to private addresses unless allowed |
//!
//! These are HTTP handlers over the server's state, extractors and errors, so they live
//! here. The outward bridge (remote A2A agents as parties), signed cards and endpoints are
//! `colloquy_a2a`, which knows nothing of this crate; push delivery
//! ([`crate::delivery`]) runs that bridge for agents with an A2A endpoint.

pub mod caller;
mod card;
pub mod inward;
pub mod push;
pub mod rest;
pub mod stream;
mod task;
pub mod v1;

use colloquy_a2a::signing;

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
