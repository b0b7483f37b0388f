"""The SDK's HTTP transport (asyncio streams and h11): one keep-alive connection serves a
client's requests and event streams one after another, and a read that waits past its
timeout is an httpx timeout, reported as a TransportError."""

from __future__ import annotations

import pytest

from colloquy import Agent, Incoming, Outcome, TransportError
from colloquy.transport import AsyncioTransport


async def test_requests_and_event_streams_reuse_one_connection(agents, serving, monkeypatch):
    opened: list[tuple[AsyncioTransport, str]] = []
    open_connection = AsyncioTransport._open

    async def counted(self, key, request, timeout):  # type: ignore[no-untyped-def]
        opened.append((self, f"{request.method} {request.url.path}"))
        return await open_connection(self, key, request, timeout)

    monkeypatch.setattr(AsyncioTransport, "_open", counted)
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)

    @bob.on("request")
    async def answer(msg: Incoming) -> None:
        await msg.inform()

    serving(bob)
    for _ in range(3):
        answer_ = await alice.request(bob_client.agent_id, {"action": "x"})
        assert answer_.outcome == Outcome.SUCCESS
    # Alice's one connection carried three starts and three event streams.
    alices = alice.http._transport  # the transport her client was given
    assert [path for who, path in opened if who is alices] == ["POST /v1/conversations"]


async def test_a_read_past_its_timeout_is_a_transport_error(agents):
    alice = agents()
    with pytest.raises(TransportError):
        await alice.call_api("GET", f"/v1/agents/{alice.agent_id}/inbox/poll",
                             params={"wait_ms": 5000}, timeout=0.2)
    # The timed-out connection was dropped, not reused: the next call is answered.
    assert (await alice.poll_inbox(0)).items == []
