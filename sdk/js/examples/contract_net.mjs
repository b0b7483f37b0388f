// A Contract-Net buyer with three sellers, in one process: the sellers bid (one declines),
// the buyer takes the cheapest offer, turns the other down and waits for the delivery.
//
// Start a server (`colloquy serve`, open development mode), then:
//
//     node sdk/js/examples/contract_net.mjs http://127.0.0.1:7700 buyer acme globex initech
//
// Tokens, when the server needs them, are read from COLLOQUY_TOKENS as
// `agent=token,agent=token`.

import { Agent, Client } from "@colloquy/sdk";

/** What each seller asks, in seller order; null declines. */
const PRICES = [120, 95, null];

const [url = "http://127.0.0.1:7700", buyerId = "buyer", ...given] = process.argv.slice(2);
const sellerIds = given.length > 0 ? given : ["acme", "globex", "initech"];
if (sellerIds.length !== PRICES.length) {
  console.error(`contract_net.mjs: give ${PRICES.length} sellers, not ${sellerIds.length}`);
  process.exit(2);
}
const tokens = new Map(
  (process.env.COLLOQUY_TOKENS ?? "")
    .split(",")
    .map((pair) => pair.split("="))
    .filter((pair) => pair.length === 2),
);

function seller(id, price) {
  return new Agent(new Client(url, id, tokens.get(id)))
    .on("cfp", { template: "fipa-contract-net" }, (msg) =>
      price === null ? msg.refuse({ reason: "out of stock" }) : msg.propose({ price }),
    )
    .on("accept-proposal", { template: "fipa-contract-net" }, (msg) => msg.inform({ delivered: msg.content.item }));
}

const sellers = sellerIds.map((id, n) => seller(id, PRICES[n]));
const runs = sellers.map((agent) => agent.run());
try {
  const buyer = new Client(url, buyerId, tokens.get(buyerId));
  await buyer.ready();
  const collected = await buyer.callForProposals(sellerIds, { item: "widget", quantity: 10 }, { replyWithinMs: 5_000 });
  for (const message of collected.proposals) console.log(`${message.sender} proposes ${JSON.stringify(message.content)}`);
  for (const message of collected.declined) console.log(`${message.sender} declines: ${JSON.stringify(message.content)}`);
  for (const name of collected.silent) console.log(`${name} said nothing in time`);
  if (collected.proposals.length > 0) {
    const best = collected.proposals.reduce((a, b) => (b.content.price < a.content.price ? b : a));
    for (const proposal of collected.proposals) {
      if (proposal === best) await buyer.accept(collected.conversationId, proposal, { item: "widget" });
      else await buyer.reject(collected.conversationId, proposal, { reason: "a cheaper offer" });
    }
    const done = await buyer.follow(collected.conversationId, best.sender).answer();
    console.log(`${best.sender} won at ${best.content.price}: ${done.outcome}, ${JSON.stringify(done.reply?.content)}`);
  }
} finally {
  for (const agent of sellers) agent.stop();
  await Promise.all(runs);
}
