//! A [`Step`] is one unit of work on a conversation (a start, a message, a timer): it
//! applies each event to the live state as it emits it, and collects the events and inbox
//! deliveries into the [`Commit`] the store must accept before anyone is told.

use std::sync::Arc;

use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_protocol::message::{ENGINE_PARTY, Message, MessageSignature};

use crate::conversation::Conversation;
use crate::store::{Commit, Delivery};

/// Events and deliveries produced so far by one unit of work.
pub struct Step<'a> {
    /// The conversation being changed; already reflects every emitted event.
    pub conversation: &'a mut Conversation,
    /// The engine clock's reading for this step.
    pub now: u64,
    /// The hook runtime templates' wasm hooks run on (`None`: the engine has none).
    pub hooks: Option<&'a dyn crate::hooks::HookCaller>,
    /// Where the step runs, which bounds its hook calls (an async worker: a short slice).
    pub site: crate::hooks::CallSite,
    /// Set when a hook call could not finish where the step runs
    /// ([`crate::hooks::HookFailure::NeedsPool`]): whatever the step did is to be dropped
    /// and the step run again on the hook pool.
    pub needs_pool: bool,
    base_version: u64,
    events: Vec<ConversationEvent>,
    deliveries: Vec<Delivery>,
}

impl<'a> Step<'a> {
    /// Starts a step on `conversation` at time `now`.
    pub fn new(conversation: &'a mut Conversation, now: u64) -> Step<'a> {
        let base_version = conversation.version;
        Step {
            conversation,
            now,
            hooks: None,
            site: crate::hooks::CallSite::Owned,
            needs_pool: false,
            base_version,
            events: Vec::new(),
            deliveries: Vec::new(),
        }
    }

    /// Starts a step on `conversation` at time `now` whose hooks run on `hooks`, at `site`.
    pub fn with_hooks(
        conversation: &'a mut Conversation,
        now: u64,
        hooks: Option<&'a dyn crate::hooks::HookCaller>,
        site: crate::hooks::CallSite,
    ) -> Step<'a> {
        let mut step = Step::new(conversation, now);
        step.hooks = hooks;
        step.site = site;
        step
    }

    /// Records an event, chained to the one before it, and applies it.
    pub fn emit(&mut self, kind: EventKind) {
        let event = ConversationEvent {
            seq: self.conversation.version + 1,
            at: self.now,
            prev: Some(self.conversation.chain.head()),
            kind,
        };
        self.conversation.apply(&event);
        self.events.push(event);
    }

    /// Records an accepted message, applies it, and queues it for its receivers' inboxes.
    /// A message the engine sends itself is signed first, when the engine has a key.
    pub fn emit_message(
        &mut self,
        message: Arc<Message>,
        transitions: Vec<colloquy_protocol::event::ThreadTransition>,
    ) {
        let message = self.signed_by_engine(message);
        for receiver in &message.receivers {
            self.deliveries.push(Delivery {
                agent: receiver.clone(),
                conversation_id: self.conversation.id().clone(),
                message: message.clone(),
            });
        }
        self.emit(EventKind::MessageAccepted {
            message,
            transitions,
        });
    }

    /// `message` signed with the engine's key (over the fields a party signs, its receivers
    /// as `to`) when the engine sent it and has a key; as it is otherwise.
    fn signed_by_engine(&self, message: Arc<Message>) -> Arc<Message> {
        let Some(signer) = &self.conversation.signer else {
            return message;
        };
        if *message.sender != *ENGINE_PARTY || message.signature.is_some() {
            return message;
        }
        let to: Vec<String> = message.receivers.iter().map(|r| r.to_string()).collect();
        let fields = message.fields_to_sign(self.conversation.id(), &to);
        match colloquy_trust::message::sign_fields(signer, &fields) {
            Ok(jws) => {
                let mut signed = Arc::unwrap_or_clone(message);
                signed.signature = Some(Arc::new(MessageSignature { jws, to }));
                Arc::new(signed)
            }
            Err(error) => {
                tracing::warn!(%error, "the engine's message goes unsigned");
                message
            }
        }
    }

    /// Whether anything was emitted.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// The events emitted so far.
    pub fn events(&self) -> &[ConversationEvent] {
        &self.events
    }

    /// The commit for the store.
    pub fn into_commit(self, retention_ms: u64) -> Commit {
        Commit {
            conversation_id: self.conversation.id().clone(),
            template: self.conversation.started.template.clone(),
            expected_version: self.base_version,
            wake_at: self.conversation.next_wake(retention_ms),
            events: self.events,
            deliveries: self.deliveries,
            fence: None,
        }
    }
}
