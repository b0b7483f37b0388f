"""Every error class, each from a real request to a real server: the status's class, with
the code, message and pointer of the API's error body."""

from __future__ import annotations

import asyncio
import pytest

from colloquy import (
    ApiError,
    BadRequest,
    Client,
    Conflict,
    ConversationEnded,
    DecodeError,
    Forbidden,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    RequestTimeout,
    ServerError,
    ServiceUnavailable,
    TransportError,
    Unauthenticated,
    Unprocessable,
)
from colloquy.errors import error_from_answer
from colloquy.models import SendMessage

#: The server gives a request body this long to arrive in full (docs/http-api.md).
SERVER_BODY_DEADLINE = 30.0


async def test_400_a_bad_query_string(agents):
    with pytest.raises(BadRequest) as raised:
        await agents().conversations(limit=0)
    assert raised.value.status == 400 and raised.value.code == "invalid_query"


async def test_401_an_unknown_token(server):
    async with Client(server.url, "agent-0", "not-a-token") as stranger:
        with pytest.raises(Unauthenticated) as raised:
            await stranger.conversations()
    assert raised.value.status == 401 and raised.value.code == "unauthenticated"


async def test_403_another_agents_conversation_and_inbox(agents):
    alice, bob, mallory = agents(), agents(), agents()
    view = await alice.start("fipa-request", [bob.agent_id],
                             message=SendMessage(performative="request", content={}))
    with pytest.raises(Forbidden) as raised:
        await mallory.conversation(view.id)
    assert raised.value.code == "not_a_party"
    with pytest.raises(Forbidden) as raised:
        await mallory.call_api("POST", f"/v1/agents/{bob.agent_id}/inbox/ack",
                               json={"through": 0})
    assert raised.value.code == "forbidden"


async def test_404_unknown_conversation_and_template(agents):
    alice = agents()
    with pytest.raises(NotFound) as raised:
        await alice.conversation("no-such-conversation")
    assert raised.value.code == "unknown_conversation"
    with pytest.raises(NotFound) as raised:
        await alice.request(agents().agent_id, {}, template="no-such-template")
    assert raised.value.code == "unknown_template"


async def test_405_a_known_path_with_another_method(agents):
    with pytest.raises(MethodNotAllowed) as raised:
        await agents().call_api("DELETE", "/v1/conversations")
    assert raised.value.code == "method_not_allowed"


async def test_408_a_body_that_never_arrives_in_full(server):
    # No SDK call sends half a body, and an HTTP client writing the rest after the server
    # has answered gets a reset instead of the answer. So the request goes out by hand and
    # its real answer is read as the SDK reads every error answer.
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (f"POST /v1/conversations HTTP/1.1\r\nhost: {host}\r\n"
            "authorization: Bearer agent-0-token\r\ncontent-type: application/json\r\n"
            "content-length: 100\r\n\r\n")
    writer.write(head.encode() + b'{"template": "fipa-request", ')
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), SERVER_BODY_DEADLINE + 30)
    writer.close()
    status_line, _, rest = answer.partition(b"\r\n")
    body = rest.split(b"\r\n\r\n", 1)[1]
    error = error_from_answer(int(status_line.split()[1]), body)
    assert isinstance(error, RequestTimeout) and error.code == "body_timeout"


async def test_409_a_duplicate_conversation_id(agents):
    alice, bob = agents(), agents()
    chosen = f"booking-{alice.agent_id}"
    await alice.start("fipa-request", [bob.agent_id], conversation_id=chosen)
    with pytest.raises(Conflict) as raised:
        await alice.start("fipa-request", [bob.agent_id], conversation_id=chosen)
    assert raised.value.code == "duplicate_conversation"


async def test_410_a_message_to_a_conversation_that_ended(agents):
    alice, bob = agents(), agents()
    view = await alice.start("fipa-request", [bob.agent_id],
                             message=SendMessage(performative="request", content={}))
    await bob.send(view.id, "refuse", {"reason": "no"})
    with pytest.raises(ConversationEnded) as raised:
        await bob.send(view.id, "inform", {})
    assert raised.value.code == "conversation_ended"


async def test_413_a_body_over_a_mebibyte(agents):
    with pytest.raises(PayloadTooLarge) as raised:
        await agents().request(agents().agent_id, {"blob": "x" * (1 << 20)})
    assert raised.value.code == "body_too_large"


async def test_422_a_schema_violation_names_the_field(agents):
    alice, dave = agents(), agents()
    with pytest.raises(Unprocessable) as raised:
        await alice.query(dave.agent_id, {"not-ref": 1})
    assert raised.value.code == "schema_violation"
    assert raised.value.pointer is not None and raised.value.pointer.startswith("/message")
    with pytest.raises(Unprocessable) as raised:
        await alice.start("fipa-request", [dave.agent_id],
                          message=SendMessage(performative="shout", content={}))
    assert raised.value.code == "unknown_performative"


async def test_503_a_server_with_no_templates_yet(fresh_server):
    # An engine following a policy manager it cannot reach has loaded nothing yet.
    follower = fresh_server(policy_manager="http://127.0.0.1:9").start()
    async with Client(follower.url, "agent-0", "agent-0-token") as alice:
        with pytest.raises(ServiceUnavailable) as raised:
            await alice.ready()
    assert raised.value.code == "no_templates" and raised.value.transient


def test_other_5xx_answers_are_server_errors():
    # No request makes a sound server answer 500; the class is chosen from the status alone.
    error = error_from_answer(500, b'{"error": {"code": "internal", "message": "internal error"}}')
    assert isinstance(error, ServerError) and error.transient and error.code == "internal"
    error = error_from_answer(502, b"<html>bad gateway</html>")
    assert isinstance(error, ServerError) and error.code == "http_error"
    assert isinstance(error_from_answer(418, b"{}"), ApiError)


async def test_a_server_out_of_reach_is_a_transport_error(fresh_server):
    gone = fresh_server().start()
    gone.kill()
    async with Client(gone.url, "agent-0", "agent-0-token") as alice:
        with pytest.raises(TransportError):
            await alice.conversations()


async def test_an_answer_that_is_not_json_is_a_decode_error(agents):
    with pytest.raises(DecodeError):
        await agents().call_api("GET", "/metrics")
