"""Request conversations per second driven by the Python SDK, next to the same load driven by
the Rust SDK, against one ``colloquy serve`` in the same run.

Each side runs in a process of its own, one thread each (asyncio; a current-thread tokio
runtime), in ``LANES`` lanes: a lane is an initiator calling ``request`` in a loop and a
participant serving its inbox (``agree``, then ``inform``), so ``LANES`` conversations run at
once, each one followed through its event stream as the SDKs' helpers do. The sides take
turns, ``--rounds`` times each, alternating which goes first, against the same server; each
turn warms up, then counts the conversations that end in success during its window.

It prints, per side, the rate and the CPU time (user + system) per conversation of the load
process and of the server during the windows, then the Python/Rust ratios. On a machine
shared with other work the rates move with it; CPU per conversation barely does.

    cargo build --release -p colloquy --bin colloquy -p colloquy-sdk --example request_rate
    python sdk/python/bench/request_rate.py        # from a venv with sdk/python installed

``--drive URL PREFIX LANES WARMUP MEASURE`` runs the Python side alone (what the bench starts).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
TEMPLATES = ("fipa-request.yaml", "fipa-query.yaml", "fipa-contract-net.yaml")
#: Longest a side may take to warm up and measure, past what it was asked for.
SLACK_SECONDS = 60.0
#: The server keeps completed conversations this long: short, so that its memory stays level
#: over the run (the default, 5 minutes, would hold every conversation of the run).
RETENTION = "5s"


# -- the Python side -----------------------------------------------------------------------


async def drive(url: str, prefix: str, lanes: int, warmup: float, measure: float) -> None:
    from colloquy import Agent, Client, Incoming, Outcome

    counts = {"succeeded": 0, "failed": 0}

    async def lane(n: int) -> None:
        participant_id, initiator_id = f"{prefix}p{n}", f"{prefix}i{n}"
        participant = Agent(Client(url, participant_id, f"{participant_id}-token"))

        @participant.on("request", template="fipa-request")
        async def act(msg: Incoming) -> None:
            await msg.agree()
            await msg.inform({"done": True})

        asyncio.create_task(participant.run())
        initiator = Client(url, initiator_id, f"{initiator_id}-token")
        while True:
            try:
                answer = await initiator.request(participant_id, {"action": "bench"})
                ok = answer.outcome == Outcome.SUCCESS
            except Exception:  # counted, not fatal: the rate is what is measured
                ok = False
            counts["succeeded" if ok else "failed"] += 1

    lanes_running = [asyncio.create_task(lane(n)) for n in range(lanes)]
    await asyncio.sleep(warmup)
    print("measuring", flush=True)
    before = dict(counts)
    await asyncio.sleep(measure)
    print(f"done {counts['succeeded'] - before['succeeded']} "
          f"{counts['failed'] - before['failed']}", flush=True)
    # Blocking the only thread stops every lane: the process uses no CPU while it waits.
    sys.stdin.readline()
    del lanes_running
    os._exit(0)


# -- the bench -----------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Totals:
    conversations: int = 0
    failures: int = 0
    seconds: float = 0.0
    client_cpu: float = 0.0
    server_cpu: float = 0.0

    def rate(self) -> float:
        return self.conversations / self.seconds

    def client_us(self) -> float:
        return self.client_cpu / self.conversations * 1e6

    def server_us(self) -> float:
        return self.server_cpu / self.conversations * 1e6


def start_server(
    colloquy: Path, workdir: Path, initiators: list[str], participants: list[str]
) -> tuple[subprocess.Popen[bytes], str]:
    templates = workdir / "templates"
    templates.mkdir()
    for name in TEMPLATES:
        shutil.copy(REPO / "templates" / name, templates / name)
    lines = ["agents:"]
    for agent in participants:
        lines += [f"  - id: {agent}", f"    token: {agent}-token"]
    for agent in initiators:
        # Initiators follow event streams only: an inbox would keep every reply.
        lines += [f"  - id: {agent}", f"    token: {agent}-token", "    inbox: false"]
    (workdir / "agents.yaml").write_text("\n".join(lines) + "\n")
    out = workdir / "serve.out"
    with open(out, "wb") as stdout:
        server = subprocess.Popen(
            [str(colloquy), "serve", "--listen", "127.0.0.1:0", "--store", "memory",
             "--retention", RETENTION, "--templates", str(templates),
             "--agents", str(workdir / "agents.yaml"), "--data-dir", str(workdir / "data")],
            stdout=stdout, stderr=subprocess.DEVNULL, env={**os.environ, "RUST_LOG": "error"},
        )
    for _ in range(600):
        for line in out.read_text().splitlines():
            if line.startswith("colloquy listening on "):
                return server, line.removeprefix("colloquy listening on ").strip()
        if server.poll() is not None:
            break
        subprocess.run(["sleep", "0.05"], check=True)
    server.kill()
    sys.exit(f"colloquy serve did not start: {out.read_text()}")


def turn(command: list[str], server_pid: int, warmup: float, measure: float) -> Totals:
    side = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert side.stdout is not None and side.stdin is not None
    line = side.stdout.readline().strip()
    if line != "measuring":
        side.kill()
        sys.exit(f"{command[0]}: expected `measuring`, got {line!r}")
    client_before, server_before = cpu_seconds(side.pid), cpu_seconds(server_pid)
    line = side.stdout.readline().split()
    client_after, server_after = cpu_seconds(side.pid), cpu_seconds(server_pid)
    side.stdin.write("\n")
    side.stdin.flush()
    side.wait(SLACK_SECONDS)
    if len(line) != 3 or line[0] != "done":
        sys.exit(f"{command[0]}: expected `done N F`, got {line!r}")
    return Totals(int(line[1]), int(line[2]), measure, client_after - client_before,
                  server_after - server_before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target") / "release"
    parser.add_argument("--colloquy", type=Path, default=target / "colloquy")
    parser.add_argument("--rust", type=Path, default=target / "examples" / "request_rate",
                        help="the Rust SDK's side (sdk/examples/request_rate.rs)")
    parser.add_argument("--lanes", type=int, default=64, help="conversations at once")
    parser.add_argument("--seconds", type=float, default=10.0, help="each turn's window")
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2, help="turns per side")
    parser.add_argument("--drive", nargs=5, metavar=("URL", "PREFIX", "LANES", "WARMUP", "MEASURE"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drive:
        url, prefix, lanes, warmup, measure = args.drive
        asyncio.run(drive(url, prefix, int(lanes), float(warmup), float(measure)))
        return
    for binary in (args.colloquy, args.rust):
        if not binary.is_file():
            sys.exit(f"{binary} is missing: cargo build --release -p colloquy --bin "
                     "colloquy -p colloquy-sdk --example request_rate")

    sides = ("python", "rust")
    prefixes = {(r, side): f"r{r}{side[:2]}-" for r in range(args.rounds) for side in sides}
    initiators, participants = (
        [f"{prefix}{role}{n}" for prefix in prefixes.values() for n in range(args.lanes)]
        for role in "ip"
    )
    totals = {side: Totals() for side in sides}
    with tempfile.TemporaryDirectory(prefix="colloquy-request-rate-") as workdir:
        server, url = start_server(args.colloquy, Path(workdir), initiators, participants)
        try:
            for r in range(args.rounds):
                for side in (sides if r % 2 == 0 else sides[::-1]):
                    prefix = prefixes[(r, side)]
                    timing = [str(args.lanes), str(args.warmup), str(args.seconds)]
                    command = ([sys.executable, __file__, "--drive", url, prefix, *timing]
                               if side == "python" else [str(args.rust), url, prefix, *timing])
                    got = turn(command, server.pid, args.warmup, args.seconds)
                    print(f"round {r + 1} {side:6}: {got.rate():8.1f} conversations/s, "
                          f"client {got.client_us():7.0f} µs CPU/conversation, "
                          f"server {got.server_us():5.0f} µs, {got.failures} failed", flush=True)
                    mine = totals[side]
                    mine.conversations += got.conversations
                    mine.failures += got.failures
                    mine.seconds += got.seconds
                    mine.client_cpu += got.client_cpu
                    mine.server_cpu += got.server_cpu
        finally:
            server.kill()
            server.wait()
    python, rust = totals["python"], totals["rust"]
    print(f"\n{args.lanes} conversations at once, {args.rounds} × {args.seconds:g} s per side, "
          f"{os.cpu_count()} CPUs shared by the server and the load")
    for side, total in totals.items():
        print(f"{side:6}: {total.rate():8.1f} conversations/s, client "
              f"{total.client_us():7.0f} µs CPU/conversation, server {total.server_us():5.0f} µs "
              f"CPU/conversation, {total.failures} failed")
    print(f"python/rust: rate {python.rate() / rust.rate():.2f}×, client CPU per conversation "
          f"{python.client_us() / rust.client_us():.2f}×")


if __name__ == "__main__":
    main()
