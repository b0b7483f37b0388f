"""Checking an audit record's hash chain offline (docs/security.md), as ``colloquy audit
verify`` does: the events numbered 1 to n, each ``prev`` the chain hash of the event before,
the record's length and head those of the chain, the first event naming the record's
conversation and revision.

Signatures (the engine's over the record, the senders' over their messages) are not checked
here: ``colloquy audit verify --jwks`` or the Rust SDK's ``colloquy_sdk::trust`` check them.

The hashing is the engine's (``colloquy_trust::chain``): an event's body digest is the
SHA-256 of its RFC 8785 form without ``prev``, each thread transition replaced by its own
digest; its chain hash is ``SHA-256(prev || body digest)`` over the raw bytes.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any, Optional, Union

from .errors import ColloquyError
from .models import AuditRecord

#: The ``prev`` of a conversation's first event.
GENESIS = "0" * 64


class AuditBroken(ColloquyError):
    """A record that does not verify: which event (``seq``, if one) and which check."""

    def __init__(self, seq: Optional[int], check: str, why: str) -> None:
        self.seq, self.check, self.why = seq, check, why
        where = f"event {seq}: " if seq is not None else ""
        super().__init__(f"{where}{check} check failed: {why}")


@dataclass(frozen=True)
class ChainSummary:
    """The chain a record's events make."""

    length: int
    head: str
    #: The first event carrying ``prev`` (1 unless recorded before chains), if any.
    chained_from: Optional[int]
    #: How many events the reader saw only as digests.
    redacted: int


def canonical(value: Any) -> str:
    """``value`` in its RFC 8785 (JSON Canonicalization Scheme) form."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value) if abs(value) <= 2**53 else _number(float(value))
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ",".join(canonical(item) for item in value) + "]"
    if isinstance(value, dict):
        keys = sorted(value, key=lambda key: key.encode("utf-16-be"))
        return "{" + ",".join(f"{canonical(key)}:{canonical(value[key])}" for key in keys) + "}"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _number(number: float) -> str:
    """``number`` as ECMAScript's ``Number.prototype.toString`` writes it."""
    if not math.isfinite(number):
        raise ValueError("JSON has no NaN or infinity")
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    # repr gives the shortest digits that round-trip: 99.5, 1e+30, 1.5e-07, 0.001, 123.0
    mantissa, _, exponent = repr(abs(number)).partition("e")
    whole, _, fraction = mantissa.partition(".")
    significant = (whole + fraction).lstrip("0")
    # value = 0.DIGITS x 10^n
    n = len(significant) + int(exponent or 0) - len(fraction)
    digits = significant.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * -n + digits
    rest = "." + digits[1:] if k > 1 else ""
    return f"{sign}{digits[0]}{rest}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _hex32(text: Any) -> bool:
    return isinstance(text, str) and len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def transition_digest(transition: Any) -> str:
    """A thread transition's digest: the one it stands for when redacted."""
    if isinstance(transition, dict) and set(transition) == {"redacted"}:
        if not _hex32(transition["redacted"]):
            raise ValueError("`redacted` holds a SHA-256 in hex")
        return transition["redacted"]
    return _sha256(canonical(transition).encode())


def body_digest(event: dict[str, Any]) -> str:
    """An event's body digest (its ``redacted`` digest when the reader may not see it)."""
    if "redacted" in event:
        if not _hex32(event["redacted"]):
            raise ValueError("`redacted` holds a SHA-256 in hex")
        return event["redacted"]
    body = {key: value for key, value in event.items() if key != "prev"}
    if isinstance(body.get("transitions"), list):
        body["transitions"] = [transition_digest(t) for t in body["transitions"]]
    return _sha256(canonical(body).encode())


def link(prev: str, body: str) -> str:
    """The chain hash of an event with this ``prev`` and body digest."""
    return _sha256(bytes.fromhex(prev) + bytes.fromhex(body))


def verify_chain(record: Union[AuditRecord, dict[str, Any]]) -> ChainSummary:
    """Checks the record's chain and summary; raises :class:`AuditBroken` naming the event
    and the check that failed."""
    if isinstance(record, AuditRecord):
        record = record.model_dump(mode="json", exclude_none=True)
    head, chained_from, redacted = GENESIS, None, 0
    events = record.get("events", [])
    for index, event in enumerate(events):
        seq = index + 1
        if event.get("seq") != seq:
            raise AuditBroken(seq, "order", f"event {seq} of the log says it is seq {event.get('seq')}")
        try:
            body = body_digest(event)
        except ValueError as error:
            raise AuditBroken(seq, "digest", str(error)) from None
        if "prev" in event:
            if event["prev"] != head:
                before = "the empty log" if seq == 1 else f"event {seq - 1}"
                raise AuditBroken(
                    seq, "chain",
                    f"its prev is not the chain hash of {before}: an event before it was "
                    "removed, reordered or altered")
            chained_from = chained_from or seq
        elif chained_from is not None:
            raise AuditBroken(seq, "chain", "it carries no prev, after the chain began")
        redacted += "redacted" in event
        head = link(head, body)
    chain = record.get("chain", {})
    if (chain.get("length"), chain.get("head"), chain.get("chained_from")) != (
        len(events), head, chained_from,
    ):
        raise AuditBroken(
            None, "summary",
            f"the record says its chain is {chain.get('length')} events to head "
            f"{chain.get('head')}, the events make {len(events)} to {head}")
    first = events[0] if events else {}
    if events and "redacted" not in first:
        template = record.get("template", {})
        for name, expected in (("id", record.get("conversation_id")),
                               ("template", template.get("name")),
                               ("revision", template.get("revision"))):
            if first.get(name) != expected:
                raise AuditBroken(1, "start", f"the conversation started with {name} "
                                              f"{first.get(name)!r}, the record names {expected!r}")
    return ChainSummary(len(events), head, chained_from, redacted)
