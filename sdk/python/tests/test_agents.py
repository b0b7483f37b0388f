"""``Client.agents()`` and the ``outcome`` filter of the conversation listing, from real
requests."""

from __future__ import annotations

from colloquy import AgentKind, Agent, Incoming, Outcome


async def test_an_agent_sees_itself_with_its_inbox(agents):
    alice = agents()
    listed = await alice.agents()
    assert [agent.id for agent in listed.agents] == [alice.agent_id]
    me = listed.agents[0]
    assert me.kind == AgentKind.TOKEN
    assert me.inbox and not me.webhook
    assert me.inbox_head >= 0 and me.unacknowledged >= 0 and me.inbox_streams >= 0


async def test_conversations_are_listed_by_outcome(agents, serving):
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)

    @bob.on("request", template="fipa-request")
    async def decline(msg: Incoming) -> None:
        await msg.refuse({"reason": "busy"})

    serving(bob)
    answer = await alice.request(bob_client.agent_id, {"action": "book-room"}, timeout=20)
    assert answer.outcome == Outcome.REFUSED
    refused = await alice.conversations(outcome="refused")
    assert [c.id for c in refused.conversations] == [answer.conversation_id]
    succeeded = await alice.conversations(outcome="success")
    assert succeeded.conversations == []
