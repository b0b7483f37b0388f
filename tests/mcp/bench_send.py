"""How much a move costs through `/mcp` next to the same move over the HTTP API, on one
server: a participant's `agree` in a fresh fipa-request conversation, sent either as
`POST /v1/conversations/{id}/messages` or as an MCP `tools/call send_message` (2026-07-28,
stateless), both by the same HTTP client (httpx2), in alternating blocks. Prints the round
trip's median and p99 per side and the server's CPU per move (from /proc), with the ratios.

    COLLOQUY_BIN=/path/to/release/colloquy python tests/mcp/bench_send.py [MOVES] [BLOCK]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

VERSION = "2026-07-28"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def start_server(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    agents = workdir / "agents.yaml"
    agents.write_text("agents:\n  - {id: buyer, token: buyer-token, inbox: false}\n"
                      "  - {id: seller, token: seller-token}\n")
    templates = Path(__file__).resolve().parents[2] / "templates"
    process = subprocess.Popen(
        [os.environ["COLLOQUY_BIN"], "serve", "--listen", "127.0.0.1:0", "--store", "memory",
         "--templates", str(templates), "--agents", str(agents),
         "--data-dir", str(workdir / "data")],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(b"colloquy listening on "):
            return process, line.split()[-1].decode()
    raise RuntimeError("the server did not start")


def main() -> None:
    moves = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    block = int(sys.argv[2]) if len(sys.argv) > 2 else 100
    with tempfile.TemporaryDirectory() as tmp:
        process, url = start_server(Path(tmp))
        try:
            run(url, process.pid, moves, block)
        finally:
            process.terminate()
            process.wait(timeout=20)


def run(url: str, pid: int, moves: int, block: int) -> None:
    buyer = httpx2.Client(base_url=url, headers={"Authorization": "Bearer buyer-token"})
    seller = httpx2.Client(base_url=url, headers={"Authorization": "Bearer seller-token"})
    mcp_headers = {"Accept": "application/json, text/event-stream",
                   "MCP-Protocol-Version": VERSION, "Mcp-Method": "tools/call",
                   "Mcp-Name": "send_message"}

    def fresh() -> str:
        started = buyer.post("/v1/conversations", json={
            "template": "fipa-request", "participants": ["seller"],
            "message": {"performative": "request", "content": {"action": "quote"}}})
        started.raise_for_status()
        return started.json()["id"]

    def over_http(conversation: str) -> None:
        answer = seller.post(f"/v1/conversations/{conversation}/messages",
                             json={"performative": "agree", "content": {}})
        assert answer.status_code == 202, answer.text

    def over_mcp(conversation: str, n: int) -> None:
        answer = seller.post("/mcp", headers=mcp_headers, json={
            "jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {
                "name": "send_message",
                "arguments": {"conversation_id": conversation, "performative": "agree",
                              "content": {}},
                "_meta": {"io.modelcontextprotocol/protocolVersion": VERSION,
                          "io.modelcontextprotocol/clientCapabilities": {}}}})
        assert answer.status_code == 200, answer.text
        assert answer.json()["result"]["structuredContent"]["result"] == "accepted", answer.text

    latencies: dict[str, list[float]] = {"http": [], "mcp": []}
    cpu: dict[str, float] = {"http": 0.0, "mcp": 0.0}
    for warm in range(50):
        over_http(fresh())
        over_mcp(fresh(), warm)
    n = 0
    while len(latencies["mcp"]) < moves:
        for side in ("http", "mcp"):
            conversations = [fresh() for _ in range(block)]
            before = cpu_seconds(pid)
            for conversation in conversations:
                n += 1
                began = time.perf_counter()
                if side == "http":
                    over_http(conversation)
                else:
                    over_mcp(conversation, n)
                latencies[side].append(time.perf_counter() - began)
            cpu[side] += cpu_seconds(pid) - before
    for side in ("http", "mcp"):
        times = sorted(latencies[side])
        p50 = statistics.median(times) * 1e6
        p99 = times[int(len(times) * 0.99)] * 1e6
        per_move = cpu[side] / len(times) * 1e6
        print(f"{side:5} moves {len(times)}  round trip p50 {p50:7.0f} µs  p99 {p99:7.0f} µs  "
              f"server CPU {per_move:6.0f} µs/move")
    ratio = lambda f: f(latencies["mcp"]) / f(latencies["http"])  # noqa: E731
    p99 = lambda t: sorted(t)[int(len(t) * 0.99)]  # noqa: E731
    print(f"mcp/http: p50 {ratio(statistics.median):.2f}x  p99 {ratio(p99):.2f}x  "
          f"server CPU {cpu['mcp'] / cpu['http']:.2f}x")


if __name__ == "__main__":
    main()
