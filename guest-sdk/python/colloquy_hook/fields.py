"""Typed reads of one free-form JSON part of the event (message content, config, vars, ...).

The engine passes these parts as written by the template or the sender, so a field may be
missing or of another type than the hook expects. Every reader answers ``None`` then, rather
than raising: a hook decides what a missing value means (usually a default), and one bad
message must not trap the hook (a trap is a hook failure, which refuses the message under
``fail_closed``).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

#: The largest value of the Rust SDK's ``u64`` readers; `Fields.get_uint` saturates at it as
#: they do, so the Python and Rust hooks read the same numbers.
U64_MAX = 2**64 - 1


class Fields(Mapping[str, Any]):
    """The top-level fields of a JSON object, read by type.

    Wraps any JSON value: a part that is not an object (``null``, a list, a string; or a part
    the template's ``hooks.reads`` left out) reads as an empty object, and its value stays in
    `raw`. A `Mapping`, so ``"key" in fields``, ``fields["key"]`` and iteration work too.
    """

    __slots__ = ("raw", "_object")

    def __init__(self, raw: Any) -> None:
        #: The value as the event carried it (``None`` when absent).
        self.raw: Any = raw
        self._object: dict[str, Any] = raw if isinstance(raw, dict) else {}

    def __getitem__(self, name: str) -> Any:
        return self._object[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._object)

    def __len__(self) -> int:
        return len(self._object)

    def __repr__(self) -> str:
        return f"Fields({self.raw!r})"

    def get_str(self, name: str) -> str | None:
        """The field as text; ``None`` when missing or not a string."""
        value = self._object.get(name)
        return value if isinstance(value, str) else None

    def get_int(self, name: str) -> int | None:
        """The field as an integer; ``None`` when missing or not a JSON integer (a number
        with a fraction is not one: use `get_float`)."""
        value = self._object.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def get_uint(self, name: str) -> int | None:
        """The field as a whole number of at least 0, as the Rust SDK's ``*_u64`` readers:
        a non-negative number with a fraction is truncated (``12.9`` reads as ``12``), a
        negative one or another type reads as ``None``, and values past 2**64 - 1 saturate.
        """
        value = self._object.get(name)
        if isinstance(value, bool):
            return None
        if isinstance(value, int):
            return min(value, U64_MAX) if value >= 0 else None
        if isinstance(value, float) and value >= 0:  # NaN compares false: None
            return U64_MAX if math.isinf(value) else min(int(value), U64_MAX)
        return None

    def get_float(self, name: str) -> float | None:
        """The field as a number (an integer too); ``None`` when missing or not a number."""
        value = self._object.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return None

    def get_bool(self, name: str) -> bool | None:
        """The field as a boolean; ``None`` when missing or not ``true``/``false``."""
        value = self._object.get(name)
        return value if isinstance(value, bool) else None
