//! Colloquy's durable conversation stores: the backends of `colloquy_core`'s
//! [`ConversationStore`] trait that do I/O. SQL and Redis live only in this crate.
//!
//! # Layout
//! - [`sqlite`]: [`SqliteStore`], the embedded default: one SQLite file, group commit, WAL
//!   checkpoints of its own (`sqlite::checkpoint`).
//! - [`redis`]: [`RedisStore`], several engine nodes sharing one Redis (one Lua script per
//!   commit, a change stream other nodes follow).
//! - [`open`]: a `--store` spec (`memory`, `sqlite:PATH`, `redis://…`) made a store.
//! - `sqlite::recorded`: a SQLite store's logs read-only, beside a running server (replay).
//! - `raw` (feature `raw`, for the stores bench and the binary's crash tests only): the
//!   backends below the store's layout — ceiling workloads and direct reads.
//!
//! # Dependencies
//! This crate depends on `colloquy-core` (the trait, its types and the in-memory store) and
//! the protocol; nothing above it (hooks, A2A, the server) and nothing of it leaks into
//! them: they see an `Arc<dyn ConversationStore>`.

#[cfg(feature = "raw")]
pub mod raw;
pub mod redis;
pub mod sqlite;

use std::sync::Arc;

use colloquy_core::store::{ConversationStore, MemoryStore, StoreError};

pub use self::redis::RedisStore;
pub use self::sqlite::{SqliteStore, Synchronous};

/// Opens the store a `--store` spec names: `memory`, `sqlite:PATH` (add
/// `?synchronous=normal` for [`Synchronous::Normal`]) or a `redis://` / `rediss://` URL.
pub async fn open(spec: &str) -> Result<Arc<dyn ConversationStore>, StoreError> {
    if spec == "memory" {
        Ok(Arc::new(MemoryStore::new()))
    } else if let Some(rest) = spec.strip_prefix("sqlite:") {
        let (path, synchronous) = match rest.rsplit_once('?') {
            Some((path, "synchronous=normal")) => (path, Synchronous::Normal),
            Some((path, "synchronous=full")) => (path, Synchronous::Full),
            Some((_, option)) => {
                return Err(StoreError::Unavailable(format!(
                    "unknown SQLite option `{option}`: expected synchronous=full|normal"
                )));
            }
            None => (rest, Synchronous::Full),
        };
        if path.is_empty() {
            return Err(StoreError::Unavailable(
                "`sqlite:` needs a file path".to_owned(),
            ));
        }
        Ok(Arc::new(SqliteStore::open_with(path, synchronous)?))
    } else if spec.starts_with("redis://") || spec.starts_with("rediss://") {
        Ok(Arc::new(RedisStore::connect(spec).await?))
    } else {
        Err(StoreError::Unavailable(format!(
            "unknown store `{spec}`: expected `memory`, `sqlite:PATH` or `redis://HOST:PORT`"
        )))
    }
}
