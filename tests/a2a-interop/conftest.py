"""What the interop tests share, whichever a2a-sdk their virtualenv holds (so nothing here
imports `a2a`): where run.sh started the servers, and an HTTP client that notes what it
sent, so a test can say which binding and protocol version the SDK chose."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import httpx
import pytest

# Longer than the longest answer Colloquy makes a client wait for: a blocking send waits
# at most 30 s for the task to end or to want input (docs/a2a.md, section 7).
HTTP_TIMEOUT_S = 40.0


def _required(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.fail(f"{name} is not set: run tests/a2a-interop/run.sh", pytrace=False)
    return value


@pytest.fixture
def colloquy_url() -> str:
    """`colloquy serve` in open development mode, with the fixture agent `tck` at work."""
    return _required("COLLOQUY_A2A_INTEROP_URL").rstrip("/")


@pytest.fixture
def tck_url(colloquy_url: str) -> str:
    """The agent `tck`'s A2A base URL: its cards are under `.well-known/`."""
    return f"{colloquy_url}/a2a/tck"


@dataclass
class Sent:
    """One request the SDK sent: its method, path and `A2A-Version` header (None if none)."""

    method: str
    path: str
    a2a_version: str | None


@dataclass
class SentLog:
    requests: list[Sent] = field(default_factory=list)

    async def note(self, request: httpx.Request) -> None:
        self.requests.append(Sent(request.method, request.url.path,
                                  request.headers.get("A2A-Version")))

    def posts(self) -> list[Sent]:
        return [sent for sent in self.requests if sent.method == "POST"]


@pytest.fixture
def sent() -> SentLog:
    return SentLog()


@pytest.fixture
async def http(sent: SentLog):
    """The httpx client the SDK is given (the user's own, as its ClientConfig allows)."""
    async with httpx.AsyncClient(timeout=HTTP_TIMEOUT_S,
                                 event_hooks={"request": [sent.note]}) as client:
        yield client
