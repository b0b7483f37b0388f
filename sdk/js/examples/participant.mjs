// A participant agent: answers FIPA requests, queries and calls for proposals from its inbox
// stream, until Ctrl-C or SIGTERM. Mirrors sdk/examples/participant.rs and the Python SDK's
// examples/participant.py.
//
// Start a server (`colloquy serve`, open development mode), then:
//
//     node sdk/js/examples/participant.mjs http://127.0.0.1:7700 bob
//
// and run initiator.mjs in another terminal. The bearer token, when the server needs one,
// is read from COLLOQUY_TOKEN.

import { Agent, Client } from "@colloquy/sdk";

const [url = "http://127.0.0.1:7700", agentId = "bob"] = process.argv.slice(2);
const client = new Client(url, agentId, process.env.COLLOQUY_TOKEN);
await client.ready();

const agent = new Agent(client)
  .on("request", { template: "fipa-request" }, async (msg) => {
    console.log(`request in ${msg.conversationId}: ${JSON.stringify(msg.content)}`);
    await msg.agree();
    await msg.inform({ done: true });
  })
  .on("query-ref", (msg) => msg.inform({ value: 42 }))
  .on("cfp", { template: "fipa-contract-net" }, (msg) => msg.propose({ price: 100 }))
  .on("accept-proposal", { template: "fipa-contract-net" }, (msg) => msg.inform({ done: true }));

// SIGTERM and Ctrl-C stop it gracefully: the handler under way finishes and is
// acknowledged, so a restarted agent does not get it again.
for (const signal of ["SIGINT", "SIGTERM"]) process.on(signal, () => agent.stop());
console.log(`${agentId} serving its inbox at ${url}; Ctrl-C to stop`);
await agent.run();
