//! Starting a conversation: the request checked ([`prepare_start`]: participants, context,
//! parameters) and the first events ([`on_start`]).

use std::sync::Arc;

use colloquy_policy::CompiledTemplate;
use colloquy_protocol::conversation::ViolationKind;
use colloquy_protocol::event::{EventKind, Started};
use colloquy_protocol::message::{AgentId, ENGINE_PARTY, StartConversation};
use colloquy_protocol::template::{ContextOverflow, HookEvent, MAX_PARTICIPANTS};
use serde_json::{Map, Value, json};

use crate::error::EngineError;
use crate::hooks::input::hook_input;
use crate::rules::{Effects, Scope};
use crate::step::Step;

use super::*;

/// Longest agent id accepted.
pub const MAX_AGENT_ID_LEN: usize = 256;

/// Checks a start request and builds the conversation's first event. Emits nothing; the
/// caller creates the conversation from the returned facts and then calls [`on_start`].
pub fn prepare_start(
    template: &CompiledTemplate,
    id: Arc<str>,
    initiator: &str,
    request: &StartConversation,
    now: u64,
) -> Result<Started, EngineError> {
    check_agent_id(initiator, "/initiator")?;
    let participants = check_participants(template, initiator, &request.participants)?;
    let parameters = match &request.parameters {
        Value::Null => Value::Object(Map::new()),
        object @ Value::Object(_) => object.clone(),
        other => return Err(not_an_object("/parameters", "parameters", other)),
    };
    if !matches!(request.context, Value::Null | Value::Object(_)) {
        return Err(not_an_object("/context", "context", &request.context));
    }
    if let Some(schema) = &template.parameters_schema {
        validate(schema, &parameters, "/parameters")?;
    }
    let context = cap_context(template, &request.context)?;
    if request.deadline_ms == Some(0) {
        return Err(EngineError::invalid(
            "/deadline_ms",
            "`deadline_ms` is 0: the conversation would be over as it starts; it is the \
             time it may run, in milliseconds",
        ));
    }
    let deadline = request
        .deadline_ms
        .or(template.conversation_deadline_ms)
        .map(|ms| now.saturating_add(ms));
    Ok(Started {
        id,
        template: template.name.clone(),
        revision: template.revision.clone(),
        initiator: Arc::from(initiator),
        participants,
        parameters,
        context,
        deadline,
        // The engine step's own, set once its span exists (`Engine::start`).
        trace: None,
    })
}

/// A start's `parameters` and `context` are objects (CEL reads their fields by name; the
/// template format defines nothing else), or absent.
pub(super) fn not_an_object(pointer: &str, field: &str, value: &Value) -> EngineError {
    let kind = match value {
        Value::Null | Value::Object(_) => "an object",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
    };
    EngineError::invalid(
        pointer,
        format!("`{field}` must be a JSON object (or absent), not {kind}"),
    )
}

/// Emits the `started` event and runs the `on_start` rules.
pub fn on_start(step: &mut Step<'_>) -> Result<(), EngineError> {
    let template = step.conversation.template.clone();
    let mut effects = Effects::default();
    Scope {
        conversation: step.conversation,
        message: None,
        timeout: None,
        now: step.now,
    }
    .run_rules(&template.on_start, &mut effects)?;
    let hook_error = if effects.reject.is_none() {
        let input = || hook_input(step.conversation, HookEvent::OnStart, step.now, None, None);
        run_hook(
            step.conversation,
            (step.hooks, step.site),
            HookEvent::OnStart,
            input,
            &mut effects,
        )?
    } else {
        None
    };
    if let Some((rule, reason)) = effects.reject.take() {
        return Err(EngineError::Rejected { rule, reason });
    }
    let started = step.conversation.started.clone();
    step.emit(EventKind::Started(started));
    if let Some(detail) = hook_error {
        record_violation(step, ViolationKind::HookError, None, None, detail);
    }
    apply_effects(step, effects, None);
    check_completion(step);
    Ok(())
}

pub(super) fn check_agent_id(agent: &str, pointer: &str) -> Result<(), EngineError> {
    match agent_id_problem(agent) {
        Some(problem) => Err(EngineError::invalid(pointer, problem)),
        None => Ok(()),
    }
}

/// What is wrong with `agent` as an agent id, if anything.
pub(super) fn agent_id_problem(agent: &str) -> Option<String> {
    if agent.is_empty() || agent.len() > MAX_AGENT_ID_LEN || agent.chars().any(char::is_control) {
        return Some(format!(
            "agent ids are 1 to {MAX_AGENT_ID_LEN} printable characters"
        ));
    }
    if agent == ENGINE_PARTY {
        return Some(format!("`{ENGINE_PARTY}` is reserved"));
    }
    None
}

pub(super) fn check_participants(
    template: &CompiledTemplate,
    initiator: &str,
    participants: &[String],
) -> Result<Vec<AgentId>, EngineError> {
    let count = participants.len();
    let min = template.min_participants as usize;
    // The compiler keeps a template's max within the engine's cap.
    let max = template.max_participants.unwrap_or(MAX_PARTICIPANTS) as usize;
    if count < min || count > max {
        let range = if max == min {
            format!("exactly {min}")
        } else {
            format!("{min} to {max}")
        };
        return Err(EngineError::invalid(
            "/participants",
            format!(
                "template `{}` takes {range} participants, got {count}",
                template.name
            ),
        ));
    }
    let mut seen: Vec<AgentId> = Vec::with_capacity(count);
    for (index, participant) in participants.iter().enumerate() {
        // Built only for an error: this runs on every start.
        let pointer = || format!("/participants/{index}");
        if let Some(problem) = agent_id_problem(participant) {
            return Err(EngineError::invalid(&pointer(), problem));
        }
        if participant == initiator {
            return Err(EngineError::invalid(
                &pointer(),
                "the initiator cannot be a participant",
            ));
        }
        if seen.iter().any(|known| &**known == participant) {
            return Err(EngineError::invalid(
                &pointer(),
                format!("`{participant}` is listed twice"),
            ));
        }
        seen.push(Arc::from(participant.as_str()));
    }
    Ok(seen)
}

pub(super) fn cap_context(
    template: &CompiledTemplate,
    context: &Value,
) -> Result<Value, EngineError> {
    let max = template.context.max_bytes;
    let size = json_size(context);
    if size <= max {
        return Ok(context.clone());
    }
    match (template.context.on_overflow, context) {
        (ContextOverflow::Compact, Value::Object(fields)) => Ok(compact(fields, max)),
        _ => Err(EngineError::ContextTooLarge { size, max }),
    }
}

pub(super) fn json_size(value: &Value) -> usize {
    serde_json::to_vec(value)
        .map(|bytes| bytes.len())
        .unwrap_or(usize::MAX)
}

/// Drops the largest top-level fields until the object (with its `_dropped` list) fits.
pub(super) fn compact(fields: &Map<String, Value>, max: usize) -> Value {
    let mut kept = fields.clone();
    let mut by_size: Vec<(usize, String)> = fields
        .iter()
        .map(|(key, value)| (json_size(value), key.clone()))
        .collect();
    by_size.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let mut dropped = Vec::new();
    for (_, key) in by_size {
        let mut candidate = kept.clone();
        candidate.insert("_dropped".to_owned(), json!(dropped));
        if json_size(&Value::Object(candidate)) <= max {
            break;
        }
        kept.remove(&key);
        dropped.push(key);
    }
    kept.insert("_dropped".to_owned(), json!(dropped));
    if json_size(&Value::Object(kept.clone())) > max {
        // Even the list of dropped names does not fit: keep only that it was compacted.
        return json!({ "_dropped": "*" });
    }
    Value::Object(kept)
}
