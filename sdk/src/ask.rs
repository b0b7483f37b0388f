//! The initiator's helpers: start a conversation of a built-in protocol and wait for its
//! final answer — never an intermediate `agree` — within a timeout.
//!
//! They follow the conversation's event stream, so they see exactly what the engine
//! recorded: replies, thread moves and expired deadlines. Intermediate messages can be
//! watched through [`AskOptions::observe`]. The replies also land in the initiator's inbox,
//! unless the server's agents file gives it `inbox: false` (for an agent that only asks);
//! an agent that never reads its inbox drops them with [`Client::acknowledge_inbox`], or a
//! durable store keeps them.

use std::collections::HashSet;
use std::time::Duration;

use colloquy_protocol::conversation::Outcome;
use colloquy_protocol::event::{EventKind, ThreadTransition};
use colloquy_protocol::message::{Message, SendMessage, StartConversation};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::client::Client;
use crate::error::SdkError;

/// How long a helper waits for the final answer unless told otherwise.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long after the cfp's reply-by [`Client::call_for_proposals`] waits for the engine to
/// close the silent threads, on top of the server's scheduler period.
pub const CFP_GRACE: Duration = Duration::from_secs(2);

/// Options of the helpers.
#[derive(Clone, Debug)]
pub struct AskOptions {
    /// Give up waiting after this long ([`SdkError::Timeout`]); the conversation goes on.
    pub timeout: Duration,
    /// The template to use instead of the built-in one.
    pub template: Option<String>,
    /// Start parameters.
    pub parameters: Value,
    /// A client-chosen conversation id.
    pub conversation_id: Option<String>,
    /// Every message the other side sends on the way, final answer included.
    pub observer: Option<mpsc::UnboundedSender<Message>>,
}

impl Default for AskOptions {
    fn default() -> AskOptions {
        AskOptions {
            timeout: DEFAULT_TIMEOUT,
            template: None,
            parameters: Value::Null,
            conversation_id: None,
            observer: None,
        }
    }
}

impl AskOptions {
    /// Sets the timeout.
    pub fn timeout(mut self, timeout: Duration) -> AskOptions {
        self.timeout = timeout;
        self
    }

    /// Sends every message the other side sends to `observer` as it arrives.
    pub fn observe(mut self, observer: mpsc::UnboundedSender<Message>) -> AskOptions {
        self.observer = Some(observer);
        self
    }

    /// Uses `template` instead of the built-in protocol's.
    pub fn template(mut self, template: impl Into<String>) -> AskOptions {
        self.template = Some(template.into());
        self
    }
}

/// The final answer of a request or a query.
#[derive(Clone, Debug)]
pub struct Answer {
    /// The conversation.
    pub conversation_id: String,
    /// How the participant's thread ended (success, failure, refused, timeout, …).
    pub outcome: Option<Outcome>,
    /// The message that ended it (inform, failure, refuse), if a message did.
    pub reply: Option<Message>,
    /// Everything the participant sent, in order.
    pub messages: Vec<Message>,
}

/// What a call for proposals collected by its deadline.
#[derive(Clone, Debug)]
pub struct Proposals {
    /// The conversation; answer the proposals in it with [`Client::accept`] and
    /// [`Client::reject`].
    pub conversation_id: String,
    /// Proposals made in time, in arrival order.
    pub proposals: Vec<Message>,
    /// Refusals and other non-proposal answers.
    pub declined: Vec<Message>,
    /// Participants whose reply-by passed in silence.
    pub silent: Vec<String>,
}

impl Client {
    /// FIPA Request: asks `participant` to perform an action and resolves on its final answer
    /// (inform, failure or refuse — or a timeout outcome when a deadline passes).
    pub async fn request(
        &self,
        participant: &str,
        content: Value,
        options: AskOptions,
    ) -> Result<Answer, SdkError> {
        self.ask("fipa-request", "request", participant, content, options)
            .await
    }

    /// FIPA Query: asks `participant` a `query-ref` and resolves on its answer.
    pub async fn query(
        &self,
        participant: &str,
        content: Value,
        options: AskOptions,
    ) -> Result<Answer, SdkError> {
        self.ask("fipa-query", "query-ref", participant, content, options)
            .await
    }

    async fn ask(
        &self,
        template: &str,
        performative: &str,
        participant: &str,
        content: Value,
        options: AskOptions,
    ) -> Result<Answer, SdkError> {
        let start = StartConversation {
            template: options
                .template
                .clone()
                .unwrap_or_else(|| template.to_owned()),
            participants: vec![participant.to_owned()],
            parameters: options.parameters.clone(),
            conversation_id: options.conversation_id.clone(),
            message: Some(SendMessage::new(performative, content)),
            ..StartConversation::default()
        };
        let view = self.start(&start).await?;
        let id = view.id.to_string();
        let follow = async {
            let mut events = self.events(&id, 0);
            let mut answer = Answer {
                conversation_id: id.clone(),
                outcome: None,
                reply: None,
                messages: Vec::new(),
            };
            loop {
                let Some(event) = events.next().await? else {
                    return Ok(answer);
                };
                match event.kind {
                    EventKind::MessageAccepted {
                        message,
                        transitions,
                    } => {
                        let from_participant = &*message.sender == participant;
                        if from_participant {
                            answer.messages.push((*message).clone());
                            if let Some(observer) = &options.observer {
                                // A dropped observer only means nobody watches any more.
                                let _ = observer.send((*message).clone());
                            }
                        }
                        if let Some(outcome) = ended(&transitions, participant) {
                            answer.outcome = Some(outcome);
                            if from_participant {
                                answer.reply = Some((*message).clone());
                            }
                            return Ok(answer);
                        }
                    }
                    EventKind::ThreadExpired(transition) => {
                        if let Some(outcome) =
                            ended(std::slice::from_ref(&*transition), participant)
                        {
                            answer.outcome = Some(outcome);
                            return Ok(answer);
                        }
                    }
                    EventKind::Completed { outcome, .. } => {
                        answer.outcome.get_or_insert(outcome);
                        return Ok(answer);
                    }
                    _ => {}
                }
            }
        };
        match tokio::time::timeout(options.timeout, follow).await {
            Ok(result) => result,
            Err(_) => Err(SdkError::Timeout {
                conversation_id: id,
            }),
        }
    }

    /// FIPA Contract Net: sends a `cfp` with reply-by `reply_by_ms` (Unix milliseconds) to
    /// `participants` and resolves once each has proposed, declined or stayed silent past
    /// the reply-by (the engine closes silent threads at the deadline). Late proposals are
    /// not collected: the engine answers them itself.
    pub async fn call_for_proposals(
        &self,
        participants: &[&str],
        content: Value,
        reply_by_ms: u64,
        options: AskOptions,
    ) -> Result<Proposals, SdkError> {
        let start = StartConversation {
            template: options
                .template
                .clone()
                .unwrap_or_else(|| "fipa-contract-net".to_owned()),
            participants: participants.iter().map(|p| (*p).to_owned()).collect(),
            parameters: options.parameters.clone(),
            conversation_id: options.conversation_id.clone(),
            message: Some(SendMessage::new("cfp", content).reply_by(reply_by_ms)),
            ..StartConversation::default()
        };
        let view = self.start(&start).await?;
        let id = view.id.to_string();
        let mut waiting: HashSet<&str> = participants.iter().copied().collect();
        let until_deadline = Duration::from_millis(reply_by_ms.saturating_sub(now_ms()));
        let give_up = tokio::time::Instant::now() + options.timeout.min(until_deadline + CFP_GRACE);
        let mut events = self.events(&id, 0);
        let mut collected = Proposals {
            conversation_id: id.clone(),
            proposals: Vec::new(),
            declined: Vec::new(),
            silent: Vec::new(),
        };
        while !waiting.is_empty() {
            let event = match tokio::time::timeout_at(give_up, events.next()).await {
                Ok(event) => event?,
                // Past the reply-by and the grace: whoever has not answered stayed silent.
                Err(_) => break,
            };
            let Some(event) = event else {
                break;
            };
            match event.kind {
                EventKind::MessageAccepted { message, .. } if waiting.remove(&*message.sender) => {
                    if let Some(observer) = &options.observer {
                        // A dropped observer only means nobody watches any more.
                        let _ = observer.send((*message).clone());
                    }
                    if message.performative.name() == "propose" {
                        collected.proposals.push((*message).clone());
                    } else {
                        collected.declined.push((*message).clone());
                    }
                }
                EventKind::ThreadExpired(transition)
                    if waiting.remove(&*transition.participant) =>
                {
                    collected.silent.push(transition.participant.to_string());
                }
                _ => {}
            }
        }
        let mut rest: Vec<String> = waiting.into_iter().map(str::to_owned).collect();
        rest.sort();
        collected.silent.extend(rest);
        Ok(collected)
    }

    /// Accepts a proposal (`accept-proposal` to its sender, in reply to it).
    pub async fn accept(
        &self,
        conversation_id: &str,
        proposal: &Message,
        content: Value,
    ) -> Result<colloquy_protocol::SendReceipt, SdkError> {
        self.answer(conversation_id, proposal, "accept-proposal", content)
            .await
    }

    /// Rejects a proposal (`reject-proposal` to its sender, in reply to it).
    pub async fn reject(
        &self,
        conversation_id: &str,
        proposal: &Message,
        content: Value,
    ) -> Result<colloquy_protocol::SendReceipt, SdkError> {
        self.answer(conversation_id, proposal, "reject-proposal", content)
            .await
    }

    /// Sends `performative` to the sender of `message`, in reply to it.
    pub async fn answer(
        &self,
        conversation_id: &str,
        message: &Message,
        performative: &str,
        content: Value,
    ) -> Result<colloquy_protocol::SendReceipt, SdkError> {
        let reply = SendMessage::new(performative, content)
            .to([message.sender.to_string()])
            .in_reply_to(message.id.to_string());
        self.send(conversation_id, &reply).await
    }
}

/// The outcome of `participant`'s thread, if one of these moves ended it.
fn ended(transitions: &[ThreadTransition], participant: &str) -> Option<Outcome> {
    transitions
        .iter()
        .find(|t| &*t.participant == participant)
        .and_then(|t| t.outcome)
}

/// Wall-clock time in Unix milliseconds (0 before 1970, which no server runs at).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
