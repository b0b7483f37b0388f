"""The event a hook is called with (``docs/hook-input.schema.json``), as typed objects.

The engine writes the event as JSON; `Event.from_json` parses it once with the standard
library and wraps it. The fixed parts (ids, states, the message's performative, the
timeout) become attributes; the free-form parts (message content, ``config``, ``vars``,
``parameters``, ``context``) stay JSON values behind `Fields` readers, so a hook reads the
field it wants by type without walking dictionaries.

A part the template's ``hooks.reads`` leaves out reads as empty (``""``, ``[]``, empty
`Fields`), as in the Rust SDK. Unknown fields are ignored: later engines may add some.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Literal

from .fields import Fields

#: A lazily built part not built yet (``None`` is a part's value when the event lacks it).
_UNBUILT = object()

#: Which lifecycle event a call is for.
HookName = Literal["on_start", "on_message", "on_timeout"]


class EventError(ValueError):
    """The event is not the JSON object the hook ABI describes."""


@dataclass(slots=True)
class Thread:
    """One participant's thread of the conversation."""

    participant: str
    #: The state's name, as in the template's ``thread.states``.
    state: str
    #: ``success``, ``refused``, ... once the state is terminal.
    outcome: str | None
    #: The reply-by deadline (Unix milliseconds), if any.
    deadline: int | None


@dataclass(slots=True)
class Conversation:
    """The conversation as it was before this event."""

    id: str
    #: ``active`` or ``completed``.
    status: str
    #: The outcome, once completed.
    outcome: str | None
    #: The template's name and revision (empty when ``hooks.reads`` leaves out ``template``).
    template: str
    revision: str
    #: The parties (empty when ``hooks.reads`` leaves out ``parties``).
    initiator: str
    participants: list[str]
    #: Each participant's thread (empty when ``hooks.reads`` leaves out ``threads``).
    threads: list[Thread]
    #: The variables hooks and declarative actions set (``set_vars``): where a hook keeps
    #: what it must remember, since its instance keeps nothing between calls.
    vars: Fields
    #: The start parameters.
    parameters: Fields
    #: The context snapshot.
    context: Fields
    #: The conversation deadline (Unix milliseconds), if any.
    deadline: int | None
    #: Retries (``retry`` actions) that have fired so far.
    retry_attempts: int


@dataclass(slots=True)
class Message:
    """The message an ``on_message`` call handles."""

    id: str
    #: ``request``, ``inform``, ``refuse``, ...
    performative: str
    sender: str
    #: Its receivers before routing rules and ``route`` actions.
    receivers: list[str]
    #: The content as sent (validated against the template's schema); any JSON value.
    content: Any
    #: The message it answers, if any.
    in_reply_to: str | None
    #: Its reply-by (Unix milliseconds), if any.
    reply_by: int | None


@dataclass(slots=True)
class Timeout:
    """What came due, for an ``on_timeout`` call."""

    #: ``thread`` (a participant's reply-by passed), ``retry`` (a ``retry`` action came due)
    #: or ``conversation`` (the conversation deadline passed).
    kind: str
    #: Whose reply-by passed, for ``thread``.
    participant: str | None
    #: For ``retry``: which retry this is (1 for the first); otherwise the retries so far.
    attempt: int


class Event:
    """One call's event. Build it with `Event.from_json`.

    The parts are built from the parsed JSON when first read, so a call pays for what its
    hook reads (in the component, building every part cost about as much as parsing).
    """

    __slots__ = ("raw", "abi_version", "hook", "now", "_conversation", "_message",
                 "_timeout", "_config", "_content")

    def __init__(self, raw: dict[str, Any]) -> None:
        #: The parsed JSON, for anything the attributes do not cover.
        self.raw = raw
        #: The engine's hook ABI version (1).
        self.abi_version: int = _int(raw.get("abi_version"))
        #: ``on_start``, ``on_message`` or ``on_timeout``.
        self.hook: str = _str(raw.get("hook"))
        #: The engine's clock (Unix milliseconds): decide with this, not the host's clock,
        #: since the conversation's deadlines run on it.
        self.now: int = _int(raw.get("now"))
        self._conversation: Conversation | None = None
        self._message: Message | None | object = _UNBUILT
        self._timeout: Timeout | None | object = _UNBUILT
        self._config: Fields | None = None
        self._content: Fields | None = None

    @property
    def conversation(self) -> Conversation:
        """The conversation as it was before this event."""
        if self._conversation is None:
            self._conversation = _conversation(self.raw.get("conversation"))
        return self._conversation

    @property
    def message(self) -> Message | None:
        """For ``on_message``: the message; otherwise ``None``."""
        if self._message is _UNBUILT:
            self._message = _message(self.raw.get("message"))
        return self._message  # type: ignore[return-value]  # built: a Message or None

    @property
    def timeout(self) -> Timeout | None:
        """For ``on_timeout``: what came due; otherwise ``None``."""
        if self._timeout is _UNBUILT:
            self._timeout = _timeout(self.raw.get("timeout"))
        return self._timeout  # type: ignore[return-value]  # built: a Timeout or None

    @property
    def config(self) -> Fields:
        """The template's ``spec.hooks.config`` (empty when the template has none)."""
        if self._config is None:
            self._config = Fields(self.raw.get("config"))
        return self._config

    @property
    def content(self) -> Fields:
        """The message content's top-level fields (empty without a message, or when the
        content is not an object; `Message.content` has the value itself)."""
        if self._content is None:
            message = self.raw.get("message")
            self._content = Fields(message.get("content") if isinstance(message, dict)
                                   else None)
        return self._content

    @classmethod
    def from_json(cls, text: str | bytes) -> Event:
        """Parses an event; `EventError` says what is wrong when it is not one."""
        try:
            raw = json.loads(text)
        except ValueError as error:  # json.JSONDecodeError, or bytes that are not UTF-8
            raise EventError(f"not JSON: {error}") from None
        if not isinstance(raw, dict):
            raise EventError(f"not a JSON object but {type(raw).__name__}")
        if not isinstance(raw.get("conversation"), dict):
            raise EventError("no `conversation` object")
        return cls(raw)

    def __repr__(self) -> str:
        return f"Event({self.hook}, conversation {self.conversation.id!r})"

    def thread(self, participant: str) -> Thread | None:
        """The thread of ``participant``, if the event carries it."""
        for thread in self.conversation.threads:
            if thread.participant == participant:
                return thread
        return None

    # --- one field of the message content (see `Fields` for what each type reads) ------

    def content_field(self, name: str) -> Any:
        """A top-level field of the message content, as JSON (``None`` when missing)."""
        return self.content.get(name)

    def content_str(self, name: str) -> str | None:
        """A top-level field of the message content as text."""
        return self.content.get_str(name)

    def content_int(self, name: str) -> int | None:
        """A top-level field of the message content as an integer."""
        return self.content.get_int(name)

    def content_uint(self, name: str) -> int | None:
        """A top-level field of the message content as a whole number of at least 0
        (fractions truncated: the Rust SDK's ``content_u64``)."""
        return self.content.get_uint(name)

    def content_float(self, name: str) -> float | None:
        """A top-level field of the message content as a number."""
        return self.content.get_float(name)

    def content_bool(self, name: str) -> bool | None:
        """A top-level field of the message content as a boolean."""
        return self.content.get_bool(name)

    # --- one field of spec.hooks.config ---------------------------------------------------

    def config_field(self, name: str) -> Any:
        """A top-level field of the template's ``hooks.config``, as JSON."""
        return self.config.get(name)

    def config_str(self, name: str) -> str | None:
        """A top-level field of ``hooks.config`` as text."""
        return self.config.get_str(name)

    def config_int(self, name: str) -> int | None:
        """A top-level field of ``hooks.config`` as an integer."""
        return self.config.get_int(name)

    def config_uint(self, name: str) -> int | None:
        """A top-level field of ``hooks.config`` as a whole number of at least 0 (the Rust
        SDK's ``config_u64``)."""
        return self.config.get_uint(name)

    def config_float(self, name: str) -> float | None:
        """A top-level field of ``hooks.config`` as a number."""
        return self.config.get_float(name)

    def config_bool(self, name: str) -> bool | None:
        """A top-level field of ``hooks.config`` as a boolean."""
        return self.config.get_bool(name)

    # --- one conversation variable --------------------------------------------------------

    def var(self, name: str) -> Any:
        """A conversation variable, as JSON (``None`` when unset)."""
        return self.conversation.vars.get(name)

    def var_str(self, name: str) -> str | None:
        """A conversation variable as text."""
        return self.conversation.vars.get_str(name)

    def var_int(self, name: str) -> int | None:
        """A conversation variable as an integer."""
        return self.conversation.vars.get_int(name)

    def var_uint(self, name: str) -> int | None:
        """A conversation variable as a whole number of at least 0."""
        return self.conversation.vars.get_uint(name)

    def var_float(self, name: str) -> float | None:
        """A conversation variable as a number."""
        return self.conversation.vars.get_float(name)

    def var_bool(self, name: str) -> bool | None:
        """A conversation variable as a boolean."""
        return self.conversation.vars.get_bool(name)

    def parameter(self, name: str) -> Any:
        """A top-level start parameter, as JSON (``None`` when missing)."""
        return self.conversation.parameters.get(name)


# --- building the parts: lenient, since a part may be left out or a later engine may add
# fields; missing values read as empty, values of the wrong type too. -----------------------


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _opt_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _strs(value: Any) -> list[str]:
    return [item for item in value if isinstance(item, str)] if isinstance(value, list) else []


def _thread(raw: dict[str, Any]) -> Thread:
    return Thread(
        participant=_str(raw.get("participant")),
        state=_str(raw.get("state")),
        outcome=_opt_str(raw.get("outcome")),
        deadline=_opt_int(raw.get("deadline")),
    )


def _conversation(raw: Any) -> Conversation:
    if not isinstance(raw, dict):
        raw = {}
    threads = raw.get("threads")
    return Conversation(
        id=_str(raw.get("id")),
        status=_str(raw.get("status")),
        outcome=_opt_str(raw.get("outcome")),
        template=_str(raw.get("template")),
        revision=_str(raw.get("revision")),
        initiator=_str(raw.get("initiator")),
        participants=_strs(raw.get("participants")),
        threads=[_thread(t) for t in threads if isinstance(t, dict)]
        if isinstance(threads, list)
        else [],
        vars=Fields(raw.get("vars")),
        parameters=Fields(raw.get("parameters")),
        context=Fields(raw.get("context")),
        deadline=_opt_int(raw.get("deadline")),
        retry_attempts=_int(raw.get("retry_attempts")),
    )


def _message(raw: Any) -> Message | None:
    if not isinstance(raw, dict):
        return None
    return Message(
        id=_str(raw.get("id")),
        performative=_str(raw.get("performative")),
        sender=_str(raw.get("sender")),
        receivers=_strs(raw.get("receivers")),
        content=raw.get("content"),
        in_reply_to=_opt_str(raw.get("in_reply_to")),
        reply_by=_opt_int(raw.get("reply_by")),
    )


def _timeout(raw: Any) -> Timeout | None:
    if not isinstance(raw, dict):
        return None
    return Timeout(
        kind=_str(raw.get("kind")),
        participant=_opt_str(raw.get("participant")),
        attempt=_int(raw.get("attempt")),
    )
