"""The Python credit policy decides as the Rust one (templates/examples/credit-assessment/
hook/src/lib.rs), answer for answer: its unit tests, ported, and the branches around them."""

from __future__ import annotations

import json
import unittest
from typing import Any

from support import ROOT, FakeHost, event, load_module

from colloquy_hook import handle

POLICY = load_module(ROOT / "templates/examples/credit-assessment/hook-py/credit_policy.py",
                     "credit_policy")
HOOK = POLICY.CreditPolicy()
CONFIG = {"max_amount": 100}


def run(hook: str, **parts: Any) -> Any:
    """The policy's answer, parsed (``{}`` when it carries on)."""
    parts.setdefault("config", CONFIG)
    return json.loads(handle(HOOK, hook, event(hook, **parts)))


def request(amount: Any, purpose: Any) -> dict[str, Any]:
    return {"id": "m", "performative": "request", "sender": "desk", "receivers": ["risk"],
            "content": {"amount": amount, "purpose": purpose}}


def reply(performative: str) -> dict[str, Any]:
    return {"id": "m2", "performative": performative, "sender": "risk", "receivers": ["desk"],
            "content": {}}


def retry(attempt: int) -> dict[str, Any]:
    return {"kind": "retry", "attempt": attempt}


def actions(*values: Any) -> dict[str, Any]:
    return {"actions": list(values)}


SPECIAL = {"route": {"to": ["special-risk-assessment"], "mode": "add"}}
RETRY = {"retry": {"after_ms": 1000, "backoff": 2.0, "max_attempts": 3}}


class OnStart(unittest.TestCase):
    def test_pending_and_stamped(self) -> None:
        self.assertEqual(run("on_start"),
                         actions({"set_vars": {"status": "pending", "started_at": 1000}}))

    def test_written_byte_for_byte_as_the_rust_sdk_writes_it(self) -> None:
        self.assertEqual(handle(HOOK, "on_start", event("on_start")),
                         '{"actions":[{"set_vars":{"status":"pending","started_at":1000}}]}')


class OnMessage(unittest.TestCase):
    def test_refuses_over_the_limit_and_routes_crypto(self) -> None:
        # The Rust policy's `refuses_over_the_limit_and_routes_crypto`.
        self.assertEqual(run("on_message", message=request(500, "car")),
                         actions({"reject": {"reason": "amount 500 exceeds the limit of 100"}}))
        self.assertEqual(run("on_message", message=request(50, "Crypto mining"))["actions"][0],
                         SPECIAL)
        self.assertEqual(run("on_message", message=request(50, "CRYPTO\n"))["actions"][0],
                         SPECIAL)
        self.assertEqual(run("on_message", message=request(50, "a new car")),
                         actions({"set_vars": {"risk_route": "standard"}}))

    def test_crypto_is_routed_and_remembered(self) -> None:
        self.assertEqual(run("on_message", message=request(50, "bitcoin and CrYpTo")),
                         actions(SPECIAL, {"set_vars": {"risk_route": "special"}}))

    def test_the_limit_itself_passes_and_fractions_are_truncated(self) -> None:
        standard = actions({"set_vars": {"risk_route": "standard"}})
        self.assertEqual(run("on_message", message=request(100, "car")), standard)
        self.assertEqual(run("on_message", message=request(100.9, "car")), standard)
        self.assertEqual(run("on_message", message=request(101.5, "car")),
                         actions({"reject": {"reason": "amount 101 exceeds the limit of 100"}}))

    def test_limit_and_agent_come_from_the_config_with_defaults(self) -> None:
        self.assertEqual(run("on_message", message=request(50_001, "car"), config=None),
                         actions({"reject": {"reason":
                                             "amount 50001 exceeds the limit of 50000"}}))
        self.assertEqual(run("on_message", message=request(50_000, "car"), config=None),
                         actions({"set_vars": {"risk_route": "standard"}}))
        routed = run("on_message", message=request(1, "crypto"),
                     config={"special_risk_agent": "quant"})
        self.assertEqual(routed["actions"][0], {"route": {"to": ["quant"], "mode": "add"}})

    def test_odd_content_reads_as_absent(self) -> None:
        self.assertEqual(run("on_message", message=request(-5, 7)),
                         actions({"set_vars": {"risk_route": "standard"}}))

    def test_answers_set_the_status(self) -> None:
        self.assertEqual(run("on_message", message=reply("inform")),
                         actions({"set_vars": {"status": "assessed"}}))
        for performative in ("refuse", "failure"):
            self.assertEqual(run("on_message", message=reply(performative)),
                             actions({"set_vars": {"status": "declined"}}))
        self.assertEqual(run("on_message", message=reply("agree")), {})
        self.assertEqual(run("on_message"), {}, "no message")


class OnTimeout(unittest.TestCase):
    def setUp(self) -> None:
        FakeHost.take()

    def test_retries_three_times_then_escalates(self) -> None:
        # The Rust policy's `retries_three_times_then_escalates`.
        self.assertEqual(run("on_timeout", timeout=retry(2)), actions(RETRY))
        reason = "max_retries_exceeded: no assessment after 3 retries"
        self.assertEqual(run("on_timeout", timeout=retry(3)),
                         actions({"set_vars": {"status": "escalated"}},
                                 {"escalate": {"to": "human-review", "reason": reason}}))

    def test_logs_each_retry_as_the_rust_policy(self) -> None:
        run("on_timeout", timeout=retry(1))
        run("on_timeout", timeout={"kind": "thread", "participant": "risk", "attempt": 0})
        run("on_timeout", timeout=retry(3))
        self.assertEqual([line for _, line in FakeHost.take()],
                         ["no assessment yet; retry 2 of 3", "no assessment yet; retry 1 of 3"])

    def test_a_thread_timeout_counts_the_conversations_retries(self) -> None:
        thread = {"kind": "thread", "participant": "risk", "attempt": 3}
        self.assertEqual(run("on_timeout", timeout=thread, retry_attempts=1), actions(RETRY))
        escalated = run("on_timeout", timeout=thread, retry_attempts=3,
                        config={"escalation_agent": "supervisor"})
        self.assertEqual(escalated["actions"][1]["escalate"]["to"], "supervisor")

    def test_nothing_once_answered_or_at_the_conversation_deadline(self) -> None:
        answered = [{"participant": "risk", "state": "assessed"}]
        self.assertEqual(run("on_timeout", timeout=retry(1), threads=answered), {})
        self.assertEqual(run("on_timeout", timeout={"kind": "conversation", "attempt": 0}), {})
        self.assertEqual(run("on_timeout"), {}, "no timeout")


if __name__ == "__main__":
    unittest.main()
