"""The SDK's HTTP/1.1 transport for httpx: asyncio streams and h11, with keep-alive.

httpx's default transport (httpcore over anyio) spent about 0.9 ms of CPU per request on the
development VM, where h11 over asyncio streams spends 0.25 ms: an agent makes four to six
requests per conversation, so the default transport made the SDK the bottleneck of any busy
agent. This one does only what a Colloquy client needs: HTTP/1.1 (what the server speaks),
plain or TLS, bodies streamed both ways (the event streams), connect/read/write timeouts, and
a pool of idle connections per server that drops them after ``keepalive_expiry`` (under the
server's 30 s idle cut-off) or once it finds them closed (a restarted server); a GET that
meets a pooled connection the server closes at that moment goes again on a fresh one. It plugs in below ``httpx.AsyncClient``, so the API, the
timeouts and the exceptions are httpx's; ``Client(http_client=...)`` brings httpx's own
transport back.
"""

from __future__ import annotations

import asyncio
import select
import ssl
import time
from typing import AsyncIterator, Optional

import h11
import httpx

#: Bytes asked of the socket per read.
READ_SIZE = 65536

_Key = tuple[str, str, int]


class _Connection:
    """One keep-alive connection: a socket and the h11 state of the exchange on it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)
        self.idle_since = 0.0
        #: Whether a request has gone out on it before (a closed idle one is retried).
        self.reused = False
        #: Whether any byte of an answer came on it since it was taken for a request.
        self.answered = False
        self._expired = False

    def close(self) -> None:
        self.writer.close()

    def _expire(self) -> None:
        self._expired = True
        self.writer.transport.abort()

    async def next_event(self, timeout: Optional[float]) -> object:
        """The next h11 event, reading as needed; ``asyncio.TimeoutError`` when a read
        waits past ``timeout``. (A timer that aborts the socket, not ``asyncio.wait_for``,
        which costs a task per read: a third of a request's CPU.)"""
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            if timeout is None:
                data = await self.reader.read(READ_SIZE)
            else:
                timer = asyncio.get_running_loop().call_later(timeout, self._expire)
                try:
                    data = await self.reader.read(READ_SIZE)
                finally:
                    timer.cancel()
                if self._expired:
                    raise asyncio.TimeoutError
            self.answered = self.answered or bool(data)
            self.h11.receive_data(data)


class _ResponseBody(httpx.AsyncByteStream):
    """A response body read from its connection as the caller asks for it; the connection
    goes back to the pool once the body was read to its end, and is closed otherwise."""

    def __init__(self, transport: AsyncioTransport, key: _Key, connection: _Connection,
                 request: httpx.Request, timeout: Optional[float]) -> None:
        self._transport = transport
        self._key = key
        self._connection: Optional[_Connection] = connection
        self._request = request
        self._timeout = timeout
        self._complete = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        connection = self._connection
        if connection is None:
            return
        while True:
            try:
                event = await connection.next_event(self._timeout)
            except asyncio.TimeoutError:
                raise httpx.ReadTimeout("no data in time", request=self._request) from None
            except h11.RemoteProtocolError as error:
                raise httpx.RemoteProtocolError(str(error), request=self._request) from error
            except OSError as error:
                raise httpx.ReadError(str(error), request=self._request) from error
            if isinstance(event, h11.Data):
                yield bytes(event.data)
            elif isinstance(event, h11.EndOfMessage):
                self._complete = True
                return

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is None:
            return
        if not self._complete:
            # A caller that stops at the last event of a stream leaves its end (the last
            # chunk) unread, though it has mostly arrived with that event: take what is
            # already here, so the connection can serve the next request.
            try:
                event = connection.h11.next_event()
                while isinstance(event, h11.Data):
                    event = connection.h11.next_event()
                self._complete = isinstance(event, h11.EndOfMessage)
            except h11.RemoteProtocolError:
                pass
        reusable = (self._complete and connection.h11.our_state is h11.DONE
                    and connection.h11.their_state is h11.DONE)
        if reusable:
            connection.h11.start_next_cycle()
            self._transport._release(self._key, connection)
        else:
            connection.close()


class AsyncioTransport(httpx.AsyncBaseTransport):
    """HTTP/1.1 with keep-alive over asyncio streams and h11 (see the module's docs)."""

    def __init__(self, *, ssl_context: Optional[ssl.SSLContext] = None,
                 keepalive_expiry: float = 20.0, max_idle_per_server: int = 128) -> None:
        self._ssl_context = ssl_context
        self._keepalive_expiry = keepalive_expiry
        self._max_idle = max_idle_per_server
        self._idle: dict[_Key, list[_Connection]] = {}

    def _release(self, key: _Key, connection: _Connection) -> None:
        idle = self._idle.setdefault(key, [])
        if len(idle) >= self._max_idle:
            connection.close()
            return
        connection.idle_since = time.monotonic()
        connection.reused = True
        idle.append(connection)

    def _take_idle(self, key: _Key) -> Optional[_Connection]:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if now - connection.idle_since < self._keepalive_expiry \
                    and not connection.reader.at_eof() and not _readable(connection):
                return connection
            connection.close()
        return None

    async def _open(self, key: _Key, request: httpx.Request,
                    timeout: Optional[float]) -> _Connection:
        scheme, host, port = key
        tls = None
        if scheme == "https":
            tls = self._ssl_context or ssl.create_default_context()
        opening = asyncio.open_connection(host, port, ssl=tls)
        try:
            reader, writer = await (asyncio.wait_for(opening, timeout) if timeout is not None
                                    else opening)
        except asyncio.TimeoutError:
            raise httpx.ConnectTimeout(f"connecting to {host}:{port}", request=request) from None
        except OSError as error:
            raise httpx.ConnectError(str(error), request=request) from error
        return _Connection(reader, writer)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url
        port = url.port or (443 if url.scheme == "https" else 80)
        key: _Key = (url.scheme, url.host, port)
        timeouts = request.extensions.get("timeout", {})
        connection = self._take_idle(key)
        if connection is not None:
            try:
                return await self._exchange(key, connection, request, timeouts)
            except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as error:
                # The server closed the idle connection as the request went out (the pool
                # drops connections it sees closed; this is the race left). Only a request
                # that may be repeated is sent again: a POST the server did see before a
                # crash would be recorded twice.
                if not (getattr(error, "before_answer", False) and _repeatable(request)):
                    raise
        connection = await self._open(key, request, timeouts.get("connect"))
        return await self._exchange(key, connection, request, timeouts)

    async def _exchange(self, key: _Key, connection: _Connection, request: httpx.Request,
                        timeouts: dict[str, Optional[float]]) -> httpx.Response:
        connection.answered = False
        try:
            await self._send(connection, request, timeouts.get("write"))
            event = await connection.next_event(timeouts.get("read"))
        except BaseException as error:
            connection.close()
            failure = _failure(error, request)
            if failure is None:
                raise
            failure.before_answer = _closed_while_idle(connection, error)  # type: ignore[attr-defined]
            raise failure from error
        if not isinstance(event, h11.Response):
            connection.close()
            failure = httpx.RemoteProtocolError(f"no answer: {event!r}", request=request)
            failure.before_answer = _closed_while_idle(connection, None)  # type: ignore[attr-defined]
            raise failure
        body = _ResponseBody(self, key, connection, request, timeouts.get("read"))
        return httpx.Response(
            event.status_code,
            headers=[(name, value) for name, value in event.headers],
            stream=body,
            extensions={"http_version": b"HTTP/1.1", "reason_phrase": event.reason},
        )

    @staticmethod
    async def _send(connection: _Connection, request: httpx.Request,
                    timeout: Optional[float]) -> None:
        """Writes the request, its head and body in one piece when the body is small (one
        system call: on a VM a loopback send costs tens of microseconds)."""
        writer, state = connection.writer, connection.h11
        head = h11.Request(method=request.method, target=request.url.raw_path,
                           headers=request.headers.raw)
        pending = [state.send(head) or b""]
        size = len(pending[0])
        assert isinstance(request.stream, httpx.AsyncByteStream)
        async for chunk in request.stream:
            pending.append(state.send(h11.Data(data=chunk)) or b"")
            size += len(chunk)
            if size >= READ_SIZE:
                await _write(writer, pending, timeout)
                pending, size = [], 0
        pending.append(state.send(h11.EndOfMessage()) or b"")
        await _write(writer, pending, timeout)

    async def aclose(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                connection.close()


async def _write(writer: asyncio.StreamWriter, pieces: list[bytes],
                 timeout: Optional[float]) -> None:
    writer.write(b"".join(pieces))
    if writer.transport.get_write_buffer_size() == 0:
        return  # all sent at once: nothing to wait for
    drained = writer.drain()
    await (asyncio.wait_for(drained, timeout) if timeout is not None else drained)


def _readable(connection: _Connection) -> bool:
    """Whether an idle connection has something to read: its end (the server closed it, or
    was restarted), as nothing else comes unasked. Asked of the socket, not of the event
    loop, which may not have run since the end came (a system call: microseconds)."""
    sock = connection.writer.get_extra_info("socket")
    if sock is None or sock.fileno() < 0:
        return True
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN)
    return bool(poller.poll(0))


def _repeatable(request: httpx.Request) -> bool:
    """Whether sending ``request`` again can do nothing twice, and its body can be sent again."""
    idempotent = request.method in ("GET", "HEAD", "OPTIONS", "PUT", "DELETE")
    return idempotent and isinstance(request.stream, httpx.ByteStream)


def _closed_while_idle(connection: _Connection, error: Optional[BaseException]) -> bool:
    """Whether a failed exchange met a pooled connection the server had closed: reused,
    closed or reset without a byte of answer, not timed out. Only then did the server never
    see the request, and sending it again cannot do anything twice."""
    timed_out = isinstance(error, asyncio.TimeoutError)
    return connection.reused and not connection.answered and not timed_out


def _failure(error: BaseException, request: httpx.Request) -> Optional[httpx.TransportError]:
    """The httpx exception for a failed exchange (``None``: not a transport failure)."""
    if isinstance(error, asyncio.TimeoutError):
        return httpx.ReadTimeout("no answer in time", request=request)
    if isinstance(error, h11.RemoteProtocolError):
        return httpx.RemoteProtocolError(str(error), request=request)
    if isinstance(error, h11.LocalProtocolError):
        return httpx.LocalProtocolError(str(error), request=request)
    if isinstance(error, OSError):
        return httpx.ReadError(str(error) or type(error).__name__, request=request)
    return None
