//! The Colloquy engine: runs conversations that follow compiled templates.
//!
//! # Layout
//! - [`engine`]: the [`Engine`], the library API (start, send, view, commitments, the
//!   scheduler pass), per-conversation locking and commits.
//! - [`dispatch`]: the conversation core — what a start, a message and a timer do. Pure: no
//!   I/O, testable with a fake clock.
//! - [`conversation`]: conversation state, changed only by applying events.
//! - [`step`]: one unit of work: emits events, applies them, and builds the store commit.
//! - [`runtime`]: the wasm hook runtime (wasmtime lives only here), [`runtime::HookRuntime`].
//! - [`hook_pool`]: the threads the steps of hooked conversations run on, off the async
//!   workers.
//! - [`rules`]: CEL conditions and the action executor's collection of [`rules::Effects`].
//! - [`store`]: the [`store::ConversationStore`] trait and its backends (memory, SQLite,
//!   Redis).
//! - [`cluster`]: durable and shared stores: following other nodes' commits, finding
//!   conversations not loaded yet (commitments after a restart).
//! - [`clock`]: injectable time.
//! - [`error`]: [`EngineError`] and its classification.
//! - [`keyed`]: the finely sharded maps keyed by conversation id.
//! - [`listing`]: listing conversations and finding their template.
//! - [`parties`]: which loaded conversations each agent may read, for its listing.
//! - [`inbox_expiry`]: dropping inbox entries nobody acknowledged within the inbox TTL.
//! - [`wakeups`]: waking the streams of one agent's inbox or one conversation's events.
//! - [`sight`]: what each reader may see of a conversation (a participant: its own thread).
//! - [`log_safe`]: outside text (request ids, hook log lines) as it may appear in a log line.
//! - [`metrics`]: counters read from accepted commits, in Prometheus text format.
//! - [`delivery`]: push delivery of inbox messages: webhooks, and A2A agents through
//!   [`a2a`]'s outward bridge; both retry as [`retries`] says.
//! - [`a2a`]: all of A2A: Colloquy agents served to A2A clients (inward), remote A2A
//!   agents as parties (outward), their endpoints.
//! - [`inbox_labels`]: inbox entries labelled with their template, for streams and pushes.
//! - [`policy`]: following a policy manager's live catalog (embedded or remote).
//! - [`api`]: the HTTP service (axum) under `/v1`.

pub mod a2a;
pub mod allocator;
pub mod api;
pub mod clock;
pub mod cluster;
pub mod conversation;
pub mod delivery;
pub mod dispatch;
pub mod engine;
pub mod error;
pub mod hook_pool;
pub mod inbox_expiry;
pub mod inbox_labels;
pub mod keyed;
pub mod listing;
pub mod log_safe;
pub mod metrics;
pub mod parties;
pub mod policy;
pub mod retries;
pub mod rules;
pub mod runtime;
pub mod sight;
pub mod step;
pub mod store;
pub mod wakeups;

pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{Engine, EngineConfig, Notice, TemplateSource};
pub use error::{EngineError, ErrorKind};
