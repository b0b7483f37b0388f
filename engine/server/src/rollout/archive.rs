//! The live catalog's [`Archive`] on the engine's store: every new revision's source (and
//! its hook module, once per hash) and every activation are written to the store's revision
//! archive, in order, by one task, so that a restart finds them ([`load`]).
//!
//! The catalog calls the archive under its change lock and must not wait for I/O there, so
//! the writes are queued and the task writes them within milliseconds; a crash in between
//! loses the newest entries (the running revisions are still in the template files).

use std::sync::Arc;

use colloquy_core::store::{ArchivedRevision, ConversationStore, StoreError};
use colloquy_policy::compiled::HookModule;
use colloquy_policy::live::rollout::ArchivedSource;
use colloquy_policy::live::{Archive, LoadedSource};
use colloquy_protocol::rollout::Activation;
use tokio::sync::mpsc;

/// What the writer task writes.
enum Entry {
    Revision(ArchivedRevision, Option<Arc<HookModule>>),
    Activation(Activation),
}

/// The store's revision archive, as the live catalog writes it.
pub struct StoreArchive {
    queue: mpsc::UnboundedSender<Entry>,
}

impl StoreArchive {
    /// Starts the writer task on the current runtime.
    pub fn start(store: Arc<dyn ConversationStore>) -> Arc<StoreArchive> {
        let (queue, mut entries) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Some(entry) = entries.recv().await {
                if let Err(error) = write(&*store, &entry).await {
                    tracing::warn!(%error, "the revision archive missed an entry");
                }
            }
        });
        Arc::new(StoreArchive { queue })
    }
}

async fn write(store: &dyn ConversationStore, entry: &Entry) -> Result<(), StoreError> {
    match entry {
        Entry::Revision(revision, module) => {
            if let Some(module) = module {
                store.archive_module(&module.sha256, &module.bytes).await?;
            }
            store.archive_revision(revision).await
        }
        Entry::Activation(activation) => store.record_activation(activation).await,
    }
}

impl Archive for StoreArchive {
    fn revision_loaded(&self, name: &str, revision: &str, source: &LoadedSource) {
        let archived = ArchivedRevision {
            template: Arc::from(name),
            revision: Arc::from(revision),
            source: source.text.clone(),
            path: source.path.as_ref().map(|p| p.display().to_string()),
            hook_sha256: source.hook_module.as_ref().map(|m| m.sha256.clone()),
            hook_path: source
                .hook_module
                .as_ref()
                .map(|m| m.path.display().to_string()),
            first_seen: source.loaded_at,
        };
        let _ = self
            .queue
            .send(Entry::Revision(archived, source.hook_module.clone()));
    }

    fn activated(&self, activation: &Activation) {
        let _ = self.queue.send(Entry::Activation(activation.clone()));
    }
}

/// What the store's archive holds, for [`colloquy_policy::LiveCatalog::seed`]: every
/// revision with its module, and the whole history.
pub async fn load(
    store: &dyn ConversationStore,
) -> Result<(Vec<ArchivedSource>, Vec<Activation>), StoreError> {
    let mut sources = Vec::new();
    for revision in store.archived_revisions(None).await? {
        let hook_module = match &revision.hook_sha256 {
            Some(sha256) => match store.archived_module(sha256).await? {
                Some(bytes) => Some(Arc::new(HookModule {
                    path: revision.hook_path.clone().unwrap_or_default().into(),
                    bytes,
                    sha256: sha256.clone(),
                })),
                None => {
                    tracing::warn!(template = %revision.template, revision = %revision.revision, "archived revision's hook module is missing; it cannot be compiled again");
                    continue;
                }
            },
            None => None,
        };
        sources.push((
            revision.template.clone(),
            revision.revision.clone(),
            LoadedSource {
                text: revision.source.clone(),
                loaded_at: revision.first_seen,
                path: revision.path.as_ref().map(Into::into),
                hook_module,
            },
        ));
    }
    let history = store.activations(None, usize::MAX).await?;
    Ok((sources, history))
}
