"""The MCP conformance suite (`@modelcontextprotocol/conformance`, run by Node 22 from npm's
`node` package: `run.sh` installs both outside the clone) against `/mcp`, reached through a
proxy that adds an agent's token (the suite cannot send one). The scenarios that apply to
this surface; every check must pass, except those the suite itself marks untestable here
(they call diagnostic tools, `test_missing_capability` and the like, that only the suite's
reference servers have)."""

from __future__ import annotations

import json
import subprocess
from typing import Any, Iterator

import pytest

from conftest import Server, node_tool, token
from credential_proxy import RunningProxy

SCENARIOS = ["server-stateless", "tools-list", "dns-rebinding-protection", "caching",
             "resources-list", "sep-2164-resource-not-found"]
#: Longest a scenario may run.
SCENARIO_TIMEOUT = 300


@pytest.fixture(scope="module")
def proxy(server: Server) -> Iterator[RunningProxy]:
    running = RunningProxy(server.url, token("watcher"))
    yield running
    running.stop()


def checks_of(output: str) -> list[dict[str, Any]]:
    """The checks `--verbose` prints: a JSON array after the scenario's first line."""
    start = output.index("\n[") + 1
    checks, _ = json.JSONDecoder().raw_decode(output, start)
    return checks


@pytest.mark.timeout(SCENARIO_TIMEOUT + 30)
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_conformance_scenario(proxy: RunningProxy, scenario: str) -> None:
    node, suite = node_tool("@modelcontextprotocol/conformance/dist/index.js",
                            "conformance suite")
    run = subprocess.run(
        [str(node), str(suite), "server", "--url", f"{proxy.url}/mcp", "--scenario", scenario,
         "--verbose"],
        capture_output=True, text=True, timeout=SCENARIO_TIMEOUT)
    checks = checks_of(run.stdout)
    assert checks, run.stdout
    failed = [f"{c['id']}: {c.get('errorMessage', '')}" for c in checks
              if c["status"] not in ("SUCCESS", "SKIPPED")
              and not c.get("details", {}).get("untestable")]
    assert failed == [], run.stdout[-4000:]
    assert any(c["status"] == "SUCCESS" for c in checks)
