"""A minimal server-sent events reader: enough of the WHATWG event-stream format for what a
Colloquy server sends (``id``, ``event`` and ``data`` lines, comments as keep-alives)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class SseEvent:
    """One dispatched event."""

    id: Optional[str]
    event: Optional[str]
    data: str


class SseParser:
    """Turns chunks of bytes into events; an event may be split across any chunks."""

    def __init__(self) -> None:
        self._buffer = b""
        self._id: Optional[str] = None
        self._event: Optional[str] = None
        self._data: list[str] = []

    def push(self, chunk: bytes) -> list[SseEvent]:
        """Adds a chunk; returns the events it completed, in order."""
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        events = []
        for raw in lines:
            line = raw[:-1] if raw.endswith(b"\r") else raw
            if not line:
                if self._data:
                    events.append(SseEvent(self._id, self._event, "\n".join(self._data)))
                self._id, self._event, self._data = None, None, []
                continue
            if line.startswith(b":"):
                continue
            field, _, value = line.decode("utf-8", "replace").partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "id":
                self._id = value
            elif field == "event":
                self._event = value
            elif field == "data":
                self._data.append(value)
        return events
