//! The revision archive in SQLite (schema version 9): tables `revisions`, `modules` and
//! `activations`. Its writes are jobs of the writer thread like every other write, so they
//! share a commit's transaction and are answered only once it is durable (after the WAL's
//! fsync under [`Synchronous::Full`]); its reads use the read connection. Conversation
//! removal never touches these tables.

use colloquy_core::store::{Activation, ArchivedRevision};

use super::*;

/// A write to the archive, its JSON encoded by the caller (off the writer thread).
pub(super) enum ArchiveWrite {
    /// Keep a revision unless it is kept already.
    Revision {
        template: String,
        revision: String,
        first_seen: i64,
        body: String,
    },
    /// Keep a module's bytes unless its hash is kept already.
    Module { sha256: String, bytes: Vec<u8> },
    /// Append an activation to the history.
    Activation { template: String, body: String },
}

impl ArchiveWrite {
    pub(super) fn revision(revision: &ArchivedRevision) -> Result<ArchiveWrite, StoreError> {
        Ok(ArchiveWrite::Revision {
            template: revision.template.to_string(),
            revision: revision.revision.to_string(),
            first_seen: to_sql(revision.first_seen),
            body: encode(revision)?,
        })
    }

    pub(super) fn activation(activation: &Activation) -> Result<ArchiveWrite, StoreError> {
        Ok(ArchiveWrite::Activation {
            template: activation.template.to_string(),
            body: encode(activation)?,
        })
    }

    /// Runs the write in the writer's transaction.
    pub(super) fn apply(&self, connection: &Connection) -> Result<(), rusqlite::Error> {
        match self {
            ArchiveWrite::Revision {
                template,
                revision,
                first_seen,
                body,
            } => connection
                .prepare_cached(
                    "INSERT INTO revisions (template, revision, body, first_seen)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (template, revision) DO NOTHING",
                )?
                .execute(params![template, revision, body, first_seen])?,
            ArchiveWrite::Module { sha256, bytes } => connection
                .prepare_cached(
                    "INSERT INTO modules (sha256, bytes) VALUES (?1, ?2)
                     ON CONFLICT (sha256) DO NOTHING",
                )?
                .execute(params![sha256, bytes])?,
            ArchiveWrite::Activation { template, body } => connection
                .prepare_cached("INSERT INTO activations (template, body) VALUES (?1, ?2)")?
                .execute(params![template, body])?,
        };
        Ok(())
    }
}

/// The kept revisions of `template` (all when `None`), in the trait's listing order.
pub(super) fn revisions(
    connection: &Connection,
    template: Option<&str>,
) -> Result<Vec<ArchivedRevision>, StoreError> {
    // Text compares byte by byte (SQLite's BINARY collation), as `str`'s `Ord` does.
    let mut select = connection
        .prepare_cached(
            "SELECT body FROM revisions WHERE ?1 IS NULL OR template = ?1
             ORDER BY first_seen, template, revision",
        )
        .map_err(internal)?;
    let bodies = select
        .query_map(params![template], |row| row.get::<_, String>(0))
        .map_err(internal)?
        .collect::<Result<Vec<String>, _>>()
        .map_err(internal)?;
    bodies.iter().map(|body| decode(body)).collect()
}

/// One kept revision.
pub(super) fn revision(
    connection: &Connection,
    template: &str,
    revision: &str,
) -> Result<Option<ArchivedRevision>, StoreError> {
    let body: Option<String> = connection
        .prepare_cached("SELECT body FROM revisions WHERE template = ?1 AND revision = ?2")
        .and_then(|mut select| {
            select
                .query_row(params![template, revision], |row| row.get(0))
                .optional()
        })
        .map_err(internal)?;
    body.as_deref().map(decode).transpose()
}

/// A kept module's bytes.
pub(super) fn module(
    connection: &Connection,
    sha256: &str,
) -> Result<Option<Arc<[u8]>>, StoreError> {
    let bytes: Option<Vec<u8>> = connection
        .prepare_cached("SELECT bytes FROM modules WHERE sha256 = ?1")
        .and_then(|mut select| {
            select
                .query_row(params![sha256], |row| row.get(0))
                .optional()
        })
        .map_err(internal)?;
    Ok(bytes.map(Arc::from))
}

/// The newest `limit` activations of `template` (all templates when `None`), oldest first.
pub(super) fn activations(
    connection: &Connection,
    template: Option<&str>,
    limit: usize,
) -> Result<Vec<Activation>, StoreError> {
    let limit = to_sql(limit as u64);
    // The newest first down the primary key (or the template's index), turned around.
    let bodies = match template {
        Some(template) => connection
            .prepare_cached(
                "SELECT body FROM (SELECT seq, body FROM activations WHERE template = ?1
                                   ORDER BY seq DESC LIMIT ?2)
                 ORDER BY seq",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![template, limit], |row| row.get::<_, String>(0))?
                    .collect::<Result<Vec<String>, _>>()
            }),
        None => connection
            .prepare_cached(
                "SELECT body FROM (SELECT seq, body FROM activations
                                   ORDER BY seq DESC LIMIT ?1)
                 ORDER BY seq",
            )
            .and_then(|mut select| {
                select
                    .query_map(params![limit], |row| row.get::<_, String>(0))?
                    .collect::<Result<Vec<String>, _>>()
            }),
    }
    .map_err(internal)?;
    bodies.iter().map(|body| decode(body)).collect()
}
