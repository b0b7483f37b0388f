"""The wire types of the HTTP API, as pydantic models.

They follow the component schemas of ``GET /v1/openapi.json`` (written by hand in
``engine/server/src/openapi.json``) field for field; ``tests/test_models_follow_the_api.py``
fails when one of them drifts from that document, or when the outcome and commitment-state
names drift from ``docs/*.schema.json``.

What the client sends forbids unknown fields, as the server does (a typo is an error, not
a silently dropped field). What the server answers tolerates them, so a newer server that
adds a field does not break an older SDK.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class _Request(BaseModel):
    """A body the client sends: unknown fields are a mistake."""

    model_config = ConfigDict(extra="forbid")


class _Answer(BaseModel):
    """A body the server answers: unknown fields are kept out of the way, not refused."""

    model_config = ConfigDict(extra="ignore")


class Outcome(str, Enum):
    """How a thread or a conversation ended.

    Answer fields hold plain strings (a newer server may know more outcomes); these compare
    equal to them: ``answer.outcome == Outcome.SUCCESS``.
    """

    SUCCESS = "success"
    FAILURE = "failure"
    REFUSED = "refused"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    NO_REPLY = "no_reply"
    NOT_UNDERSTOOD = "not_understood"
    ESCALATED = "escalated"


class CommitmentState(str, Enum):
    """The life of a commitment (a promise one party owes another)."""

    PENDING = "pending"
    ACTIVE = "active"
    FULFILLED = "fulfilled"
    VIOLATED = "violated"
    CANCELLED = "cancelled"
    RELEASED = "released"


Status = Literal["active", "completed"]

#: The sender of the messages the engine itself sends (automatic replies, escalations).
ENGINE_PARTY = "colloquy:engine"


class ErrorDetail(_Answer):
    """What went wrong, and where."""

    code: str
    message: str
    pointer: Optional[str] = None


class ErrorBody(_Answer):
    """The body of every error answer."""

    error: ErrorDetail


class SendMessage(_Request):
    """``POST /v1/conversations/{id}/messages``; also the opening act of a start."""

    message_id: Optional[str] = None
    performative: str
    to: Optional[list[str]] = None
    content: Any = None
    in_reply_to: Optional[str] = None
    reply_by: Optional[int] = None
    signature: Optional[str] = None


class StartConversation(_Request):
    """``POST /v1/conversations``."""

    template: str
    participants: list[str]
    parameters: Optional[dict[str, Any]] = None
    context: Optional[dict[str, Any]] = None
    conversation_id: Optional[str] = None
    deadline_ms: Optional[int] = None
    message: Optional[SendMessage] = None


class MessageSignature(_Answer):
    """A message's signature as the engine recorded it: the sender's detached JWS, and the
    receivers as the sender named them."""

    jws: str
    to: list[str] = Field(default_factory=list)


class Message(_Answer):
    """A message as the conversation recorded it (receivers after routing)."""

    id: str
    performative: str
    sender: str
    receivers: list[str]
    content: Any = None
    in_reply_to: Optional[str] = None
    reply_by: Optional[int] = None
    sent_at: int
    signature: Optional[MessageSignature] = None


class ThreadView(_Answer):
    """One participant's thread: its state, and how it ended."""

    participant: str
    state: str
    outcome: Optional[str] = None
    deadline: Optional[int] = None


class OpenMove(_Answer):
    """A move open to the reader: a performative it may send now, to whom, and the guard
    (``when``, the template's CEL condition) it must satisfy, if any."""

    performative: str
    to: list[str]
    when: Optional[str] = None


class MovesView(_Answer):
    """``GET /v1/conversations/{id}/moves``."""

    moves: list[OpenMove]


class AuditTemplate(_Answer):
    """The template revision an audited conversation ran: its whole SHA-256, YAML source and
    hook module hash when the server's revision archive holds it."""

    name: str
    revision: str
    sha256: Optional[str] = None
    source: Optional[str] = None
    hook_sha256: Optional[str] = None


class AuditChain(_Answer):
    """The hash chain over an audit record's events: its length, its head (the last event's
    chain hash) and the first event that carries ``prev``."""

    length: int
    head: str
    chained_from: Optional[int] = None


class AuditSignature(_Answer):
    """The engine's signature over an audit record: a detached JWS by key ``kid``."""

    kid: str
    jws: str


class AuditRecord(_Answer):
    """``GET /v1/conversations/{id}/audit``: the record of a conversation as its reader may
    have it; the events it may not see are their digests (``{"seq", "prev", "redacted"}``).
    Check it offline with :func:`colloquy.audit.verify` or ``colloquy audit verify``
    (docs/security.md).

    Fields the model does not name are kept (``model_extra``), not dropped: the engine signs
    the whole record, and a record written back out (``model_dump_json(exclude_none=True)``)
    must still verify, also one from a newer server."""

    model_config = ConfigDict(extra="allow")

    format: str
    conversation_id: str
    reader: Optional[str] = None
    template: AuditTemplate
    events: list[dict[str, Any]]
    chain: AuditChain
    issued_at: int
    #: The JWKS of each signer the engine checked signed messages against, by sender (kept
    #: as JSON: the engine's signature covers them as they are).
    signer_keys: Optional[dict[str, dict[str, Any]]] = None
    engine_signature: Optional[AuditSignature] = None


class Jwks(_Answer):
    """``GET /v1/audit/keys``: the engine's audit key as a JWKS."""

    keys: list[dict[str, Any]]


class ThreadTransition(_Answer):
    """A thread moved (a send receipt's ``transitions``, an event's)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)

    participant: str
    from_state: str = Field(alias="from")
    to: str
    outcome: Optional[str] = None
    deadline: Optional[int] = None


class CommitmentView(_Answer):
    """A commitment: who owes whom what, and where it stands."""

    id: str
    conversation_id: str
    name: str
    debtor: str
    creditor: str
    state: str
    deadline: Optional[int] = None
    created_by: str


class Violation(_Answer):
    """A broken rule, recorded."""

    kind: str
    agent: Optional[str] = None
    message_id: Optional[str] = None
    detail: str
    at: int


class ConversationView(_Answer):
    """``GET /v1/conversations/{id}``: the conversation as this reader may see it."""

    id: str
    template: str
    revision: str
    initiator: str
    participants: list[str]
    status: Status
    outcome: Optional[str] = None
    threads: list[ThreadView]
    vars: Optional[dict[str, Any]] = None
    parameters: Any = None
    context: Any = None
    deadline: Optional[int] = None
    messages: list[Message]
    commitments: list[CommitmentView]
    violations: list[Violation]
    version: int


class SendReceipt(_Answer):
    """What sending a message did."""

    message_id: str
    duplicate: bool
    receivers: list[str]
    transitions: list[ThreadTransition]
    violation: Optional[Violation] = None
    status: Status
    outcome: Optional[str] = None
    threads: list[ThreadView]


class ConversationSummary(_Answer):
    """One row of a conversation listing."""

    id: str
    template: str
    revision: str
    initiator: str
    participants: list[str]
    status: Status
    outcome: Optional[str] = None
    deadline: Optional[int] = None
    version: int


class ConversationPage(_Answer):
    """A page of ``GET /v1/conversations``; pass ``next_cursor`` on for the next."""

    conversations: list[ConversationSummary]
    next_cursor: Optional[str] = None


class CommitmentList(_Answer):
    """A page of ``GET /v1/commitments``."""

    commitments: list[CommitmentView]
    next_cursor: Optional[str] = None


class InboxItem(_Answer):
    """A message in an agent's inbox; ``seq`` is the position to resume after."""

    seq: int
    conversation_id: str
    template: Optional[str] = None
    message: Message


class InboxPage(_Answer):
    """``GET /v1/agents/{id}/inbox/poll``."""

    items: list[InboxItem]
    next_after: int


class InboxAck(_Request):
    """``POST /v1/agents/{id}/inbox/ack``."""

    through: int = Field(ge=0)


class InboxAcked(_Answer):
    """What an acknowledgement did; ``head`` is the newest entry's ``seq``."""

    through: int = Field(ge=0)
    head: int = Field(ge=0)


class Readiness(_Answer):
    """``GET /readyz``."""

    status: str
    templates: list[str]


class AgentKind(str, Enum):
    """What an agent of the agents file is."""

    #: It calls the API with its token.
    TOKEN = "token"
    #: A remote A2A agent the engine calls.
    A2A = "a2a"


class AgentInfo(_Answer):
    """One agent of ``GET /v1/agents``, with its inbox as the engine sees it now."""

    id: str
    kind: AgentKind
    #: Whether messages to it are kept in an inbox.
    inbox: bool
    #: Whether its inbox is also pushed to a webhook.
    webhook: bool
    #: Inbox streams and waiting long polls it has open on this node.
    inbox_streams: int = Field(ge=0)
    #: The ``seq`` of the newest entry its inbox has had (0: none yet).
    inbox_head: int = Field(ge=0)
    #: Entries kept in its inbox, not yet acknowledged.
    unacknowledged: int = Field(ge=0)


class AgentList(_Answer):
    """``GET /v1/agents``: the agents the caller may see (an agent: itself)."""

    agents: list[AgentInfo]


class TemplateSummary(_Answer):
    """A loaded template and its revision (a content hash)."""

    name: str
    revision: str


class TemplateList(_Answer):
    """``GET /v1/templates``."""

    revision: str
    templates: list[TemplateSummary]


class ConversationEvent(_Answer):
    """One entry of a conversation's event log (``GET /v1/conversations/{id}/events``).

    ``type`` says what happened (``started``, ``message_accepted``, ``message_refused``,
    ``thread_expired``, ``commitment_created``, ``completed``, …); the fields the SDK acts on
    are typed, the rest of each kind's fields stay in ``model_extra`` (a ``message_refused``
    event's ``sender``, ``performative`` and ``code``, for instance), so a kind the SDK does
    not know reads as well as the others.
    """

    model_config = ConfigDict(extra="allow")

    seq: int
    at: int
    type: str
    message: Optional[Message] = None
    transitions: list[ThreadTransition] = []
    outcome: Optional[str] = None
    reason: Optional[str] = None

    def expired_thread(self) -> Optional[ThreadTransition]:
        """The thread a ``thread_expired`` event moved (its fields are inlined)."""
        if self.type != "thread_expired":
            return None
        fields = dict(self.model_extra or {})
        fields["outcome"] = self.outcome
        return ThreadTransition.model_validate(fields)
