//! The semantic checks: everything serde cannot see. Resolves a parsed [`Template`] into a
//! [`CompiledTemplate`] (state names to [`StateId`]s, performative names to
//! [`Performative`]s, JSON Schemas and CEL compiled) and reports every problem on the way.
//!
//! The resolver never stops at the first problem: each check records a diagnostic and the
//! walk goes on with what it could resolve, so one run shows the author everything.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Component, Path};
use std::sync::Arc;

use colloquy_protocol::action::Action;
use colloquy_protocol::conversation::CommitmentState;
use colloquy_protocol::performative::{FipaAct, Performative, is_intent_name};
use colloquy_protocol::template::{
    API_VERSION_V1, CommitmentSpec, HookEvent, KIND, MAX_PARTICIPANTS, Rule, SchemaSpec, Template,
    ThreadSpec,
};
use serde_json::Value;

mod hooks;
mod machine;

use super::diagnostic::{Diagnostic, closest};
use super::expressions::{self, ExpressionError, Scope};
use crate::compiled::{
    CommitmentDeadline, CommitmentRule, CommitmentTransition, CompiledAction, CompiledRule,
    CompiledTemplate, Expression, JsonSchema, OutcomeRules, StateId,
};

/// Longest `metadata.name`; names appear in URLs, metrics and logs.
const MAX_TEMPLATE_NAME_LEN: usize = 64;
/// Most states a thread machine may have: a [`StateId`] is a `u16`.
const MAX_STATES: usize = u16::MAX as usize;
/// Smallest hook memory cap: one wasm page.
const MIN_HOOK_MEMORY_BYTES: u64 = 64 * 1024;
/// Largest hook memory cap: the whole 32-bit wasm address space.
const MAX_HOOK_MEMORY_BYTES: u64 = 4 * 1024 * 1024 * 1024;
/// Largest hook module file. Far above any real hook (the examples are 1-200 KiB), low
/// enough that a wrong path (a disk image, a log) fails fast instead of filling memory.
const MAX_HOOK_MODULE_BYTES: u64 = 64 * 1024 * 1024;
/// The first 4 bytes of any wasm binary.
const WASM_MAGIC: [u8; 4] = [0x00, 0x61, 0x73, 0x6d];

/// Whether `bytes` start as a core module (version 1, layer 0) or a component (layer 1):
/// the two forms a hook may take. The engine compiles and checks the rest.
fn is_hook_binary(bytes: &[u8]) -> bool {
    matches!(
        bytes.get(..8),
        Some(
            [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00]
                | [0x00, 0x61, 0x73, 0x6d, _, _, 0x01, 0x00]
        )
    )
}
/// Longest hook time budget per call the format allows, whatever the operator's ceiling
/// ([`super::DEFAULT_MAX_HOOK_TIMEOUT_MS`] by default, lower). Hooks run inside message
/// handling, so a minute is already far beyond anything a caller waits for.
const MAX_HOOK_TIMEOUT_MS: u64 = 60_000;
/// How many state names a hint lists before eliding the rest.
const MAX_LISTED_STATES: usize = 8;

/// Syntax errors reported per expression; after the first few, the parser's error recovery
/// mostly repeats itself.
const MAX_SYNTAX_ERRORS_PER_EXPRESSION: usize = 3;
/// Characters of an expression quoted in a hint.
const MAX_EXCERPT_CHARS: usize = 80;

/// `path` if it is relative and stays inside the directory it is relative to: only normal
/// components (and `.`), no `..`, no root. A hook module must live with its template, since
/// the policy manager serves, uploads and mirrors the two together; and a template must not
/// make the manager read (and serve the bytes of) any file elsewhere on its machine.
pub(crate) fn module_path_inside(path: &str) -> Option<&Path> {
    let path = Path::new(path);
    let inside = path
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    (inside && path.components().any(|c| matches!(c, Component::Normal(_)))).then_some(path)
}

/// Builds a diagnostic at a template path (the compiler supplies file and position).
pub(super) type At<'a> = dyn Fn(String, String, Option<String>) -> Diagnostic + Sync + 'a;

/// Runs every semantic check on `template` and resolves it. The revision is left empty for
/// the caller to fill in.
pub(super) fn resolve(
    template: Template,
    origin: Option<&Path>,
    max_hook_timeout_ms: u64,
    at: &At<'_>,
) -> Result<CompiledTemplate, Vec<Diagnostic>> {
    let mut resolver = Resolver {
        at,
        origin,
        max_hook_timeout_ms: max_hook_timeout_ms.clamp(1, MAX_HOOK_TIMEOUT_MS),
        problems: Vec::new(),
        intents: Vec::new(),
    };
    resolver.header(&template);
    let spec = &template.spec;

    resolver.intents(&spec.intents);
    let parameters_schema = spec
        .parameters
        .as_ref()
        .and_then(|p| resolver.schema(p, "spec.parameters"));
    let mut content_schemas = HashMap::new();
    for (name, schema_spec) in &spec.messages {
        let path = format!("spec.messages.{name}");
        let performative = resolver.performative(name, &path);
        let schema = resolver.schema(schema_spec, &path);
        if let (Some(performative), Some(schema)) = (performative, schema) {
            content_schemas.insert(performative, schema);
        }
    }
    let machine = resolver.machine(&spec.thread);

    let mut outcome = OutcomeRules {
        complete_when: spec.outcome.complete_when,
        rules: Vec::new(),
    };
    for (index, rule) in spec.outcome.rules.iter().enumerate() {
        let when = rule.when.as_ref().and_then(|source| {
            let path = format!("spec.outcome.rules[{index}].when");
            resolver.expression(source, &path, Scope::Outcome)
        });
        outcome.rules.push((when, rule.outcome));
    }
    if spec.deadlines.conversation_ms == Some(0) {
        resolver.positive("spec.deadlines.conversation_ms");
    }
    let commitments = resolver.commitments(&spec.commitments, &spec.thread);
    let routing = resolver.rules(&spec.routing, Section::Routing);
    let on_start = resolver.rules(&spec.actions.on_start, Section::OnStart);
    let on_message = resolver.rules(&spec.actions.on_message, Section::OnMessage);
    let on_timeout = resolver.rules(&spec.actions.on_timeout, Section::OnTimeout);
    let hook_module = spec.hooks.as_ref().and_then(|hooks| resolver.hooks(hooks));
    if spec.context.max_bytes == 0 {
        resolver.positive("spec.context.max_bytes");
    }
    if spec.limits.max_messages == Some(0) {
        resolver.positive("spec.limits.max_messages");
    }

    let Resolver {
        mut problems,
        intents,
        ..
    } = resolver;
    match machine {
        Some(machine) if problems.is_empty() => Ok(CompiledTemplate {
            name: Arc::from(template.metadata.name.as_str()),
            revision: Arc::from(""),
            source_path: origin.map(Path::to_path_buf),
            enforcement: spec.enforcement,
            signatures: spec.signatures,
            min_participants: spec.roles.participants.min,
            max_participants: spec.roles.participants.max,
            intents,
            parameters_schema,
            content_schemas,
            machine,
            outcome,
            conversation_deadline_ms: spec.deadlines.conversation_ms,
            commitments,
            routing,
            on_start,
            on_message,
            on_timeout,
            hooks: spec.hooks.clone(),
            hook_module,
            context: spec.context.clone(),
            max_messages: spec.limits.max_messages,
            source: template,
        }),
        _ => {
            if problems.is_empty() {
                // The machine is only missing when a problem was recorded; keep the promise
                // of never failing without saying why all the same.
                problems.push(at(
                    "spec.thread".to_owned(),
                    "internal compiler error: the state machine could not be built".to_owned(),
                    None,
                ));
            }
            Err(problems)
        }
    }
}

/// Where a rule list sits, which decides what its rules may contain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Section {
    Routing,
    OnStart,
    OnMessage,
    OnTimeout,
}

impl Section {
    fn path(self) -> &'static str {
        match self {
            Section::Routing => "spec.routing",
            Section::OnStart => "spec.actions.on_start",
            Section::OnMessage => "spec.actions.on_message",
            Section::OnTimeout => "spec.actions.on_timeout",
        }
    }

    fn scope(self) -> Scope {
        match self {
            Section::Routing | Section::OnMessage => Scope::Message,
            Section::OnStart => Scope::Start,
            Section::OnTimeout => Scope::Timeout,
        }
    }

    /// Rules about a message may filter by performative; lifecycle rules have no message.
    fn has_message(self) -> bool {
        matches!(self, Section::Routing | Section::OnMessage)
    }
}

struct Resolver<'a> {
    at: &'a At<'a>,
    origin: Option<&'a Path>,
    /// The longest hook budget a template may ask for here.
    max_hook_timeout_ms: u64,
    problems: Vec<Diagnostic>,
    /// The declared intents that passed their checks.
    intents: Vec<Performative>,
}

impl Resolver<'_> {
    fn error(&mut self, path: impl Into<String>, message: impl Into<String>, hint: Option<String>) {
        self.problems
            .push((self.at)(path.into(), message.into(), hint));
    }

    fn positive(&mut self, path: &str) {
        self.error(path, "must be greater than 0", None);
    }

    fn header(&mut self, template: &Template) {
        if template.api_version != API_VERSION_V1 {
            self.error(
                "apiVersion",
                format!("unsupported apiVersion `{}`", template.api_version),
                Some(format!("supported versions: {API_VERSION_V1}")),
            );
        }
        if template.kind != KIND {
            self.error(
                "kind",
                format!("unsupported kind `{}`", template.kind),
                Some(format!("the only kind is `{KIND}`")),
            );
        }
        let name = &template.metadata.name;
        if !is_template_name(name) {
            self.error(
                "metadata.name",
                format!("`{name}` is not a valid template name"),
                Some(format!(
                    "use 1 to {MAX_TEMPLATE_NAME_LEN} lowercase ASCII letters, digits and `-`, \
                     starting with a letter"
                )),
            );
        }
        let participants = &template.spec.roles.participants;
        if participants.min < 1 {
            self.error(
                "spec.roles.participants.min",
                "a conversation needs at least 1 participant",
                None,
            );
        }
        if let Some(max) = participants.max
            && max < participants.min
        {
            self.error(
                "spec.roles.participants.max",
                format!("max ({max}) is less than min ({})", participants.min),
                None,
            );
        }
        for (field, value) in [("min", Some(participants.min)), ("max", participants.max)] {
            if let Some(value) = value
                && value > MAX_PARTICIPANTS
            {
                self.error(
                    format!("spec.roles.participants.{field}"),
                    format!("{field} ({value}) is over the engine's cap of {MAX_PARTICIPANTS}"),
                    Some(format!(
                        "a conversation has at most {MAX_PARTICIPANTS} participants"
                    )),
                );
            }
        }
    }

    fn intents(&mut self, declared: &[String]) {
        let mut seen = HashSet::new();
        for (index, name) in declared.iter().enumerate() {
            let path = format!("spec.intents[{index}]");
            if FipaAct::from_name(name).is_some() {
                self.error(
                    path,
                    format!("`{name}` is a FIPA act, not an intent"),
                    Some(
                        "FIPA acts are always available; declare only performatives beyond them"
                            .into(),
                    ),
                );
            } else if !is_intent_name(name) {
                self.error(
                    path,
                    format!("`{name}` is not a valid intent name"),
                    Some("use lowercase ASCII letters, digits, `-` and `_`, starting with a letter (at most 64)".into()),
                );
            } else if !seen.insert(name.as_str()) {
                self.error(path, format!("intent `{name}` is declared twice"), None);
            } else {
                self.intents
                    .push(Performative::Intent(Arc::from(name.as_str())));
            }
        }
    }

    /// Resolves a performative name used at `path`: a FIPA act or a declared intent.
    fn performative(&mut self, name: &str, path: &str) -> Option<Performative> {
        if let Some(act) = FipaAct::from_name(name) {
            return Some(Performative::Fipa(act));
        }
        if let Some(intent) = self.intents.iter().find(|intent| intent.name() == name) {
            return Some(intent.clone());
        }
        let known = FipaAct::ALL
            .iter()
            .map(|act| act.name())
            .chain(self.intents.iter().map(Performative::name));
        let suggestion = closest(name, known)
            .map(|close| format!("did you mean `{close}`? "))
            .unwrap_or_default();
        let (message, hint) = if is_intent_name(name) {
            (
                format!("unknown performative `{name}`"),
                format!(
                    "{suggestion}it is neither a FIPA act nor an intent; declare it under spec.intents"
                ),
            )
        } else {
            (
                format!("`{name}` is not a performative name"),
                format!(
                    "{suggestion}performatives are FIPA act names or declared intents (lowercase \
                     letters, digits, `-`, `_`)"
                ),
            )
        };
        self.error(path, message, Some(hint));
        None
    }

    /// Compiles the JSON Schema of `spec` (at `path`, which holds `schema`).
    fn schema(&mut self, spec: &SchemaSpec, path: &str) -> Option<JsonSchema> {
        match jsonschema::validator_for(&spec.schema) {
            Ok(validator) => Some(JsonSchema {
                source: spec.schema.clone(),
                validator,
            }),
            Err(error) => {
                let inner = pointer_to_path(&spec.schema, error.instance_path().as_str());
                self.error(
                    format!("{path}.schema{inner}"),
                    format!("invalid JSON Schema: {error}"),
                    Some(
                        "schemas are JSON Schema, draft 2020-12 unless `$schema` says otherwise"
                            .into(),
                    ),
                );
                None
            }
        }
    }

    /// Compiles a CEL expression and checks its variables against `scope`.
    fn expression(&mut self, source: &str, path: &str, scope: Scope) -> Option<Expression> {
        let program = match expressions::compile(source) {
            Ok(program) => program,
            Err(ExpressionError::Syntax(errors)) => {
                let excerpt = excerpt(source);
                let shown = errors.len().min(MAX_SYNTAX_ERRORS_PER_EXPRESSION);
                for error in &errors[..shown] {
                    self.error(
                        path,
                        format!("invalid CEL expression: {error}"),
                        Some(format!("in `{excerpt}`")),
                    );
                }
                if errors.len() > shown {
                    self.error(
                        path,
                        format!(
                            "{} more CEL syntax errors in this expression",
                            errors.len() - shown
                        ),
                        None,
                    );
                }
                return None;
            }
            Err(error) => {
                self.error(path, error.to_string(), None);
                return None;
            }
        };
        let unknown = expressions::unknown_variables(&program, scope);
        let allowed = scope.variables();
        for name in &unknown {
            let suggestion = closest(name, allowed.iter().copied())
                .map(|close| format!("did you mean `{close}`? "))
                .unwrap_or_default();
            self.error(
                path,
                format!("CEL expression uses unknown variable `{name}`"),
                Some(format!(
                    "{suggestion}variables here: {}",
                    allowed.join(", ")
                )),
            );
        }
        unknown.is_empty().then(|| Expression {
            source: Arc::from(source),
            variables: expressions::free_variables(&program),
            cost: expressions::cost_shape(&program),
            program,
        })
    }

    fn commitments(
        &mut self,
        specs: &[CommitmentSpec],
        thread: &ThreadSpec,
    ) -> Vec<CommitmentRule> {
        let names: Vec<&str> = thread.states.keys().map(String::as_str).collect();
        let id_of = |name: &str| state_id(&names, name);
        let mut rules = Vec::new();
        let mut first_index: BTreeMap<&str, usize> = BTreeMap::new();
        for (index, spec) in specs.iter().enumerate() {
            let path = format!("spec.commitments[{index}]");
            if spec.name.is_empty() {
                self.error(format!("{path}.name"), "commitment name is empty", None);
            } else if let Some(first) = first_index.get(spec.name.as_str()) {
                self.error(
                    format!("{path}.name"),
                    format!(
                        "commitment `{}` is already defined by spec.commitments[{first}]",
                        spec.name
                    ),
                    None,
                );
            } else {
                first_index.insert(&spec.name, index);
            }
            if spec.debtor == spec.creditor {
                self.error(
                    format!("{path}.creditor"),
                    "debtor and creditor are the same role",
                    Some("a commitment is owed by one party to the other".into()),
                );
            }
            if spec.initial.is_terminal() {
                self.error(
                    format!("{path}.initial"),
                    format!(
                        "a commitment cannot start in the terminal state `{}`",
                        state_name(spec.initial)
                    ),
                    Some("start it `pending` or `active`".into()),
                );
            }
            let created_by = self.performative(
                &spec.created_by.performative,
                &format!("{path}.created_by.performative"),
            );
            let mut transitions = Vec::new();
            for (t, transition) in spec.transitions.iter().enumerate() {
                let t_path = format!("{path}.transitions[{t}]");
                let performative =
                    self.performative(&transition.performative, &format!("{t_path}.performative"));
                for (s, state) in transition.states.iter().enumerate() {
                    if state.is_terminal() {
                        self.error(
                            format!("{t_path}.states[{s}]"),
                            format!(
                                "`{}` is a terminal commitment state; nothing moves out of it",
                                state_name(*state)
                            ),
                            Some("list only `pending` and `active`".into()),
                        );
                    }
                }
                let thread_states: Vec<Option<StateId>> = transition
                    .thread_states
                    .iter()
                    .enumerate()
                    .map(|(s, name)| {
                        self.state_ref(&names, name, &format!("{t_path}.thread_states[{s}]"), id_of)
                    })
                    .collect();
                if let (Some(performative), Some(thread_states)) = (
                    performative,
                    thread_states.into_iter().collect::<Option<Vec<_>>>(),
                ) {
                    transitions.push(CommitmentTransition {
                        performative,
                        from: transition.from,
                        states: transition.states.clone(),
                        thread_states,
                        to: transition.to,
                    });
                }
            }
            let deadline = spec.deadline.as_ref().map(|deadline| {
                let d_path = format!("{path}.deadline");
                if deadline.after_ms == 0 {
                    self.positive(&format!("{d_path}.after_ms"));
                }
                if deadline.armed_in.is_empty() {
                    self.error(
                        format!("{d_path}.armed_in"),
                        "armed_in is empty, so the deadline never runs",
                        Some("list `pending` and/or `active`".into()),
                    );
                }
                for (s, state) in deadline.armed_in.iter().enumerate() {
                    if state.is_terminal() {
                        self.error(
                            format!("{d_path}.armed_in[{s}]"),
                            format!(
                                "a deadline cannot run in the terminal state `{}`",
                                state_name(*state)
                            ),
                            Some("list only `pending` and `active`".into()),
                        );
                    }
                }
                CommitmentDeadline {
                    after_ms: deadline.after_ms,
                    armed_in: deadline.armed_in.clone(),
                    from_reply_by: deadline.from_reply_by,
                }
            });
            if let Some(created_by) = created_by {
                rules.push(CommitmentRule {
                    name: Arc::from(spec.name.as_str()),
                    debtor: spec.debtor,
                    creditor: spec.creditor,
                    created_by,
                    created_from: spec.created_by.from,
                    initial: spec.initial,
                    transitions,
                    deadline,
                });
            }
        }
        rules
    }

    fn rules(&mut self, rules: &[Rule], section: Section) -> Vec<CompiledRule> {
        let mut compiled = Vec::new();
        for (index, rule) in rules.iter().enumerate() {
            let path = format!("{}[{index}]", section.path());
            let mut performatives = Vec::new();
            if !rule.performatives.is_empty() && !section.has_message() {
                self.error(
                    format!("{path}.performatives"),
                    format!("`performatives` filters are not allowed in {}", section.path()),
                    Some("only rules about a message (spec.routing, spec.actions.on_message) can filter by performative".into()),
                );
            } else {
                for (p, name) in rule.performatives.iter().enumerate() {
                    if let Some(performative) =
                        self.performative(name, &format!("{path}.performatives[{p}]"))
                    {
                        performatives.push(performative);
                    }
                }
            }
            let when = rule.when.as_ref().and_then(|source| {
                self.expression(source, &format!("{path}.when"), section.scope())
            });
            let then = rule
                .then
                .iter()
                .enumerate()
                .filter_map(|(a, action)| {
                    self.action(action, &format!("{path}.then[{a}]"), section)
                })
                .collect();
            compiled.push(CompiledRule {
                name: Arc::from(rule.name.clone().unwrap_or_else(|| path.clone())),
                performatives,
                when,
                then,
            });
        }
        compiled
    }

    fn action(&mut self, action: &Action, path: &str, section: Section) -> Option<CompiledAction> {
        match action {
            Action::Reject(_) if section == Section::OnTimeout => self.error(
                format!("{path}.reject"),
                "`reject` is not allowed in spec.actions.on_timeout",
                Some("at a timeout there is no message or start to refuse; use `complete` to end the conversation".into()),
            ),
            Action::EvalVars(expressions) => {
                let mut compiled = Vec::new();
                for (name, source) in expressions {
                    let e_path = format!("{path}.eval_vars.{name}");
                    if name.is_empty() {
                        self.error(e_path.clone(), "variable name is empty", None);
                    }
                    if let Some(expression) = self.expression(source, &e_path, section.scope()) {
                        compiled.push((name.clone(), expression));
                    }
                }
                return Some(CompiledAction::EvalVars(compiled));
            }
            Action::Send(send) => {
                self.performative(&send.performative, &format!("{path}.send.performative"));
                self.receivers(&send.to, &format!("{path}.send.to"));
            }
            Action::Route(route) => {
                if section.has_message() {
                    self.receivers(&route.to, &format!("{path}.route.to"));
                } else {
                    self.error(
                        format!("{path}.route"),
                        format!("`route` is not allowed in {}", section.path()),
                        Some("`route` changes the receivers of the message being processed; use it in spec.routing or spec.actions.on_message".into()),
                    );
                }
            }
            Action::SetDeadline(deadline) if deadline.in_ms == 0 => {
                self.positive(&format!("{path}.set_deadline.in_ms"));
            }
            Action::ExtendDeadline(extend) if extend.by_ms == 0 => {
                self.positive(&format!("{path}.extend_deadline.by_ms"));
            }
            Action::Retry(retry) => {
                if section != Section::OnTimeout {
                    self.error(
                        format!("{path}.retry"),
                        format!("`retry` is not allowed in {}", section.path()),
                        Some("`retry` runs on_timeout again later; use it in spec.actions.on_timeout".into()),
                    );
                }
                if retry.after_ms == 0 {
                    self.positive(&format!("{path}.retry.after_ms"));
                }
                if retry.backoff.is_some_and(|backoff| !(backoff.is_finite() && backoff >= 1.0)) {
                    self.error(
                        format!("{path}.retry.backoff"),
                        "backoff must be a finite factor of at least 1.0",
                        Some("1.0 keeps the delay constant; 2.0 doubles it each time".into()),
                    );
                }
                if retry.max_attempts == Some(0) {
                    self.positive(&format!("{path}.retry.max_attempts"));
                }
            }
            Action::Escalate(escalate) if escalate.to.trim().is_empty() => self.error(
                format!("{path}.escalate.to"),
                "escalate.to must name an agent",
                None,
            ),
            _ => {}
        }
        Some(CompiledAction::Literal(action.clone()))
    }

    /// A receiver list must name at least one agent, and no empty ones.
    fn receivers(&mut self, to: &[String], path: &str) {
        if to.is_empty() {
            self.error(path, "must name at least one agent", None);
        }
        for (index, agent) in to.iter().enumerate() {
            if agent.trim().is_empty() {
                self.error(format!("{path}[{index}]"), "agent id is empty", None);
            }
        }
    }
}

/// `source`, shortened to [`MAX_EXCERPT_CHARS`] for quoting in a hint.
fn excerpt(source: &str) -> String {
    match source.char_indices().nth(MAX_EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}...", &source[..cut]),
        None => source.to_owned(),
    }
}

/// The id of state `name` given every state name in order (the `BTreeMap` order of
/// `spec.thread.states`, which is also the order of [`StateMachine::states`]).
fn state_id(names: &[&str], name: &str) -> Option<StateId> {
    names
        .binary_search(&name)
        .ok()
        .and_then(|index| u16::try_from(index).ok())
        .map(StateId)
}

/// 1..=64 lowercase ASCII letters, digits and `-`, starting with a letter.
fn is_template_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_lowercase())
        && name.len() <= MAX_TEMPLATE_NAME_LEN
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

fn state_name(state: CommitmentState) -> String {
    serde_json::to_value(state)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{state:?}"))
}

fn event_name(event: HookEvent) -> &'static str {
    match event {
        HookEvent::OnStart => "on_start",
        HookEvent::OnMessage => "on_message",
        HookEvent::OnTimeout => "on_timeout",
    }
}

/// A JSON pointer into `value` (`/properties/a/0`) in template path syntax (`.properties.a[0]`).
fn pointer_to_path(value: &Value, pointer: &str) -> String {
    let mut path = String::new();
    let mut current = Some(value);
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        match current {
            Some(Value::Array(items)) => match token.parse::<usize>() {
                Ok(index) => {
                    path.push_str(&format!("[{index}]"));
                    current = items.get(index);
                }
                Err(_) => {
                    path.push_str(&format!(".{token}"));
                    current = None;
                }
            },
            Some(Value::Object(map)) => {
                path.push_str(&format!(".{token}"));
                current = map.get(&token);
            }
            _ => {
                path.push_str(&format!(".{token}"));
                current = None;
            }
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_names() {
        assert!(is_template_name("fipa-request"));
        assert!(is_template_name("a1"));
        for bad in ["", "1a", "-a", "Fipa", "a_b", "a.b", &"a".repeat(65)] {
            assert!(!is_template_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn json_pointers_become_template_paths() {
        let schema = serde_json::json!({"allOf": [{"type": "x"}], "properties": {"a/b": {}}});
        assert_eq!(pointer_to_path(&schema, "/allOf/0/type"), ".allOf[0].type");
        assert_eq!(
            pointer_to_path(&schema, "/properties/a~1b"),
            ".properties.a/b"
        );
        assert_eq!(pointer_to_path(&schema, ""), "");
    }
}
