"""Python agents and Rust SDK agents in the same conversations: the Rust SDK's example
participant answers a Python initiator (and bids beside Python sellers), and the Rust SDK's
example initiator asks a Python participant.

The examples are built by ``cargo test --workspace`` (or ``cargo build -p colloquy-sdk
--examples``); without them these tests are skipped, except under ``CI=true``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from colloquy import Agent, Incoming, Outcome

from conftest import _missing, fresh_agent_id, target_dir

#: Longest a Rust example may take to do its part.
EXAMPLE_WAIT = 60.0


def example(name: str) -> Path:
    binary = target_dir() / "debug" / "examples" / name
    if not binary.is_file():
        _missing(f"no Rust SDK example at {binary}: cargo build -p colloquy-sdk --examples")
    return binary


@pytest.fixture
def rust_participant(server) -> Iterator[str]:
    """The Rust SDK's `participant` example serving a fresh agent; its id."""
    agent_id = fresh_agent_id()
    process = subprocess.Popen(
        [str(example("participant")), server.url, agent_id],
        env={**os.environ, "COLLOQUY_TOKEN": f"{agent_id}-token"},
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    yield agent_id
    process.kill()
    process.wait(EXAMPLE_WAIT)


async def test_a_rust_participant_answers_a_python_initiator(agents, rust_participant):
    alice = agents()
    answer = await alice.request(rust_participant, {"action": "book-room"})
    assert answer.outcome == Outcome.SUCCESS
    assert [m.performative for m in answer.messages] == ["agree", "inform"]
    answer = await alice.query(rust_participant, {"ref": "the answer"})
    assert answer.reply is not None and answer.reply.content == {"value": 42}


async def test_a_rust_seller_bids_beside_python_sellers(agents, serving, rust_participant):
    buyer = agents()
    python_sellers = []
    for price in (150, 90):
        client = agents()
        seller = Agent(client)

        @seller.on("cfp")
        async def bid(msg: Incoming, price: int = price) -> None:
            await msg.propose({"price": price})

        serving(seller)
        python_sellers.append(client.agent_id)
    collected = await buyer.call_for_proposals(
        [*python_sellers, rust_participant], {"item": "widget"}, reply_within=20.0
    )
    prices = {m.sender: m.content["price"] for m in collected.proposals}
    assert prices == {python_sellers[0]: 150, python_sellers[1]: 90, rust_participant: 100}
    # The Rust seller wins though it is not the cheapest (it delivers faster, say).
    for proposal in collected.proposals:
        if proposal.sender == rust_participant:
            await buyer.accept(collected.conversation_id, proposal, {"order": 7})
        else:
            await buyer.reject(collected.conversation_id, proposal)
    done = await buyer.follow(collected.conversation_id, rust_participant).answer()
    assert done.outcome == Outcome.SUCCESS and done.reply is not None


async def test_a_rust_initiator_asks_a_python_participant(server, serving, agents):
    bob_client = agents()
    bob = Agent(bob_client)

    @bob.on("request", template="fipa-request")
    async def book(msg: Incoming) -> None:
        await msg.agree()
        await msg.inform({"room": msg.content["room"]})

    @bob.on("query-ref")
    async def answer(msg: Incoming) -> None:
        await msg.inform({"value": "from python"})

    serving(bob)
    alice_id = fresh_agent_id()
    initiator = await asyncio.create_subprocess_exec(
        str(example("initiator")), server.url, alice_id, bob_client.agent_id,
        env={**os.environ, "COLLOQUY_TOKEN": f"{alice_id}-token"},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(initiator.communicate(), EXAMPLE_WAIT)
    assert initiator.returncode == 0, stderr.decode()
    printed = stdout.decode()
    assert "… agree from" in printed and "… inform from" in printed
    assert "Some(Success)" in printed and '"room":"Lovelace"' in printed
    assert '"value":"from python"' in printed
