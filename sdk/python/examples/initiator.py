"""An initiator agent: one FIPA request and one query to a participant, printing what
comes back (the intermediate ``agree`` too).

With a server and ``participant.py`` running::

    python sdk/python/examples/initiator.py http://127.0.0.1:7700 alice bob

The bearer token, when the server needs one, is read from COLLOQUY_TOKEN.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from colloquy import Client, Message


async def main(url: str, agent_id: str, participant: str) -> None:
    async with Client(url, agent_id, os.environ.get("COLLOQUY_TOKEN")) as client:
        await client.ready()

        def watch(message: Message) -> None:
            print(f"  … {message.performative} from {message.sender}")

        answer = await client.request(
            participant, {"action": "book-room", "room": "Lovelace"}, observe=watch
        )
        content = answer.reply.content if answer.reply else None
        print(f"request {answer.conversation_id}: {answer.outcome}, final {content}")

        answer = await client.query(participant, {"ref": "the answer"})
        content = answer.reply.content if answer.reply else None
        print(f"query {answer.conversation_id}: {answer.outcome}, {content}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:7700")
    parser.add_argument("agent", nargs="?", default="alice")
    parser.add_argument("participant", nargs="?", default="bob")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.agent, args.participant))
