// `Client`: one agent's connection to a Colloquy server, with a method per endpoint and the
// initiator's helpers (`request`, `query`, `callForProposals`; their logic is in ask.js).
//
// Built on the global `fetch` (undici in Node), whose shared pool keeps connections alive
// and drops idle ones after 4 s, well under the server's 30 s idle cut-off. Every method
// takes `{signal}`: an aborted signal rejects the call with the signal's reason; a call that
// outlives the client's timeout is a `TransportError`.

import { DecodeError, TransportError, errorFromAnswer } from "./errors.js";
import * as ask from "./ask.js";
import { messageBody, setField as set } from "./models.js";
import { Deadline } from "./signals.js";
import { signedFields, uuid7 } from "./signing.js";
import { EventStream, InboxStream } from "./streams.js";

/** The header naming the caller when the server runs without an agents file. */
export const AGENT_HEADER = "x-agent-id";
/** How long one call may take unless told otherwise (ms). Long polls add their wait. */
export const DEFAULT_TIMEOUT_MS = 30_000;

/** Query parameters, without the unset ones. */
function queryString(params) {
  const search = new URLSearchParams();
  for (const [key, value] of Object.entries(params ?? {})) {
    if (value !== undefined && value !== null) search.append(key, String(value));
  }
  const text = search.toString();
  return text ? `?${text}` : "";
}

/**
 * An agent's client: `new Client("http://127.0.0.1:7700", "alice", "alice-token")`.
 *
 * Without a token it names itself with `X-Agent-Id`, which only a server in open
 * development mode accepts. `options.fetch` brings another `fetch` (a proxy's, a test's).
 * `options.signingKey` (a `SigningKey` whose public half the server has for this agent,
 * `signing_keys` in the agents file) signs every message the client sends, and the opening
 * message of every conversation it starts (`signingWith`).
 */
export class Client {
  /**
   * @param {string} baseUrl
   * @param {string} agentId
   * @param {string | null} [token]
   * @param {{timeoutMs?: number, fetch?: typeof fetch, signingKey?: import("./signing.js").SigningKey | null}} [options]
   */
  constructor(baseUrl, agentId, token = null, { timeoutMs = DEFAULT_TIMEOUT_MS, fetch = globalThis.fetch, signingKey = null } = {}) {
    if (typeof fetch !== "function") {
      throw new TypeError("no global fetch: the Colloquy SDK needs Node 18.19 or later");
    }
    this.baseUrl = String(baseUrl).replace(/\/+$/, "");
    this.agentId = agentId;
    this.timeoutMs = timeoutMs;
    this.token = token ?? null;
    this.fetchImpl = fetch;
    /** The agent's private key, when its messages are signed. */
    this.signingKey = signingKey ?? null;
  }

  /**
   * Signs every message this client sends from now on (and the opening message of every
   * conversation it starts) with `key`, whose public half the server has for this agent
   * (`signing_keys` in the agents file); `null` stops signing. A message without an id, or
   * a start without a conversation id, gets a fresh UUIDv7 one: the signature covers both.
   * Answers the client itself.
   */
  signingWith(key) {
    this.signingKey = key ?? null;
    return this;
  }

  /**
   * A message body (`SendMessage`) as this client sends it in `conversationId`: with an id
   * and signed when the client has a key, as it is otherwise.
   */
  signed(conversationId, body) {
    const key = this.signingKey;
    if (!key) return body;
    const messageId = body.message_id ?? uuid7();
    // The content as it goes on the wire, which is what the server checks.
    const content = body.content === undefined ? undefined : JSON.parse(JSON.stringify(body.content));
    const fields = signedFields(conversationId, this.agentId, {
      messageId,
      performative: body.performative,
      to: body.to,
      content,
      inReplyTo: body.in_reply_to,
      replyBy: body.reply_by,
    });
    return { ...body, message_id: messageId, signature: key.signFields(fields) };
  }

  // -- plumbing ---------------------------------------------------------------------------

  /** The credential headers of every call. */
  _authHeaders() {
    return this.token !== null ? { authorization: `Bearer ${this.token}` } : { [AGENT_HEADER]: this.agentId };
  }

  /** One path segment, percent-encoded (commitment ids contain `/`). */
  _segment(value) {
    return encodeURIComponent(value);
  }

  /**
   * `fetch` under a deadline: what the network did wrong is a `TransportError` naming the
   * call, the deadline's own timeout too; the caller's abort throws its reason.
   *
   * @param {Deadline} deadline
   * @returns {Promise<Response>}
   */
  async _fetch(method, path, init, deadline) {
    try {
      return await this.fetchImpl(this.baseUrl + path, { ...init, method, signal: deadline.signal });
    } catch (error) {
      throw this._failure(method, path, error, deadline);
    }
  }

  _failure(method, path, error, deadline) {
    if (deadline.signal.aborted) {
      if (!deadline.timedOut) return deadline.signal.reason;
      return new TransportError(`${method} ${path}: no answer within ${this.timeoutMs} ms`, { cause: error });
    }
    const cause = error?.cause ?? error;
    const why = cause?.code ?? cause?.message ?? String(cause);
    return new TransportError(`${method} ${path} at ${this.baseUrl}: ${why}`, { cause: error });
  }

  /**
   * Calls any endpoint as this agent and answers its parsed JSON; throws the `ApiError` of
   * an error answer. For endpoints without a method of their own.
   *
   * @param {string} method
   * @param {string} path
   * @param {{json?: unknown, query?: Record<string, unknown>, body?: string, timeoutMs?: number, signal?: AbortSignal}} [options]
   */
  async callApi(method, path, { json, query, body, timeoutMs, signal } = {}) {
    const headers = this._authHeaders();
    if (json !== undefined) {
      body = JSON.stringify(json);
      headers["content-type"] = "application/json";
    }
    const target = path + queryString(query);
    const deadline = new Deadline([signal], timeoutMs ?? this.timeoutMs);
    let text;
    let response;
    try {
      response = await this._fetch(method, target, { headers, body }, deadline);
      try {
        text = await response.text();
      } catch (error) {
        throw this._failure(method, target, error, deadline);
      }
    } finally {
      deadline.dispose();
    }
    if (!response.ok) throw errorFromAnswer(response.status, text);
    try {
      return JSON.parse(text);
    } catch (error) {
      throw new DecodeError(`${method} ${path}: not JSON (${error.message}): ${text.slice(0, 200)}`);
    }
  }

  // -- endpoints --------------------------------------------------------------------------

  /** `GET /readyz`: the server is up and has templates (else `ServiceUnavailable`). */
  ready({ signal } = {}) {
    return this.callApi("GET", "/readyz", { signal });
  }

  /**
   * `POST /v1/conversations`: starts a conversation with this agent as initiator;
   * `message`, when given, is the opening act, sent in the same call (signed, over
   * `conversationId` or a fresh UUIDv7 one, when the client has a key).
   */
  start(template, participants, { message, parameters, context, conversationId, deadlineMs, signal } = {}) {
    if (message && this.signingKey) {
      conversationId = conversationId ?? uuid7();
      message = this.signed(conversationId, message);
    }
    const body = { template, participants: [...participants] };
    set(body, "parameters", parameters);
    set(body, "context", context);
    set(body, "conversation_id", conversationId);
    set(body, "deadline_ms", deadlineMs);
    set(body, "message", message);
    return this.callApi("POST", "/v1/conversations", { json: body, signal });
  }

  /**
   * `POST /v1/conversations/{id}/messages`: sends a message as this agent. `to` empty means
   * the other side of this agent's thread; `replyBy` is Unix milliseconds; `messageId`
   * makes a retry safe (the same id answers the first receipt, marked `duplicate`). With
   * a signing key the message is signed (and given a UUIDv7 `messageId` when it has none).
   */
  send(conversationId, performative, content, { to, inReplyTo, replyBy, messageId, signal } = {}) {
    const body = this.signed(conversationId, messageBody(performative, content, { to, inReplyTo, replyBy, messageId }));
    return this.callApi("POST", `/v1/conversations/${this._segment(conversationId)}/messages`, { json: body, signal });
  }

  /** `GET /v1/conversations/{id}`: the conversation as this agent may see it. */
  conversation(conversationId, { signal } = {}) {
    return this.callApi("GET", `/v1/conversations/${this._segment(conversationId)}`, { signal });
  }

  /**
   * `GET /v1/conversations/{id}/moves`: what this agent may send now, to whom, and the
   * guard (`when`) each must satisfy, in template order.
   */
  async moves(conversationId, { signal } = {}) {
    const answer = await this.callApi("GET", `/v1/conversations/${this._segment(conversationId)}/moves`, { signal });
    return answer.moves;
  }

  /**
   * `GET /v1/conversations/{id}/audit`: the conversation's audit record as this agent may
   * have it (the events it may not see as their digests); check it with `verifyRecord` (the
   * chain, the senders' signatures, and the engine's with its keys), keep it, and check it
   * again offline with `colloquy audit verify` (docs/security.md).
   */
  async audit(conversationId, { signal } = {}) {
    return this.callApi("GET", `/v1/conversations/${this._segment(conversationId)}/audit`, { signal });
  }

  /**
   * `GET /v1/conversations`: one page of the conversations this agent may read (`outcome`:
   * only those that ended with it; `order`: `asc` or `desc`).
   */
  conversations({ participant, state, template, outcome, cursor, limit, order, signal } = {}) {
    const query = { participant, state, template, outcome, cursor, limit, order };
    return this.callApi("GET", "/v1/conversations", { query, signal });
  }

  /** Every conversation this agent may read, following the pages, in id order. */
  async *allConversations({ participant, state, template, outcome, signal } = {}) {
    let cursor;
    do {
      const page = await this.conversations({ participant, state, template, outcome, cursor, signal });
      yield* page.conversations;
      cursor = page.next_cursor;
    } while (cursor !== undefined && cursor !== null);
  }

  /**
   * `GET /v1/commitments`: this agent's commitments, optionally as `debtor` or `creditor`
   * and in one state; every page of them, in id order.
   */
  async commitments({ role, state, signal } = {}) {
    const found = [];
    let cursor;
    do {
      const page = await this.callApi("GET", "/v1/commitments", { query: { role, state, cursor }, signal });
      found.push(...page.commitments);
      cursor = page.next_cursor;
    } while (cursor !== undefined && cursor !== null);
    return found;
  }

  /** Waives a commitment owed to this agent (its creditor). */
  releaseCommitment(commitmentId, { signal } = {}) {
    return this.callApi("POST", `/v1/commitments/${this._segment(commitmentId)}/release`, { signal });
  }

  /** Withdraws from a commitment this agent owes (its debtor). */
  cancelCommitment(commitmentId, { signal } = {}) {
    return this.callApi("POST", `/v1/commitments/${this._segment(commitmentId)}/cancel`, { signal });
  }

  /** `GET /v1/agents`: the agents this caller may see (an agent: itself), with their inboxes. */
  agents({ signal } = {}) {
    return this.callApi("GET", "/v1/agents", { signal });
  }

  /** `GET /v1/templates`: the loaded templates and their revisions. */
  templates({ signal } = {}) {
    return this.callApi("GET", "/v1/templates", { signal });
  }

  /**
   * `GET /v1/agents/{me}/inbox/poll`: items after `after`, waiting up to `waitMs` for the
   * first one (for code that cannot hold a stream open).
   */
  pollInbox(after = 0, { waitMs = 0, limit, signal } = {}) {
    return this.callApi("GET", `/v1/agents/${this._segment(this.agentId)}/inbox/poll`, {
      query: { after, wait_ms: waitMs, limit },
      timeoutMs: this.timeoutMs + waitMs,
      signal,
    });
  }

  /**
   * `POST /v1/agents/{me}/inbox/ack`: this agent has handled its inbox up to and including
   * `through`, and the server deletes those entries. `Agent` does this on its own for what
   * its handlers handle.
   */
  acknowledge(through, { signal } = {}) {
    return this.callApi("POST", `/v1/agents/${this._segment(this.agentId)}/inbox/ack`, { json: { through }, signal });
  }

  /**
   * Acknowledges the whole inbox as it stands, for an agent that only starts
   * conversations: the helpers follow event streams, yet replies land in the inbox too,
   * and a durable store keeps them until acknowledged. Never call it from an agent that
   * also reads its inbox: it deletes entries nobody has read.
   */
  async acknowledgeInbox({ signal } = {}) {
    const asked = await this.acknowledge(0, { signal }); // `through: 0` answers the head
    return asked.head === 0 ? asked : this.acknowledge(asked.head, { signal });
  }

  /**
   * The inbox as a stream of items after `after` (0: every entry not yet acknowledged),
   * reconnecting and resuming on its own.
   */
  inbox(after = 0) {
    return new InboxStream(this, after);
  }

  /** A conversation's events after `after`, ending after its `completed` event. */
  events(conversationId, after = 0) {
    return new EventStream(this, conversationId, after);
  }

  // -- the initiator's helpers (ask.js) ---------------------------------------------------

  /**
   * FIPA Request: asks `participant` to perform an action and resolves on its final answer
   * (inform, failure, refuse, not-understood, or a deadline's `timeout`), never on an
   * intermediate `agree`. Past `timeoutMs`, `AnswerTimeout` (the conversation goes on).
   */
  async request(participant, content, options = {}) {
    const pending = await this.beginRequest(participant, content, options);
    return pending.answer(options);
  }

  /** FIPA Query: a `query-ref` (`content` names the `ref`), resolving on its answer. */
  async query(participant, content, options = {}) {
    const pending = await this.beginQuery(participant, content, options);
    return pending.answer(options);
  }

  /** Starts a FIPA Request and returns at once: a handle to `cancel()` it and `answer()`. */
  beginRequest(participant, content, { template = "fipa-request", ...options } = {}) {
    return ask.begin(this, template, "request", participant, content, options);
  }

  /** Starts a FIPA Query (`query-ref`) and returns at once, as `beginRequest`. */
  beginQuery(participant, content, { template = "fipa-query", ...options } = {}) {
    return ask.begin(this, template, "query-ref", participant, content, options);
  }

  /**
   * The end of `participant`'s thread in a conversation this agent started, for example
   * the winner's `inform` after an accepted proposal.
   */
  follow(conversationId, participant, { observe } = {}) {
    return new ask.PendingAnswer(this, conversationId, participant, observe);
  }

  /**
   * FIPA Contract Net: a `cfp` to `participants` with a reply-by (`replyWithinMs` from now,
   * or `replyBy` in Unix ms); resolves with the proposals, refusals and silences at the
   * reply-by. Answer them with `accept` and `reject`, then `follow` the winner.
   */
  callForProposals(participants, content, options = {}) {
    return ask.callForProposals(this, participants, content, options);
  }

  /** `accept-proposal` to the proposal's sender, in reply to it. */
  accept(conversationId, proposal, content, { signal } = {}) {
    return this.answer(conversationId, proposal, "accept-proposal", content, { signal });
  }

  /** `reject-proposal` to the proposal's sender, in reply to it. */
  reject(conversationId, proposal, content, { signal } = {}) {
    return this.answer(conversationId, proposal, "reject-proposal", content, { signal });
  }

  /** Sends `performative` to the sender of `message`, in reply to it. */
  answer(conversationId, message, performative, content, { signal } = {}) {
    return this.send(conversationId, performative, content ?? {}, {
      to: [message.sender],
      inReplyTo: message.id,
      signal,
    });
  }

  /**
   * `cancel`: calls off what this agent asked for (the participant confirms with `inform`,
   * and the answer's outcome is then `cancelled`).
   */
  cancel(conversationId, content, { to, signal } = {}) {
    return this.send(conversationId, "cancel", content ?? {}, { to, signal });
  }
}
