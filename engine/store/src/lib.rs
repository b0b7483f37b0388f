//! Colloquy's durable conversation stores: the backends of `colloquy_core`'s
//! [`ConversationStore`] trait that do I/O. SQL and Redis live only in this crate.
//!
//! # Layout
//! - [`sqlite`]: [`SqliteStore`], the embedded default: one SQLite file, group commit, WAL
//!   checkpoints of its own (`sqlite::checkpoint`).
//! - [`redis`]: [`RedisStore`], several engine nodes sharing one Redis (one Lua script per
//!   commit, a change stream other nodes follow).
//! - [`postgres`]: [`PostgresStore`], one or several engine nodes on a Postgres database
//!   (group commit through a writer task, versioned migrations, a `changes` table other
//!   nodes follow).
//! - [`open`]: a `--store` spec (`memory`, `sqlite:PATH`, `redis://…`, `postgres://…`) made
//!   a store.
//! - `sqlite::recorded`: a SQLite store's logs read-only, beside a running server (replay).
//! - `raw` (feature `raw`, for the stores bench and the binary's crash tests only): the
//!   backends below the store's layout — ceiling workloads and direct reads.
//!
//! # Dependencies
//! This crate depends on `colloquy-core` (the trait, its types and the in-memory store) and
//! the protocol; nothing above it (hooks, A2A, the server) and nothing of it leaks into
//! them: they see an `Arc<dyn ConversationStore>`.

pub mod postgres;
#[cfg(feature = "raw")]
pub mod raw;
pub mod redis;
pub mod sqlite;

use std::sync::Arc;

use colloquy_core::store::{ConversationStore, MemoryStore, StoreError};

pub use self::postgres::PostgresStore;
pub use self::redis::RedisStore;
pub use self::sqlite::{SqliteStore, Synchronous};

/// Opens the store a `--store` spec names: `memory`, `sqlite:PATH` (add
/// `?synchronous=normal` for [`Synchronous::Normal`]), a `redis://` / `rediss://` URL or a
/// `postgres://USER@HOST:PORT/DB` URL (password from the environment, see
/// [`postgres::Locator::parse`]).
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
    } else if spec.starts_with("postgres://") || spec.starts_with("postgresql://") {
        Ok(Arc::new(PostgresStore::connect(spec).await?))
    } else {
        Err(StoreError::Unavailable(format!(
            "unknown store `{}`: expected `memory`, `sqlite:PATH`, `redis://HOST:PORT` or \
             `postgres://USER@HOST:PORT/DB`",
            redact(spec)
        )))
    }
}

/// `spec` for a message or a log line: a URL's `user:password@` cut to `user@`, so a store
/// given with credentials in its URL never prints them.
pub fn redact(spec: &str) -> String {
    match spec.split_once("://") {
        Some((scheme, rest)) => {
            let end = rest.find('/').unwrap_or(rest.len());
            match rest[..end].rsplit_once('@') {
                Some((user_info, host)) => {
                    let user = user_info
                        .split_once(':')
                        .map_or(user_info, |(user, _)| user);
                    format!("{scheme}://{user}@{host}{}", &rest[end..])
                }
                None => spec.to_owned(),
            }
        }
        None => spec.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_password_in_a_store_url_is_never_shown() {
        assert_eq!(
            super::redact("postgres://colloquy:s3cret@db:5432/engine?sslmode=disable"),
            "postgres://colloquy@db:5432/engine?sslmode=disable"
        );
        assert_eq!(
            super::redact("redis://:s3cret@cache:6379/0"),
            "redis://@cache:6379/0"
        );
        assert_eq!(super::redact("sqlite:/a/b.db"), "sqlite:/a/b.db");
        assert_eq!(super::redact("memory"), "memory");
    }
}
