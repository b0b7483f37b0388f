//! The Colloquy policy manager: turns template files into compiled policies and keeps the
//! catalog the engine starts conversations from, reloading it live when the files change.
//! (Its HTTP API is served by `colloquy_server::policy`: axum lives in the `colloquy-server`
//! crate only.)
//!
//! # Layout
//! - [`compiler`]: YAML → [`CompiledTemplate`]; every problem reported at once as a
//!   [`Diagnostic`] with file, line, column, the path inside the template and a hint.
//! - [`compiled`]: the compiled form the engine runs (states as indices, schemas and CEL
//!   compiled once).
//! - [`catalog`]: compiled templates by name and revision.
//! - [`live`]: [`LiveCatalog`], the catalog of a template directory, recompiled whole and
//!   swapped atomically on every reload (all-or-nothing, except that a revision whose hook
//!   module compiles in the background waits outside), with uploads and deletions.
//! - [`watcher`]: reloads a live catalog when its directory changes (notify, debounced).
//! - [`client`]: [`PolicyClient`], the HTTP client of a policy manager's API.
//! - [`follower`]: how a remote engine mirrors a policy manager through its change feed.
//! - `locations` (private): maps template paths such as `spec.thread.states.called` to YAML
//!   line and column.

pub mod catalog;
pub mod client;
pub mod compiled;
pub mod compiler;
pub mod follower;
pub mod live;
pub mod locations;
pub mod watcher;

pub use catalog::Catalog;
pub use client::PolicyClient;
pub use compiled::CompiledTemplate;
pub use compiler::{Diagnostic, Diagnostics, TemplateCompiler};
pub use live::{LiveCatalog, Reloaded, Snapshot};
