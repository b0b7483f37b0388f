//! Inbox entries as clients and pushes see them: each labelled with its conversation's
//! template. Used by the inbox streams (`colloquy_server::streams`) and by push delivery
//! (`colloquy_server::delivery`).

use std::collections::HashMap;
use std::sync::Arc;

use colloquy_protocol::api::InboxItem;

use crate::engine::Engine;
use crate::store::InboxEntry;

/// Labels inbox entries with their conversation's template, remembering lookups.
#[derive(Default)]
pub struct Labeller {
    known: HashMap<Arc<str>, Option<Arc<str>>>,
}

/// Lookups a [`Labeller`] remembers before it starts over. A stream lives as long as its
/// client stays connected, which may be weeks with a new conversation every millisecond:
/// the memory must not grow with them.
const LABELS_REMEMBERED: usize = 4096;

impl Labeller {
    /// A labeller that knows no template yet.
    pub fn new() -> Labeller {
        Labeller::default()
    }

    /// `entry` as an inbox item, labelled with its conversation's template (when the
    /// conversation can still be found).
    pub async fn item(&mut self, engine: &Engine, entry: InboxEntry) -> InboxItem {
        let template = match self.known.get(&entry.conversation_id) {
            Some(template) => template.clone(),
            None => {
                let template = engine.template_of(&entry.conversation_id).await.ok();
                if self.known.len() == LABELS_REMEMBERED {
                    self.known.clear();
                }
                self.known
                    .insert(entry.conversation_id.clone(), template.clone());
                template
            }
        };
        InboxItem {
            seq: entry.seq,
            conversation_id: entry.conversation_id,
            template,
            message: (*entry.message).clone(),
        }
    }
}
