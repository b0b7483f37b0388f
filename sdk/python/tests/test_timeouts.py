"""Timeouts: the helper's own (the conversation goes on), a reply-by passing in silence (the
thread ends ``timeout``), a cfp's silent bidder, and an agent stopping with a handler under
way. Every wait is bounded; no assertion is about how long anything took."""

from __future__ import annotations

import asyncio

import pytest

from colloquy import Agent, AnswerTimeout, Incoming, Outcome


async def test_a_helper_gives_up_and_the_conversation_goes_on(agents, serving):
    alice, bob_client = agents(), agents()
    with pytest.raises(AnswerTimeout) as raised:
        await alice.request(bob_client.agent_id, {"action": "x"}, timeout=0.3)
    conversation_id = raised.value.conversation_id
    assert (await alice.conversation(conversation_id)).status == "active"

    # The participant answers later; following the conversation again gets the answer.
    bob = Agent(bob_client)

    @bob.on("request")
    async def late(msg: Incoming) -> None:
        await msg.inform({"late": True})

    serving(bob)
    answer = await alice.follow(conversation_id, bob_client.agent_id).answer()
    assert answer.outcome == Outcome.SUCCESS and answer.reply is not None


async def test_a_pending_answer_resumes_after_its_timeout(agents, serving):
    alice, bob_client = agents(), agents()
    pending = await alice.begin_request(bob_client.agent_id, {"action": "x"})
    with pytest.raises(AnswerTimeout):
        await pending.answer(timeout=0.2)
    bob = Agent(bob_client)

    @bob.on("request")
    async def answer(msg: Incoming) -> None:
        await msg.agree()
        await msg.inform()

    serving(bob)
    answer_ = await pending.answer()
    assert answer_.outcome == Outcome.SUCCESS
    assert [m.performative for m in answer_.messages] == ["agree", "inform"]


async def test_a_reply_by_passing_in_silence_ends_the_thread(agents):
    alice, silent = agents(), agents()
    answer = await alice.request(silent.agent_id, {"action": "x"}, reply_within=0.2)
    assert answer.outcome == Outcome.TIMEOUT and answer.reply is None


async def test_a_silent_bidder_is_reported_at_the_reply_by(agents, serving):
    buyer, seller_client, silent = agents(), agents(), agents()
    seller = Agent(seller_client)

    @seller.on("cfp")
    async def bid(msg: Incoming) -> None:
        await msg.propose({"price": 10})

    serving(seller)
    collected = await buyer.call_for_proposals(
        # Room for the seller's answer on a loaded machine: the silent one costs the wait.
        [seller_client.agent_id, silent.agent_id], {"item": "x"}, reply_within=3.0
    )
    assert [m.sender for m in collected.proposals] == [seller_client.agent_id]
    assert collected.silent == [silent.agent_id]


async def test_stop_lets_the_handler_under_way_finish_and_acknowledges_it(agents):
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)
    started, release = asyncio.Event(), asyncio.Event()

    @bob.on("request")
    async def slow(msg: Incoming) -> None:
        started.set()
        await release.wait()
        await msg.inform({"finished": True})

    run = asyncio.create_task(bob.run())
    pending = await alice.begin_request(bob_client.agent_id, {"action": "x"})
    await asyncio.wait_for(started.wait(), 20)
    bob.stop()
    release.set()
    await asyncio.wait_for(run, 20)
    answer = await pending.answer()
    assert answer.outcome == Outcome.SUCCESS
    # What was handled was acknowledged: the inbox has nothing left to offer.
    page = await bob_client.poll_inbox(0)
    assert page.items == []


async def test_cancelling_run_cancels_the_handler_and_the_message_comes_again(agents):
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)
    started = asyncio.Event()

    @bob.on("request")
    async def stuck(msg: Incoming) -> None:
        started.set()
        await asyncio.Event().wait()  # never returns on its own

    run = asyncio.create_task(bob.run())
    await alice.begin_request(bob_client.agent_id, {"action": "x"})
    await asyncio.wait_for(started.wait(), 20)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(run, 20)
    # Not handled, so not acknowledged: the next run gets it again (at-least-once).
    page = await bob_client.poll_inbox(0)
    assert [item.message.performative for item in page.items] == ["request"]
