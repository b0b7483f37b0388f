"""Signed messages (docs/security.md#signed-messages): a sender signs the RFC 8785 form of
what it sends with a detached JWS, and whoever holds its public keys checks it.

A :class:`SigningKey` (Ed25519, ``EdDSA``, or P-256, ``ES256``) given to a
:class:`~colloquy.Client` (``Client(..., signing_key=key)`` or ``client.signing_with(key)``)
signs every message the client sends, and the opening message of every conversation it
starts: the signature covers the conversation id, the message id, the sender, the
performative, ``to`` as sent, the content, ``in_reply_to`` and ``reply_by``
(:func:`signed_fields`), every key present, null when absent. A message without an id, or a
start without a conversation id, gets a fresh UUIDv7 one: the signature covers both.

A :class:`KeySet` (from a JWKS document) verifies such signatures, and the engine's over an
audit record (:func:`colloquy.audit.verify`). Only the two algorithms named are known: never
``none``, never an HMAC, never a key the header points at; only the keys a set was given
count. The signing input and the wording of what fails are those of the engine
(``colloquy_trust::jws``), so an SDK's verdict and ``colloquy audit verify``'s agree.

The cryptography is the ``cryptography`` package's, an optional dependency
(``pip install 'colloquy[signing]'``): the SDK imports without it, and only signing or
checking a signature asks for it (:class:`SigningUnavailable` says so).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Union

from .errors import ColloquyError

#: The JWS ``typ`` of a message signature.
MESSAGE_SIGNATURE_TYPE = "colloquy-message+jws"
#: The JWS ``typ`` of the engine's signature over an audit record.
AUDIT_SIGNATURE_TYPE = "colloquy-audit+jws"
#: The algorithms Colloquy signs with.
ALGORITHMS = ("EdDSA", "ES256")


class SigningError(ColloquyError):
    """A key that cannot sign: not a key Colloquy signs with, or no key id."""


class SigningUnavailable(SigningError):
    """Signing or checking a signature needs the ``cryptography`` package."""


@functools.lru_cache(maxsize=1)
def _crypto() -> Any:
    """The ``cryptography`` modules the SDK uses, or :class:`SigningUnavailable`."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, ed25519, utils
    except ImportError as error:
        raise SigningUnavailable(
            "signed messages need the `cryptography` package: pip install 'colloquy[signing]'"
        ) from error

    class Crypto:
        pass

    crypto = Crypto()
    crypto.InvalidSignature = InvalidSignature
    crypto.hashes, crypto.serialization = hashes, serialization
    crypto.ec, crypto.ed25519, crypto.utils = ec, ed25519, utils
    return crypto


def b64url(data: bytes) -> str:
    """base64url without padding (RFC 7515)."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """The bytes of unpadded base64url; ``ValueError`` when it is not that."""
    if not isinstance(text, str) or "=" in text or len(text) % 4 == 1:
        raise ValueError("not base64url")
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("not base64url") from None


def uuid7() -> str:
    """A fresh UUIDv7 (time-ordered, RFC 9562), as the engine and the Rust SDK mint ids."""
    ms = time.time_ns() // 1_000_000
    value = bytearray(ms.to_bytes(6, "big") + os.urandom(10))
    value[6] = 0x70 | (value[6] & 0x0F)
    value[8] = 0x80 | (value[8] & 0x3F)
    return str(uuid.UUID(bytes=bytes(value)))


def _canonical(value: Any) -> str:
    from .audit import canonical  # audit imports this module; canonical lives there

    return canonical(value)


def _header(alg: str, kid: str, typ: str) -> str:
    header = json.dumps({"alg": alg, "kid": kid, "typ": typ}, separators=(",", ":"),
                        ensure_ascii=False)
    return b64url(header.encode())


def _signing_input(protected: str, payload: bytes) -> bytes:
    return f"{protected}.{b64url(payload)}".encode("ascii")


class SigningKey:
    """A private key that signs, named by a key id (``kid``): Ed25519 (``EdDSA``) or P-256
    (``ES256``). Its public half (:meth:`public_jwk`) goes in the agent's ``signing_keys``
    in the server's agents file.

    ``SigningKey.from_pem(pem, kid="bob-1")`` (PKCS#8, as ``colloquy audit keygen``
    writes), ``SigningKey.from_file(path, kid)``, ``SigningKey.from_jwk(jwk)`` (a private
    JWK with ``d``), or ``SigningKey.generate("EdDSA", "bob-1")``."""

    def __init__(self, private_key: Any, kid: str) -> None:
        crypto = _crypto()
        if not kid:
            raise SigningError("a key id is required")
        if isinstance(private_key, crypto.ed25519.Ed25519PrivateKey):
            self.alg = "EdDSA"
        elif (isinstance(private_key, crypto.ec.EllipticCurvePrivateKey)
              and isinstance(private_key.curve, crypto.ec.SECP256R1)):
            self.alg = "ES256"
        else:
            raise SigningError("not an Ed25519 or P-256 private key")
        self.kid = kid
        self._key = private_key

    def __repr__(self) -> str:
        return f"SigningKey(alg={self.alg!r}, kid={self.kid!r})"

    @classmethod
    def generate(cls, alg: str = "EdDSA", kid: str = "") -> SigningKey:
        """A fresh key: ``EdDSA`` (Ed25519) or ``ES256`` (P-256)."""
        crypto = _crypto()
        if alg == "EdDSA":
            return cls(crypto.ed25519.Ed25519PrivateKey.generate(), kid)
        if alg == "ES256":
            return cls(crypto.ec.generate_private_key(crypto.ec.SECP256R1()), kid)
        raise SigningError(f"`{alg}` is not an algorithm Colloquy signs with (EdDSA, ES256)")

    @classmethod
    def from_pem(cls, pem: Union[str, bytes], kid: str) -> SigningKey:
        """A PKCS#8 private key (``-----BEGIN PRIVATE KEY-----``, or its DER bytes)."""
        crypto = _crypto()
        data = pem.encode() if isinstance(pem, str) else bytes(pem)
        try:
            if b"-----BEGIN" in data:
                key = crypto.serialization.load_pem_private_key(data, password=None)
            else:
                key = crypto.serialization.load_der_private_key(data, password=None)
        except (ValueError, TypeError) as error:
            raise SigningError(f"not a PKCS#8 Ed25519 or P-256 private key: {error}") from None
        return cls(key, kid)

    @classmethod
    def from_file(cls, path: Union[str, os.PathLike[str]], kid: str) -> SigningKey:
        """The key in a PKCS#8 file (PEM or DER), as ``colloquy audit keygen --out`` writes."""
        try:
            data = Path(path).read_bytes()
        except OSError as error:
            raise SigningError(f"the key {path}: {error}") from None
        try:
            return cls.from_pem(data, kid)
        except SigningError as error:
            raise SigningError(f"the key {path}: {error}") from None

    @classmethod
    def from_jwk(cls, jwk: Union[Mapping[str, Any], str], kid: Optional[str] = None) -> SigningKey:
        """A private JWK (``{"kty": "OKP", "crv": "Ed25519", "d": …, "x": …}`` or ``{"kty":
        "EC", "crv": "P-256", "d": …, "x": …, "y": …}``), named ``kid`` or its own ``kid``."""
        crypto = _crypto()
        if isinstance(jwk, str):
            jwk = json.loads(jwk)
        kid = kid or jwk.get("kid") or ""
        try:
            d = b64url_decode(jwk.get("d", ""))
            if (jwk.get("kty"), jwk.get("crv")) == ("OKP", "Ed25519"):
                key = crypto.ed25519.Ed25519PrivateKey.from_private_bytes(d)
            elif (jwk.get("kty"), jwk.get("crv")) == ("EC", "P-256"):
                key = crypto.ec.derive_private_key(int.from_bytes(d, "big"), crypto.ec.SECP256R1())
            else:
                raise SigningError("an OKP/Ed25519 or EC/P-256 private JWK is expected")
        except ValueError as error:
            raise SigningError(f"not a private JWK: {error}") from None
        signer = cls(key, kid)
        public = signer.public_jwk()
        if any(name in jwk and jwk[name] != public[name] for name in ("x", "y")):
            raise SigningError("the JWK's public key is not that of its `d`")
        return signer

    def public_jwk(self) -> dict[str, str]:
        """The public key as a JWK, for the agents file (``signing_keys: {"keys": [it]}``)."""
        serialization = _crypto().serialization
        public = self._key.public_key()
        if self.alg == "EdDSA":
            raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            return {"kty": "OKP", "crv": "Ed25519", "alg": "EdDSA", "kid": self.kid,
                    "x": b64url(raw)}
        numbers = public.public_numbers()
        return {"kty": "EC", "crv": "P-256", "alg": "ES256", "kid": self.kid,
                "x": b64url(numbers.x.to_bytes(32, "big")),
                "y": b64url(numbers.y.to_bytes(32, "big"))}

    def public_jwks(self) -> dict[str, Any]:
        """``{"keys": [public_jwk()]}``: a JWKS of this key alone."""
        return {"keys": [self.public_jwk()]}

    def private_pem(self) -> str:
        """The key as PKCS#8 PEM, as ``colloquy audit keygen`` writes it (keep it private)."""
        serialization = _crypto().serialization
        return self._key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ).decode("ascii")

    def sign(self, payload: bytes, typ: str) -> str:
        """A detached compact JWS (``protected..signature``) over ``payload`` whose header
        names this key's ``alg`` and ``kid`` and ``typ``."""
        crypto = _crypto()
        protected = _header(self.alg, self.kid, typ)
        data = _signing_input(protected, payload)
        if self.alg == "EdDSA":
            signature = self._key.sign(data)
        else:
            der = self._key.sign(data, crypto.ec.ECDSA(crypto.hashes.SHA256()))
            r, s = crypto.utils.decode_dss_signature(der)
            signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return f"{protected}..{b64url(signature)}"

    def sign_fields(self, fields: Any) -> str:
        """The message signature over ``fields`` (:func:`signed_fields`) in RFC 8785 form."""
        return self.sign(_canonical(fields).encode(), MESSAGE_SIGNATURE_TYPE)


def signed_fields(
    conversation_id: str,
    sender: str,
    *,
    message_id: Optional[str],
    performative: str,
    to: Optional[Iterable[str]] = None,
    content: Any = None,
    in_reply_to: Optional[str] = None,
    reply_by: Optional[int] = None,
) -> dict[str, Any]:
    """What a sender signs: the conversation, the message id, itself, and the message as it
    sends it (``to`` as sent, before routing: ``[]`` for the default receivers). Every key
    is there; absent values are null."""
    return {
        "conversation_id": conversation_id,
        "message_id": message_id,
        "sender": sender,
        "performative": performative,
        "to": list(to or []),
        "content": content,
        "in_reply_to": in_reply_to,
        "reply_by": reply_by,
    }


def _parse_detached(jws: Any) -> tuple[str, str]:
    parts = jws.split(".") if isinstance(jws, str) else []
    if len(parts) != 3 or not parts[0] or parts[1] or not parts[2]:
        raise ValueError("not a detached compact JWS (`header..signature`)")
    return parts[0], parts[2]


class KeySet:
    """Public keys that verify signatures, by key id: ``KeySet.from_jwks({"keys": [...]})``.
    Every key needs a ``kid``; keys of other types are an error (a signature Colloquy checks
    is never made with one)."""

    def __init__(self) -> None:
        self._keys: dict[str, tuple[str, tuple[bytes, ...]]] = {}

    @classmethod
    def from_jwks(cls, *documents: Any) -> KeySet:
        """The keys of one or more JWKS documents (dicts, JSON text, or models with ``keys``)."""
        keys = cls()
        for document in documents:
            keys.add_jwks(document)
        return keys

    def add_jwks(self, jwks: Any) -> None:
        """Adds the keys of a JWKS document; a key id already present is a ``ValueError``
        unless it names the same key."""
        if isinstance(jwks, str):
            jwks = json.loads(jwks)
        if hasattr(jwks, "model_dump"):
            jwks = jwks.model_dump(mode="json")
        keys = jwks.get("keys") if isinstance(jwks, Mapping) else None
        if not isinstance(keys, list):
            raise ValueError("a JWKS document has a `keys` list")
        for index, key in enumerate(keys):
            try:
                kid, public = _public_key(key)
            except ValueError as error:
                raise ValueError(f"keys[{index}]{error}") from None
            known = self._keys.get(kid)
            if known is not None and known != public:
                raise ValueError(f"keys[{index}]: key id `{kid}` names two keys")
            self._keys[kid] = public

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, kid: object) -> bool:
        return kid in self._keys

    def verify(self, jws: str, payload: bytes) -> str:
        """The id of the key whose detached signature ``jws`` over ``payload`` is; a
        ``ValueError`` says why not, in the engine's words."""
        protected, signature = _parse_detached(jws)
        return self.verify_parts(protected, signature, payload)

    def verify_parts(self, protected: str, signature: str, payload: bytes) -> str:
        try:
            header = json.loads(b64url_decode(protected))
            if not isinstance(header, dict):
                raise ValueError
        except ValueError:
            raise ValueError("the protected header is not base64url JSON") from None
        kid = header.get("kid") if isinstance(header.get("kid"), str) else ""
        alg = header.get("alg") if isinstance(header.get("alg"), str) else ""
        if kid not in self._keys:
            raise ValueError(f"no known key `{kid}`")
        key_alg, public = self._keys[kid]
        if key_alg != alg:
            raise ValueError(f"key `{kid}` is {key_alg}, the signature says `{alg}`")
        try:
            raw = b64url_decode(signature)
        except ValueError:
            raise ValueError("the signature is not base64url") from None
        if not _holds(key_alg, public, raw, _signing_input(protected, payload)):
            raise ValueError(f"the signature by `{kid}` does not hold")
        return kid


def _public_key(key: Any) -> tuple[str, tuple[str, tuple[bytes, ...]]]:
    """A JWK's key id and public key; a ``ValueError`` starts with the field at fault."""
    if not isinstance(key, Mapping):
        key = {}

    def raw(name: str) -> bytes:
        text = key.get(name)
        if not isinstance(text, str):
            raise ValueError(f".{name}: required")
        try:
            return b64url_decode(text)
        except ValueError as error:
            raise ValueError(f".{name}: {error}") from None

    kid = key.get("kid")
    if not isinstance(kid, str):
        raise ValueError(".kid: required")
    kind = (key.get("kty"), key.get("crv"))
    if kind == ("OKP", "Ed25519"):
        return kid, ("EdDSA", (raw("x"),))
    if kind == ("EC", "P-256"):
        return kid, ("ES256", (raw("x"), raw("y")))
    raise ValueError(": an OKP/Ed25519 or EC/P-256 key is expected")


def _holds(alg: str, public: tuple[bytes, ...], signature: bytes, data: bytes) -> bool:
    crypto = _crypto()
    try:
        if alg == "EdDSA":
            crypto.ed25519.Ed25519PublicKey.from_public_bytes(public[0]).verify(signature, data)
            return True
        x, y = public
        if len(x) != 32 or len(y) != 32 or len(signature) != 64:
            return False
        point = crypto.ec.EllipticCurvePublicNumbers(
            int.from_bytes(x, "big"), int.from_bytes(y, "big"), crypto.ec.SECP256R1()
        ).public_key()
        der = crypto.utils.encode_dss_signature(
            int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
        point.verify(der, data, crypto.ec.ECDSA(crypto.hashes.SHA256()))
        return True
    except (crypto.InvalidSignature, ValueError):
        return False


def verify_message(keys: KeySet, fields: Any, jws: str) -> str:
    """The id of the key in ``keys`` whose signature ``jws`` over ``fields`` is; a
    ``ValueError`` says why not as the server's 422 does: not a JWS, signed by a key the
    sender does not have (``unknown key``), or over other fields (``altered``)."""
    protected, signature = _parse_detached(jws)
    try:
        return keys.verify_parts(protected, signature, _canonical(fields).encode())
    except ValueError as error:
        why = str(error)
        if why.startswith("no known key"):
            raise ValueError(f"unknown key: {why}") from None
        if "does not hold" in why:
            raise ValueError(f"altered: {why} over this message") from None
        raise
