//! The moves a party may make now: what its protocol state lets it send, and to whom. Read
//! from the template's state machine alone; a transition's `when` guard is reported, not
//! evaluated, since it reads the message that has not been written yet.

use std::sync::Arc;

use colloquy_protocol::conversation::OpenMove;
use colloquy_protocol::template::Role;

use super::Engine;
use crate::conversation::Conversation;
use crate::error::EngineError;

impl Engine {
    /// The moves `agent` may make now in the conversation, in template order: as the
    /// initiator, those its threads' states allow it on each thread (one move per
    /// performative and guard, naming every participant it may go to); as a participant,
    /// those of its own thread. Empty for an observer and in an ended conversation; an agent
    /// that may not read the conversation is refused as [`Engine::view`] refuses it.
    pub async fn moves_open_to(
        &self,
        conversation_id: &str,
        agent: &str,
    ) -> Result<Vec<OpenMove>, EngineError> {
        let slot = self.loaded_slot(conversation_id).await?;
        let guard = slot.lock().await;
        let conversation = guard
            .as_ref()
            .ok_or_else(|| EngineError::UnknownConversation(conversation_id.to_owned()))?;
        if !conversation.can_read(agent) {
            return Err(EngineError::NotAParty {
                agent: agent.to_owned(),
                conversation: conversation_id.to_owned(),
            });
        }
        Ok(open_moves(conversation, agent))
    }

    /// The performatives `agent` may send next as the participant of its thread in the
    /// conversation: those of its state's transitions from the participant, in template
    /// order, each once (a transition's `when` guard is not evaluated). Empty when the
    /// conversation has ended or `agent` has no thread in it. What a bridge that answers
    /// for a remote agent (A2A) picks its reply from.
    pub async fn replies_open_to(
        &self,
        conversation_id: &str,
        agent: &str,
    ) -> Result<Vec<Arc<str>>, EngineError> {
        let slot = self.loaded_slot(conversation_id).await?;
        let guard = slot.lock().await;
        let conversation = guard
            .as_ref()
            .ok_or_else(|| EngineError::UnknownConversation(conversation_id.to_owned()))?;
        let Some(thread) = conversation.thread_index(agent) else {
            return Ok(Vec::new());
        };
        let mut open: Vec<Arc<str>> = Vec::new();
        for (performative, _) in thread_moves(conversation, thread, Role::Participant) {
            if !open.iter().any(|known| **known == *performative) {
                open.push(Arc::from(performative));
            }
        }
        Ok(open)
    }
}

/// [`Engine::moves_open_to`] over a loaded conversation.
pub(crate) fn open_moves(conversation: &Conversation, agent: &str) -> Vec<OpenMove> {
    let mut moves: Vec<OpenMove> = Vec::new();
    let mut add = |performative: &str, when: Option<&str>, to: &str| {
        let same = |known: &&mut OpenMove| {
            known.performative == performative && known.when.as_deref() == when
        };
        match moves.iter_mut().find(same) {
            Some(known) if known.to.iter().any(|receiver| &**receiver == to) => {}
            Some(known) => known.to.push(to.into()),
            None => moves.push(OpenMove {
                performative: performative.to_owned(),
                to: vec![to.into()],
                when: when.map(str::to_owned),
            }),
        }
    };
    if &**conversation.initiator() == agent {
        for (index, thread) in conversation.threads.iter().enumerate() {
            for (performative, when) in thread_moves(conversation, index, Role::Initiator) {
                add(performative, when, &thread.participant);
            }
        }
    } else if let Some(index) = conversation.thread_index(agent) {
        let initiator = conversation.initiator().clone();
        for (performative, when) in thread_moves(conversation, index, Role::Participant) {
            add(performative, when, &initiator);
        }
    }
    moves
}

/// The performatives (with their guards) `role` may send on thread `index` now.
fn thread_moves(
    conversation: &Conversation,
    index: usize,
    role: Role,
) -> impl Iterator<Item = (&str, Option<&str>)> {
    let machine = &conversation.template.machine;
    let open = !conversation.is_completed();
    let state = machine.state(conversation.threads[index].state);
    state
        .transitions
        .iter()
        .filter(move |transition| open && transition.from == role)
        .map(|transition| {
            (
                transition.performative.name(),
                transition.guard.as_ref().map(|guard| &*guard.source),
            )
        })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use colloquy_policy::{Catalog, CompiledTemplate, TemplateCompiler};
    use colloquy_protocol::message::{SendMessage, StartConversation};
    use serde_json::json;

    use super::*;
    use crate::clock::ManualClock;
    use crate::engine::EngineConfig;
    use crate::store::MemoryStore;

    /// FIPA Request for two participants, its participant's `inform` guarded by a condition
    /// on the content.
    fn guarded_request() -> Arc<CompiledTemplate> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/fipa-request.yaml");
        let source = std::fs::read_to_string(path).expect("the built-in template");
        let guarded =
            "- { performative: inform, from: participant, to: done, when: 'has(content.result)' }";
        let source = source.replacen(
            "- { performative: inform, from: participant, to: done }",
            guarded,
            1,
        );
        let source = source.replacen("max: 1", "max: 2", 1);
        assert!(
            source.contains(guarded) && source.contains("max: 2"),
            "the template changed"
        );
        Arc::new(
            TemplateCompiler::new()
                .compile_str(&source, None)
                .expect("compiles"),
        )
    }

    async fn requested_of(engine: &Engine, participants: &[&str]) -> String {
        let start = StartConversation {
            template: "fipa-request".to_owned(),
            participants: participants.iter().map(|p| (*p).to_owned()).collect(),
            ..StartConversation::default()
        };
        let view = engine.start("alice", start).await.expect("starts");
        let request = SendMessage::new("request", json!({}));
        engine
            .send(&view.id, "alice", request)
            .await
            .expect("accepted");
        view.id.to_string()
    }

    fn performatives(moves: &[OpenMove]) -> Vec<&str> {
        moves.iter().map(|m| m.performative.as_str()).collect()
    }

    #[tokio::test]
    async fn each_party_is_told_its_own_moves_and_their_guards() {
        let engine = Engine::new(
            Arc::new(Catalog::new([guarded_request()])),
            Arc::new(MemoryStore::new()),
            Arc::new(ManualClock::new(1_767_225_600_000)),
            EngineConfig::default(),
        );
        let id = requested_of(&engine, &["bob", "carol"]).await;
        let bob = engine.moves_open_to(&id, "bob").await.expect("bob's moves");
        assert_eq!(
            performatives(&bob),
            ["agree", "refuse", "inform", "failure", "not-understood"]
        );
        assert!(bob.iter().all(|m| m.to == ["alice".into()]));
        let inform = bob
            .iter()
            .find(|m| m.performative == "inform")
            .expect("inform");
        assert_eq!(inform.when.as_deref(), Some("has(content.result)"));
        assert!(
            bob.iter()
                .filter(|m| m.performative != "inform")
                .all(|m| m.when.is_none())
        );
        // The initiator may cancel on both threads: one move naming both.
        let alice = engine.moves_open_to(&id, "alice").await.expect("alice's");
        assert_eq!(performatives(&alice), ["cancel"]);
        assert_eq!(alice[0].to, ["bob".into(), "carol".into()]);
        // A stranger reads nothing, not even that there is nothing to do.
        let stranger = engine.moves_open_to(&id, "mallory").await;
        assert!(matches!(stranger, Err(EngineError::NotAParty { .. })));
        // Bob refuses: his thread has ended, carol's has not.
        let refuse = SendMessage::new("refuse", json!({}));
        engine.send(&id, "bob", refuse).await.expect("accepted");
        assert!(
            engine
                .moves_open_to(&id, "bob")
                .await
                .expect("bob's")
                .is_empty()
        );
        let alice = engine.moves_open_to(&id, "alice").await.expect("alice's");
        assert_eq!(alice[0].to, ["carol".into()]);
        assert_eq!(
            engine
                .replies_open_to(&id, "carol")
                .await
                .expect("carol's")
                .len(),
            5
        );
    }
}
