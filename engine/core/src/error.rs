//! Engine errors. Each says what was wrong and, for the caller's mistakes, where (a JSON
//! pointer into the request). [`ErrorKind`] classifies them without naming HTTP, so the API
//! layer maps kinds to status codes in one place.

use colloquy_protocol::ErrorBody;

use crate::store::StoreError;

/// What class of failure an [`EngineError`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The request is malformed.
    BadRequest,
    /// The caller may not do this.
    Forbidden,
    /// Something named does not exist.
    NotFound,
    /// It clashes with the current state (out of protocol under `enforce`, a duplicate id).
    Conflict,
    /// The conversation has ended.
    Gone,
    /// Too large.
    TooLarge,
    /// Well-formed but invalid (unknown performative, schema violation, refused by policy).
    Unprocessable,
    /// The store is unreachable, or the engine is busy; retry later.
    Unavailable,
    /// A bug or an unexpected failure; details are in the log.
    Internal,
}

/// Why the engine refused or failed a request.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// No template of that name is loaded.
    #[error("no template named `{0}` is loaded")]
    UnknownTemplate(String),
    /// A conversation is pinned to a revision that is no longer loaded.
    #[error("template `{name}` revision `{revision}` is no longer loaded")]
    RevisionGone {
        /// Template name.
        name: String,
        /// Revision.
        revision: String,
    },
    /// No such conversation.
    #[error("no conversation `{0}`")]
    UnknownConversation(String),
    /// A conversation with this id exists already; ids are never merged.
    #[error("conversation `{0}` already exists")]
    DuplicateConversation(String),
    /// No such commitment.
    #[error("no commitment `{0}`")]
    UnknownCommitment(String),
    /// The caller is not a party to the conversation.
    #[error("`{agent}` is not a party to conversation `{conversation}`")]
    NotAParty {
        /// The caller.
        agent: String,
        /// The conversation.
        conversation: String,
    },
    /// The caller is a party but may not do this.
    #[error("{0}")]
    Forbidden(String),
    /// The performative is neither a FIPA act nor an intent of this template.
    #[error(
        "unknown performative `{name}`: not a FIPA act and not declared by template `{template}`"
    )]
    UnknownPerformative {
        /// The name sent.
        name: String,
        /// The template.
        template: String,
        /// Where the name is in the request (`/performative`, or `/message/performative`
        /// for a start's opening message).
        pointer: String,
    },
    /// A value does not match its schema.
    #[error("{pointer}: {message}")]
    SchemaViolation {
        /// JSON pointer into the request.
        pointer: String,
        /// What is wrong.
        message: String,
    },
    /// The request is well-formed but not valid here.
    #[error("{message}")]
    Invalid {
        /// JSON pointer into the request.
        pointer: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// The context snapshot is over the template's cap and the template says reject.
    #[error("context is {size} bytes, over the template's cap of {max} bytes")]
    ContextTooLarge {
        /// Its size.
        size: usize,
        /// The cap.
        max: usize,
    },
    /// Under `enforcement: enforce`, the protocol does not allow this message here.
    #[error("out of protocol: {0}")]
    OutOfProtocol(String),
    /// The conversation has ended; later messages are absorbed.
    #[error("conversation `{0}` has ended")]
    ConversationEnded(String),
    /// The conversation already holds as many messages as its template allows (it ended
    /// with the last of them; only a late reply gets this far).
    #[error(
        "conversation `{conversation}` already holds {limit} messages, the most its template \
         allows (spec.limits.max_messages), and ended with the last; nothing was recorded"
    )]
    MessageLimit {
        /// The conversation.
        conversation: String,
        /// The template's limit.
        limit: u32,
    },
    /// The message's signature is missing where its template requires one, or does not hold
    /// (unknown key, altered message).
    #[error("bad signature: {0}")]
    BadSignature(String),
    /// A routing rule, a declarative rule or a hook refused the message.
    #[error("refused by {rule}: {reason}")]
    Rejected {
        /// Which rule or hook.
        rule: String,
        /// Its reason.
        reason: String,
    },
    /// A rule's CEL expression could cost more than the evaluation budget over this
    /// message's values: it was not evaluated, and the message (or the start) is refused.
    #[error(transparent)]
    RuleTooCostly(#[from] crate::rules::TooCostly),
    /// The template's wasm hook failed and its policy is `fail_closed`: the message (or the
    /// start) is refused and nothing changed.
    #[error("hook `{hook}` failed at {event}: {cause}")]
    HookFailed {
        /// The hook module, as the template names it.
        hook: String,
        /// The lifecycle event (`on_start`, `on_message`).
        event: &'static str,
        /// What went wrong (a timeout, a trap, bad output, ...).
        cause: String,
    },
    /// A message id already names another message of the conversation: a retry that does not
    /// repeat the first request, or another sender's id.
    #[error(
        "message id `{id}` already names another message of this conversation (its {field} \
         differs): a retry must repeat the first request, and a new message needs a new id"
    )]
    MessageIdTaken {
        /// The id sent.
        id: String,
        /// The first field that differs from the message the id names.
        field: &'static str,
    },
    /// The commitment has already reached a terminal state.
    #[error("commitment `{0}` is already {1}")]
    CommitmentClosed(String, &'static str),
    /// The hook pool could not take the step (every thread busy with hooks running to
    /// their budgets, its queue full): nothing was recorded; retry shortly.
    #[error("{0}")]
    HooksBusy(crate::hook_pool::HookPoolBusy),
    /// A hook call tried on an async worker ran past its slice: the engine runs the step
    /// again on the hook pool. Never a caller's answer.
    #[error("a hook call must run on the hook pool")]
    HookNeedsPool,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl EngineError {
    /// The class of failure.
    pub fn kind(&self) -> ErrorKind {
        match self {
            EngineError::UnknownTemplate(_)
            | EngineError::UnknownConversation(_)
            | EngineError::UnknownCommitment(_) => ErrorKind::NotFound,
            EngineError::RevisionGone { .. } | EngineError::HookNeedsPool => ErrorKind::Internal,
            EngineError::DuplicateConversation(_)
            | EngineError::OutOfProtocol(_)
            | EngineError::MessageLimit { .. }
            | EngineError::CommitmentClosed(..) => ErrorKind::Conflict,
            EngineError::NotAParty { .. } | EngineError::Forbidden(_) => ErrorKind::Forbidden,
            EngineError::UnknownPerformative { .. }
            | EngineError::SchemaViolation { .. }
            | EngineError::Invalid { .. }
            | EngineError::MessageIdTaken { .. }
            | EngineError::BadSignature(_)
            | EngineError::Rejected { .. }
            | EngineError::RuleTooCostly(_)
            | EngineError::HookFailed { .. } => ErrorKind::Unprocessable,
            EngineError::ContextTooLarge { .. } => ErrorKind::TooLarge,
            EngineError::ConversationEnded(_) => ErrorKind::Gone,
            EngineError::Store(StoreError::Unavailable(_) | StoreError::Fenced(_))
            | EngineError::HooksBusy(_) => ErrorKind::Unavailable,
            EngineError::Store(StoreError::Conflict { .. } | StoreError::Internal(_)) => {
                ErrorKind::Internal
            }
            EngineError::Store(StoreError::Duplicate(_)) => ErrorKind::Conflict,
        }
    }

    /// A stable machine-readable code.
    pub fn code(&self) -> &'static str {
        match self {
            EngineError::UnknownTemplate(_) => "unknown_template",
            EngineError::RevisionGone { .. } => "revision_gone",
            EngineError::UnknownConversation(_) => "unknown_conversation",
            EngineError::DuplicateConversation(_)
            | EngineError::Store(StoreError::Duplicate(_)) => "duplicate_conversation",
            EngineError::UnknownCommitment(_) => "unknown_commitment",
            EngineError::NotAParty { .. } => "not_a_party",
            EngineError::Forbidden(_) => "forbidden",
            EngineError::UnknownPerformative { .. } => "unknown_performative",
            EngineError::SchemaViolation { .. } => "schema_violation",
            EngineError::Invalid { .. } => "invalid",
            EngineError::ContextTooLarge { .. } => "context_too_large",
            EngineError::OutOfProtocol(_) => "out_of_protocol",
            EngineError::ConversationEnded(_) => "conversation_ended",
            EngineError::MessageLimit { .. } => "message_limit",
            EngineError::Rejected { .. } => "rejected",
            EngineError::RuleTooCostly(_) => "rule_too_costly",
            EngineError::HookFailed { .. } => "hook_failed",
            EngineError::CommitmentClosed(..) => "commitment_closed",
            EngineError::MessageIdTaken { .. } => "message_id_taken",
            EngineError::BadSignature(_) => "bad_signature",
            EngineError::Store(StoreError::Unavailable(_)) => "store_unavailable",
            EngineError::Store(StoreError::Fenced(_)) => "moved",
            EngineError::HooksBusy(_) => "hooks_busy",
            EngineError::Store(_) | EngineError::HookNeedsPool => "internal",
        }
    }

    /// JSON pointer into the request naming the offending field, when there is one.
    pub fn pointer(&self) -> Option<&str> {
        match self {
            EngineError::UnknownPerformative { pointer, .. } => Some(pointer),
            EngineError::SchemaViolation { pointer, .. } => Some(pointer),
            EngineError::Invalid { pointer, .. } => pointer.as_deref(),
            EngineError::ContextTooLarge { .. } => Some("/context"),
            EngineError::MessageIdTaken { .. } => Some("/message_id"),
            EngineError::BadSignature(_) => Some("/signature"),
            _ => None,
        }
    }

    /// The JSON error body; internal failures get a generic message (details go to the log).
    pub fn to_body(&self) -> ErrorBody {
        let message = match self.kind() {
            ErrorKind::Internal => "internal error".to_owned(),
            _ => self.to_string(),
        };
        ErrorBody::new(self.code(), message, self.pointer().map(str::to_owned))
    }

    /// The same error with its pointer moved under `prefix`: for a message nested in a
    /// bigger request (a start's opening `message`).
    pub(crate) fn under(self, prefix: &str) -> EngineError {
        match self {
            EngineError::UnknownPerformative {
                name,
                template,
                pointer,
            } => EngineError::UnknownPerformative {
                name,
                template,
                pointer: format!("{prefix}{pointer}"),
            },
            EngineError::SchemaViolation { pointer, message } => EngineError::SchemaViolation {
                pointer: format!("{prefix}{pointer}"),
                message,
            },
            EngineError::Invalid {
                pointer: Some(pointer),
                message,
            } => EngineError::Invalid {
                pointer: Some(format!("{prefix}{pointer}")),
                message,
            },
            other => other,
        }
    }

    pub fn invalid(pointer: &str, message: impl Into<String>) -> EngineError {
        EngineError::Invalid {
            pointer: Some(pointer.to_owned()),
            message: message.into(),
        }
    }
}
