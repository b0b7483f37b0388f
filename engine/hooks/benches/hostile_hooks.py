#!/usr/bin/env python3
"""Hostile hooks against a release `colloquy serve` (issue 32's probe, repeatable).

Starts `target/release/colloquy serve` on a loopback port over the built-in templates plus
`spinner`, a request protocol whose `on_start` hook loops for ever, with the hook budget
raised to the issue's 4 s. Then, in one run:

1. baseline: one client starts request conversations (no hook) one after another, alone;
2. hostile: the same while N spinning hook calls run at once (N > cores);
3. SIGTERM while N hooks spin, and how long the server takes to exit.

Prints the plain client's p50/p99/max in both phases (and their ratio), each spinning call's
answer time and status, and the exit time. Needs `wat2wasm` (wabt; scripts/setup.sh installs
it) and a release build: `cargo build --release -p colloquy --bin colloquy`.

    python3 engine/hooks/benches/hostile_hooks.py [--spinners 4] [--starts 200]
"""

import argparse
import http.client
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
BUDGET_MS = 4000

SPIN_WAT = """(module
  (memory (export "memory") 1)
  (func (export "hooks_abi_version") (result i32) (i32.const 1))
  (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32) (i32.const 1024))
  (func (export "start") (param i32 i32) (result i32) (loop $forever (br $forever)) (i32.const 0)))
"""


def templates(dir_):
    target = os.path.join(dir_, "templates")
    os.makedirs(target)
    for name in ["fipa-request.yaml", "fipa-query.yaml", "fipa-contract-net.yaml"]:
        shutil.copy(os.path.join(ROOT, "templates", name), target)
    wat = os.path.join(dir_, "spin.wat")
    with open(wat, "w") as f:
        f.write(SPIN_WAT)
    subprocess.run(["wat2wasm", wat, "-o", os.path.join(target, "spin.wasm")], check=True)
    with open(os.path.join(target, "fipa-request.yaml")) as f:
        request = f.read()
    spinner = request.replace("name: fipa-request", "name: spinner").replace(
        "spec:\n",
        "spec:\n  hooks:\n    module: spin.wasm\n    events: [on_start]\n"
        f"    limits: {{ timeout_ms: {BUDGET_MS} }}\n",
        1,
    )
    with open(os.path.join(target, "spinner.yaml"), "w") as f:
        f.write(spinner)
    return target


def start(port, agent, template, conversation_id):
    body = {"template": template, "participants": ["bob"], "conversation_id": conversation_id}
    if template == "fipa-request":
        body["message"] = {"performative": "request", "content": {"action": "archive"}}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    began = time.monotonic()
    connection.request(
        "POST",
        "/v1/conversations",
        json.dumps(body),
        {"Content-Type": "application/json", "X-Agent-Id": agent},
    )
    response = connection.getresponse()
    answer = response.read()
    took = time.monotonic() - began
    connection.close()
    return response.status, took, answer


def plain_starts(port, count, prefix):
    latencies = []
    for index in range(count):
        status, took, answer = start(port, "carol", "fipa-request", f"{prefix}-{index}")
        assert status == 201, (status, answer)
        latencies.append(took)
    return latencies


def quantiles(latencies):
    ordered = sorted(latencies)
    at = lambda p: ordered[min(len(ordered) - 1, round((len(ordered) - 1) * p))]
    return at(0.5), at(0.99), ordered[-1]


def spin(port, count, prefix, results):
    def one(index):
        results.append(start(port, "alice", "spinner", f"{prefix}-{index}"))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spinners", type=int, default=4)
    parser.add_argument("--starts", type=int, default=200)
    args = parser.parse_args()
    binary = os.path.join(ROOT, "target", "release", "colloquy")
    scratch = tempfile.mkdtemp(prefix="colloquy-hostile-")
    server = subprocess.Popen(
        [binary, "serve", "--listen", "127.0.0.1:0", "--store", "memory",
         "--templates", templates(scratch), "--data-dir", os.path.join(scratch, "data"),
         "--max-hook-timeout-ms", str(BUDGET_MS)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    try:
        port = None
        for line in server.stdout:
            if line.startswith("colloquy listening on http://"):
                port = int(line.rsplit(":", 1)[1])
                break
        threading.Thread(target=lambda: [None for _ in server.stdout], daemon=True).start()
        plain_starts(port, 20, "warm-up")

        alone = plain_starts(port, args.starts, "alone")
        results = []
        spinning = spin(port, args.spinners, "spin", results)
        time.sleep(0.2)
        beside = plain_starts(port, args.starts, "beside")
        for thread in spinning:
            thread.join()

        a50, a99, amax = quantiles(alone)
        b50, b99, bmax = quantiles(beside)
        ms = lambda s: f"{s * 1000:.1f} ms"
        print(f"plain starts alone:            p50 {ms(a50)}  p99 {ms(a99)}  max {ms(amax)}")
        print(f"beside {args.spinners} spinning hooks ({BUDGET_MS} ms): "
              f"p50 {ms(b50)}  p99 {ms(b99)}  max {ms(bmax)}  (p99 ratio {b99 / a99:.2f})")
        for status, took, answer in sorted(results, key=lambda r: r[1]):
            code = json.loads(answer).get("error", {}).get("code") if answer else None
            print(f"spinning call: {status} {code} after {ms(took)}")

        results = []
        spinning = spin(port, args.spinners, "sigterm", results)
        time.sleep(0.5)
        began = time.monotonic()
        server.send_signal(signal.SIGTERM)
        status = server.wait(timeout=60)
        print(f"SIGTERM with {args.spinners} hooks spinning: exited {status} after "
              f"{ms(time.monotonic() - began)}")
        for thread in spinning:
            thread.join()
    finally:
        if server.poll() is None:
            server.kill()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
