// The inbox stream survives the server: killed (every connection dropped mid-stream) and
// restarted on its SQLite file, it is found again, and the agent resumes after the last item
// it took (`Last-Event-ID`), so nothing is missed and nothing handled comes twice. As the
// Python SDK's tests/test_resume.py.

import assert from "node:assert/strict";
import { after, describe, test } from "node:test";

import { Agent, Outcome } from "@colloquy/sdk";
import { BOUNDED, NO_SERVER, Server, Serving, clientOf } from "./harness.mjs";

describe("inbox resume", { skip: NO_SERVER }, () => {
  const serving = new Serving();
  let server;
  after(async () => {
    await serving.stopAll();
    await server?.dispose();
  });

  test("an agent resumes its inbox after the server restarts", BOUNDED, async () => {
    server = await new Server({ store: "sqlite" }).start();
    const alice = clientOf(server, "agent-0");
    const bobClient = clientOf(server, "agent-1");
    // Acknowledgements are held back, so only the resume position keeps a handled message
    // from coming again after the reconnect.
    bobClient.acknowledge = async (through) => ({ through: 0, head: through });
    const handled = [];
    const bob = new Agent(bobClient).on("request", async (msg) => {
      handled.push(msg.content.n);
      await msg.inform({ n: msg.content.n });
    });
    serving.start(bob);

    const first = await alice.request("agent-1", { n: "before" });
    assert.equal(first.outcome, Outcome.SUCCESS);

    await server.kill();
    await server.start(`127.0.0.1:${server.port}`);

    const second = await alice.request("agent-1", { n: "after" });
    assert.equal(second.outcome, Outcome.SUCCESS);
    assert.deepEqual(handled, ["before", "after"]);
    // Both conversations survived the restart, as the store kept them.
    assert.equal((await alice.conversation(first.conversationId)).status, "completed");
  });
});
