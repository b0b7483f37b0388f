// The participant's side: handlers registered by performative and template, run over the
// agent's inbox stream, and the reply helpers of `Incoming`.
//
//     const bob = new Agent(new Client(url, "bob", "bob-token"));
//     bob.on("request", { template: "fipa-request" }, async (msg) => {
//       await msg.agree();
//       await msg.inform({ done: true });
//     });
//     await bob.run();   // until bob.stop(), its signal aborts, or the server refuses the stream
//
// What a handler has handled (or what no handler wanted) is acknowledged in the background,
// so the server deletes it: a restarted agent serving from 0 gets only what it had not
// finished, at least once. A stream that breaks reconnects and resumes after the last item
// taken.

import { ENGINE_PARTY } from "./models.js";
import { Deadline, sleep, untilAborted } from "./signals.js";

/** How long `run` lets handlers under way finish after `stop()` (ms). */
export const DEFAULT_GRACE_MS = 10_000;
/** How long the last acknowledgement may take when the agent stops (ms). */
export const FINAL_ACK_TIMEOUT_MS = 2_000;
/** Pause after a failed acknowledgement before the next try (the next position covers it). */
export const ACK_RETRY_DELAY_MS = 500;

/** Why handlers' signals abort when `run` ends before they do. */
class RunEnded extends Error {
  constructor(why) {
    super(`the agent's run ended: ${why}`);
    this.name = "AbortError";
  }
}

/** A message from the inbox, with what is needed to answer it. */
export class Incoming {
  /**
   * @param {import("./client.js").Client} client the client that received it (and answers)
   * @param {import("../index.js").InboxItem} item position, conversation, template, message
   * @param {AbortSignal} [signal] aborted when the agent's run ends before the handler does
   */
  constructor(client, item, signal) {
    this.client = client;
    this.item = item;
    this.signal = signal;
  }

  get seq() {
    return this.item.seq;
  }

  get conversationId() {
    return this.item.conversation_id;
  }

  get template() {
    return this.item.template ?? null;
  }

  get message() {
    return this.item.message;
  }

  get performative() {
    return this.item.message.performative;
  }

  get sender() {
    return this.item.message.sender;
  }

  get content() {
    return this.item.message.content;
  }

  /**
   * Sends `performative` in the same conversation, in reply to this message, addressed to
   * its sender (or, when the engine sent it, to the protocol's default). The handler's
   * signal bounds it unless another is given.
   */
  reply(performative, content, { signal } = {}) {
    return this.client.send(this.conversationId, performative, content ?? {}, {
      to: this.sender === ENGINE_PARTY ? undefined : [this.sender],
      inReplyTo: this.message.id,
      signal: signal ?? this.signal,
    });
  }

  /** `agree`: will do it (an intermediate answer; the result follows). */
  agree(content, options) {
    return this.reply("agree", content, options);
  }

  /** `refuse`: will not do it (`{reason: …}`). */
  refuse(content, options) {
    return this.reply("refuse", content, options);
  }

  /** `inform`: done, or here is the answer. */
  inform(content, options) {
    return this.reply("inform", content, options);
  }

  /** `failure`: tried and failed. */
  failure(content, options) {
    return this.reply("failure", content, options);
  }

  /** `not-understood`: cannot make sense of it. */
  notUnderstood(content, options) {
    return this.reply("not-understood", content, options);
  }

  /** `propose`: an offer, in answer to a cfp. */
  propose(content, options) {
    return this.reply("propose", content, options);
  }

  /** `accept-proposal`: take this offer. */
  accept(content, options) {
    return this.reply("accept-proposal", content, options);
  }

  /** `reject-proposal`: turn this offer down. */
  reject(content, options) {
    return this.reply("reject-proposal", content, options);
  }

  /** `cancel`: call off what this message asked for. */
  cancel(content, options) {
    return this.reply("cancel", content, options);
  }
}

/** A wake-up that remembers it was rung while nobody waited. */
class Bell {
  #rung = false;
  #waiter = null;

  ring() {
    this.#rung = true;
    const waiter = this.#waiter;
    this.#waiter = null;
    waiter?.();
  }

  /** Resolves once rung (at once if it was rung since the last wait). */
  async wait(signal) {
    if (!this.#rung) {
      await untilAborted(new Promise((resolve) => (this.#waiter = resolve)), signal);
    }
    this.#rung = false;
  }
}

/**
 * The inbox positions taken, and how far they are handled without a gap (what may be
 * acknowledged): with handlers running side by side, a later item can finish first.
 */
class Handled {
  constructor(after) {
    this.through = after;
    this.acknowledged = after;
    this.taken = [];
    this.done = new Set();
    this.advanced = new Bell();
  }

  take(seq) {
    this.taken.push(seq);
  }

  finish(seq) {
    this.done.add(seq);
    let moved = false;
    while (this.taken.length > 0 && this.done.has(this.taken[0])) {
      this.through = this.taken.shift();
      this.done.delete(this.through);
      moved = true;
    }
    if (moved) this.advanced.ring();
  }
}

/** At most `size` handlers at once. */
class Slots {
  #free;
  #waiting = [];

  constructor(size) {
    this.#free = size;
  }

  async acquire(signal) {
    if (this.#free > 0) {
      this.#free -= 1;
      return;
    }
    let grant;
    const granted = new Promise((resolve) => (grant = resolve));
    this.#waiting.push(grant);
    try {
      await untilAborted(granted, signal);
    } catch (error) {
      const at = this.#waiting.indexOf(grant);
      if (at !== -1) this.#waiting.splice(at, 1);
      else this.release(); // granted as the signal aborted: hand the slot on
      throw error;
    }
  }

  release() {
    const next = this.#waiting.shift();
    if (next) next();
    else this.#free += 1;
  }
}

function defaultOnError(error, incoming) {
  console.error(
    `colloquy: ${incoming.client.agentId}: handler for ${incoming.performative} in ` +
      `${incoming.conversationId} failed (seq ${incoming.seq}):`,
    error,
  );
}

/**
 * An agent's handlers, run over its inbox.
 *
 * A message goes to the handler registered for its performative and template, else to the
 * one for its performative in any template; other messages are acknowledged unhandled.
 * `concurrency` handlers run at once (default 1: one message at a time, in order); messages
 * of one conversation are always handled one after another, in order. A handler that throws
 * is reported to `onError` (default: `console.error`), and the message counts as handled
 * (it is not offered again).
 */
export class Agent {
  #exact = new Map();
  #anyTemplate = new Map();
  #stopping = null;
  #stopAsked = false;
  #position = 0;

  /**
   * @param {import("./client.js").Client} client
   * @param {{concurrency?: number, onError?: (error: unknown, incoming: Incoming) => void}} [options]
   */
  constructor(client, { concurrency = 1, onError = defaultOnError } = {}) {
    if (!Number.isInteger(concurrency) || concurrency < 1) {
      throw new RangeError(`concurrency must be a whole number of at least 1, not ${concurrency}`);
    }
    this.client = client;
    this.concurrency = concurrency;
    this.onError = onError;
  }

  /** The `seq` of the last inbox item handled without a gap (acknowledged soon). */
  get position() {
    return this.#position;
  }

  /**
   * Registers `handler` for `performative` messages of conversations of `template` (or of
   * any template without a handler of its own): `on("cfp", handler)`,
   * `on("cfp", { template: "fipa-contract-net" }, handler)` or
   * `on("cfp", "fipa-contract-net", handler)`. Returns the agent, for chaining.
   */
  on(performative, templateOrHandler, handler) {
    let template = null;
    if (typeof templateOrHandler === "function") handler = templateOrHandler;
    else if (typeof templateOrHandler === "string") template = templateOrHandler;
    else template = templateOrHandler?.template ?? null;
    if (typeof handler !== "function") {
      throw new TypeError(`Agent.on(${JSON.stringify(performative)}): the handler is not a function`);
    }
    if (template === null) this.#anyTemplate.set(performative, handler);
    else this.#exact.set(`${template}\n${performative}`, handler);
    return this;
  }

  /** The handler `item` goes to, if any. */
  handlerFor(item) {
    const performative = item.message.performative;
    if (item.template !== undefined && item.template !== null) {
      const handler = this.#exact.get(`${item.template}\n${performative}`);
      if (handler) return handler;
    }
    return this.#anyTemplate.get(performative) ?? null;
  }

  /**
   * Asks `run` to stop taking messages, let the handlers under way finish (within its
   * grace), acknowledge them and return. Safe to call from a handler or a signal handler,
   * also before `run` got going.
   */
  stop() {
    this.#stopAsked = true;
    this.#stopping?.abort();
  }

  /**
   * Serves the inbox from position `after` (0: every entry not yet acknowledged) until
   * `stop()`, or until the server refuses the stream (the error is thrown: a bad token, say).
   * Aborting `signal` stops at once: the handlers' signals (`msg.signal`) abort, `run`
   * rejects with the signal's reason, and what they had not finished comes again on the
   * next run.
   *
   * @param {{after?: number, graceMs?: number, signal?: AbortSignal}} [options]
   */
  async run({ after = 0, graceMs = DEFAULT_GRACE_MS, signal } = {}) {
    if (this.#stopping !== null) throw new Error(`agent ${this.client.agentId} is already running`);
    const stopping = new AbortController();
    this.#stopping = stopping;
    if (this.#stopAsked) stopping.abort();
    // Reading stops on stop() or the caller's signal; handlers are told only when the run
    // ends before they do (the caller's signal, or a grace that ran out).
    const reading = new Deadline([stopping.signal, signal]);
    const handlers = new Deadline([signal]);
    const handled = new Handled(after);
    this.#position = after;
    const inbox = this.client.inbox(after);
    const acknowledging = new AbortController();
    const acknowledger = this.#acknowledge(handled, acknowledging.signal);
    const running = new Set();
    const lastOfConversation = new Map();
    const slots = new Slots(this.concurrency);
    try {
      while (!reading.signal.aborted) {
        try {
          await slots.acquire(reading.signal);
        } catch (error) {
          if (reading.signal.aborted) break;
          throw error;
        }
        let item;
        try {
          item = await inbox.next({ signal: reading.signal });
        } catch (error) {
          slots.release();
          if (reading.signal.aborted) break;
          throw error;
        }
        handled.take(item.seq);
        const key = item.conversation_id;
        const before = lastOfConversation.get(key);
        const task = this.#handle(item, before, handled, slots, handlers.signal);
        running.add(task);
        lastOfConversation.set(key, task);
        task.then(() => {
          running.delete(task);
          if (lastOfConversation.get(key) === task) lastOfConversation.delete(key);
        });
      }
      signal?.throwIfAborted();
      if (running.size > 0) {
        const grace = new Deadline([signal], graceMs);
        try {
          await untilAborted(Promise.all(running), grace.signal);
        } catch {
          // Past the grace (or aborted): the late handlers are told below, not waited for.
        } finally {
          grace.dispose();
        }
      }
      signal?.throwIfAborted();
    } finally {
      if (running.size > 0) handlers.controller.abort(new RunEnded("stopped before its handlers finished"));
      handlers.dispose();
      reading.dispose();
      inbox.close();
      acknowledging.abort();
      await acknowledger;
      await this.#finalAcknowledgement(handled);
      this.#stopping = null;
      this.#stopAsked = false;
    }
  }

  async #handle(item, before, handled, slots, signal) {
    try {
      if (before) await before;
      if (signal.aborted) return; // the run ended: not handled, it comes again
      const handler = this.handlerFor(item);
      if (handler) {
        const incoming = new Incoming(this.client, item, signal);
        try {
          await handler(incoming);
        } catch (error) {
          if (signal.aborted) return;
          this.onError(error, incoming);
        }
      }
      handled.finish(item.seq);
      this.#position = handled.through;
    } finally {
      slots.release();
    }
  }

  /**
   * Acknowledges the positions reached, one request at a time: while one is on its way,
   * later positions pile up and the next request covers them all.
   */
  async #acknowledge(handled, stop) {
    while (!stop.aborted) {
      try {
        await handled.advanced.wait(stop);
      } catch {
        return;
      }
      const through = handled.through;
      if (through <= handled.acknowledged) continue;
      try {
        await this.client.acknowledge(through, { signal: stop });
        handled.acknowledged = Math.max(handled.acknowledged, through);
      } catch {
        if (stop.aborted) return;
        try {
          await sleep(ACK_RETRY_DELAY_MS, stop);
        } catch {
          return;
        }
        handled.advanced.ring();
      }
    }
  }

  async #finalAcknowledgement(handled) {
    if (handled.through <= handled.acknowledged) return;
    const deadline = new Deadline([], FINAL_ACK_TIMEOUT_MS);
    try {
      await this.client.acknowledge(handled.through, { signal: deadline.signal });
    } catch {
      // Not fatal: the next run resumes from the acknowledged position and handles these
      // again (at-least-once).
    } finally {
      deadline.dispose();
    }
  }
}
