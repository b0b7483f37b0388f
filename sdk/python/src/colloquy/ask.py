"""The initiator's helpers: start a conversation of a built-in protocol and wait for its
final answer (never an intermediate ``agree``) within a timeout.

They follow the conversation's event stream, so they see exactly what the engine recorded:
replies, thread moves and expired deadlines. ``observe`` sees each message the other side
sends on the way. The replies also land in the initiator's inbox, unless the agents file
gives it ``inbox: false``; an agent that never reads its inbox drops them with
``Client.acknowledge_inbox``, or a durable store keeps them.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Optional, Union

from .errors import AnswerTimeout
from .models import ConversationEvent, Message, SendMessage, SendReceipt, ThreadTransition
from .streams import EventStream

if TYPE_CHECKING:
    from .client import Client

#: How long a helper waits for the final answer unless told otherwise (seconds).
DEFAULT_TIMEOUT = 30.0
#: How long after the cfp's reply-by ``call_for_proposals`` waits for the engine to close the
#: silent threads (its scheduler runs every 50 ms; the rest is room for a loaded machine).
CFP_GRACE = 2.0

#: Called with each message the other side sends; may be a coroutine function.
Observer = Callable[[Message], Union[None, Awaitable[None]]]


@dataclass
class Answer:
    """The final answer of a request or a query."""

    #: The conversation.
    conversation_id: str
    #: How the participant's thread ended: ``success``, ``failure``, ``refused``,
    #: ``timeout``, ``cancelled``, … (compare with :class:`~colloquy.models.Outcome`).
    outcome: Optional[str] = None
    #: The message that ended it (inform, failure, refuse, not-understood), if one did.
    reply: Optional[Message] = None
    #: Everything the participant sent, in order.
    messages: list[Message] = field(default_factory=list)


@dataclass
class Proposals:
    """What a call for proposals collected by its reply-by."""

    #: The conversation: answer the proposals in it with ``Client.accept``/``reject``.
    conversation_id: str
    #: Proposals made in time, in arrival order.
    proposals: list[Message] = field(default_factory=list)
    #: Refusals and other answers that are not proposals.
    declined: list[Message] = field(default_factory=list)
    #: Participants whose reply-by passed in silence.
    silent: list[str] = field(default_factory=list)


def now_ms() -> int:
    """Wall-clock time in Unix milliseconds, as ``reply_by`` wants it."""
    return time.time_ns() // 1_000_000


async def _notify(observe: Optional[Observer], message: Message) -> None:
    if observe is None:
        return
    result = observe(message)
    if inspect.isawaitable(result):
        await result


def _ended(transitions: Iterable[ThreadTransition], participant: str) -> Optional[str]:
    """The outcome of ``participant``'s thread, if one of these moves ended it."""
    for transition in transitions:
        if transition.participant == participant and transition.outcome is not None:
            return transition.outcome
    return None


class PendingAnswer:
    """A request or query under way: its conversation, a way to cancel it, and its answer.

    :meth:`answer` may be awaited again after an :class:`AnswerTimeout`: it goes on from
    where it stopped. :meth:`aclose` drops its event stream early (``answer`` closes it
    once the answer is in).
    """

    def __init__(
        self,
        client: Client,
        conversation_id: str,
        participant: str,
        observe: Optional[Observer] = None,
    ) -> None:
        self.conversation_id = conversation_id
        self.participant = participant
        self._client = client
        self._observe = observe
        self._events: EventStream = client.events(conversation_id)
        self._answer = Answer(conversation_id)
        self._done = False

    async def answer(self, timeout: float = DEFAULT_TIMEOUT) -> Answer:
        """The final answer; raises :class:`AnswerTimeout` if it is not in within
        ``timeout`` seconds (the conversation goes on)."""
        if self._done:
            return self._answer
        try:
            await asyncio.wait_for(self._follow(), timeout)
        except asyncio.TimeoutError:
            raise AnswerTimeout(self.conversation_id, timeout) from None
        finally:
            if self._done:
                await self._events.aclose()
        return self._answer

    async def cancel(self, content: Any = None) -> SendReceipt:
        """``cancel`` to the participant: once it confirms (``inform``), the answer's
        outcome is ``cancelled``."""
        return await self._client.cancel(self.conversation_id, content, to=[self.participant])

    async def aclose(self) -> None:
        """Stops following the conversation."""
        await self._events.aclose()

    async def _follow(self) -> None:
        while True:
            event = await self._events.next()
            if event is None:
                self._done = True
                return
            # Recorded before the observer runs: a timeout cutting the observer off loses
            # nothing the next `answer()` would need.
            done = self._take(event)
            self._done = done
            message = event.message
            if message is not None and message.sender == self.participant:
                await _notify(self._observe, message)  # the final answer included
            if done:
                return

    def _take(self, event: ConversationEvent) -> bool:
        """Records what ``event`` tells; true once the participant's thread has ended."""
        answer = self._answer
        if event.type == "message_accepted" and event.message is not None:
            message = event.message
            from_participant = message.sender == self.participant
            if from_participant:
                answer.messages.append(message)
            outcome = _ended(event.transitions, self.participant)
            if outcome is not None:
                answer.outcome = outcome
                if from_participant:
                    answer.reply = message
                return True
        elif event.type == "thread_expired":
            expired = event.expired_thread()
            outcome = _ended([expired], self.participant) if expired else None
            if outcome is not None:
                answer.outcome = outcome
                return True
        elif event.type == "completed":
            answer.outcome = answer.outcome or event.outcome
            return True
        return False


async def begin(
    client: Client,
    template: str,
    performative: str,
    participant: str,
    content: Any,
    *,
    observe: Optional[Observer] = None,
    reply_within: Optional[float] = None,
    parameters: Optional[dict[str, Any]] = None,
    conversation_id: Optional[str] = None,
) -> PendingAnswer:
    """Starts a conversation of ``template`` whose opening act is ``performative`` with
    ``content`` to ``participant``, and returns a :class:`PendingAnswer` at once.

    ``reply_within`` (seconds) sets the opening message's reply-by; past it in silence, the
    thread ends ``timeout``.
    """
    reply_by = now_ms() + int(reply_within * 1000) if reply_within is not None else None
    view = await client.start(
        template,
        [participant],
        message=SendMessage(performative=performative, content=content, reply_by=reply_by),
        parameters=parameters,
        conversation_id=conversation_id,
    )
    # The stream is read from the start, so nothing sent before it opens is missed.
    return PendingAnswer(client, view.id, participant, observe)


async def call_for_proposals(
    client: Client,
    participants: Iterable[str],
    content: Any,
    *,
    reply_within: Optional[float] = None,
    reply_by: Optional[int] = None,
    timeout: float = DEFAULT_TIMEOUT,
    observe: Optional[Observer] = None,
    parameters: Optional[dict[str, Any]] = None,
    conversation_id: Optional[str] = None,
    template: str = "fipa-contract-net",
) -> Proposals:
    """Sends a ``cfp`` to ``participants`` with a reply-by (``reply_within`` seconds from
    now, or ``reply_by`` in Unix milliseconds) and resolves once each has proposed,
    declined, or stayed silent past the reply-by (the engine closes silent threads then).
    Late proposals are not collected: the engine answers them itself."""
    if reply_by is None:
        if reply_within is None:
            raise ValueError("call_for_proposals needs reply_within or reply_by")
        reply_by = now_ms() + int(reply_within * 1000)
    participants = list(participants)
    view = await client.start(
        template,
        participants,
        message=SendMessage(performative="cfp", content=content, reply_by=reply_by),
        parameters=parameters,
        conversation_id=conversation_id,
    )
    collected = Proposals(view.id)
    waiting = set(participants)
    until_deadline = max(0.0, (reply_by - now_ms()) / 1000)
    give_up = min(timeout, until_deadline + CFP_GRACE)

    async def collect(events: EventStream) -> None:
        while waiting:
            event = await events.next()
            if event is None:
                return
            if event.type == "message_accepted" and event.message is not None:
                message = event.message
                if message.sender not in waiting:
                    continue
                waiting.discard(message.sender)
                await _notify(observe, message)
                if message.performative == "propose":
                    collected.proposals.append(message)
                else:
                    collected.declined.append(message)
            elif event.type == "thread_expired":
                expired = event.expired_thread()
                if expired is not None and expired.participant in waiting:
                    waiting.discard(expired.participant)
                    collected.silent.append(expired.participant)

    async with client.events(view.id) as events:
        try:
            await asyncio.wait_for(collect(events), give_up)
        except asyncio.TimeoutError:
            pass  # past the reply-by and the grace: whoever has not answered stayed silent
    collected.silent.extend(sorted(waiting))
    return collected
