//! The Colloquy policy manager: turns template files into compiled policies and keeps the
//! catalog the engine starts conversations from.
//!
//! # Layout
//! - [`compiler`]: YAML → [`CompiledTemplate`]; every problem reported at once as a
//!   [`Diagnostic`] with file, line, column, the path inside the template and a hint.
//! - [`compiled`]: the compiled form the engine runs (states as indices, schemas and CEL
//!   compiled once).
//! - [`catalog`]: compiled templates by name and revision.
//! - `locations` (private): maps template paths such as `spec.thread.states.called` to YAML
//!   line and column.

pub mod catalog;
pub mod compiled;
pub mod compiler;
mod locations;

pub use catalog::Catalog;
pub use compiled::CompiledTemplate;
pub use compiler::{Diagnostic, Diagnostics, TemplateCompiler};
