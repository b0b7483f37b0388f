// The pieces that need no server: the server-sent events parser (events split across any
// chunks, a UTF-8 character too), deadlines, and errors built from foreign bodies.

import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { SseParser } from "@colloquy/sdk";
import { Deadline, DeadlinePassed, sleep } from "../src/signals.js";
import { BOUNDED } from "./harness.mjs";

describe("the SSE parser", () => {
  const stream =
    ": keep-alive\n\n" +
    'id: 4\nevent: message_accepted\ndata: {"seq":4,"note":"caf\u00e9"}\n\n' +
    "id: 5\r\nevent: completed\r\ndata: line one\r\ndata: line two\r\n\r\n";
  const expected = [
    { id: "4", event: "message_accepted", data: '{"seq":4,"note":"caf\u00e9"}' },
    { id: "5", event: "completed", data: "line one\nline two" },
  ];

  test("reads a whole stream", BOUNDED, () => {
    assert.deepEqual(new SseParser().push(new TextEncoder().encode(stream)), expected);
  });

  test("reads it split at every byte", BOUNDED, () => {
    const bytes = new TextEncoder().encode(stream);
    const parser = new SseParser();
    const events = [];
    for (let i = 0; i < bytes.length; i += 1) events.push(...parser.push(bytes.subarray(i, i + 1)));
    assert.deepEqual(events, expected);
  });

  test("keeps an unfinished event until its blank line", BOUNDED, () => {
    const parser = new SseParser();
    assert.deepEqual(parser.push("id: 1\ndata: x\n"), []);
    assert.deepEqual(parser.push("\n"), [{ id: "1", event: null, data: "x" }]);
  });
});

describe("deadlines", () => {
  test("a deadline fires with its own reason, and says so", BOUNDED, async () => {
    const deadline = new Deadline([], 10);
    await assert.rejects(sleep(60_000, deadline.signal), DeadlinePassed);
    assert.equal(deadline.timedOut, true);
    deadline.dispose();
  });

  test("a caller's abort passes its reason through, and is no timeout", BOUNDED, async () => {
    const caller = new AbortController();
    const deadline = new Deadline([caller.signal], 60_000);
    const reason = new Error("enough");
    caller.abort(reason);
    await assert.rejects(sleep(60_000, deadline.signal), (error) => error === reason);
    assert.equal(deadline.timedOut, false);
    deadline.dispose();
  });
});
