//! An agent's commitments, listed, released and cancelled.

use std::sync::Arc;

use colloquy_protocol::conversation::{CommitmentState, CommitmentView};

use crate::dispatch;
use crate::error::EngineError;
use crate::step::Step;

use super::*;

impl Engine {
    /// Commitments of live conversations where `agent` is debtor or creditor (a party of
    /// each: only the conversations the party index lists for it are read).
    pub async fn commitments_of(&self, agent: &str) -> Vec<CommitmentView> {
        let slots: Vec<Slot> = self
            .parties
            .of(agent, None)
            .iter()
            .filter_map(|id| self.live.get(id).map(|entry| entry.value().clone()))
            .collect();
        let mut found = Vec::new();
        for slot in slots {
            let guard = slot.lock().await;
            if let Some(conversation) = guard.as_ref() {
                found.extend(conversation.commitments_involving(agent));
            }
        }
        found
    }

    /// The creditor waives a commitment.
    pub async fn release_commitment(
        &self,
        commitment_id: &str,
        agent: &str,
    ) -> Result<CommitmentView, EngineError> {
        self.settle(commitment_id, agent, CommitmentState::Released)
            .await
    }

    /// The debtor withdraws from a commitment.
    pub async fn cancel_commitment(
        &self,
        commitment_id: &str,
        agent: &str,
    ) -> Result<CommitmentView, EngineError> {
        self.settle(commitment_id, agent, CommitmentState::Cancelled)
            .await
    }

    pub(super) async fn settle(
        &self,
        commitment_id: &str,
        agent: &str,
        to: CommitmentState,
    ) -> Result<CommitmentView, EngineError> {
        let (conversation_id, _) = commitment_id
            .rsplit_once('/')
            .ok_or_else(|| EngineError::UnknownCommitment(commitment_id.to_owned()))?;
        let work: Arc<Work<CommitmentView>> = {
            let commitment_id: Arc<str> = Arc::from(commitment_id);
            let agent: Arc<str> = Arc::from(agent);
            Arc::new(move |step: &mut Step<'_>| {
                dispatch::settle_commitment(step, &commitment_id, &agent, to)?;
                let conversation = &*step.conversation;
                conversation
                    .commitments
                    .iter()
                    .find(|c| c.id == commitment_id)
                    .map(|c| conversation.commitment_view(c))
                    .ok_or_else(|| EngineError::UnknownCommitment(commitment_id.to_string()))
            })
        };
        let (_, view) = self
            .with_conversation(conversation_id, |_, _| Vec::new(), |_, _| None, work)
            .await
            .map_err(|error| match error {
                EngineError::UnknownConversation(_) => {
                    EngineError::UnknownCommitment(commitment_id.to_owned())
                }
                other => other,
            })?;
        Ok(view)
    }
}
