//! Following a remote policy manager: a remote engine mirrors the manager's templates (YAML
//! text and hook modules, byte for byte) into a local directory and reloads its own
//! [`LiveCatalog`] from it, so it compiles locally, gets the very same revisions as the
//! manager, and keeps serving its last catalog whenever the manager is out of reach.
//!
//! The loop: subscribe to `GET /v1/watch`; each entry lists every template and its revision;
//! templates whose revision differs from the mirror's are fetched with `If-None-Match` (a
//! `304` means the mirror already has it), modules are fetched by hash unless the mirror
//! holds those bytes already, deleted templates are removed, then the mirror is reloaded
//! (all-or-nothing, like any reload). A broken connection or a failed fetch reconnects
//! after a backoff ([`MIN_BACKOFF`] doubling up to [`MAX_BACKOFF`]); the first entry after a
//! reconnect is the manager's whole catalog, so the engine catches up on everything it
//! missed. A silent connection is dropped after [`IDLE_TIMEOUT`] (the manager sends a
//! keep-alive comment more often than that).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use colloquy_protocol::policy::{CatalogChange, TemplateDocument};
use futures_util::StreamExt as _;
use sha2::{Digest, Sha256};

use crate::client::{ClientError, Fetched, PolicyClient};
use crate::compiler::module_path_inside;
use crate::live::{LiveCatalog, check_name, write_atomically};

/// First wait before reconnecting.
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between reconnection attempts: how late at most an engine notices that its
/// manager is back.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3);
/// A change feed silent this long is taken as broken (the manager's keep-alive comes every
/// few seconds).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Why one sync failed (the follower logs it and reconnects).
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// Talking to the manager failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// Writing the mirror failed.
    #[error("cannot write the template mirror: {0}")]
    Io(#[from] std::io::Error),
    /// The manager sent something the mirror cannot hold.
    #[error("{0}")]
    Refused(String),
    /// The feed was silent for too long.
    #[error("change feed silent for {IDLE_TIMEOUT:?}")]
    Idle,
}

/// Follows the policy manager at `client` into `live` (whose directory is the mirror) until
/// the returned task is aborted.
pub fn follow(live: Arc<LiveCatalog>, client: PolicyClient) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut follower = Follower::new(live, client);
        let mut backoff = MIN_BACKOFF;
        loop {
            match follower.session().await {
                Ok(()) => {
                    tracing::info!(manager = %follower.client.base_url(), "change feed ended; reconnecting")
                }
                Err(error) => tracing::warn!(
                    manager = %follower.client.base_url(),
                    %error,
                    retry_in = ?backoff,
                    "policy manager out of reach; serving the last catalog"
                ),
            }
            if follower.synced_in_session {
                backoff = MIN_BACKOFF;
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    })
}

struct Follower {
    live: Arc<LiveCatalog>,
    client: PolicyClient,
    /// Mirror file of each template, and the revision it holds.
    mirrored: HashMap<String, String>,
    synced_in_session: bool,
}

impl Follower {
    fn new(live: Arc<LiveCatalog>, client: PolicyClient) -> Follower {
        // A mirror left by an earlier run was loaded already: start from what it holds.
        let mirrored = live
            .snapshot()
            .summaries()
            .into_iter()
            .map(|t| (t.name, t.revision))
            .collect();
        Follower {
            live,
            client,
            mirrored,
            synced_in_session: false,
        }
    }

    /// One connection to the change feed, until it ends or fails.
    async fn session(&mut self) -> Result<(), FollowError> {
        self.synced_in_session = false;
        let mut feed = self.client.watch().await?;
        loop {
            let next = tokio::time::timeout(IDLE_TIMEOUT, feed.next())
                .await
                .map_err(|_| FollowError::Idle)?;
            let Some(change) = next else {
                return Ok(());
            };
            self.sync(&change?).await?;
            self.synced_in_session = true;
        }
    }

    /// Brings the mirror to `change` and reloads it.
    async fn sync(&mut self, change: &CatalogChange) -> Result<(), FollowError> {
        let mut touched = false;
        for template in &change.templates {
            if self.mirrored.get(&template.name) == Some(&template.revision) {
                continue;
            }
            if check_name(&template.name).is_err() {
                tracing::warn!(name = %template.name, "skipping a template whose name cannot be a file name");
                continue;
            }
            let known = self.mirrored.get(&template.name).map(String::as_str);
            match self.client.document(&template.name, known).await? {
                Fetched::NotModified => {}
                // Deleted since the entry was sent: the next entry says so.
                Fetched::Gone => {}
                Fetched::Modified(document) => {
                    self.write(&document).await?;
                    self.mirrored
                        .insert(document.name.clone(), document.revision.clone());
                    touched = true;
                }
            }
        }
        let removed: Vec<String> = self
            .mirrored
            .keys()
            .filter(|name| !change.templates.iter().any(|t| &t.name == *name))
            .cloned()
            .collect();
        for name in removed {
            match std::fs::remove_file(self.yaml_path(&name)) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(error.into()),
            }
            self.mirrored.remove(&name);
            touched = true;
        }
        if touched || self.live.snapshot().generation == 0 {
            let live = self.live.clone();
            // Reload failures are kept in the live catalog's status and logged there; the
            // mirror stays as the manager has it, and the next change retries.
            let _ = tokio::task::spawn_blocking(move || live.reload()).await;
        }
        Ok(())
    }

    fn yaml_path(&self, name: &str) -> PathBuf {
        self.live.dir().join(format!("{name}.yaml"))
    }

    /// Writes a template and its module into the mirror.
    async fn write(&self, document: &TemplateDocument) -> Result<(), FollowError> {
        if let Some(module) = &document.hook_module {
            let relative = module_path_inside(&module.module).ok_or_else(|| {
                FollowError::Refused(format!(
                    "template `{}`: hook module path `{}` leaves the template directory; a remote engine cannot mirror it",
                    document.name, module.module
                ))
            })?;
            let path = self.live.dir().join(relative);
            let current = std::fs::read(&path).ok();
            if current.as_deref().map(sha256_hex).as_deref() != Some(module.sha256.as_str()) {
                let bytes = match self.client.module(&document.name, &module.sha256).await? {
                    Fetched::Modified(bytes) => bytes,
                    _ => {
                        return Err(FollowError::Refused(format!(
                            "template `{}`: module {} is gone from the manager",
                            document.name, module.sha256
                        )));
                    }
                };
                if sha256_hex(&bytes) != module.sha256 {
                    return Err(FollowError::Refused(format!(
                        "template `{}`: module bytes do not match their hash {}",
                        document.name, module.sha256
                    )));
                }
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                write_atomically(&path, &bytes)?;
            }
        }
        write_atomically(&self.yaml_path(&document.name), document.source.as_bytes())?;
        Ok(())
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_paths_must_stay_inside_the_mirror() {
        assert!(module_path_inside("guard.wasm").is_some());
        assert!(module_path_inside("hooks/guard.wasm").is_some());
        assert!(module_path_inside("../guard.wasm").is_none());
        assert!(module_path_inside("/etc/guard.wasm").is_none());
        assert!(module_path_inside("").is_none());
    }
}
