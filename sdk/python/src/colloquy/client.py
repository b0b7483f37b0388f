""":class:`Client`: one agent's connection to a Colloquy server, with a method per endpoint
and the initiator's helpers (``request``, ``query``, ``call_for_proposals``, in ``ask``)."""

from __future__ import annotations

import functools
import ssl
from typing import Any, AsyncIterator, Iterable, Optional, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from . import ask
from .errors import DecodeError, TransportError, raise_for_answer
from .models import (
    AgentList,
    AuditRecord,
    CommitmentList,
    CommitmentView,
    ConversationPage,
    ConversationSummary,
    ConversationView,
    InboxAck,
    InboxAcked,
    InboxPage,
    Message,
    MovesView,
    OpenMove,
    Readiness,
    SendMessage,
    SendReceipt,
    StartConversation,
    TemplateList,
)
from .signing import SigningKey, signed_fields, uuid7
from .streams import EventStream, InboxStream
from .tokens import ProvidedToken, TokenProvider
from .transport import AsyncioTransport

#: The header naming the caller when the server runs without an agents file.
AGENT_HEADER = "x-agent-id"
#: How long one call may take unless told otherwise (seconds). Long polls add their wait.
DEFAULT_TIMEOUT = 30.0
#: How long an idle pooled connection is kept: under the server's 30 s idle cut-off, so a
#: request never goes out on a connection the server is closing at that moment.
POOL_IDLE_SECONDS = 20.0
#: Idle connections kept for reuse. Each conversation a helper follows holds one event
#: stream open, so an agent running 64 conversations at once wants about twice that.
POOL_KEEPALIVE = 128

_Model = TypeVar("_Model", bound=BaseModel)


@functools.lru_cache(maxsize=1)
def _tls_context() -> ssl.SSLContext:
    """One TLS context for every client of the process: loading the system's certificates
    takes tens of milliseconds (34 ms on the development VM), not to be spent per client."""
    return ssl.create_default_context()


class Client:
    """An agent's client: ``Client("http://127.0.0.1:7700", "alice", "alice-token")``.

    Without a token it names itself with ``X-Agent-Id``, which only a server in open
    development mode accepts. ``token`` may also be a token provider (a callable taking
    the reason, ``"first"``, ``"near_expiry"`` or ``"refused"``, answering a token or an
    awaitable of one): it is asked when the client has no token yet, when the JWT it has
    is near its ``exp``, and when the server refuses it with 401, after which the request
    is sent once more (:mod:`colloquy.tokens`). ``http_client`` lets the caller bring its own
    ``httpx.AsyncClient`` (proxies, TLS, transports); the SDK then leaves closing it to the
    caller. Use it as ``async with Client(...) as alice:`` or call :meth:`aclose`.

    With ``signing_key`` (a :class:`~colloquy.signing.SigningKey` whose public half the
    server has for this agent, ``signing_keys`` in the agents file) the client signs every
    message it sends, and the opening message of every conversation it starts
    (:meth:`signing_with`).
    """

    def __init__(
        self,
        base_url: str,
        agent_id: str,
        token: Optional[str | TokenProvider] = None,
        http_client: Optional[httpx.AsyncClient] = None,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        signing_key: Optional[SigningKey] = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        #: The agent's private key, when its messages are signed.
        self.signing_key: Optional[SigningKey] = signing_key
        self.agent_id = agent_id
        self.timeout = timeout
        self._token: Optional[str] = token if isinstance(token, str) or token is None else None
        self._provided: Optional[ProvidedToken] = (
            ProvidedToken(token) if callable(token) else None
        )
        self._owns_http = http_client is None
        self.http = http_client or httpx.AsyncClient(
            timeout=timeout,
            transport=AsyncioTransport(
                ssl_context=_tls_context() if self.base_url.startswith("https:") else None,
                keepalive_expiry=POOL_IDLE_SECONDS,
                max_idle_per_server=POOL_KEEPALIVE,
            ),
        )

    def signing_with(self, key: Optional[SigningKey]) -> Client:
        """Signs every message this client sends from now on (and the opening message of
        every conversation it starts) with ``key``, whose public half the server has for
        this agent (``signing_keys`` in the agents file); ``None`` stops signing. A message
        without an id, or a start without a conversation id, gets a fresh UUIDv7 one: the
        signature covers both. Answers the client itself."""
        self.signing_key = key
        return self

    def signed(self, conversation_id: str, message: SendMessage) -> SendMessage:
        """``message`` as this client sends it in ``conversation_id``: with an id and signed
        when the client has a key, as it is otherwise."""
        key = self.signing_key
        if key is None:
            return message
        message_id = message.message_id or uuid7()
        # The content as it goes on the wire, which is what the server checks.
        wire = message.model_dump(mode="json", exclude_none=True, by_alias=True)
        fields = signed_fields(
            conversation_id, self.agent_id, message_id=message_id,
            performative=message.performative, to=message.to, content=wire.get("content"),
            in_reply_to=message.in_reply_to, reply_by=message.reply_by,
        )
        return message.model_copy(
            update={"message_id": message_id, "signature": key.sign_fields(fields)})

    async def aclose(self) -> None:
        """Closes the connection pool (unless the caller brought it)."""
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- plumbing ---------------------------------------------------------------------------

    async def _auth_headers(self, refused: Optional[dict[str, str]] = None) -> dict[str, str]:
        """The credential headers; ``refused``, the headers of a request the server just
        refused with 401 (a token provider is then asked for a new token)."""
        if self._provided is not None:
            refused_token = None
            if refused is not None:
                refused_token = refused.get("authorization", "").removeprefix("Bearer ")
            token = await self._provided.get(refused_token)
            return {"authorization": f"Bearer {token}"}
        if self._token is not None:
            return {"authorization": f"Bearer {self._token}"}
        return {AGENT_HEADER: self.agent_id}

    @staticmethod
    def _segment(value: str) -> str:
        """One path segment, percent-encoded (commitment ids contain ``/``)."""
        return quote(value, safe="-_.~:")

    async def call_api(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        body: Optional[BaseModel] = None,
        params: Optional[dict[str, Any]] = None,
        content: Any = None,
        timeout: Optional[float] = None,
    ) -> Any:
        """Calls any endpoint as this agent and answers its parsed JSON; raises the
        :class:`~colloquy.errors.ApiError` of an error answer. For endpoints without a
        method of their own."""
        response = await self._send(method, path, json=json, body=body, params=params,
                                    content=content, timeout=timeout)
        try:
            return response.json()
        except ValueError as error:
            raise DecodeError(f"{method} {path}: not JSON: {error}") from error

    async def _send(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        body: Optional[BaseModel] = None,
        params: Optional[dict[str, Any]] = None,
        content: Any = None,
        timeout: Optional[float] = None,
    ) -> httpx.Response:
        if body is not None:
            content = body.model_dump_json(exclude_none=True, by_alias=True)
        if params is not None:
            params = {key: value for key, value in params.items() if value is not None}
        refused: Optional[dict[str, str]] = None
        while True:
            headers = await self._auth_headers(refused)
            if body is not None:
                headers["content-type"] = "application/json"
            try:
                response = await self.http.request(
                    method,
                    self.base_url + path,
                    headers=headers,
                    json=json,
                    content=content,
                    params=params,
                    timeout=timeout if timeout is not None else self.timeout,
                )
            except httpx.TransportError as error:
                raise TransportError(f"{method} {path}: {error!r}") from error
            # Refused with a provider's token: once more with a new one.
            if response.status_code == 401 and self._provided is not None and refused is None:
                await response.aread()
                refused = headers
                continue
            await raise_for_answer(response)
            return response

    async def _call(self, model: type[_Model], method: str, path: str, **kwargs: Any) -> _Model:
        response = await self._send(method, path, **kwargs)
        try:
            return model.model_validate_json(response.content)
        except ValidationError as error:
            raise DecodeError(f"{method} {path}: {error}") from error

    # -- endpoints --------------------------------------------------------------------------

    async def ready(self) -> Readiness:
        """``GET /readyz``: the server is up and has templates (else ServiceUnavailable)."""
        return await self._call(Readiness, "GET", "/readyz")

    async def start(
        self,
        template: str,
        participants: Iterable[str],
        *,
        message: Optional[SendMessage] = None,
        parameters: Optional[dict[str, Any]] = None,
        context: Optional[dict[str, Any]] = None,
        conversation_id: Optional[str] = None,
        deadline_ms: Optional[int] = None,
    ) -> ConversationView:
        """``POST /v1/conversations``: starts a conversation with this agent as initiator;
        ``message``, when given, is the opening act, sent in the same call (signed, over
        ``conversation_id`` or a fresh UUIDv7 one, when the client has a key)."""
        if message is not None and self.signing_key is not None:
            conversation_id = conversation_id or uuid7()
            message = self.signed(conversation_id, message)
        start = StartConversation(
            template=template,
            participants=list(participants),
            parameters=parameters,
            context=context,
            conversation_id=conversation_id,
            deadline_ms=deadline_ms,
            message=message,
        )
        return await self._call(ConversationView, "POST", "/v1/conversations", body=start)

    async def send(
        self,
        conversation_id: str,
        performative: str,
        content: Any = None,
        *,
        to: Optional[Iterable[str]] = None,
        in_reply_to: Optional[str] = None,
        reply_by: Optional[int] = None,
        message_id: Optional[str] = None,
    ) -> SendReceipt:
        """``POST /v1/conversations/{id}/messages``: sends a message as this agent.

        ``to`` empty means the other side of this agent's thread; ``reply_by`` is Unix
        milliseconds; ``message_id`` makes a retry safe (the same id answers the first
        receipt, marked ``duplicate``). With a signing key the message is signed (and
        given a UUIDv7 ``message_id`` when it has none)."""
        message = SendMessage(
            performative=performative,
            content=content,
            to=list(to) if to is not None else None,
            in_reply_to=in_reply_to,
            reply_by=reply_by,
            message_id=message_id,
        )
        message = self.signed(conversation_id, message)
        path = f"/v1/conversations/{self._segment(conversation_id)}/messages"
        return await self._call(SendReceipt, "POST", path, body=message)

    async def conversation(self, conversation_id: str) -> ConversationView:
        """``GET /v1/conversations/{id}``: the conversation as this agent may see it."""
        path = f"/v1/conversations/{self._segment(conversation_id)}"
        return await self._call(ConversationView, "GET", path)

    async def moves(self, conversation_id: str) -> list[OpenMove]:
        """``GET /v1/conversations/{id}/moves``: what this agent may send now, to whom, and
        the guard each must satisfy, in template order."""
        path = f"/v1/conversations/{self._segment(conversation_id)}/moves"
        return (await self._call(MovesView, "GET", path)).moves

    async def audit(self, conversation_id: str) -> AuditRecord:
        """``GET /v1/conversations/{id}/audit``: the conversation's audit record as this agent
        may have it (the events it may not see as their digests). Check it with
        :func:`colloquy.audit.verify` (the chain, the senders' signatures, and the engine's
        with its keys), keep it (``record.model_dump_json(exclude_none=True)``) and check it
        again offline with ``colloquy audit verify`` (docs/security.md)."""
        path = f"/v1/conversations/{self._segment(conversation_id)}/audit"
        return await self._call(AuditRecord, "GET", path)

    async def conversations(
        self,
        *,
        participant: Optional[str] = None,
        state: Optional[str] = None,
        template: Optional[str] = None,
        cursor: Optional[str] = None,
        limit: Optional[int] = None,
        outcome: Optional[str] = None,
    ) -> ConversationPage:
        """``GET /v1/conversations``: one page of the conversations this agent may read
        (``outcome``: only those that ended with it)."""
        params = {"participant": participant, "state": state, "template": template,
                  "cursor": cursor, "limit": limit, "outcome": outcome}
        return await self._call(ConversationPage, "GET", "/v1/conversations", params=params)

    async def all_conversations(
        self,
        *,
        participant: Optional[str] = None,
        state: Optional[str] = None,
        template: Optional[str] = None,
    ) -> AsyncIterator[ConversationSummary]:
        """Every conversation this agent may read, following the pages, in id order."""
        cursor: Optional[str] = None
        while True:
            page = await self.conversations(
                participant=participant, state=state, template=template, cursor=cursor
            )
            for summary in page.conversations:
                yield summary
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def commitments(
        self, *, role: Optional[str] = None, state: Optional[str] = None
    ) -> list[CommitmentView]:
        """``GET /v1/commitments``: this agent's commitments, optionally as ``debtor`` or
        ``creditor`` and in one state; every page of them, in id order."""
        found: list[CommitmentView] = []
        cursor: Optional[str] = None
        while True:
            params = {"role": role, "state": state, "cursor": cursor}
            page = await self._call(CommitmentList, "GET", "/v1/commitments", params=params)
            found.extend(page.commitments)
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    async def release_commitment(self, commitment_id: str) -> CommitmentView:
        """Waives a commitment owed to this agent (its creditor)."""
        path = f"/v1/commitments/{self._segment(commitment_id)}/release"
        return await self._call(CommitmentView, "POST", path)

    async def cancel_commitment(self, commitment_id: str) -> CommitmentView:
        """Withdraws from a commitment this agent owes (its debtor)."""
        path = f"/v1/commitments/{self._segment(commitment_id)}/cancel"
        return await self._call(CommitmentView, "POST", path)

    async def agents(self) -> AgentList:
        """``GET /v1/agents``: the agents this caller may see (an agent: itself), with their
        inboxes now."""
        return await self._call(AgentList, "GET", "/v1/agents")

    async def templates(self) -> TemplateList:
        """``GET /v1/templates``: the loaded templates and their revisions."""
        return await self._call(TemplateList, "GET", "/v1/templates")

    async def poll_inbox(
        self, after: int = 0, *, wait_ms: int = 0, limit: Optional[int] = None
    ) -> InboxPage:
        """``GET /v1/agents/{me}/inbox/poll``: items after ``after``, waiting up to
        ``wait_ms`` for the first one (for code that cannot hold a stream open)."""
        path = f"/v1/agents/{self._segment(self.agent_id)}/inbox/poll"
        params = {"after": after, "wait_ms": wait_ms, "limit": limit}
        return await self._call(InboxPage, "GET", path, params=params,
                                timeout=self.timeout + wait_ms / 1000)

    async def acknowledge(self, through: int) -> InboxAcked:
        """``POST /v1/agents/{me}/inbox/ack``: this agent has handled its inbox up to and
        including ``through``, and the server deletes those entries. :class:`Agent` does
        this on its own for what its handlers handle."""
        path = f"/v1/agents/{self._segment(self.agent_id)}/inbox/ack"
        return await self._call(InboxAcked, "POST", path, body=InboxAck(through=through))

    async def acknowledge_inbox(self) -> InboxAcked:
        """Acknowledges the whole inbox as it stands, for an agent that only starts
        conversations: the helpers follow event streams, yet replies land in the inbox too,
        and a durable store keeps them until acknowledged. Never call it from an agent that
        also reads its inbox: it deletes entries nobody has read."""
        asked = await self.acknowledge(0)  # `through: 0` acknowledges nothing, answers head
        if asked.head == 0:
            return asked
        return await self.acknowledge(asked.head)

    def inbox(self, after: int = 0) -> InboxStream:
        """The inbox as a stream of items after ``after`` (0: every entry not yet
        acknowledged), reconnecting and resuming on its own."""
        return InboxStream(self, after)

    def events(self, conversation_id: str, after: int = 0) -> EventStream:
        """A conversation's events after ``after``, ending after its ``completed`` event."""
        return EventStream(self, conversation_id, after)

    # -- the initiator's helpers (ask.py) ---------------------------------------------------

    async def request(
        self,
        participant: str,
        content: Any,
        *,
        timeout: float = ask.DEFAULT_TIMEOUT,
        observe: Optional[ask.Observer] = None,
        reply_within: Optional[float] = None,
        parameters: Optional[dict[str, Any]] = None,
        conversation_id: Optional[str] = None,
        template: str = "fipa-request",
    ) -> ask.Answer:
        """FIPA Request: asks ``participant`` to perform an action and resolves on its final
        answer (inform, failure, refuse, not-understood, or a deadline's ``timeout``),
        never on an intermediate ``agree``. ``observe`` is called with each message the
        participant sends; ``reply_within`` (seconds) sets the request's reply-by; past
        ``timeout`` seconds, :class:`~colloquy.errors.AnswerTimeout`."""
        pending = await self.begin_request(
            participant, content, observe=observe, reply_within=reply_within,
            parameters=parameters, conversation_id=conversation_id, template=template,
        )
        return await pending.answer(timeout)

    async def query(
        self,
        participant: str,
        content: Any,
        *,
        timeout: float = ask.DEFAULT_TIMEOUT,
        observe: Optional[ask.Observer] = None,
        reply_within: Optional[float] = None,
        parameters: Optional[dict[str, Any]] = None,
        conversation_id: Optional[str] = None,
        template: str = "fipa-query",
    ) -> ask.Answer:
        """FIPA Query: asks ``participant`` a ``query-ref`` (``content`` names the ``ref``)
        and resolves on its answer; options as :meth:`request`."""
        pending = await self.begin_query(
            participant, content, observe=observe, reply_within=reply_within,
            parameters=parameters, conversation_id=conversation_id, template=template,
        )
        return await pending.answer(timeout)

    async def begin_request(
        self,
        participant: str,
        content: Any,
        *,
        observe: Optional[ask.Observer] = None,
        reply_within: Optional[float] = None,
        parameters: Optional[dict[str, Any]] = None,
        conversation_id: Optional[str] = None,
        template: str = "fipa-request",
    ) -> ask.PendingAnswer:
        """Starts a FIPA Request and returns at once: a handle to ``cancel()`` it and to
        await its ``answer(timeout)``."""
        return await ask.begin(
            self, template, "request", participant, content, observe=observe,
            reply_within=reply_within, parameters=parameters, conversation_id=conversation_id,
        )

    async def begin_query(
        self,
        participant: str,
        content: Any,
        *,
        observe: Optional[ask.Observer] = None,
        reply_within: Optional[float] = None,
        parameters: Optional[dict[str, Any]] = None,
        conversation_id: Optional[str] = None,
        template: str = "fipa-query",
    ) -> ask.PendingAnswer:
        """Starts a FIPA Query (``query-ref``) and returns at once, as :meth:`begin_request`."""
        return await ask.begin(
            self, template, "query-ref", participant, content, observe=observe,
            reply_within=reply_within, parameters=parameters, conversation_id=conversation_id,
        )

    def follow(self, conversation_id: str, participant: str) -> ask.PendingAnswer:
        """The end of ``participant``'s thread in a conversation this agent started, for
        example the winner's ``inform`` after an accepted proposal."""
        return ask.PendingAnswer(self, conversation_id, participant)

    async def call_for_proposals(
        self,
        participants: Iterable[str],
        content: Any,
        *,
        reply_within: Optional[float] = None,
        reply_by: Optional[int] = None,
        timeout: float = ask.DEFAULT_TIMEOUT,
        observe: Optional[ask.Observer] = None,
        parameters: Optional[dict[str, Any]] = None,
        conversation_id: Optional[str] = None,
        template: str = "fipa-contract-net",
    ) -> ask.Proposals:
        """FIPA Contract Net: a ``cfp`` to ``participants`` with a reply-by
        (``reply_within`` seconds, or ``reply_by`` Unix ms); resolves with the proposals,
        refusals and silences at the reply-by. Answer them with :meth:`accept` and
        :meth:`reject`, then :meth:`follow` the winner to its ``inform``."""
        return await ask.call_for_proposals(
            self, participants, content, reply_within=reply_within, reply_by=reply_by,
            timeout=timeout, observe=observe, parameters=parameters,
            conversation_id=conversation_id, template=template,
        )

    async def accept(
        self, conversation_id: str, proposal: Message, content: Any = None
    ) -> SendReceipt:
        """``accept-proposal`` to the proposal's sender, in reply to it."""
        return await self.answer(conversation_id, proposal, "accept-proposal", content)

    async def reject(
        self, conversation_id: str, proposal: Message, content: Any = None
    ) -> SendReceipt:
        """``reject-proposal`` to the proposal's sender, in reply to it."""
        return await self.answer(conversation_id, proposal, "reject-proposal", content)

    async def answer(
        self, conversation_id: str, message: Message, performative: str, content: Any = None
    ) -> SendReceipt:
        """Sends ``performative`` to the sender of ``message``, in reply to it."""
        return await self.send(
            conversation_id,
            performative,
            content if content is not None else {},
            to=[message.sender],
            in_reply_to=message.id,
        )

    async def cancel(
        self, conversation_id: str, content: Any = None, *, to: Optional[Iterable[str]] = None
    ) -> SendReceipt:
        """``cancel``: calls off what this agent asked for (the participant confirms with
        ``inform``, and the answer's outcome is then ``cancelled``)."""
        return await self.send(
            conversation_id, "cancel", content if content is not None else {}, to=to
        )
