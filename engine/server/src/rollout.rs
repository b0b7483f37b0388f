//! The engine's side of rollouts (`colloquy_policy::live::rollout` keeps the state):
//! **shadow twins** of new conversations on a template's candidate revision, and the
//! **tallies** that judge a canary's abort gates.
//!
//! Both follow live conversations through the commits the store acknowledged
//! ([`CommitObserver`]): nothing here runs before or inside a live step. A commit of a template
//! with no candidate costs one map lookup. For the others, the tallies are counted on the spot
//! (a few additions), and the commit's events are queued for the shadow worker, a thread of
//! its own at the lowest scheduling priority ([`shadow`]): the queue is bounded, and a full one
//! drops the step (counted) rather than wait, so shadow work can never slow or fail live
//! traffic. A twin runs in memory on the candidate with no effects at all — nothing stored,
//! delivered, pushed or sent — and is compared step by step with its live conversation, as a
//! replay is ([`colloquy_sandbox::replay::Twin`]).
//!
//! A twin lives in this node's memory, so shadowing needs one node to see all of a
//! conversation: on a store shared by several nodes it is off, and the report says so.

pub mod archive;
pub mod replay;
pub mod routes;
pub mod shadow;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use colloquy_core::metrics::CommitObserver;
use colloquy_policy::LiveCatalog;
use colloquy_policy::live::rollout::{Candidate, GateMetric};
use colloquy_protocol::conversation::ViolationKind;
use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::message::ENGINE_PARTY;
use colloquy_protocol::rollout::{CandidateReport, RampReport, RevisionTally, ShadowReport};

pub use shadow::ShadowSettings;

/// The rollouts of one engine: its live catalog's candidates, their twins and tallies.
pub struct Rollouts {
    live: Arc<LiveCatalog>,
    shadow: shadow::Shadow,
    tallies: Mutex<HashMap<Arc<str>, RampTally>>,
}

/// What conversations did during one template's ramp, per side.
#[derive(Default)]
struct RampTally {
    /// The ramp this tally is of (its start time): a new ramp starts a new tally.
    since: u64,
    /// The conversations started during the ramp, and whether each is on the candidate.
    members: HashMap<Arc<str>, bool>,
    candidate: RevisionTally,
    active: RevisionTally,
    /// The gates already stopped this ramp.
    tripped: bool,
}

impl Rollouts {
    /// Rollouts of `live`; `settings` say how shadow work is bounded and whether it runs.
    pub fn new(live: Arc<LiveCatalog>, settings: ShadowSettings) -> Arc<Rollouts> {
        Arc::new(Rollouts {
            shadow: shadow::Shadow::start(live.clone(), settings),
            live,
            tallies: Mutex::new(HashMap::new()),
        })
    }

    /// The live catalog.
    pub fn live(&self) -> &Arc<LiveCatalog> {
        &self.live
    }

    /// The report of `candidate` of `name`.
    pub fn report(&self, name: &str, candidate: &Candidate) -> CandidateReport {
        let ramp = candidate.ramp.as_ref().map(|ramp| {
            let tallies = lock(&self.tallies);
            let tally = tallies.get(name).filter(|tally| tally.since == ramp.since);
            RampReport {
                percent: ramp.percent,
                since: ramp.since,
                abort_on: ramp.abort_on.clone(),
                min_conversations: ramp.min_conversations,
                candidate: tally.map(|t| t.candidate.clone()).unwrap_or_default(),
                active: tally.map(|t| t.active.clone()).unwrap_or_default(),
                aborted: ramp.aborted.clone(),
            }
        });
        candidate_report(
            candidate,
            self.shadow.report(name, &candidate.template.revision),
            ramp,
        )
    }

    /// Every candidate's shadow counts, for `/metrics`: (template, candidate revision, report).
    pub fn shadow_reports(&self) -> Vec<(String, String, ShadowReport)> {
        let snapshot = self.live.snapshot();
        let mut reports: Vec<_> = snapshot
            .candidates
            .iter()
            .map(|(name, candidate)| {
                (
                    name.to_string(),
                    candidate.template.revision.to_string(),
                    self.shadow.report(name, &candidate.template.revision),
                )
            })
            .collect();
        reports.sort_by(|a, b| a.0.cmp(&b.0));
        reports
    }

    /// Counts a commit towards the ramp of `candidate`, and stops the ramp when a gate trips.
    fn tally(
        &self,
        template: &Arc<str>,
        id: &Arc<str>,
        events: &[ConversationEvent],
        candidate: &Candidate,
    ) {
        let Some(ramp) = candidate
            .ramp
            .as_ref()
            .filter(|ramp| ramp.aborted.is_none())
        else {
            return;
        };
        let mut tallies = lock(&self.tallies);
        let tally = tallies.entry(template.clone()).or_default();
        if tally.since != ramp.since {
            *tally = RampTally {
                since: ramp.since,
                ..RampTally::default()
            };
        }
        let mut ended = false;
        for event in events {
            if let EventKind::Started(started) = &event.kind {
                let on_candidate = started.revision == candidate.template.revision;
                tally.members.insert(id.clone(), on_candidate);
                side(tally, on_candidate).conversations += 1;
                continue;
            }
            let Some(&on_candidate) = tally.members.get(id) else {
                continue;
            };
            let counts = side(tally, on_candidate);
            match &event.kind {
                EventKind::MessageAccepted { message, .. } if &*message.sender != ENGINE_PARTY => {
                    counts.messages += 1;
                }
                EventKind::MessageRefused(_) => {
                    counts.messages += 1;
                    counts.refused += 1;
                }
                EventKind::ViolationRecorded(violation)
                    if violation.kind == ViolationKind::HookError =>
                {
                    counts.hook_failures += 1;
                }
                EventKind::Completed { .. } => ended = true,
                _ => {}
            }
        }
        if ended {
            // Its counts stay; no message of it comes any more.
            tally.members.remove(id);
        }
        if tally.tripped {
            return;
        }
        let Some(reason) = tripped(tally, ramp) else {
            return;
        };
        tally.tripped = true;
        drop(tallies);
        let (live, name, revision) = (
            self.live.clone(),
            template.to_string(),
            candidate.template.revision.to_string(),
        );
        // A catalog change blocks (it rebuilds the snapshot): off the committing task.
        std::thread::spawn(move || {
            if let Err(error) = live.abort_ramp(&name, &revision, &reason) {
                tracing::warn!(%name, %revision, %error, "could not stop the ramp its gates tripped");
            }
        });
    }
}

fn side(tally: &mut RampTally, on_candidate: bool) -> &mut RevisionTally {
    if on_candidate {
        &mut tally.candidate
    } else {
        &mut tally.active
    }
}

/// Why the gates stop the ramp, once each side has its minimum of conversations.
fn tripped(tally: &RampTally, ramp: &colloquy_policy::live::rollout::Ramp) -> Option<String> {
    if tally.candidate.conversations < ramp.min_conversations
        || tally.active.conversations < ramp.min_conversations
    {
        return None;
    }
    let rate = |tally: &RevisionTally, metric: GateMetric| {
        let count = match metric {
            GateMetric::RefusalRate => tally.refused,
            GateMetric::HookFailureRate => tally.hook_failures,
        };
        if tally.messages == 0 {
            0.0
        } else {
            100.0 * count as f64 / tally.messages as f64
        }
    };
    ramp.gates.iter().find_map(|gate| {
        let candidate = rate(&tally.candidate, gate.metric);
        let active = rate(&tally.active, gate.metric);
        (candidate - active > gate.points).then(|| {
            format!(
                "{} {candidate:.1}% on the candidate against {active:.1}% on the active revision \
                 ({} and {} conversations): more than {} points above",
                gate.metric.name(),
                tally.candidate.conversations,
                tally.active.conversations,
                gate.points
            )
        })
    })
}

impl CommitObserver for Rollouts {
    fn watches(&self, template: &str, conversation_id: &str) -> bool {
        // Most commits: no candidate, one lock-free lookup.
        if !self.live.has_candidate(template) {
            return false;
        }
        self.live.candidate(template).is_some_and(|candidate| {
            candidate.ramp_percent() > 0 || shadow::sampled(conversation_id, candidate.sample)
        })
    }

    fn committed(&self, template: &Arc<str>, id: &Arc<str>, events: Vec<ConversationEvent>) {
        let Some(candidate) = self.live.candidate(template) else {
            return;
        };
        self.tally(template, id, &events, &candidate);
        // Conversations outside the sample never reach the shadow worker.
        if shadow::sampled(id, candidate.sample) {
            self.shadow.offer(template, id, events, &candidate);
        }
    }

    fn render_metrics(&self, out: &mut String) {
        use std::fmt::Write as _;
        let reports = self.shadow_reports();
        let families: [Family; 4] = [
            (
                "colloquy_shadow_conversations_total",
                "Live conversations given a shadow twin on the template's candidate.",
                |r| r.shadowed,
            ),
            (
                "colloquy_shadow_same_total",
                "Shadow twins whose live conversation ended with no divergence.",
                |r| r.same,
            ),
            (
                "colloquy_shadow_diverged_total",
                "Shadow twins that diverged from their live conversation.",
                |r| r.diverged,
            ),
            (
                "colloquy_shadow_dropped_total",
                "Live steps not shadowed because the shadow queue or the twin limit was full.",
                |r| r.dropped,
            ),
        ];
        for (name, help, value) in families {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (template, candidate, report) in &reports {
                let _ = writeln!(
                    out,
                    "{name}{{template=\"{template}\",candidate=\"{candidate}\"}} {}",
                    value(report)
                );
            }
        }
        let name = "colloquy_shadow_divergences_total";
        let _ = writeln!(
            out,
            "# HELP {name} Shadow divergences by kind.\n# TYPE {name} counter"
        );
        for (template, candidate, report) in &reports {
            for (kind, count) in &report.by_kind {
                let _ = writeln!(
                    out,
                    "{name}{{template=\"{template}\",candidate=\"{candidate}\",kind=\"{kind}\"}} {count}"
                );
            }
        }
    }
}

/// A counter family of the shadow reports: name, help, the figure.
type Family = (&'static str, &'static str, fn(&ShadowReport) -> u64);

/// Locks `mutex`; a panic while holding it leaves counts, never a broken structure.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Rollouts {
    /// The report of a candidate where no engine shadows it (the standalone policy manager):
    /// its staging, no twins and no ramp tallies.
    pub fn report_without_shadow(candidate: &Candidate) -> CandidateReport {
        let shadow = ShadowReport {
            active: false,
            reason: Some("no engine runs here: candidates are shadowed by the engines".into()),
            ..ShadowReport::default()
        };
        candidate_report(candidate, shadow, None)
    }
}

/// A candidate's report: its staging, and what its shadow and its ramp found.
fn candidate_report(
    candidate: &Candidate,
    shadow: ShadowReport,
    ramp: Option<RampReport>,
) -> CandidateReport {
    CandidateReport {
        revision: candidate.template.revision.to_string(),
        staged_at: candidate.staged_at,
        staged_by: candidate.staged_by.clone(),
        sample: candidate.sample,
        shadow,
        ramp,
        source: candidate.text.to_string(),
    }
}
