"""The host functions of ``colloquy:hooks/host@1.0.0``: `log` and `now_ms`.

In the component, they call the bindings componentize-py generates (``wit_world``). Those
bindings exist only in a build, so in plain CPython (a hook's unit tests) the calls go to a
stand-in instead: `log` keeps its lines for `take_logs` and `now_ms` answers what
`set_now_ms` set, as the Rust SDK's ``host::mock`` does.

The bindings are imported here, at import time, on purpose: componentize-py snapshots the
interpreter after importing the app, and a component built with ``--stub-wasi`` has no
filesystem to import anything from later, so an import first run inside a hook call traps.
"""

from __future__ import annotations

import io
import sys
from typing import TextIO

from .actions import LOG_LEVELS, LogLevel

try:
    from wit_world.imports import host as _wit_host  # type: ignore[import-not-found]
except ImportError:  # plain CPython: no component, no host
    _wit_host = None

_mock_lines: list[tuple[str, str]] = []
_mock_now_ms = 0


def in_component() -> bool:
    """Whether the host is the engine (the hook runs as a component), not the stand-in."""
    return _wit_host is not None


def log(level: LogLevel, line: str) -> None:
    """Writes ``line`` to the engine log at ``level`` (``debug``, ``info``, ``warn`` or
    ``error``), tagged with the conversation id. The engine cuts lines at 4 KiB and keeps at
    most 64 lines per call."""
    if level not in LOG_LEVELS:
        raise ValueError(f"level must be one of {', '.join(sorted(LOG_LEVELS))}, not {level!r}")
    if _wit_host is None:
        _mock_lines.append((level, line))
    else:
        _wit_host.log(_wit_host.LogLevel[level.upper()], line)


def now_ms() -> int:
    """The host's wall clock (Unix milliseconds). Decide with the event's ``now`` instead:
    it is the engine clock the conversation's deadlines use."""
    return _mock_now_ms if _wit_host is None else _wit_host.now_ms()


class LogStream(io.TextIOBase):
    """A text stream whose lines go to `log` at one level: ``sys.stdout`` and ``sys.stderr``
    during a call in a component (see `prints_to_log`)."""

    def __init__(self, level: LogLevel) -> None:
        super().__init__()
        self._level: LogLevel = level
        self._pending = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        *lines, self._pending = (self._pending + text).split("\n")
        for line in lines:
            log(self._level, line)
        return len(text)

    def flush(self) -> None:
        if self._pending:
            line, self._pending = self._pending, ""
            log(self._level, line)


def prints_to_log() -> tuple[TextIO, TextIO] | None:
    """In a component, points ``sys.stdout`` at the log (``info``) and ``sys.stderr`` too
    (``warn``) until `restore_prints`, and returns what they were; elsewhere does nothing.

    A component built with ``--stub-wasi`` has no stdout: a ``print`` would reach a WASI stub
    and trap the hook with nothing in the log but "unreachable". `handle` calls this around
    every call, so a ``print`` while debugging a hook lands in the engine log instead.
    """
    if _wit_host is None:
        return None
    saved = (sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = LogStream("info"), LogStream("warn")
    return saved


def restore_prints(saved: tuple[TextIO, TextIO] | None) -> None:
    """Writes out what the call printed without a final newline, and puts back the streams
    `prints_to_log` replaced."""
    if saved is None:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    sys.stdout, sys.stderr = saved


def take_logs() -> list[tuple[str, str]]:
    """Outside a component: the ``(level, line)`` pairs logged so far, emptied."""
    lines = _mock_lines[:]
    _mock_lines.clear()
    return lines


def set_now_ms(now: int) -> None:
    """Outside a component: what `now_ms` answers."""
    global _mock_now_ms
    _mock_now_ms = now
