//! Builds a hook's JSON event ([`HookInput`]) from a conversation, borrowing everything.

use std::borrow::Cow;

use colloquy_protocol::conversation::ConversationStatus;
use colloquy_protocol::hook::{
    HOOKS_ABI_VERSION, HookConversation, HookInput, HookMessage, HookStatus, HookThread,
    HookTimeout,
};
use colloquy_protocol::message::{AgentId, Message};
use colloquy_protocol::template::HookEvent;
use serde_json::Value;

use crate::conversation::Conversation;
use crate::rules::TimeoutInfo;

/// The message an `on_message` hook sees: the accepted message, its receivers before routing
/// and its content as sent.
pub struct MessageFacts<'a> {
    /// The message being built (receivers not yet set).
    pub message: &'a Message,
    /// Its receivers before routing.
    pub receivers: &'a [AgentId],
    /// Its content.
    pub content: &'a Value,
}

/// The event for `hook` on `conversation` (as it was before the event).
pub fn hook_input<'a>(
    conversation: &'a Conversation,
    hook: HookEvent,
    now: u64,
    message: Option<MessageFacts<'a>>,
    timeout: Option<&'a TimeoutInfo>,
) -> HookInput<'a> {
    let started = &*conversation.started;
    let machine = &conversation.template.machine;
    let config = conversation
        .template
        .hooks
        .as_ref()
        .map(|spec| Cow::Borrowed(&spec.config))
        .unwrap_or(Cow::Owned(Value::Null));
    HookInput {
        abi_version: HOOKS_ABI_VERSION,
        hook,
        now,
        conversation: HookConversation {
            id: Cow::Borrowed(&started.id),
            template: Cow::Borrowed(&started.template),
            revision: Cow::Borrowed(&started.revision),
            status: match conversation.status {
                ConversationStatus::Active => HookStatus::Active,
                _ => HookStatus::Completed,
            },
            outcome: conversation.outcome,
            initiator: Cow::Borrowed(&started.initiator),
            participants: started
                .participants
                .iter()
                .map(|p| Cow::Borrowed(&**p))
                .collect(),
            threads: conversation
                .threads
                .iter()
                .map(|thread| HookThread {
                    participant: Cow::Borrowed(&thread.participant),
                    state: Cow::Borrowed(&machine.state(thread.state).name),
                    outcome: conversation.thread_outcome(thread),
                    deadline: thread.deadline,
                })
                .collect(),
            vars: Cow::Borrowed(&conversation.vars),
            parameters: Cow::Borrowed(&started.parameters),
            context: Cow::Borrowed(&started.context),
            deadline: conversation.deadline,
            retry_attempts: conversation.retry.attempts,
        },
        message: message.map(|facts| HookMessage {
            id: Cow::Borrowed(&facts.message.id),
            performative: Cow::Borrowed(facts.message.performative.name()),
            sender: Cow::Borrowed(&facts.message.sender),
            receivers: facts
                .receivers
                .iter()
                .map(|r| Cow::Borrowed(&**r))
                .collect(),
            content: Cow::Borrowed(facts.content),
            in_reply_to: facts.message.in_reply_to.as_deref().map(Cow::Borrowed),
            reply_by: facts.message.reply_by,
        }),
        timeout: timeout.map(|info| HookTimeout {
            kind: Cow::Borrowed(info.kind),
            participant: info.participant.as_deref().map(Cow::Borrowed),
            attempt: info.attempt,
        }),
        config,
    }
}
