//! Write Colloquy lifecycle hooks in Rust.
//!
//! A hook is a type implementing [`Hook`] (every method has a default that does nothing),
//! exported with [`export_hook!`], and built for `wasm32-unknown-unknown` as a `cdylib`:
//!
//! ```
//! use colloquy_guest::{Action, Event, Hook};
//!
//! #[derive(Default)]
//! struct AmountGuard;
//!
//! impl Hook for AmountGuard {
//!     fn on_message(&self, event: &Event<'_>) -> Vec<Action> {
//!         let limit = event.config_u64("max_amount").unwrap_or(10_000);
//!         match event.content_u64("amount") {
//!             Some(amount) if amount > limit => {
//!                 vec![Action::reject(format!("amount {amount} is over {limit}"))]
//!             }
//!             _ => Vec::new(),
//!         }
//!     }
//! }
//!
//! colloquy_guest::export_hook!(AmountGuard);
//! # fn main() {}
//! ```
//!
//! The hook sees the event ([`Event`]) and answers with [`Action`]s, the same vocabulary as
//! a template's declarative rules; the ABI underneath is `docs/hook-abi.md`. The event is
//! parsed lazily: its names and ids borrow from the input, and the free-form parts (`vars`,
//! `parameters`, `context`, `config`, the message content) stay JSON text until an accessor
//! such as [`Event::content_u64`] picks one field out (or [`Event::content`] reads the whole
//! content into your own `Deserialize` type), so a call costs only what the hook reads.
//! Instances are reused between calls and thrown away after any failure, so keep state in
//! the conversation (`set_vars`), never in statics. A panic traps the hook: the template's
//! failure policy applies. A hook that keeps no heap data between calls can enable the
//! `call-arena` feature for a faster allocator ([`arena`]); a template whose hook reads few
//! parts of the conversation can list them in `hooks.reads`, and the event carries only
//! those (the others read as empty).
//!
//! Off wasm (in `cargo test`), the host calls in [`host`] are mocked: `log` lines are kept
//! for [`host::mock::take_logs`] and `now_ms` reads [`host::mock::set_now_ms`]; and
//! [`abi::handle`] runs a hook on JSON text exactly as the export does.
//!
//! # Layout
//! - [`event`]: the event ([`Event`], [`Conversation`], [`Message`], [`Timeout`]) and the
//!   raw-JSON readers behind its accessors ([`event::field`], [`event::as_u64`], ...).
//! - [`json`](mod@json): the JSON reader the event is parsed with, and [`RawJson`], the unparsed
//!   parts.
//! - [`action`]: the typed actions ([`Action`]) and the output ([`Output`]), written as
//!   JSON by hand (`write`).
//! - [`host`]: `log` and `now_ms`, the host functions.
//! - [`abi`]: the canonical-ABI glue [`export_hook!`] expands to.
//! - [`arena`]: the allocator of the `call-arena` feature, emptied after every call.
#![deny(missing_docs)]

pub mod abi;
pub mod action;
pub mod arena;
pub mod event;
pub mod host;
pub mod json;
mod write;

pub use action::{Action, LogLevel, Outcome, Output, RouteMode};
pub use event::{Conversation, Event, HookKind, Message, RawJson, Thread, Timeout};
pub use serde_json::{json, Map, Value};

/// The hook ABI version this SDK speaks (what `hooks_abi_version` returns).
pub const HOOKS_ABI_VERSION: u32 = 1;

/// A lifecycle hook. Each method gets the event and returns the actions to take; the
/// defaults return none ("carry on").
pub trait Hook {
    /// The conversation starts (before its `started` event is stored). A `reject` refuses
    /// the start.
    fn on_start(&self, event: &Event<'_>) -> Vec<Action> {
        let _ = event;
        Vec::new()
    }

    /// A message passed schema validation and the protocol check; routing comes after. A
    /// `reject` refuses it; `route` changes its receivers.
    fn on_message(&self, event: &Event<'_>) -> Vec<Action> {
        let _ = event;
        Vec::new()
    }

    /// A deadline passed or a retry came due (see [`Event::timeout`]).
    fn on_timeout(&self, event: &Event<'_>) -> Vec<Action> {
        let _ = event;
        Vec::new()
    }
}

/// Exports a [`Hook`] type (which must implement `Default`) as a hook module: `start`,
/// `message`, `timeout`, their `cabi_post_*`, `cabi_realloc` and `hooks_abi_version`. Use it
/// once, in the crate root of a `cdylib`.
#[macro_export]
macro_rules! export_hook {
    ($hook:ty) => {
        #[cfg(target_arch = "wasm32")]
        #[doc(hidden)]
        type __ColloquyExportedHook = $hook;

        #[cfg(target_arch = "wasm32")]
        mod __colloquy_hook_exports {
            use $crate::abi::{self, HookKind};

            fn hook() -> super::__ColloquyExportedHook {
                <super::__ColloquyExportedHook as ::core::default::Default>::default()
            }

            #[no_mangle]
            pub extern "C" fn hooks_abi_version() -> u32 {
                $crate::HOOKS_ABI_VERSION
            }

            #[no_mangle]
            pub unsafe extern "C" fn cabi_realloc(
                old: *mut u8,
                old_size: usize,
                align: usize,
                new_size: usize,
            ) -> *mut u8 {
                abi::realloc(old, old_size, align, new_size)
            }

            #[no_mangle]
            pub unsafe extern "C" fn start(ptr: *mut u8, len: usize) -> *const u32 {
                abi::call(&hook(), HookKind::OnStart, ptr, len)
            }

            #[no_mangle]
            pub unsafe extern "C" fn message(ptr: *mut u8, len: usize) -> *const u32 {
                abi::call(&hook(), HookKind::OnMessage, ptr, len)
            }

            #[no_mangle]
            pub unsafe extern "C" fn timeout(ptr: *mut u8, len: usize) -> *const u32 {
                abi::call(&hook(), HookKind::OnTimeout, ptr, len)
            }

            #[no_mangle]
            pub extern "C" fn cabi_post_start(_retptr: *const u32) {
                abi::post_return();
            }

            #[no_mangle]
            pub extern "C" fn cabi_post_message(_retptr: *const u32) {
                abi::post_return();
            }

            #[no_mangle]
            pub extern "C" fn cabi_post_timeout(_retptr: *const u32) {
                abi::post_return();
            }
        }
    };
}
