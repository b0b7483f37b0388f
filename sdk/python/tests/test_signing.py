"""Signed messages and audit records through the Python SDK, against a real server that
requires signatures (a template with ``spec.signatures: required``, agents with
``signing_keys``) and signs its records (``--audit-key``): a client with a
:class:`SigningKey` signs every message it sends, the server refuses unsigned, altered and
wrongly signed ones (422 ``bad_signature``), and :func:`colloquy.audit.verify` checks the
record as ``colloquy audit verify --jwks`` does, which the test runs to agree with it."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from colloquy import Agent, Client, Incoming, SigningKey, SyncClient, Unprocessable
from colloquy.audit import AuditBroken, body_digest, link, verify, GENESIS
from colloquy.signing import KeySet, SigningError, signed_fields, verify_message

from conftest import REPO, Server, colloquy_binary

ENGINE_KID = "engine-key"


def _signed_request_template() -> str:
    source = (REPO / "templates" / "fipa-request.yaml").read_text()
    signed = source.replace("name: fipa-request", "name: signed-request", 1).replace(
        "  enforcement:", "  signatures: required\n  enforcement:", 1)
    assert "signatures: required" in signed
    return signed


class Parties:
    """The signing server and what the tests know of it."""

    def __init__(self, server: Server, keys: dict[str, SigningKey], engine_jwks: dict[str, Any],
                 workdir: Path) -> None:
        self.server, self.keys, self.engine_jwks, self.workdir = server, keys, engine_jwks, workdir

    def client(self, agent: str, signed: bool = True) -> Client:
        return Client(self.server.url, agent, f"{agent}-token",
                      signing_key=self.keys[agent] if signed else None)


def _keygen(workdir: Path, name: str, kid: str, p256: bool = False) -> tuple[Path, dict[str, Any]]:
    """A key made by `colloquy audit keygen`: its file and its public JWKS."""
    path = workdir / f"{name}.pem"
    made = subprocess.run(
        [str(colloquy_binary()), "audit", "keygen", "--out", str(path), "--kid", kid,
         *(["--p256"] if p256 else [])],
        check=True, capture_output=True, text=True, timeout=60)
    return path, json.loads(made.stdout)


@pytest.fixture(scope="module")
def parties(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Parties]:
    workdir = tmp_path_factory.mktemp("signing")
    engine_key, engine_jwks = _keygen(workdir, "engine", ENGINE_KID)
    # dave's key comes from `colloquy audit keygen` too (P-256), read as a PEM file.
    dave_key, dave_jwks = _keygen(workdir, "dave", "dave-1", p256=True)
    keys = {
        "alice": SigningKey.generate("EdDSA", "alice-1"),
        "bob": SigningKey.generate("ES256", "bob-1"),
        "dave": SigningKey.from_file(dave_key, "dave-1"),
    }
    assert keys["dave"].public_jwks() == dave_jwks
    lines = ["admin_token: admin-token", "agents:"]
    for agent, key in keys.items():
        lines.append(f"  - {{id: {agent}, token: {agent}-token, "
                     f"signing_keys: {json.dumps(key.public_jwks())}}}")
    lines.append("  - {id: carol, token: carol-token}")
    server = Server(workdir, agents="\n".join(lines) + "\n",
                    extra_args=("--audit-key", str(engine_key), "--audit-key-id", ENGINE_KID))
    assert server.templates is not None
    (server.templates / "signed-request.yaml").write_text(_signed_request_template())
    server.start()
    served = httpx.get(f"{server.url}/v1/audit/keys", timeout=30).json()
    assert served == engine_jwks
    yield Parties(server, keys, engine_jwks, workdir)
    server.kill()


async def _signed_conversation(parties: Parties) -> str:
    """alice asks bob (an Agent, replying signed) in signed-request; the conversation id."""
    alice, bob_client = parties.client("alice"), parties.client("bob")
    bob = Agent(bob_client)

    @bob.on("request", template="signed-request")
    async def book(msg: Incoming) -> None:
        await msg.agree({"price": 99.5, "note": "é\n", "n": 2**40, "nothing": None})
        await msg.inform({"done": True})

    import asyncio

    run = asyncio.create_task(bob.run(grace=5.0))
    try:
        answer = await alice.request("bob", {"action": "book-room", "ratio": 0.1},
                                     template="signed-request", timeout=30)
        assert answer.outcome == "success", answer
        return answer.conversation_id
    finally:
        bob.stop()
        await asyncio.wait_for(run, 20)
        await alice.aclose()
        await bob_client.aclose()


def _cli_verify(parties: Parties, record: dict[str, Any], name: str,
                jwks: bool = True) -> subprocess.CompletedProcess[str]:
    path = parties.workdir / f"{name}.json"
    path.write_text(json.dumps(record))
    keys = parties.workdir / "engine-jwks.json"
    keys.write_text(json.dumps(parties.engine_jwks))
    return subprocess.run(
        [str(colloquy_binary()), "audit", "verify", str(path),
         *(["--jwks", str(keys)] if jwks else [])],
        capture_output=True, text=True, timeout=60)


def _rechain(record: dict[str, Any]) -> dict[str, Any]:
    """The record with every `prev` and its summary recomputed: a forger's record."""
    head = GENESIS
    for event in record["events"]:
        event["prev"] = head
        head = link(head, body_digest(event))
    record["chain"]["length"], record["chain"]["head"] = len(record["events"]), head
    return record


async def test_a_signed_conversation_goes_through_and_its_record_verifies(parties):
    conversation_id = await _signed_conversation(parties)
    async with parties.client("alice") as alice:
        record = await alice.audit(conversation_id)
    # The keys the engine checked, kept through the model.
    assert record.signer_keys["bob"] == parties.keys["bob"].public_jwks()

    verified = verify(record, parties.engine_jwks)
    assert verified.engine_key == ENGINE_KID
    assert verified.signed_messages == 3, "request, agree, inform"
    assert verified.chain.length == record.chain.length
    unchecked = verify(record)
    assert unchecked.engine_signature_unchecked and unchecked.engine_key is None
    # With the senders' keys given: the same; with another key for bob: his messages fail.
    assert verify(record, parties.engine_jwks, agent_keys={
        name: key.public_jwks() for name, key in parties.keys.items()}).signed_messages == 3
    with pytest.raises(AuditBroken) as broken:
        verify(record, agent_keys={"bob": SigningKey.generate("ES256", "bob-1").public_jwks()})
    assert broken.value.check == "message signature"
    assert "altered" in broken.value.why and "`bob`'s message" in broken.value.why

    whole = record.model_dump(mode="json", exclude_none=True)
    cli = _cli_verify(parties, whole, "whole")
    assert cli.returncode == 0, cli.stdout + cli.stderr
    assert f"by key `{ENGINE_KID}`" in cli.stdout

    # The engine's own key checks nothing but the engine's: a stranger's fails.
    with pytest.raises(AuditBroken) as broken:
        verify(whole, SigningKey.generate("EdDSA", ENGINE_KID).public_jwks())
    assert (broken.value.seq, broken.value.check) == (None, "engine signature")


async def test_a_tampered_record_is_caught_by_the_sdk_and_the_cli_alike(parties):
    conversation_id = await _signed_conversation(parties)
    async with parties.client("bob") as bob:
        whole = (await bob.audit(conversation_id)).model_dump(mode="json", exclude_none=True)
    agree = next(i for i, event in enumerate(whole["events"])
                 if event.get("message", {}).get("performative") == "agree")
    agree_seq = whole["events"][agree]["seq"]

    def both_refuse(record: dict[str, Any], name: str, seq: Any, check: str) -> None:
        with pytest.raises(AuditBroken) as broken:
            verify(record, parties.engine_jwks)
        assert (broken.value.seq, broken.value.check) == (seq, check), str(broken.value)
        cli = _cli_verify(parties, record, name)
        assert cli.returncode == 1, cli.stdout + cli.stderr
        assert f"FAILED: {broken.value}" in cli.stdout, (cli.stdout, str(broken.value))

    # The content of a message changed: the next event's `prev` no longer holds.
    altered = copy.deepcopy(whole)
    altered["events"][agree]["message"]["content"]["price"] = 9.5
    both_refuse(altered, "altered", agree_seq + 1, "chain")

    # An event dropped (the later ones renumbered): the chain breaks at its place.
    dropped = copy.deepcopy(whole)
    del dropped["events"][agree]
    for event in dropped["events"][agree:]:
        event["seq"] -= 1
    both_refuse(dropped, "dropped", agree_seq, "chain")

    # Altered and re-chained by a forger: the chain holds, bob's signature does not.
    forged = _rechain(copy.deepcopy(altered))
    both_refuse(forged, "forged", agree_seq, "message signature")
    # Its signature dropped too: the chain holds, the engine's signature over the head does not.
    unsigned = copy.deepcopy(altered)
    del unsigned["events"][agree]["message"]["signature"]
    both_refuse(_rechain(unsigned), "unsigned", None, "engine signature")

    # The record's time changed: only the engine's signature catches it.
    later = copy.deepcopy(whole)
    later["issued_at"] += 1
    both_refuse(later, "later", None, "engine signature")

    # Untouched, both accept it; without the engine's key, the CLI reports it unchecked.
    assert verify(whole, parties.engine_jwks).signed_messages == 3
    cli = _cli_verify(parties, whole, "whole-unkeyed", jwks=False)
    assert cli.returncode == 0 and "NOT checked" in cli.stdout, cli.stdout


async def test_unsigned_altered_and_wrongly_signed_messages_are_refused(parties):
    alice = parties.client("alice")
    bob_unsigned = parties.client("bob", signed=False)
    try:
        view = await alice.start("signed-request", ["bob"],
                                 message=_request({"action": "ship"}))
        conversation_id = view.id
        # Unsigned, where signatures are required.
        with pytest.raises(Unprocessable) as refused:
            await bob_unsigned.send(conversation_id, "agree", {})
        assert refused.value.code == "bad_signature" and "missing" in refused.value.message

        path = f"/v1/conversations/{conversation_id}/messages"
        body = {"message_id": "forged-1", "performative": "agree", "content": {}}
        fields = signed_fields(conversation_id, "bob", message_id="forged-1",
                               performative="agree", content={})
        mallory = SigningKey.generate("EdDSA", "mallory-1")
        cases = [
            # Signed by a key that is not bob's.
            (mallory.sign_fields(fields), "unknown key"),
            # bob's key, over other fields (another conversation).
            (parties.keys["bob"].sign_fields({**fields, "conversation_id": "other"}), "altered"),
            # bob's key id on another key's signature.
            (SigningKey.generate("ES256", "bob-1").sign_fields(fields), "altered"),
        ]
        for signature, why in cases:
            with pytest.raises(Unprocessable) as refused:
                await bob_unsigned.call_api("POST", path, json={**body, "signature": signature})
            assert refused.value.code == "bad_signature", refused.value
            assert why in refused.value.message, refused.value.message
        # Signed as the SDK signs a given message id: accepted.
        await bob_unsigned.call_api("POST", path, json={
            **body, "signature": parties.keys["bob"].sign_fields(fields)})
        # bob's inbox is left empty for a later test's agent.
        await bob_unsigned.acknowledge_inbox()
    finally:
        await alice.aclose()
        await bob_unsigned.aclose()


def _request(content: Any) -> Any:
    from colloquy import SendMessage

    return SendMessage(performative="request", content=content)


def test_the_sync_client_signs_too_and_a_keygen_p256_key_signs(parties):
    with SyncClient(parties.server.url, "dave", "dave-token",
                    signing_key=parties.keys["dave"]) as dave, \
            SyncClient(parties.server.url, "bob", "bob-token").signing_with(
                parties.keys["bob"]) as bob:
        view = dave.start("signed-request", ["bob"], message=_request({"x": 1}),
                          conversation_id="sync-signed-1")
        assert view.id == "sync-signed-1"
        bob.send(view.id, "refuse", {"reason": "busy"}, to=["dave"], message_id="bob-refuse-1")
        record = dave.audit(view.id)
        bob.acknowledge_inbox()
    verified = verify(record, parties.engine_jwks)
    assert verified.signed_messages == 2
    ids = [e["message"]["id"] for e in record.events if "message" in e]
    assert "bob-refuse-1" in ids


async def test_the_engines_own_reply_verifies_under_its_key(parties):
    import asyncio

    from colloquy import SendMessage, now_ms

    alice, bob = parties.client("carol", signed=False), parties.client("bob", signed=False)
    try:
        view = await alice.start("fipa-contract-net", ["bob"], message=SendMessage(
            performative="cfp", content={"task": "deliver"}, reply_by=now_ms() + 200))
        for _ in range(250):
            if (await alice.conversation(view.id)).threads[0].state == "no_reply":
                break
            await asyncio.sleep(0.02)
        # Too late: the engine turns the proposal down itself, signed with its key.
        await bob.send(view.id, "propose", {"price": 99.5})
        record = await alice.audit(view.id)
        await bob.acknowledge_inbox()
    finally:
        await alice.aclose()
        await bob.aclose()
    replies = [e["message"] for e in record.events
               if e.get("message", {}).get("sender") == "colloquy:engine"]
    assert [m["performative"] for m in replies] == ["reject-proposal"]
    assert record.signer_keys["colloquy:engine"] == parties.engine_jwks
    verified = verify(record, parties.engine_jwks)
    assert (verified.signed_messages, verified.engine_key) == (1, ENGINE_KID)


# -- keys and signatures, offline --------------------------------------------------------

@pytest.mark.parametrize("alg", ["EdDSA", "ES256"])
def test_keys_round_trip_through_pem_and_jwk_and_sign_as_the_engine_checks(alg):
    key = SigningKey.generate(alg, "k-1")
    again = SigningKey.from_pem(key.private_pem(), "k-1")
    assert again.public_jwk() == key.public_jwk()
    assert key.public_jwk()["alg"] == alg
    keys = KeySet.from_jwks(key.public_jwks())
    fields = signed_fields("c-1", "bob", message_id="m-1", performative="propose",
                           content={"price": 99.5})
    jws = again.sign_fields(fields)
    protected, empty, _ = jws.split(".")
    assert empty == ""
    import base64

    header = json.loads(base64.urlsafe_b64decode(protected + "=" * (-len(protected) % 4)))
    assert header == {"alg": alg, "kid": "k-1", "typ": "colloquy-message+jws"}
    assert verify_message(keys, fields, jws) == "k-1"
    with pytest.raises(ValueError, match="^altered"):
        verify_message(keys, {**fields, "conversation_id": "c-2"}, jws)
    with pytest.raises(ValueError, match="^unknown key"):
        verify_message(KeySet.from_jwks({"keys": []}), fields, jws)
    with pytest.raises(ValueError, match="detached compact JWS"):
        verify_message(keys, fields, "a.b.c")


def test_private_jwks_load_and_bad_keys_say_why():
    key = SigningKey.generate("ES256", "k")
    numbers = key._key.private_numbers()  # noqa: SLF001: the test builds a private JWK
    from colloquy.signing import b64url

    jwk = {**key.public_jwk(), "d": b64url(numbers.private_value.to_bytes(32, "big"))}
    assert SigningKey.from_jwk(jwk).public_jwk() == key.public_jwk()
    assert SigningKey.from_jwk(json.dumps(jwk), kid="other").kid == "other"
    with pytest.raises(SigningError, match="public key"):
        SigningKey.from_jwk({**jwk, "x": SigningKey.generate("ES256", "k").public_jwk()["x"]})
    with pytest.raises(SigningError):
        SigningKey.from_jwk({"kty": "RSA", "kid": "r", "d": "AA"})
    with pytest.raises(SigningError, match="key id"):
        SigningKey.generate("EdDSA", "")
    with pytest.raises(SigningError):
        SigningKey.from_pem(b"nonsense", "k")
    with pytest.raises(ValueError, match=r"^keys\[0\]:"):
        KeySet.from_jwks({"keys": [{"kty": "RSA", "kid": "r"}]})
    one, other = SigningKey.generate("EdDSA", "k"), SigningKey.generate("EdDSA", "k")
    KeySet.from_jwks({"keys": [one.public_jwk(), one.public_jwk()]})
    with pytest.raises(ValueError, match="names two keys"):
        KeySet.from_jwks({"keys": [one.public_jwk(), other.public_jwk()]})
    # `none` and HMAC never pass.
    forged = b64url(json.dumps({"alg": "none", "kid": "k"}).encode()) + ".." + b64url(b"x")
    with pytest.raises(ValueError, match="`none`"):
        KeySet.from_jwks(one.public_jwks()).verify(forged, b"p")


def test_the_sdk_imports_without_cryptography_and_signing_says_what_it_needs():
    script = """
import sys
sys.modules["cryptography"] = None  # as if it were not installed
import colloquy
from colloquy.audit import verify_chain, canonical
from colloquy import Client, SigningKey, SigningUnavailable
Client("http://127.0.0.1:9", "a")
try:
    SigningKey.generate("EdDSA", "k")
except SigningUnavailable as error:
    print(error)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "pip install 'colloquy[signing]'" in done.stdout
