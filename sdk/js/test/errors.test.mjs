// Every error class, each from a real request to a real server where a request can cause
// it: the status's class, with the code, message and pointer of the API's error body. The
// tests run side by side, so the 408 (which waits out the server's 30 s body deadline)
// costs the file 30 s, not 30 s more than the rest.

import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, test } from "node:test";

import {
  AnswerTimeout,
  ApiError,
  BadRequest,
  Client,
  ColloquyError,
  Conflict,
  ConversationEnded,
  DecodeError,
  Forbidden,
  MethodNotAllowed,
  NotFound,
  PayloadTooLarge,
  RequestTimeout,
  ServerError,
  ServiceUnavailable,
  TransportError,
  Unauthenticated,
  Unprocessable,
  errorFromAnswer,
} from "@colloquy/sdk";
import { BOUNDED, NO_SERVER, Server, clientOf } from "./harness.mjs";

/** The server gives a request body this long to arrive in full (docs/http-api.md). */
const SERVER_BODY_DEADLINE_MS = 30_000;

/** The error `promise` rejects with; fails when it resolves. */
async function failure(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail("expected an error, got an answer");
}

/** Asserts `error` is an `ApiError` of `cls` with `code` (and is every base class too). */
function assertApiError(error, cls, code) {
  assert.ok(error instanceof cls, `expected ${cls.name}, got ${error?.name}: ${error?.message}`);
  assert.ok(error instanceof ApiError && error instanceof ColloquyError && error instanceof Error);
  assert.equal(error.status, cls.statusCode);
  assert.equal(error.code, code);
  assert.equal(typeof error.detail, "string");
  assert.equal(error.name, cls.name);
}

const request = { performative: "request", content: {} };

describe("every error class, from real answers", { skip: NO_SERVER, concurrency: true }, () => {
  let server;
  before(async () => {
    server = await new Server().start();
  });
  after(() => server?.dispose());

  test("400: a bad query string", BOUNDED, async () => {
    assertApiError(await failure(clientOf(server).conversations({ limit: 0 })), BadRequest, "invalid_query");
  });

  test("401: an unknown token", BOUNDED, async () => {
    const stranger = new Client(server.url, "agent-0", "not-a-token");
    assertApiError(await failure(stranger.conversations()), Unauthenticated, "unauthenticated");
  });

  test("403: another agent's conversation and inbox", BOUNDED, async () => {
    const [alice, bob, mallory] = [clientOf(server), clientOf(server), clientOf(server)];
    const view = await alice.start("fipa-request", [bob.agentId], { message: request });
    assertApiError(await failure(mallory.conversation(view.id)), Forbidden, "not_a_party");
    const ack = mallory.callApi("POST", `/v1/agents/${bob.agentId}/inbox/ack`, { json: { through: 0 } });
    assertApiError(await failure(ack), Forbidden, "forbidden");
  });

  test("404: an unknown conversation and template", BOUNDED, async () => {
    const alice = clientOf(server);
    assertApiError(await failure(alice.conversation("no-such-conversation")), NotFound, "unknown_conversation");
    const asked = alice.request(clientOf(server).agentId, {}, { template: "no-such-template" });
    assertApiError(await failure(asked), NotFound, "unknown_template");
  });

  test("405: a known path with another method", BOUNDED, async () => {
    const error = await failure(clientOf(server).callApi("DELETE", "/v1/conversations"));
    assertApiError(error, MethodNotAllowed, "method_not_allowed");
  });

  test("408: a body that never arrives in full", BOUNDED, async () => {
    // No SDK call sends half a body, so the request goes out by hand and its real answer is
    // read as the SDK reads every error answer.
    const { hostname, port } = new URL(server.url);
    const answer = await new Promise((resolve, reject) => {
      const socket = connect(Number(port), hostname);
      let received = "";
      const timer = setTimeout(() => {
        socket.destroy();
        reject(new Error("no 408 within the server's body deadline and 30 s more"));
      }, SERVER_BODY_DEADLINE_MS + 30_000);
      socket.on("data", (chunk) => (received += chunk));
      socket.on("error", reject);
      socket.on("close", () => {
        clearTimeout(timer);
        resolve(received);
      });
      socket.write(
        `POST /v1/conversations HTTP/1.1\r\nhost: ${hostname}\r\n` +
          "authorization: Bearer agent-0-token\r\ncontent-type: application/json\r\n" +
          'content-length: 100\r\n\r\n{"template": "fipa-request", ',
      );
    });
    const status = Number(answer.split(" ", 2)[1]);
    const body = answer.split("\r\n\r\n").slice(1).join("\r\n\r\n");
    assertApiError(errorFromAnswer(status, body), RequestTimeout, "body_timeout");
  });

  test("409: a duplicate conversation id", BOUNDED, async () => {
    const [alice, bob] = [clientOf(server), clientOf(server)];
    const chosen = `booking-${alice.agentId}`;
    await alice.start("fipa-request", [bob.agentId], { conversationId: chosen });
    const again = alice.start("fipa-request", [bob.agentId], { conversationId: chosen });
    assertApiError(await failure(again), Conflict, "duplicate_conversation");
  });

  test("410: a message to a conversation that ended", BOUNDED, async () => {
    const [alice, bob] = [clientOf(server), clientOf(server)];
    const view = await alice.start("fipa-request", [bob.agentId], { message: request });
    await bob.send(view.id, "refuse", { reason: "no" });
    assertApiError(await failure(bob.send(view.id, "inform", {})), ConversationEnded, "conversation_ended");
  });

  test("413: a body over a mebibyte", BOUNDED, async () => {
    const asked = clientOf(server).request(clientOf(server).agentId, { blob: "x".repeat(1 << 20) });
    assertApiError(await failure(asked), PayloadTooLarge, "body_too_large");
  });

  test("422: a schema violation names the field; an unknown performative", BOUNDED, async () => {
    const [alice, dave] = [clientOf(server), clientOf(server)];
    const error = await failure(alice.query(dave.agentId, { "not-ref": 1 }));
    assertApiError(error, Unprocessable, "schema_violation");
    assert.ok(error.pointer?.startsWith("/message"), `pointer ${error.pointer}`);
    assert.ok(error.message.includes(error.pointer), "the message says where");
    const shout = alice.start("fipa-request", [dave.agentId], { message: { performative: "shout", content: {} } });
    assertApiError(await failure(shout), Unprocessable, "unknown_performative");
  });

  test("503: a server with no templates yet", BOUNDED, async () => {
    // An engine following a policy manager it cannot reach has loaded nothing yet.
    const follower = await new Server({ policyManager: "http://127.0.0.1:9" }).start();
    try {
      const error = await failure(clientOf(follower, "agent-0").ready());
      assertApiError(error, ServiceUnavailable, "no_templates");
      assert.equal(error.transient, true);
    } finally {
      await follower.dispose();
    }
  });

  test("other 5xx answers are server errors; other statuses plain API errors", BOUNDED, () => {
    // No request makes a sound server answer 500; the class is chosen from the status alone.
    let error = errorFromAnswer(500, '{"error": {"code": "internal", "message": "internal error"}}');
    assert.ok(error instanceof ServerError && error.transient);
    assert.equal(error.code, "internal");
    error = errorFromAnswer(502, "<html>bad gateway</html>");
    assert.ok(error instanceof ServerError);
    assert.equal(error.code, "http_error");
    assert.equal(error.detail, "<html>bad gateway</html>");
    error = errorFromAnswer(418, "{}");
    assert.equal(error.constructor, ApiError);
    assert.equal(error.transient, false);
  });

  test("a server out of reach is a transport error", BOUNDED, async () => {
    const gone = await new Server().start();
    await gone.dispose();
    const error = await failure(clientOf(gone, "agent-0").conversations());
    assert.ok(error instanceof TransportError, `${error?.name}: ${error?.message}`);
    assert.ok(error.message.includes("/v1/conversations"), error.message);
  });

  test("an answer that is not JSON is a decode error", BOUNDED, async () => {
    const error = await failure(clientOf(server).callApi("GET", "/metrics"));
    assert.ok(error instanceof DecodeError, `${error?.name}: ${error?.message}`);
  });

  test("a helper past its timeout is an answer timeout, and the conversation goes on", BOUNDED, async () => {
    const [alice, bob] = [clientOf(server), clientOf(server)];
    const error = await failure(alice.request(bob.agentId, { action: "x" }, { timeoutMs: 200 }));
    assert.ok(error instanceof AnswerTimeout && error instanceof ColloquyError);
    assert.equal(error.timeoutMs, 200);
    assert.equal((await alice.conversation(error.conversationId)).status, "active");
  });

  test("an aborted signal rejects with its reason, whatever waits", BOUNDED, async () => {
    const [alice, bob] = [clientOf(server), clientOf(server)];
    const reason = new Error("the caller gave up");
    const aborted = AbortSignal.abort(reason);
    assert.equal(await failure(alice.conversations({ signal: aborted })), reason);
    assert.equal(await failure(alice.request(bob.agentId, {}, { signal: aborted })), reason);
    // Waiting on a stream, and on an answer, cut short by a signal that aborts later.
    const later = new AbortController();
    const waiting = failure(clientOf(server).inbox().next({ signal: later.signal })); // an empty inbox
    const pending = await alice.beginRequest(bob.agentId, { action: "y" });
    const answering = failure(pending.answer({ signal: later.signal }));
    later.abort(reason);
    assert.equal(await waiting, reason);
    assert.equal(await answering, reason);
    pending.close();
  });
});
