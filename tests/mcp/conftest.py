"""Fixtures: a real ``colloquy serve`` on loopback (agents file, the built-in templates and the
credit-assessment example, whose template refuses out-of-protocol moves), and MCP clients of
the official Python SDK connected to it as one agent each, over Streamable HTTP in either
protocol era or over the ``colloquy mcp`` stdio bridge.

The binary is ``$COLLOQUY_BIN``, else ``$CARGO_TARGET_DIR/debug/colloquy``, else the
workspace's ``target/debug/colloquy``. Without it (or without the example's hook module,
which ``templates/examples/build.sh`` builds) the tests are skipped, except under
``CI=true``, where they fail.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator, Iterator

import httpx2
import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[2]
AGENTS = ["buyer", "seller-1", "seller-2", "loan-desk", "assessor", "watcher"]
ADMIN_TOKEN = "admin-token"
START_WAIT = 60.0
#: The two protocol eras: the 2026-07-28 revision (stateless; `auto` finds it by
#: `server/discover`) and the 2025-11-25 one (an `initialize` handshake and a session).
ERAS = {"modern": "auto", "legacy": "legacy"}


def missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} (CI=true: the test command builds it before these tests)")
    pytest.skip(what)


def binary() -> Path:
    explicit = os.environ.get("COLLOQUY_BIN")
    target = Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")
    path = Path(explicit) if explicit else target / "debug" / "colloquy"
    if not path.is_file():
        missing(f"no colloquy binary at {path}: cargo build -p colloquy --bin colloquy")
    return path


def node_tool(package_file: str, what: str) -> tuple[Path, Path]:
    """Node 22 and a file of an npm package that `run.sh` installs in its npm prefix
    (`$COLLOQUY_MCP_CONFORMANCE`): the conformance suite, the Inspector."""
    root = Path(os.environ.get("COLLOQUY_MCP_CONFORMANCE",
                               Path.home() / ".cache/colloquy-mcp-conformance"))
    node = root / "node_modules/.bin/node"
    tool = root / "node_modules" / package_file
    if not (node.is_file() and tool.is_file()):
        missing(f"no {what} under {root}: tests/mcp/run.sh installs it")
    return node, tool


def token(agent: str) -> str:
    return f"{agent}-token"


class Server:
    """``colloquy serve`` with an agents file, on a loopback port of its choosing."""

    def __init__(self, workdir: Path) -> None:
        templates = workdir / "templates"
        templates.mkdir()
        for name in ("fipa-request.yaml", "fipa-query.yaml", "fipa-contract-net.yaml"):
            shutil.copy(REPO / "templates" / name, templates / name)
        example = REPO / "templates/examples/credit-assessment"
        if not (example / "credit_assessment.wasm").is_file():
            missing("no credit_assessment.wasm: bash templates/examples/build.sh")
        for name in ("credit-assessment.yaml", "credit_assessment.wasm"):
            shutil.copy(example / name, templates / name)
        agents = workdir / "agents.yaml"
        lines = [f"admin_token: {ADMIN_TOKEN}", "agents:"]
        for agent in AGENTS:
            lines += [f"  - id: {agent}", f"    token: {token(agent)}"]
        agents.write_text("\n".join(lines) + "\n")
        self.process = subprocess.Popen(
            [str(binary()), "serve", "--listen", "127.0.0.1:0", "--store", "memory",
             "--templates", str(templates), "--agents", str(agents),
             "--data-dir", str(workdir / "data")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=workdir,
        )
        self.url = ""
        deadline = time.monotonic() + START_WAIT
        assert self.process.stdout is not None
        while time.monotonic() < deadline:
            line = self.process.stdout.readline().decode()
            if not line:
                break
            if line.startswith("colloquy listening on "):
                self.url = line.split()[-1]
                break
        if not self.url:
            self.stop()
            pytest.fail("colloquy serve did not print its address")
        self.mcp = f"{self.url}/mcp"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    running = Server(tmp_path_factory.mktemp("colloquy-mcp"))
    yield running
    running.stop()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@asynccontextmanager
async def connect(server: Server, agent: str, era: str = "modern",
                  **options: Any) -> AsyncIterator[Client]:
    """An MCP client acting as `agent`, over Streamable HTTP in `era`, or over the stdio
    bridge (`era="stdio"`, which speaks the modern era through `colloquy mcp`). `options`
    go to the SDK's `Client` (a `message_handler`, …)."""
    if era == "stdio":
        parameters = StdioServerParameters(
            command=str(binary()),
            args=["mcp", "--server", server.url],
            env={"COLLOQUY_TOKEN": token(agent), "PATH": os.environ.get("PATH", "")},
        )
        async with Client(stdio_client(parameters), mode=ERAS["modern"],
                          read_timeout_seconds=60, **options) as client:
            yield client
        return
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token(agent)}"},
                              timeout=httpx2.Timeout(60.0))
    async with http, Client(streamable_http_client(server.mcp, http_client=http),
                            mode=ERAS[era], read_timeout_seconds=60, **options) as client:
        yield client
