//! What proves who said what in Colloquy, shared by the engine, the CLI's offline verifier
//! and the Rust SDK:
//!
//! - [`jcs`]: RFC 8785 canonical JSON, the one byte sequence everything here hashes and signs.
//! - [`jws`]: JWS signatures with Ed25519 and P-256 keys, and the key sets that verify them.
//! - [`chain`]: the hash chain of a conversation's log.
//! - [`message`]: signed messages: what a sender signs, and checking it.
//! - [`record`]: audit records, and their offline verification.

pub mod chain;
pub mod jcs;
pub mod jws;
pub mod message;
pub mod record;
