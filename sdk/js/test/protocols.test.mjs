// The three built-in protocols between JavaScript agents, over a real server: the
// initiator's helpers resolve on the final answer, participants answer through their
// handlers, and the views (conversations, listings, commitments, templates, agents) show what
// happened.

import assert from "node:assert/strict";
import { after, afterEach, before, describe, test } from "node:test";

import { AnswerTimeout, CommitmentState, Outcome } from "@colloquy/sdk";
import { BOUNDED, NO_SERVER, Server, Serving, agentOf, clientOf } from "./harness.mjs";

describe("the built-in protocols between JavaScript agents", { skip: NO_SERVER }, () => {
  let server;
  const serving = new Serving();
  before(async () => {
    server = await new Server().start();
  });
  afterEach(() => serving.stopAll());
  after(() => server?.dispose());

  test("a request resolves on the inform, not the agree", BOUNDED, async () => {
    const alice = clientOf(server);
    const bob = agentOf(server, (agent) =>
      agent.on("request", { template: "fipa-request" }, async (msg) => {
        assert.deepEqual(msg.content, { action: "book-room" });
        await msg.agree();
        await msg.inform({ done: true });
      }),
    );
    serving.start(bob);
    const seen = [];
    const answer = await alice.request(bob.client.agentId, { action: "book-room" }, {
      observe: (message) => seen.push(message.performative),
    });
    assert.equal(answer.outcome, Outcome.SUCCESS);
    assert.equal(answer.reply.performative, "inform");
    assert.deepEqual(answer.reply.content, { done: true });
    assert.deepEqual(answer.messages.map((m) => m.performative), ["agree", "inform"]);
    assert.deepEqual(seen, ["agree", "inform"]);

    const view = await alice.conversation(answer.conversationId);
    assert.equal(view.status, "completed");
    assert.equal(view.outcome, Outcome.SUCCESS);
    assert.deepEqual(view.commitments.map((c) => c.state), [CommitmentState.FULFILLED]);
  });

  test("a party fetches the audit record of its conversation", BOUNDED, async () => {
    const alice = clientOf(server);
    const bob = agentOf(server, (agent) =>
      agent.on("request", { template: "fipa-request" }, async (msg) => {
        await msg.agree();
        await msg.inform({ done: true });
      }),
    );
    serving.start(bob);
    const answer = await alice.request(bob.client.agentId, { action: "book-room" });
    const record = await alice.audit(answer.conversationId);
    assert.equal(record.format, "colloquy.audit/1");
    assert.equal(record.reader, alice.agentId);
    assert.equal(record.template.name, "fipa-request");
    assert.deepEqual(record.events.map((event) => event.seq), record.events.map((_, i) => i + 1));
    assert.equal(record.chain.length, record.events.length);
    assert.equal(record.events[0].prev, "0".repeat(64));
    assert.equal(new Set(record.events.map((event) => event.prev)).size, record.events.length);
  });

  test("a refusal is a final answer", BOUNDED, async () => {
    const alice = clientOf(server);
    const bob = agentOf(server, (agent) => agent.on("request", (msg) => msg.refuse({ reason: "fully booked" })));
    serving.start(bob);
    const answer = await alice.request(bob.client.agentId, { action: "book-room" });
    assert.equal(answer.outcome, Outcome.REFUSED);
    assert.deepEqual(answer.reply.content, { reason: "fully booked" });
  });

  test("a query gets its answer", BOUNDED, async () => {
    const carol = clientOf(server);
    const dave = agentOf(server, (agent) =>
      agent.on("query-ref", "fipa-query", (msg) => msg.inform({ value: 42, ref: msg.content.ref })),
    );
    serving.start(dave);
    const answer = await carol.query(dave.client.agentId, { ref: "the answer" });
    assert.equal(answer.outcome, Outcome.SUCCESS);
    assert.deepEqual(answer.reply.content, { value: 42, ref: "the answer" });
  });

  test("a contract net between a buyer and three sellers", BOUNDED, async () => {
    const buyer = clientOf(server);
    const prices = { cheap: 80, dear: 120 };
    const names = new Map();
    for (const name of ["cheap", "dear", "closed"]) {
      const seller = agentOf(server, (agent) => {
        agent.on("cfp", { template: "fipa-contract-net" }, (msg) =>
          name in prices ? msg.propose({ price: prices[name] }) : msg.refuse({ reason: "closed today" }),
        );
        agent.on("accept-proposal", { template: "fipa-contract-net" }, (msg) => msg.inform({ delivered: true }));
      });
      names.set(seller.client.agentId, name);
      serving.start(seller);
    }
    const collected = await buyer.callForProposals([...names.keys()], { item: "widget" }, { replyWithinMs: 20_000 });
    assert.deepEqual(collected.proposals.map((m) => names.get(m.sender)).sort(), ["cheap", "dear"]);
    assert.deepEqual(collected.declined.map((m) => names.get(m.sender)), ["closed"]);
    assert.deepEqual(collected.silent, []);

    const best = collected.proposals.reduce((a, b) => (a.content.price <= b.content.price ? a : b));
    assert.equal(names.get(best.sender), "cheap");
    for (const proposal of collected.proposals) {
      if (proposal === best) await buyer.accept(collected.conversationId, proposal, { order: 1 });
      else await buyer.reject(collected.conversationId, proposal, { reason: "price" });
    }
    const done = await buyer.follow(collected.conversationId, best.sender).answer();
    assert.equal(done.outcome, Outcome.SUCCESS);
    assert.deepEqual(done.reply.content, { delivered: true });

    const view = await buyer.conversation(collected.conversationId);
    assert.equal(view.status, "completed");
    assert.equal(view.outcome, Outcome.SUCCESS);
    const owed = await buyer.commitments({ role: "creditor" });
    const mine = owed.filter((c) => c.conversation_id === collected.conversationId);
    assert.deepEqual(mine.map((c) => c.state).sort(), ["fulfilled", "released"]);
  });

  test("an initiator cancels a request under way", BOUNDED, async () => {
    const alice = clientOf(server);
    const bob = agentOf(server, (agent) => {
      agent.on("request", (msg) => msg.agree()); // and the result never comes: cancelled first
      agent.on("cancel", (msg) => msg.inform());
    });
    serving.start(bob);
    const agreed = [];
    const pending = await alice.beginRequest(bob.client.agentId, { action: "long-job" }, {
      observe: (message) => agreed.push(message),
    });
    // The cancel goes out once bob has agreed: wait for the agree through the answer.
    while (agreed.length === 0) {
      try {
        await pending.answer({ timeoutMs: 200 });
      } catch (error) {
        if (!(error instanceof AnswerTimeout)) throw error; // not yet
      }
    }
    await pending.cancel({ reason: "changed my mind" });
    const answer = await pending.answer();
    assert.equal(answer.outcome, Outcome.CANCELLED);
    assert.deepEqual(answer.messages.map((m) => m.performative), ["agree", "inform"]);
  });

  test("listings, commitments, templates and agents", BOUNDED, async () => {
    const alice = clientOf(server);
    const bob = agentOf(server, (agent) => agent.on("request", (msg) => msg.agree()));
    serving.start(bob);
    const first = await alice.beginRequest(bob.client.agentId, { action: "a" });
    const second = await alice.beginRequest(bob.client.agentId, { action: "b" });
    // Both agreed: each has an active commitment bob owes alice.
    let active = [];
    while (active.length < 2) active = await bob.client.commitments({ role: "debtor", state: "active" });
    const byConversation = new Map(active.map((c) => [c.conversation_id, c]));
    assert.deepEqual(new Set(byConversation.keys()), new Set([first.conversationId, second.conversationId]));

    const released = await alice.releaseCommitment(byConversation.get(first.conversationId).id);
    assert.equal(released.state, CommitmentState.RELEASED);
    const withdrawn = await bob.client.cancelCommitment(byConversation.get(second.conversationId).id);
    assert.equal(withdrawn.state, CommitmentState.CANCELLED);

    const page = await alice.conversations({ template: "fipa-request", limit: 1 });
    assert.equal(page.conversations.length, 1);
    assert.ok(page.next_cursor);
    const listed = [];
    for await (const summary of alice.allConversations({ template: "fipa-request" })) listed.push(summary.id);
    assert.deepEqual(listed, [first.conversationId, second.conversationId].sort());
    const bobs = [];
    for await (const summary of bob.client.allConversations({ state: "active" })) bobs.push(summary.id);
    assert.deepEqual(bobs, listed);
    const newestFirst = await alice.conversations({ template: "fipa-request", order: "desc" });
    assert.deepEqual(newestFirst.conversations.map((c) => c.id), [...listed].reverse());

    const templates = await alice.templates();
    assert.deepEqual(templates.templates.map((t) => t.name), ["fipa-contract-net", "fipa-query", "fipa-request"]);
    const ready = await alice.ready();
    assert.equal(ready.status, "ready");

    const agents = await alice.agents();
    assert.deepEqual(agents.agents.map((a) => a.id), [alice.agentId]);
    const [me] = agents.agents;
    assert.equal(me.kind, "token");
    assert.equal(me.inbox, true);
    assert.equal(me.webhook, false);
    first.close();
    second.close();
  });

  test("conversations are listed by outcome", BOUNDED, async () => {
    const alice = clientOf(server);
    const bob = agentOf(server, (agent) => agent.on("request", "fipa-request", (msg) => msg.refuse({ reason: "busy" })));
    serving.start(bob);
    const answer = await alice.request(bob.client.agentId, { action: "book-room" });
    assert.equal(answer.outcome, Outcome.REFUSED);
    const refused = await alice.conversations({ outcome: "refused" });
    assert.deepEqual(refused.conversations.map((c) => c.id), [answer.conversationId]);
    const succeeded = await alice.conversations({ outcome: "success" });
    assert.deepEqual(succeeded.conversations, []);
  });

  test("a send with a message id is safe to retry; the inbox is read, polled and acknowledged", BOUNDED, async () => {
    const alice = clientOf(server);
    const bob = clientOf(server);
    const view = await alice.start("fipa-request", [bob.agentId], {
      message: { performative: "request", content: { action: "x" } },
      context: { ticket: "T-42" },
    });
    const inbox = bob.inbox();
    const item = await inbox.next();
    inbox.close();
    assert.equal(item.conversation_id, view.id);
    assert.equal(item.template, "fipa-request");
    assert.equal(item.message.performative, "request");

    const first = await bob.send(view.id, "agree", {}, { messageId: "agree-1", inReplyTo: item.message.id });
    const again = await bob.send(view.id, "agree", {}, { messageId: "agree-1", inReplyTo: item.message.id });
    assert.equal(first.duplicate, false);
    assert.equal(again.duplicate, true);

    const page = await bob.pollInbox(0);
    assert.deepEqual(page.items.map((i) => i.seq), [item.seq]);
    const acked = await bob.acknowledge(item.seq);
    assert.equal(acked.through, item.seq);
    assert.deepEqual((await bob.pollInbox(0)).items, []);
    const dropped = await alice.acknowledgeInbox();
    assert.ok(dropped.head >= 1);
  });
});
