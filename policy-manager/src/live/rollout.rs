//! Rollouts: which revision of a template serves new conversations when that is not simply
//! the one its file holds, and the candidate staged beside it.
//!
//! Without any of this, the file decides: a reload serves every template's file revision
//! (`--rollout immediate`, the default). On top of that a template can have
//! - a **pin**: the active revision is another one than the file's — after a rollback, after
//!   promoting an uploaded candidate, and under `--rollout shadow` whenever the file has
//!   changed since it was last activated. Under `immediate` a pin lasts until the file
//!   changes again (the edit then serves, as always); under `shadow` the file's new text
//!   becomes the candidate instead.
//! - a **candidate**: a compiled revision that serves nobody; the engine runs shadow twins
//!   of new conversations on it (`colloquy_server::rollout`), and a **ramp** starts a share
//!   of new conversations on it for real, until promoted, ramped to 0 or stopped by its
//!   gates.
//!
//! Every change is an [`Activation`] in the history, handed to the [`Archive`] (the store's
//! revision archive) as it happens, together with every new revision's source, so that a
//! restart finds the history, the active revisions and the sources of revisions
//! conversations are pinned to ([`LiveCatalog::seed`]).

use std::collections::HashMap;
use std::sync::Arc;

use colloquy_protocol::rollout::Activation;

use super::{LiveCatalog, LoadedSource, Shared, lock, now_ms};
use crate::compiled::CompiledTemplate;

/// What an edited template file does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RolloutMode {
    /// It serves new conversations at once (`--rollout immediate`).
    #[default]
    Immediate,
    /// It becomes the template's candidate; the active revision stays until promoted
    /// (`--rollout shadow`).
    Shadow,
}

/// Where the history and the sources go as they change: the store's revision archive. Called
/// under the catalog's change lock, in order; implementations hand the work to a writer and
/// return.
pub trait Archive: Send + Sync {
    /// A revision was loaded for the first time by this process (a file, an upload, a
    /// candidate).
    fn revision_loaded(&self, name: &str, revision: &str, source: &LoadedSource);
    /// An activation happened.
    fn activated(&self, activation: &Activation);
}

/// A revision the archive kept: the template's name, the revision, its source.
pub type ArchivedSource = (Arc<str>, Arc<str>, LoadedSource);

/// A staged candidate revision.
#[derive(Clone, Debug)]
pub struct Candidate {
    /// The compiled revision.
    pub template: Arc<CompiledTemplate>,
    /// Its YAML.
    pub text: Arc<str>,
    /// When it was staged (milliseconds since the Unix epoch).
    pub staged_at: u64,
    /// `admin` or `watcher`.
    pub staged_by: String,
    /// The share of new conversations given a shadow twin, 0 to 1.
    pub sample: f64,
    /// The canary, once one was asked for.
    pub ramp: Option<Ramp>,
}

impl Candidate {
    /// The share of new conversations started on it for real, in percent (0 once its gates
    /// stopped it).
    pub fn ramp_percent(&self) -> u8 {
        match &self.ramp {
            Some(ramp) if ramp.aborted.is_none() => ramp.percent,
            _ => 0,
        }
    }
}

/// A canary: a share of new conversations started on the candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct Ramp {
    /// The share, 0 to 100.
    pub percent: u8,
    /// When it was set (milliseconds since the Unix epoch).
    pub since: u64,
    /// The gates that stop it.
    pub gates: Vec<Gate>,
    /// The gates as given, for reports.
    pub abort_on: Option<String>,
    /// Conversations each side needs before the gates are judged.
    pub min_conversations: u64,
    /// Why the gates stopped it.
    pub aborted: Option<String>,
}

/// One abort gate: the candidate's rate of `metric` may exceed the active revision's by at
/// most `points` percentage points.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Gate {
    /// What is compared.
    pub metric: GateMetric,
    /// The allowed excess, in percentage points.
    pub points: f64,
}

/// What a gate compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateMetric {
    /// Refused messages per message taken.
    RefusalRate,
    /// Hook failures per message taken.
    HookFailureRate,
}

impl GateMetric {
    /// Its name in `abort_on`.
    pub fn name(self) -> &'static str {
        match self {
            GateMetric::RefusalRate => "refusal_rate",
            GateMetric::HookFailureRate => "hook_failure_rate",
        }
    }
}

/// Reads `refusal_rate:5,hook_failure_rate:2`.
pub fn parse_gates(text: &str) -> Result<Vec<Gate>, String> {
    text.split(',')
        .filter(|part| !part.trim().is_empty())
        .map(|part| {
            let (name, points) = part.split_once(':').ok_or_else(|| {
                format!("`{part}` is not a gate: write NAME:POINTS, e.g. refusal_rate:5")
            })?;
            let metric = match name.trim() {
                "refusal_rate" => GateMetric::RefusalRate,
                "hook_failure_rate" => GateMetric::HookFailureRate,
                other => {
                    return Err(format!(
                        "unknown gate `{other}`: use refusal_rate or hook_failure_rate"
                    ));
                }
            };
            let points: f64 = points
                .trim()
                .parse()
                .ok()
                .filter(|points: &f64| points.is_finite() && *points >= 0.0)
                .ok_or_else(|| {
                    format!("`{points}` in `{part}` is not a number of percentage points")
                })?;
            Ok(Gate { metric, points })
        })
        .collect()
}

/// Why a rollout change was refused.
#[derive(Debug, thiserror::Error)]
pub enum RolloutError {
    /// No current template has this name.
    #[error("no template named `{0}`")]
    UnknownTemplate(String),
    /// The revision named is not the template's staged candidate.
    #[error("`{revision}` is not the staged candidate of `{name}`{}", staged.as_ref().map(|s| format!(" (the candidate is {s})")).unwrap_or_else(|| " (none is staged)".to_owned()))]
    NotTheCandidate {
        /// The template.
        name: String,
        /// The revision asked for.
        revision: String,
        /// The staged candidate, if any.
        staged: Option<String>,
    },
    /// The upload is the revision already active.
    #[error("`{revision}` is already the active revision of `{name}`")]
    AlreadyActive {
        /// The template.
        name: String,
        /// The revision.
        revision: String,
    },
    /// Rollback with nothing to go back to.
    #[error("`{name}` has no previous revision to roll back to{}", reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default())]
    NoPrevious {
        /// The template.
        name: String,
        /// More, when a previous revision exists but cannot serve.
        reason: Option<String>,
    },
    /// The candidate's hook module is still compiling.
    #[error("the hook module of `{0}`'s candidate is compiling; stage it again in a moment")]
    Compiling(String),
    /// A bad argument (a sample or percent out of range, a gate that does not parse).
    #[error("{0}")]
    Invalid(String),
    /// The candidate does not compile, or its hook is refused.
    #[error("{0}")]
    Rejected(crate::compiler::Diagnostics),
}

/// The rollout state of a live catalog (see the module docs). Changed under the catalog's
/// change lock only.
#[derive(Default)]
pub(super) struct Rollout {
    pub(super) mode: RolloutMode,
    pub(super) templates: HashMap<Arc<str>, TemplateRollout>,
    /// Every activation, oldest first.
    pub(super) history: Vec<Activation>,
    /// +1 per change, so a reload that compiles the same files still publishes a change of
    /// the rollout.
    pub(super) version: u64,
    pub(super) archive: Option<Arc<dyn Archive>>,
    /// The active revision of each template after a restart, from the archive's history:
    /// under `shadow` it serves again (the file, if it differs, becomes the candidate).
    pub(super) seeded_active: HashMap<Arc<str>, Arc<str>>,
}

/// One template's rollout state.
#[derive(Default)]
pub(super) struct TemplateRollout {
    /// The active revision when it is not the file's, and the file's revision when it was
    /// pinned (so `immediate` can tell that the file changed since).
    pub(super) pinned: Option<(Arc<CompiledTemplate>, Option<Arc<str>>)>,
    /// The staged candidate.
    pub(super) candidate: Option<Arc<Candidate>>,
    /// The file's revision at the last reload.
    pub(super) file_revision: Option<Arc<str>>,
}

/// What caused a reload, for the history.
#[derive(Clone, Debug)]
pub(super) struct Cause {
    /// The activation's kind; `None` when the caller recorded the change itself (a
    /// promotion, a rollback).
    pub(super) kind: Option<&'static str>,
    pub(super) by: String,
}

impl Rollout {
    pub(super) fn record(&mut self, activation: Activation) {
        tracing::info!(
            template = %activation.template,
            kind = %activation.kind,
            revision = activation.revision.as_deref().unwrap_or("-"),
            previous = activation.previous.as_deref().unwrap_or("-"),
            by = %activation.by,
            "template activation"
        );
        if let Some(archive) = &self.archive {
            archive.activated(&activation);
        }
        self.history.push(activation);
        self.version += 1;
    }

    /// Makes `template` the active revision of `name` (pinned, unless it is the file's) and
    /// records it as `kind` by `by`.
    fn activate(
        &mut self,
        name: &str,
        template: &Arc<CompiledTemplate>,
        previous: &Arc<str>,
        kind: &str,
        by: &str,
    ) -> Activation {
        let state = self.templates.entry(Arc::from(name)).or_default();
        state.pinned = if state.file_revision.as_ref() == Some(&template.revision) {
            None
        } else {
            Some((template.clone(), state.file_revision.clone()))
        };
        let activation = Activation {
            template: Arc::from(name),
            kind: kind.into(),
            revision: Some(template.revision.clone()),
            previous: Some(previous.clone()),
            at: now_ms(),
            by: by.to_owned(),
            detail: None,
        };
        self.record(activation.clone());
        activation
    }

    /// The revision active before the last change of the active revision of `name`: what a
    /// rollback goes back to.
    fn previous_active(&self, name: &str, active: &str) -> Option<Arc<str>> {
        self.history
            .iter()
            .rev()
            .filter(|a| &*a.template == name && changes_active(&a.kind))
            .find(|a| a.revision.as_deref() == Some(active))
            .and_then(|a| a.previous.clone())
    }

    /// Applies the rollout to what a reload compiled: the templates that serve, with pins
    /// applied and edited files staged as candidates under `shadow`; records what changed.
    /// `previous_active` is what served before the reload.
    pub(super) fn apply(
        &mut self,
        files: Vec<Arc<CompiledTemplate>>,
        previous_active: &HashMap<Arc<str>, Arc<str>>,
        cause: &Cause,
        sources: &HashMap<(Arc<str>, Arc<str>), LoadedSource>,
        revision_of: &dyn Fn(&str, &str) -> Option<Arc<CompiledTemplate>>,
    ) -> Vec<Arc<CompiledTemplate>> {
        let mut active = Vec::with_capacity(files.len());
        let now = now_ms();
        let names: Vec<Arc<str>> = files.iter().map(|t| t.name.clone()).collect();
        for file in files {
            let name = file.name.clone();
            let seeded = self.seeded_active.remove(&name);
            // What served before: the previous snapshot's, or at start-up the archive's.
            let before = previous_active
                .get(&name)
                .cloned()
                .or_else(|| seeded.clone());
            let mode = self.mode;
            let state = self.templates.entry(name.clone()).or_default();
            let file_changed = state.file_revision.as_ref() != Some(&file.revision);
            let first_sight = state.file_revision.is_none();
            state.file_revision = Some(file.revision.clone());
            if first_sight
                && mode == RolloutMode::Shadow
                && let Some(seeded) = seeded.as_ref().filter(|seeded| **seeded != file.revision)
                && let Some(kept) = revision_of(&name, seeded)
            {
                state.pinned = Some((kept, None));
            }
            let mut staged = None;
            match (&state.pinned, mode) {
                (Some((_, pinned_file)), RolloutMode::Immediate)
                    if pinned_file.as_ref() != Some(&file.revision) =>
                {
                    state.pinned = None;
                }
                (Some((pinned, pinned_file)), RolloutMode::Shadow)
                    if file_changed && pinned_file.as_ref() != Some(&file.revision) =>
                {
                    if pinned.revision == file.revision {
                        state.pinned = None;
                    } else {
                        let pinned = pinned.clone();
                        state.pinned = Some((pinned, Some(file.revision.clone())));
                        staged = Some(file.clone());
                    }
                }
                (None, RolloutMode::Shadow)
                    if file_changed
                        && let Some(before) = &before
                        && *before != file.revision =>
                {
                    if let Some(serving) = revision_of(&name, before) {
                        state.pinned = Some((serving, Some(file.revision.clone())));
                        staged = Some(file.clone());
                    }
                }
                _ => {}
            }
            let serving = state
                .pinned
                .as_ref()
                .map_or_else(|| file.clone(), |(pinned, _)| pinned.clone());
            active.push(serving.clone());
            // A candidate that now serves anyway (its text written to the file) has nothing
            // left to be compared with.
            if state
                .candidate
                .as_ref()
                .is_some_and(|candidate| candidate.template.revision == serving.revision)
            {
                state.candidate = None;
            }
            if let Some(candidate) = staged {
                let text = sources
                    .get(&(name.clone(), candidate.revision.clone()))
                    .map(|source| source.text.clone())
                    .unwrap_or_default();
                state.candidate = Some(Arc::new(Candidate {
                    template: candidate.clone(),
                    text,
                    staged_at: now,
                    staged_by: cause.by.clone(),
                    sample: 1.0,
                    ramp: None,
                }));
                self.record(Activation {
                    template: name.clone(),
                    kind: "stage".into(),
                    revision: Some(candidate.revision.clone()),
                    previous: before.clone(),
                    at: now,
                    by: cause.by.clone(),
                    detail: Some("the edited file, under --rollout shadow".into()),
                });
            }
            if let Some(kind) = cause.kind
                && before.as_ref() != Some(&serving.revision)
            {
                self.record(Activation {
                    template: name,
                    kind: kind.into(),
                    revision: Some(serving.revision.clone()),
                    previous: before,
                    at: now,
                    by: cause.by.clone(),
                    detail: None,
                });
            }
        }
        for (name, before) in previous_active {
            if !names.contains(name) {
                self.templates.remove(name);
                self.record(Activation {
                    template: name.clone(),
                    kind: "delete".into(),
                    revision: None,
                    previous: Some(before.clone()),
                    at: now,
                    by: cause.by.clone(),
                    detail: None,
                });
            }
        }
        active
    }
}

/// Whether an activation of this kind changes the active revision.
fn changes_active(kind: &str) -> bool {
    matches!(
        kind,
        "reload" | "upload" | "promote" | "rollback" | "follow" | "delete"
    )
}

impl LiveCatalog {
    /// What an edited file does from now on. Set before the first reload.
    ///
    /// # Panics
    /// As [`LiveCatalog::with_check`].
    pub fn with_rollout(mut self, mode: RolloutMode) -> LiveCatalog {
        lock(&self.configure().rollout).mode = mode;
        self
    }

    /// Hands every new revision's source and every activation to `archive` from now on.
    ///
    /// # Panics
    /// As [`LiveCatalog::with_check`].
    pub fn with_archive(mut self, archive: Arc<dyn Archive>) -> LiveCatalog {
        lock(&self.configure().rollout).archive = Some(archive);
        self
    }

    /// Seeds the catalog, before its first reload, with what the archive kept: revision
    /// sources (so conversations pinned to them load, and rollback finds them) and the
    /// history (so rollback and `--rollout shadow` know the active revisions).
    ///
    /// # Panics
    /// As [`LiveCatalog::with_check`].
    pub fn seed(mut self, sources: Vec<ArchivedSource>, history: Vec<Activation>) -> LiveCatalog {
        let shared = self.configure();
        let mut seeded_active = HashMap::new();
        for activation in &history {
            if changes_active(&activation.kind) {
                match &activation.revision {
                    Some(revision) => {
                        seeded_active.insert(activation.template.clone(), revision.clone())
                    }
                    None => seeded_active.remove(&activation.template),
                };
            }
        }
        let mut snapshot = shared.current.load_full().clone_for_change();
        // Still the snapshot before the first load.
        snapshot.generation = 0;
        for (name, revision, source) in sources {
            snapshot.sources.insert((name, revision), source);
        }
        shared.current.store(Arc::new(snapshot));
        let rollout = shared
            .rollout
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        rollout.history = history;
        rollout.seeded_active = seeded_active;
        self
    }

    /// What an edited file does.
    pub fn rollout_mode(&self) -> RolloutMode {
        lock(&self.shared.rollout).mode
    }

    /// Whether `name` has a staged candidate: asked for every commit, so lock-free and
    /// without touching a reference count.
    pub fn has_candidate(&self, name: &str) -> bool {
        let snapshot = self.shared.current.load();
        !snapshot.candidates.is_empty() && snapshot.candidates.contains_key(name)
    }

    /// The staged candidate of `name`.
    pub fn candidate(&self, name: &str) -> Option<Arc<Candidate>> {
        self.shared.current.load().candidates.get(name).cloned()
    }

    /// The history of `name` (every template when `None`), oldest first.
    pub fn history(&self, name: Option<&str>) -> Vec<Activation> {
        lock(&self.shared.rollout)
            .history
            .iter()
            .filter(|a| name.is_none_or(|name| &*a.template == name))
            .cloned()
            .collect()
    }

    /// Stages `yaml` as the candidate of template `name`, replacing any candidate it had;
    /// `sample` is the share of new conversations given a shadow twin. Blocking.
    pub fn stage(
        &self,
        name: &str,
        yaml: &str,
        sample: f64,
        by: &str,
    ) -> Result<Arc<Candidate>, RolloutError> {
        if !(0.0..=1.0).contains(&sample) {
            return Err(RolloutError::Invalid(format!(
                "sample {sample} is not a share between 0 and 1"
            )));
        }
        self.shared.stage(name, yaml, sample, by)
    }

    /// Compiles `yaml` as a revision of template `name` without staging it (a replay's
    /// candidate), its hook module read from the template directory. Blocking.
    pub fn compile_candidate(
        &self,
        name: &str,
        yaml: &str,
    ) -> Result<CompiledTemplate, RolloutError> {
        self.shared.compile_candidate(name, yaml)
    }

    /// Makes the candidate `revision` of `name` the active revision. Blocking.
    pub fn promote(
        &self,
        name: &str,
        revision: &str,
        by: &str,
    ) -> Result<Activation, RolloutError> {
        self.shared.promote(name, revision, by)
    }

    /// Makes the previous active revision of `name` active again. Blocking.
    pub fn rollback(&self, name: &str, by: &str) -> Result<Activation, RolloutError> {
        self.shared.rollback(name, by)
    }

    /// Starts `percent` of new conversations of `name` on its candidate `revision`, stopped
    /// by `gates` once each side has `min_conversations`. Blocking.
    pub fn ramp(
        &self,
        name: &str,
        revision: &str,
        percent: u8,
        abort_on: Option<&str>,
        min_conversations: u64,
        by: &str,
    ) -> Result<Activation, RolloutError> {
        if percent > 100 {
            return Err(RolloutError::Invalid(format!(
                "percent {percent} is over 100"
            )));
        }
        let gates = parse_gates(abort_on.unwrap_or_default()).map_err(RolloutError::Invalid)?;
        let ramp = Ramp {
            percent,
            since: now_ms(),
            gates,
            abort_on: abort_on.map(str::to_owned).filter(|text| !text.is_empty()),
            min_conversations,
            aborted: None,
        };
        self.shared.set_ramp(name, revision, ramp, by, "ramp")
    }

    /// Stops the ramp of candidate `revision` of `name`, saying why (its gates tripped).
    /// Blocking.
    pub fn abort_ramp(
        &self,
        name: &str,
        revision: &str,
        reason: &str,
    ) -> Result<Activation, RolloutError> {
        let candidate = self
            .candidate(name)
            .filter(|candidate| *candidate.template.revision == *revision)
            .ok_or_else(|| self.shared.not_the_candidate(name, revision))?;
        let mut ramp = candidate
            .ramp
            .clone()
            .ok_or_else(|| RolloutError::Invalid(format!("`{name}` has no ramp to stop")))?;
        ramp.aborted = Some(reason.to_owned());
        self.shared
            .set_ramp(name, revision, ramp, "canary gate", "abort")
    }
}

impl Shared {
    fn not_the_candidate(&self, name: &str, revision: &str) -> RolloutError {
        RolloutError::NotTheCandidate {
            name: name.to_owned(),
            revision: revision.to_owned(),
            staged: self
                .current
                .load()
                .candidates
                .get(name)
                .map(|c| c.template.revision.to_string()),
        }
    }

    fn stage(
        &self,
        name: &str,
        yaml: &str,
        sample: f64,
        by: &str,
    ) -> Result<Arc<Candidate>, RolloutError> {
        let guard = self.lock();
        let snapshot = self.current.load_full();
        let active = snapshot
            .catalog
            .latest(name)
            .ok_or_else(|| RolloutError::UnknownTemplate(name.to_owned()))?;
        let compiled = self.compile_candidate(name, yaml)?;
        let path = compiled.source_path.clone();
        if compiled.revision == active.revision {
            return Err(RolloutError::AlreadyActive {
                name: name.to_owned(),
                revision: active.revision.to_string(),
            });
        }
        // A revision known already (an older one, the same candidate again) keeps its `Arc`.
        let template = match self.revision(name, &compiled.revision) {
            Some(known) => known,
            None => {
                if let Some(check) = &self.check {
                    match check(&compiled, &self.listener()) {
                        super::Checked::Ready => {}
                        super::Checked::Compiling => {
                            return Err(RolloutError::Compiling(name.to_owned()));
                        }
                        super::Checked::Refused(message) => {
                            return Err(RolloutError::Rejected(crate::Diagnostics::from(vec![
                                crate::Diagnostic {
                                    file: path,
                                    line: None,
                                    column: None,
                                    path: "spec.hooks.module".to_owned(),
                                    message,
                                    hint: None,
                                },
                            ])));
                        }
                    }
                }
                Arc::new(compiled)
            }
        };
        let candidate = Arc::new(Candidate {
            template: template.clone(),
            text: Arc::from(yaml),
            staged_at: now_ms(),
            staged_by: by.to_owned(),
            sample,
            ramp: None,
        });
        {
            let mut rollout = lock(&self.rollout);
            rollout
                .templates
                .entry(Arc::from(name))
                .or_default()
                .candidate = Some(candidate.clone());
            rollout.record(Activation {
                template: Arc::from(name),
                kind: "stage".into(),
                revision: Some(template.revision.clone()),
                previous: Some(active.revision.clone()),
                at: candidate.staged_at,
                by: by.to_owned(),
                detail: Some(format!("shadow sample {sample}")),
            });
        }
        self.keep_source(name, &template, yaml);
        self.republish(&guard);
        Ok(candidate)
    }

    /// Compiles `yaml` as a revision of template `name`, its hook module read from the
    /// template directory as the template's own file would be.
    pub(super) fn compile_candidate(
        &self,
        name: &str,
        yaml: &str,
    ) -> Result<CompiledTemplate, RolloutError> {
        let path = self
            .current
            .load()
            .catalog
            .latest(name)
            .and_then(|active| active.source_path.clone())
            .unwrap_or_else(|| self.dir.join(format!("{name}.yaml")));
        let compiled = self
            .compiler
            .compile_str(yaml, Some(&path))
            .map_err(RolloutError::Rejected)?;
        if *compiled.name != *name {
            return Err(RolloutError::Invalid(format!(
                "the candidate is for `{name}` but its metadata.name is `{}`",
                compiled.name
            )));
        }
        Ok(compiled)
    }

    /// Keeps a candidate's source beside the revisions' (so a conversation ramped onto it
    /// loads after it is gone) and archives it.
    fn keep_source(&self, name: &str, template: &Arc<CompiledTemplate>, yaml: &str) {
        let key = (Arc::from(name), template.revision.clone());
        let snapshot = self.current.load_full();
        if snapshot.sources.contains_key(&key) {
            return;
        }
        let source = LoadedSource {
            text: Arc::from(yaml),
            loaded_at: now_ms(),
            path: template.source_path.clone(),
            hook_module: template.hook_module.clone(),
        };
        if let Some(archive) = &lock(&self.rollout).archive {
            archive.revision_loaded(name, &template.revision, &source);
        }
        let mut next = snapshot.clone_for_change();
        next.sources.insert(key, source);
        self.current.store(Arc::new(next));
    }

    fn promote(&self, name: &str, revision: &str, by: &str) -> Result<Activation, RolloutError> {
        let guard = self.lock();
        let snapshot = self.current.load_full();
        let active = snapshot
            .catalog
            .latest(name)
            .ok_or_else(|| RolloutError::UnknownTemplate(name.to_owned()))?;
        let activation = {
            let mut rollout = lock(&self.rollout);
            let state = rollout.templates.entry(Arc::from(name)).or_default();
            let candidate = state
                .candidate
                .clone()
                .filter(|c| *c.template.revision == *revision)
                .ok_or_else(|| self.not_the_candidate(name, revision))?;
            state.candidate = None;
            rollout.activate(name, &candidate.template, &active.revision, "promote", by)
        };
        self.republish(&guard);
        Ok(activation)
    }

    fn rollback(&self, name: &str, by: &str) -> Result<Activation, RolloutError> {
        let guard = self.lock();
        let snapshot = self.current.load_full();
        let active = snapshot
            .catalog
            .latest(name)
            .ok_or_else(|| RolloutError::UnknownTemplate(name.to_owned()))?;
        let previous = lock(&self.rollout)
            .previous_active(name, &active.revision)
            .ok_or_else(|| RolloutError::NoPrevious {
                name: name.to_owned(),
                reason: None,
            })?;
        let back = self
            .revision(name, &previous)
            .ok_or_else(|| RolloutError::NoPrevious {
                name: name.to_owned(),
                reason: Some(format!(
                    "its source, {previous}, is no longer kept (run with a durable store to archive every revision)"
                )),
            })?;
        let activation =
            lock(&self.rollout).activate(name, &back, &active.revision, "rollback", by);
        self.republish(&guard);
        Ok(activation)
    }

    fn set_ramp(
        &self,
        name: &str,
        revision: &str,
        ramp: Ramp,
        by: &str,
        kind: &str,
    ) -> Result<Activation, RolloutError> {
        let guard = self.lock();
        let activation = {
            let mut rollout = lock(&self.rollout);
            let state = rollout
                .templates
                .get_mut(name)
                .ok_or_else(|| RolloutError::UnknownTemplate(name.to_owned()))?;
            let candidate = state
                .candidate
                .clone()
                .filter(|c| *c.template.revision == *revision)
                .ok_or_else(|| self.not_the_candidate(name, revision))?;
            let detail = match &ramp.aborted {
                Some(reason) => reason.clone(),
                None => format!(
                    "{}% of new conversations{}",
                    ramp.percent,
                    ramp.abort_on
                        .as_ref()
                        .map(|gates| format!(
                            ", abort on {gates} from {} conversations",
                            ramp.min_conversations
                        ))
                        .unwrap_or_default()
                ),
            };
            state.candidate = Some(Arc::new(Candidate {
                ramp: Some(ramp),
                ..(*candidate).clone()
            }));
            let activation = Activation {
                template: Arc::from(name),
                kind: kind.into(),
                revision: Some(candidate.template.revision.clone()),
                previous: self
                    .current
                    .load()
                    .catalog
                    .latest(name)
                    .map(|t| t.revision.clone()),
                at: now_ms(),
                by: by.to_owned(),
                detail: Some(detail),
            };
            rollout.record(activation.clone());
            activation
        };
        self.republish(&guard);
        Ok(activation)
    }

    /// Rebuilds the snapshot after a rollout change (the files compile as before; the
    /// outcome of a failing directory is reported as any reload's).
    fn republish(&self, guard: &std::sync::MutexGuard<'_, ()>) {
        let _ = self.reload_locked(
            guard,
            &Cause {
                kind: None,
                by: "admin".into(),
            },
        );
    }
}

#[cfg(test)]
mod tests;
