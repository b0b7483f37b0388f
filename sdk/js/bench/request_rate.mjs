// Request conversations per second driven by the JavaScript SDK, next to the same load
// driven by the Rust SDK and the Python SDK, against one `colloquy serve` in the same run (the
// method of sdk/python/bench/request_rate.py, with a third side).
//
// Each side runs in a process of its own on one thread (Node's event loop; asyncio; a
// current-thread tokio runtime) in LANES lanes: a lane is an initiator calling `request` in a
// loop and a participant serving its inbox (`agree`, then `inform`), so LANES conversations
// run at once, each followed through its event stream as the SDKs' helpers do. The sides
// take turns, --rounds times each, rotating which goes first, against the same server; each
// turn warms up, then counts the conversations that end in success during its window.
//
// It prints, per side, the rate and the CPU time (user + system) per conversation of the
// load process and of the server during the windows, then the JavaScript/Rust and
// JavaScript/Python ratios. On a machine shared with other work the rates move with it; CPU
// per conversation barely does.
//
//     cargo build --release -p colloquy --bin colloquy -p colloquy-sdk --example request_rate
//     node sdk/js/bench/request_rate.mjs [--python PYTHON] [--rounds N] [--seconds S]
//
// --python is a python with the Python SDK's dependencies (default: the virtualenv
// sdk/python/run-tests.sh makes); `--sides js,rust` leaves a side out.
// `--drive URL PREFIX LANES WARMUP MEASURE` runs the JavaScript side alone (what the bench
// starts).

import { spawn } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, homedir, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
const TEMPLATES = ["fipa-request.yaml", "fipa-query.yaml", "fipa-contract-net.yaml"];
/** Longest a side may take to warm up and measure, past what it was asked for. */
const SLACK_MS = 60_000;
/**
 * The server keeps completed conversations this long: short, so that its memory stays level
 * over the run (the default, 5 minutes, would hold every conversation of the run).
 */
const RETENTION = "5s";
/** Clock ticks per second of /proc/PID/stat (USER_HZ, 100 on Linux). */
const CLOCK_TICKS = 100;

// -- the JavaScript side --------------------------------------------------------------------

async function drive(url, prefix, lanes, warmupS, measureS) {
  const { Agent, Client, Outcome } = await import("@colloquy/sdk");
  const counts = { succeeded: 0, failed: 0 };

  async function lane(n) {
    const participantId = `${prefix}p${n}`;
    const initiatorId = `${prefix}i${n}`;
    const participant = new Agent(new Client(url, participantId, `${participantId}-token`)).on(
      "request",
      { template: "fipa-request" },
      async (msg) => {
        await msg.agree();
        await msg.inform({ done: true });
      },
    );
    participant.run().catch((error) => console.error(`participant ${participantId}:`, error));
    const initiator = new Client(url, initiatorId, `${initiatorId}-token`);
    for (;;) {
      let ok = false;
      try {
        const answer = await initiator.request(participantId, { action: "bench" });
        ok = answer.outcome === Outcome.SUCCESS;
      } catch {
        // Counted, not fatal: the rate is what is measured.
      }
      counts[ok ? "succeeded" : "failed"] += 1;
    }
  }

  for (let n = 0; n < lanes; n += 1) lane(n);
  await new Promise((done) => setTimeout(done, warmupS * 1000));
  console.log("measuring");
  const before = { ...counts };
  await new Promise((done) => setTimeout(done, measureS * 1000));
  console.log(`done ${counts.succeeded - before.succeeded} ${counts.failed - before.failed}`);
  // Blocking the only thread stops every lane: the process uses no CPU while it waits.
  readFileSync(0);
  process.exit(0);
}

// -- the bench ------------------------------------------------------------------------------

/** User + system CPU time of a process (all its threads), from /proc, in seconds. */
function cpuSeconds(pid) {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(")").pop().trim().split(/\s+/);
  return (Number(fields[11]) + Number(fields[12])) / CLOCK_TICKS;
}

async function startServer(colloquy, workdir, initiators, participants) {
  const templates = join(workdir, "templates");
  mkdirSync(templates);
  for (const name of TEMPLATES) copyFileSync(join(REPO, "templates", name), join(templates, name));
  const lines = ["agents:"];
  for (const agent of participants) lines.push(`  - id: ${agent}`, `    token: ${agent}-token`);
  // Initiators follow event streams only: an inbox would keep every reply.
  for (const agent of initiators) lines.push(`  - id: ${agent}`, `    token: ${agent}-token`, "    inbox: false");
  writeFileSync(join(workdir, "agents.yaml"), `${lines.join("\n")}\n`);
  const server = spawn(
    colloquy,
    ["serve", "--listen", "127.0.0.1:0", "--store", "memory", "--retention", RETENTION, "--templates", templates,
      "--agents", join(workdir, "agents.yaml"), "--data-dir", join(workdir, "data")],
    { stdio: ["ignore", "pipe", "ignore"], env: { ...process.env, RUST_LOG: "error" } },
  );
  const url = await new Promise((done, fail) => {
    let printed = "";
    server.stdout.on("data", (chunk) => {
      printed += chunk;
      const found = /^colloquy listening on (\S+)/m.exec(printed);
      if (found) done(found[1]);
    });
    server.on("exit", (code) => fail(new Error(`colloquy serve exited (${code}): ${printed}`)));
  });
  server.stdout.resume();
  return { server, url };
}

/** One side's turn: its rate's counts and the CPU it and the server spent in the window. */
async function turn(command, env, serverPid, measureS) {
  const side = spawn(command[0], command.slice(1), { stdio: ["pipe", "pipe", "inherit"], env });
  const lines = createInterface({ input: side.stdout })[Symbol.asyncIterator]();
  const timer = setTimeout(() => side.kill("SIGKILL"), SLACK_MS + measureS * 1000 * 3);
  try {
    const first = (await lines.next()).value?.trim();
    if (first !== "measuring") throw new Error(`${command.join(" ")}: expected \`measuring\`, got ${first}`);
    const clientBefore = cpuSeconds(side.pid);
    const serverBefore = cpuSeconds(serverPid);
    const done = ((await lines.next()).value ?? "").trim().split(/\s+/);
    const clientAfter = cpuSeconds(side.pid);
    const serverAfter = cpuSeconds(serverPid);
    if (done.length !== 3 || done[0] !== "done") throw new Error(`${command[0]}: expected \`done N F\`, got ${done}`);
    return {
      conversations: Number(done[1]),
      failures: Number(done[2]),
      seconds: measureS,
      clientCpu: clientAfter - clientBefore,
      serverCpu: serverAfter - serverBefore,
    };
  } finally {
    clearTimeout(timer);
    const gone = new Promise((done) => side.once("exit", done));
    side.stdin.end("\n");
    await gone;
  }
}

function summary(total) {
  const rate = total.conversations / total.seconds;
  const clientUs = (total.clientCpu / total.conversations) * 1e6;
  const serverUs = (total.serverCpu / total.conversations) * 1e6;
  return { rate, clientUs, serverUs };
}

function line(label, total) {
  const { rate, clientUs, serverUs } = summary(total);
  return (
    `${label.padEnd(6)}: ${rate.toFixed(1).padStart(8)} conversations/s, client ${clientUs.toFixed(0).padStart(7)} µs ` +
    `CPU/conversation, server ${serverUs.toFixed(0).padStart(5)} µs CPU/conversation, ${total.failures} failed`
  );
}

async function main() {
  const target = join(process.env.CARGO_TARGET_DIR || join(REPO, "target"), "release");
  const venv = process.env.COLLOQUY_PYSDK_VENV || join(homedir(), ".cache/colloquy-pysdk-venv");
  const { values } = parseArgs({
    options: {
      colloquy: { type: "string", default: join(target, "colloquy") },
      rust: { type: "string", default: join(target, "examples", "request_rate") },
      python: { type: "string", default: process.env.COLLOQUY_PYSDK_PYTHON || join(venv, "bin/python") },
      sides: { type: "string", default: "js,rust,python" },
      lanes: { type: "string", default: "64" },
      seconds: { type: "string", default: "10" },
      warmup: { type: "string", default: "3" },
      rounds: { type: "string", default: "2" },
      drive: { type: "string", multiple: true },
    },
    allowPositionals: true,
  });
  if (values.drive) {
    const [url, prefix, lanes, warmup, measure] = process.argv.slice(process.argv.indexOf("--drive") + 1);
    await drive(url, prefix, Number(lanes), Number(warmup), Number(measure));
    return;
  }
  const sides = values.sides.split(",");
  const lanes = Number(values.lanes);
  const seconds = Number(values.seconds);
  const warmup = Number(values.warmup);
  const rounds = Number(values.rounds);
  const needed = [values.colloquy, ...(sides.includes("rust") ? [values.rust] : []), ...(sides.includes("python") ? [values.python] : [])];
  for (const file of needed) {
    if (!existsSync(file)) {
      console.error(`${file} is missing: cargo build --release -p colloquy --bin colloquy -p colloquy-sdk --example request_rate; bash sdk/python/run-tests.sh`);
      process.exit(1);
    }
  }
  const prefixes = new Map();
  for (let r = 0; r < rounds; r += 1) for (const side of sides) prefixes.set(`${r}/${side}`, `r${r}${side.slice(0, 2)}-`);
  const initiators = [];
  const participants = [];
  for (const prefix of prefixes.values()) {
    for (let n = 0; n < lanes; n += 1) {
      initiators.push(`${prefix}i${n}`);
      participants.push(`${prefix}p${n}`);
    }
  }
  const totals = Object.fromEntries(sides.map((side) => [side, { conversations: 0, failures: 0, seconds: 0, clientCpu: 0, serverCpu: 0 }]));
  const workdir = mkdtempSync(join(tmpdir(), "colloquy-js-request-rate-"));
  const { server, url } = await startServer(values.colloquy, workdir, initiators, participants);
  try {
    for (let r = 0; r < rounds; r += 1) {
      // Rotated, so that no side always goes first (or last) in a round.
      const order = sides.map((_, k) => sides[(k + r) % sides.length]);
      for (const side of order) {
        const prefix = prefixes.get(`${r}/${side}`);
        const timing = [String(lanes), String(warmup), String(seconds)];
        let command;
        let env = process.env;
        if (side === "js") command = [process.execPath, fileURLToPath(import.meta.url), "--drive", url, prefix, ...timing];
        else if (side === "rust") command = [values.rust, url, prefix, ...timing];
        else {
          command = [values.python, join(REPO, "sdk/python/bench/request_rate.py"), "--drive", url, prefix, ...timing];
          // This tree's Python SDK, whatever tree the shared venv's editable install names.
          env = { ...process.env, PYTHONPATH: join(REPO, "sdk/python/src") };
        }
        const got = await turn(command, env, server.pid, seconds);
        console.log(`round ${r + 1} ${line(side, got)}`);
        for (const key of Object.keys(got)) totals[side][key] += got[key];
      }
    }
  } finally {
    server.kill("SIGKILL");
    rmSync(workdir, { recursive: true, force: true });
  }
  console.log(`\n${lanes} conversations at once, ${rounds} × ${seconds} s per side, ${availableParallelism()} CPUs shared by the server and the load`);
  for (const side of sides) console.log(line(side, totals[side]));
  const js = summary(totals.js ?? { conversations: 1, seconds: 1, clientCpu: 0, serverCpu: 0 });
  for (const other of sides.filter((side) => side !== "js")) {
    const them = summary(totals[other]);
    console.log(`js/${other}: rate ${(js.rate / them.rate).toFixed(2)}×, client CPU per conversation ${(js.clientUs / them.clientUs).toFixed(2)}×`);
  }
}

await main();
