//! The directory watcher: reloads the [`LiveCatalog`] when files in its directory change.
//!
//! Every change counts: create, modify, delete, rename, and editors' atomic saves (write a
//! temporary file, rename it over the original), which arrive as bursts of several events.
//! Events are debounced: the reload runs once the directory has been quiet for [`QUIET`],
//! and at the latest [`MAX_DELAY`] after the first event of a burst, so a file being written
//! continuously still reloads promptly. The reload compiles the whole set (all-or-nothing),
//! so which file changed does not matter and a spurious event costs one compile that swaps
//! nothing. The watch is recursive because hook modules may live in subdirectories.

use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher as _};

use crate::live::LiveCatalog;

/// Quiet time after the last event of a burst before reloading: long enough to take an
/// editor's save (temp file, write, rename) as one change.
pub const QUIET: Duration = Duration::from_millis(50);
/// Longest a reload waits after the first event of a burst (the debounce bound of the
/// reload-latency budget).
pub const MAX_DELAY: Duration = Duration::from_millis(100);

/// Watches a live catalog's directory until dropped.
pub struct DirectoryWatcher {
    // Dropping the notify watcher drops the event sender, which ends the reload thread.
    _watcher: RecommendedWatcher,
}

impl std::fmt::Debug for DirectoryWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectoryWatcher").finish_non_exhaustive()
    }
}

/// Starts watching `live`'s directory: every debounced burst of changes reloads it.
pub fn watch(live: Arc<LiveCatalog>) -> notify::Result<DirectoryWatcher> {
    let (tx, rx) = mpsc::channel::<notify::Result<notify::Event>>();
    let mut watcher = notify::recommended_watcher(move |event| {
        // The receiver is gone only when the reload thread ended: nothing left to tell.
        let _ = tx.send(event);
    })?;
    watcher.watch(live.dir(), RecursiveMode::Recursive)?;
    std::thread::Builder::new()
        .name("template-watcher".to_owned())
        .spawn(move || run(&live, &rx))
        .map_err(|error| notify::Error::generic(&error.to_string()))?;
    Ok(DirectoryWatcher { _watcher: watcher })
}

/// Whether an event may change what a reload compiles. Reads (the compiler opening files)
/// do not, and must not trigger reloads of their own; nor do edits of template test files
/// (`*.test.yaml`), which the compiler skips.
fn relevant(event: &notify::Result<notify::Event>) -> bool {
    match event {
        Ok(event) => {
            let only_test_files = !event.paths.is_empty()
                && event
                    .paths
                    .iter()
                    .all(|path| crate::compiler::is_test_file(path));
            !matches!(event.kind, EventKind::Access(_)) && !only_test_files
        }
        Err(error) => {
            // Lost events (queue overflow) or a watch error: reload to be safe.
            tracing::warn!(%error, "template watcher error; reloading");
            true
        }
    }
}

fn run(live: &LiveCatalog, events: &mpsc::Receiver<notify::Result<notify::Event>>) {
    loop {
        match events.recv() {
            Ok(event) if relevant(&event) => {}
            Ok(_) => continue,
            Err(mpsc::RecvError) => return,
        }
        let first = Instant::now();
        let mut last = first;
        loop {
            let until = (last + QUIET).min(first + MAX_DELAY);
            let wait = until.saturating_duration_since(Instant::now());
            match events.recv_timeout(wait) {
                Ok(event) if relevant(&event) => last = Instant::now(),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        // The outcome is logged and kept for `/v1/status` by the reload itself.
        let _ = live.reload();
    }
}
