"""A participant agent: answers FIPA requests, queries and calls for proposals from its
inbox stream, until Ctrl-C.

Start a server (``colloquy serve``, open development mode), then::

    python sdk/python/examples/participant.py http://127.0.0.1:7700 bob

and run ``initiator.py`` in another terminal. The bearer token, when the server needs one,
is read from COLLOQUY_TOKEN.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

from colloquy import Agent, Client, Incoming


async def main(url: str, agent_id: str) -> None:
    async with Client(url, agent_id, os.environ.get("COLLOQUY_TOKEN")) as client:
        await client.ready()
        agent = Agent(client)

        @agent.on("request", template="fipa-request")
        async def book(msg: Incoming) -> None:
            print(f"request in {msg.conversation_id}: {msg.content}", flush=True)
            await msg.agree()
            await msg.inform({"done": True})

        @agent.on("query-ref")
        async def answer(msg: Incoming) -> None:
            await msg.inform({"value": 42})

        @agent.on("cfp", template="fipa-contract-net")
        async def bid(msg: Incoming) -> None:
            await msg.propose({"price": 100})

        @agent.on("accept-proposal", template="fipa-contract-net")
        async def deliver(msg: Incoming) -> None:
            await msg.inform({"done": True})

        # SIGTERM and Ctrl-C stop it gracefully: the handler under way finishes and is
        # acknowledged, so a restarted agent does not get it again.
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, agent.stop)
        print(f"{agent_id} serving its inbox at {url}; Ctrl-C to stop", flush=True)
        await agent.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:7700")
    parser.add_argument("agent", nargs="?", default="bob")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.agent))
