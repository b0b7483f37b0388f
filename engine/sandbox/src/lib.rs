//! Colloquy's sandbox: the conversation engine in memory, on a clock that moves only when
//! told, for proving templates before they serve anyone.
//!
//! # Layout
//! - [`sandbox`]: [`Sandbox`], one engine with the memory store, a manual clock (which
//!   hooks read too) and a trace of every hook call.
//! - [`suite`]: `colloquy templates test`: the `*.test.yaml` format, loading with
//!   diagnostics at file:line:col, running cases, comparing expectations.
//! - [`coverage`]: which states, transitions, rules and commitment states the cases reached.
//! - [`diff`]: what changes between two revisions, in the protocol's terms.
//! - [`explore`]: `colloquy templates explore`, the breadth-first model checker.
//! - [`lint`]: the warnings `colloquy templates check` adds, from the template's text alone.
//! - [`replay`]: a recorded conversation re-driven against a revision, and its first
//!   divergence (the groundwork of `colloquy templates replay`).
//!
//! # Dependencies
//! The core, the hook runtime (hooks run for real in tests), the policy compiler and the
//! protocol. No store backend, no HTTP: a sandbox touches neither the network nor a file
//! but the templates and hook modules it is given.

pub mod coverage;
pub mod diff;
pub mod explore;
pub mod lint;
pub mod replay;
pub mod sandbox;
pub mod suite;

pub use sandbox::{HookCall, Sandbox, TEST_EPOCH_MS, hooks_on};
