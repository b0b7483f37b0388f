// Timeouts and the agent's life: the helper's own timeout (the conversation goes on), a
// reply-by passing in silence (the thread ends `timeout`), a cfp's silent bidder, a graceful
// stop with a handler under way, an aborted run, handlers side by side yet in order within a
// conversation, and a handler that throws. Every wait is bounded; no assertion is about how
// long anything took.

import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";

import { Agent, AnswerTimeout, Outcome } from "@colloquy/sdk";
import { BOUNDED, NO_SERVER, Server, Serving, agentOf, clientOf } from "./harness.mjs";

/** A promise and the function that resolves it. */
function signalled() {
  let resolve;
  const promise = new Promise((done) => (resolve = done));
  return { promise, resolve };
}

describe("timeouts and the agent's life", { skip: NO_SERVER }, () => {
  let server;
  const serving = new Serving();
  before(async () => {
    server = await new Server().start();
  });
  afterEach(() => serving.stopAll());
  after(() => server?.dispose());

  test("a helper gives up and following the conversation again gets the answer", BOUNDED, async () => {
    const [alice, bobClient] = [clientOf(server), clientOf(server)];
    const timedOut = await alice.request(bobClient.agentId, { action: "x" }, { timeoutMs: 300 }).catch((e) => e);
    assert.ok(timedOut instanceof AnswerTimeout, String(timedOut));
    assert.equal((await alice.conversation(timedOut.conversationId)).status, "active");
    serving.start(new Agent(bobClient).on("request", (msg) => msg.inform({ late: true })));
    const answer = await alice.follow(timedOut.conversationId, bobClient.agentId).answer();
    assert.equal(answer.outcome, Outcome.SUCCESS);
    assert.deepEqual(answer.reply.content, { late: true });
  });

  test("a pending answer resumes after its timeout", BOUNDED, async () => {
    const [alice, bobClient] = [clientOf(server), clientOf(server)];
    const pending = await alice.beginRequest(bobClient.agentId, { action: "x" });
    await assert.rejects(pending.answer({ timeoutMs: 200 }), AnswerTimeout);
    serving.start(
      new Agent(bobClient).on("request", async (msg) => {
        await msg.agree();
        await msg.inform();
      }),
    );
    const answer = await pending.answer();
    assert.equal(answer.outcome, Outcome.SUCCESS);
    assert.deepEqual(answer.messages.map((m) => m.performative), ["agree", "inform"]);
  });

  test("a reply-by passing in silence ends the thread", BOUNDED, async () => {
    const [alice, silent] = [clientOf(server), clientOf(server)];
    const answer = await alice.request(silent.agentId, { action: "x" }, { replyWithinMs: 200 });
    assert.equal(answer.outcome, Outcome.TIMEOUT);
    assert.equal(answer.reply, null);
  });

  test("a silent bidder is reported at the reply-by", BOUNDED, async () => {
    const [buyer, silent] = [clientOf(server), clientOf(server)];
    const seller = agentOf(server, (agent) => agent.on("cfp", (msg) => msg.propose({ price: 10 })));
    serving.start(seller);
    const collected = await buyer.callForProposals([seller.client.agentId, silent.agentId], { item: "x" }, {
      // Room for the seller's answer on a loaded machine: the silent one costs the wait.
      replyWithinMs: 3_000,
    });
    assert.deepEqual(collected.proposals.map((m) => m.sender), [seller.client.agentId]);
    assert.deepEqual(collected.silent, [silent.agentId]);
  });

  test("stop lets the handler under way finish and acknowledges it", BOUNDED, async () => {
    const [alice, bobClient] = [clientOf(server), clientOf(server)];
    const started = signalled();
    const release = signalled();
    const bob = new Agent(bobClient).on("request", async (msg) => {
      started.resolve();
      await release.promise;
      await msg.inform({ finished: true });
    });
    const run = bob.run();
    const pending = await alice.beginRequest(bobClient.agentId, { action: "x" });
    await started.promise;
    bob.stop();
    release.resolve();
    await run;
    const answer = await pending.answer();
    assert.equal(answer.outcome, Outcome.SUCCESS);
    // What was handled was acknowledged: the inbox has nothing left to offer.
    assert.deepEqual((await bobClient.pollInbox(0)).items, []);
  });

  test("aborting run aborts the handler, and the message comes again", BOUNDED, async () => {
    const [alice, bobClient] = [clientOf(server), clientOf(server)];
    const started = signalled();
    const handlerSaw = signalled();
    const bob = new Agent(bobClient).on("request", async (msg) => {
      started.resolve();
      // Never returns on its own: waits for the run's end, as a handler passing its signal
      // to whatever it awaits does.
      await new Promise((_, reject) => msg.signal.addEventListener("abort", () => reject(msg.signal.reason)));
    });
    const controller = new AbortController();
    const run = bob.run({ signal: controller.signal });
    await alice.beginRequest(bobClient.agentId, { action: "x" });
    await started.promise;
    const reason = new Error("shut down now");
    controller.abort(reason);
    await assert.rejects(run, (error) => error === reason);
    // Not handled, so not acknowledged: the next run gets it again (at-least-once).
    const page = await bobClient.pollInbox(0);
    assert.deepEqual(page.items.map((item) => item.message.performative), ["request"]);
    // And a new run takes it.
    const again = signalled();
    const bobAgain = new Agent(bobClient).on("request", async (msg) => {
      again.resolve(msg.content);
      await msg.refuse({ reason: "restarted" });
    });
    serving.start(bobAgain);
    assert.deepEqual(await again.promise, { action: "x" });
  });

  test("handlers run side by side, each conversation's messages in order", BOUNDED, async () => {
    const [alice, carol] = [clientOf(server), clientOf(server)];
    const order = [];
    const bothStarted = signalled();
    let running = 0;
    let most = 0;
    const bob = agentOf(
      server,
      (agent) => {
        agent.on("request", async (msg) => {
          running += 1;
          most = Math.max(most, running);
          order.push(`start ${msg.content.who}`);
          if (running === 2) bothStarted.resolve();
          await bothStarted.promise; // only returns once two handlers run at once
          running -= 1;
          await msg.agree();
          await msg.inform();
        });
      },
      { concurrency: 4 },
    );
    serving.start(bob);
    const answers = await Promise.all([
      alice.request(bob.client.agentId, { who: "alice" }),
      carol.request(bob.client.agentId, { who: "carol" }),
    ]);
    assert.deepEqual(answers.map((a) => a.outcome), [Outcome.SUCCESS, Outcome.SUCCESS]);
    assert.equal(most, 2);

    // One conversation: a cancel waits for the request's handler, whatever the concurrency.
    const seen = [];
    const slow = signalled();
    const dave = agentOf(
      server,
      (agent) => {
        agent.on("request", async (msg) => {
          seen.push("request begins");
          await msg.agree();
          await slow.promise;
          seen.push("request ends");
        });
        agent.on("cancel", async (msg) => {
          seen.push("cancel");
          await msg.inform();
        });
      },
      { concurrency: 4 },
    );
    // Told when the agent takes the cancel from its stream, while the request's handler waits.
    const cancelTaken = signalled();
    const inbox = dave.client.inbox.bind(dave.client);
    dave.client.inbox = (position) => {
      const stream = inbox(position);
      const next = stream.next.bind(stream);
      stream.next = async (options) => {
        const item = await next(options);
        if (item.message.performative === "cancel") cancelTaken.resolve();
        return item;
      };
      return stream;
    };
    serving.start(dave);
    const agreed = signalled();
    const pending = await alice.beginRequest(dave.client.agentId, { action: "x" }, { observe: () => agreed.resolve() });
    const answering = pending.answer();
    await agreed.promise;
    await pending.cancel();
    await cancelTaken.promise;
    // Once every callback of this turn has run, a cancel dispatched out of order would have
    // begun; only then may the request's handler end.
    await new Promise((resolve) => setImmediate(resolve));
    slow.resolve();
    assert.equal((await answering).outcome, Outcome.CANCELLED);
    assert.deepEqual(seen, ["request begins", "request ends", "cancel"]);
  });

  test("a handler that throws is reported, and its message counts as handled", BOUNDED, async () => {
    const alice = clientOf(server);
    const reported = signalled();
    const bob = agentOf(
      server,
      (agent) =>
        agent.on("request", () => {
          throw new Error("the handler broke");
        }),
      { onError: (error, incoming) => reported.resolve({ error, incoming }) },
    );
    serving.start(bob);
    await alice.beginRequest(bob.client.agentId, { action: "x" });
    const { error, incoming } = await reported.promise;
    assert.equal(error.message, "the handler broke");
    assert.equal(incoming.performative, "request");
    await serving.stopAll();
    assert.deepEqual((await bob.client.pollInbox(0)).items, []);
  });
});
