//! A conversation's audit record (`colloquy_trust::record`) as one reader may have it: the
//! events it may see in full, the others as their body digests, the chain over all of them,
//! and the template revision the conversation ran. The server signs it when it has a key.

use colloquy_protocol::event::{ConversationEvent, EventKind};
use colloquy_trust::chain::{self, PREV, REDACTED};
use colloquy_trust::record::{AuditRecord, FORMAT, TemplateRecord, fold_chain};
use serde_json::{Value, json};

use super::Engine;
use crate::error::EngineError;
use crate::sight::Sight;

impl Engine {
    /// The audit record of `conversation_id` for `viewer` (`None`: an administrator, who has
    /// every event in full), unsigned. Its parties and observers may have one, as they may
    /// read the conversation.
    pub async fn audit_record(
        &self,
        conversation_id: &str,
        viewer: Option<&str>,
    ) -> Result<AuditRecord, EngineError> {
        let mut sight = self.sight(conversation_id, viewer).await?;
        let log = self
            .store
            .load(conversation_id)
            .await?
            .ok_or_else(|| EngineError::UnknownConversation(conversation_id.to_owned()))?;
        let Some(EventKind::Started(started)) = log.first().map(|event| &event.kind) else {
            return Err(EngineError::UnknownConversation(conversation_id.to_owned()));
        };
        let template = self
            .template_record(&started.template, &started.revision)
            .await?;
        let events: Vec<Value> = log.iter().map(|event| as_seen(event, &mut sight)).collect();
        Ok(AuditRecord {
            format: FORMAT.to_owned(),
            conversation_id: conversation_id.to_owned(),
            reader: viewer.map(str::to_owned),
            template,
            chain: fold_chain(&events),
            events,
            issued_at: self.clock.now_ms(),
            signer_keys: Default::default(),
            engine_signature: None,
        })
    }

    /// What the record says of the revision: its whole digest, source and hook module hash
    /// when the revision archive holds it, else its name and revision only.
    async fn template_record(
        &self,
        name: &str,
        revision: &str,
    ) -> Result<TemplateRecord, EngineError> {
        let archived = self.store.archived_revision(name, revision).await?;
        Ok(match archived {
            Some(archived) => TemplateRecord {
                name: name.to_owned(),
                revision: revision.to_owned(),
                sha256: Some(chain::revision_digest(
                    &archived.source,
                    archived.hook_sha256.as_deref(),
                )),
                source: Some(archived.source.to_string()),
                hook_sha256: archived.hook_sha256.as_deref().map(str::to_owned),
            },
            None => TemplateRecord {
                name: name.to_owned(),
                revision: revision.to_owned(),
                sha256: None,
                source: None,
                hook_sha256: None,
            },
        })
    }
}

/// `event` as the reader of `sight` has it in a record: in full; with the transitions of
/// threads it may not see as their digests; or, when it may not see the event, as its body
/// digest (with its `seq` and `prev`, which the chain needs).
fn as_seen(event: &ConversationEvent, sight: &mut Sight) -> Value {
    let mut full = serde_json::to_value(event).unwrap_or(Value::Null);
    match sight.event(event.clone()) {
        None => {
            let mut redacted = json!({
                "seq": event.seq,
                REDACTED: chain::body_digest(&full).unwrap_or_default(),
            });
            if let Some(prev) = &event.prev {
                redacted[PREV] = json!(prev);
            }
            redacted
        }
        Some(seen) if seen == *event => full,
        Some(_) => {
            if let (EventKind::MessageAccepted { transitions, .. }, Some(Value::Array(shown))) =
                (&event.kind, full.get_mut("transitions"))
            {
                for (transition, shown) in transitions.iter().zip(shown.iter_mut()) {
                    if !sight.thread(&transition.participant) {
                        let digest = chain::transition_digest(shown).unwrap_or_default();
                        *shown = json!({ REDACTED: digest });
                    }
                }
            }
            full
        }
    }
}
