"""Agents that sign in with an identity provider's JWTs, through the Python SDK, against a
real server (``colloquy serve --auth-jwks FILE --auth-issuer … --auth-audience …
--auth-admin-claim role=admin``) whose agents file lists nobody: the tests play the identity
provider, with a key per algorithm (EdDSA, ES256, RS256, PS256) in the JWKS file the server
reads, and mint the tokens themselves.

Covered: agents known only by their JWTs hold a conversation; the token provider is asked
again for a token near its ``exp`` and for one the server refused; bad tokens are 401s
(``Unauthenticated``) naming the check that failed and counted in ``/metrics``; a key bound
to an agent's JWT by ``cnf`` (RFC 7800) signs its messages where a template requires
signatures, is listed with its issuer, and verifies in the audit record; a key the
administrator (a JWT with the admin claim) registers signs until it is revoked; a rotated
provider key is followed without a restart; a token's fractional ``exp`` (a NumericDate may
have one) is the time its ``cnf`` key signs until."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import re
import time
from pathlib import Path
from typing import Any, Iterator, Optional

import httpx
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from colloquy import (Agent, Client, Forbidden, Incoming, SendMessage, SigningKey,
                      Unauthenticated, Unprocessable)
from colloquy.audit import verify
from colloquy.signing import b64url

from conftest import REPO, Server

ISSUER = "https://idp.test/realms/agents"
AUDIENCE = "colloquy"
ENGINE_KID = "engine-key"
ALGORITHMS = ("EdDSA", "ES256", "RS256", "PS256")


def _json_part(value: Any) -> str:
    return b64url(json.dumps(value, separators=(",", ":")).encode())


def _uint(value: int) -> str:
    return b64url(value.to_bytes((value.bit_length() + 7) // 8, "big"))


class IdentityProvider:
    """The tests' identity provider: a key per algorithm (kid ``<name>-<alg>``), their
    public JWKS, and :meth:`mint`, which signs tokens."""

    def __init__(self, name: str = "idp") -> None:
        self.name = name
        self.keys: dict[str, Any] = {
            "EdDSA": ed25519.Ed25519PrivateKey.generate(),
            "ES256": ec.generate_private_key(ec.SECP256R1()),
            "RS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "PS256": rsa.generate_private_key(public_exponent=65537, key_size=2048),
        }

    def kid(self, alg: str) -> str:
        return f"{self.name}-{alg.lower()}"

    def jwks(self) -> dict[str, Any]:
        keys = []
        for alg, key in self.keys.items():
            public = key.public_key()
            if alg == "EdDSA":
                raw = public.public_bytes(serialization.Encoding.Raw,
                                          serialization.PublicFormat.Raw)
                jwk = {"kty": "OKP", "crv": "Ed25519", "x": b64url(raw)}
            elif alg == "ES256":
                numbers = public.public_numbers()
                jwk = {"kty": "EC", "crv": "P-256", "x": b64url(numbers.x.to_bytes(32, "big")),
                       "y": b64url(numbers.y.to_bytes(32, "big"))}
            else:
                numbers = public.public_numbers()
                jwk = {"kty": "RSA", "n": _uint(numbers.n), "e": _uint(numbers.e)}
            keys.append({**jwk, "kid": self.kid(alg), "alg": alg, "use": "sig"})
        return {"keys": keys}

    def mint(self, subject: Optional[str], *, alg: str = "EdDSA", ttl: int = 600,
             key: Any = None, header: Optional[dict[str, Any]] = None,
             **claims: Any) -> str:
        """A JWT for ``subject`` (the ``sub`` claim) from this provider, valid ``ttl``
        seconds, signed with its ``alg`` key (or ``key``). ``claims`` add or replace claims
        (``None`` drops one); ``header`` replaces header members likewise."""
        now = int(time.time())
        body = {"iss": ISSUER, "aud": AUDIENCE, "sub": subject, "iat": now,
                "exp": now + ttl, **claims}
        head = {"alg": alg, "typ": "JWT", "kid": self.kid(alg), **(header or {})}
        body = {name: value for name, value in body.items() if value is not None}
        head = {name: value for name, value in head.items() if value is not None}
        signing_input = f"{_json_part(head)}.{_json_part(body)}"
        signature = _sign(key or self.keys[alg], alg, signing_input.encode())
        return f"{signing_input}.{b64url(signature)}"


def _sign(key: Any, alg: str, data: bytes) -> bytes:
    if alg == "EdDSA":
        return key.sign(data)
    if alg == "ES256":
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(hashes.SHA256())))
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")
    if alg == "RS256":
        return key.sign(data, padding.PKCS1v15(), hashes.SHA256())
    if alg == "PS256":
        return key.sign(data, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32),
                        hashes.SHA256())
    raise ValueError(alg)


def thumbprint(jwk: dict[str, Any]) -> str:
    """RFC 7638: base64url SHA-256 of the key's required members, sorted, no whitespace."""
    required = {"OKP": ("crv", "kty", "x"), "EC": ("crv", "kty", "x", "y")}[jwk["kty"]]
    members = json.dumps({name: jwk[name] for name in required}, sort_keys=True,
                         separators=(",", ":"))
    return b64url(hashlib.sha256(members.encode()).digest())


def _signed_request_template() -> str:
    source = (REPO / "templates" / "fipa-request.yaml").read_text()
    signed = source.replace("name: fipa-request", "name: signed-request", 1).replace(
        "  enforcement:", "  signatures: required\n  enforcement:", 1)
    assert "signatures: required" in signed
    return signed


class Setup:
    """The server, its identity provider, and fresh agent ids."""

    def __init__(self, server: Server, idp: IdentityProvider, engine_jwks: dict[str, Any],
                 workdir: Path) -> None:
        self.server, self.idp, self.engine_jwks, self.workdir = server, idp, engine_jwks, workdir
        self._ids = itertools.count(1)

    @property
    def url(self) -> str:
        return self.server.url

    def name(self, stem: str) -> str:
        """An agent id no test used yet (the server knows every id through JWTs)."""
        return f"{stem}-{next(self._ids)}"

    def client(self, agent: str, signing_key: Optional[SigningKey] = None,
               **claims: Any) -> Client:
        """``agent``'s client, with a token of its own (EdDSA unless ``alg=`` says)."""
        return Client(self.url, agent, token=self.idp.mint(agent, **claims),
                      signing_key=signing_key)

    def admin(self) -> Client:
        return Client(self.url, "ops", token=self.idp.mint("ops", role="admin"))

    def auth_failures(self) -> dict[str, int]:
        """``colloquy_auth_failures_total`` by check (``/metrics`` needs no credential)."""
        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        return {check: int(float(count)) for check, count in re.findall(
            r'^colloquy_auth_failures_total\{check="(\w+)"\} (\S+)$', text, re.M)}


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setup]:
    workdir = tmp_path_factory.mktemp("jwt")
    idp = IdentityProvider()
    jwks = workdir / "idp-jwks.json"
    jwks.write_text(json.dumps(idp.jwks()))
    engine = SigningKey.generate("EdDSA", ENGINE_KID)
    (workdir / "engine.pem").write_text(engine.private_pem())
    # The agents file lists nobody: every agent, and the administrator, is a JWT's.
    server = Server(workdir, agents="agents: []\n", extra_args=(
        "--auth-jwks", str(jwks), "--auth-issuer", ISSUER, "--auth-audience", AUDIENCE,
        "--auth-admin-claim", "role=admin",
        "--audit-key", str(workdir / "engine.pem"), "--audit-key-id", ENGINE_KID))
    assert server.templates is not None
    (server.templates / "signed-request.yaml").write_text(_signed_request_template())
    server.start()
    yield Setup(server, idp, engine.public_jwks(), workdir)
    server.kill()


def _booker(client: Client, template: str = "fipa-request") -> Agent:
    """An agent that agrees to every request and informs it done."""
    agent = Agent(client)

    @agent.on("request", template=template)
    async def book(msg: Incoming) -> None:
        await msg.agree()
        await msg.inform({"done": True, "by": client.agent_id})

    return agent


async def _ask(asker: Client, answerer: Client, template: str = "fipa-request") -> str:
    """``asker`` requests of ``answerer`` (an :class:`Agent` while it lasts) and gets
    ``done``; the conversation id."""
    agent = _booker(answerer, template)
    run = asyncio.create_task(agent.run(grace=5.0))
    try:
        answer = await asker.request(answerer.agent_id, {"action": "book-room"},
                                     template=template, timeout=30)
        assert answer.outcome == "success", answer
        assert answer.reply is not None and answer.reply.sender == answerer.agent_id
        assert answer.reply.content == {"done": True, "by": answerer.agent_id}
        return answer.conversation_id
    finally:
        agent.stop()
        await asyncio.wait_for(run, 20)


# -- signing in --------------------------------------------------------------------------

async def test_agents_known_only_by_their_jwts_hold_a_conversation(setup):
    dave, erin = setup.name("dave"), setup.name("erin")
    async with setup.client(dave) as asker, setup.client(erin, alg="ES256") as answerer, \
            setup.admin() as admin:
        conversation_id = await _ask(asker, answerer)
        view = await asker.conversation(conversation_id)
        assert (view.initiator, view.participants) == (dave, [erin])
        assert view.status == "completed"
        assert [m.sender for m in view.messages] == [dave, erin, erin]
        # The administrator (a JWT with the admin claim) reads it too, and lists both agents
        # among those that signed in.
        assert (await admin.conversation(conversation_id)).id == conversation_id
        listed = {agent.id for agent in (await admin.agents()).agents}
        assert {dave, erin} <= listed
        # An agent is not the administrator.
        with pytest.raises(Forbidden):
            await asker.call_api("GET", f"/v1/agents/{erin}/signing-keys")


@pytest.mark.parametrize("alg", ALGORITHMS)
async def test_a_token_of_each_algorithm_signs_in(setup, alg):
    agent = setup.name(f"agent-{alg.lower()}")
    async with setup.client(agent, alg=alg) as client:
        assert (await client.conversations()).conversations == []
        listed = (await client.agents()).agents
        assert [info.id for info in listed] == [agent]


# -- the token provider ------------------------------------------------------------------

async def test_a_provider_is_asked_again_for_a_token_near_its_expiry(setup):
    agent = setup.name("gina")
    reasons: list[str] = []
    # Valid for 10 s: the server takes it, but it is inside the SDK's 30 s margin.
    soon, later = (setup.idp.mint(agent, ttl=10), setup.idp.mint(agent, ttl=600))
    tokens = iter([soon, later])

    def provider(reason: str) -> str:
        reasons.append(reason)
        return next(tokens)

    async with Client(setup.url, agent, token=provider) as client:
        for _ in range(3):
            assert (await client.conversations()).conversations == []
    assert reasons == ["first", "near_expiry"]


async def test_a_provider_is_asked_again_when_the_server_refuses_its_token(setup):
    agent = setup.name("hank")
    reasons: list[str] = []

    async def provider(reason: str) -> str:
        reasons.append(reason)
        # First a token for another audience (far from expiry: only the server objects).
        if reason == "first":
            return setup.idp.mint(agent, aud="some-other-service")
        return setup.idp.mint(agent)

    before = setup.auth_failures().get("audience", 0)
    async with Client(setup.url, agent, token=provider) as client:
        assert (await client.conversations()).conversations == []
        assert (await client.conversations()).conversations == []
    assert reasons == ["first", "refused"]
    assert setup.auth_failures().get("audience", 0) == before + 1


async def test_a_provider_whose_new_token_is_refused_too_raises(setup):
    agent = setup.name("ivan")
    reasons: list[str] = []

    def provider(reason: str) -> str:
        reasons.append(reason)
        return setup.idp.mint(agent, ttl=-3600)

    async with Client(setup.url, agent, token=provider) as client:
        with pytest.raises(Unauthenticated) as refused:
            await client.conversations()
    assert reasons == ["first", "refused"]
    assert "`expired` check" in refused.value.message


# -- bad tokens --------------------------------------------------------------------------

def _bad_tokens(idp: IdentityProvider, agent: str) -> dict[str, tuple[str, str]]:
    """Tokens the server must refuse: case → (token, the check named)."""
    stranger = ed25519.Ed25519PrivateKey.generate()
    public_jwk = json.dumps(idp.jwks()["keys"][0], separators=(",", ":")).encode()
    unsigned = idp.mint(agent, header={"alg": "none"}).rsplit(".", 1)[0] + "."
    hs_input = idp.mint(agent, header={"alg": "HS256"}).rsplit(".", 1)[0]
    hs256 = hs_input + "." + b64url(hmac.new(public_jwk, hs_input.encode(),
                                             hashlib.sha256).digest())
    return {
        "expired": (idp.mint(agent, ttl=-3600), "expired"),
        "not yet valid": (idp.mint(agent, nbf=int(time.time()) + 3600), "not_yet_valid"),
        "wrong audience": (idp.mint(agent, aud="some-other-service"), "audience"),
        "wrong issuer": (idp.mint(agent, iss="https://evil.test"), "issuer"),
        "alg none": (unsigned, "algorithm"),
        "HS256 with the public key": (hs256, "algorithm"),
        "unknown key": (idp.mint(agent, key=stranger, header={"kid": "stranger-1"}),
                        "unknown_kid"),
        "another key under the provider's kid": (idp.mint(agent, key=stranger), "signature"),
        "no sub": (idp.mint(None), "claim"),
        "garbage": ("not.a.jwt", "malformed"),
    }


BAD_TOKENS = ("expired", "not yet valid", "wrong audience", "wrong issuer", "alg none",
              "HS256 with the public key", "unknown key",
              "another key under the provider's kid", "no sub", "garbage")


@pytest.mark.parametrize("case", BAD_TOKENS)
async def test_a_bad_token_is_refused_naming_the_check_and_counted(setup, case):
    agent = setup.name("mallory")
    token, check = _bad_tokens(setup.idp, agent)[case]
    before = setup.auth_failures()
    async with Client(setup.url, agent, token=token) as client:
        with pytest.raises(Unauthenticated) as refused:
            await client.conversations()
    assert refused.value.code == "unauthenticated"
    assert refused.value.message.startswith(f"bearer JWT refused by the `{check}` check: "), \
        refused.value.message
    # Never the token or its signature in the answer.
    signature = token.rsplit(".", 1)[-1]
    assert token not in refused.value.message
    assert not signature or signature not in refused.value.message
    after = setup.auth_failures()
    assert after.get(check, 0) == before.get(check, 0) + 1, (before, after)


async def test_a_rotated_provider_key_is_followed_without_a_restart(tmp_path):
    old, new = IdentityProvider("2025"), IdentityProvider("2026")
    jwks = tmp_path / "idp-jwks.json"
    jwks.write_text(json.dumps(old.jwks()))
    server = Server(tmp_path, agents="agents: []\n", extra_args=(
        "--auth-jwks", str(jwks), "--auth-issuer", ISSUER, "--auth-audience", AUDIENCE))
    server.start()
    try:
        async with Client(server.url, "kim", token=old.mint("kim")) as client:
            await client.conversations()
        # The provider rotates: the file holds the new keys only. A token naming a kid the
        # server lacks makes it read the keys again.
        jwks.write_text(json.dumps(new.jwks()))
        async with Client(server.url, "kim", token=new.mint("kim", alg="ES256")) as client:
            await client.conversations()
        async with Client(server.url, "kim", token=old.mint("kim")) as client:
            with pytest.raises(Unauthenticated) as refused:
                await client.conversations()
        assert "`unknown_kid` check" in refused.value.message
    finally:
        server.kill()


# -- keys bound by cnf, keys the administrator registers --------------------------------

def _bound_key(alg: str, kid: Optional[str] = None) -> tuple[SigningKey, dict[str, Any]]:
    """A fresh key and the JWK a ``cnf`` claim binds it with: without a kid, the key is
    named by its RFC 7638 thumbprint."""
    made = SigningKey.generate(alg, "unnamed")
    jwk = {name: value for name, value in made.public_jwk().items()
           if name in ("kty", "crv", "x", "y")}
    if kid is not None:
        jwk["kid"] = kid
    return SigningKey.from_pem(made.private_pem(), kid or thumbprint(jwk)), jwk


def _start_signed(client: Client, to: str) -> Any:
    return client.start("signed-request", [to],
                        message=SendMessage(performative="request", content={"action": "x"}))


async def test_a_key_bound_by_cnf_signs_for_its_agent(setup):
    dave, erin = setup.name("dave"), setup.name("erin")
    dave_key, dave_jwk = _bound_key("EdDSA")
    erin_key, erin_jwk = _bound_key("ES256", kid="erin-phone-1")
    exp = int(time.time()) + 600
    dave_token = setup.idp.mint(dave, exp=exp, cnf={"jwk": dave_jwk})
    erin_token = setup.idp.mint(erin, alg="ES256", cnf={"jwk": erin_jwk})
    async with Client(setup.url, dave, token=dave_token, signing_key=dave_key) as asker, \
            Client(setup.url, erin, token=erin_token, signing_key=erin_key) as answerer:
        conversation_id = await _ask(asker, answerer, template="signed-request")

        listed = await asker.call_api("GET", f"/v1/agents/{dave}/signing-keys")
        assert listed["agent"] == dave
        [key] = listed["keys"]
        assert key["kid"] == dave_key.kid == thumbprint(dave_jwk)
        assert key["source"] == {"kind": "cnf", "issuer": ISSUER}
        assert key["valid_until"] == exp * 1000 and key.get("revoked_at") is None
        assert key["jwk"] == {**dave_jwk, "kid": dave_key.kid}
        listed = await answerer.call_api("GET", f"/v1/agents/{erin}/signing-keys")
        assert [key["kid"] for key in listed["keys"]] == ["erin-phone-1"]

        record = await asker.audit(conversation_id)
        verified = verify(record, setup.engine_jwks, agent_keys={
            dave: {"keys": [{**dave_jwk, "kid": dave_key.kid}]},
            erin: {"keys": [erin_jwk]}})
        assert verified.signed_messages == 3, "request, agree, inform"
        assert verified.engine_key == ENGINE_KID
        assert record.signer_keys[dave] == {
            "keys": [{**dave_jwk, "kid": dave_key.kid}]}

        # A key the token did not bind: unknown; dave's kid on another key: altered.
        for key, why in [(_bound_key("EdDSA")[0], "unknown key"),
                         (SigningKey.generate("EdDSA", dave_key.kid), "altered")]:
            with pytest.raises(Unprocessable) as refused:
                await _start_signed(asker.signing_with(key), erin)
            assert refused.value.code == "bad_signature", refused.value
            assert why in refused.value.message, refused.value.message
        await answerer.acknowledge_inbox()


async def test_a_cnf_key_of_a_token_with_a_fractional_exp_signs_until_that_exp(setup):
    dave, erin = setup.name("dave"), setup.name("erin")
    key, jwk = _bound_key("EdDSA")
    exp = time.time() + 600.5
    async with Client(setup.url, dave, token=setup.idp.mint(dave, exp=exp, cnf={"jwk": jwk}),
                      signing_key=key) as signer:
        [listed] = (await signer.call_api("GET", f"/v1/agents/{dave}/signing-keys"))["keys"]
        assert listed["valid_until"] == int(exp * 1000), listed
        await _start_signed(signer, erin)


async def test_a_key_the_administrator_registers_signs_until_revoked(setup):
    frank, erin = setup.name("frank"), setup.name("erin")
    key = SigningKey.generate("ES256", "frank-1")
    path = f"/v1/agents/{frank}/signing-keys/{key.kid}"
    async with setup.admin() as admin, setup.client(frank, signing_key=key) as signer:
        # An agent may not register its own keys.
        with pytest.raises(Forbidden):
            await signer.call_api("PUT", path, json=key.public_jwk())
        registered = await admin.call_api("PUT", path, json=key.public_jwk())
        assert registered["source"] == {"kind": "admin"} and registered["kid"] == key.kid

        signed = await _start_signed(signer, erin)
        record = await admin.audit(signed.id)
        assert verify(record, setup.engine_jwks).signed_messages == 1

        revoked = await admin.call_api("DELETE", path)
        assert revoked["revoked_at"] is not None
        with pytest.raises(Unprocessable) as refused:
            await _start_signed(signer, erin)
        assert refused.value.code == "bad_signature"
        assert "revoked" in refused.value.message, refused.value.message
        # What it signed before still verifies, under the key the record keeps.
        record = await admin.audit(signed.id)
        assert verify(record, setup.engine_jwks, agent_keys={
            frank: key.public_jwks()}).signed_messages == 1
