"""The inbox stream survives the server: killed (every connection dropped mid-stream) and
restarted on its SQLite file, it is found again, and the agent resumes after the last item
it took (``Last-Event-ID``), so nothing is missed and nothing handled comes twice."""

from __future__ import annotations

from colloquy import Agent, Client, InboxAcked, Incoming, Outcome


async def test_an_agent_resumes_its_inbox_after_the_server_restarts(fresh_server, serving):
    server = fresh_server(store="sqlite").start()
    alice = Client(server.url, "agent-0", "agent-0-token")
    bob_client = Client(server.url, "agent-1", "agent-1-token")
    handled: list[str] = []

    # Acknowledgements are held back, so only the resume position keeps a handled message
    # from coming again after the reconnect.
    async def no_acknowledgement(through: int) -> InboxAcked:
        return InboxAcked(through=0, head=through)

    bob_client.acknowledge = no_acknowledgement  # type: ignore[method-assign]
    bob = Agent(bob_client)

    @bob.on("request")
    async def answer(msg: Incoming) -> None:
        handled.append(msg.content["n"])
        await msg.inform({"n": msg.content["n"]})

    serving(bob)
    try:
        first = await alice.request("agent-1", {"n": "before"})
        assert first.outcome == Outcome.SUCCESS

        server.kill()
        server.start(listen=f"127.0.0.1:{server.port}")

        second = await alice.request("agent-1", {"n": "after"})
        assert second.outcome == Outcome.SUCCESS
        assert handled == ["before", "after"]
        # Both conversations survived the restart, as the store kept them.
        assert (await alice.conversation(first.conversation_id)).status == "completed"
    finally:
        bob.stop()
        await alice.aclose()
