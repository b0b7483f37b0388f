//! What one reader may see of a conversation.
//!
//! The initiator, the observers (agents a rule or hook routed or escalated to) and
//! administrators see all of it. A participant sees its own thread with the initiator: the
//! messages it sent or received, its thread's moves and deadlines, the commitments of its
//! thread, and the violations that are its own or no one's. What concerns the conversation as
//! a whole (its start, vars, deadline, retries, escalations, completion) is for every reader.
//! So in a Contract-Net a bidder sees the call for proposals but not the other bidders'
//! proposals, and not how the other threads went.
//!
//! A refused message (`message_refused`) was never delivered to anyone: only its sender and
//! administrators see it, whoever else reads the conversation.

use std::collections::HashSet;
use std::sync::Arc;

use colloquy_protocol::conversation::{ConversationView, SendReceipt, Violation};
use colloquy_protocol::event::{ConversationEvent, EventKind, ThreadTransition};
use colloquy_protocol::message::{AgentId, Message};

use crate::conversation::Conversation;

/// What one reader may see; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sight {
    /// Everything: an administrator.
    All,
    /// Everything but other agents' refused messages: the initiator or an observer.
    Whole {
        /// The reader.
        reader: AgentId,
    },
    /// One participant's thread.
    Thread {
        /// The participant.
        participant: AgentId,
        /// The ids of its thread's commitments.
        commitments: HashSet<Arc<str>>,
    },
}

impl Sight {
    /// What `viewer` may see of `conversation` (`None`: an administrator). The caller has
    /// checked that the viewer may read it at all ([`Conversation::can_read`]). Only a
    /// participant has a thread (the initiator is never one of them).
    pub fn of(conversation: &Conversation, viewer: Option<&str>) -> Sight {
        let Some(viewer) = viewer else {
            return Sight::All;
        };
        match conversation.thread_index(viewer) {
            Some(thread) => Sight::Thread {
                participant: conversation.threads[thread].participant.clone(),
                commitments: conversation
                    .commitments
                    .iter()
                    .filter(|commitment| commitment.thread == thread)
                    .map(|commitment| commitment.id.clone())
                    .collect(),
            },
            None => Sight::Whole {
                reader: AgentId::from(viewer),
            },
        }
    }

    /// What the sender of a message may see of its receipt: [`Sight::of`] without the
    /// commitments, which a receipt does not show. With one thread there is nothing to cut.
    pub fn of_sender(conversation: &Conversation, sender: &str) -> Sight {
        if conversation.threads.len() < 2 || *conversation.started.initiator == *sender {
            return Sight::All;
        }
        match conversation.thread_index(sender) {
            Some(thread) => Sight::Thread {
                participant: conversation.threads[thread].participant.clone(),
                commitments: HashSet::new(),
            },
            None => Sight::All,
        }
    }

    /// Whether the reader may see `message`.
    pub fn message(&self, message: &Message) -> bool {
        match self {
            Sight::All | Sight::Whole { .. } => true,
            Sight::Thread { participant, .. } => {
                message.sender == *participant || message.receivers.contains(participant)
            }
        }
    }

    /// Whether the reader may see the thread of `participant`.
    pub fn thread(&self, of: &str) -> bool {
        match self {
            Sight::All | Sight::Whole { .. } => true,
            Sight::Thread { participant, .. } => &**participant == of,
        }
    }

    /// Whether the reader may see the commitment `id`.
    pub fn commitment(&self, id: &str) -> bool {
        match self {
            Sight::All | Sight::Whole { .. } => true,
            Sight::Thread { commitments, .. } => commitments.contains(id),
        }
    }

    /// Whether the reader may see `violation`: its own, or one nobody is responsible for.
    pub fn violation(&self, violation: &Violation) -> bool {
        match self {
            Sight::All | Sight::Whole { .. } => true,
            Sight::Thread { participant, .. } => violation
                .agent
                .as_ref()
                .is_none_or(|agent| agent == participant),
        }
    }

    /// Whether the reader may see a refused message of `sender`'s: its own, or any for an
    /// administrator.
    pub fn refusal(&self, sender: &str) -> bool {
        match self {
            Sight::All => true,
            Sight::Whole { reader } => &**reader == sender,
            Sight::Thread { participant, .. } => &**participant == sender,
        }
    }

    /// `view` cut to what the reader may see.
    pub fn view(&self, mut view: ConversationView) -> ConversationView {
        if let Sight::Thread { .. } = self {
            view.messages.retain(|message| self.message(message));
            view.threads
                .retain(|thread| self.thread(&thread.participant));
            view.commitments
                .retain(|commitment| self.commitment(&commitment.id));
            view.violations
                .retain(|violation| self.violation(violation));
        }
        view
    }

    /// `receipt` cut to what the reader (its sender) may see.
    pub fn receipt(&self, mut receipt: SendReceipt) -> SendReceipt {
        if let Sight::Thread { .. } = self {
            receipt
                .threads
                .retain(|thread| self.thread(&thread.participant));
            self.transitions(&mut receipt.transitions);
            receipt.violation = receipt
                .violation
                .filter(|violation| self.violation(violation));
        }
        receipt
    }

    /// `event` as the reader may see it, or `None`. Events come in log order: a commitment
    /// created on the reader's thread is remembered, so that its later moves are shown too.
    pub fn event(&mut self, mut event: ConversationEvent) -> Option<ConversationEvent> {
        let visible = match &mut event.kind {
            EventKind::MessageAccepted {
                message,
                transitions,
            } => {
                self.transitions(transitions);
                self.message(message)
            }
            EventKind::MessageRefused(refusal) => self.refusal(&refusal.sender),
            EventKind::ThreadExpired(transition) => self.thread(&transition.participant),
            EventKind::ThreadDeadlineSet { participant, .. } => self.thread(participant),
            EventKind::ViolationRecorded(violation) => self.violation(violation),
            EventKind::CommitmentCreated(commitment) => {
                let ours = self.thread(&commitment.debtor) || self.thread(&commitment.creditor);
                if let (true, Sight::Thread { commitments, .. }) = (ours, &mut *self) {
                    commitments.insert(commitment.id.clone());
                }
                ours
            }
            EventKind::CommitmentMoved { id, .. } => self.commitment(id),
            EventKind::Started(_)
            | EventKind::VarsMerged { .. }
            | EventKind::DeadlineSet { .. }
            | EventKind::RetryScheduled { .. }
            | EventKind::RetryFired { .. }
            | EventKind::Escalated { .. }
            | EventKind::Completed { .. } => true,
        };
        visible.then_some(event)
    }

    fn transitions(&self, transitions: &mut Vec<ThreadTransition>) {
        transitions.retain(|transition| self.thread(&transition.participant));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use colloquy_protocol::conversation::ViolationKind;
    use colloquy_protocol::message::Content;
    use colloquy_protocol::performative::Performative;

    fn bidder(name: &str) -> Sight {
        Sight::Thread {
            participant: AgentId::from(name),
            commitments: HashSet::from([Arc::from("c/1")]),
        }
    }

    fn message(sender: &str, receivers: &[&str]) -> Message {
        Message {
            id: Arc::from("m"),
            performative: Performative::parse("propose").expect("a FIPA act"),
            sender: AgentId::from(sender),
            receivers: receivers.iter().map(|r| AgentId::from(*r)).collect(),
            content: Content::default(),
            in_reply_to: None,
            reply_by: None,
            sent_at: 1,
            signature: None,
        }
    }

    fn transition(participant: &str) -> ThreadTransition {
        ThreadTransition {
            participant: AgentId::from(participant),
            from: Arc::from("called"),
            to: Arc::from("proposed"),
            outcome: None,
            deadline: None,
        }
    }

    #[test]
    fn a_bidder_sees_the_call_and_its_own_proposal_but_not_a_rivals() {
        let p1 = bidder("p1");
        assert!(p1.message(&message("manager", &["p1", "p2"])));
        assert!(p1.message(&message("p1", &["manager"])));
        assert!(!p1.message(&message("p2", &["manager"])));
        assert!(Sight::All.message(&message("p2", &["manager"])));
        assert!(p1.thread("p1") && !p1.thread("p2"));
        assert!(p1.commitment("c/1") && !p1.commitment("c/2"));
    }

    #[test]
    fn events_are_cut_to_the_readers_thread_and_its_commitments_are_followed() {
        let mut p1 = bidder("p1");
        let event = |kind| ConversationEvent {
            seq: 1,
            at: 1,
            prev: None,
            kind,
        };
        let call = p1
            .event(event(EventKind::MessageAccepted {
                message: Arc::new(message("manager", &["p1", "p2"])),
                transitions: vec![transition("p1"), transition("p2")],
            }))
            .expect("the call is for p1 too");
        let EventKind::MessageAccepted { transitions, .. } = call.kind else {
            panic!("kind changed");
        };
        assert_eq!(transitions, vec![transition("p1")]);
        let rival = EventKind::MessageAccepted {
            message: Arc::new(message("p2", &["manager"])),
            transitions: vec![transition("p2")],
        };
        assert_eq!(p1.event(event(rival)), None);
        assert_eq!(
            p1.event(event(EventKind::ThreadExpired(Box::new(transition("p2"))))),
            None
        );
        let late = |agent: Option<&str>| {
            EventKind::ViolationRecorded(Box::new(Violation {
                kind: ViolationKind::LateMessage,
                agent: agent.map(AgentId::from),
                message_id: None,
                detail: String::new(),
                at: 1,
            }))
        };
        assert!(p1.event(event(late(Some("p1")))).is_some());
        assert!(p1.event(event(late(None))).is_some());
        assert!(p1.event(event(late(Some("p2")))).is_none());
        assert!(
            p1.event(event(EventKind::DeadlineSet { deadline: None }))
                .is_some()
        );
        // A commitment created on p1's thread while it reads: its moves show too.
        let moved = |id: &str| EventKind::CommitmentMoved {
            id: Arc::from(id),
            to: colloquy_protocol::conversation::CommitmentState::Active,
            deadline: None,
            cause: Arc::from("m"),
        };
        assert!(p1.event(event(moved("c/3"))).is_none());
        let created = colloquy_protocol::conversation::CommitmentView {
            id: Arc::from("c/3"),
            conversation_id: Arc::from("c"),
            name: Arc::from("perform-contract"),
            debtor: AgentId::from("p1"),
            creditor: AgentId::from("manager"),
            state: colloquy_protocol::conversation::CommitmentState::Pending,
            deadline: None,
            created_by: Arc::from("m"),
        };
        assert!(
            p1.event(event(EventKind::CommitmentCreated(Box::new(created))))
                .is_some()
        );
        assert!(p1.event(event(moved("c/3"))).is_some());
    }
}
