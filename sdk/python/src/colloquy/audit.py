"""Checking an audit record offline (docs/security.md), as ``colloquy audit verify --jwks``
does: :func:`verify` checks the record's format; its chain, event by event (the events
numbered 1 to n, each ``prev`` the chain hash of the event before); that the record's length
and head are those of the chain; that the first event names the record's conversation and
revision; every signed message against its sender's keys; the template source against the
revision, when the record holds it; and the engine's signature over the record with the
engine's keys (``GET /v1/audit/keys``), when given. :func:`verify_chain` checks the chain,
the summary and the start alone, and needs no cryptography.

Signatures need the ``cryptography`` package (``pip install 'colloquy[signing]'``).

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

from . import signing
from .errors import ColloquyError
from .models import AuditRecord

#: The ``format`` of the records this module reads.
FORMAT = "colloquy.audit/1"

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


def _json(value: Any) -> str:
    """``value`` as the engine quotes a JSON value in its messages."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _as_dict(record: Union[AuditRecord, dict[str, Any]]) -> dict[str, Any]:
    if isinstance(record, AuditRecord):
        # The engine signs the whole record: the model keeps even fields it does not name.
        return record.model_dump(mode="json", exclude_none=True)
    return record


def verify_chain(record: Union[AuditRecord, dict[str, Any]]) -> ChainSummary:
    """Checks the record's chain, its summary and its start (no signatures); raises
    :class:`AuditBroken` naming the event and the check that failed."""
    record = _as_dict(record)
    head, chained_from, redacted = GENESIS, None, 0
    events = record.get("events", [])
    for index, event in enumerate(events):
        seq = index + 1
        if event.get("seq") != seq:
            said = _json(event.get("seq"))
            raise AuditBroken(seq, "order", f"event {seq} of the log says it is `seq` {said}")
        try:
            body = body_digest(event)
        except ValueError as error:
            raise AuditBroken(seq, "digest", str(error)) from None
        if "prev" in event:
            if event["prev"] != head:
                before = "the empty log" if seq == 1 else f"event {seq - 1}"
                raise AuditBroken(
                    seq, "chain",
                    f"its `prev` is not the chain hash of {before}: an event before it was "
                    "removed, reordered or altered")
            chained_from = chained_from or seq
        elif chained_from is not None:
            raise AuditBroken(seq, "chain", "it carries no `prev`, after the chain began")
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
                                              f"{_json(first.get(name))}, the record names "
                                              f"`{expected}`")
    return ChainSummary(len(events), head, chained_from, redacted)


@dataclass(frozen=True)
class Verified:
    """What a record proved (:func:`verify`)."""

    #: The chain it holds.
    chain: ChainSummary
    #: The key that made the engine's signature, when there is one and keys were given.
    engine_key: Optional[str]
    #: The record holds an engine signature that no key was given to check.
    engine_signature_unchecked: bool
    #: The template source was there and matches the revision.
    template_checked: bool
    #: How many messages carried their sender's signature, each checked.
    signed_messages: int


Jwks = Any  # a JWKS document: {"keys": [JWK, ...]}, its JSON text, or a Jwks model


def _key_set(documents: Any) -> signing.KeySet:
    if documents is None:
        return signing.KeySet()
    if isinstance(documents, signing.KeySet):
        return documents
    if isinstance(documents, (list, tuple)):
        return signing.KeySet.from_jwks(*documents)
    return signing.KeySet.from_jwks(documents)


def signed_payload(record: Union[AuditRecord, dict[str, Any]]) -> str:
    """What the engine signs over a record: every field but the events (which the chain
    head stands for) and the template source (which the digest stands for), RFC 8785."""
    record = _as_dict(record)
    template, chain = record.get("template", {}), record.get("chain", {})
    return canonical({
        "format": record.get("format"),
        "conversation_id": record.get("conversation_id"),
        "reader": record.get("reader"),
        "template": template.get("name"),
        "revision": template.get("revision"),
        "template_sha256": template.get("sha256"),
        "hook_sha256": template.get("hook_sha256"),
        "chain_length": chain.get("length"),
        "chain_head": chain.get("head"),
        "chained_from": chain.get("chained_from"),
        "issued_at": record.get("issued_at"),
        "signer_keys": record.get("signer_keys") or {},
    })


def revision_digest(source: str, hook_module_sha256: Optional[str] = None) -> str:
    """The SHA-256 behind a template revision: of the YAML source, then, with a hook module,
    ``\\0hook-module:`` and the module's SHA-256 in hex."""
    data = source.encode()
    if hook_module_sha256 is not None:
        data += b"\0hook-module:" + hook_module_sha256.encode()
    return _sha256(data)


def verify(
    record: Union[AuditRecord, dict[str, Any]],
    engine_keys: Any = None,
    agent_keys: Optional[dict[str, Any]] = None,
) -> Verified:
    """Checks ``record`` as ``colloquy audit verify --jwks`` does, and raises
    :class:`AuditBroken` naming the event (if one) and the check that failed: ``format``,
    ``order``, ``digest``, ``chain``, ``summary``, ``start``, ``message signature``,
    ``template``, ``engine signature``.

    ``engine_keys``: the engine's audit keys (a JWKS, as ``GET /v1/audit/keys`` answers, or
    a list of them). An engine signature by a key not among them fails; without them it is
    reported unchecked (``Verified.engine_signature_unchecked``). Each signed message is
    checked against its sender's keys: those in ``agent_keys`` (sender id to JWKS) when it
    names the sender, else those the record carries in ``signer_keys`` (which the engine's
    signature covers, so they are as good as the engine's key that signed them)."""
    record = _as_dict(record)
    try:
        engine = _key_set(engine_keys)
    except ValueError as error:
        raise ValueError(f"the engine's keys: {error}") from None
    if record.get("format") != FORMAT:
        raise AuditBroken(None, "format", f"`{record.get('format')}` is not `{FORMAT}`")
    chain = verify_chain(record)
    signed = _check_signatures(record, agent_keys or {})
    template_checked = _check_template(record.get("template", {}))
    engine_key, unchecked = None, False
    engine_signature = record.get("engine_signature")
    if engine_signature is not None:
        if len(engine) == 0:
            unchecked = True
        else:
            try:
                engine_key = engine.verify(engine_signature.get("jws"),
                                           signed_payload(record).encode())
            except ValueError as error:
                raise AuditBroken(None, "engine signature", str(error)) from None
    return Verified(chain, engine_key, unchecked, template_checked, signed)


_MESSAGE_FIELDS = (("id", str), ("performative", str), ("sender", str), ("receivers", list),
                   ("sent_at", int))


def _check_signatures(record: dict[str, Any], agent_keys: dict[str, Any]) -> int:
    """Every signed message the record shows in full holds under its sender's keys: how
    many there are."""
    signed = 0
    sets: dict[str, signing.KeySet] = {}
    for event in record.get("events", []):
        message = event.get("message")
        if not isinstance(message, dict) or "signature" not in message:
            continue
        seq = event.get("seq")

        def broken(why: str) -> AuditBroken:
            return AuditBroken(seq, "message signature", why)

        for name, kind in _MESSAGE_FIELDS:
            if not isinstance(message.get(name), kind):
                raise broken(f"not a message: `{name}` missing or not a {kind.__name__}")
        signature = message["signature"]
        if signature is None:
            continue
        if not isinstance(signature, dict) or not isinstance(signature.get("jws"), str):
            raise broken("not a message: its `signature` has no `jws`")
        sender = message["sender"]
        if sender not in sets:
            jwks = agent_keys.get(sender)
            if jwks is None:
                jwks = (record.get("signer_keys") or {}).get(sender)
            if jwks is None:
                raise broken(f"the record holds no keys of `{sender}`")
            try:
                sets[sender] = _key_set(jwks)
            except ValueError as error:
                raise broken(str(error)) from None
        fields = signing.signed_fields(
            record.get("conversation_id"), sender,
            message_id=message["id"], performative=message["performative"],
            to=signature.get("to") or [], content=message.get("content"),
            in_reply_to=message.get("in_reply_to"), reply_by=message.get("reply_by"),
        )
        try:
            signing.verify_message(sets[sender], fields, signature["jws"])
        except ValueError as error:
            raise broken(f"`{sender}`'s message {message['id']}: {error}") from None
        signed += 1
    return signed


def _check_template(template: dict[str, Any]) -> bool:
    """Whether the template's source was there to check; :class:`AuditBroken` when it or
    the digest does not match the revision."""
    digest = template.get("sha256")
    if digest is None:
        return False
    if template.get("revision") != f"sha256:{digest[:16]}":
        raise AuditBroken(None, "template", f"revision {template.get('revision')} is not the "
                                            f"abbreviation of sha256 {digest}")
    source = template.get("source")
    if source is None:
        return False
    computed = revision_digest(source, template.get("hook_sha256"))
    if computed != digest:
        raise AuditBroken(None, "template", f"the source (and hook module hash) hash to "
                                            f"{computed}, not {digest}")
    return True
