"""Fixtures: a real ``colloquy serve`` on loopback, started from the built binary, and
agents with fresh ids (so no test reads another's inbox).

The binary is ``$COLLOQUY_BIN``, else ``$CARGO_TARGET_DIR/debug/colloquy``, else the
workspace's ``target/debug/colloquy`` (``cargo test --workspace`` or ``cargo build -p
colloquy --bin colloquy`` builds it). Without it the tests are skipped, except under
``CI=true``, where they fail.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import AsyncIterator, Callable, Iterator, Optional

import pytest

from colloquy import Agent, Client

REPO = Path(__file__).resolve().parents[3]
#: Agent ids the token-mode server knows: `agent-0` … ; each one's token is `<id>-token`.
AGENT_POOL = 400
ADMIN_TOKEN = "admin-token"
#: Longest wait for a server to print its address.
START_WAIT = 60.0
#: Longest wait for a server to exit after a signal.
STOP_WAIT = 30.0
BUILTIN_TEMPLATES = ("fipa-request.yaml", "fipa-query.yaml", "fipa-contract-net.yaml")


def _missing(what: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} (CI=true: the test command builds it before these tests)")
    pytest.skip(what)


def target_dir() -> Path:
    return Path(os.environ.get("CARGO_TARGET_DIR") or REPO / "target")


def colloquy_binary() -> Path:
    explicit = os.environ.get("COLLOQUY_BIN")
    binary = Path(explicit) if explicit else target_dir() / "debug" / "colloquy"
    if not binary.is_file():
        _missing(f"no colloquy binary at {binary}: cargo build -p colloquy --bin colloquy")
    return binary


def agents_yaml() -> str:
    lines = [f"admin_token: {ADMIN_TOKEN}", "agents:"]
    for n in range(AGENT_POOL):
        lines += [f"  - id: agent-{n}", f"    token: agent-{n}-token"]
    return "\n".join(lines) + "\n"


class Server:
    """A ``colloquy serve`` process on loopback; killed at teardown."""

    def __init__(self, workdir: Path, store: str = "memory", policy_manager: Optional[str] = None,
                 *, agents: Optional[str] = None, extra_args: tuple[str, ...] = ()):
        self.workdir = workdir
        # More `colloquy serve` options (`--audit-key`, say).
        self.extra_args = extra_args
        # `sqlite`: a SQLite file of the server's own, kept across restarts.
        self.store = f"sqlite:{workdir / 'colloquy.db'}" if store == "sqlite" else store
        # A followed policy manager replaces the template directory.
        self.policy_manager = policy_manager
        self.templates = None if policy_manager else self._builtin_templates()
        self.agents_file = workdir / "agents.yaml"
        self.agents_file.write_text(agents if agents is not None else agents_yaml())
        self.process: Optional[subprocess.Popen[bytes]] = None
        self.url = ""
        self.starts = 0

    def _builtin_templates(self) -> Path:
        # Copied, so work on the tree's examples cannot change what these tests run.
        target = self.workdir / "templates"
        target.mkdir(exist_ok=True)
        for name in BUILTIN_TEMPLATES:
            shutil.copy(REPO / "templates" / name, target / name)
        return target

    def start(self, listen: str = "127.0.0.1:0") -> Server:
        self.starts += 1
        out = self.workdir / f"serve-{self.starts}.out"
        log = self.workdir / f"serve-{self.starts}.log"
        policy = (["--policy-manager", self.policy_manager] if self.policy_manager
                  else ["--templates", str(self.templates)])
        with open(out, "wb") as stdout, open(log, "wb") as stderr:
            self.process = subprocess.Popen(
                [str(colloquy_binary()), "serve", "--listen", listen, "--store", self.store,
                 *policy, "--agents", str(self.agents_file),
                 "--data-dir", str(self.workdir / "data"), *self.extra_args],
                stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                env={**os.environ, "RUST_LOG": "warn"},
            )
        deadline = time.monotonic() + START_WAIT
        while time.monotonic() < deadline:
            for line in out.read_text(errors="replace").splitlines():
                if line.startswith("colloquy listening on "):
                    self.url = line.removeprefix("colloquy listening on ").strip()
                    return self
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"colloquy serve did not start; see {log}:\n{log.read_text()}")

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def kill(self) -> None:
        """``kill -9``: the server drops every connection, mid-stream."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(STOP_WAIT)

    def terminate(self) -> int:
        """SIGTERM, as a service manager stops it; the exit status."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(STOP_WAIT)


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One token-mode server (memory store) for the session."""
    started = Server(tmp_path_factory.mktemp("serve")).start()
    yield started
    started.kill()


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Servers of the test's own (a SQLite store, a followed policy manager), killed
    after it."""
    servers: list[Server] = []

    def make(store: str = "memory", policy_manager: Optional[str] = None) -> Server:
        workdir = tmp_path / f"server-{len(servers)}"
        workdir.mkdir()
        made = Server(workdir, store, policy_manager)
        servers.append(made)
        return made

    yield make
    for made in servers:
        made.kill()


_ids = itertools.count()


def fresh_agent_id() -> str:
    """An agent id of the pool no test has used yet in this session."""
    n = next(_ids)
    assert n < AGENT_POOL, "the agent pool is used up: raise AGENT_POOL"
    return f"agent-{n}"


@pytest.fixture
async def agents(server: Server) -> AsyncIterator[Callable[..., Client]]:
    """Makes clients of fresh agents of the session server: ``agents()``; closed after."""
    made: list[Client] = []

    def make(url: Optional[str] = None, agent_id: Optional[str] = None) -> Client:
        agent_id = agent_id or fresh_agent_id()
        client = Client(url or server.url, agent_id, f"{agent_id}-token")
        made.append(client)
        return client

    yield make
    for client in made:
        await client.aclose()


#: Longest an agent's run may take to stop once asked (its grace is shorter).
AGENT_STOP_WAIT = 20.0


@pytest.fixture
async def serving(agents: Callable[..., Client]) -> AsyncIterator[Callable[..., "asyncio.Task[None]"]]:
    """Runs agents in the background: ``serving(agent)``; stopped (gracefully) after the
    test, before the clients close, and a run that failed fails the test."""
    runs: list[tuple[Agent, asyncio.Task[None]]] = []

    def start(agent: Agent, after: int = 0) -> asyncio.Task[None]:
        task = asyncio.create_task(agent.run(after, grace=5.0))
        runs.append((agent, task))
        return task

    yield start
    for agent, _ in runs:
        agent.stop()
    for _, task in runs:
        await asyncio.wait_for(task, AGENT_STOP_WAIT)
