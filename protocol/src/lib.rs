//! Wire types of Colloquy, shared by the engine, the policy manager, the SDK and tests.
//!
//! This crate is the only home of types that cross a process boundary: they are what the
//! HTTP API, the stores and the hooks exchange. It has no I/O and no async runtime.
//!
//! # Layout
//! - [`performative`]: the 22 FIPA communicative acts and template-declared intents.
//! - [`message`]: messages as agents send them and as the engine records them.
//! - [`template`]: the YAML template format (`apiVersion: colloquy.dev/v1`), with its JSON Schema.
//! - [`action`]: the action vocabulary shared by declarative template rules and wasm hooks.
//! - [`conversation`]: views of conversations, threads, commitments and violations.
//! - [`event`]: the ordered event log every conversation change is written to.
//! - [`hook`]: the hook ABI v1 payloads (event in, actions out) and their JSON Schemas.
//! - [`error`]: the one JSON error body every API answers with.
//! - [`api`]: the other bodies of the HTTP API (listings, inbox items, readiness).
//! - [`policy`]: bodies of the policy manager's API (templates, revisions, status, change feed).
//! - [`a2a`]: the A2A (Agent2Agent) JSON-RPC bodies the engine sends remote agents.
#![deny(missing_docs)]

pub mod a2a;
pub mod action;
pub mod api;
pub mod conversation;
pub mod error;
pub mod event;
pub mod hook;
pub mod message;
pub mod performative;
pub mod policy;
pub mod rollout;
pub mod template;

pub use action::Action;
pub use conversation::{
    CommitmentState, CommitmentView, ConversationStatus, ConversationView, Outcome, SendReceipt,
    ThreadView, Violation, ViolationKind,
};
pub use error::{ErrorBody, ErrorDetail};
pub use event::{ConversationEvent, EventKind};
pub use message::{AgentId, Content, Message, SendMessage, StartConversation};
pub use performative::{FipaAct, Performative};
