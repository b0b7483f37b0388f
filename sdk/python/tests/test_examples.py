"""The examples do what their docs say, run as a user runs them (``python examples/…``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from conftest import fresh_agent_id

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: Longest an example may take to do its part.
EXAMPLE_WAIT = 60.0


def run(script: str, *args: str, env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args], env={**os.environ, **env},
        capture_output=True, text=True, timeout=EXAMPLE_WAIT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_initiator_asks_the_participant(server, tmp_path):
    bob, alice = fresh_agent_id(), fresh_agent_id()
    printed = tmp_path / "participant.out"
    with open(printed, "w") as out:
        participant = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "participant.py"), server.url, bob],
            env={**os.environ, "COLLOQUY_TOKEN": f"{bob}-token"},
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        said = run("initiator.py", server.url, alice, bob,
                   env={"COLLOQUY_TOKEN": f"{alice}-token"})
    finally:
        participant.send_signal(signal.SIGTERM)
        participant.wait(EXAMPLE_WAIT)
    assert "… agree from" in said and "… inform from" in said
    assert "success, final {'done': True}" in said and "{'value': 42}" in said
    assert participant.returncode == 0, printed.read_text()
    assert "request in" in printed.read_text()


def test_the_buyer_takes_the_cheapest_of_three_sellers(server):
    buyer, *sellers = (fresh_agent_id() for _ in range(4))
    tokens = ",".join(f"{name}={name}-token" for name in (buyer, *sellers))
    said = run("contract_net.py", server.url, buyer, *sellers, env={"COLLOQUY_TOKENS": tokens})
    assert f"{sellers[2]} declines" in said
    assert f"{sellers[1]} won at 95: success, {{'delivered': 'widget'}}" in said
