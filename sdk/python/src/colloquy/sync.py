"""Blocking versions of :class:`~colloquy.Client` and :class:`~colloquy.Agent`, for scripts
and frameworks without an event loop.

Each wraps the async object and runs it on an event loop of its own, in the calling thread:
no thread runs in the background. :class:`SyncAgent` runs its (plain) handlers on the loop's
worker threads, which the loop joins when the agent stops, so none is left running either.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable, Concatenate, Optional, ParamSpec, TypeVar

import httpx

from .agent import DEFAULT_GRACE, Agent, Incoming
from .client import DEFAULT_TIMEOUT, Client
from .models import SendReceipt
from .signing import SigningKey
from .tokens import TokenProvider

_P = ParamSpec("_P")
_R = TypeVar("_R")


class _Loop:
    """An event loop owned by one object, run in whichever thread calls it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()

    def run(self, awaitable: Awaitable[_R]) -> _R:
        return self.loop.run_until_complete(awaitable)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.run_until_complete(self.loop.shutdown_default_executor())
        self.loop.close()


def _blocking(
    method: Callable[Concatenate[Client, _P], Awaitable[_R]],
) -> Callable[Concatenate[SyncClient, _P], _R]:
    """The blocking twin of a :class:`Client` coroutine method, same signature."""

    def call(self: SyncClient, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return self._loop.run(method(self.client, *args, **kwargs))

    call.__name__ = method.__name__
    call.__qualname__ = f"SyncClient.{method.__name__}"
    call.__doc__ = method.__doc__
    return call


class SyncClient:
    """:class:`~colloquy.Client` with blocking methods: ``SyncClient(url, "alice", token)
    .request("bob", {...})``. Use it from one thread; ``with SyncClient(...) as alice:``
    or :meth:`close`."""

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
        self._loop = _Loop()
        #: The async client underneath (its coroutines run on this object's loop only).
        self.client = Client(base_url, agent_id, token, http_client, timeout=timeout,
                             signing_key=signing_key)

    def signing_with(self, key: Optional[SigningKey]) -> SyncClient:
        """As :meth:`Client.signing_with`: every message sent from now on is signed."""
        self.client.signing_with(key)
        return self

    @property
    def agent_id(self) -> str:
        return self.client.agent_id

    def close(self) -> None:
        """Closes the connections and the loop."""
        if not self._loop.loop.is_closed():
            self._loop.run(self.client.aclose())
        self._loop.close()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    ready = _blocking(Client.ready)
    start = _blocking(Client.start)
    send = _blocking(Client.send)
    conversation = _blocking(Client.conversation)
    conversations = _blocking(Client.conversations)
    audit = _blocking(Client.audit)
    commitments = _blocking(Client.commitments)
    release_commitment = _blocking(Client.release_commitment)
    cancel_commitment = _blocking(Client.cancel_commitment)
    agents = _blocking(Client.agents)
    templates = _blocking(Client.templates)
    poll_inbox = _blocking(Client.poll_inbox)
    acknowledge = _blocking(Client.acknowledge)
    acknowledge_inbox = _blocking(Client.acknowledge_inbox)
    call_api = _blocking(Client.call_api)
    request = _blocking(Client.request)
    query = _blocking(Client.query)
    call_for_proposals = _blocking(Client.call_for_proposals)
    accept = _blocking(Client.accept)
    reject = _blocking(Client.reject)
    answer = _blocking(Client.answer)
    cancel = _blocking(Client.cancel)


class SyncIncoming:
    """:class:`~colloquy.agent.Incoming` for plain handlers: the reply helpers block."""

    def __init__(self, incoming: Incoming, loop: asyncio.AbstractEventLoop) -> None:
        self.incoming = incoming
        self.item = incoming.item
        self.conversation_id = incoming.conversation_id
        self.template = incoming.template
        self.message = incoming.message
        self.performative = incoming.performative
        self.sender = incoming.sender
        self.content = incoming.content
        self._loop = loop

    def reply(self, performative: str, content: Any = None) -> SendReceipt:
        """As :meth:`Incoming.reply`, blocking."""
        coroutine = self.incoming.reply(performative, content)
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def agree(self, content: Any = None) -> SendReceipt:
        return self.reply("agree", content)

    def refuse(self, content: Any = None) -> SendReceipt:
        return self.reply("refuse", content)

    def inform(self, content: Any = None) -> SendReceipt:
        return self.reply("inform", content)

    def failure(self, content: Any = None) -> SendReceipt:
        return self.reply("failure", content)

    def not_understood(self, content: Any = None) -> SendReceipt:
        return self.reply("not-understood", content)

    def propose(self, content: Any = None) -> SendReceipt:
        return self.reply("propose", content)

    def accept(self, content: Any = None) -> SendReceipt:
        return self.reply("accept-proposal", content)

    def reject(self, content: Any = None) -> SendReceipt:
        return self.reply("reject-proposal", content)

    def cancel(self, content: Any = None) -> SendReceipt:
        return self.reply("cancel", content)


SyncHandler = Callable[[SyncIncoming], None]


class SyncAgent:
    """:class:`~colloquy.Agent` with plain handlers and a blocking :meth:`run`.

    Handlers take a :class:`SyncIncoming` and run on a worker thread, so they may block
    (a database call, a model's inference) without stalling the inbox stream. :meth:`run`
    returns on :meth:`stop` (from a handler or another thread) or Ctrl-C, after letting the
    handlers under way finish.
    """

    def __init__(self, client: SyncClient, *, concurrency: int = 1) -> None:
        self.sync_client = client
        self.agent = Agent(client.client, concurrency=concurrency)

    def on(
        self, performative: str, template: Optional[str] = None
    ) -> Callable[[SyncHandler], SyncHandler]:
        """Registers the decorated function, as :meth:`Agent.on`."""

        def register(handler: SyncHandler) -> SyncHandler:
            self.agent.add_handler(performative, self._wrap(handler), template=template)
            return handler

        return register

    def _wrap(self, handler: SyncHandler) -> Callable[[Incoming], Awaitable[None]]:
        if inspect.iscoroutinefunction(handler):
            return handler  # type: ignore[return-value]
        loop = self.sync_client._loop.loop

        async def on_worker(incoming: Incoming) -> None:
            await asyncio.to_thread(handler, SyncIncoming(incoming, loop))

        return on_worker

    def run(self, after: int = 0, *, grace: float = DEFAULT_GRACE) -> None:
        """Serves the inbox until :meth:`stop` or Ctrl-C (see :meth:`Agent.run`)."""
        loop = self.sync_client._loop.loop
        task = loop.create_task(self.agent.run(after, grace=grace))
        try:
            loop.run_until_complete(task)
        except KeyboardInterrupt:
            self.agent.stop()
            loop.run_until_complete(task)

    def stop(self) -> None:
        """Asks :meth:`run` to stop; callable from any thread."""
        self.sync_client._loop.loop.call_soon_threadsafe(self.agent.stop)
