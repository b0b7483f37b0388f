//! A SQLite store's conversation logs, read without writing: what `colloquy templates
//! replay` reads, also while a server runs on the same file. It takes no lock file (the
//! server's [`super::SqliteStore`] holds the exclusive one) and opens the database
//! read-only; WAL lets it read beside the writer, seeing each commit whole.

use std::path::{Path, PathBuf};

use colloquy_core::store::StoreError;
use colloquy_protocol::event::ConversationEvent;
use rusqlite::{Connection, OpenFlags};

use super::schema::MIGRATIONS;
use super::{internal, read_events};

/// The oldest schema version this reads. What it reads, `conversations` and `events` (one
/// row per commit), is as migration 2 left it; the migrations since add tables and columns
/// it does not read (shared messages, acknowledgements, webhook cursors, remote tasks, push
/// configs, the revision archive). So a replay also reads the file of a running server that
/// predates some of them.
pub const OLDEST_READABLE: usize = 2;

/// The logs of a SQLite store, read-only.
pub struct RecordedLogs {
    path: PathBuf,
    connection: Connection,
}

impl RecordedLogs {
    /// Opens the database at `path` read-only. Fails (without creating anything) when it
    /// does not exist, is not a Colloquy store, was written by a newer version, or is older
    /// than [`OLDEST_READABLE`].
    pub fn open(path: impl AsRef<Path>) -> Result<RecordedLogs, StoreError> {
        let path = path.as_ref().to_path_buf();
        let unreadable = |error: rusqlite::Error| {
            StoreError::Unavailable(format!("cannot read {}: {error}", path.display()))
        };
        let connection = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(unreadable)?;
        connection
            .busy_timeout(std::time::Duration::from_secs(5))
            .map_err(unreadable)?;
        let version: usize = connection
            .query_row("PRAGMA user_version", [], |row| row.get(0))
            .map_err(unreadable)?;
        if version == 0 {
            return Err(StoreError::Unavailable(format!(
                "{} is not a Colloquy store (no schema)",
                path.display()
            )));
        }
        if version > MIGRATIONS.len() {
            return Err(StoreError::Unavailable(format!(
                "{} has schema version {version}, written by a newer colloquy; this one reads \
                 versions {OLDEST_READABLE} to {}",
                path.display(),
                MIGRATIONS.len()
            )));
        }
        if version < OLDEST_READABLE {
            return Err(StoreError::Unavailable(format!(
                "{} has schema version {version}; this colloquy reads versions \
                 {OLDEST_READABLE} to {} (run a server of this version on it once to migrate it)",
                path.display(),
                MIGRATIONS.len()
            )));
        }
        Ok(RecordedLogs { path, connection })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The ids of every stored conversation, in id order (ids are time-ordered UUIDv7s
    /// unless a caller chose its own).
    pub fn conversation_ids(&self) -> Result<Vec<String>, StoreError> {
        let mut select = self
            .connection
            .prepare("SELECT id FROM conversations ORDER BY id")
            .map_err(internal)?;
        let ids = select
            .query_map([], |row| row.get::<_, String>(0))
            .map_err(internal)?
            .collect::<Result<Vec<String>, _>>()
            .map_err(internal)?;
        Ok(ids)
    }

    /// The whole log of a conversation (empty when it is not stored).
    pub fn load(&self, id: &str) -> Result<Vec<ConversationEvent>, StoreError> {
        read_events(&self.connection, id, 0)
    }
}
