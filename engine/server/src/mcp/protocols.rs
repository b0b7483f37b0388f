//! What a model needs to know of a template to take part: its roles, the state machine of a
//! thread, the schemas of contents and parameters. Never its routing rules, hooks or source
//! text, which stay behind the policy routes' reads.

use std::fmt::Write as _;

use colloquy_policy::CompiledTemplate;
use colloquy_protocol::template::Role;
use serde_json::{Value, json};

/// A template as `list_templates` and the `colloquy://templates/{name}` resource show it.
pub fn summary(template: &CompiledTemplate) -> Value {
    let source = &template.source;
    let spec = &source.spec;
    let mut summary = json!({
        "name": &*template.name,
        "revision": &*template.revision,
        "enforcement": spec.enforcement,
        "roles": spec.roles,
        "messages": spec.messages,
        "thread": spec.thread,
    });
    if let Some(description) = &source.metadata.description {
        summary["description"] = Value::String(description.clone());
    }
    if let Some(parameters) = &spec.parameters {
        summary["parameters"] = serde_json::to_value(parameters).unwrap_or(Value::Null);
    }
    summary
}

/// The `take_part` prompt: a briefing on `template`'s protocol for a model playing `role`
/// (`initiator` or `participant`).
pub fn briefing(template: &CompiledTemplate, role: Role) -> String {
    let spec = &template.source.spec;
    let (me, other) = match role {
        Role::Initiator => ("initiator", "participant"),
        Role::Participant => ("participant", "initiator"),
    };
    let mut text = String::new();
    let _ = writeln!(
        text,
        "You take part in Colloquy conversations under the template `{}` as its {me}.",
        template.name
    );
    if let Some(description) = &template.source.metadata.description {
        let _ = writeln!(text, "What it is for: {description}");
    }
    let role_description = match role {
        Role::Initiator => spec.roles.initiator.description.as_deref(),
        Role::Participant => spec.roles.participants.description.as_deref(),
    };
    if let Some(description) = role_description {
        let _ = writeln!(text, "Your role: {description}");
    }
    let _ = writeln!(
        text,
        "\nEach participant has its own thread with the initiator; a thread moves through these \
         states, and in each state only the listed performatives may be sent, each by the side \
         named (the thread starts in `{}`):",
        spec.thread.initial
    );
    for (name, state) in &spec.thread.states {
        let _ = write!(text, "- `{name}`");
        if let Some(outcome) = &state.terminal {
            let _ = write!(text, " (ends the thread: {})", json!(outcome));
        }
        if let Some(description) = &state.description {
            let _ = write!(text, ": {description}");
        }
        let _ = writeln!(text);
        for transition in &state.transitions {
            let who = if transition.from == role {
                "you"
            } else {
                other
            };
            let _ = write!(
                text,
                "  - {who} may send `{}` → `{}`",
                transition.performative, transition.to
            );
            if let Some(guard) = &transition.when {
                let _ = write!(text, " (only when `{guard}` holds)");
            }
            let _ = writeln!(text);
        }
    }
    if !spec.messages.is_empty() {
        let _ = writeln!(text, "\nMessage contents must satisfy these JSON Schemas:");
        for (performative, schema) in &spec.messages {
            let _ = write!(text, "- `{performative}`: {}", schema.schema);
            if let Some(description) = &schema.description {
                let _ = write!(text, " ({description})");
            }
            let _ = writeln!(text);
        }
    }
    let enforcement = json!(spec.enforcement);
    let _ = writeln!(
        text,
        "\nEnforcement is {enforcement}: under \"enforce\" a move the protocol does not allow \
         is refused; under \"report\" it is accepted and recorded as a violation that every \
         party can see. Keep to the protocol either way."
    );
    let _ = writeln!(
        text,
        "\nHow to act: call `wait_for_messages` in a loop (passing each result's next_cursor) \
         to receive messages; call `get_conversation` to see a conversation and the moves open \
         to you; answer with `send_message`, setting in_reply_to to the id of the message you \
         answer.{}",
        match role {
            Role::Initiator => format!(
                " Start a conversation with `start_conversation` (template `{}`).",
                template.name
            ),
            Role::Participant => String::new(),
        }
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contract_net() -> std::sync::Arc<CompiledTemplate> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../templates/fipa-contract-net.yaml");
        let compiler = colloquy_policy::compiler::TemplateCompiler::default();
        std::sync::Arc::new(compiler.compile_file(&path).expect("the built-in template"))
    }

    #[test]
    fn a_summary_shows_the_protocol_and_not_the_source() {
        let summary = summary(&contract_net());
        assert_eq!(summary["name"], "fipa-contract-net");
        assert_eq!(summary["thread"]["initial"], "start");
        assert!(summary["messages"]["propose"]["schema"].is_object());
        assert!(summary.get("routing").is_none() && summary.get("hooks").is_none());
    }

    #[test]
    fn a_participant_is_told_its_own_moves() {
        let text = briefing(&contract_net(), Role::Participant);
        assert!(text.contains("as its participant"), "{text}");
        assert!(text.contains("you may send `propose`"), "{text}");
        assert!(text.contains("initiator may send `cfp`"), "{text}");
    }
}
