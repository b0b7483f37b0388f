//! Colloquy's conversation core: runs conversations that follow compiled templates.
//!
//! # Layout
//! - [`engine`]: the [`Engine`], the library API (start, send, view, commitments, the
//!   scheduler pass), per-conversation locking and commits.
//! - [`dispatch`]: what a start, a message and a timer do, and what a refused message
//!   leaves in its log. Pure: no I/O, testable with a fake clock.
//! - [`conversation`]: conversation state, changed only by applying events.
//! - [`step`]: one unit of work: emits events, applies them, and builds the store commit.
//! - [`rules`]: CEL conditions and the action executor's collection of [`rules::Effects`].
//! - [`hooks`]: the [`hooks::HookCaller`] trait the engine calls wasm hooks through, the
//!   event a hook is given and what a call may end in. `colloquy-hooks` implements it.
//! - [`hook_pool`]: the threads the steps of hooked conversations run on, off the async
//!   workers. It runs whole engine steps, not wasm calls, so it is the core's executor.
//! - [`store`]: the [`store::ConversationStore`] trait, its types, and the in-memory store.
//!   The durable backends are `colloquy-store`'s.
//! - [`cluster`]: durable and shared stores: following other nodes' commits, finding
//!   conversations not loaded yet (commitments after a restart). It is `impl Engine` over
//!   the engine's caches, so it lives with them, over the store trait's change feed.
//! - [`clock`]: injectable time.
//! - [`error`]: [`EngineError`] and its classification.
//! - [`ids`]: what a conversation, message or agent id may be.
//! - [`keyed`]: the finely sharded maps keyed by conversation id.
//! - [`listing`]: listing conversations and finding their template.
//! - [`parties`]: which loaded conversations each agent may read, for its listing.
//! - [`inbox_expiry`]: dropping inbox entries nobody acknowledged within the inbox TTL.
//! - [`inbox_labels`]: inbox entries labelled with their template, for streams and pushes.
//! - [`wakeups`]: waking the streams of one agent's inbox or one conversation's events.
//! - [`sight`]: what each reader may see of a conversation (a participant: its own thread).
//! - [`log_safe`]: outside text (request ids, hook log lines) as it may appear in a log line.
//! - [`metrics`]: counters read from accepted commits, in Prometheus text format.
//! - [`retries`]: how pushes to other services (webhooks, A2A agents) are retried.
//! - [`trace_origins`]: the trace each conversation started in, for links and pushes when
//!   traces are exported.
//! - [`policy`]: following a policy manager's live catalog (embedded or remote).
//!
//! # Dependencies
//! The core depends on the protocol and the policy compiler only (and on the OpenTelemetry
//! API with its `tracing` bridge, for the span contexts of `trace_origins`; not the SDK).
//! It names no wasm runtime, no database, no HTTP framework: the crates above it
//! (`colloquy-hooks`, `colloquy-store`, `colloquy-a2a`, `colloquy-server`, the `colloquy`
//! binary) implement its traits or call its API, and the compiler keeps it so.

pub mod chain;
pub mod clock;
pub mod cluster;
pub mod conversation;
pub mod dispatch;
pub mod engine;
pub mod error;
pub mod hook_pool;
pub mod hooks;
pub mod ids;
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
pub mod sight;
pub mod step;
pub mod store;
pub mod trace_origins;
pub mod wakeups;

pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{Engine, EngineConfig, Notice, TemplateSource};
pub use error::{EngineError, ErrorKind};
