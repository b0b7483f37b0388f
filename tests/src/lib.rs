//! Shared harness for the end-to-end scenarios: an engine over the built-in templates (and
//! any fixture templates a test adds), an in-memory store and a manual clock; [`http`] runs
//! the same over a real HTTP service.

pub mod bench;
pub mod http;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use colloquy_core::store::MemoryStore;
use colloquy_core::{Engine, EngineConfig, EngineError, ManualClock};
use colloquy_policy::{Catalog, CompiledTemplate, TemplateCompiler};
use colloquy_protocol::conversation::{ConversationView, SendReceipt};
use colloquy_protocol::message::{SendMessage, StartConversation};
use serde_json::Value;

/// Where the clock starts: a fixed, readable instant (2026-01-01T00:00:00Z).
pub const T0: u64 = 1_767_225_600_000;

/// The workspace's `templates/` directory.
pub fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../templates")
}

/// The built-in templates, compiled.
pub fn builtin_templates() -> Vec<CompiledTemplate> {
    match TemplateCompiler::new().compile_dir(&templates_dir()) {
        Ok(templates) => templates,
        Err(diagnostics) => panic!("built-in templates do not compile:\n{diagnostics}"),
    }
}

/// Compiles one template from YAML text, panicking with its diagnostics.
pub fn compile(yaml: &str) -> CompiledTemplate {
    match TemplateCompiler::new().compile_str(yaml, None) {
        Ok(template) => template,
        Err(diagnostics) => panic!("fixture template does not compile:\n{diagnostics}"),
    }
}

/// A built-in template's YAML with text replaced, compiled: for variants such as
/// `enforcement: enforce`.
pub fn variant(file: &str, replacements: &[(&str, &str)]) -> CompiledTemplate {
    let mut yaml = std::fs::read_to_string(templates_dir().join(file)).expect("template file");
    for (from, to) in replacements {
        assert!(yaml.contains(from), "{file} does not contain {from:?}");
        yaml = yaml.replace(from, to);
    }
    compile(&yaml)
}

/// An engine with its clock and store.
pub struct Harness {
    /// The engine under test.
    pub engine: Arc<Engine>,
    /// Its clock, starting at [`T0`].
    pub clock: Arc<ManualClock>,
    /// Its store.
    pub store: Arc<MemoryStore>,
}

impl Harness {
    /// An engine over the built-in templates.
    pub fn new() -> Harness {
        Harness::with(Vec::new())
    }

    /// An engine over the built-in templates plus `extra` (which win on a name clash).
    pub fn with(extra: Vec<CompiledTemplate>) -> Harness {
        let catalog = Catalog::new(builtin_templates().into_iter().chain(extra).map(Arc::new));
        let clock = Arc::new(ManualClock::new(T0));
        let store = Arc::new(MemoryStore::new());
        let engine = Arc::new(Engine::new(
            Arc::new(catalog),
            store.clone(),
            clock.clone(),
            EngineConfig::default(),
        ));
        Harness {
            engine,
            clock,
            store,
        }
    }

    /// Starts a conversation with no opening message.
    pub async fn start(
        &self,
        template: &str,
        initiator: &str,
        participants: &[&str],
        parameters: Value,
    ) -> ConversationView {
        self.try_start(template, initiator, participants, parameters, None)
            .await
            .unwrap_or_else(|error| panic!("start {template}: {error}"))
    }

    /// Starts a conversation, returning the engine's answer.
    pub async fn try_start(
        &self,
        template: &str,
        initiator: &str,
        participants: &[&str],
        parameters: Value,
        message: Option<SendMessage>,
    ) -> Result<ConversationView, EngineError> {
        let request = StartConversation {
            template: template.to_owned(),
            participants: participants.iter().map(|p| (*p).to_owned()).collect(),
            parameters,
            message,
            ..StartConversation::default()
        };
        self.engine.start(initiator, request).await
    }

    /// Sends a message, returning the engine's answer.
    pub async fn send(
        &self,
        conversation: &str,
        sender: &str,
        message: SendMessage,
    ) -> Result<SendReceipt, EngineError> {
        self.engine.send(conversation, sender, message).await
    }

    /// Sends a message that must be accepted.
    pub async fn ok(&self, conversation: &str, sender: &str, message: SendMessage) -> SendReceipt {
        self.send(conversation, sender, message.clone())
            .await
            .unwrap_or_else(|error| panic!("{sender} sending {}: {error}", message.performative))
    }

    /// Moves the clock and runs a scheduler pass.
    pub async fn advance(&self, ms: u64) -> usize {
        self.clock.advance(ms);
        self.engine.run_due().await.expect("scheduler pass")
    }

    /// The conversation as an administrator sees it.
    pub async fn view(&self, conversation: &str) -> ConversationView {
        self.engine.view(conversation, None).await.expect("view")
    }
}

impl Default for Harness {
    fn default() -> Harness {
        Harness::new()
    }
}

/// A message with a performative and JSON content.
pub fn msg(performative: &str, content: Value) -> SendMessage {
    SendMessage::new(performative, content)
}
