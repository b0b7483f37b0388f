"""The participant's side: handlers registered by performative and template, run over the
agent's inbox stream, and the reply helpers of :class:`Incoming`.

::

    agent = Agent(Client(url, "bob", "bob-token"))

    @agent.on("request", template="fipa-request")
    async def book(msg: Incoming) -> None:
        await msg.agree()
        await msg.inform({"done": True})

    await agent.run()          # until agent.stop(), a signal, or the server refuses the stream

What a handler has handled (or what no handler wanted) is acknowledged in the background, so
the server deletes it: a restarted agent serving from 0 gets only what it had not finished,
at least once. A stream that breaks reconnects and resumes after the last item taken.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections import deque
from typing import Any, Awaitable, Callable, Optional

from .client import Client
from .errors import ColloquyError
from .models import ENGINE_PARTY, InboxItem, Message, SendReceipt

log = logging.getLogger("colloquy")

#: How long :meth:`Agent.run` lets handlers under way finish after :meth:`Agent.stop`.
DEFAULT_GRACE = 10.0
#: How long the last acknowledgement may take when the agent stops.
FINAL_ACK_TIMEOUT = 2.0
#: Pause after a failed acknowledgement before the next try (the next position covers it).
ACK_RETRY_DELAY = 0.5


class Incoming:
    """A message from the inbox, with what is needed to answer it."""

    def __init__(self, client: Client, item: InboxItem) -> None:
        #: The client that received it (and answers with it).
        self.client = client
        #: The inbox item: position, conversation, template and message.
        self.item = item

    @property
    def conversation_id(self) -> str:
        return self.item.conversation_id

    @property
    def template(self) -> Optional[str]:
        return self.item.template

    @property
    def message(self) -> Message:
        return self.item.message

    @property
    def performative(self) -> str:
        return self.item.message.performative

    @property
    def sender(self) -> str:
        return self.item.message.sender

    @property
    def content(self) -> Any:
        return self.item.message.content

    async def reply(self, performative: str, content: Any = None) -> SendReceipt:
        """Sends ``performative`` in the same conversation, in reply to this message,
        addressed to its sender (or, when the engine sent it, to the protocol's default)."""
        to = None if self.sender == ENGINE_PARTY else [self.sender]
        return await self.client.send(
            self.conversation_id,
            performative,
            content if content is not None else {},
            to=to,
            in_reply_to=self.message.id,
        )

    async def agree(self, content: Any = None) -> SendReceipt:
        """``agree``: will do it (an intermediate answer; the result follows)."""
        return await self.reply("agree", content)

    async def refuse(self, content: Any = None) -> SendReceipt:
        """``refuse``: will not do it (``{"reason": …}``)."""
        return await self.reply("refuse", content)

    async def inform(self, content: Any = None) -> SendReceipt:
        """``inform``: done, or here is the answer."""
        return await self.reply("inform", content)

    async def failure(self, content: Any = None) -> SendReceipt:
        """``failure``: tried and failed."""
        return await self.reply("failure", content)

    async def not_understood(self, content: Any = None) -> SendReceipt:
        """``not-understood``: cannot make sense of it."""
        return await self.reply("not-understood", content)

    async def propose(self, content: Any = None) -> SendReceipt:
        """``propose``: an offer, in answer to a cfp."""
        return await self.reply("propose", content)

    async def accept(self, content: Any = None) -> SendReceipt:
        """``accept-proposal``: take this offer."""
        return await self.reply("accept-proposal", content)

    async def reject(self, content: Any = None) -> SendReceipt:
        """``reject-proposal``: turn this offer down."""
        return await self.reply("reject-proposal", content)

    async def cancel(self, content: Any = None) -> SendReceipt:
        """``cancel``: call off what this message asked for."""
        return await self.reply("cancel", content)

    def __repr__(self) -> str:
        return (f"Incoming(seq={self.item.seq}, {self.performative} from {self.sender} "
                f"in {self.conversation_id})")


Handler = Callable[[Incoming], Awaitable[None]]


class _Handled:
    """The inbox positions taken, and how far they are handled without a gap (what may be
    acknowledged): with handlers running side by side, a later item can finish first."""

    def __init__(self, after: int) -> None:
        self.through = after
        self._taken: deque[int] = deque()
        self._done: set[int] = set()
        self.advanced = asyncio.Event()

    def take(self, seq: int) -> None:
        self._taken.append(seq)

    def finish(self, seq: int) -> None:
        self._done.add(seq)
        while self._taken and self._taken[0] in self._done:
            self.through = self._taken.popleft()
            self._done.discard(self.through)
            self.advanced.set()


def _forget(
    last_of_conversation: dict[str, asyncio.Task[None]], key: str, done: asyncio.Task[None]
) -> None:
    """Drops a finished task from the per-conversation chain, unless a later one replaced it."""
    if last_of_conversation.get(key) is done:
        del last_of_conversation[key]


class Agent:
    """An agent's handlers, run over its inbox.

    A message goes to the handler registered for its performative and template, else to the
    one for its performative in any template; other messages are acknowledged unhandled.
    ``concurrency`` handlers run at once (default 1: one message at a time, in order);
    messages of one conversation are always handled one after another, in order. A handler
    that raises is logged, and the message counts as handled (it is not offered again).
    """

    def __init__(self, client: Client, *, concurrency: int = 1) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.client = client
        self.concurrency = concurrency
        self._exact: dict[tuple[str, str], Handler] = {}
        self._any_template: dict[str, Handler] = {}
        self._stopping: Optional[asyncio.Event] = None
        # A stop asked before `run` got going still counts.
        self._stop_asked = False
        self._position = 0

    @property
    def position(self) -> int:
        """The ``seq`` of the last inbox item handled without a gap (acknowledged soon)."""
        return self._position

    def on(
        self, performative: str, template: Optional[str] = None
    ) -> Callable[[Handler], Handler]:
        """Registers the decorated coroutine function for ``performative`` messages, of
        conversations of ``template`` (or of any template without a handler of its own)."""

        def register(handler: Handler) -> Handler:
            self.add_handler(performative, handler, template=template)
            return handler

        return register

    def add_handler(
        self, performative: str, handler: Handler, *, template: Optional[str] = None
    ) -> None:
        """:meth:`on` without the decorator."""
        if template is None:
            self._any_template[performative] = handler
        else:
            self._exact[(template, performative)] = handler

    def handler_for(self, item: InboxItem) -> Optional[Handler]:
        """The handler ``item`` goes to, if any."""
        performative = item.message.performative
        if item.template is not None:
            handler = self._exact.get((item.template, performative))
            if handler is not None:
                return handler
        return self._any_template.get(performative)

    def stop(self) -> None:
        """Asks :meth:`run` to stop taking messages, let the handlers under way finish
        (within its ``grace``), acknowledge them and return. Safe to call from a handler or
        a signal handler on the loop's thread."""
        self._stop_asked = True
        if self._stopping is not None:
            self._stopping.set()

    async def run(self, after: int = 0, *, grace: float = DEFAULT_GRACE) -> None:
        """Serves the inbox from position ``after`` (0: every entry not yet acknowledged)
        until :meth:`stop`, or until the server refuses the stream (the error is raised:
        a bad token, say). Cancelling it stops at once: handlers under way are cancelled,
        and what they had not finished comes again on the next run."""
        self._stopping = stopping = asyncio.Event()
        if self._stop_asked:
            stopping.set()
        handled = _Handled(after)
        self._position = after
        acknowledger = asyncio.create_task(self._acknowledge(handled), name="colloquy-ack")
        running: set[asyncio.Task[None]] = set()
        last_of_conversation: dict[str, asyncio.Task[None]] = {}
        slots = asyncio.Semaphore(self.concurrency)
        inbox = self.client.inbox(after)
        stop_wait = asyncio.create_task(stopping.wait(), name="colloquy-stop")
        try:
            while not stopping.is_set():
                await slots.acquire()
                read = asyncio.ensure_future(inbox.next())
                await asyncio.wait({read, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
                if not read.done():
                    slots.release()
                    read.cancel()
                    await asyncio.gather(read, return_exceptions=True)
                    break
                item = read.result()
                handled.take(item.seq)
                before = last_of_conversation.get(item.conversation_id)
                task = asyncio.create_task(self._handle(item, before, handled, slots))
                running.add(task)
                task.add_done_callback(running.discard)
                last_of_conversation[item.conversation_id] = task
                task.add_done_callback(
                    functools.partial(_forget, last_of_conversation, item.conversation_id)
                )
            if running:
                _, late = await asyncio.wait(set(running), timeout=grace)
                for task in late:
                    task.cancel()
                await asyncio.gather(*late, return_exceptions=True)
        finally:
            stop_wait.cancel()
            for task in running:
                task.cancel()
            await asyncio.gather(stop_wait, *running, return_exceptions=True)
            await inbox.aclose()
            acknowledger.cancel()
            await asyncio.gather(acknowledger, return_exceptions=True)
            await self._final_acknowledgement(handled)
            self._stopping = None
            self._stop_asked = False

    async def _handle(
        self,
        item: InboxItem,
        before: Optional[asyncio.Task[None]],
        handled: _Handled,
        slots: asyncio.Semaphore,
    ) -> None:
        try:
            if before is not None:
                await asyncio.gather(before, return_exceptions=True)
            handler = self.handler_for(item)
            if handler is None:
                log.debug("%s: no handler for %s in %s; skipped", self.client.agent_id,
                          item.message.performative, item.template)
            else:
                try:
                    await handler(Incoming(self.client, item))
                except Exception:
                    log.exception("%s: handler for %s in %s failed (seq %d)",
                                  self.client.agent_id, item.message.performative,
                                  item.conversation_id, item.seq)
            handled.finish(item.seq)
            self._position = handled.through
        finally:
            slots.release()

    async def _acknowledge(self, handled: _Handled) -> None:
        """Acknowledges the positions reached, one request at a time: while one is on its
        way, later positions pile up and the next request covers them all."""
        acknowledged = handled.through
        while True:
            await handled.advanced.wait()
            handled.advanced.clear()
            through = handled.through
            if through <= acknowledged:
                continue
            try:
                await self.client.acknowledge(through)
                acknowledged = through
            except ColloquyError as error:
                log.debug("%s: acknowledging %d failed: %s", self.client.agent_id, through,
                          error)
                await asyncio.sleep(ACK_RETRY_DELAY)
                handled.advanced.set()

    async def _final_acknowledgement(self, handled: _Handled) -> None:
        if handled.through == 0:
            return
        try:
            await asyncio.wait_for(self.client.acknowledge(handled.through), FINAL_ACK_TIMEOUT)
        except (ColloquyError, asyncio.TimeoutError) as error:
            # Not fatal: the next run resumes from the acknowledged position and handles
            # these again (at-least-once).
            log.debug("%s: last acknowledgement failed: %s", self.client.agent_id, error)
