"""The actions a hook answers with (``docs/hook-output.schema.json``).

One builder per action of the schema, named as the schema names it and taking its fields
under the schema's names: ``Action.reject(reason=...)`` is ``{"reject": {"reason": ...}}``.
The same vocabulary as a template's declarative rules (``eval_vars`` aside: it is CEL, for
rules only). Builders check their arguments, so a mistake raises where it is made (and
traps the hook in the engine) instead of coming back as the engine's "invalid output".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

#: How a conversation or a thread ended (``complete``).
Outcome = Literal["success", "failure", "refused", "rejected", "cancelled", "timeout",
                  "no_reply", "not_understood", "escalated"]
#: ``add`` keeps the message's receivers and adds the new ones; ``replace`` drops them.
RouteMode = Literal["add", "replace"]
#: Log levels, of the ``log`` action and of `colloquy_hook.log`.
LogLevel = Literal["debug", "info", "warn", "error"]

_OUTCOMES = frozenset(get_args(Outcome))
_ROUTE_MODES = frozenset(get_args(RouteMode))
LOG_LEVELS = frozenset(get_args(LogLevel))


@dataclass(frozen=True, slots=True)
class Action:
    """One step the hook asks the engine to take; `json` is its JSON value."""

    #: ``"continue"`` or ``{"<action>": {<fields>}}``, as the output schema writes it.
    json: Any

    @property
    def name(self) -> str:
        """The action's name in the schema (``reject``, ``set_vars``, ...)."""
        return self.json if isinstance(self.json, str) else next(iter(self.json))

    @staticmethod
    def continue_() -> Action:
        """``continue``: carry on (the same as answering no action)."""
        return Action("continue")

    @staticmethod
    def reject(reason: str) -> Action:
        """``reject``: refuse the message (or the start); the sender gets ``reason``."""
        return Action({"reject": {"reason": _text(reason, "reason")}})

    @staticmethod
    def set_vars(values: Mapping[str, Any] | None = None, /, **named: Any) -> Action:
        """``set_vars``: merge variables into the conversation's ``vars`` (top-level keys
        replace). Give them as a mapping, as keywords, or both. Values must be JSON:
        ``None``, bools, numbers, strings, lists and dicts of them."""
        merged = dict(values or {})
        merged.update(named)
        for key in merged:
            _text(key, "a variable name")
        return Action({"set_vars": merged})

    @staticmethod
    def set_var(name: str, value: Any) -> Action:
        """``set_vars`` with one variable."""
        return Action({"set_vars": {_text(name, "a variable name"): value}})

    @staticmethod
    def send(performative: str, to: str | Iterable[str], content: Any = None) -> Action:
        """``send``: a message from the engine party (``colloquy:engine``) to ``to`` (an
        agent id or several). ``content`` is left out when ``None``."""
        body: dict[str, Any] = {"performative": _text(performative, "performative"),
                                "to": _agents(to, "to")}
        if content is not None:
            body["content"] = content
        return Action({"send": body})

    @staticmethod
    def route(to: str | Iterable[str], mode: RouteMode = "add") -> Action:
        """``route``: change who receives the message being handled."""
        return Action({"route": {"to": _agents(to, "to"),
                                 "mode": _choice(mode, _ROUTE_MODES, "mode")}})

    @staticmethod
    def route_to(agents: str | Iterable[str]) -> Action:
        """``route`` adding ``agents`` to the receivers (the Rust SDK's ``route_to``)."""
        return Action.route(agents, "add")

    @staticmethod
    def set_deadline(in_ms: int) -> Action:
        """``set_deadline``: the conversation ends ``in_ms`` milliseconds from now."""
        return Action({"set_deadline": {"in_ms": _whole(in_ms, "in_ms")}})

    @staticmethod
    def extend_deadline(by_ms: int) -> Action:
        """``extend_deadline``: push the conversation deadline back by ``by_ms``."""
        return Action({"extend_deadline": {"by_ms": _whole(by_ms, "by_ms")}})

    @staticmethod
    def retry(after_ms: int, backoff: float | None = None,
              max_attempts: int | None = None) -> Action:
        """``retry``: run ``on_timeout`` again after ``after_ms``, each further retry
        ``backoff`` times later (1.0 when ``None``), at most ``max_attempts`` retries."""
        body: dict[str, Any] = {"after_ms": _whole(after_ms, "after_ms")}
        if backoff is not None:
            body["backoff"] = _number(backoff, "backoff")
        if max_attempts is not None:
            body["max_attempts"] = _whole(max_attempts, "max_attempts")
        return Action({"retry": body})

    @staticmethod
    def complete(outcome: Outcome, reason: str | None = None) -> Action:
        """``complete``: end the conversation now with ``outcome``."""
        body: dict[str, Any] = {"outcome": _choice(outcome, _OUTCOMES, "outcome")}
        if reason is not None:
            body["reason"] = _text(reason, "reason")
        return Action({"complete": body})

    @staticmethod
    def escalate(to: str, reason: str) -> Action:
        """``escalate``: hand the conversation to the agent ``to``, which receives the
        current message (if any) and joins as an observer."""
        return Action({"escalate": {"to": _text(to, "to"), "reason": _text(reason, "reason")}})

    @staticmethod
    def log(message: str, level: LogLevel = "info") -> Action:
        """``log``: a line for the engine log, written when the engine runs the actions
        (`colloquy_hook.log` writes one at once, during the call)."""
        return Action({"log": {"level": _choice(level, LOG_LEVELS, "level"),
                               "message": _text(message, "message")}})


# --- argument checks: each raises where the hook made the mistake --------------------------


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str, not {type(value).__name__}")
    return value


def _agents(value: Any, what: str) -> list[str]:
    # A str is itself an iterable of str: take it as one agent, not as its letters.
    agents = [value] if isinstance(value, str) else list(value)
    for agent in agents:
        _text(agent, f"each agent of `{what}`")
    return agents


def _whole(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{what} must be 0 or more, not {value}")
    return value


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, not {value}")
    # A float, so it is written as the Rust SDK writes it (`2.0`, not `2`).
    return float(value)


def _choice(value: Any, allowed: frozenset[str], what: str) -> str:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(sorted(allowed))}, not {value!r}")
    return str(value)
