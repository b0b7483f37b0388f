//! Shadow twins: each sampled new conversation of a template with a candidate gets a twin on
//! the candidate, driven with the live conversation's inputs after each live step is
//! acknowledged, and compared with it step by step. Its first divergence is kept.
//!
//! The bounds (see the parent module for why): a queue of [`ShadowSettings::queue`] steps,
//! dropped and counted when full; one worker thread at `SCHED_IDLE`, so live work on the same
//! core always goes first; at most [`ShadowSettings::max_twins`] twins at once, each freed when
//! its live conversation ends or after [`ShadowSettings::ttl`] without a step.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use colloquy_core::clock::ManualClock;
use colloquy_core::hooks::HookCaller;
use colloquy_policy::live::rollout::Candidate;
use colloquy_policy::{CompiledTemplate, LiveCatalog};
use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::rollout::{SampleDivergence, ShadowReport};
use colloquy_sandbox::replay::{Divergence, DivergenceKind, Twin};

use super::lock;

/// Most sample divergences a candidate's report keeps.
pub const MAX_SAMPLES: usize = 20;

/// How shadow work is bounded.
#[derive(Clone, Debug)]
pub struct ShadowSettings {
    /// Why twins do not run here (several engine nodes share the store), if they do not.
    pub off: Option<String>,
    /// Live steps waiting for the worker at most.
    pub queue: usize,
    /// Twins alive at once at most; new conversations past it are not shadowed (counted as
    /// dropped).
    pub max_twins: usize,
    /// A twin whose live conversation has not moved for this long is freed.
    pub ttl: Duration,
}

impl Default for ShadowSettings {
    fn default() -> ShadowSettings {
        ShadowSettings {
            off: None,
            queue: 10_000,
            max_twins: 10_000,
            ttl: Duration::from_secs(600),
        }
    }
}

/// One live step for the worker.
struct Step {
    template: Arc<str>,
    conversation_id: Arc<str>,
    candidate: Arc<CompiledTemplate>,
    events: Vec<ConversationEvent>,
}

/// The shadow side of [`super::Rollouts`].
pub(super) struct Shadow {
    settings: ShadowSettings,
    queue: Option<SyncSender<Step>>,
    state: Arc<Mutex<State>>,
}

/// What the twins found, per (template, candidate revision), and the conversations whose twin
/// missed a step.
#[derive(Default)]
struct State {
    reports: HashMap<(Arc<str>, Arc<str>), ShadowReport>,
    lost: HashSet<Arc<str>>,
}

impl Shadow {
    pub(super) fn start(live: Arc<LiveCatalog>, settings: ShadowSettings) -> Shadow {
        let state = Arc::new(Mutex::new(State::default()));
        let queue = if settings.off.is_none() {
            let (sender, receiver) = std::sync::mpsc::sync_channel(settings.queue);
            let worker = Worker {
                live,
                state: state.clone(),
                settings: settings.clone(),
                twins: HashMap::new(),
                clock: Arc::new(ManualClock::new(0)),
                hooks: None,
                last_expiry: Instant::now(),
            };
            match std::thread::Builder::new()
                .name("colloquy-shadow".into())
                .spawn(move || worker.run(receiver))
            {
                Ok(_) => Some(sender),
                Err(error) => {
                    tracing::error!(%error, "cannot start the shadow worker; candidates are not shadowed");
                    None
                }
            }
        } else {
            None
        };
        Shadow {
            settings,
            queue,
            state,
        }
    }

    /// Queues a live step of a template with `candidate`, or counts it dropped.
    pub(super) fn offer(
        &self,
        template: &Arc<str>,
        id: &Arc<str>,
        events: Vec<ConversationEvent>,
        candidate: &Candidate,
    ) {
        let Some(queue) = &self.queue else { return };
        let step = Step {
            template: template.clone(),
            conversation_id: id.clone(),
            candidate: candidate.template.clone(),
            events,
        };
        match queue.try_send(step) {
            Ok(()) => {}
            Err(TrySendError::Full(step) | TrySendError::Disconnected(step)) => {
                let mut state = lock(&self.state);
                report_of(&mut state, &step.template, &step.candidate.revision).dropped += 1;
                state.lost.insert(step.conversation_id);
            }
        }
    }

    pub(super) fn report(&self, name: &str, revision: &str) -> ShadowReport {
        let mut report = lock(&self.state)
            .reports
            .get(&(Arc::from(name), Arc::from(revision)))
            .cloned()
            .unwrap_or_default();
        report.active = self.queue.is_some();
        report.reason = match (&self.settings.off, &self.queue) {
            (Some(off), _) => Some(off.clone()),
            (None, None) => Some("the shadow worker could not start".into()),
            (None, Some(_)) => None,
        };
        report
    }
}

fn report_of<'s>(
    state: &'s mut State,
    template: &Arc<str>,
    revision: &Arc<str>,
) -> &'s mut ShadowReport {
    state
        .reports
        .entry((template.clone(), revision.clone()))
        .or_insert_with(|| ShadowReport {
            by_kind: BTreeMap::new(),
            ..ShadowReport::default()
        })
}

/// A twin and what it shadows.
struct Shadowed {
    twin: Twin,
    template: Arc<str>,
    candidate: Arc<CompiledTemplate>,
    last_step: Instant,
}

/// The worker thread's state.
struct Worker {
    live: Arc<LiveCatalog>,
    state: Arc<Mutex<State>>,
    settings: ShadowSettings,
    twins: HashMap<Arc<str>, Shadowed>,
    /// One clock for every twin: the worker sets it to a twin's own time before each of its
    /// steps (twins run one at a time).
    clock: Arc<ManualClock>,
    /// A hook runtime on that clock, made when a candidate first needs one.
    hooks: Option<Arc<dyn HookCaller>>,
    /// When twins were last looked over for expiry.
    last_expiry: Instant,
}

impl Worker {
    fn run(mut self, steps: Receiver<Step>) {
        lower_priority();
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
        {
            Ok(runtime) => runtime,
            Err(error) => {
                tracing::error!(%error, "the shadow worker cannot run");
                return;
            }
        };
        loop {
            match steps.recv_timeout(Duration::from_secs(1)) {
                Ok(step) => runtime.block_on(self.take(step)),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return,
            }
            // Once a second: looking every twin over costs as many lookups as there are.
            if self.last_expiry.elapsed() >= Duration::from_secs(1) {
                self.expire();
                self.last_expiry = Instant::now();
            }
        }
    }

    async fn take(&mut self, step: Step) {
        let id = step.conversation_id.clone();
        if lock(&self.state).lost.remove(&id) {
            // A step of it was dropped: its twin cannot be compared any more.
            self.twins.remove(&id);
            return;
        }
        let starts = matches!(
            step.events.first().map(|e| &e.kind),
            Some(EventKind::Started(_))
        );
        if starts {
            self.begin(step).await;
            return;
        }
        let Some(shadowed) = self.twins.get_mut(&id) else {
            return;
        };
        if shadowed.candidate.revision != step.candidate.revision {
            // The candidate was replaced or promoted: this twin answers for nobody now.
            self.twins.remove(&id);
            return;
        }
        shadowed.last_step = Instant::now();
        shadowed.twin.follow(&step.events).await;
        let diverged = shadowed.twin.divergence().is_some();
        if diverged || shadowed.twin.ended() {
            if !diverged {
                shadowed.twin.finish().await;
            }
            if let Some(shadowed) = self.twins.remove(&id) {
                self.conclude(&id, &shadowed);
            }
        }
    }

    /// A new live conversation: sampled, it gets a twin.
    async fn begin(&mut self, step: Step) {
        let Some(EventKind::Started(started)) = step.events.first().map(|e| &e.kind) else {
            return;
        };
        // A conversation a ramp started on the candidate itself has nothing to be compared
        // with. (Conversations outside the sample never get here: `Rollouts` offers only
        // sampled ones.)
        if started.revision == step.candidate.revision {
            return;
        }
        if self.twins.len() >= self.settings.max_twins {
            let mut state = lock(&self.state);
            report_of(&mut state, &step.template, &step.candidate.revision).dropped += 1;
            return;
        }
        let hooks = match self.hooks_for(&step.candidate) {
            Ok(hooks) => hooks,
            Err(error) => {
                tracing::warn!(%error, "no hook runtime for shadow twins");
                return;
            }
        };
        let twin = match Twin::start(&step.events, &step.candidate, &self.clock, hooks).await {
            Ok(twin) => twin,
            Err(error) => {
                tracing::warn!(conversation = %step.conversation_id, %error, "cannot shadow");
                return;
            }
        };
        {
            let mut state = lock(&self.state);
            report_of(&mut state, &step.template, &step.candidate.revision).shadowed += 1;
        }
        let shadowed = Shadowed {
            twin,
            template: step.template,
            candidate: step.candidate,
            last_step: Instant::now(),
        };
        if shadowed.twin.divergence().is_some() || shadowed.twin.ended() {
            let mut shadowed = shadowed;
            if shadowed.twin.divergence().is_none() {
                shadowed.twin.finish().await;
            }
            self.conclude(&step.conversation_id, &shadowed);
        } else {
            self.twins.insert(step.conversation_id, shadowed);
        }
    }

    fn hooks_for(
        &mut self,
        candidate: &CompiledTemplate,
    ) -> Result<Option<Arc<dyn HookCaller>>, colloquy_hooks::RuntimeError> {
        if candidate.hook_module.is_none() {
            return Ok(None);
        }
        if self.hooks.is_none() {
            self.hooks = colloquy_sandbox::sandbox::hooks_on(&self.clock, true)?;
        }
        Ok(self.hooks.clone())
    }

    /// Counts a twin's verdict.
    fn conclude(&self, id: &Arc<str>, shadowed: &Shadowed) {
        let mut state = lock(&self.state);
        let report = report_of(&mut state, &shadowed.template, &shadowed.candidate.revision);
        match shadowed.twin.divergence() {
            None => report.same += 1,
            Some(divergence) => {
                report.diverged += 1;
                *report
                    .by_kind
                    .entry(divergence.kind.name().to_owned())
                    .or_insert(0) += 1;
                if report.samples.len() < MAX_SAMPLES {
                    report.samples.push(sample(id, divergence));
                }
            }
        }
    }

    /// Frees twins whose live conversation has not moved within the TTL, and those of
    /// candidates no longer staged.
    fn expire(&mut self) {
        let ttl = self.settings.ttl;
        let live = self.live.clone();
        self.twins.retain(|_, shadowed| {
            shadowed.last_step.elapsed() < ttl
                && live
                    .candidate(&shadowed.template)
                    .is_some_and(|c| c.template.revision == shadowed.candidate.revision)
        });
        // A conversation that lost a step but has no twin (its start was dropped, or its
        // twin ended) needs no mark.
        let twins = &self.twins;
        lock(&self.state).lost.retain(|id| twins.contains_key(id));
    }
}

/// Whether conversation `id` is in the sample: a hash of its id, so the choice is stable.
pub(super) fn sampled(id: &str, sample: f64) -> bool {
    if sample >= 1.0 {
        return true;
    }
    // FNV-1a: stable across runs and builds (never `RandomState`).
    let hash = id.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash % 10_000) as f64 / 10_000.0 < sample
}

fn sample(id: &str, divergence: &Divergence) -> SampleDivergence {
    SampleDivergence {
        conversation_id: id.to_owned(),
        step: divergence.step,
        input: divergence.input.clone(),
        kind: divergence.kind.name().to_owned(),
        detail: match &divergence.kind {
            DivergenceKind::Refused(code) | DivergenceKind::HookFailure(code) => Some(code.clone()),
            _ => None,
        },
        differences: serde_json::to_value(&divergence.differences).unwrap_or_default(),
    }
}

/// Puts the calling thread at `SCHED_IDLE`: it runs only when no other thread wants the
/// core, so live work on the same core always goes first.
#[allow(unsafe_code)]
fn lower_priority() {
    // SAFETY: `sched_setscheduler` with pid 0 changes the calling thread only; the param
    // struct is fully initialised (priority 0, the only one `SCHED_IDLE` takes).
    let result = unsafe {
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_IDLE, &param)
    };
    if result != 0 {
        tracing::warn!(
            error = %std::io::Error::last_os_error(),
            "the shadow worker could not lower its priority to SCHED_IDLE"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_is_stable_and_near_its_share() {
        let ids: Vec<String> = (0..10_000).map(|i| format!("conv-{i}")).collect();
        let taken = ids.iter().filter(|id| sampled(id, 0.1)).count();
        assert!((800..1200).contains(&taken), "{taken} of 10000 at 0.1");
        assert!(ids.iter().all(|id| sampled(id, 1.0)));
        assert!(!ids.iter().any(|id| sampled(id, 0.0)));
        assert_eq!(
            ids.iter().filter(|id| sampled(id, 0.1)).count(),
            taken,
            "the same ids every time"
        );
    }
}
