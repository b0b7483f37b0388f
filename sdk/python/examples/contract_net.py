"""A Contract-Net buyer with three sellers, in one process: the sellers bid (one declines),
the buyer takes the cheapest offer, turns the other down and waits for the delivery.

Start a server (``colloquy serve``, open development mode), then::

    python sdk/python/examples/contract_net.py http://127.0.0.1:7700 buyer acme globex initech

Tokens, when the server needs them, are read from COLLOQUY_TOKENS as
``agent=token,agent=token``.
"""

from __future__ import annotations

import argparse
import asyncio
import os

from colloquy import Agent, Client, Incoming

#: What each seller asks, in seller order; None declines.
PRICES = (120, 95, None)


def tokens() -> dict[str, str]:
    pairs = (pair.split("=", 1) for pair in os.environ.get("COLLOQUY_TOKENS", "").split(","))
    return {pair[0]: pair[1] for pair in pairs if len(pair) == 2}


def seller(client: Client, price: int | None) -> Agent:
    agent = Agent(client)

    @agent.on("cfp", template="fipa-contract-net")
    async def bid(msg: Incoming) -> None:
        if price is None:
            await msg.refuse({"reason": "out of stock"})
        else:
            await msg.propose({"price": price})

    @agent.on("accept-proposal", template="fipa-contract-net")
    async def deliver(msg: Incoming) -> None:
        await msg.inform({"delivered": msg.content.get("item")})

    return agent


async def main(url: str, buyer_id: str, seller_ids: list[str]) -> None:
    known = tokens()
    sellers = [Client(url, name, known.get(name)) for name in seller_ids]
    agents = [seller(client, price) for client, price in zip(sellers, PRICES)]
    runs = [asyncio.create_task(agent.run()) for agent in agents]
    try:
        async with Client(url, buyer_id, known.get(buyer_id)) as buyer:
            await buyer.ready()
            collected = await buyer.call_for_proposals(
                seller_ids, {"item": "widget", "quantity": 10}, reply_within=5.0
            )
            for message in collected.proposals:
                print(f"{message.sender} proposes {message.content}")
            for message in collected.declined:
                print(f"{message.sender} declines: {message.content}")
            for name in collected.silent:
                print(f"{name} said nothing in time")
            if not collected.proposals:
                return
            best = min(collected.proposals, key=lambda m: m.content["price"])
            for proposal in collected.proposals:
                if proposal is best:
                    await buyer.accept(collected.conversation_id, proposal, {"item": "widget"})
                else:
                    await buyer.reject(collected.conversation_id, proposal,
                                       {"reason": "a cheaper offer"})
            done = await buyer.follow(collected.conversation_id, best.sender).answer()
            content = done.reply.content if done.reply else None
            print(f"{best.sender} won at {best.content['price']}: {done.outcome}, {content}")
    finally:
        for agent in agents:
            agent.stop()
        await asyncio.gather(*runs)
        for client in sellers:
            await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:7700")
    parser.add_argument("buyer", nargs="?", default="buyer")
    parser.add_argument("sellers", nargs="*", default=["acme", "globex", "initech"])
    args = parser.parse_args()
    if len(args.sellers) != len(PRICES):
        parser.error(f"give {len(PRICES)} sellers")
    asyncio.run(main(args.url, args.buyer, args.sellers))
