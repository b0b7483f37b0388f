// Server-sent event streams that survive disconnects.
//
// On a broken connection (or a server restarting) a stream waits a little, doubling the
// wait up to MAX_RECONNECT_DELAY_MS, reconnects with `Last-Event-ID` set to the last event
// it handed out, and goes on. Nothing is skipped; an event may come twice only if the caller
// had not taken it yet, so processing stays at-least-once. Only what retrying cannot fix
// (401, 403, 404, …) is thrown, and the caller's signal, which throws its reason.

import { ApiError, DecodeError, errorFromAnswer } from "./errors.js";
import { Deadline, sleep } from "./signals.js";
import { SseParser } from "./sse.js";

/** First wait before a reconnect; doubled after each failed attempt. */
export const FIRST_RECONNECT_DELAY_MS = 50;
/** Longest wait between reconnects: a restarted server is found within this. */
export const MAX_RECONNECT_DELAY_MS = 2000;
/**
 * How long a stream may stay silent before it is taken for dead and reopened. The server
 * sends a keep-alive comment every 15 s, so a live stream is never this quiet.
 */
export const STREAM_READ_TIMEOUT_MS = 45_000;

/**
 * How long a stream that has nothing more to give (its conversation answered or completed)
 * is read on for the server to end it, so that the connection goes back to the pool for the
 * next call instead of being cut: a fresh connection per conversation cost the server and
 * the client a connect and an accept each (about a fifth of both sides' CPU in the bench).
 */
export const DRAIN_MS = 1_000;

/** Why a connection was dropped on purpose (not a failure to report). Made once each:
 * an Error's stack costs a few microseconds, on every closed stream. */
class Dropped extends Error {}
const CLOSED = new Dropped("closed");
const SILENT = new Dropped(`silent for ${STREAM_READ_TIMEOUT_MS} ms`);
const DRAINED = new Dropped(`not ended by the server within ${DRAIN_MS} ms`);

/** One SSE resource, reconnecting on transport failures and 5xx answers. */
class SseReader {
  /**
   * @param {import("./client.js").Client} client
   * @param {string} path
   * @param {number} after
   * @param {boolean} ends an event stream ends on purpose after `completed`; an inbox never
   *   does, so its end is a dropped connection
   */
  constructor(client, path, after, ends) {
    this.client = client;
    this.path = path;
    this.lastId = after;
    this.ends = ends;
    this.pending = [];
    this.connection = null;
    this.delay = FIRST_RECONNECT_DELAY_MS;
    this.finished = false;
  }

  /**
   * The next event; `null` once an event stream ended.
   *
   * @param {AbortSignal} [signal]
   */
  async next(signal) {
    for (;;) {
      if (this.pending.length > 0) {
        const event = this.pending.shift();
        if (event.id !== null && /^\d+$/.test(event.id)) this.lastId = Number(event.id);
        return event;
      }
      if (this.finished) {
        this.drain();
        return null;
      }
      signal?.throwIfAborted();
      if (this.connection === null) {
        try {
          await this.#connect(signal);
        } catch (error) {
          if (signal?.aborted) throw signal.reason;
          if (error instanceof ApiError && !error.transient) throw error;
          await this.#backOff(signal);
        }
        continue;
      }
      let chunk;
      try {
        chunk = await this.#read(signal);
      } catch (error) {
        this.close();
        if (signal?.aborted) throw signal.reason;
        await this.#backOff(signal);
        continue;
      }
      if (chunk.done) {
        this.close();
        if (this.ends) {
          this.finished = true;
          continue; // hands out what is pending first
        }
        await this.#backOff(signal);
        continue;
      }
      this.pending.push(...this.connection.parser.push(chunk.value));
    }
  }

  async #connect(signal) {
    const headers = this.client._authHeaders();
    headers.accept = "text/event-stream";
    headers["last-event-id"] = String(this.lastId);
    // The caller's signal and the client's timeout bound the wait for the answer's head;
    // then the deadline is disposed of (its signal stays live) and its controller is the
    // connection's: `close`, the read timeout and the caller's signal during a read abort it.
    const deadline = new Deadline([signal], this.client.timeoutMs);
    let response;
    try {
      response = await this.client._fetch("GET", this.path, { headers }, deadline);
    } finally {
      deadline.dispose();
    }
    if (!response.ok) {
      const body = await response.text().catch(() => "");
      throw errorFromAnswer(response.status, body);
    }
    this.connection = {
      controller: deadline.controller,
      reader: response.body.getReader(),
      parser: new SseParser(),
    };
    this.delay = FIRST_RECONNECT_DELAY_MS;
  }

  async #read(signal) {
    const { controller, reader } = this.connection;
    const idle = setTimeout(() => controller.abort(SILENT), STREAM_READ_TIMEOUT_MS);
    const onAbort = () => controller.abort(signal.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      return await reader.read();
    } finally {
      clearTimeout(idle);
      signal?.removeEventListener("abort", onAbort);
    }
  }

  async #backOff(signal) {
    const delay = this.delay;
    this.delay = Math.min(this.delay * 2, MAX_RECONNECT_DELAY_MS);
    await sleep(delay, signal);
  }

  /** Closes the connection (a later `next` reconnects, after the last event handed out). */
  close() {
    const connection = this.connection;
    this.connection = null;
    if (connection !== null) {
      connection.controller.abort(CLOSED);
      connection.reader.cancel().catch(() => {});
    }
  }

  /**
   * Lets go of a stream whose end is near (its conversation completed): reads on, in the
   * background, until the server ends it or DRAIN_MS pass, then closes it. Events read
   * meanwhile are dropped; a later `next` reconnects after the last event handed out.
   */
  drain() {
    const connection = this.connection;
    this.connection = null;
    if (connection === null) return;
    const { controller, reader } = connection;
    const timer = setTimeout(() => controller.abort(DRAINED), DRAIN_MS);
    const readToEnd = () =>
      reader.read().then(({ done }) => (done ? clearTimeout(timer) : readToEnd()));
    readToEnd().catch(() => clearTimeout(timer));
  }
}

function decode(event, what) {
  try {
    const value = JSON.parse(event.data);
    if (value === null || typeof value !== "object") throw new TypeError("not an object");
    return value;
  } catch (error) {
    throw new DecodeError(`${what}: ${error.message}: ${event.data.slice(0, 200)}`);
  }
}

/**
 * An agent's inbox as an async iterator of inbox items, in order, for ever:
 * `for await (const item of client.inbox(after))`. `position` is the `seq` of the last item
 * handed out, to resume from later. Close it with `close()` (or by leaving the loop).
 */
export class InboxStream {
  constructor(client, after) {
    this.reader = new SseReader(client, `/v1/agents/${client._segment(client.agentId)}/inbox`, after, false);
  }

  /** The `seq` of the last item handed out. */
  get position() {
    return this.reader.lastId;
  }

  /**
   * The next item; waits as long as it takes (or until `signal` aborts), reconnecting as
   * needed.
   *
   * @param {{signal?: AbortSignal}} [options]
   */
  async next({ signal } = {}) {
    for (;;) {
      const event = await this.reader.next(signal);
      if (event === null || event.event !== "message") continue;
      const item = decode(event, "inbox item");
      if (typeof item.seq !== "number" || typeof item.message !== "object" || item.message === null) {
        throw new DecodeError(`inbox item without seq or message: ${event.data.slice(0, 200)}`);
      }
      return item;
    }
  }

  /** Closes the connection. */
  close() {
    this.reader.close();
  }

  async *[Symbol.asyncIterator]() {
    try {
      for (;;) yield await this.next();
    } finally {
      this.close();
    }
  }
}

/**
 * A conversation's event log as an async iterator of events, ending after its `completed`
 * event.
 */
export class EventStream {
  constructor(client, conversationId, after) {
    this.reader = new SseReader(client, `/v1/conversations/${client._segment(conversationId)}/events`, after, true);
  }

  /** The `seq` of the last event handed out. */
  get position() {
    return this.reader.lastId;
  }

  /**
   * The next event, or `null` once the conversation completed.
   *
   * @param {{signal?: AbortSignal}} [options]
   */
  async next({ signal } = {}) {
    const event = await this.reader.next(signal);
    if (event === null) return null;
    const decoded = decode(event, "conversation event");
    if (typeof decoded.type !== "string" || typeof decoded.seq !== "number") {
      throw new DecodeError(`conversation event without type or seq: ${event.data.slice(0, 200)}`);
    }
    if (decoded.type === "completed") {
      // Nothing follows `completed`: the stream is done even if the server has not closed
      // it yet.
      this.reader.finished = true;
    }
    return decoded;
  }

  /** Closes the connection. */
  close() {
    this.reader.close();
  }

  /**
   * Closes the stream once the server has ended it (soon after `completed`), so its
   * connection serves the next call; see DRAIN_MS.
   */
  drain() {
    this.reader.drain();
  }

  async *[Symbol.asyncIterator]() {
    try {
      for (let event = await this.next(); event !== null; event = await this.next()) yield event;
    } finally {
      this.close();
    }
  }
}
