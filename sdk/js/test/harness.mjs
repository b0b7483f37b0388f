// The tests' harness: a real `colloquy serve` on loopback, started from the built binary,
// and agents with fresh ids (so no test reads another's inbox). As the Python SDK's
// tests/conftest.py does.
//
// The binary is $COLLOQUY_BIN, else $CARGO_TARGET_DIR/debug/colloquy, else the workspace's
// target/debug/colloquy (`cargo test --workspace` or `cargo build -p colloquy --bin colloquy`
// builds it). Without it the tests are skipped, except under CI=true, where they fail.

import { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Agent, Client } from "@colloquy/sdk";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
/** Agent ids the server knows: `agent-0` …; each one's token is `<id>-token`. */
export const AGENT_POOL = 200;
export const ADMIN_TOKEN = "admin-token";
/** Longest wait for a server to print its address. */
const START_WAIT_MS = 60_000;
/** Longest wait for a server to exit after a signal. */
const STOP_WAIT_MS = 30_000;
/** Longest any one test may take: every test is bounded. */
export const TEST_TIMEOUT_MS = 90_000;
/** The options every test passes to `test()`. */
export const BOUNDED = { timeout: TEST_TIMEOUT_MS };
const BUILTIN_TEMPLATES = ["fipa-request.yaml", "fipa-query.yaml", "fipa-contract-net.yaml"];

/**
 * Why something the tests need is missing, as a skip reason; under CI=true it throws
 * instead, so the file fails (the test command builds everything before these tests).
 */
export function missing(what) {
  if (process.env.CI === "true") {
    throw new Error(`${what} (CI=true: the test command builds it before these tests)`);
  }
  return what;
}

export function targetDir() {
  return process.env.CARGO_TARGET_DIR || join(REPO, "target");
}

/** The colloquy binary, or null. */
export function colloquyBinary() {
  const binary = process.env.COLLOQUY_BIN || join(targetDir(), "debug", "colloquy");
  return existsSync(binary) ? binary : null;
}

/** A skip reason when the binary is missing (a `describe`'s `skip` option), else false. */
export const NO_SERVER = colloquyBinary()
  ? false
  : missing(`no colloquy binary at ${process.env.COLLOQUY_BIN || join(targetDir(), "debug", "colloquy")}: cargo build -p colloquy --bin colloquy`);

function agentsYaml() {
  const lines = [`admin_token: ${ADMIN_TOKEN}`, "agents:"];
  for (let n = 0; n < AGENT_POOL; n += 1) lines.push(`  - id: agent-${n}`, `    token: agent-${n}-token`);
  return `${lines.join("\n")}\n`;
}

const live = new Set();
process.on("exit", () => {
  for (const server of live) server.kill();
});

/** A `colloquy serve` process on loopback; killed by `kill()` (and at exit). */
export class Server {
  /**
   * @param {{store?: "memory" | "sqlite", policyManager?: string, agents?: string, extraArgs?: string[]}} [options]
   *   `agents`: the agents file's text (default: the pool); `extraArgs`: more `serve` options.
   */
  constructor({ store = "memory", policyManager, agents, extraArgs = [] } = {}) {
    this.extraArgs = extraArgs;
    this.workdir = mkdtempSync(join(tmpdir(), "colloquy-jssdk-"));
    this.store = store === "sqlite" ? `sqlite:${join(this.workdir, "colloquy.db")}` : store;
    this.policyManager = policyManager;
    if (!policyManager) {
      // Copied, so work on the tree's examples cannot change what these tests run.
      this.templates = join(this.workdir, "templates");
      mkdirSync(this.templates);
      for (const name of BUILTIN_TEMPLATES) copyFileSync(join(REPO, "templates", name), join(this.templates, name));
    }
    this.agentsFile = join(this.workdir, "agents.yaml");
    writeFileSync(this.agentsFile, agents ?? agentsYaml());
    this.process = null;
    this.url = "";
    this.starts = 0;
  }

  /** Starts it and resolves once it printed its address. */
  async start(listen = "127.0.0.1:0") {
    this.starts += 1;
    const policy = this.policyManager ? ["--policy-manager", this.policyManager] : ["--templates", this.templates];
    const child = spawn(
      colloquyBinary(),
      ["serve", "--listen", listen, "--store", this.store, ...policy, "--agents", this.agentsFile, "--data-dir", join(this.workdir, "data"), ...this.extraArgs],
      { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, RUST_LOG: "warn" } },
    );
    this.process = child;
    live.add(this);
    let printed = "";
    // Its log (RUST_LOG=warn), kept to say why it did not start.
    let errors = "";
    child.stderr.on("data", (chunk) => (errors += chunk));
    this.url = await new Promise((resolveUrl, reject) => {
      const timer = setTimeout(() => reject(new Error(`colloquy serve printed no address in ${START_WAIT_MS} ms:\n${errors}`)), START_WAIT_MS);
      child.stdout.on("data", (chunk) => {
        printed += chunk;
        const found = /^colloquy listening on (\S+)/m.exec(printed);
        if (found) {
          clearTimeout(timer);
          resolveUrl(found[1]);
        }
      });
      child.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`colloquy serve exited (${code}) before it listened:\n${errors}`));
      });
    });
    child.stdout.resume();
    return this;
  }

  get port() {
    return Number(this.url.split(":").pop());
  }

  /** `kill -9`: the server drops every connection, mid-stream. Resolves once it is gone. */
  kill() {
    const child = this.process;
    if (!child || child.exitCode !== null || child.signalCode !== null) return Promise.resolve();
    const gone = new Promise((done) => child.once("exit", done));
    child.kill("SIGKILL");
    return gone;
  }

  /** Kills it and removes its files. */
  async dispose() {
    await this.kill();
    live.delete(this);
    rmSync(this.workdir, { recursive: true, force: true });
  }

  /** SIGTERM, as a service manager stops it; the exit status. */
  async terminate() {
    const child = this.process;
    const gone = new Promise((done) => child.once("exit", (code) => done(code)));
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), STOP_WAIT_MS);
    try {
      return await gone;
    } finally {
      clearTimeout(timer);
    }
  }
}

let nextAgent = 0;

/** An agent id of the pool no test of this process has used yet. */
export function freshAgentId() {
  if (nextAgent >= AGENT_POOL) throw new Error("the agent pool is used up: raise AGENT_POOL");
  const id = `agent-${nextAgent}`;
  nextAgent += 1;
  return id;
}

/** A client of a fresh agent (or of `agentId`) of `server`. */
export function clientOf(server, agentId = freshAgentId()) {
  return new Client(server.url, agentId, `${agentId}-token`);
}

/** Longest an agent's run may take to stop once asked (its grace is shorter). */
const AGENT_STOP_WAIT_MS = 20_000;

/**
 * Agents running in the background for one test: `serving.start(agent)`; `stopAll()`
 * stops them gracefully after the test, and a run that failed fails it.
 */
export class Serving {
  runs = [];

  start(agent, options = {}) {
    const run = agent.run({ graceMs: 5_000, ...options });
    run.catch(() => {}); // reported by stopAll
    this.runs.push({ agent, run });
    return run;
  }

  async stopAll() {
    for (const { agent } of this.runs) agent.stop();
    const all = Promise.all(this.runs.map(({ run }) => run));
    let timer;
    const late = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new Error(`agents did not stop within ${AGENT_STOP_WAIT_MS} ms`)), AGENT_STOP_WAIT_MS);
    });
    try {
      await Promise.race([all, late]);
    } finally {
      clearTimeout(timer);
      this.runs = [];
    }
  }
}

/** An agent of a fresh id on `server`, with handlers added by `setup(agent)`. */
export function agentOf(server, setup, options) {
  const agent = new Agent(clientOf(server), options);
  setup?.(agent);
  return agent;
}

/** The Python SDK's interpreter (a venv with `colloquy` installed), or null. */
export function pythonSdk() {
  const python = process.env.COLLOQUY_PYSDK_PYTHON;
  return python && existsSync(python) ? python : null;
}
