// An initiator agent: one FIPA request and one query to a participant, printing what comes
// back (the intermediate `agree` too). Mirrors sdk/examples/initiator.rs and the Python
// SDK's examples/initiator.py.
//
// With a server and participant.mjs running:
//
//     node sdk/js/examples/initiator.mjs http://127.0.0.1:7700 alice bob
//
// The bearer token, when the server needs one, is read from COLLOQUY_TOKEN.

import { Client } from "@colloquy/sdk";

const [url = "http://127.0.0.1:7700", agentId = "alice", participant = "bob"] = process.argv.slice(2);
const client = new Client(url, agentId, process.env.COLLOQUY_TOKEN);
await client.ready();

let answer = await client.request(participant, { action: "book-room", room: "Lovelace" }, {
  observe: (message) => console.log(`  … ${message.performative} from ${message.sender}`),
});
console.log(`request ${answer.conversationId}: ${answer.outcome}, final ${JSON.stringify(answer.reply?.content)}`);

answer = await client.query(participant, { ref: "the answer" });
console.log(`query ${answer.conversationId}: ${answer.outcome}, ${JSON.stringify(answer.reply?.content)}`);
