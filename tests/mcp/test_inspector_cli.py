"""The MCP Inspector's CLI (`@modelcontextprotocol/inspector --cli`, on Node 22; `run.sh`
installs it beside the conformance suite) against `/mcp` with an agent's token: what a
developer trying the server by hand sees."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import Server, node_tool, token

pytestmark = pytest.mark.timeout(120)


def inspector(server: Server, catalog: Path, *arguments: str) -> dict:
    node, cli = node_tool(
        "@modelcontextprotocol/inspector/clients/launcher/build/index.js", "MCP Inspector")
    run = subprocess.run(
        [str(node), str(cli), "--cli", server.mcp,
         "--header", f"Authorization: Bearer {token('watcher')}", *arguments],
        capture_output=True, text=True, timeout=90,
        # Its catalog of servers is written in the test's own directory, not in $HOME.
        env=os.environ | {"MCP_CATALOG_PATH": str(catalog / "mcp.json")})
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


def test_the_inspector_lists_and_calls_the_tools(server: Server, tmp_path: Path) -> None:
    tools = inspector(server, tmp_path, "--method", "tools/list")["tools"]
    assert "send_message" in [tool["name"] for tool in tools]
    called = inspector(server, tmp_path, "--method", "tools/call", "--tool-name", "list_templates",
                       "--tool-arg", "name=fipa-query")
    assert called["structuredContent"]["templates"][0]["name"] == "fipa-query"


def test_the_inspector_reads_resources_and_prompts(server: Server, tmp_path: Path) -> None:
    resources = inspector(server, tmp_path, "--method", "resources/list")["resources"]
    assert "colloquy://inbox/watcher" in [resource["uri"] for resource in resources]
    prompt = inspector(server, tmp_path, "--method", "prompts/get", "--prompt-name", "take_part",
                       "--prompt-args", "template=fipa-request", "role=initiator")
    assert "as its initiator" in prompt["messages"][0]["content"]["text"]
