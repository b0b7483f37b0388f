// The initiator's helpers: start a conversation of a built-in protocol and wait for its
// final answer (never an intermediate `agree`) within a timeout.
//
// They follow the conversation's event stream, so they see exactly what the engine
// recorded: replies, thread moves and expired deadlines. `observe` sees each message the
// other side sends on the way. The replies also land in the initiator's inbox, unless the
// agents file gives it `inbox: false`; an agent that never reads its inbox drops them with
// `client.acknowledgeInbox()`, or a durable store keeps them.

import { AnswerTimeout } from "./errors.js";
import { messageBody } from "./models.js";
import { Deadline } from "./signals.js";

/** How long a helper waits for the final answer unless told otherwise (ms). */
export const DEFAULT_TIMEOUT_MS = 30_000;
/**
 * How long after the cfp's reply-by `callForProposals` waits for the engine to close the
 * silent threads (its scheduler runs every 50 ms; the rest is room for a loaded machine).
 */
export const CFP_GRACE_MS = 2_000;

/** The outcome of `participant`'s thread, if one of these moves ended it. */
function ended(transitions, participant) {
  for (const transition of transitions ?? []) {
    if (transition.participant === participant && transition.outcome !== undefined && transition.outcome !== null) {
      return transition.outcome;
    }
  }
  return null;
}

/** A `thread_expired` event's move (its fields are inlined in the event). */
function expiredThread(event) {
  return { participant: event.participant, from: event.from, to: event.to, outcome: event.outcome };
}

async function notify(observe, message) {
  if (observe) await observe(message);
}

/**
 * A request or query under way: its conversation, a way to cancel it, and its answer.
 * `answer()` may be awaited again after an `AnswerTimeout`: it goes on from where it
 * stopped. `close()` drops its event stream early (`answer` closes it once the answer is in).
 */
export class PendingAnswer {
  #client;
  #observe;
  #events;
  #done = false;

  constructor(client, conversationId, participant, observe) {
    this.conversationId = conversationId;
    this.participant = participant;
    this.#client = client;
    this.#observe = observe;
    // Read from the start, so nothing sent before the stream opens is missed.
    this.#events = client.events(conversationId);
    /** The answer so far: outcome and reply once the participant's thread has ended. */
    this.result = { conversationId, outcome: null, reply: null, messages: [] };
  }

  /**
   * The final answer; throws `AnswerTimeout` if it is not in within `timeoutMs` (the
   * conversation goes on), or the signal's reason when it aborts.
   *
   * @param {{timeoutMs?: number, signal?: AbortSignal}} [options]
   */
  async answer({ timeoutMs = DEFAULT_TIMEOUT_MS, signal } = {}) {
    if (this.#done) return this.result;
    const deadline = new Deadline([signal], timeoutMs);
    try {
      await this.#follow(deadline.signal);
    } catch (error) {
      if (deadline.timedOut) throw new AnswerTimeout(this.conversationId, timeoutMs);
      throw error;
    } finally {
      deadline.dispose();
      // Answered: the conversation has ended, or its end is near (the participant's thread
      // was its last), so the server ends the stream soon and its connection can be reused.
      if (this.#done) this.#events.drain();
    }
    return this.result;
  }

  /** `cancel` to the participant: once it confirms (`inform`), the outcome is `cancelled`. */
  cancel(content, { signal } = {}) {
    return this.#client.cancel(this.conversationId, content, { to: [this.participant], signal });
  }

  /** Stops following the conversation. */
  close() {
    this.#events.close();
  }

  async #follow(signal) {
    for (;;) {
      const event = await this.#events.next({ signal });
      if (event === null) {
        this.#done = true;
        return;
      }
      // Recorded before the observer runs: a timeout cutting the observer off loses
      // nothing the next `answer()` would need.
      const done = this.#take(event);
      this.#done = done;
      const message = event.message;
      if (message && message.sender === this.participant) await notify(this.#observe, message);
      if (done) return;
    }
  }

  /** Records what `event` tells; true once the participant's thread has ended. */
  #take(event) {
    const result = this.result;
    if (event.type === "message_accepted" && event.message) {
      const message = event.message;
      const fromParticipant = message.sender === this.participant;
      if (fromParticipant) result.messages.push(message);
      const outcome = ended(event.transitions, this.participant);
      if (outcome !== null) {
        result.outcome = outcome;
        if (fromParticipant) result.reply = message;
        return true;
      }
    } else if (event.type === "thread_expired") {
      const outcome = ended([expiredThread(event)], this.participant);
      if (outcome !== null) {
        result.outcome = outcome;
        return true;
      }
    } else if (event.type === "completed") {
      result.outcome ??= event.outcome ?? null;
      return true;
    }
    return false;
  }
}

/**
 * Starts a conversation of `template` whose opening act is `performative` with `content` to
 * `participant`, and returns a `PendingAnswer` at once. `replyWithinMs` sets the opening
 * message's reply-by; past it in silence, the thread ends `timeout`.
 */
export async function begin(
  client,
  template,
  performative,
  participant,
  content,
  { observe, replyWithinMs, parameters, context, conversationId, signal } = {},
) {
  const replyBy = replyWithinMs === undefined || replyWithinMs === null ? undefined : Date.now() + replyWithinMs;
  const view = await client.start(template, [participant], {
    message: messageBody(performative, content, { replyBy }),
    parameters,
    context,
    conversationId,
    signal,
  });
  return new PendingAnswer(client, view.id, participant, observe);
}

/**
 * Sends a `cfp` to `participants` with a reply-by (`replyWithinMs` from now, or `replyBy` in
 * Unix ms) and resolves once each has proposed, declined, or stayed silent past the reply-by
 * (the engine closes silent threads then). Late proposals are not collected: the engine
 * answers them itself.
 */
export async function callForProposals(
  client,
  participants,
  content,
  {
    replyWithinMs,
    replyBy,
    timeoutMs = DEFAULT_TIMEOUT_MS,
    observe,
    parameters,
    context,
    conversationId,
    template = "fipa-contract-net",
    signal,
  } = {},
) {
  if (replyBy === undefined || replyBy === null) {
    if (replyWithinMs === undefined || replyWithinMs === null) {
      throw new TypeError("callForProposals needs replyWithinMs or replyBy");
    }
    replyBy = Date.now() + replyWithinMs;
  }
  participants = [...participants];
  const view = await client.start(template, participants, {
    message: messageBody("cfp", content, { replyBy }),
    parameters,
    context,
    conversationId,
    signal,
  });
  const collected = { conversationId: view.id, proposals: [], declined: [], silent: [] };
  const waiting = new Set(participants);
  const giveUp = Math.min(timeoutMs, Math.max(0, replyBy - Date.now()) + CFP_GRACE_MS);
  const events = client.events(view.id);
  const deadline = new Deadline([signal], giveUp);
  try {
    while (waiting.size > 0) {
      const event = await events.next({ signal: deadline.signal });
      if (event === null) break;
      if (event.type === "message_accepted" && event.message) {
        const message = event.message;
        if (!waiting.has(message.sender)) continue;
        waiting.delete(message.sender);
        await notify(observe, message);
        (message.performative === "propose" ? collected.proposals : collected.declined).push(message);
      } else if (event.type === "thread_expired" && waiting.has(event.participant)) {
        waiting.delete(event.participant);
        collected.silent.push(event.participant);
      }
    }
  } catch (error) {
    // Past the reply-by and the grace, whoever has not answered stayed silent.
    if (!deadline.timedOut) throw error;
  } finally {
    deadline.dispose();
    events.close();
  }
  collected.silent.push(...[...waiting].sort());
  return collected;
}
