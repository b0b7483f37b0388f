//! Where a live conversation's hash chain stands (`colloquy_trust::chain`): what the next
//! event's `prev` is.
//!
//! Each event is hashed once: a [`ChainTail`] keeps the last event and hashes it only when
//! the next one is emitted, so replaying a log from the store hashes nothing but its last
//! event (and a conversation loaded only to be read hashes nothing). Events recorded before
//! chains existed carry no `prev`: they are hashed as they are replayed, from the first, so
//! the first event written after the upgrade carries a `prev` that covers them all.

use std::sync::Arc;

use colloquy_protocol::event::ConversationEvent;
use colloquy_trust::chain::{self, GENESIS};

/// The chain's state after the events applied so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum ChainTail {
    /// No event yet: the next `prev` is [`GENESIS`].
    #[default]
    Empty,
    /// The chain hash of the last event.
    Head(Arc<str>),
    /// The last event, which carries its `prev`: hashed when the next event needs it.
    Last(Box<ConversationEvent>),
}

impl ChainTail {
    /// Takes `event`, the next of the log, into the chain.
    pub fn follow(&mut self, event: &ConversationEvent) {
        *self = match event.prev {
            Some(_) => ChainTail::Last(Box::new(event.clone())),
            // Recorded before chains: hashed now, onto what came before.
            None => ChainTail::Head(link(&self.head(), event)),
        };
    }

    /// The chain hash of the last event ([`GENESIS`] before the first): the next event's
    /// `prev`. Remembers it, so each event is hashed once.
    pub fn head(&mut self) -> Arc<str> {
        match self {
            ChainTail::Empty => Arc::from(GENESIS),
            ChainTail::Head(head) => head.clone(),
            ChainTail::Last(event) => {
                let prev = event.prev.clone().unwrap_or_else(|| Arc::from(GENESIS));
                let head = link(&prev, event);
                *self = ChainTail::Head(head.clone());
                head
            }
        }
    }
}

/// The chain hash of `event` after `prev`.
fn link(prev: &str, event: &ConversationEvent) -> Arc<str> {
    // `prev` is a digest the engine wrote. One a store gives back malformed hashes into a
    // head that breaks the chain, as the verifier's walk does, rather than stop the
    // conversation: the audit record shows the break.
    let linked = chain::link(prev, &body_digest(event));
    Arc::from(linked.unwrap_or_else(|why| chain::sha256_hex(why.as_bytes())))
}

/// The body digest of `event` (`colloquy_trust::chain::body_digest`).
pub fn body_digest(event: &ConversationEvent) -> String {
    serde_json::to_value(event)
        .map_err(|error| error.to_string())
        .and_then(chain::body_digest_of)
        // An event is a JSON object with string keys: it always serializes to one.
        .unwrap_or_else(|why| chain::sha256_hex(why.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use colloquy_protocol::event::EventKind;

    fn event(seq: u64, prev: Option<Arc<str>>) -> ConversationEvent {
        ConversationEvent {
            seq,
            at: seq,
            prev,
            kind: EventKind::RetryFired { attempt: 1 },
        }
    }

    fn values(events: &[ConversationEvent]) -> Vec<serde_json::Value> {
        events
            .iter()
            .map(|event| serde_json::to_value(event).unwrap())
            .collect()
    }

    #[test]
    fn the_tail_computes_the_chain_the_verifier_computes() {
        let mut tail = ChainTail::default();
        let mut events = Vec::new();
        for seq in 1..=3 {
            let event = event(seq, Some(tail.head()));
            tail.follow(&event);
            events.push(event);
        }
        let summary = colloquy_trust::record::chain_of(&values(&events)).unwrap();
        assert_eq!(*tail.head(), summary.head);
        assert_eq!(summary.chained_from, Some(1));
    }

    #[test]
    fn a_log_from_before_chains_is_hashed_as_it_is_replayed() {
        let mut tail = ChainTail::default();
        let mut events = vec![event(1, None), event(2, None)];
        for event in &events {
            tail.follow(event);
        }
        let next = event(3, Some(tail.head()));
        events.push(next);
        let summary = colloquy_trust::record::chain_of(&values(&events)).unwrap();
        assert_eq!(summary.chained_from, Some(3));
    }
}
