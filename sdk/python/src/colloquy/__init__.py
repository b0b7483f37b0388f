"""Python SDK for agents that talk through a Colloquy server.

An initiator asks and gets the final answer; a participant registers handlers::

    from colloquy import Agent, Client

    async with Client("http://127.0.0.1:7700", "alice", "alice-token") as alice:
        answer = await alice.request("bob", {"action": "book-room"})
        print(answer.outcome, answer.reply.content if answer.reply else None)

    bob = Agent(Client("http://127.0.0.1:7700", "bob", "bob-token"))

    @bob.on("request", template="fipa-request")
    async def book(msg):
        await msg.agree()
        await msg.inform({"done": True})

    await bob.run()

Layout (one job per module):

- ``client``: :class:`Client`, one method per HTTP endpoint, and the initiator's helpers.
- ``ask``: what ``request``, ``query`` and ``call_for_proposals`` do: follow the
  conversation's events to the final answer (:class:`Answer`, :class:`Proposals`,
  :class:`PendingAnswer` to cancel or resume).
- ``agent``: the participant's side: :class:`Agent` runs handlers by performative and
  template over the inbox stream and acknowledges what they handled; :class:`Incoming` has
  the reply helpers.
- ``streams``: the inbox and event streams, reconnecting and resuming with
  ``Last-Event-ID``; ``sse`` parses the server-sent events format.
- ``transport``: the httpx transport requests go through (HTTP/1.1 over asyncio and h11,
  keep-alive), cheaper per request than httpcore's.
- ``models``: the wire types (pydantic), checked against the server's OpenAPI document.
- ``errors``: :class:`ApiError` and a subclass per HTTP status, and the SDK's own failures.
- ``sync``: :class:`SyncClient` and :class:`SyncAgent`, the blocking twins.
- ``signing``: :class:`SigningKey` signs the messages a client sends; ``KeySet`` checks
  signatures (the ``signing`` extra: the ``cryptography`` package).
- ``audit``: ``verify`` checks an audit record offline: its chain, the senders'
  signatures and the engine's.

The reference is ``docs/sdk-python.md``.
"""

from .agent import Agent, Incoming
from .ask import Answer, PendingAnswer, Proposals, now_ms
from .client import Client
from .errors import (
    AnswerTimeout,
    ApiError,
    BadRequest,
    ColloquyError,
    Conflict,
    ConversationEnded,
    DecodeError,
    Forbidden,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    ServerError,
    ServiceUnavailable,
    TransportError,
    Unauthenticated,
    Unprocessable,
)
from .models import (
    AgentInfo,
    AgentKind,
    AgentList,
    AuditRecord,
    CommitmentState,
    CommitmentView,
    ConversationEvent,
    ConversationPage,
    ConversationSummary,
    ConversationView,
    ErrorBody,
    InboxAcked,
    InboxItem,
    InboxPage,
    Message,
    MovesView,
    OpenMove,
    Outcome,
    Readiness,
    SendMessage,
    SendReceipt,
    StartConversation,
    TemplateList,
    TemplateSummary,
    ThreadTransition,
    ThreadView,
    Violation,
)
from .signing import KeySet, SigningError, SigningKey, SigningUnavailable
from .streams import EventStream, InboxStream
from .sync import SyncAgent, SyncClient, SyncIncoming
from .tokens import TokenProvider

__all__ = [
    "Agent",
    "AgentInfo",
    "AgentKind",
    "AgentList",
    "Answer",
    "AnswerTimeout",
    "ApiError",
    "AuditRecord",
    "BadRequest",
    "Client",
    "ColloquyError",
    "CommitmentState",
    "CommitmentView",
    "Conflict",
    "ConversationEnded",
    "ConversationEvent",
    "ConversationPage",
    "ConversationSummary",
    "ConversationView",
    "DecodeError",
    "ErrorBody",
    "EventStream",
    "Forbidden",
    "InboxAcked",
    "InboxItem",
    "InboxPage",
    "InboxStream",
    "Incoming",
    "KeySet",
    "Message",
    "MethodNotAllowed",
    "MovesView",
    "NotFound",
    "OpenMove",
    "Outcome",
    "PayloadTooLarge",
    "PendingAnswer",
    "Proposals",
    "Readiness",
    "RequestTimeout",
    "SendMessage",
    "SendReceipt",
    "ServerError",
    "ServiceUnavailable",
    "SigningError",
    "SigningKey",
    "SigningUnavailable",
    "StartConversation",
    "SyncAgent",
    "SyncClient",
    "SyncIncoming",
    "TemplateList",
    "TemplateSummary",
    "ThreadTransition",
    "ThreadView",
    "TokenProvider",
    "TransportError",
    "Unauthenticated",
    "Unprocessable",
    "Violation",
    "now_ms",
]
