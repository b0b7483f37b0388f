"""The built components, run by the engine, answer as the kit does in plain CPython; the
hostile fixtures fail as they promise; the WASI fixture is refused.

Opt-in: needs a ``colloquy`` binary (``COLLOQUY_BIN=path/to/colloquy``) and the outputs of
``guest-sdk/python/build-examples.sh``. Each case runs ``colloquy hooks call`` (a process
that loads the component from the engine's compile cache: ~1 s; ~25 s the first time a
component is compiled).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import unittest
from pathlib import Path
from typing import Any

from support import KIT, ROOT, event, load_module

from colloquy_hook import handle

BIN = os.environ.get("COLLOQUY_BIN")
BUILT = ROOT / "target" / "hooks" / "python"
CREDIT = ROOT / "templates" / "examples" / "credit-assessment"
#: A template for a fixture: the hook's `config.behaviour` comes from the event file.
FIXTURE_TEMPLATE = """\
apiVersion: colloquy.dev/v1
kind: ConversationTemplate
metadata: {{ name: python-fixture, version: 1.0.0 }}
spec:
  roles:
    participants: {{ min: 1, max: 1 }}
  thread:
    initial: start
    on_expiry: timed_out
    states:
      start:
        transitions:
          - {{ performative: request, from: initiator, to: done }}
      done: {{ terminal: success }}
      timed_out: {{ terminal: timeout }}
  hooks:
    module: {module}
    events: [on_start, on_message, on_timeout]
    limits: {{ memory_bytes: 33554432 }}
"""


def request(amount: Any, purpose: str) -> dict[str, Any]:
    return {"id": "m", "performative": "request", "sender": "desk", "receivers": ["risk"],
            "content": {"amount": amount, "purpose": purpose}}


def reply(performative: str) -> dict[str, Any]:
    return {"id": "m2", "performative": performative, "sender": "risk",
            "receivers": ["desk"], "content": {}}


@unittest.skipUnless(BIN, "set COLLOQUY_BIN to a colloquy binary to run the built components")
class Components(unittest.TestCase):
    def setUp(self) -> None:
        self.scratch = Path(tempfile.mkdtemp(prefix="colloquy-python-components-"))
        self.addCleanup(shutil.rmtree, self.scratch)

    def call(self, template: Path, text: str) -> subprocess.CompletedProcess[str]:
        path = self.scratch / "event.json"
        path.write_text(text)
        return subprocess.run([str(BIN), "hooks", "call", str(template), str(path)],
                              capture_output=True, text=True, check=False, timeout=300)

    def answer(self, template: Path, text: str) -> Any:
        result = self.call(template, text)
        self.assertEqual(result.returncode, 0, result.stderr)
        return json.loads(result.stdout)

    def fixture(self, module: str) -> Path:
        shutil.copy(BUILT / module, self.scratch / module)
        template = self.scratch / "fixture.yaml"
        template.write_text(FIXTURE_TEMPLATE.format(module=module))
        return template

    def test_the_credit_policy_answers_as_in_cpython(self) -> None:
        policy = load_module(CREDIT / "hook-py" / "credit_policy.py", "credit_policy_twin")
        config = {"max_amount": 50000, "special_risk_agent": "special-risk-assessment",
                  "escalation_agent": "human-review"}
        cases = [
            ("on_start", {}),
            ("on_message", {"message": request(60000, "car")}),
            ("on_message", {"message": request(20000, "Crypto mining rig")}),
            ("on_message", {"message": request(20000, "a new car")}),
            ("on_message", {"message": reply("inform")}),
            ("on_message", {"message": reply("refuse")}),
            ("on_timeout", {"timeout": {"kind": "retry", "attempt": 2}}),
            ("on_timeout", {"timeout": {"kind": "retry", "attempt": 3}}),
            ("on_timeout", {"timeout": {"kind": "conversation", "attempt": 0}}),
        ]
        for hook, parts in cases:
            text = event(hook, config=config, **parts)
            with self.subTest(hook=hook, parts=parts):
                expected = json.loads(handle(policy.CreditPolicy(), hook, text))
                got = self.answer(CREDIT / "credit-assessment-py.yaml", text)
                self.assertEqual(got.get("actions", []), expected.get("actions", []))

    def test_the_quick_start_triages(self) -> None:
        shutil.copy(KIT / "examples/quickstart/triage.yaml", self.scratch)
        shutil.copy(BUILT / "quickstart.wasm", self.scratch / "my_hook.wasm")
        message = {"id": "m", "performative": "request", "sender": "desk",
                   "receivers": ["support"], "content": {"ticket": "T-7", "urgent": True}}
        got = self.answer(self.scratch / "triage.yaml",
                          event("on_message", message=message, config={"on_call": "on-call"}))
        self.assertEqual(got["actions"], [{"route": {"to": ["on-call"], "mode": "add"}},
                                          {"set_vars": {"priority": "high"}}])

    def test_each_hostile_behaviour_fails_as_promised(self) -> None:
        template = self.fixture("hostile.wasm")
        failures = {"raise": "the hook trapped", "not_json": "invalid output",
                    "too_big": "over the 1048576-byte output limit",
                    "loop": "ran longer than its", "memory_bomb": "over its cap"}
        for behaviour, failure in failures.items():
            with self.subTest(behaviour=behaviour):
                result = self.call(template,
                                   event("on_message", config={"behaviour": behaviour}))
                self.assertNotEqual(result.returncode, 0)
                self.assertIn(failure, result.stderr)
        self.assertEqual(self.answer(template, event("on_start", config={"behaviour": "ok"})),
                         {})

    def test_a_component_importing_wasi_is_refused_naming_the_fix(self) -> None:
        result = self.call(self.fixture("wasi.wasm"), event("on_message"))
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("imports `wasi:", result.stderr)
        self.assertIn("--stub-wasi", result.stderr)


if __name__ == "__main__":
    unittest.main()
