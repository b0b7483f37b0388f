"""An agent served by the official A2A Python SDK (a2a-sdk 1.3, remote_agent.py) as a
participant of Colloquy conversations: `colloquy serve --agents` declares it as the A2A agent
`seller`, and `alice` runs a fipa-request and a fipa-contract-net with it through Colloquy's
HTTP API. Colloquy's bridge calls it with `message/send` and reads its tasks' artifacts as
the replies (docs/http-api.md, "Remote A2A agents as participants").

The bridge speaks A2A v0.3 (no `A2A-Version` header); the SDK's server takes that with its
v0.3 compatibility layer (`enable_v0_3_compat`). Each test also says which protocol the
calls came in with, whichever that is.
"""

from __future__ import annotations

import asyncio
import os
import time

import httpx
import pytest

# How long a conversation with the remote agent may take: its agent answers at once, so
# this is the bridge's delivery plus a little.
CONVERSATION_S = 20.0


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run tests/a2a-interop/run.sh", pytrace=False)
    return value


@pytest.fixture
def remote_url() -> str:
    return _required("COLLOQUY_A2A_INTEROP_REMOTE_URL").rstrip("/")


@pytest.fixture
async def alice():
    """Colloquy's HTTP API as `alice` of the agents file."""
    url = _required("COLLOQUY_A2A_INTEROP_BRIDGE_URL").rstrip("/")
    token = _required("COLLOQUY_A2A_INTEROP_BRIDGE_TOKEN")
    async with httpx.AsyncClient(base_url=url, timeout=30.0,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        yield client


async def start(alice: httpx.AsyncClient, template: str, performative: str,
                content: dict) -> str:
    response = await alice.post("/v1/conversations", json={
        "template": template, "participants": ["seller"],
        "message": {"performative": performative, "content": content}})
    assert response.status_code == 201, response.text
    return response.json()["id"]


async def wait_until(alice: httpx.AsyncClient, conversation: str, done) -> dict:
    """The conversation once `done(view)` holds, or as it stands after CONVERSATION_S."""
    deadline = time.monotonic() + CONVERSATION_S
    while True:
        response = await alice.get(f"/v1/conversations/{conversation}")
        assert response.status_code == 200, response.text
        view = response.json()
        if done(view) or time.monotonic() > deadline:
            return view
        await asyncio.sleep(0.1)


def moves(view: dict) -> list[tuple[str, str]]:
    return [(m["sender"], m["performative"]) for m in view["messages"]]


def from_seller(view: dict, performative: str) -> dict:
    found = [m for m in view["messages"]
             if m["sender"] == "seller" and m["performative"] == performative]
    assert len(found) == 1, moves(view)
    return found[0]


async def calls_made(remote_url: str) -> list[dict]:
    async with httpx.AsyncClient(timeout=10.0) as client:
        response = await client.get(f"{remote_url}/calls")
        response.raise_for_status()
        return response.json()


def report_protocol(calls: list[dict]) -> None:
    seen = sorted({(c["method"], c["a2a_version"] or "none") for c in calls})
    print(f"the bridge called the a2a-sdk agent with (method, A2A-Version): {seen}")


async def test_fipa_request_answered_by_an_a2a_sdk_agent(alice, remote_url) -> None:
    conversation = await start(alice, "fipa-request", "request", {"action": "ship"})

    view = await wait_until(alice, conversation, lambda v: v["status"] == "completed")

    assert (view["status"], view["outcome"]) == ("completed", "success"), moves(view)
    assert moves(view) == [("alice", "request"), ("seller", "inform")]
    inform = from_seller(view, "inform")
    assert inform["content"] == {"done": "ship"}
    assert inform["in_reply_to"] == view["messages"][0]["id"]
    calls = await calls_made(remote_url)
    assert calls, "the a2a-sdk agent was never called"
    report_protocol(calls)


async def test_fipa_contract_net_with_an_a2a_sdk_agent(alice, remote_url) -> None:
    conversation = await start(alice, "fipa-contract-net", "cfp", {"item": "apples"})

    view = await wait_until(alice, conversation,
                            lambda v: any(m["performative"] == "propose"
                                          for m in v["messages"]))
    proposal = from_seller(view, "propose")
    # A protobuf Value holds every number as a double: 42 comes back as 42.0.
    assert proposal["content"] == {"price": 42, "item": "apples"}

    response = await alice.post(f"/v1/conversations/{conversation}/messages", json={
        "performative": "accept-proposal", "to": ["seller"],
        "in_reply_to": proposal["id"], "content": {"item": "apples"}})
    assert response.status_code == 202, response.text
    view = await wait_until(alice, conversation, lambda v: v["status"] == "completed")

    assert (view["status"], view["outcome"]) == ("completed", "success"), moves(view)
    assert moves(view) == [("alice", "cfp"), ("seller", "propose"),
                           ("alice", "accept-proposal"), ("seller", "inform")]
    assert from_seller(view, "inform")["content"] == {"delivered": "apples"}
    report_protocol(await calls_made(remote_url))
