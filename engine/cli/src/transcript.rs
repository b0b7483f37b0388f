//! Conversation transcripts drawn as terminal sequence diagrams.
//!
//! [`render`] is a pure function of a conversation's view and its event log, so it shows what
//! the engine recorded rather than what a client believes it sent. Each event takes one row:
//!
//! ```text
//!    time  ┊ lifelines, one column per agent ┊ what happened
//!   +12ms  │◄──────────┤          │          │  propose  price: 120
//! ```
//!
//! The diagram strip on the left says who talked to whom (arrows, and markers on the
//! lifelines of the agents an event concerns); the text on the right says what: the
//! performative and a short content summary, thread moves, commitments, violations. Text wraps
//! onto continuation rows, so no row is wider than the requested width.

use std::collections::HashMap;
use std::fmt::Write as _;

use colloquy_protocol::conversation::{
    CommitmentState, ConversationView, ThreadView, ViolationKind,
};
use colloquy_protocol::event::{ConversationEvent, EventKind, ThreadTransition};
use colloquy_protocol::message::{ENGINE_PARTY, Message};
use serde_json::Value;

/// The width transcripts are drawn for unless told otherwise.
pub const DEFAULT_WIDTH: u16 = 100;
/// Columns left of the diagram for the time since the conversation started (`+1.25s`).
const GUTTER: usize = 8;
/// Narrowest and widest distance between two lifelines. Narrower would leave no room for an
/// arrow; wider only wastes the text column.
const MIN_SPACING: usize = 7;
const MAX_SPACING: usize = 16;
/// Width the text column gets when the lifelines can spare it: lifelines spread out as far
/// as this allows (up to [`MAX_SPACING`]), but at least far enough apart for their names.
const TEXT_TARGET: usize = 56;
/// The text column never gets narrower than this; lifelines move closer together first.
const MIN_TEXT: usize = 28;
/// Longest content summary before it is cut with `…`: a transcript is an overview, the
/// full content is in the event log.
const MAX_SUMMARY: usize = 72;

/// Markers drawn on a lifeline for events that concern that agent.
const THREAD_MARK: char = '●';
const TIMER_MARK: char = '○';
const COMMITMENT_MARK: char = '◆';
const VIOLATION_MARK: char = '×';
const REFUSED_MARK: char = '⊘';
const END_MARK: char = '■';

/// Draws `view`'s conversation from its event log, at most `width` columns wide.
pub fn render(view: &ConversationView, events: &[ConversationEvent], width: usize) -> String {
    let layout = Layout::new(agents(view, events), width);
    let started_at = events
        .iter()
        .find_map(|event| matches!(event.kind, EventKind::Started(_)).then_some(event.at))
        .unwrap_or_default();
    let mut diagram = Diagram {
        layout: &layout,
        rows: Vec::new(),
        started_at,
        last_time: None,
    };
    let mut commitments: HashMap<&str, CommitmentNote<'_>> = HashMap::new();
    let mut messages: HashMap<&str, &Message> = HashMap::new();
    let mut completed_at = None;

    for event in events {
        match &event.kind {
            EventKind::Started(started) => {
                let with = join(started.participants.iter().map(|p| &**p));
                let mut text = format!("started by {} with {with}", started.initiator);
                if let Some(deadline) = started.deadline {
                    let _ = write!(
                        text,
                        " · ends by +{}",
                        duration(deadline.saturating_sub(event.at))
                    );
                }
                diagram.note(event.at, text);
            }
            EventKind::MessageAccepted {
                message,
                transitions,
            } => {
                messages.insert(&message.id, message);
                diagram.message(event.at, message, &messages);
                for (text, marked) in transition_notes(transitions, event.at, message.reply_by) {
                    diagram.marked(event.at, &marked, THREAD_MARK, text);
                }
            }
            // Never delivered, so no arrow: a note on its sender's lifeline.
            EventKind::MessageRefused(refusal) => {
                let mut text = format!("refused {}: {}", refusal.performative, refusal.code);
                if let Some(pointer) = &refusal.pointer {
                    let _ = write!(text, " at {pointer}");
                }
                diagram.marked(event.at, &[&*refusal.sender], REFUSED_MARK, text);
            }
            EventKind::ThreadExpired(transition) => {
                let text = transition_note(&[transition]);
                let marked = [&*transition.participant];
                diagram.marked(
                    event.at,
                    &marked,
                    TIMER_MARK,
                    format!("{text} (reply-by passed)"),
                );
            }
            EventKind::ThreadDeadlineSet {
                participant,
                deadline,
            } => {
                let text = match deadline {
                    Some(at) => {
                        format!(
                            "{participant}: reply by +{}",
                            duration(at.saturating_sub(event.at))
                        )
                    }
                    None => format!("{participant}: reply-by passed, no deadline now"),
                };
                diagram.marked(event.at, &[&**participant], TIMER_MARK, text);
            }
            EventKind::ViolationRecorded(violation) => {
                let agent = violation.agent.as_deref().unwrap_or(&view.initiator);
                let text = format!(
                    "violation {}: {}",
                    violation_name(violation.kind),
                    violation.detail
                );
                diagram.marked(event.at, &[agent], VIOLATION_MARK, text);
            }
            EventKind::CommitmentCreated(commitment) => {
                let note = CommitmentNote {
                    label: format!(
                        "{} #{}",
                        commitment.name,
                        short_commitment_id(&commitment.id)
                    ),
                    debtor: &commitment.debtor,
                    creditor: &commitment.creditor,
                    state: commitment.state,
                };
                let mut text = format!(
                    "{}: {} ({} owes {})",
                    note.label,
                    note.state.name(),
                    note.debtor,
                    note.creditor
                );
                push_due(&mut text, commitment.deadline, event.at);
                diagram.marked(event.at, &[note.debtor], COMMITMENT_MARK, text);
                commitments.insert(&commitment.id, note);
            }
            EventKind::CommitmentMoved {
                id,
                to,
                deadline,
                cause,
            } => {
                let (text, debtor) = match commitments.get_mut(&**id) {
                    Some(note) => {
                        let text = format!("{}: {} → {}", note.label, note.state.name(), to.name());
                        note.state = *to;
                        (text, Some(note.debtor))
                    }
                    None => (format!("commitment {id} → {}", to.name()), None),
                };
                let mut text = text;
                push_due(&mut text, *deadline, event.at);
                if !messages.contains_key(&**cause) {
                    let _ = write!(text, " ({cause})");
                }
                diagram.marked(event.at, debtor.as_slice(), COMMITMENT_MARK, text);
            }
            EventKind::VarsMerged { vars } => {
                let text = format!("vars: {}", summary(&Value::Object(vars.clone())));
                diagram.note(event.at, text);
            }
            EventKind::DeadlineSet { deadline } => {
                let text = match deadline {
                    Some(at) => format!(
                        "conversation ends by +{}",
                        duration(at.saturating_sub(event.at))
                    ),
                    None => "conversation deadline removed".to_owned(),
                };
                diagram.note(event.at, text);
            }
            EventKind::RetryScheduled { at, attempt } => {
                let text = format!(
                    "retry #{attempt} of on_timeout in {}",
                    duration(at.saturating_sub(event.at))
                );
                diagram.note(event.at, text);
            }
            EventKind::RetryFired { attempt } => {
                diagram.note(event.at, format!("retry #{attempt} of on_timeout ran"));
            }
            EventKind::Escalated { to, reason } => {
                diagram.marked(
                    event.at,
                    &[&**to],
                    THREAD_MARK,
                    format!("escalated to {to}: {reason}"),
                );
            }
            EventKind::Completed { outcome, reason } => {
                completed_at = Some(event.at);
                let mut text = format!("conversation completed: {}", outcome.name());
                if let Some(reason) = reason {
                    let _ = write!(text, " ({reason})");
                }
                diagram.marked(event.at, &[&*view.initiator], END_MARK, text);
            }
        }
    }

    let mut out = String::new();
    title(&mut out, view, width);
    layout.header(&mut out);
    for row in &diagram.rows {
        layout.row(&mut out, row);
    }
    layout.footer(&mut out);
    footer(
        &mut out,
        view,
        completed_at.map(|at| at.saturating_sub(started_at)),
        width,
    );
    out
}

/// The agents drawn, left to right: the initiator, the participants, anyone else messages
/// reached (routing, escalation), and the engine last when it spoke.
fn agents<'a>(view: &'a ConversationView, events: &'a [ConversationEvent]) -> Vec<&'a str> {
    let mut agents: Vec<&str> = vec![&view.initiator];
    let add = |agent: &'a str, agents: &mut Vec<&'a str>| {
        if agent != ENGINE_PARTY && !agents.contains(&agent) {
            agents.push(agent);
        }
    };
    for participant in &view.participants {
        add(participant, &mut agents);
    }
    let mut engine_spoke = false;
    for event in events {
        match &event.kind {
            EventKind::MessageAccepted { message, .. } => {
                engine_spoke |= &*message.sender == ENGINE_PARTY
                    || message.receivers.iter().any(|r| &**r == ENGINE_PARTY);
                add(&message.sender, &mut agents);
                for receiver in &message.receivers {
                    add(receiver, &mut agents);
                }
            }
            EventKind::Escalated { to, .. } => add(to, &mut agents),
            _ => {}
        }
    }
    if engine_spoke {
        agents.push(ENGINE_PARTY);
    }
    agents
}

/// Where the lifelines are.
struct Layout<'a> {
    agents: Vec<&'a str>,
    /// Lifeline positions inside the strip.
    xs: Vec<usize>,
    /// Strip width: up to and including the last lifeline.
    strip: usize,
    /// Width of the text column.
    text: usize,
}

impl<'a> Layout<'a> {
    fn new(agents: Vec<&'a str>, width: usize) -> Layout<'a> {
        let name_len = |agent: &&str| shown_name(agent).chars().count();
        let longest = agents.iter().map(name_len).max().unwrap_or(0);
        // Room left of the first lifeline for half of its name.
        let lead = (agents.first().map_or(0, name_len) / 2).min(MAX_SPACING / 2) + 1;
        let gaps = agents.len().saturating_sub(1).max(1);
        let fixed = GUTTER + lead + 1 + 2;
        let spread = width.saturating_sub(fixed + TEXT_TARGET) / gaps;
        let most = width.saturating_sub(fixed + MIN_TEXT) / gaps;
        let spacing = spread
            .max(longest + 3)
            .min(MAX_SPACING)
            .min(most)
            .max(MIN_SPACING);
        let xs: Vec<usize> = (0..agents.len()).map(|i| lead + i * spacing).collect();
        let strip = xs.last().map_or(0, |x| x + 1);
        let text = width.saturating_sub(GUTTER + strip + 2).max(MIN_TEXT / 2);
        Layout {
            agents,
            xs,
            strip,
            text,
        }
    }

    fn column(&self, agent: &str) -> Option<usize> {
        self.agents.iter().position(|known| *known == agent)
    }

    fn lifelines(&self, glyph: char) -> Vec<char> {
        let mut strip = vec![' '; self.strip];
        for &x in &self.xs {
            strip[x] = glyph;
        }
        strip
    }

    /// Agent names centred over their lifelines (the engine's as `engine`, the right end
    /// may run into the text column), then the lifelines' tops.
    fn header(&self, out: &mut String) {
        let mut names: Vec<char> = vec![' '; GUTTER + self.strip + self.text];
        let spacing = self
            .xs
            .get(1)
            .zip(self.xs.first())
            .map_or(MAX_SPACING, |(b, a)| b - a);
        let mut free_from = 0;
        for (i, (agent, &x)) in self.agents.iter().zip(&self.xs).enumerate() {
            let last = i + 1 == self.agents.len();
            let shown = shown_name(agent);
            let room = if last {
                names.len().saturating_sub(GUTTER + x) * 2
            } else {
                spacing - 1
            };
            let shown = truncate(shown, room.max(3));
            let len = shown.chars().count();
            let start = (GUTTER + x).saturating_sub(len / 2).max(free_from);
            for (offset, c) in shown.chars().enumerate() {
                if let Some(cell) = names.get_mut(start + offset) {
                    *cell = c;
                }
            }
            free_from = start + len + 1;
        }
        push_line(out, &names.iter().collect::<String>());
        let tops: String = self.lifelines('┬').into_iter().collect();
        push_line(out, &format!("{:GUTTER$}{tops}", ""));
    }

    fn footer(&self, out: &mut String) {
        let bottoms: String = self.lifelines('┴').into_iter().collect();
        push_line(out, &format!("{:GUTTER$}{bottoms}", ""));
    }

    /// One row, wrapping its text onto continuation rows of bare lifelines.
    fn row(&self, out: &mut String, row: &Row) {
        let lines = wrap(&row.text, self.text);
        let strip: String = row.strip.iter().collect();
        let bare: String = self.lifelines('│').into_iter().collect();
        for (i, line) in lines.iter().enumerate() {
            let (time, strip) = if i == 0 {
                (row.time.as_deref().unwrap_or(""), &strip)
            } else {
                ("", &bare)
            };
            push_line(out, &format!("{time:>w$} {strip}  {line}", w = GUTTER - 1));
        }
    }
}

/// The name over a lifeline: the engine's party name is long and always the same.
fn shown_name(agent: &str) -> &str {
    if agent == ENGINE_PARTY {
        "engine"
    } else {
        agent
    }
}

/// One row of the diagram.
struct Row {
    time: Option<String>,
    strip: Vec<char>,
    text: String,
}

/// The rows built so far.
struct Diagram<'l, 'a> {
    layout: &'l Layout<'a>,
    rows: Vec<Row>,
    started_at: u64,
    /// The time shown last: a row at the same time leaves the gutter empty.
    last_time: Option<u64>,
}

impl Diagram<'_, '_> {
    fn time(&mut self, at: u64) -> Option<String> {
        if self.last_time == Some(at) {
            return None;
        }
        self.last_time = Some(at);
        Some(format!("+{}", duration(at.saturating_sub(self.started_at))))
    }

    /// A row that concerns the conversation rather than an agent: bare lifelines.
    fn note(&mut self, at: u64, text: String) {
        self.marked(at, &[], '│', text);
    }

    fn marked(&mut self, at: u64, marked: &[&str], mark: char, text: String) {
        let mut strip = self.layout.lifelines('│');
        for agent in marked {
            if let Some(column) = self.layout.column(agent) {
                strip[self.layout.xs[column]] = mark;
            }
        }
        let time = self.time(at);
        self.rows.push(Row { time, strip, text });
    }

    fn message(&mut self, at: u64, message: &Message, known: &HashMap<&str, &Message>) {
        let layout = self.layout;
        let mut strip = layout.lifelines('│');
        let from = layout.column(&message.sender);
        let to: Vec<usize> = message
            .receivers
            .iter()
            .filter_map(|receiver| layout.column(receiver))
            .collect();
        if let Some(from) = from {
            let x = |column: usize| layout.xs[column];
            let right = to.iter().copied().filter(|&c| c > from).max();
            let left = to.iter().copied().filter(|&c| c < from).min();
            if let Some(end) = right {
                strip[(x(from) + 1)..x(end)].fill('─');
                for column in (from + 1)..end {
                    strip[x(column)] = '┼';
                }
                for &column in to.iter().filter(|&&c| c > from) {
                    strip[x(column) - 1] = '►';
                }
            }
            if let Some(end) = left {
                strip[(x(end) + 1)..x(from)].fill('─');
                for column in (end + 1)..from {
                    strip[x(column)] = '┼';
                }
                for &column in to.iter().filter(|&&c| c < from) {
                    strip[x(column) + 1] = '◄';
                }
            }
            strip[x(from)] = match (left.is_some(), right.is_some()) {
                (true, true) => '┼',
                (true, false) => '┤',
                (false, true) => '├',
                (false, false) => '│',
            };
        }

        let mut text = message.performative.to_string();
        let content = summary(&message.content.value());
        if !content.is_empty() {
            let _ = write!(text, " {{{content}}}");
        }
        if let Some(reply_by) = message.reply_by {
            let _ = write!(
                text,
                " · reply by +{}",
                duration(reply_by.saturating_sub(message.sent_at))
            );
        }
        let answered = message.in_reply_to.as_deref().and_then(|id| known.get(id));
        match (answered, &*message.sender == ENGINE_PARTY) {
            (Some(answered), true) => {
                let _ = write!(
                    text,
                    " · automatic reply to {}'s {}",
                    answered.sender, answered.performative
                );
            }
            (Some(answered), false) => {
                let _ = write!(
                    text,
                    " · answers {}'s {}",
                    answered.sender, answered.performative
                );
            }
            (None, true) => text.push_str(" · sent by the engine"),
            (None, false) => {}
        }
        let time = self.time(at);
        self.rows.push(Row { time, strip, text });
    }
}

/// What a transcript remembers about a commitment to describe its moves.
struct CommitmentNote<'a> {
    label: String,
    debtor: &'a str,
    creditor: &'a str,
    state: CommitmentState,
}

/// One note per distinct move (`start → called` for three threads is one note), with the
/// participants it concerns.
fn transition_notes(
    transitions: &[ThreadTransition],
    at: u64,
    reply_by: Option<u64>,
) -> Vec<(String, Vec<&str>)> {
    let mut groups: Vec<Vec<&ThreadTransition>> = Vec::new();
    for transition in transitions {
        match groups
            .iter_mut()
            .find(|group| same_move(group[0], transition))
        {
            Some(group) => group.push(transition),
            None => groups.push(vec![transition]),
        }
    }
    groups
        .into_iter()
        .map(|group| {
            let marked = group.iter().map(|t| &*t.participant).collect();
            let mut text = transition_note(&group);
            if let Some(deadline) = group[0].deadline
                && reply_by != Some(deadline)
            {
                let _ = write!(
                    text,
                    " · reply by +{}",
                    duration(deadline.saturating_sub(at))
                );
            }
            (text, marked)
        })
        .collect()
}

fn same_move(a: &ThreadTransition, b: &ThreadTransition) -> bool {
    a.from == b.from && a.to == b.to && a.outcome == b.outcome && a.deadline == b.deadline
}

/// `acme, globex: start → called`, for transitions that are one move. The deadline it set is
/// left to the caller: the message that caused the move may already show it.
fn transition_note(group: &[&ThreadTransition]) -> String {
    let Some(first) = group.first() else {
        return String::new();
    };
    let who = join(group.iter().map(|t| &*t.participant));
    let mut text = format!("{who}: {} → {}", first.from, first.to);
    if let Some(outcome) = first.outcome
        && outcome.name() != &*first.to
    {
        let _ = write!(text, " ({})", outcome.name());
    }
    text
}

fn push_due(text: &mut String, deadline: Option<u64>, at: u64) {
    if let Some(deadline) = deadline {
        let _ = write!(text, " · due in {}", duration(deadline.saturating_sub(at)));
    }
}

/// `#3` for commitment `<conversation>/3`.
fn short_commitment_id(id: &str) -> &str {
    id.rsplit_once('/').map_or(id, |(_, n)| n)
}

fn title(out: &mut String, view: &ConversationView, width: usize) {
    let head = format!("── {} ", view.template);
    let rest = width.saturating_sub(head.chars().count());
    push_line(out, &format!("{head}{}", "─".repeat(rest)));
    let mut detail = format!("   conversation {} · revision {}", view.id, view.revision);
    if detail.chars().count() > width {
        detail = format!("   conversation {}", view.id);
    }
    push_line(out, &detail);
    out.push('\n');
}

fn footer(out: &mut String, view: &ConversationView, elapsed: Option<u64>, width: usize) {
    const LABEL: usize = 14;
    let field = |out: &mut String, label: &str, text: &str| {
        for (i, line) in wrap(text, width.saturating_sub(LABEL + 2))
            .iter()
            .enumerate()
        {
            let label = if i == 0 { label } else { "" };
            push_line(out, &format!("  {label:<LABEL$}{line}"));
        }
    };
    out.push('\n');
    let outcome = match (view.outcome, elapsed) {
        (Some(outcome), Some(elapsed)) => {
            format!("{} · completed after {}", outcome.name(), duration(elapsed))
        }
        (Some(outcome), None) => outcome.name().to_owned(),
        (None, _) => "none yet · conversation still active".to_owned(),
    };
    field(out, "outcome", &outcome);
    if !view.threads.is_empty() {
        field(
            out,
            "threads",
            &join(view.threads.iter().map(thread_summary)),
        );
    }
    if !view.commitments.is_empty() {
        let commitments = view.commitments.iter().map(|c| {
            format!(
                "{} #{} {}→{} {}",
                c.name,
                short_commitment_id(&c.id),
                c.debtor,
                c.creditor,
                c.state.name()
            )
        });
        field(out, "commitments", &join(commitments));
    }
    let violations = if view.violations.is_empty() {
        "none".to_owned()
    } else {
        join(view.violations.iter().map(|v| match &v.agent {
            Some(agent) => format!("{} by {agent}", violation_name(v.kind)),
            None => violation_name(v.kind).to_owned(),
        }))
    };
    field(out, "violations", &violations);
}

fn thread_summary(thread: &ThreadView) -> String {
    match thread.outcome {
        Some(outcome) if outcome.name() != &*thread.state => {
            format!(
                "{} {} ({})",
                thread.participant,
                thread.state,
                outcome.name()
            )
        }
        _ => format!("{} {}", thread.participant, thread.state),
    }
}

fn violation_name(kind: ViolationKind) -> &'static str {
    match kind {
        ViolationKind::OutOfProtocol => "out_of_protocol",
        ViolationKind::LateMessage => "late_message",
        ViolationKind::AfterEnd => "after_end",
        ViolationKind::CommitmentViolated => "commitment_violated",
        ViolationKind::HookError => "hook_error",
    }
}

/// A short, one-line rendering of message content: `key: value` pairs for an object (string
/// values quoted, nested values as compact JSON), compact JSON otherwise. Empty for no
/// content; the caller adds the braces.
pub fn summary(content: &Value) -> String {
    let text = match content {
        Value::Null => String::new(),
        Value::Object(map) if map.is_empty() => String::new(),
        Value::Object(map) => map
            .iter()
            .map(|(key, value)| format!("{key}: {value}"))
            .collect::<Vec<_>>()
            .join(", "),
        other => other.to_string(),
    };
    truncate(&text, MAX_SUMMARY)
}

/// `300ms`, `1.25s`, `45s`, `5m`, `2m30s`, `1h`, `1h30m`.
pub fn duration(ms: u64) -> String {
    const SECOND: u64 = 1000;
    const MINUTE: u64 = 60 * SECOND;
    const HOUR: u64 = 60 * MINUTE;
    match ms {
        0..SECOND => format!("{ms}ms"),
        SECOND..MINUTE if ms.is_multiple_of(SECOND) => format!("{}s", ms / SECOND),
        SECOND..MINUTE => {
            let text = format!("{:.2}", ms as f64 / SECOND as f64);
            format!("{}s", text.trim_end_matches('0'))
        }
        MINUTE..HOUR => match (ms % MINUTE) / SECOND {
            0 => format!("{}m", ms / MINUTE),
            seconds => format!("{}m{seconds}s", ms / MINUTE),
        },
        _ => match (ms % HOUR) / MINUTE {
            0 => format!("{}h", ms / HOUR),
            minutes => format!("{}h{minutes}m", ms / HOUR),
        },
    }
}

fn join<S: AsRef<str>>(items: impl Iterator<Item = S>) -> String {
    let mut out = String::new();
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        out.push_str(item.as_ref());
    }
    out
}

fn truncate(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

/// Greedy word wrap; words longer than a line are split.
pub fn wrap(text: &str, width: usize) -> Vec<String> {
    let width = width.max(1);
    let mut lines = Vec::new();
    let mut line = String::new();
    let mut len = 0;
    for word in text.split(' ').filter(|word| !word.is_empty()) {
        let mut word: Vec<char> = word.chars().collect();
        if len > 0 && len + 1 + word.len() > width {
            lines.push(std::mem::take(&mut line));
            len = 0;
        }
        while word.len() > width {
            let rest = word.split_off(width);
            if len > 0 {
                lines.push(std::mem::take(&mut line));
            }
            lines.push(word.into_iter().collect());
            len = 0;
            word = rest;
        }
        if len > 0 {
            line.push(' ');
            len += 1;
        }
        len += word.len();
        line.extend(word);
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line.trim_end());
    out.push('\n');
}

#[cfg(test)]
mod tests;
