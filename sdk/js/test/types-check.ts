// Compiled by run-tests.sh's type check, never run: the API as index.d.ts types it, used as
// agent code uses it, so a declaration that does not compile or does not fit the SDK's
// shape fails the check.

import {
  Agent,
  AnswerTimeout,
  ApiError,
  Client,
  Conflict,
  Outcome,
  AuditBroken,
  SigningKey,
  verifyRecord,
  type Answer,
  type VerifiedRecord,
  type ConversationView,
  type InboxItem,
  type Proposals,
  type SendReceipt,
} from "@colloquy/sdk";

export async function initiator(signal: AbortSignal): Promise<string | null> {
  const alice = new Client("http://127.0.0.1:7700", "alice", "alice-token", { timeoutMs: 5_000 });
  const answer: Answer = await alice.request("bob", { action: "book-room" }, {
    timeoutMs: 30_000,
    replyWithinMs: 60_000,
    observe: (message) => console.log(message.performative),
    signal,
  });
  const view: ConversationView = await alice.conversation(answer.conversationId);
  const bids: Proposals = await alice.callForProposals(["acme", "globex"], { item: "widget" }, { replyWithinMs: 5_000 });
  const best = bids.proposals[0];
  if (best) {
    const receipt: SendReceipt = await alice.accept(bids.conversationId, best, { order: 1 });
    console.log(receipt.threads.map((thread) => thread.state));
    await alice.follow(bids.conversationId, best.sender).answer({ timeoutMs: 10_000 });
  }
  try {
    await alice.start("fipa-request", ["bob"], { conversationId: "booking-1" });
  } catch (error) {
    if (error instanceof Conflict && error.code === "duplicate_conversation") return null;
    if (error instanceof ApiError) console.log(error.status, error.pointer, error.transient);
    if (error instanceof AnswerTimeout) console.log(error.conversationId);
    throw error;
  }
  for await (const summary of alice.allConversations({ state: "completed" })) console.log(summary.id);
  return answer.outcome === Outcome.SUCCESS ? view.status : null;
}

export async function participant(signal: AbortSignal): Promise<void> {
  const bob = new Agent(new Client("http://127.0.0.1:7700", "bob", "bob-token"), { concurrency: 4 })
    .on("request", { template: "fipa-request" }, async (msg) => {
      await msg.agree();
      await msg.inform({ done: true, from: msg.sender, in: msg.conversationId });
    })
    .on("query-ref", (msg) => msg.inform({ value: 42 }))
    .on("cfp", "fipa-contract-net", (msg) => msg.propose({ price: 100 }, { signal: msg.signal }));
  await bob.run({ after: 0, graceMs: 5_000, signal });
  const item: InboxItem = await bob.client.inbox(bob.position).next({ signal });
  console.log(item.seq, item.message.content);
}

export async function signer(pem: string, engineKeys: { keys: Record<string, unknown>[] }): Promise<number> {
  const key = SigningKey.fromPem(pem, "bob-1");
  const other = SigningKey.generate("ES256", "bob-2");
  console.log(key.publicJwks(), other.publicJwk().kid);
  const bob = new Client("http://127.0.0.1:7700", "bob", "bob-token", { signingKey: key }).signingWith(other);
  const view: ConversationView = await bob.start("signed-request", ["carol"], { message: { performative: "request", content: {} } });
  const record = await bob.audit(view.id);
  try {
    const verified: VerifiedRecord = verifyRecord(record, { engineKeys, agentKeys: { bob: key.publicJwks() } });
    return verified.signedMessages;
  } catch (error) {
    if (error instanceof AuditBroken) console.log(error.seq, error.check, error.why);
    throw error;
  }
}
