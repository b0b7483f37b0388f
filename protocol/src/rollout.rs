//! Bodies of the rollout API: a template's candidate revision (staged, shadowed, ramped),
//! promotion and rollback, and the history of which revision served when
//! (`/v1/templates/{name}/candidates…`, `/rollback`, `/history`).

use serde::{Deserialize, Serialize};

/// One change of which revision of a template serves new conversations, or of its
/// candidate, in the order they happened. The history keeps them all (in the store's
/// revision archive when the engine has a durable store).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activation {
    /// The template.
    pub template: std::sync::Arc<str>,
    /// What happened: `reload` (a watched file changed), `upload` (`PUT
    /// /v1/templates/{name}`), `delete`, `stage` (a candidate staged), `promote`, `rollback`,
    /// `ramp` (a share of new conversations moved onto the candidate), `abort` (a ramp
    /// stopped by its gates), `follow` (a remote policy manager's change).
    pub kind: String,
    /// The revision active after it (for `stage`, `ramp` and `abort`: the candidate's); none
    /// once the template is deleted.
    pub revision: Option<std::sync::Arc<str>>,
    /// The revision active before it.
    pub previous: Option<std::sync::Arc<str>>,
    /// When (milliseconds since the Unix epoch).
    pub at: u64,
    /// Who: `admin`, `watcher`, `canary gate`, `policy manager <url>`.
    pub by: String,
    /// Why or how, when there is more to say (a ramp's percent, an abort's reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `GET /v1/templates/{name}/history`: oldest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    /// The template.
    pub name: String,
    /// The revision serving new conversations now, if the template exists.
    pub active: Option<String>,
    /// Every activation kept, oldest first.
    pub activations: Vec<Activation>,
}

/// `GET /v1/templates/{name}/candidates`: the staged candidate and what its shadow found.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateList {
    /// The template.
    pub name: String,
    /// The revision serving new conversations.
    pub active: Option<String>,
    /// The candidate, when one is staged (one per template).
    pub candidates: Vec<CandidateReport>,
}

/// A staged candidate revision.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateReport {
    /// Its revision.
    pub revision: String,
    /// When it was staged (milliseconds since the Unix epoch).
    pub staged_at: u64,
    /// Who staged it: `admin` (an upload), `watcher` (an edited file under `--rollout
    /// shadow`).
    pub staged_by: String,
    /// The share of new conversations that get a shadow twin, 0 to 1.
    pub sample: f64,
    /// What the shadow twins found.
    pub shadow: ShadowReport,
    /// The canary, while one runs or once its gates stopped it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramp: Option<RampReport>,
    /// The candidate's YAML.
    pub source: String,
}

/// What the shadow twins of a candidate found so far.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ShadowReport {
    /// Whether twins run here. Off where one node does not see all of a conversation
    /// (several engine nodes on one Redis): `reason` says why.
    pub active: bool,
    /// Why shadowing is off, when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Live conversations given a twin.
    pub shadowed: u64,
    /// Twins whose live conversation ended with no divergence.
    pub same: u64,
    /// Twins that diverged.
    pub diverged: u64,
    /// Divergences by kind: `refused`, `accepted`, `thread`, `outcome`, `violation`,
    /// `commitment`, `action`, `hook_failure`.
    pub by_kind: std::collections::BTreeMap<String, u64>,
    /// Live steps not shadowed because the shadow queue was full; a twin that missed a step
    /// stops (it is counted here, not as a divergence).
    pub dropped: u64,
    /// Up to 20 divergences, the first found first.
    pub samples: Vec<SampleDivergence>,
}

/// One twin's first divergence.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SampleDivergence {
    /// The live conversation.
    pub conversation_id: String,
    /// The input it showed at (0: the start).
    pub step: usize,
    /// That input, e.g. `propose from bob at 1767225780000 (message m-2)`.
    pub input: String,
    /// Its kind (as in `by_kind`).
    pub kind: String,
    /// The refusal code or hook event, for `refused`, `accepted` and `hook_failure`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// What differs: paths into the compared digest, the live value and the candidate's.
    pub differences: serde_json::Value,
}

/// A canary: a share of new conversations started on the candidate for real.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RampReport {
    /// The share, in percent.
    pub percent: u8,
    /// When it started (milliseconds since the Unix epoch).
    pub since: u64,
    /// Its gates, as given (`refusal_rate:5,hook_failure_rate:2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub abort_on: Option<String>,
    /// Conversations each side needs before a gate is judged.
    pub min_conversations: u64,
    /// The counts since it started, per side.
    pub candidate: RevisionTally,
    /// The same for the active revision.
    pub active: RevisionTally,
    /// Why the gates stopped it, once they did (the ramp is then at 0%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<String>,
}

/// What conversations of one revision did during a ramp.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevisionTally {
    /// Conversations started.
    pub conversations: u64,
    /// Messages taken (accepted and refused) in those conversations.
    pub messages: u64,
    /// Of them, refused.
    pub refused: u64,
    /// Hook failures recorded in them (violations of kind `hook_error`).
    pub hook_failures: u64,
}

/// `POST /v1/templates/{name}/candidates`: what was staged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CandidateStaged {
    /// The template.
    pub name: String,
    /// The candidate's revision (an existing revision's when the content equals it).
    pub revision: String,
    /// The revision serving new conversations meanwhile.
    pub active: Option<String>,
    /// The share of new conversations shadowed.
    pub sample: f64,
}

/// `…/promote`, `…/rollback` and `…/ramp`: which revision serves now.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activated {
    /// The template.
    pub name: String,
    /// The activation recorded.
    pub activation: Activation,
}
