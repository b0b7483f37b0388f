//! The revision archive: every revision of every template a store's engine has served, with
//! what it takes to compile it again, and the history of which revision served new
//! conversations when.
//!
//! Kept in the [`ConversationStore`](super::ConversationStore) beside the conversations, so
//! an engine restarted on the store (or another node sharing it) still knows the revisions
//! its running conversations started on, and an administrator can see, and roll back to,
//! what was active before. Conversation retention and removal never touch it.
//!
//! A hook module's bytes are kept once per SHA-256
//! ([`archive_module`](super::ConversationStore::archive_module)); revisions name them by
//! hash, so the same module under many revisions is stored once.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The kinds of [`Activation`], in the words [`Activation::kind`] uses.
pub const ACTIVATION_KINDS: &[&str] = &[
    "reload", "upload", "delete", "stage", "promote", "rollback", "ramp", "abort", "follow",
];

/// One revision of a template, as the archive keeps it: enough to compile it again.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArchivedRevision {
    /// The template's name.
    pub template: Arc<str>,
    /// The revision's id (`sha256:…` of what it was compiled from).
    pub revision: Arc<str>,
    /// The YAML it was compiled from, exactly.
    pub source: Arc<str>,
    /// The file it was read from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// SHA-256 (lowercase hex) of its hook module; the bytes are kept once per hash by
    /// [`archive_module`](super::ConversationStore::archive_module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_sha256: Option<Arc<str>>,
    /// The module file's path when it was compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_path: Option<String>,
    /// When it was first archived (ms since the Unix epoch).
    pub first_seen: u64,
}

impl ArchivedRevision {
    /// The order [`archived_revisions`](super::ConversationStore::archived_revisions)
    /// lists revisions in: oldest `first_seen` first, then by template and revision, so
    /// every store lists revisions archived in the same millisecond alike.
    pub fn listing_order(&self) -> (u64, &str, &str) {
        (self.first_seen, &self.template, &self.revision)
    }
}

/// A change of which revision of a template serves new conversations, or of its candidate:
/// the wire type of the rollout API's history, kept as is.
pub use colloquy_protocol::rollout::Activation;

/// The newest `limit` of `entries` (oldest first): what
/// [`activations`](super::ConversationStore::activations) answers from a whole history.
pub fn newest<T>(mut entries: Vec<T>, limit: usize) -> Vec<T> {
    let skip = entries.len().saturating_sub(limit);
    entries.drain(..skip);
    entries
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_keeps_the_last_entries_in_order() {
        assert_eq!(newest(vec![1, 2, 3, 4], 2), [3, 4]);
        assert_eq!(newest(vec![1, 2], 5), [1, 2]);
        assert_eq!(newest(vec![1, 2], 0), Vec::<i32>::new());
    }

    #[test]
    fn optional_fields_are_left_out_and_read_back_as_none() {
        let revision = ArchivedRevision {
            template: Arc::from("t"),
            revision: Arc::from("sha256:1"),
            source: Arc::from("name: t\n"),
            path: None,
            hook_sha256: None,
            hook_path: None,
            first_seen: 5,
        };
        let json = serde_json::to_value(&revision).expect("encode");
        assert_eq!(
            json,
            serde_json::json!({
                "template": "t", "revision": "sha256:1", "source": "name: t\n", "first_seen": 5
            })
        );
        assert_eq!(
            serde_json::from_value::<ArchivedRevision>(json).expect("decode"),
            revision
        );
    }
}
