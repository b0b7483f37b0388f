//! The live catalog: the policy manager's current [`Catalog`], swapped whole on every
//! successful reload of its template directory.
//!
//! Rules (STYLE 7, OPA bundles): a reload compiles the *whole* directory; only if every
//! template compiles (and passes the optional [`TemplateCheck`], e.g. the engine's hook
//! link check) is a new immutable [`Snapshot`] built and swapped in with one atomic store
//! (`arc-swap`), so a reader sees either the old set or the new one, never a mix. A failed
//! reload changes nothing that serves: the last good snapshot stays, and the failure is kept
//! for `/v1/status` and logged until the next successful reload clears it.
//!
//! Compiling: the check may answer that a revision's hook module is still compiling
//! ([`Checked::Compiling`]; a big component takes seconds). Such a revision is left out of
//! the snapshot, the template's previous revision (if any) serving meanwhile, while every
//! other template's new revision swaps in at once: one slow hook never holds up the rest,
//! nor the reload lock. It is listed by [`LiveCatalog::compiling`] (`/v1/status`) until the
//! check's owner calls the [`CompileListener`] it was given; the catalog then reloads, and
//! the revision serves, or its failure is reported like any refused check (the previous
//! revision keeps serving).
//!
//! Pinning: new conversations take [`Catalog::latest`]; running ones look their revision up
//! with [`LiveCatalog::revision`]. A snapshot's catalog holds the current revisions only. A
//! revision edited away or deleted is *retired*: its compiled form stays in memory only while
//! something holds it (a conversation loaded in the engine holds its template), through a
//! weak reference; what is always kept is the text it was compiled from and its hook module,
//! a fraction of the compiled size (a JSON Schema or a CEL program takes many times its
//! text). A conversation pinned to a retired revision that nobody holds any more (evicted
//! from memory, loaded again from its store) gets it compiled again from that text, the
//! same revision, on first lookup. Dropping retired revisions outright would not be safe: a
//! conversation may be evicted and reloaded from its store at any time. At most
//! [`MAX_RETIRED_SOURCES`] retired texts are kept per template (the oldest unheld go first);
//! a conversation pinned to one dropped past that, like one pinned to any edited-away
//! revision after a restart, fails to load with `revision_gone`.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use arc_swap::{ArcSwap, ArcSwapOption};
use colloquy_protocol::policy::{
    CompilingRevision, DiagnosticBody, ReloadFailure, TemplateSummary,
};
use sha2::{Digest, Sha256};
use tokio::sync::watch;

use crate::catalog::Catalog;
use crate::compiled::{CompiledTemplate, HookModule};
use crate::compiler::{Diagnostic, Diagnostics, TemplateCompiler};

mod files;
pub mod rollout;

use files::{WASM_MAGIC, read_if_exists};
pub use files::{check_module_name, check_name, write_atomically};
pub use rollout::{Archive, Candidate, RolloutError, RolloutMode};

/// Retired revisions (edited away or deleted) whose text is kept per template, so that a
/// conversation pinned to one still loads: 32 edits back covers every conversation started
/// since unless a template is edited many times during one conversation's life, while 32
/// uploads of the largest template (1 MiB) keep 32 MiB of text at most.
pub const MAX_RETIRED_SOURCES: usize = 32;

/// Longest template name accepted in a URL (and so as a file name).
pub const MAX_TEMPLATE_NAME_LEN: usize = 128;

/// An extra check every newly loaded revision must pass before a reload may swap it in,
/// e.g. the engine compiling and linking its hook module. It must not block on long work:
/// it answers [`Checked::Compiling`] instead, and calls the [`CompileListener`] it is given
/// once that work ends.
pub type TemplateCheck = dyn Fn(&CompiledTemplate, &CompileListener) -> Checked + Send + Sync;

/// Told the SHA-256 (lowercase hex) of a hook module whose background compile ended,
/// whichever way it ended; the catalog then reloads. One catalog hands its check the same
/// `Arc` every time, so a check can keep one per catalog (`Arc::ptr_eq`).
pub type CompileListener = Arc<dyn Fn(&str) + Send + Sync>;

/// What a [`TemplateCheck`] says of a newly loaded revision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Checked {
    /// It may serve.
    Ready,
    /// Its hook module is compiling in the background: the revision waits outside the
    /// snapshot until the check calls the [`CompileListener`] with the module's hash.
    Compiling,
    /// It may not serve; a sentence for the diagnostic.
    Refused(String),
}

/// One immutable state of the live catalog.
#[derive(Debug)]
pub struct Snapshot {
    /// The current templates: the newest revision of each, which new conversations use.
    /// Retired revisions are looked up through [`LiveCatalog::revision`].
    pub catalog: Catalog,
    /// Hash over every current template's name and revision: `sha256:<hex>`.
    pub revision: Arc<str>,
    /// When this snapshot was swapped in (milliseconds since the Unix epoch).
    pub loaded_at: u64,
    /// 0 before the first load, then +1 per swap.
    pub generation: u64,
    /// The current revisions and the retired ones kept (see the module docs): the text each
    /// was compiled from, its hook module and when it first loaded.
    sources: HashMap<(Arc<str>, Arc<str>), LoadedSource>,
    /// The staged candidate of each template that has one ([`rollout`]).
    pub candidates: HashMap<Arc<str>, Arc<Candidate>>,
    /// The rollout's version this snapshot shows.
    rollout_version: u64,
}

/// What a revision was compiled from.
#[derive(Clone, Debug)]
pub struct LoadedSource {
    /// The YAML, exactly.
    pub text: Arc<str>,
    /// When this process first loaded the revision (milliseconds since the Unix epoch).
    pub loaded_at: u64,
    /// The file it was read from.
    pub path: Option<PathBuf>,
    /// The hook module it was compiled with (its file may hold another one now).
    pub hook_module: Option<Arc<HookModule>>,
}

impl Snapshot {
    fn empty() -> Snapshot {
        Snapshot {
            catalog: Catalog::default(),
            revision: catalog_revision(&[]),
            loaded_at: now_ms(),
            generation: 0,
            sources: HashMap::new(),
            candidates: HashMap::new(),
            rollout_version: 0,
        }
    }

    /// A copy to change and swap in: the same templates (the same `Arc`s), sources and
    /// candidates, one generation on.
    fn clone_for_change(&self) -> Snapshot {
        Snapshot {
            catalog: self.catalog.clone(),
            revision: self.revision.clone(),
            loaded_at: self.loaded_at,
            generation: self.generation + 1,
            sources: self.sources.clone(),
            candidates: self.candidates.clone(),
            rollout_version: self.rollout_version,
        }
    }

    /// The YAML text and load time of a revision.
    pub fn source(&self, name: &str, revision: &str) -> Option<&LoadedSource> {
        self.sources.get(&(Arc::from(name), Arc::from(revision)))
    }

    /// Every revision of `name` kept (the current one, if the template still exists, and
    /// the retired ones kept), in no particular order.
    pub fn revisions_of(&self, name: &str) -> Vec<(Arc<str>, &LoadedSource)> {
        self.sources
            .iter()
            .filter(|((template, _), _)| &**template == name)
            .map(|((_, revision), source)| (revision.clone(), source))
            .collect()
    }

    /// Every current template's name and revision, sorted by name.
    pub fn summaries(&self) -> Vec<TemplateSummary> {
        self.catalog
            .templates()
            .iter()
            .map(|template| TemplateSummary {
                name: template.name.to_string(),
                revision: template.revision.to_string(),
            })
            .collect()
    }
}

/// What a successful reload did.
#[derive(Debug)]
pub enum Reloaded {
    /// A new snapshot serves.
    Swapped(Arc<Snapshot>),
    /// The directory compiled to the set already serving; nothing was swapped.
    Unchanged(Arc<Snapshot>),
}

impl Reloaded {
    /// The snapshot serving after the reload.
    pub fn snapshot(&self) -> &Arc<Snapshot> {
        match self {
            Reloaded::Swapped(snapshot) | Reloaded::Unchanged(snapshot) => snapshot,
        }
    }
}

/// Why an upload or a deletion was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    /// The name cannot be a template name (or a file name).
    #[error(
        "`{0}` is not a template name: use 1 to {MAX_TEMPLATE_NAME_LEN} characters of A-Z a-z 0-9 - _ ., not starting with `.`"
    )]
    InvalidName(String),
    /// No current template has this name.
    #[error("no template named `{0}`")]
    UnknownTemplate(String),
    /// The file the upload would be written to holds another template.
    #[error("{path} holds the template `{holder}`; rename that file before uploading `{name}`")]
    FileTaken {
        /// The uploaded name.
        name: String,
        /// The file.
        path: String,
        /// The template in it.
        holder: String,
    },
    /// The template, or the directory with it, does not compile; nothing changed.
    #[error("{0}")]
    Rejected(Diagnostics),
    /// An uploaded hook module is refused before anything is written.
    #[error("{0}")]
    InvalidModule(String),
    /// Writing or removing the file failed; nothing changed.
    #[error("cannot change the template directory: {0}")]
    Io(#[from] io::Error),
}

/// What an accepted upload did.
#[derive(Debug)]
pub struct Upload {
    /// The snapshot serving after it.
    pub snapshot: Arc<Snapshot>,
    /// Whether the template (or the module file) is new.
    pub created: bool,
    /// The revisions it made that wait for their hook module to compile: not served yet,
    /// listed by [`LiveCatalog::compiling`] until their compile ends.
    pub compiling: Vec<CompilingRevision>,
}

/// A template's name and one of its revisions.
type RevisionKey = (Arc<str>, Arc<str>);

/// The live catalog of a template directory.
pub struct LiveCatalog {
    /// In an `Arc` so that the [`CompileListener`] can reload the catalog from the thread a
    /// compile ends on, through a weak reference (a catalog dropped meanwhile stays dropped).
    shared: Arc<Shared>,
}

/// The live catalog's state (see [`LiveCatalog`]).
struct Shared {
    dir: PathBuf,
    /// Where the templates come from, for `/v1/status`: the directory, or the URL of the
    /// policy manager a remote engine mirrors into `dir`.
    origin: String,
    compiler: TemplateCompiler,
    current: ArcSwap<Snapshot>,
    last_error: ArcSwapOption<ReloadFailure>,
    check: Option<Box<TemplateCheck>>,
    /// Retired revisions' compiled forms, while something holds them. Locked while one is
    /// compiled again, so a revision is never compiled twice at once (two `Arc`s of one
    /// revision would defeat caches keyed on it).
    retired: Mutex<HashMap<RevisionKey, Weak<CompiledTemplate>>>,
    /// Reloads, uploads and deletions run one at a time, so a snapshot is always built on
    /// the one before it and a rolled-back upload is never seen half-way.
    changing: Mutex<()>,
    changes: watch::Sender<Arc<Snapshot>>,
    /// New revisions left out of the snapshot while their hook module compiles, oldest
    /// first: what the last reload that ran the checks found, less the modules done since.
    compiling: Mutex<Vec<CompilingRevision>>,
    /// Signalled whenever `compiling` shrinks.
    compiles_ended: Condvar,
    /// Given to the check; made at the first reload with a check, since it holds a weak
    /// reference to this state.
    listener: OnceLock<CompileListener>,
    /// Pins, candidates and the history ([`rollout`]).
    rollout: Mutex<rollout::Rollout>,
    /// New conversations started while a ramp runs: every hundred, the ramp's percent start
    /// on the candidate.
    ramp_starts: AtomicU64,
}

impl std::fmt::Debug for LiveCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveCatalog")
            .field("dir", &self.shared.dir)
            .field("revision", &self.shared.current.load().revision)
            .finish_non_exhaustive()
    }
}

impl LiveCatalog {
    /// A live catalog of `dir` with nothing loaded yet; call [`LiveCatalog::reload`].
    pub fn new(dir: impl Into<PathBuf>) -> LiveCatalog {
        let dir = dir.into();
        let origin = dir.display().to_string();
        let empty = Arc::new(Snapshot::empty());
        LiveCatalog {
            shared: Arc::new(Shared {
                dir,
                origin,
                compiler: TemplateCompiler::new(),
                current: ArcSwap::new(empty.clone()),
                last_error: ArcSwapOption::empty(),
                check: None,
                retired: Mutex::new(HashMap::new()),
                changing: Mutex::new(()),
                changes: watch::channel(empty).0,
                compiling: Mutex::new(Vec::new()),
                compiles_ended: Condvar::new(),
                listener: OnceLock::new(),
                rollout: Mutex::new(rollout::Rollout::default()),
                ramp_starts: AtomicU64::new(0),
            }),
        }
    }

    /// A live catalog of `dir`, loaded: fails with the diagnostics if the directory does not
    /// compile.
    pub fn open(dir: impl Into<PathBuf>) -> Result<LiveCatalog, Diagnostics> {
        let live = LiveCatalog::new(dir);
        live.reload()?;
        Ok(live)
    }

    /// Runs `check` on every newly loaded revision before a reload swaps it in.
    ///
    /// # Panics
    /// If the catalog already reloaded with a check: configure a catalog before loading it.
    pub fn with_check(mut self, check: Box<TemplateCheck>) -> LiveCatalog {
        self.configure().check = Some(check);
        self
    }

    /// Compiles with `compiler` (e.g. one with the operator's ceiling on hook budgets).
    ///
    /// # Panics
    /// As [`LiveCatalog::with_check`].
    pub fn with_compiler(mut self, compiler: TemplateCompiler) -> LiveCatalog {
        self.configure().compiler = compiler;
        self
    }

    /// Reports `origin` (e.g. a policy manager's URL) as where the templates come from.
    ///
    /// # Panics
    /// As [`LiveCatalog::with_check`].
    pub fn with_origin(mut self, origin: impl Into<String>) -> LiveCatalog {
        self.configure().origin = origin.into();
        self
    }

    fn configure(&mut self) -> &mut Shared {
        // Besides `self`, only the compile listener refers to the state (weakly), and it is
        // made at the first reload that runs a check: the builders above come before.
        Arc::get_mut(&mut self.shared)
            .expect("a live catalog is configured before it reloads with a check")
    }

    /// The state, with its compile listener made first when it has a check.
    fn prepared(&self) -> &Shared {
        if self.shared.check.is_some() {
            self.shared.listener.get_or_init(|| {
                let shared = Arc::downgrade(&self.shared);
                Arc::new(move |hook_sha256: &str| {
                    if let Some(shared) = shared.upgrade() {
                        shared.compile_ended(hook_sha256);
                    }
                })
            });
        }
        &self.shared
    }

    /// The template directory.
    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    /// Where the templates come from.
    pub fn origin(&self) -> &str {
        &self.shared.origin
    }

    /// The snapshot serving now. Lock-free; the hot path of every conversation start.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.shared.current.load_full()
    }

    /// The revision of `name` a new conversation starts on: the active one, or the candidate
    /// for the share of starts its ramp asks for.
    pub fn latest(&self, name: &str) -> Option<Arc<CompiledTemplate>> {
        let snapshot = self.shared.current.load();
        if !snapshot.candidates.is_empty()
            && let Some(candidate) = snapshot.candidates.get(name)
        {
            let percent = u64::from(candidate.ramp_percent());
            // Exactly `percent` of every hundred starts, spread evenly by a counter rather
            // than drawn: at 50% every other start, at 5% one in twenty.
            if percent > 0
                && self
                    .shared
                    .ramp_starts
                    .fetch_add(1, Ordering::Relaxed)
                    .wrapping_mul(percent)
                    % 100
                    < percent
            {
                return Some(candidate.template.clone());
            }
        }
        snapshot.catalog.latest(name)
    }

    /// A specific revision of `name`: a current one, a retired one still held, or a retired
    /// one compiled again from its kept text (see the module docs). Blocking when it compiles.
    pub fn revision(&self, name: &str, revision: &str) -> Option<Arc<CompiledTemplate>> {
        self.shared.revision(name, revision)
    }

    /// Why the last reload failed, until one succeeds.
    pub fn last_error(&self) -> Option<Arc<ReloadFailure>> {
        self.shared.last_error.load_full()
    }

    /// New revisions waiting for their hook module to compile, oldest first: not served
    /// yet (see the module docs).
    pub fn compiling(&self) -> Vec<CompilingRevision> {
        lock(&self.shared.compiling).clone()
    }

    /// Snapshots as they are swapped in (starting with the current one).
    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.shared.changes.subscribe()
    }

    /// Compiles the whole directory and swaps the result in; on failure keeps the serving
    /// snapshot and records the diagnostics (see the module docs). Blocking: file I/O and
    /// compilation, but not the background compiles of hook modules: a revision waiting for
    /// one is left out (see [`LiveCatalog::compiling`]) and swapped in by a later reload.
    pub fn reload(&self) -> Result<Reloaded, Diagnostics> {
        let shared = self.prepared();
        let guard = shared.lock();
        shared.reload_locked(&guard, &shared.reload_cause())
    }

    /// Reloads, then waits for every hook compile the reload started and reloads again,
    /// until no revision is compiling: for start-up, where there is no earlier catalog to
    /// serve meanwhile and a refused hook should stop the start. Blocking for as long as
    /// the compiles take (a check that answers [`Checked::Compiling`] must call its
    /// listener eventually).
    pub fn reload_settled(&self) -> Result<Reloaded, Diagnostics> {
        loop {
            let reloaded = self.reload()?;
            let compiling = lock(&self.shared.compiling);
            if compiling.is_empty() {
                return Ok(reloaded);
            }
            let compiling = self
                .shared
                .compiles_ended
                .wait_while(compiling, |compiling| !compiling.is_empty())
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            drop(compiling);
        }
    }

    /// Uploads `yaml` as template `name`: compiled first (a broken one is refused with its
    /// diagnostics and nothing is written), then written into the directory atomically
    /// (temporary file + rename) and the directory reloaded; if the directory as a whole
    /// then fails (e.g. a name clash), the previous file is put back. A revision whose hook
    /// module is still compiling is accepted but not served yet ([`Upload::compiling`]); if
    /// its compile fails, that shows in [`LiveCatalog::last_error`] and its file stays.
    /// Blocking, but not for the hook's compile.
    pub fn put(&self, name: &str, yaml: &str) -> Result<Upload, ChangeError> {
        self.prepared().put(name, yaml)
    }

    /// Uploads a hook module as `file` in the template directory: checked to be a wasm
    /// module, written atomically, and the directory reloaded, so every template that names
    /// the file gets a new revision (its hash covers its module): served at once if the
    /// module is compiled already, else once it is ([`Upload::compiling`]). If the directory
    /// then fails (a template's hook check refuses the new module), the previous file is
    /// put back. Blocking, but not for the module's compile.
    pub fn put_module(&self, file: &str, bytes: &[u8]) -> Result<Upload, ChangeError> {
        self.prepared().put_module(file, bytes)
    }

    /// Deletes template `name`: removes its file and reloads. New conversations of it are
    /// refused from then on; running ones finish on their revision. Blocking.
    pub fn delete(&self, name: &str) -> Result<Arc<Snapshot>, ChangeError> {
        self.prepared().delete(name)
    }
}

impl Shared {
    fn revision(&self, name: &str, revision: &str) -> Option<Arc<CompiledTemplate>> {
        let snapshot = self.current.load_full();
        if let Some(current) = snapshot.catalog.revision(name, revision) {
            return Some(current);
        }
        if let Some(candidate) = snapshot
            .candidates
            .get(name)
            .filter(|candidate| *candidate.template.revision == *revision)
        {
            return Some(candidate.template.clone());
        }
        let key = (Arc::from(name), Arc::from(revision));
        let mut retired = lock(&self.retired);
        if let Some(held) = retired.get(&key).and_then(Weak::upgrade) {
            return Some(held);
        }
        let source = snapshot.sources.get(&key)?;
        match self.compiler.recompile(
            &source.text,
            source.path.as_deref(),
            source.hook_module.clone(),
        ) {
            Ok(compiled) if *compiled.revision == *revision => {
                let compiled = Arc::new(compiled);
                retired.insert(key, Arc::downgrade(&compiled));
                Some(compiled)
            }
            Ok(compiled) => {
                tracing::error!(name, revision, got = %compiled.revision, "a retired revision compiled again to another revision");
                None
            }
            Err(diagnostics) => {
                tracing::error!(
                    name,
                    revision,
                    "a retired revision no longer compiles:\n{diagnostics}"
                );
                None
            }
        }
    }

    /// A retired revision's compiled form, if something still holds it.
    fn held(&self, name: &Arc<str>, revision: &Arc<str>) -> Option<Arc<CompiledTemplate>> {
        lock(&self.retired)
            .get(&(name.clone(), revision.clone()))
            .and_then(Weak::upgrade)
    }

    fn lock(&self) -> MutexGuard<'_, ()> {
        lock(&self.changing)
    }

    /// The compile listener handed to the check (a no-op if the catalog made none).
    fn listener(&self) -> CompileListener {
        self.listener
            .get()
            .cloned()
            .unwrap_or_else(|| Arc::new(|_: &str| {}))
    }

    /// A hook module's background compile ended: reloads, so the revisions waiting for it
    /// serve (or are refused), then stops listing them as compiling. Runs on the thread the
    /// compile ended on.
    fn compile_ended(&self, hook_sha256: &str) {
        let guard = self.lock();
        if !lock(&self.compiling)
            .iter()
            .any(|waiting| waiting.hook_sha256 == hook_sha256)
        {
            // Nothing waits for it any more (edited away meanwhile).
            return;
        }
        // The outcome is logged and kept for `/v1/status` by the reload itself.
        let _ = self.reload_locked(&guard, &self.reload_cause());
        lock(&self.compiling).retain(|waiting| waiting.hook_sha256 != hook_sha256);
        self.compiles_ended.notify_all();
    }

    /// Records what a reload's checks found compiling: entries already listed keep their
    /// `since`.
    fn set_compiling(&self, mut found: Vec<CompilingRevision>) {
        let mut compiling = lock(&self.compiling);
        for entry in &mut found {
            match compiling
                .iter()
                .find(|c| c.template == entry.template && c.revision == entry.revision)
            {
                Some(known) => entry.since = known.since,
                None => tracing::info!(
                    template = %entry.template,
                    revision = %entry.revision,
                    hook_sha256 = %entry.hook_sha256,
                    "new revision waits for its hook module to compile; the previous one serves meanwhile"
                ),
            }
        }
        found.sort_by_key(|entry| entry.since);
        *compiling = found;
        self.compiles_ended.notify_all();
    }

    /// What a reload of the directory is, for the history: the watcher's, or a remote
    /// policy manager's change followed.
    fn reload_cause(&self) -> rollout::Cause {
        if self.origin == self.dir.display().to_string() {
            rollout::Cause {
                kind: Some("reload"),
                by: "watcher".into(),
            }
        } else {
            rollout::Cause {
                kind: Some("follow"),
                by: format!("policy manager {}", self.origin),
            }
        }
    }

    fn reload_locked(
        &self,
        _guard: &MutexGuard<'_, ()>,
        cause: &rollout::Cause,
    ) -> Result<Reloaded, Diagnostics> {
        let mut compiling = None;
        let result = match self.build_next(&mut compiling, cause) {
            Ok(reloaded) => {
                if self.last_error.swap(None).is_some() {
                    tracing::info!(dir = %self.dir.display(), "templates compile again; reload error cleared");
                }
                Ok(reloaded)
            }
            Err(diagnostics) => {
                let count = diagnostics.count();
                tracing::warn!(
                    dir = %self.dir.display(),
                    problems = count,
                    "template reload refused, the previous catalog keeps serving:\n{diagnostics}"
                );
                self.last_error.store(Some(Arc::new(ReloadFailure {
                    at: now_ms(),
                    message: format!(
                        "{count} problem{} in {}; the previous catalog keeps serving",
                        if count == 1 { "" } else { "s" },
                        self.dir.display()
                    ),
                    diagnostics: diagnostic_bodies(&diagnostics),
                })));
                Err(diagnostics)
            }
        };
        // Last: a revision leaves the list only once it serves or is reported refused, so
        // whoever watches `/v1/status` always finds it in one of the three places.
        if let Some(compiling) = compiling {
            self.set_compiling(compiling);
        }
        result
    }

    /// Builds the next snapshot and swaps it in. Once the checks ran, `compiling` holds
    /// the revisions they left out to compile.
    fn build_next(
        &self,
        compiling: &mut Option<Vec<CompilingRevision>>,
        cause: &rollout::Cause,
    ) -> Result<Reloaded, Diagnostics> {
        let compiled = self.compiler.compile_dir_with_sources(&self.dir)?;
        let previous = self.current.load_full();
        let listener = self.check.as_ref().map(|_| self.listener());
        let waiting = compiling.insert(Vec::new());
        let mut problems = Vec::new();
        let mut templates = Vec::with_capacity(compiled.len());
        let mut new_sources = Vec::new();
        for (template, text) in compiled {
            // An unchanged revision keeps its `Arc`: running conversations and caches keyed
            // on it see the very same compiled template.
            if let Some(known) = previous
                .catalog
                .revision(&template.name, &template.revision)
                .or_else(|| self.held(&template.name, &template.revision))
            {
                templates.push(known);
                continue;
            }
            if let (Some(check), Some(listener)) = (&self.check, &listener) {
                match check(&template, listener) {
                    Checked::Ready => {}
                    Checked::Compiling => {
                        waiting.push(CompilingRevision {
                            template: template.name.to_string(),
                            revision: template.revision.to_string(),
                            hook_sha256: template
                                .hook_module
                                .as_ref()
                                .map(|module| module.sha256.to_string())
                                .unwrap_or_default(),
                            since: now_ms(),
                        });
                        // The revision serving now, if any, serves on meanwhile.
                        if let Some(serving) = previous.catalog.latest(&template.name) {
                            templates.push(serving);
                        }
                        continue;
                    }
                    Checked::Refused(message) => {
                        problems.push(Diagnostic {
                            file: template.source_path.clone(),
                            line: None,
                            column: None,
                            path: "spec.hooks.module".to_owned(),
                            message,
                            hint: None,
                        });
                        continue;
                    }
                }
            }
            new_sources.push((
                template.name.clone(),
                template.revision.clone(),
                LoadedSource {
                    text,
                    loaded_at: 0,
                    path: template.source_path.clone(),
                    hook_module: template.hook_module.clone(),
                },
            ));
            templates.push(Arc::new(template));
        }
        if !problems.is_empty() {
            return Err(Diagnostics::sorted(problems));
        }
        let loaded_at = now_ms();
        let mut sources = previous.sources.clone();
        let mut rollout = lock(&self.rollout);
        for (name, template_revision, source) in new_sources {
            if let std::collections::hash_map::Entry::Vacant(vacant) =
                sources.entry((name.clone(), template_revision.clone()))
            {
                let source = vacant.insert(LoadedSource {
                    loaded_at,
                    ..source
                });
                if let Some(archive) = &rollout.archive {
                    archive.revision_loaded(&name, &template_revision, source);
                }
            }
        }
        let previous_active: HashMap<Arc<str>, Arc<str>> = previous
            .catalog
            .templates()
            .into_iter()
            .map(|t| (t.name.clone(), t.revision.clone()))
            .collect();
        let templates = rollout.apply(
            templates,
            &previous_active,
            cause,
            &sources,
            &|name, revision| self.revision(name, revision),
        );
        let candidates: HashMap<Arc<str>, Arc<Candidate>> = rollout
            .templates
            .iter()
            .filter_map(|(name, state)| Some((name.clone(), state.candidate.clone()?)))
            .collect();
        let rollout_version = rollout.version;
        drop(rollout);
        let pairs: Vec<(&str, &str)> = templates.iter().map(|t| (&*t.name, &*t.revision)).collect();
        let revision = catalog_revision(&pairs);
        if previous.generation > 0
            && revision == previous.revision
            && rollout_version == previous.rollout_version
        {
            return Ok(Reloaded::Unchanged(previous));
        }
        self.retire(&previous.catalog, &templates, &mut sources);
        let names: Vec<String> = templates
            .iter()
            .filter(|t| {
                previous.catalog.latest(&t.name).map(|p| p.revision.clone())
                    != Some(t.revision.clone())
            })
            .map(|t| format!("{} {}", t.name, t.revision))
            .collect();
        let removed: Vec<String> = previous
            .catalog
            .names()
            .into_iter()
            .filter(|name| !templates.iter().any(|t| &t.name == name))
            .map(|name| name.to_string())
            .collect();
        let next = Arc::new(Snapshot {
            catalog: Catalog::new(templates),
            revision,
            loaded_at,
            generation: previous.generation + 1,
            sources,
            candidates,
            rollout_version,
        });
        self.current.store(next.clone());
        self.changes.send_replace(next.clone());
        tracing::info!(
            dir = %self.dir.display(),
            revision = %next.revision,
            generation = next.generation,
            changed = ?names,
            removed = ?removed,
            "template catalog swapped"
        );
        Ok(Reloaded::Swapped(next))
    }

    /// After a reload: the previous current revisions that are current no more become
    /// retired (held weakly); retired ones nobody holds are forgotten, and past
    /// [`MAX_RETIRED_SOURCES`] per template the oldest unheld texts are dropped.
    fn retire(
        &self,
        previous: &Catalog,
        current: &[Arc<CompiledTemplate>],
        sources: &mut HashMap<RevisionKey, LoadedSource>,
    ) {
        let is_current = |name: &Arc<str>, revision: &Arc<str>| {
            current
                .iter()
                .any(|t| t.name == *name && t.revision == *revision)
        };
        let mut retired = lock(&self.retired);
        for template in previous.templates() {
            if !is_current(&template.name, &template.revision) {
                retired.insert(
                    (template.name.clone(), template.revision.clone()),
                    Arc::downgrade(&template),
                );
            }
        }
        retired.retain(|_, compiled| compiled.strong_count() > 0);
        let mut retired_by_name: HashMap<Arc<str>, Vec<(u64, Arc<str>)>> = HashMap::new();
        for ((name, revision), source) in sources.iter() {
            if !is_current(name, revision)
                && !retired.contains_key(&(name.clone(), revision.clone()))
            {
                retired_by_name
                    .entry(name.clone())
                    .or_default()
                    .push((source.loaded_at, revision.clone()));
            }
        }
        let held = |name: &Arc<str>| {
            retired
                .keys()
                .filter(|(template, _)| template == name)
                .count()
        };
        for (name, mut unheld) in retired_by_name {
            let kept = unheld.len() + held(&name);
            if kept <= MAX_RETIRED_SOURCES {
                continue;
            }
            unheld.sort();
            for (_, revision) in unheld.into_iter().take(kept - MAX_RETIRED_SOURCES) {
                tracing::info!(%name, %revision, "retired revision forgotten: {MAX_RETIRED_SOURCES} newer ones are kept");
                sources.remove(&(name.clone(), revision));
            }
        }
    }

    fn put(&self, name: &str, yaml: &str) -> Result<Upload, ChangeError> {
        check_name(name)?;
        let guard = self.lock();
        let current = self.current.load_full();
        let existing = current.catalog.latest(name);
        let path = match existing.as_ref().and_then(|t| t.source_path.clone()) {
            Some(path) if path.parent() == Some(self.dir.as_path()) => path,
            _ => {
                let path = self.dir.join(format!("{name}.yaml"));
                if let Some(holder) = current
                    .catalog
                    .templates()
                    .into_iter()
                    .find(|t| t.source_path.as_deref() == Some(path.as_path()))
                {
                    return Err(ChangeError::FileTaken {
                        name: name.to_owned(),
                        path: path.display().to_string(),
                        holder: holder.name.to_string(),
                    });
                }
                path
            }
        };
        let template = self
            .compiler
            .compile_str(yaml, Some(&path))
            .map_err(ChangeError::Rejected)?;
        if &*template.name != name {
            return Err(ChangeError::Rejected(Diagnostics::from(vec![Diagnostic {
                file: Some(path),
                line: None,
                column: None,
                path: "metadata.name".to_owned(),
                message: format!(
                    "the upload is for `{name}` but its metadata.name is `{}`",
                    template.name
                ),
                hint: Some(format!("upload it to /v1/templates/{}", template.name)),
            }])));
        }
        let previous = read_if_exists(&path)?;
        write_atomically(&path, yaml.as_bytes())?;
        let snapshot = self.reload_or_restore(&guard, &path, previous)?;
        let compiling = self.compiling_where(|waiting| waiting.template == name);
        Ok(Upload {
            snapshot,
            created: existing.is_none(),
            compiling,
        })
    }

    /// The revisions compiling that match `wanted`.
    fn compiling_where(
        &self,
        wanted: impl Fn(&CompilingRevision) -> bool,
    ) -> Vec<CompilingRevision> {
        lock(&self.compiling)
            .iter()
            .filter(|waiting| wanted(waiting))
            .cloned()
            .collect()
    }

    fn put_module(&self, file: &str, bytes: &[u8]) -> Result<Upload, ChangeError> {
        check_module_name(file)?;
        if !bytes.starts_with(WASM_MAGIC) {
            return Err(ChangeError::InvalidModule(format!(
                "`{file}` is not a wasm module: it does not start with the magic bytes `\\0asm`"
            )));
        }
        let guard = self.lock();
        let path = self.dir.join(file);
        let previous = read_if_exists(&path)?;
        let created = previous.is_none();
        write_atomically(&path, bytes)?;
        let snapshot = self.reload_or_restore(&guard, &path, previous)?;
        let sha256: String = Sha256::digest(bytes)
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect();
        let compiling = self.compiling_where(|waiting| waiting.hook_sha256 == sha256);
        Ok(Upload {
            snapshot,
            created,
            compiling,
        })
    }

    fn delete(&self, name: &str) -> Result<Arc<Snapshot>, ChangeError> {
        check_name(name)?;
        let guard = self.lock();
        let current = self.current.load_full();
        let path = current
            .catalog
            .latest(name)
            .and_then(|t| t.source_path.clone())
            .ok_or_else(|| ChangeError::UnknownTemplate(name.to_owned()))?;
        let previous = read_if_exists(&path)?;
        match fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error.into()),
        }
        self.reload_or_restore(&guard, &path, previous)
    }

    /// Reloads after a file change; if the directory no longer compiles, puts `previous`
    /// back (or removes the file) and reloads again so the status is clean.
    fn reload_or_restore(
        &self,
        guard: &MutexGuard<'_, ()>,
        path: &Path,
        previous: Option<Vec<u8>>,
    ) -> Result<Arc<Snapshot>, ChangeError> {
        let cause = rollout::Cause {
            kind: Some("upload"),
            by: "admin".into(),
        };
        match self.reload_locked(guard, &cause) {
            Ok(reloaded) => Ok(reloaded.snapshot().clone()),
            Err(diagnostics) => {
                match previous {
                    Some(bytes) => write_atomically(path, &bytes)?,
                    None => fs::remove_file(path)?,
                }
                // The directory compiled before the change, so this puts back what served
                // and clears the error (it stays if someone broke another file meanwhile).
                let _ = self.reload_locked(guard, &cause);
                Err(ChangeError::Rejected(diagnostics))
            }
        }
    }
}

/// Locks `mutex`. A panic while holding one of the live catalog's locks left no half-built
/// state behind (snapshots are built aside and swapped whole; the retired map holds only
/// weak references), so a poisoned lock is still good.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The catalog revision: `sha256:` and 16 hex digits of the hash of the sorted
/// `name revision` lines.
fn catalog_revision(pairs: &[(&str, &str)]) -> Arc<str> {
    let mut sorted = pairs.to_vec();
    sorted.sort_unstable();
    let mut hasher = Sha256::new();
    for (name, revision) in sorted {
        hasher.update(name.as_bytes());
        hasher.update(b" ");
        hasher.update(revision.as_bytes());
        hasher.update(b"\n");
    }
    let digest = hasher.finalize();
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    Arc::from(format!("sha256:{hex}"))
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Diagnostics as the API reports them.
pub fn diagnostic_bodies(diagnostics: &Diagnostics) -> Vec<DiagnosticBody> {
    diagnostics
        .list
        .iter()
        .map(|d| DiagnosticBody {
            file: d.file.as_ref().map(|f| f.display().to_string()),
            line: d.line,
            column: d.column,
            path: d.path.clone(),
            message: d.message.clone(),
            hint: d.hint.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests;
