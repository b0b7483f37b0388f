// JavaScript agents and Python SDK agents in the same conversations: the Python SDK's
// example participant bids beside JavaScript sellers in a contract net a JavaScript buyer
// runs, and the Python SDK's example initiator asks a JavaScript participant.
//
// The Python is $COLLOQUY_PYSDK_PYTHON, a virtualenv with the Python SDK installed
// (run-tests.sh points it at the one sdk/python/run-tests.sh makes). Without it these tests
// are skipped, except under CI=true.

import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { join } from "node:path";
import { after, afterEach, before, describe, test } from "node:test";
import { promisify } from "node:util";

import { Outcome } from "@colloquy/sdk";
import { BOUNDED, NO_SERVER, REPO, Server, Serving, agentOf, clientOf, freshAgentId, missing, pythonSdk } from "./harness.mjs";

const PYTHON_EXAMPLES = join(REPO, "sdk/python/examples");
/**
 * The Python SDK of this tree, whatever tree the virtualenv's editable install points at
 * (the venv is shared between clones): the venv brings its dependencies.
 */
const PYTHON_ENV = { ...process.env, PYTHONPATH: join(REPO, "sdk/python/src") };
/** Longest a Python example may take to do its part. */
const EXAMPLE_WAIT_MS = 60_000;
const NO_PYTHON =
  NO_SERVER ||
  (pythonSdk()
    ? false
    : missing("no Python SDK: set COLLOQUY_PYSDK_PYTHON to a python with it (bash sdk/python/run-tests.sh makes one)"));

describe("JavaScript and Python agents together", { skip: NO_PYTHON }, () => {
  let server;
  const serving = new Serving();
  const processes = [];
  before(async () => {
    server = await new Server().start();
  });
  afterEach(async () => {
    await serving.stopAll();
    for (const child of processes.splice(0)) {
      if (child.exitCode === null && child.signalCode === null) {
        const gone = new Promise((resolve) => child.once("exit", resolve));
        child.kill("SIGKILL");
        await gone;
      }
    }
  });
  after(() => server?.dispose());

  test("a Python seller bids beside JavaScript sellers, and wins", BOUNDED, async () => {
    const pythonSeller = freshAgentId();
    processes.push(
      spawn(pythonSdk(), [join(PYTHON_EXAMPLES, "participant.py"), server.url, pythonSeller], {
        env: { ...PYTHON_ENV, COLLOQUY_TOKEN: `${pythonSeller}-token` },
        stdio: "ignore",
      }),
    );
    const buyer = clientOf(server);
    const jsSellers = [];
    for (const price of [150, 90]) {
      const seller = agentOf(server, (agent) => agent.on("cfp", (msg) => msg.propose({ price })));
      serving.start(seller);
      jsSellers.push(seller.client.agentId);
    }
    const collected = await buyer.callForProposals([...jsSellers, pythonSeller], { item: "widget" }, { replyWithinMs: 20_000 });
    const prices = Object.fromEntries(collected.proposals.map((m) => [m.sender, m.content.price]));
    assert.deepEqual(prices, { [jsSellers[0]]: 150, [jsSellers[1]]: 90, [pythonSeller]: 100 });
    // The Python seller wins though it is not the cheapest (it delivers faster, say).
    for (const proposal of collected.proposals) {
      if (proposal.sender === pythonSeller) await buyer.accept(collected.conversationId, proposal, { order: 7 });
      else await buyer.reject(collected.conversationId, proposal);
    }
    const done = await buyer.follow(collected.conversationId, pythonSeller).answer();
    assert.equal(done.outcome, Outcome.SUCCESS);
    assert.deepEqual(done.reply.content, { done: true });
  });

  test("a Python initiator asks a JavaScript participant", BOUNDED, async () => {
    const bob = agentOf(server, (agent) => {
      agent.on("request", { template: "fipa-request" }, async (msg) => {
        await msg.agree();
        await msg.inform({ room: msg.content.room });
      });
      agent.on("query-ref", (msg) => msg.inform({ value: "from javascript" }));
    });
    serving.start(bob);
    const alice = freshAgentId();
    const { stdout } = await promisify(execFile)(
      pythonSdk(),
      [join(PYTHON_EXAMPLES, "initiator.py"), server.url, alice, bob.client.agentId],
      { env: { ...PYTHON_ENV, COLLOQUY_TOKEN: `${alice}-token` }, timeout: EXAMPLE_WAIT_MS },
    );
    assert.match(stdout, /… agree from/);
    assert.match(stdout, /… inform from/);
    assert.match(stdout, /success, final \{'room': 'Lovelace'\}/);
    assert.match(stdout, /\{'value': 'from javascript'\}/);
  });
});
