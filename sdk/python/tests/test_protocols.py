"""The three built-in protocols between Python agents, over a real server: the initiator's
helpers resolve on the final answer, participants answer through their handlers, and the
views (conversations, listings, commitments, templates) show what happened."""

from __future__ import annotations

import threading

from colloquy import (
    Agent,
    AnswerTimeout,
    CommitmentState,
    Incoming,
    Message,
    Outcome,
    SyncAgent,
    SyncClient,
    SyncIncoming,
)


async def test_a_request_resolves_on_the_inform_not_the_agree(agents, serving):
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)

    @bob.on("request", template="fipa-request")
    async def book(msg: Incoming) -> None:
        assert msg.content == {"action": "book-room"}
        await msg.agree()
        await msg.inform({"done": True})

    serving(bob)
    seen: list[str] = []
    answer = await alice.request(
        bob_client.agent_id, {"action": "book-room"},
        observe=lambda message: seen.append(message.performative),
    )
    assert answer.outcome == Outcome.SUCCESS
    assert answer.reply is not None and answer.reply.performative == "inform"
    assert answer.reply.content == {"done": True}
    assert [m.performative for m in answer.messages] == ["agree", "inform"]
    assert seen == ["agree", "inform"]

    view = await alice.conversation(answer.conversation_id)
    assert view.status == "completed" and view.outcome == Outcome.SUCCESS
    assert [c.state for c in view.commitments] == [CommitmentState.FULFILLED]


async def test_a_refusal_is_a_final_answer(agents, serving):
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)

    @bob.on("request")
    async def refuse(msg: Incoming) -> None:
        await msg.refuse({"reason": "fully booked"})

    serving(bob)
    answer = await alice.request(bob_client.agent_id, {"action": "book-room"})
    assert answer.outcome == Outcome.REFUSED
    assert answer.reply is not None and answer.reply.content == {"reason": "fully booked"}


async def test_a_query_gets_its_answer(agents, serving):
    carol, dave_client = agents(), agents()
    dave = Agent(dave_client)

    @dave.on("query-ref", template="fipa-query")
    async def answer(msg: Incoming) -> None:
        await msg.inform({"value": 42, "ref": msg.content["ref"]})

    serving(dave)
    answer_ = await carol.query(dave_client.agent_id, {"ref": "the answer"})
    assert answer_.outcome == Outcome.SUCCESS
    assert answer_.reply is not None and answer_.reply.content == {"value": 42,
                                                                    "ref": "the answer"}


async def test_a_contract_net_between_a_buyer_and_three_sellers(agents, serving):
    buyer = agents()
    prices = {"cheap": 80, "dear": 120}
    sellers = {}
    for name in ("cheap", "dear", "closed"):
        client = agents()
        seller = Agent(client)
        sellers[client.agent_id] = name

        @seller.on("cfp", template="fipa-contract-net")
        async def bid(msg: Incoming, name: str = name) -> None:
            if name in prices:
                await msg.propose({"price": prices[name]})
            else:
                await msg.refuse({"reason": "closed today"})

        @seller.on("accept-proposal", template="fipa-contract-net")
        async def deliver(msg: Incoming) -> None:
            await msg.inform({"delivered": True})

        serving(seller)

    collected = await buyer.call_for_proposals(
        list(sellers), {"item": "widget"}, reply_within=20.0
    )
    assert sorted(sellers[m.sender] for m in collected.proposals) == ["cheap", "dear"]
    assert [sellers[m.sender] for m in collected.declined] == ["closed"]
    assert collected.silent == []

    best = min(collected.proposals, key=lambda m: m.content["price"])
    assert sellers[best.sender] == "cheap"
    for proposal in collected.proposals:
        if proposal is best:
            await buyer.accept(collected.conversation_id, proposal, {"order": 1})
        else:
            await buyer.reject(collected.conversation_id, proposal, {"reason": "price"})
    done = await buyer.follow(collected.conversation_id, best.sender).answer()
    assert done.outcome == Outcome.SUCCESS
    assert done.reply is not None and done.reply.content == {"delivered": True}

    view = await buyer.conversation(collected.conversation_id)
    assert view.status == "completed" and view.outcome == Outcome.SUCCESS
    owed = await buyer.commitments(role="creditor")
    mine = [c for c in owed if c.conversation_id == collected.conversation_id]
    assert sorted(c.state for c in mine) == ["fulfilled", "released"]


async def test_an_initiator_cancels_a_request_under_way(agents, serving):
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)

    @bob.on("request")
    async def start_work(msg: Incoming) -> None:
        await msg.agree()  # and the result never comes: the work is cancelled first

    @bob.on("cancel")
    async def confirm(msg: Incoming) -> None:
        await msg.inform()

    serving(bob)
    agreed: list[Message] = []
    pending = await alice.begin_request(bob_client.agent_id, {"action": "long-job"},
                                        observe=agreed.append)
    # The cancel goes out once bob has agreed: wait for the agree through the view.
    while not agreed:
        try:
            await pending.answer(timeout=0.2)
        except AnswerTimeout:  # not yet
            pass
    await pending.cancel({"reason": "changed my mind"})
    answer = await pending.answer()
    assert answer.outcome == Outcome.CANCELLED
    assert [m.performative for m in answer.messages] == ["agree", "inform"]


async def test_listings_commitments_and_templates(agents, serving):
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)

    @bob.on("request")
    async def agree_only(msg: Incoming) -> None:
        await msg.agree()

    serving(bob)
    first = await alice.begin_request(bob_client.agent_id, {"action": "a"})
    second = await alice.begin_request(bob_client.agent_id, {"action": "b"})
    # Both agreed: each has an active commitment bob owes alice.
    active: list = []
    while len(active) < 2:
        active = await bob_client.commitments(role="debtor", state="active")
    by_conversation = {c.conversation_id: c for c in active}
    assert set(by_conversation) == {first.conversation_id, second.conversation_id}

    released = await alice.release_commitment(by_conversation[first.conversation_id].id)
    assert released.state == CommitmentState.RELEASED
    withdrawn = await bob_client.cancel_commitment(by_conversation[second.conversation_id].id)
    assert withdrawn.state == CommitmentState.CANCELLED

    page = await alice.conversations(template="fipa-request", limit=1)
    assert len(page.conversations) == 1 and page.next_cursor is not None
    listed = [c.id async for c in alice.all_conversations(template="fipa-request")]
    assert listed == sorted([first.conversation_id, second.conversation_id])
    bobs = [c.id async for c in bob_client.all_conversations(state="active")]
    assert bobs == listed

    templates = await alice.templates()
    assert [t.name for t in templates.templates] == [
        "fipa-contract-net", "fipa-query", "fipa-request"]
    for pending in (first, second):
        await pending.aclose()


def test_blocking_agents_talk_without_an_event_loop(server):
    from conftest import fresh_agent_id

    bob_id, alice_id = fresh_agent_id(), fresh_agent_id()
    with SyncClient(server.url, bob_id, f"{bob_id}-token") as bob_client, \
            SyncClient(server.url, alice_id, f"{alice_id}-token") as alice:
        bob = SyncAgent(bob_client)

        @bob.on("request", template="fipa-request")
        def book(msg: SyncIncoming) -> None:
            msg.agree()
            msg.inform({"room": msg.content["room"]})

        runner = threading.Thread(target=bob.run, name="sync-bob")
        runner.start()
        try:
            answer = alice.request(bob_id, {"action": "book-room", "room": "Lovelace"})
            assert answer.outcome == Outcome.SUCCESS
            assert answer.reply is not None and answer.reply.content == {"room": "Lovelace"}
            assert alice.conversation(answer.conversation_id).status == "completed"
        finally:
            bob.stop()
            runner.join(30)
        assert not runner.is_alive()
    assert [t.name for t in threading.enumerate() if t.name == "sync-bob"] == []


async def test_a_party_fetches_the_audit_record_of_its_conversation(agents, serving):
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)

    @bob.on("request", template="fipa-request")
    async def book(msg: Incoming) -> None:
        await msg.agree()
        await msg.inform({"done": True})

    serving(bob)
    answer = await alice.request(bob_client.agent_id, {"action": "book-room"})
    record = await bob_client.audit(answer.conversation_id)
    assert record.format == "colloquy.audit/1"
    assert record.reader == bob_client.agent_id
    assert record.template.name == "fipa-request"
    events = record.events
    assert [event["seq"] for event in events] == list(range(1, len(events) + 1))
    assert record.chain.length == len(events) and record.chain.chained_from == 1
    # Each event carries the hash the chain had before it; the first, the empty chain's.
    assert events[0]["prev"] == "0" * 64
    assert len({event["prev"] for event in events}) == len(events)
