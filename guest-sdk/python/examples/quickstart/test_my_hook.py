"""Tests of my_hook.py in plain CPython, no WebAssembly: from this folder,
PYTHONPATH=path/to/colloquy/guest-sdk/python python3 -m unittest test_my_hook
"""

import json
import unittest

import colloquy_hook
from my_hook import Triage


def request(content: dict) -> str:
    """An on_message event carrying a request with this content."""
    return json.dumps({
        "hook": "on_message", "now": 0, "conversation": {"id": "c1"},
        "message": {"id": "m1", "performative": "request", "sender": "desk",
                    "receivers": ["support"], "content": content},
        "config": {"on_call": "dana"},
    })


class TriageTest(unittest.TestCase):
    def test_a_request_without_a_ticket_is_refused(self):
        answer = colloquy_hook.handle(Triage(), "on_message", request({}))
        self.assertEqual(json.loads(answer), {
            "actions": [{"reject": {"reason": "a request needs a ticket number"}}]})

    def test_an_urgent_ticket_reaches_the_on_call_agent(self):
        answer = colloquy_hook.handle(Triage(), "on_message",
                                      request({"ticket": "T-7", "urgent": True}))
        self.assertEqual(json.loads(answer)["actions"], [
            {"route": {"to": ["dana"], "mode": "add"}},
            {"set_vars": {"priority": "high"}},
        ])
        self.assertEqual(colloquy_hook.take_logs(),
                         [("info", "ticket T-7 is urgent: routed to dana too")])


if __name__ == "__main__":
    unittest.main()
