//! The participant's side: handlers registered by template and performative, run over the
//! agent's inbox stream, and the reply helpers of [`Incoming`].
//!
//! ```no_run
//! # async fn demo() -> Result<(), colloquy_sdk::SdkError> {
//! use colloquy_sdk::{Client, Handlers};
//! use serde_json::json;
//!
//! let bob = Client::connect("http://127.0.0.1:7700", "bob", Some("bob-token")).await?;
//! let handlers = Handlers::new().on("fipa-request", "request", |msg| async move {
//!     msg.agree(json!({})).await?;
//!     msg.inform(json!({"done": true})).await?;
//!     Ok(())
//! });
//! bob.serve(handlers, 0).await?; // runs until the server refuses the stream
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use colloquy_protocol::SendReceipt;
use colloquy_protocol::api::InboxItem;
use colloquy_protocol::message::{ENGINE_PARTY, Message, SendMessage};
use serde_json::Value;
use tokio::sync::watch;

use crate::client::Client;
use crate::error::SdkError;

type HandlerFuture = Pin<Box<dyn Future<Output = Result<(), SdkError>> + Send>>;
type Handler = Arc<dyn Fn(Incoming) -> HandlerFuture + Send + Sync>;

/// A message from the inbox, with what is needed to answer it.
#[derive(Clone, Debug)]
pub struct Incoming {
    /// The client that received it (and answers with it).
    pub client: Client,
    /// The inbox item: position, conversation, template and message.
    pub item: InboxItem,
}

impl Incoming {
    /// The conversation the message belongs to.
    pub fn conversation_id(&self) -> &str {
        &self.item.conversation_id
    }

    /// The message.
    pub fn message(&self) -> &Message {
        &self.item.message
    }

    /// The content of the message, parsed.
    pub fn content(&self) -> Value {
        self.item.message.content.value()
    }

    /// Sends `performative` with `content` in the same conversation, in reply to this
    /// message, addressed to its sender (or to the protocol's default when the engine sent it).
    pub async fn reply(&self, performative: &str, content: Value) -> Result<SendReceipt, SdkError> {
        let mut reply =
            SendMessage::new(performative, content).in_reply_to(self.item.message.id.to_string());
        if &*self.item.message.sender != ENGINE_PARTY {
            reply = reply.to([self.item.message.sender.to_string()]);
        }
        self.client.send(&self.item.conversation_id, &reply).await
    }

    /// `agree`: will do it (an intermediate answer).
    pub async fn agree(&self, content: Value) -> Result<SendReceipt, SdkError> {
        self.reply("agree", content).await
    }

    /// `refuse`: will not do it.
    pub async fn refuse(&self, content: Value) -> Result<SendReceipt, SdkError> {
        self.reply("refuse", content).await
    }

    /// `inform`: done, or here is the answer.
    pub async fn inform(&self, content: Value) -> Result<SendReceipt, SdkError> {
        self.reply("inform", content).await
    }

    /// `failure`: tried and failed.
    pub async fn failure(&self, content: Value) -> Result<SendReceipt, SdkError> {
        self.reply("failure", content).await
    }

    /// `propose`: an offer, in answer to a cfp.
    pub async fn propose(&self, content: Value) -> Result<SendReceipt, SdkError> {
        self.reply("propose", content).await
    }

    /// `accept-proposal`: take this offer.
    pub async fn accept(&self, content: Value) -> Result<SendReceipt, SdkError> {
        self.reply("accept-proposal", content).await
    }

    /// `reject-proposal`: turn this offer down.
    pub async fn reject(&self, content: Value) -> Result<SendReceipt, SdkError> {
        self.reply("reject-proposal", content).await
    }

    /// `cancel`: call off what this message asked for.
    pub async fn cancel(&self, content: Value) -> Result<SendReceipt, SdkError> {
        self.reply("cancel", content).await
    }
}

/// Handlers by template and performative. A message goes to the handler registered for its
/// template and performative, else to the one for its performative in any template; other
/// messages are skipped.
#[derive(Clone, Default)]
pub struct Handlers {
    exact: HashMap<(String, String), Handler>,
    any_template: HashMap<String, Handler>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handlers")
            .field("exact", &self.exact.keys().collect::<Vec<_>>())
            .field(
                "any_template",
                &self.any_template.keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Handlers {
    /// No handlers.
    pub fn new() -> Handlers {
        Handlers::default()
    }

    /// Handles `performative` messages of conversations of `template`.
    pub fn on<F, Fut>(mut self, template: &str, performative: &str, handler: F) -> Handlers
    where
        F: Fn(Incoming) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), SdkError>> + Send + 'static,
    {
        self.exact.insert(
            (template.to_owned(), performative.to_owned()),
            Arc::new(move |incoming| Box::pin(handler(incoming))),
        );
        self
    }

    /// Handles `performative` messages of any template without a more specific handler.
    pub fn on_any<F, Fut>(mut self, performative: &str, handler: F) -> Handlers
    where
        F: Fn(Incoming) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), SdkError>> + Send + 'static,
    {
        self.any_template.insert(
            performative.to_owned(),
            Arc::new(move |incoming| Box::pin(handler(incoming))),
        );
        self
    }

    fn find(&self, item: &InboxItem) -> Option<&Handler> {
        let performative = item.message.performative.name();
        item.template
            .as_deref()
            .and_then(|template| {
                self.exact
                    .get(&(template.to_owned(), performative.to_owned()))
            })
            .or_else(|| self.any_template.get(performative))
    }
}

impl Client {
    /// Runs `handlers` over this agent's inbox from position `after` (0: every entry not yet
    /// acknowledged), one message at a time, in order. Reconnects and resumes after the
    /// last handled item on its own; returns only when the server refuses the stream (bad
    /// token, for instance). A handler's error is logged and the next message handled.
    ///
    /// Handled (and skipped) items are acknowledged in the background, so the server can
    /// delete them: a restarted agent that serves from 0 gets what it had not finished,
    /// at least once, and not the whole history.
    pub async fn serve(&self, handlers: Handlers, after: u64) -> Result<(), SdkError> {
        let (handled, position) = watch::channel(after);
        tokio::spawn(acknowledge_handled(self.clone(), position));
        let mut inbox = self.inbox(after);
        loop {
            let item = inbox.next().await?;
            let seq = item.seq;
            let Some(handler) = handlers.find(&item) else {
                tracing::debug!(agent = %self.agent(), performative = %item.message.performative, "no handler; skipped");
                handled.send_replace(seq);
                continue;
            };
            let conversation = item.conversation_id.clone();
            let incoming = Incoming {
                client: self.clone(),
                item,
            };
            if let Err(error) = handler(incoming).await {
                tracing::warn!(agent = %self.agent(), %conversation, seq, %error, "handler failed");
            }
            handled.send_replace(seq);
        }
    }
}

/// Acknowledges the positions [`Client::serve`] reaches, one request at a time: while one
/// is on its way, later positions pile up and the next request covers them all. Ends when
/// `serve` does. A failed acknowledgement is left to the next, which covers it.
async fn acknowledge_handled(client: Client, mut handled: watch::Receiver<u64>) {
    let mut acknowledged = *handled.borrow_and_update();
    while handled.changed().await.is_ok() {
        let through = *handled.borrow_and_update();
        if through <= acknowledged {
            continue;
        }
        match client.acknowledge(through).await {
            Ok(_) => acknowledged = through,
            Err(error) => {
                tracing::debug!(agent = %client.agent(), through, %error, "inbox acknowledgement failed");
            }
        }
    }
}
