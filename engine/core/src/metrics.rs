//! Counters for `/metrics`, read from what the store actually accepted.
//!
//! [`MeteredStore`] wraps the configured store and counts the events of every commit that
//! succeeded: messages by template and performative, violations, thread timeouts,
//! conversations started and completed. Counting at the store boundary sees the scheduler's
//! work (deadlines, automatic replies) as well as the API's, and never counts a write that
//! lost a race. The API adds the messages it refused ([`Metrics::refused`]), the webhook
//! deliveries and the calls to A2A agents. [`Metrics::render`] writes the Prometheus text format.
//!
//! Hook call durations come from the hook runtime ([`crate::hooks::latency`]) and are
//! rendered here as the `colloquy_hook_duration_seconds` histogram.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use colloquy_protocol::conversation::ViolationKind;
use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::message::AgentId;
use colloquy_protocol::performative::{FipaAct, Performative};
use dashmap::DashMap;
use smallvec::SmallVec;
use tracing::Instrument as _;

use crate::keyed::Hasher;
use crate::store::{
    Activation, ArchivedRevision, Commit, ConversationStore, InboxEntry, RemoteTask, StoreError,
};

type Counter<K> = DashMap<K, AtomicU64, Hasher>;

/// Label used when a refused message names no known template or performative, so clients
/// cannot grow the label set without bound.
pub const UNKNOWN_LABEL: &str = "unknown";

/// What a webhook delivery attempt came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WebhookResult {
    /// The receiver answered 2xx.
    Delivered,
    /// An attempt failed and another one is scheduled.
    Retried,
    /// Every attempt failed; the message stays in the inbox only.
    Dropped,
}

impl WebhookResult {
    fn label(self) -> &'static str {
        match self {
            WebhookResult::Delivered => "delivered",
            WebhookResult::Retried => "retried",
            WebhookResult::Dropped => "dropped",
        }
    }
}

/// What a call to a remote A2A agent came to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum A2aCallResult {
    /// The agent answered (a task, a message or a JSON-RPC error).
    Answered,
    /// An attempt failed (not reached, not 2xx) and another one is scheduled.
    Retried,
    /// Given up: every attempt failed, or the answer was no A2A JSON-RPC response.
    Failed,
}

impl A2aCallResult {
    fn label(self) -> &'static str {
        match self {
            A2aCallResult::Answered => "answered",
            A2aCallResult::Retried => "retried",
            A2aCallResult::Failed => "failed",
        }
    }
}

/// The process's counters.
#[derive(Default)]
pub struct Metrics {
    /// Who else has figures for `/metrics` (the rollouts' shadow counts).
    observer: std::sync::OnceLock<Arc<dyn CommitObserver>>,
    /// (template, performative, result). Keyed by the performative itself, which the
    /// accepted message already holds: counting a message allocates nothing.
    messages: Counter<(Arc<str>, Performative, &'static str)>,
    /// (template, violation kind).
    violations: Counter<(Arc<str>, &'static str)>,
    /// Threads whose deadline passed, by template.
    timeouts: Counter<Arc<str>>,
    /// Conversations started, by template.
    started: Counter<Arc<str>>,
    /// (template, outcome).
    completed: Counter<(Arc<str>, &'static str)>,
    webhooks: Counter<&'static str>,
    /// (method, result) of calls to A2A agents.
    a2a_calls: Counter<(&'static str, &'static str)>,
    /// Requests refused 401, by the check their credential failed (`expired`, `issuer`, …).
    auth_failures: Counter<&'static str>,
}

/// `colloquy_hook_duration_seconds`, a histogram by event and result.
fn render_hook_latency(out: &mut String, hooks: &crate::hooks::latency::HookLatency) {
    use crate::hooks::latency::BUCKETS_US;
    let name = "colloquy_hook_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Wasm hook call durations by event and result."
    );
    let _ = writeln!(out, "# TYPE {name} histogram");
    for series in hooks.snapshot() {
        let labels = format!("event=\"{}\",result=\"{}\"", series.event, series.result);
        for (bound, count) in BUCKETS_US.iter().zip(&series.buckets) {
            let le = *bound as f64 / 1e6;
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {count}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"+Inf\"}} {}",
            series.count
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", series.sum_ns as f64 / 1e9);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", series.count);
    }
}

fn bump<K: std::hash::Hash + Eq>(counter: &Counter<K>, key: K) {
    if let Some(value) = counter.get(&key) {
        value.fetch_add(1, Ordering::Relaxed);
        return;
    }
    counter
        .entry(key)
        .or_default()
        .fetch_add(1, Ordering::Relaxed);
}

fn violation_label(kind: ViolationKind) -> &'static str {
    match kind {
        ViolationKind::OutOfProtocol => "out_of_protocol",
        ViolationKind::LateMessage => "late_message",
        ViolationKind::AfterEnd => "after_end",
        ViolationKind::CommitmentViolated => "commitment_violated",
        ViolationKind::HookError => "hook_error",
    }
}

impl Metrics {
    /// Empty counters.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Counts a message the API refused with error `code`. The performative is labelled only
    /// when it is a FIPA act, the template only when the conversation is known.
    pub fn refused(&self, template: Option<Arc<str>>, performative: &str, code: &'static str) {
        let template = template.unwrap_or_else(|| Arc::from(UNKNOWN_LABEL));
        let performative = FipaAct::from_name(performative).map_or_else(
            || Performative::Intent(Arc::from(UNKNOWN_LABEL)),
            Performative::Fipa,
        );
        bump(&self.messages, (template, performative, code));
    }

    /// Counts one webhook delivery attempt's result.
    pub fn webhook(&self, result: WebhookResult) {
        bump(&self.webhooks, result.label());
    }

    /// Counts what one call (`message/send` or `tasks/get`) to an A2A agent came to.
    pub fn a2a_call(&self, method: &'static str, result: A2aCallResult) {
        bump(&self.a2a_calls, (method, result.label()));
    }

    /// Counts a request refused 401 because its credential failed `check` (a fixed label
    /// of the server's, never anything the caller sent).
    pub fn auth_failure(&self, check: &'static str) {
        bump(&self.auth_failures, check);
    }

    fn count(&self, template: &Arc<str>, tallies: impl IntoIterator<Item = Tally>) {
        for tally in tallies {
            match tally {
                Tally::Started => bump(&self.started, template.clone()),
                Tally::Message(performative) => {
                    bump(&self.messages, (template.clone(), performative, "accepted"))
                }
                Tally::Violation(kind) => bump(&self.violations, (template.clone(), kind)),
                Tally::Timeout => bump(&self.timeouts, template.clone()),
                Tally::Completed(outcome) => bump(&self.completed, (template.clone(), outcome)),
            }
        }
    }

    /// The Prometheus text exposition of every counter, plus the live-conversation gauge.
    pub fn render(
        &self,
        engine: EngineFigures,
        hooks: Option<&crate::hooks::latency::HookLatency>,
    ) -> String {
        let mut out = String::new();
        if let Some(hooks) = hooks {
            render_hook_latency(&mut out, hooks);
        }
        family(
            &mut out,
            "colloquy_messages_total",
            "Messages by template, performative and result (accepted, or the error code).",
            "counter",
            &self.messages,
            |(template, performative, result)| {
                vec![
                    ("template", template.to_string()),
                    ("performative", performative.name().to_owned()),
                    ("result", (*result).to_owned()),
                ]
            },
        );
        family(
            &mut out,
            "colloquy_violations_total",
            "Recorded protocol violations by template and kind.",
            "counter",
            &self.violations,
            |(template, kind)| {
                vec![
                    ("template", template.to_string()),
                    ("kind", (*kind).to_owned()),
                ]
            },
        );
        family(
            &mut out,
            "colloquy_thread_timeouts_total",
            "Threads whose reply-by or conversation deadline passed, by template.",
            "counter",
            &self.timeouts,
            |template| vec![("template", template.to_string())],
        );
        family(
            &mut out,
            "colloquy_conversations_started_total",
            "Conversations started, by template.",
            "counter",
            &self.started,
            |template| vec![("template", template.to_string())],
        );
        family(
            &mut out,
            "colloquy_conversations_completed_total",
            "Conversations completed, by template and outcome.",
            "counter",
            &self.completed,
            |(template, outcome)| {
                vec![
                    ("template", template.to_string()),
                    ("outcome", (*outcome).to_owned()),
                ]
            },
        );
        family(
            &mut out,
            "colloquy_webhook_deliveries_total",
            "Webhook delivery attempts by result.",
            "counter",
            &self.webhooks,
            |result| vec![("result", (*result).to_owned())],
        );
        family(
            &mut out,
            "colloquy_a2a_calls_total",
            "Calls to remote A2A agents, by JSON-RPC method and result.",
            "counter",
            &self.a2a_calls,
            |(method, result)| {
                vec![
                    ("method", (*method).to_owned()),
                    ("result", (*result).to_owned()),
                ]
            },
        );
        family(
            &mut out,
            "colloquy_auth_failures_total",
            "Requests refused 401, by the check their credential failed.",
            "counter",
            &self.auth_failures,
            |check| vec![("check", (*check).to_owned())],
        );
        let _ = writeln!(
            out,
            "# HELP colloquy_live_conversations Conversations held in memory.\n\
             # TYPE colloquy_live_conversations gauge\n\
             colloquy_live_conversations {}\n\
             # HELP colloquy_inbox_expired_total Inbox entries dropped unacknowledged after the inbox TTL.\n\
             # TYPE colloquy_inbox_expired_total counter\n\
             colloquy_inbox_expired_total {}\n\
             # HELP colloquy_remote_notices_total Notices of other nodes' commits received from the shared store.\n\
             # TYPE colloquy_remote_notices_total counter\n\
             colloquy_remote_notices_total {}",
            engine.live_conversations, engine.inbox_entries_expired, engine.remote_notices
        );
        if let Some(observer) = self.observer.get() {
            observer.render_metrics(&mut out);
        }
        out
    }

    /// Renders `observer`'s figures with the rest ([`CommitObserver::render_metrics`]); the
    /// first one set stays.
    pub fn render_also(&self, observer: Arc<dyn CommitObserver>) {
        let _ = self.observer.set(observer);
    }
}

/// What `/metrics` reads from the engine itself rather than from commits.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineFigures {
    /// Conversations held in memory.
    pub live_conversations: usize,
    /// Inbox entries dropped unacknowledged after the inbox TTL.
    pub inbox_entries_expired: u64,
    /// Notices of other nodes' commits this node received from a shared store.
    pub remote_notices: u64,
}

/// Writes one metric family, its samples sorted so the output is stable.
fn family<K: std::hash::Hash + Eq>(
    out: &mut String,
    name: &str,
    help: &str,
    kind: &str,
    counter: &Counter<K>,
    labels: impl Fn(&K) -> Vec<(&'static str, String)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    let mut lines: Vec<String> = counter
        .iter()
        .map(|entry| {
            let labels: Vec<String> = labels(entry.key())
                .into_iter()
                .map(|(key, value)| format!("{key}=\"{}\"", escape(&value)))
                .collect();
            format!(
                "{name}{{{}}} {}",
                labels.join(","),
                entry.value().load(Ordering::Relaxed)
            )
        })
        .collect();
    lines.sort();
    for line in lines {
        let _ = writeln!(out, "{line}");
    }
}

/// Escapes a label value as the text format requires.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// What one event adds to the counters.
enum Tally {
    Started,
    Message(Performative),
    Violation(&'static str),
    Timeout,
    Completed(&'static str),
}

impl Tally {
    fn of(event: &ConversationEvent) -> Option<Tally> {
        Some(match &event.kind {
            EventKind::Started(_) => Tally::Started,
            EventKind::MessageAccepted { message, .. } => {
                Tally::Message(message.performative.clone())
            }
            EventKind::ViolationRecorded(violation) => {
                Tally::Violation(violation_label(violation.kind))
            }
            EventKind::ThreadExpired(_) => Tally::Timeout,
            EventKind::Completed { outcome, .. } => Tally::Completed(outcome.name()),
            // Counted where the API answers the refusal (`Metrics::refused`), recorded or not.
            EventKind::MessageRefused(_) => return None,
            _ => return None,
        })
    }
}

/// Told of the commits the store acknowledged, after the fact: the engine's rollouts (shadow
/// twins of new conversations on a candidate revision, a canary's tallies) follow live
/// conversations through it.
pub trait CommitObserver: Send + Sync {
    /// Whether this commit of conversation `conversation_id` of `template` interests it.
    /// Asked first, for every commit: it must be cheap, and a commit it declines costs
    /// nothing more.
    fn watches(&self, template: &str, conversation_id: &str) -> bool;
    /// A commit of a watched template was acknowledged. Must not block.
    fn committed(
        &self,
        template: &Arc<str>,
        conversation_id: &Arc<str>,
        events: Vec<ConversationEvent>,
    );

    /// Appends its own figures to `/metrics` (the Prometheus text format, each line ending
    /// in a newline). Nothing by default.
    fn render_metrics(&self, _out: &mut String) {}
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// A [`ConversationStore`] that counts what its inner store accepted.
pub struct MeteredStore {
    inner: Arc<dyn ConversationStore>,
    metrics: Arc<Metrics>,
    observer: Option<Arc<dyn CommitObserver>>,
}

impl MeteredStore {
    /// Wraps `inner`, counting into `metrics`.
    pub fn new(inner: Arc<dyn ConversationStore>, metrics: Arc<Metrics>) -> MeteredStore {
        MeteredStore {
            inner,
            metrics,
            observer: None,
        }
    }

    /// Tells `observer` of every acknowledged commit of the templates it watches.
    pub fn with_observer(mut self, observer: Arc<dyn CommitObserver>) -> MeteredStore {
        self.observer = Some(observer);
        self
    }
}

#[async_trait]
impl ConversationStore for MeteredStore {
    async fn commit(&self, commit: Commit) -> Result<(), StoreError> {
        // What to count is read before the commit moves into the store, without copying
        // the events: this runs for every message.
        let template = commit.template.clone();
        // A commit has a few events (a message, a completion): counted without allocating.
        let tallies: SmallVec<[Tally; 4]> = commit.events.iter().filter_map(Tally::of).collect();
        let observed = self
            .observer
            .as_ref()
            .filter(|observer| observer.watches(&template, &commit.conversation_id))
            .map(|observer| {
                (
                    observer.clone(),
                    commit.conversation_id.clone(),
                    commit.events.clone(),
                )
            });
        let span = tracing::debug_span!(
            "store commit",
            colloquy.conversation.id = %commit.conversation_id,
            colloquy.template = %template,
            colloquy.events = commit.events.len(),
        );
        self.inner.commit(commit).instrument(span).await?;
        self.metrics.count(&template, tallies);
        if let Some((observer, id, events)) = observed {
            observer.committed(&template, &id, events);
        }
        Ok(())
    }

    async fn load(&self, id: &str) -> Result<Option<Vec<ConversationEvent>>, StoreError> {
        self.inner.load(id).await
    }

    async fn events_after(
        &self,
        id: &str,
        after_seq: u64,
    ) -> Result<Vec<ConversationEvent>, StoreError> {
        self.inner.events_after(id, after_seq).await
    }

    async fn claim_due_in(
        &self,
        now: u64,
        limit: usize,
        partitions: &[colloquy_cluster::PartitionId],
    ) -> Result<Vec<Arc<str>>, StoreError> {
        self.inner.claim_due_in(now, limit, partitions).await
    }

    async fn claim_due(&self, now: u64, limit: usize) -> Result<Vec<Arc<str>>, StoreError> {
        self.inner.claim_due(now, limit).await
    }

    async fn remove(&self, id: &str) -> Result<(), StoreError> {
        self.inner.remove(id).await
    }

    async fn inbox(
        &self,
        agent: &str,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<InboxEntry>, StoreError> {
        self.inner.inbox(agent, after_seq, limit).await
    }

    async fn inbox_agents(&self) -> Result<Vec<AgentId>, StoreError> {
        self.inner.inbox_agents().await
    }

    async fn inbox_head(&self, agent: &str) -> Result<u64, StoreError> {
        self.inner.inbox_head(agent).await
    }

    async fn acknowledge(&self, agent: &str, through: u64) -> Result<(), StoreError> {
        self.inner.acknowledge(agent, through).await
    }

    async fn webhook_cursor(&self, agent: &str) -> Result<u64, StoreError> {
        self.inner.webhook_cursor(agent).await
    }

    async fn advance_webhook_cursor(&self, agent: &str, seq: u64) -> Result<(), StoreError> {
        self.inner.advance_webhook_cursor(agent, seq).await
    }

    async fn remote_tasks(&self, agent: &str) -> Result<Vec<RemoteTask>, StoreError> {
        self.inner.remote_tasks(agent).await
    }

    async fn keep_remote_task(&self, agent: &str, task: &RemoteTask) -> Result<(), StoreError> {
        self.inner.keep_remote_task(agent, task).await
    }

    async fn push_configs(&self) -> Result<Vec<crate::store::PushConfig>, StoreError> {
        self.inner.push_configs().await
    }

    async fn keep_push_config(&self, config: &crate::store::PushConfig) -> Result<(), StoreError> {
        self.inner.keep_push_config(config).await
    }

    async fn forget_push_config(&self, conversation_id: &str, id: &str) -> Result<(), StoreError> {
        self.inner.forget_push_config(conversation_id, id).await
    }

    async fn agent_keys(&self, agent: &str) -> Result<Vec<crate::store::AgentKey>, StoreError> {
        self.inner.agent_keys(agent).await
    }

    async fn keep_agent_key(&self, key: &crate::store::AgentKey) -> Result<(), StoreError> {
        self.inner.keep_agent_key(key).await
    }

    async fn forget_remote_task(
        &self,
        agent: &str,
        conversation_id: &str,
        message_id: &str,
    ) -> Result<(), StoreError> {
        self.inner
            .forget_remote_task(agent, conversation_id, message_id)
            .await
    }

    async fn archive_revision(&self, revision: &ArchivedRevision) -> Result<(), StoreError> {
        self.inner.archive_revision(revision).await
    }

    async fn archive_module(&self, sha256: &str, bytes: &[u8]) -> Result<(), StoreError> {
        self.inner.archive_module(sha256, bytes).await
    }

    async fn archived_revisions(
        &self,
        template: Option<&str>,
    ) -> Result<Vec<ArchivedRevision>, StoreError> {
        self.inner.archived_revisions(template).await
    }

    async fn archived_revision(
        &self,
        template: &str,
        revision: &str,
    ) -> Result<Option<ArchivedRevision>, StoreError> {
        self.inner.archived_revision(template, revision).await
    }

    async fn archived_module(&self, sha256: &str) -> Result<Option<Arc<[u8]>>, StoreError> {
        self.inner.archived_module(sha256).await
    }

    async fn record_activation(&self, activation: &Activation) -> Result<(), StoreError> {
        self.inner.record_activation(activation).await
    }

    async fn activations(
        &self,
        template: Option<&str>,
        limit: usize,
    ) -> Result<Vec<Activation>, StoreError> {
        self.inner.activations(template, limit).await
    }

    async fn lead(&self, role: &str, lease_ms: u64) -> Result<bool, StoreError> {
        self.inner.lead(role, lease_ms).await
    }

    async fn conversations_of(&self, agent: &str) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        self.inner.conversations_of(agent).await
    }

    async fn conversation_ids(
        &self,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        self.inner.conversation_ids(after, limit).await
    }

    async fn conversation_ids_before(
        &self,
        before: Option<&str>,
        limit: usize,
    ) -> Result<Option<Vec<Arc<str>>>, StoreError> {
        self.inner.conversation_ids_before(before, limit).await
    }

    fn narrow_remote_changes(&self, wanted: crate::store::WantedAgents) {
        self.inner.narrow_remote_changes(wanted);
    }

    fn remote_changes(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<crate::store::RemoteChange>> {
        self.inner.remote_changes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn refused_messages_cannot_grow_the_label_set() {
        let metrics = Metrics::new();
        metrics.refused(None, "made-up-act-1", "unknown_performative");
        metrics.refused(None, "made-up-act-2", "unknown_performative");
        metrics.refused(Some(Arc::from("fipa-request")), "agree", "out_of_protocol");
        let text = metrics.render(EngineFigures::default(), None);
        assert!(text.contains(
            "colloquy_messages_total{template=\"unknown\",performative=\"unknown\",result=\"unknown_performative\"} 2"
        ), "{text}");
        assert!(text.contains(
            "colloquy_messages_total{template=\"fipa-request\",performative=\"agree\",result=\"out_of_protocol\"} 1"
        ), "{text}");
        assert!(text.contains("colloquy_live_conversations 0"), "{text}");
        assert!(text.contains("colloquy_inbox_expired_total 0"), "{text}");
        assert!(
            !text.contains("colloquy_hook_duration_seconds"),
            "no runtime, no histogram"
        );
    }

    #[test]
    fn hook_durations_render_as_a_prometheus_histogram() {
        use std::time::Duration;

        use colloquy_protocol::template::HookEvent;
        let hooks = crate::hooks::latency::HookLatency::default();
        hooks.observe(HookEvent::OnMessage, true, Duration::from_micros(40));
        let text = Metrics::new().render(EngineFigures::default(), Some(&hooks));
        let labels = "event=\"on_message\",result=\"ok\"";
        for line in [
            "# TYPE colloquy_hook_duration_seconds histogram".to_owned(),
            format!("colloquy_hook_duration_seconds_bucket{{{labels},le=\"0.000025\"}} 0"),
            format!("colloquy_hook_duration_seconds_bucket{{{labels},le=\"0.00005\"}} 1"),
            format!("colloquy_hook_duration_seconds_bucket{{{labels},le=\"+Inf\"}} 1"),
            format!("colloquy_hook_duration_seconds_count{{{labels}}} 1"),
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line}:\n{text}");
        }
    }
}
