"""The hostile fixtures answer what each behaviour promises (those that end: `loop` and
`memory_bomb` are for the engine's limits to stop), and the quick start hook triages."""

from __future__ import annotations

import json
import unittest

from support import ROOT, FakeHost, event, load_module

FIXTURES = ROOT / "tests/fixtures/hooks/python"
HOSTILE = load_module(FIXTURES / "hostile.py", "hostile")
WASI = load_module(FIXTURES / "wasi.py", "wasi_hook")
QUICKSTART = load_module(ROOT / "guest-sdk/python/examples/quickstart/my_hook.py", "my_hook")
OUTPUT_LIMIT = 1 << 20


class Hostile(unittest.TestCase):
    def call(self, behaviour: object, export: str = "message") -> str:
        world = HOSTILE.WitWorld()
        return getattr(world, export)(event("on_message", config={"behaviour": behaviour}))

    def test_ok_answers_no_action_from_every_export(self) -> None:
        for export in ("start", "message", "timeout"):
            self.assertEqual(json.loads(self.call("ok", export)), {"actions": []})

    def test_not_json(self) -> None:
        with self.assertRaises(ValueError):
            json.loads(self.call("not_json"))

    def test_too_big_is_json_over_the_output_limit(self) -> None:
        text = self.call("too_big")
        self.assertGreater(len(text.encode()), OUTPUT_LIMIT)
        json.loads(text)

    def test_raise_and_unknown_behaviours_raise(self) -> None:
        with self.assertRaisesRegex(RuntimeError, "on purpose"):
            self.call("raise")
        with self.assertRaisesRegex(ValueError, "unknown behaviour 'sulk'"):
            self.call("sulk")
        with self.assertRaisesRegex(ValueError, "unknown behaviour None"):
            HOSTILE.WitWorld().start(event("on_start"))


class Wasi(unittest.TestCase):
    def test_it_would_answer_if_it_could_load(self) -> None:
        self.assertEqual(json.loads(WASI.WitWorld().message(event("on_message"))),
                         {"actions": []})


class QuickStart(unittest.TestCase):
    def call(self, content: dict[str, object], config: object = None) -> object:
        message = {"id": "m", "performative": "request", "sender": "desk",
                   "receivers": ["support"], "content": content}
        world = QUICKSTART.WitWorld()
        return json.loads(world.message(event("on_message", message=message, config=config)))

    def test_triage(self) -> None:
        FakeHost.take()
        self.assertEqual(self.call({}),
                         {"actions": [{"reject": {"reason": "a request needs a ticket number"}}]})
        self.assertEqual(self.call({"ticket": "T-1"}),
                         {"actions": [{"set_vars": {"priority": "normal"}}]})
        self.assertEqual(self.call({"ticket": "T-2", "urgent": True}, {"on_call": "dana"}),
                         {"actions": [{"route": {"to": ["dana"], "mode": "add"}},
                                      {"set_vars": {"priority": "high"}}]})
        self.assertEqual([line for _, line in FakeHost.take()],
                         ["ticket T-2 is urgent: routed to dana too"])


if __name__ == "__main__":
    unittest.main()
