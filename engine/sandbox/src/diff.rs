//! What changes between two revisions of a template, in the protocol's terms rather than
//! the text's: states and their outcomes, moves per state and role (added, removed, sent
//! elsewhere, guarded, given another reply-by), deadlines, outcome rules, commitments,
//! message schemas (wider or narrower where the required keys say so), roles, enforcement
//! and hooks. `colloquy templates diff OLD NEW` prints it.

use std::collections::{BTreeMap, BTreeSet};

use colloquy_policy::CompiledTemplate;
use colloquy_protocol::template::{Role, Spec, StateSpec, TransitionSpec};
use serde_json::Value;

/// One change, placed at the template path it is about.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Change {
    /// Where, e.g. `spec.thread.states.requested`.
    pub path: String,
    /// What changed, in words.
    pub what: String,
}

/// A revision of a template, as a diff names it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct RevisionId {
    /// `metadata.name`.
    pub name: String,
    /// `sha256:…`.
    pub revision: String,
}

/// The diff of two compiled revisions as `colloquy templates diff --json` prints it and `GET
/// /v1/templates/{name}/candidates/{revision}/diff` answers it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DiffReport {
    /// The revision compared from.
    pub old: RevisionId,
    /// The revision compared to.
    pub new: RevisionId,
    /// What changes, in template order ([`diff`]).
    pub changes: Vec<Change>,
}

impl DiffReport {
    /// What changes from `old` to `new`.
    pub fn between(old: &CompiledTemplate, new: &CompiledTemplate) -> DiffReport {
        let id = |template: &CompiledTemplate| RevisionId {
            name: template.name.to_string(),
            revision: template.revision.to_string(),
        };
        DiffReport {
            old: id(old),
            new: id(new),
            changes: diff(&old.source.spec, &new.source.spec),
        }
    }
}

/// The changes from `old` to `new`, in template order.
pub fn diff(old: &Spec, new: &Spec) -> Vec<Change> {
    let mut changes = Vec::new();
    let mut change = |path: String, what: String| changes.push(Change { path, what });

    if old.enforcement != new.enforcement {
        change(
            "spec.enforcement".into(),
            format!("{:?} → {:?}", old.enforcement, new.enforcement).to_lowercase(),
        );
    }
    let (old_roles, new_roles) = (&old.roles.participants, &new.roles.participants);
    if (old_roles.min, old_roles.max) != (new_roles.min, new_roles.max) {
        change(
            "spec.roles.participants".into(),
            format!(
                "participants {} → {}",
                bounds(old_roles.min, old_roles.max),
                bounds(new_roles.min, new_roles.max)
            ),
        );
    }
    if old.deadlines.conversation_ms != new.deadlines.conversation_ms {
        change(
            "spec.deadlines.conversation_ms".into(),
            format!(
                "conversation deadline {} → {}",
                ms(old.deadlines.conversation_ms),
                ms(new.deadlines.conversation_ms)
            ),
        );
    }
    if old.thread.initial != new.thread.initial {
        change(
            "spec.thread.initial".into(),
            format!(
                "initial state {} → {}",
                old.thread.initial, new.thread.initial
            ),
        );
    }
    if old.thread.on_expiry != new.thread.on_expiry {
        change(
            "spec.thread.on_expiry".into(),
            format!(
                "on conversation expiry {} → {}",
                old.thread.on_expiry, new.thread.on_expiry
            ),
        );
    }
    let names: BTreeSet<&String> = old
        .thread
        .states
        .keys()
        .chain(new.thread.states.keys())
        .collect();
    for name in names {
        let path = format!("spec.thread.states.{name}");
        match (old.thread.states.get(name), new.thread.states.get(name)) {
            (Some(_), None) => change(path, format!("state {name} removed")),
            (None, Some(state)) => change(path, format!("state {name} added{}", terminal(state))),
            (Some(before), Some(after)) => {
                for what in state_changes(name, before, after) {
                    change(path.clone(), what);
                }
            }
            (None, None) => {}
        }
    }
    let (old_rules, new_rules) = (&old.outcome.rules, &new.outcome.rules);
    if old.outcome.complete_when != new.outcome.complete_when {
        change(
            "spec.outcome.complete_when".into(),
            format!(
                "{:?} → {:?}",
                old.outcome.complete_when, new.outcome.complete_when
            )
            .to_lowercase(),
        );
    }
    if old_rules != new_rules {
        let show = |rules: &[colloquy_protocol::template::OutcomeRule]| {
            rules
                .iter()
                .map(|rule| match &rule.when {
                    Some(when) => format!("{} when {when}", rule.outcome.name()),
                    None => rule.outcome.name().to_owned(),
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        change(
            "spec.outcome.rules".into(),
            format!(
                "outcome rules [{}] → [{}]",
                show(old_rules),
                show(new_rules)
            ),
        );
    }
    let commitments = |spec: &Spec| -> BTreeMap<String, Value> {
        spec.commitments
            .iter()
            .map(|c| {
                (
                    c.name.clone(),
                    serde_json::to_value(c).unwrap_or(Value::Null),
                )
            })
            .collect()
    };
    let (before, after) = (commitments(old), commitments(new));
    for name in before.keys().chain(after.keys()).collect::<BTreeSet<_>>() {
        let path = "spec.commitments".to_owned();
        match (before.get(name), after.get(name)) {
            (Some(_), None) => change(path, format!("commitment {name} removed")),
            (None, Some(_)) => change(path, format!("commitment {name} added")),
            (Some(a), Some(b)) if a != b => {
                let deadline = |c: &Value| c["deadline"]["after_ms"].as_u64();
                let what = if deadline(a) == deadline(b) {
                    format!("commitment {name} changed")
                } else {
                    format!(
                        "commitment {name}: deadline {} → {}",
                        ms(deadline(a)),
                        ms(deadline(b))
                    )
                };
                change(path, what);
            }
            _ => {}
        }
    }
    let performatives: BTreeSet<&String> = old.messages.keys().chain(new.messages.keys()).collect();
    for performative in performatives {
        let path = format!("spec.messages.{performative}");
        match (
            old.messages.get(performative),
            new.messages.get(performative),
        ) {
            (Some(_), None) => change(
                path,
                format!("{performative}: schema removed (any content)"),
            ),
            (None, Some(_)) => change(path, format!("{performative}: schema added")),
            (Some(a), Some(b)) if a.schema != b.schema => {
                change(
                    path,
                    format!(
                        "{performative}: schema {}",
                        schema_change(&a.schema, &b.schema)
                    ),
                );
            }
            _ => {}
        }
    }
    if old.routing != new.routing {
        change(
            "spec.routing".into(),
            format!(
                "routing rules: {} → {}",
                old.routing.len(),
                new.routing.len()
            ),
        );
    }
    let actions = [
        ("on_start", &old.actions.on_start, &new.actions.on_start),
        (
            "on_message",
            &old.actions.on_message,
            &new.actions.on_message,
        ),
        (
            "on_timeout",
            &old.actions.on_timeout,
            &new.actions.on_timeout,
        ),
    ];
    for (event, before, after) in actions {
        if before != after {
            change(
                format!("spec.actions.{event}"),
                format!("{event} rules changed ({} → {})", before.len(), after.len()),
            );
        }
    }
    if old.hooks != new.hooks {
        let describe = |hooks: &Option<colloquy_protocol::template::HookSpec>| {
            hooks
                .as_ref()
                .map_or_else(|| "none".to_owned(), |h| h.module.clone())
        };
        change(
            "spec.hooks".into(),
            format!(
                "hooks changed ({} → {})",
                describe(&old.hooks),
                describe(&new.hooks)
            ),
        );
    }
    changes
}

/// What changed in one state.
fn state_changes(name: &str, before: &StateSpec, after: &StateSpec) -> Vec<String> {
    let mut found = Vec::new();
    if before.terminal != after.terminal {
        found.push(format!(
            "{name}: terminal {} → {}",
            before.terminal.map_or("no", |o| o.name()),
            after.terminal.map_or("no", |o| o.name())
        ));
    }
    if before.on_deadline != after.on_deadline {
        found.push(format!(
            "{name}: on reply-by passed {} → {}",
            before.on_deadline.as_deref().unwrap_or("nothing"),
            after.on_deadline.as_deref().unwrap_or("nothing")
        ));
    }
    let moves = |state: &StateSpec| -> BTreeMap<(String, &'static str), Vec<TransitionSpec>> {
        let mut moves: BTreeMap<(String, &'static str), Vec<TransitionSpec>> = BTreeMap::new();
        for transition in &state.transitions {
            moves
                .entry((transition.performative.clone(), role(transition.from)))
                .or_default()
                .push(transition.clone());
        }
        moves
    };
    let (old_moves, new_moves) = (moves(before), moves(after));
    for key in old_moves
        .keys()
        .chain(new_moves.keys())
        .collect::<BTreeSet<_>>()
    {
        let (performative, role) = key;
        let show = |list: &[TransitionSpec]| {
            list.iter()
                .map(describe_move)
                .collect::<Vec<_>>()
                .join(" | ")
        };
        match (old_moves.get(key), new_moves.get(key)) {
            (Some(list), None) => found.push(format!(
                "{name}: {performative}/{role} removed (was → {})",
                show(list)
            )),
            (None, Some(list)) => found.push(format!(
                "{name}: {performative}/{role} added (→ {})",
                show(list)
            )),
            (Some(a), Some(b)) if a != b => found.push(format!(
                "{name}: {performative}/{role} → {} became → {}",
                show(a),
                show(b)
            )),
            _ => {}
        }
    }
    found
}

fn describe_move(transition: &TransitionSpec) -> String {
    let mut text = transition.to.clone();
    if let Some(when) = &transition.when {
        text.push_str(&format!(" when {when}"));
    }
    if let Some(reply_by) = transition.reply_by.as_ref().and_then(|r| r.default_ms) {
        text.push_str(&format!(" (reply-by {})", ms(Some(reply_by))));
    }
    text
}

/// A schema change, named wider or narrower when only its required keys moved.
fn schema_change(before: &Value, after: &Value) -> String {
    let required = |schema: &Value| -> BTreeSet<String> {
        schema["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|key| key.as_str().map(str::to_owned))
            .collect()
    };
    let strip = |schema: &Value| {
        let mut schema = schema.clone();
        if let Some(object) = schema.as_object_mut() {
            object.remove("required");
        }
        schema
    };
    let (old_required, new_required) = (required(before), required(after));
    if strip(before) == strip(after) {
        if new_required.is_subset(&old_required) {
            let dropped: Vec<_> = old_required.difference(&new_required).cloned().collect();
            return format!("wider (no longer requires {})", dropped.join(", "));
        }
        if old_required.is_subset(&new_required) {
            let added: Vec<_> = new_required.difference(&old_required).cloned().collect();
            return format!("narrower (now requires {})", added.join(", "));
        }
    }
    format!("changed: {before} → {after}")
}

fn terminal(state: &StateSpec) -> String {
    state.terminal.map_or_else(String::new, |outcome| {
        format!(" (terminal: {})", outcome.name())
    })
}

fn role(role: Role) -> &'static str {
    match role {
        Role::Initiator => "initiator",
        Role::Participant => "participant",
    }
}

fn bounds(min: u32, max: Option<u32>) -> String {
    match max {
        Some(max) if max == min => format!("{min}"),
        Some(max) => format!("{min}..{max}"),
        None => format!("{min}.."),
    }
}

fn ms(value: Option<u64>) -> String {
    value.map_or_else(|| "none".to_owned(), |ms| format!("{ms} ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(source: &str) -> Spec {
        serde_norway::from_str::<colloquy_protocol::template::Template>(source)
            .expect("parses")
            .spec
    }

    #[test]
    fn a_revision_against_itself_has_no_changes() {
        let source = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../templates/fipa-request.yaml"),
        )
        .expect("read");
        assert_eq!(diff(&spec(&source), &spec(&source)), []);
    }

    #[test]
    fn moves_deadlines_and_schemas_are_named() {
        let source = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../templates/fipa-request.yaml"),
        )
        .expect("read");
        let changed = source
            .replacen("reply_by: { default_ms: 300000 } }", "reply_by: { default_ms: 60000 } }", 1)
            .replace(
                "          - { performative: refuse, from: participant, to: refused }\n",
                "",
            )
            .replace(
                "        properties:\n          reason: { type: string }",
                "        required: [reason]\n        properties:\n          reason: { type: string }",
            );
        let changes: Vec<String> = diff(&spec(&source), &spec(&changed))
            .into_iter()
            .map(|c| format!("{}: {}", c.path, c.what))
            .collect();
        assert_eq!(
            changes,
            [
                "spec.thread.states.requested: requested: agree/participant → agreed (reply-by 300000 ms) became → agreed (reply-by 60000 ms)",
                "spec.thread.states.requested: requested: refuse/participant removed (was → refused)",
                "spec.messages.refuse: refuse: schema narrower (now requires reason)",
            ]
        );
    }
}
