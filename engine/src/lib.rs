//! The Colloquy engine: runs conversations that follow compiled templates.
//!
//! # Layout
//! - [`engine`]: the [`Engine`], the library API (start, send, view, commitments, the
//!   scheduler pass), per-conversation locking and commits.
//! - [`dispatch`]: the conversation core — what a start, a message and a timer do. Pure: no
//!   I/O, testable with a fake clock.
//! - [`conversation`]: conversation state, changed only by applying events.
//! - [`step`]: one unit of work: emits events, applies them, and builds the store commit.
//! - [`rules`]: CEL conditions and the action executor's collection of [`rules::Effects`].
//! - [`store`]: the [`store::ConversationStore`] trait and its backends.
//! - [`clock`]: injectable time.
//! - [`error`]: [`EngineError`] and its classification.

pub mod clock;
pub mod conversation;
pub mod dispatch;
pub mod engine;
pub mod error;
pub mod rules;
pub mod step;
pub mod store;

pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{Engine, EngineConfig, Notice, TemplateSource};
pub use error::{EngineError, ErrorKind};
