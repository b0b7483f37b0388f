// The examples do what their comments say, run as a user runs them (`node examples/…`),
// as the Python SDK's tests/test_examples.py checks its own.

import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";

import { BOUNDED, NO_SERVER, REPO, Server, freshAgentId } from "./harness.mjs";

const EXAMPLES = join(REPO, "sdk/js/examples");
/** Longest an example may take to do its part. */
const EXAMPLE_WAIT_MS = 60_000;
const run = promisify(execFile);

/** Runs an example to its end; its output. */
async function example(script, args, env) {
  const { stdout } = await run(process.execPath, [join(EXAMPLES, script), ...args], {
    env: { ...process.env, ...env },
    timeout: EXAMPLE_WAIT_MS,
  });
  return stdout;
}

describe("the examples", { skip: NO_SERVER }, () => {
  let server;
  before(async () => {
    server = await new Server().start();
  });
  after(() => server?.dispose());

  test("the initiator asks the participant", BOUNDED, async () => {
    const [bob, alice] = [freshAgentId(), freshAgentId()];
    const participant = spawn(process.execPath, [join(EXAMPLES, "participant.mjs"), server.url, bob], {
      env: { ...process.env, COLLOQUY_TOKEN: `${bob}-token` },
      stdio: ["ignore", "pipe", "pipe"],
    });
    let printed = "";
    participant.stdout.on("data", (chunk) => (printed += chunk));
    participant.stderr.on("data", (chunk) => (printed += chunk));
    const exited = new Promise((resolve) => participant.on("exit", (code) => resolve(code)));
    let said;
    try {
      said = await example("initiator.mjs", [server.url, alice, bob], { COLLOQUY_TOKEN: `${alice}-token` });
    } finally {
      participant.kill("SIGTERM");
    }
    assert.equal(await exited, 0, printed);
    assert.match(said, /… agree from/);
    assert.match(said, /… inform from/);
    assert.match(said, /success, final \{"done":true\}/);
    assert.match(said, /\{"value":42\}/);
    assert.match(printed, /request in /);
  });

  test("the buyer takes the cheapest of three sellers", BOUNDED, async () => {
    const [buyer, ...sellers] = [freshAgentId(), freshAgentId(), freshAgentId(), freshAgentId()];
    const tokens = [buyer, ...sellers].map((name) => `${name}=${name}-token`).join(",");
    const said = await example("contract_net.mjs", [server.url, buyer, ...sellers], { COLLOQUY_TOKENS: tokens });
    assert.match(said, new RegExp(`${sellers[2]} declines`));
    assert.match(said, new RegExp(`${sellers[1]} won at 95: success, \\{"delivered":"widget"\\}`));
  });
});
