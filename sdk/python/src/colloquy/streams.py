"""Server-sent event streams that survive disconnects.

On a broken connection (or a server restarting) a stream waits a little, doubling the wait
up to :data:`MAX_RECONNECT_DELAY`, reconnects with ``Last-Event-ID`` set to the last event it
handed out, and goes on. Nothing is skipped; an event may come twice only if the caller had
not taken it yet, so processing stays at-least-once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import TYPE_CHECKING, AsyncIterator, Optional

import httpx
from pydantic import ValidationError

from .errors import ApiError, DecodeError, error_from_answer
from .models import ConversationEvent, InboxItem
from .sse import SseEvent, SseParser

if TYPE_CHECKING:
    from .client import Client

log = logging.getLogger("colloquy")

#: First wait before a reconnect; doubled after each failed attempt.
FIRST_RECONNECT_DELAY = 0.05
#: Longest wait between reconnects: a restarted server is found within this.
MAX_RECONNECT_DELAY = 2.0
#: How long a stream may stay silent before it is taken for dead and reopened. The server
#: sends a keep-alive comment every 15 s, so a live stream is never this quiet.
STREAM_READ_TIMEOUT = 45.0


class _Reader:
    """One SSE resource, reconnecting on transport failures and 5xx answers."""

    def __init__(self, client: Client, path: str, after: int, ends: bool) -> None:
        self._client = client
        self._path = path
        self.last_id = after
        # An event stream ends on purpose after `completed`; an inbox never does, so its
        # end is a dropped connection.
        self._ends = ends
        self._response: Optional[httpx.Response] = None
        self._chunks: Optional[AsyncIterator[bytes]] = None
        self._parser = SseParser()
        self._pending: deque[SseEvent] = deque()
        self._delay = FIRST_RECONNECT_DELAY

    async def next(self) -> Optional[SseEvent]:
        """The next event; ``None`` once an event stream ended. Fails only when the server
        refuses the stream (401, 403, 404)."""
        while True:
            if self._pending:
                event = self._pending.popleft()
                if event.id is not None and event.id.isdigit():
                    self.last_id = int(event.id)
                return event
            if self._chunks is None:
                try:
                    await self._connect()
                except httpx.TransportError as error:
                    await self._back_off(error)
                except ApiError as error:
                    if not error.transient:
                        raise
                    await self._back_off(error)
                continue
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                await self.close()
                if self._ends:
                    return None
                await self._back_off("the server closed the stream")
                continue
            except httpx.TransportError as error:
                await self.close()
                await self._back_off(error)
                continue
            except asyncio.CancelledError:
                # A read cut off mid-chunk leaves the connection in an unknown place: drop
                # it, so the next call resumes cleanly from the last event handed out.
                await self.close()
                raise
            self._pending.extend(self._parser.push(chunk))

    async def _connect(self) -> None:
        refused = None
        while True:
            headers = await self._client._auth_headers(refused)
            headers["accept"] = "text/event-stream"
            headers["last-event-id"] = str(self.last_id)
            request = self._client.http.build_request(
                "GET",
                self._client.base_url + self._path,
                headers=headers,
                timeout=httpx.Timeout(self._client.timeout, read=STREAM_READ_TIMEOUT),
            )
            response = await self._client.http.send(request, stream=True)
            # Refused with a provider's token: once more with a new one.
            if response.status_code == 401 and self._client._provided is not None and refused is None:
                await response.aread()
                await response.aclose()
                refused = headers
                continue
            break
        if not response.is_success:
            body = await response.aread()
            await response.aclose()
            raise error_from_answer(response.status_code, body)
        self._response = response
        self._chunks = response.aiter_bytes()
        self._parser = SseParser()
        self._delay = FIRST_RECONNECT_DELAY

    async def _back_off(self, why: object) -> None:
        log.debug("stream %s reconnects in %.2f s: %s", self._path, self._delay, why)
        await asyncio.sleep(self._delay)
        self._delay = min(self._delay * 2, MAX_RECONNECT_DELAY)

    async def close(self) -> None:
        """Closes the connection (a later :meth:`next` reconnects)."""
        response, self._response, self._chunks = self._response, None, None
        if response is not None:
            await response.aclose()


class InboxStream:
    """An agent's inbox as an async iterator of :class:`InboxItem`, in order, for ever.

    ``async for item in client.inbox(after)``; :attr:`position` is the ``seq`` of the last
    item handed out, to resume from later. Close it with :meth:`aclose` (or ``async with``).
    """

    def __init__(self, client: Client, after: int) -> None:
        path = f"/v1/agents/{client._segment(client.agent_id)}/inbox"
        self._reader = _Reader(client, path, after, ends=False)

    @property
    def position(self) -> int:
        """The ``seq`` of the last item handed out."""
        return self._reader.last_id

    async def next(self) -> InboxItem:
        """The next item; waits as long as it takes, reconnecting as needed."""
        while True:
            event = await self._reader.next()
            if event is None or event.event != "message":
                continue
            try:
                return InboxItem.model_validate_json(event.data)
            except ValidationError as error:
                raise DecodeError(f"inbox item: {error}") from error

    def __aiter__(self) -> InboxStream:
        return self

    async def __anext__(self) -> InboxItem:
        return await self.next()

    async def aclose(self) -> None:
        """Closes the connection."""
        await self._reader.close()

    async def __aenter__(self) -> InboxStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class EventStream:
    """A conversation's event log as an async iterator of :class:`ConversationEvent`,
    ending after its ``completed`` event."""

    def __init__(self, client: Client, conversation_id: str, after: int) -> None:
        path = f"/v1/conversations/{client._segment(conversation_id)}/events"
        self._reader = _Reader(client, path, after, ends=True)

    @property
    def position(self) -> int:
        """The ``seq`` of the last event handed out."""
        return self._reader.last_id

    async def next(self) -> Optional[ConversationEvent]:
        """The next event, or ``None`` once the conversation completed."""
        event = await self._reader.next()
        if event is None:
            return None
        try:
            return ConversationEvent.model_validate_json(event.data)
        except ValidationError as error:
            raise DecodeError(f"conversation event: {error}") from error

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> ConversationEvent:
        event = await self.next()
        if event is None:
            raise StopAsyncIteration
        return event

    async def aclose(self) -> None:
        """Closes the connection."""
        await self._reader.close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
