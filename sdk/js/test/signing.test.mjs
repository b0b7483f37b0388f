// Signed messages and audit records through the TypeScript SDK, against a real server that
// requires signatures (a template with `spec.signatures: required`, agents with
// `signing_keys`) and signs its records (`--audit-key`): a client with a `SigningKey` signs
// every message it sends, the server refuses unsigned, altered and wrongly signed ones (422
// `bad_signature`), and `verifyRecord` checks the record as `colloquy audit verify --jwks`
// does, which the test runs to agree with it.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, afterEach, before, describe, test } from "node:test";

import {
  Agent,
  AuditBroken,
  Client,
  GENESIS,
  KeySet,
  SigningError,
  SigningKey,
  Unprocessable,
  bodyDigest,
  canonical,
  link,
  signedFields,
  verifyMessage,
  verifyRecord,
} from "@colloquy/sdk";
import { BOUNDED, NO_SERVER, REPO, Server, Serving, colloquyBinary, missing, pythonSdk } from "./harness.mjs";

const ENGINE_KID = "engine-key";

function signedRequestTemplate() {
  const source = readFileSync(join(REPO, "templates", "fipa-request.yaml"), "utf8");
  const signed = source
    .replace("name: fipa-request", "name: signed-request")
    .replace("  enforcement:", "  signatures: required\n  enforcement:");
  assert.ok(signed.includes("signatures: required"));
  return signed;
}

/** A key made by `colloquy audit keygen` in `dir`: its file and its public JWKS. */
function keygen(dir, name, kid, p256 = false) {
  const path = join(dir, `${name}.pem`);
  const out = execFileSync(colloquyBinary(), ["audit", "keygen", "--out", path, "--kid", kid, ...(p256 ? ["--p256"] : [])], { encoding: "utf8" });
  return { path, jwks: JSON.parse(out) };
}

const clone = (value) => JSON.parse(JSON.stringify(value));

/** The record with every `prev` and its summary recomputed: a forger's record. */
function rechain(record) {
  let head = GENESIS;
  for (const event of record.events) {
    event.prev = head;
    head = link(head, bodyDigest(event));
  }
  record.chain.length = record.events.length;
  record.chain.head = head;
  return record;
}

describe("signed messages and audit records", { skip: NO_SERVER }, () => {
  let server;
  let keys;
  let engineJwks;
  let dir;
  const serving = new Serving();
  const client = (agent, signed = true) => new Client(server.url, agent, `${agent}-token`, { signingKey: signed ? keys[agent] : null });

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "colloquy-jssdk-keys-"));
    const engine = keygen(dir, "engine", ENGINE_KID);
    engineJwks = engine.jwks;
    const dave = keygen(dir, "dave", "dave-1", true);
    keys = {
      alice: SigningKey.generate("EdDSA", "alice-1"),
      bob: SigningKey.generate("ES256", "bob-1"),
      dave: SigningKey.fromFile(dave.path, "dave-1"),
    };
    assert.deepEqual(keys.dave.publicJwks(), dave.jwks);
    const lines = ["admin_token: admin-token", "agents:"];
    for (const [agent, key] of Object.entries(keys)) {
      lines.push(`  - {id: ${agent}, token: ${agent}-token, signing_keys: ${JSON.stringify(key.publicJwks())}}`);
    }
    lines.push("  - {id: carol, token: carol-token}");
    server = new Server({ agents: `${lines.join("\n")}\n`, extraArgs: ["--audit-key", engine.path, "--audit-key-id", ENGINE_KID] });
    writeFileSync(join(server.workdir, "templates", "signed-request.yaml"), signedRequestTemplate());
    await server.start();
    const served = await (await fetch(`${server.url}/v1/audit/keys`)).json();
    assert.deepEqual(served, engineJwks);
  });
  afterEach(() => serving.stopAll());
  after(async () => {
    await server?.dispose();
    rmSync(dir, { recursive: true, force: true });
  });

  /** alice asks bob (an Agent, replying signed) in signed-request; the conversation id. */
  async function signedConversation() {
    serving.start(
      new Agent(client("bob")).on("request", "signed-request", async (msg) => {
        await msg.agree({ price: 99.5, note: "é\n", n: 2 ** 40, nothing: null });
        await msg.inform({ done: true });
      }),
    );
    const answer = await client("alice").request("bob", { action: "book-room", ratio: 0.1 }, { template: "signed-request" });
    assert.equal(answer.outcome, "success");
    await serving.stopAll();
    return answer.conversationId;
  }

  function cliVerify(record, name, withKeys = true) {
    const path = join(dir, `${name}.json`);
    writeFileSync(path, JSON.stringify(record));
    const keysFile = join(dir, "engine-jwks.json");
    writeFileSync(keysFile, JSON.stringify(engineJwks));
    return spawnSync(colloquyBinary(), ["audit", "verify", path, ...(withKeys ? ["--jwks", keysFile] : [])], { encoding: "utf8" });
  }

  test("a signed conversation goes through and its record verifies", BOUNDED, async () => {
    const id = await signedConversation();
    const record = await client("alice").audit(id);
    assert.deepEqual(record.signer_keys.bob, keys.bob.publicJwks());

    const verified = verifyRecord(record, { engineKeys: engineJwks });
    assert.equal(verified.engineKey, ENGINE_KID);
    assert.equal(verified.signedMessages, 3, "request, agree, inform");
    assert.equal(verified.chain.length, record.chain.length);
    const unchecked = verifyRecord(record);
    assert.ok(unchecked.engineSignatureUnchecked && unchecked.engineKey === null);
    const agentKeys = Object.fromEntries(Object.entries(keys).map(([agent, key]) => [agent, key.publicJwks()]));
    assert.equal(verifyRecord(record, { engineKeys: [engineJwks], agentKeys }).signedMessages, 3);
    assert.throws(
      () => verifyRecord(record, { agentKeys: { bob: SigningKey.generate("ES256", "bob-1").publicJwks() } }),
      (error) => error instanceof AuditBroken && error.check === "message signature" && /`bob`'s message .*: altered/.test(error.why),
    );
    const cli = cliVerify(record, "whole");
    assert.equal(cli.status, 0, cli.stdout + cli.stderr);
    assert.match(cli.stdout, /by key `engine-key`/);
    assert.throws(
      () => verifyRecord(record, { engineKeys: SigningKey.generate("EdDSA", ENGINE_KID).publicJwks() }),
      (error) => error instanceof AuditBroken && error.seq === null && error.check === "engine signature",
    );
  });

  test("a tampered record is caught by the SDK and the CLI alike", BOUNDED, async () => {
    const id = await signedConversation();
    const whole = await client("bob").audit(id);
    const agree = whole.events.findIndex((event) => event.message?.performative === "agree");
    const agreeSeq = whole.events[agree].seq;

    const bothRefuse = (record, name, seq, check) => {
      let broken;
      assert.throws(() => verifyRecord(record, { engineKeys: engineJwks }), (error) => {
        broken = error;
        return error instanceof AuditBroken;
      });
      assert.deepEqual([broken.seq, broken.check], [seq, check], broken.message);
      const cli = cliVerify(record, name);
      assert.equal(cli.status, 1, cli.stdout + cli.stderr);
      assert.ok(cli.stdout.includes(`FAILED: ${broken.message}`), `${cli.stdout}\n${broken.message}`);
    };

    // The content of a message changed: the next event's `prev` no longer holds.
    const altered = clone(whole);
    altered.events[agree].message.content.price = 9.5;
    bothRefuse(altered, "altered", agreeSeq + 1, "chain");

    // An event dropped (the later ones renumbered): the chain breaks at its place.
    const dropped = clone(whole);
    dropped.events.splice(agree, 1);
    for (const event of dropped.events.slice(agree)) event.seq -= 1;
    bothRefuse(dropped, "dropped", agreeSeq, "chain");

    // Altered and re-chained by a forger: the chain holds, bob's signature does not.
    bothRefuse(rechain(clone(altered)), "forged", agreeSeq, "message signature");
    // Its signature dropped too: only the engine's signature over the head catches it.
    const unsigned = clone(altered);
    delete unsigned.events[agree].message.signature;
    bothRefuse(rechain(unsigned), "unsigned", null, "engine signature");

    // The record's time changed: only the engine's signature catches it.
    const later = clone(whole);
    later.issued_at += 1;
    bothRefuse(later, "later", null, "engine signature");

    assert.equal(verifyRecord(whole, { engineKeys: engineJwks }).signedMessages, 3);
    const cli = cliVerify(whole, "whole-unkeyed", false);
    assert.equal(cli.status, 0, cli.stdout);
    assert.match(cli.stdout, /NOT checked/);
  });

  test("unsigned, altered and wrongly signed messages are refused", BOUNDED, async () => {
    const alice = client("alice");
    const bobUnsigned = client("bob", false);
    const view = await alice.start("signed-request", ["bob"], { message: { performative: "request", content: { action: "ship" } } });
    const refused = await bobUnsigned.send(view.id, "agree", {}).catch((error) => error);
    assert.ok(refused instanceof Unprocessable, String(refused));
    assert.equal(refused.code, "bad_signature");
    assert.match(refused.message, /missing/);

    const path = `/v1/conversations/${encodeURIComponent(view.id)}/messages`;
    const body = { message_id: "forged-1", performative: "agree", content: {} };
    const fields = signedFields(view.id, "bob", { messageId: "forged-1", performative: "agree", content: {} });
    const cases = [
      [SigningKey.generate("EdDSA", "mallory-1").signFields(fields), "unknown key"],
      [keys.bob.signFields({ ...fields, conversation_id: "other" }), "altered"],
      [SigningKey.generate("ES256", "bob-1").signFields(fields), "altered"],
    ];
    for (const [signature, why] of cases) {
      const error = await bobUnsigned.callApi("POST", path, { json: { ...body, signature } }).catch((e) => e);
      assert.ok(error instanceof Unprocessable, String(error));
      assert.equal(error.code, "bad_signature");
      assert.ok(error.message.includes(why), error.message);
    }
    await bobUnsigned.callApi("POST", path, { json: { ...body, signature: keys.bob.signFields(fields) } });
    // bob's inbox is left empty for the next test's agent.
    await bobUnsigned.acknowledgeInbox();
  });

  test("a keygen P-256 key signs through signingWith, and the record shows it", BOUNDED, async () => {
    const dave = new Client(server.url, "dave", "dave-token").signingWith(keys.dave);
    const view = await dave.start("signed-request", ["bob"], { message: { performative: "request", content: { x: 1 } }, conversationId: "js-signed-1" });
    assert.equal(view.id, "js-signed-1");
    await client("bob").send(view.id, "refuse", { reason: "busy" }, { to: ["dave"], messageId: "bob-refuse-1" });
    const record = await dave.audit(view.id);
    assert.equal(verifyRecord(record, { engineKeys: engineJwks }).signedMessages, 2);
    assert.ok(record.events.some((event) => event.message?.id === "bob-refuse-1"));
    await client("bob").acknowledgeInbox();
  });

  test("the engine's own reply verifies under its key", BOUNDED, async () => {
    const [carol, bob] = [new Client(server.url, "carol", "carol-token"), client("bob", false)];
    const view = await carol.start("fipa-contract-net", ["bob"], { message: { performative: "cfp", content: { task: "deliver" }, reply_by: Date.now() + 200 } });
    for (let i = 0; i < 250 && (await carol.conversation(view.id)).threads[0].state !== "no_reply"; i += 1) {
      await new Promise((done) => setTimeout(done, 20));
    }
    // Too late: the engine turns the proposal down itself, signed with its key.
    await bob.send(view.id, "propose", { price: 99.5 });
    const record = await carol.audit(view.id);
    await bob.acknowledgeInbox();
    const replies = record.events.filter((event) => event.message?.sender === "colloquy:engine").map((event) => event.message.performative);
    assert.deepEqual(replies, ["reject-proposal"]);
    assert.deepEqual(record.signer_keys["colloquy:engine"], engineJwks);
    const verified = verifyRecord(record, { engineKeys: engineJwks });
    assert.deepEqual([verified.signedMessages, verified.engineKey], [1, ENGINE_KID]);
  });

  test("records verified by the Python SDK's checker agree", BOUNDED, async (t) => {
    // This tree's Python SDK, with the interpreter (and its `cryptography`) of its venv.
    const python = pythonSdk();
    const env = { ...process.env, PYTHONPATH: join(REPO, "sdk/python/src") };
    const probe = python ? spawnSync(python, ["-c", "import colloquy.audit, cryptography"], { env }) : null;
    if (!probe || probe.status !== 0) {
      t.skip(missing("no Python SDK with `cryptography` (sdk/python/run-tests.sh makes its venv)"));
      return;
    }
    const id = await signedConversation();
    const record = await client("alice").audit(id);
    const path = join(dir, "for-python.json");
    writeFileSync(path, JSON.stringify(record));
    const script = [
      "import json, sys",
      "from colloquy.audit import verify",
      "record = json.load(open(sys.argv[1])); keys = json.loads(sys.argv[2])",
      "print(verify(record, keys).signed_messages)",
    ].join("\n");
    const done = spawnSync(python, ["-c", script, path, JSON.stringify(engineJwks)], { encoding: "utf8", env });
    assert.equal(done.status, 0, done.stderr);
    assert.equal(done.stdout.trim(), "3");
  });
});

describe("keys and signatures, offline", () => {
  for (const alg of ["EdDSA", "ES256"]) {
    test(`${alg} keys round-trip through PEM and JWK and sign as the engine checks`, BOUNDED, () => {
      const key = SigningKey.generate(alg, "k-1");
      const again = SigningKey.fromPem(key.privatePem(), "k-1");
      assert.deepEqual(again.publicJwk(), key.publicJwk());
      assert.equal(key.publicJwk().alg, alg);
      const privateJwk = { ...key.key.export({ format: "jwk" }), kid: "k-1" };
      assert.deepEqual(SigningKey.fromJwk(privateJwk).publicJwk(), key.publicJwk());
      const set = KeySet.fromJwks(key.publicJwks());
      const fields = signedFields("c-1", "bob", { messageId: "m-1", performative: "propose", content: { price: 99.5 } });
      const jws = again.signFields(fields);
      const [header, empty] = jws.split(".");
      assert.equal(empty, "");
      assert.deepEqual(JSON.parse(Buffer.from(header, "base64url")), { alg, kid: "k-1", typ: "colloquy-message+jws" });
      assert.equal(verifyMessage(set, fields, jws), "k-1");
      assert.throws(() => verifyMessage(set, { ...fields, conversation_id: "c-2" }, jws), /^Error: altered/);
      assert.throws(() => verifyMessage(KeySet.fromJwks({ keys: [] }), fields, jws), /^Error: unknown key/);
      assert.throws(() => verifyMessage(set, fields, "a.b.c"), /detached compact JWS/);
    });
  }

  test("bad keys say why, and none or HMAC never pass", BOUNDED, () => {
    assert.throws(() => SigningKey.generate("EdDSA", ""), SigningError);
    assert.throws(() => SigningKey.generate("RS256", "k"), SigningError);
    assert.throws(() => SigningKey.fromPem("nonsense", "k"), SigningError);
    assert.throws(() => SigningKey.fromJwk({ kty: "RSA", kid: "r", d: "AA" }), SigningError);
    assert.throws(() => KeySet.fromJwks({ keys: [{ kty: "RSA", kid: "r" }] }), /^Error: keys\[0\]:/);
    const [one, other] = [SigningKey.generate("EdDSA", "k"), SigningKey.generate("EdDSA", "k")];
    KeySet.fromJwks({ keys: [one.publicJwk(), one.publicJwk()] });
    assert.throws(() => KeySet.fromJwks({ keys: [one.publicJwk(), other.publicJwk()] }), /names two keys/);
    const b64 = (text) => Buffer.from(text).toString("base64url");
    for (const alg of ["none", "HS256"]) {
      const forged = `${b64(JSON.stringify({ alg, kid: "k" }))}..${b64("x")}`;
      assert.throws(() => KeySet.fromJwks(one.publicJwks()).verify(forged, "p"), new RegExp(`\`${alg}\``));
    }
  });

  test("RFC 8785: numbers as ECMAScript writes them, keys by UTF-16 code units", BOUNDED, () => {
    assert.equal(canonical({ b: 1, a: [true, null], "\u{1f600}": 0, "\ufb33": 0 }), '{"a":[true,null],"b":1,"\u{1f600}":0,"\ufb33":0}');
    assert.equal(canonical([1e21, 1e-7, 0.000001, 99.5, -0, 2 ** 60, 5e-324]), "[1e+21,1e-7,0.000001,99.5,0,1152921504606847000,5e-324]");
    assert.equal(canonical("\u0001\n\"é"), '"\\u0001\\n\\"é"');
  });
});
