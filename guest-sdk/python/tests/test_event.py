"""The event: every part read, parts left out read as empty, fields read by type."""

from __future__ import annotations

import json
import unittest

import support  # noqa: F401  (first: the fake bindings)

from colloquy_hook import Event, EventError, Fields
from colloquy_hook.fields import U64_MAX

#: docs/hook-abi.md's example event, with every optional field set.
FULL = {
    "abi_version": 1, "hook": "on_message", "now": 1767225600000,
    "conversation": {
        "id": "0197", "template": "credit-assessment", "revision": "sha256:5f1c",
        "status": "active", "outcome": None, "initiator": "desk", "participants": ["risk"],
        "threads": [{"participant": "risk", "state": "start", "outcome": None,
                     "deadline": 1767225630000}],
        "vars": {"status": "pending", "started_at": 1767225600000},
        "parameters": {"applicant_id": "A-17", "income_source": "salary"},
        "context": {"ticket": "T-42"}, "deadline": 1767229200000, "retry_attempts": 2,
    },
    "message": {"id": "m-1", "performative": "request", "sender": "desk",
                "receivers": ["risk"], "content": {"amount": 20000, "purpose": "crypto rig"},
                "in_reply_to": "m-0", "reply_by": 1767225660000},
    "config": {"max_amount": 50000},
}

#: The same event cut by `hooks.reads: [threads]` (docs/hook-abi.md).
CUT = {"abi_version": 1, "hook": "on_timeout", "now": 5,
       "conversation": {"id": "0197", "status": "active",
                        "threads": [{"participant": "risk", "state": "assessing"}],
                        "retry_attempts": 0},
       "timeout": {"kind": "thread", "participant": "risk", "attempt": 0}}


class Parts(unittest.TestCase):
    def test_every_part_of_a_full_event(self) -> None:
        event = Event.from_json(json.dumps(FULL))
        self.assertEqual((event.abi_version, event.hook, event.now), (1, "on_message",
                                                                     1767225600000))
        conversation = event.conversation
        self.assertEqual((conversation.id, conversation.template, conversation.revision),
                         ("0197", "credit-assessment", "sha256:5f1c"))
        self.assertEqual((conversation.status, conversation.outcome), ("active", None))
        self.assertEqual((conversation.initiator, conversation.participants), ("desk", ["risk"]))
        self.assertEqual(conversation.threads[0].state, "start")
        self.assertEqual(conversation.threads[0].deadline, 1767225630000)
        self.assertEqual(event.var_str("status"), "pending")
        self.assertEqual(event.var_uint("started_at"), 1767225600000)
        self.assertEqual(event.parameter("applicant_id"), "A-17")
        self.assertEqual(conversation.parameters.get_str("income_source"), "salary")
        self.assertEqual(conversation.context.get_str("ticket"), "T-42")
        self.assertEqual((conversation.deadline, conversation.retry_attempts),
                         (1767229200000, 2))
        message = event.message
        assert message is not None
        self.assertEqual((message.id, message.performative, message.sender, message.receivers),
                         ("m-1", "request", "desk", ["risk"]))
        self.assertEqual((message.in_reply_to, message.reply_by), ("m-0", 1767225660000))
        self.assertEqual(message.content, {"amount": 20000, "purpose": "crypto rig"})
        self.assertEqual(event.content_uint("amount"), 20000)
        self.assertEqual(event.config_int("max_amount"), 50000)
        self.assertIsNone(event.timeout)
        self.assertIs(event.raw["config"], event.config.raw)

    def test_parts_left_out_read_as_empty(self) -> None:
        event = Event.from_json(json.dumps(CUT).encode())
        conversation = event.conversation
        self.assertEqual((conversation.template, conversation.revision, conversation.initiator),
                         ("", "", ""))
        self.assertEqual(conversation.participants, [])
        self.assertEqual(len(conversation.vars), 0)
        self.assertIsNone(event.var("status"))
        self.assertIsNone(event.parameter("applicant_id"))
        self.assertIsNone(conversation.deadline)
        self.assertIsNone(event.message)
        self.assertEqual(len(event.content), 0)
        self.assertIsNone(event.content_str("purpose"))
        self.assertIsNone(event.config.raw)
        self.assertIsNone(event.config_str("escalation_agent"))
        timeout = event.timeout
        assert timeout is not None
        self.assertEqual((timeout.kind, timeout.participant, timeout.attempt),
                         ("thread", "risk", 0))
        thread = event.thread("risk")
        assert thread is not None
        self.assertEqual(thread.state, "assessing")
        self.assertIsNone(event.thread("nobody"))

    def test_unknown_fields_are_ignored(self) -> None:
        later = dict(CUT, shiny_new_field=[1], conversation=dict(CUT["conversation"], x=1))
        self.assertEqual(Event.from_json(json.dumps(later)).conversation.id, "0197")

    def test_what_is_not_an_event_is_refused_with_why(self) -> None:
        for text, why in [("{", "not JSON"), ("[1]", "not a JSON object but list"),
                          ('{"hook": "on_start"}', "no `conversation` object"),
                          (b"\xff\xfe{}", "not JSON")]:
            with self.subTest(text=text):
                with self.assertRaises(EventError) as raised:
                    Event.from_json(text)
                self.assertIn(why, str(raised.exception))


class FieldsByType(unittest.TestCase):
    VALUES = {"text": "a \"b\"", "whole": 1200, "negative": -4, "fraction": 12.9,
              "zero_fraction": 3.0, "huge": 2**70, "flag": True, "nothing": None,
              "list": [1], "object": {"k": "v"}}

    def setUp(self) -> None:
        self.fields = Fields(self.VALUES)

    def test_str(self) -> None:
        self.assertEqual(self.fields.get_str("text"), "a \"b\"")
        self.assertIsNone(self.fields.get_str("whole"))
        self.assertIsNone(self.fields.get_str("missing"))

    def test_int_takes_json_integers_only(self) -> None:
        self.assertEqual(self.fields.get_int("whole"), 1200)
        self.assertEqual(self.fields.get_int("negative"), -4)
        self.assertIsNone(self.fields.get_int("fraction"))
        self.assertIsNone(self.fields.get_int("zero_fraction"))
        self.assertIsNone(self.fields.get_int("flag"), "a bool is no number in JSON")

    def test_uint_reads_as_the_rust_sdks_u64_readers(self) -> None:
        self.assertEqual(self.fields.get_uint("whole"), 1200)
        self.assertEqual(self.fields.get_uint("fraction"), 12, "fractions are truncated")
        self.assertEqual(self.fields.get_uint("zero_fraction"), 3)
        self.assertIsNone(self.fields.get_uint("negative"))
        self.assertEqual(self.fields.get_uint("huge"), U64_MAX, "saturates")
        self.assertIsNone(self.fields.get_uint("flag"))
        self.assertIsNone(self.fields.get_uint("text"))

    def test_float_and_bool(self) -> None:
        self.assertEqual(self.fields.get_float("whole"), 1200.0)
        self.assertEqual(self.fields.get_float("fraction"), 12.9)
        self.assertIsNone(self.fields.get_float("flag"))
        self.assertIs(self.fields.get_bool("flag"), True)
        self.assertIsNone(self.fields.get_bool("whole"))

    def test_any_json_and_the_mapping_view(self) -> None:
        self.assertEqual(self.fields.get("list"), [1])
        self.assertEqual(self.fields["object"], {"k": "v"})
        self.assertIn("nothing", self.fields)
        self.assertEqual(len(self.fields), len(self.VALUES))

    def test_a_part_that_is_not_an_object_reads_as_empty(self) -> None:
        for raw in [None, [1, 2], "text", 3]:
            fields = Fields(raw)
            self.assertEqual((len(fields), fields.get_str("a"), fields.raw), (0, None, raw))

    def test_event_shortcuts_read_content_config_and_vars_alike(self) -> None:
        event = Event.from_json(json.dumps({
            "conversation": {"id": "c", "vars": self.VALUES},
            "message": {"id": "m", "performative": "request", "sender": "s",
                        "receivers": [], "content": self.VALUES},
            "config": self.VALUES}))
        for part in ("content", "config", "var"):
            with self.subTest(part=part):
                self.assertEqual(getattr(event, f"{part}_str")("text"), "a \"b\"")
                self.assertEqual(getattr(event, f"{part}_int")("negative"), -4)
                self.assertEqual(getattr(event, f"{part}_uint")("fraction"), 12)
                self.assertEqual(getattr(event, f"{part}_float")("whole"), 1200.0)
                self.assertIs(getattr(event, f"{part}_bool")("flag"), True)
        self.assertEqual(event.content_field("list"), [1])
        self.assertEqual(event.config_field("object"), {"k": "v"})
        self.assertEqual(event.var("list"), [1])


if __name__ == "__main__":
    unittest.main()
