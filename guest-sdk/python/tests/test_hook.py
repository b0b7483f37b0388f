"""One call end to end (`handle`), the answer's JSON, and the component wiring (`export`)."""

from __future__ import annotations

import json
import sys
import unittest

import support
from support import FakeHost, event

from colloquy_hook import Action, Event, Hook, answer, export, handle


class Recorder(Hook):
    """Answers with which method ran, so the tests see the dispatch."""

    def on_start(self, event: Event) -> list[Action]:
        return [Action.set_var("ran", "on_start")]

    def on_message(self, event: Event) -> list[Action]:
        return [Action.set_var("ran", "on_message")]

    def on_timeout(self, event: Event) -> list[Action]:
        return [Action.set_var("ran", "on_timeout")]


class Broken(Hook):
    def on_message(self, event: Event) -> list[Action]:
        raise ValueError("boom")

    def on_start(self, event: Event) -> list[Action]:
        return None  # type: ignore[return-value]  # the mistake under test

    def on_timeout(self, event: Event) -> list[Action]:
        return [{"reject": {"reason": "a dict, not an Action"}}]  # type: ignore[list-item]


class Printer(Hook):
    def on_message(self, event: Event) -> list[Action]:
        print("first line\nsecond line")
        print("no newline", end="")
        print("careful", file=sys.stderr)
        return []

    def on_start(self, event: Event) -> list[Action]:
        print("before the fall")
        raise RuntimeError("fell")


class Handle(unittest.TestCase):
    def setUp(self) -> None:
        FakeHost.take()

    def test_no_action_answers_an_empty_object(self) -> None:
        self.assertEqual(handle(Hook(), "on_message", event("on_message")), "{}")

    def test_the_answer_is_compact_json_and_keeps_unicode(self) -> None:
        text = answer([Action.reject("montant trop élevé"), Action.continue_()])
        self.assertEqual(text, '{"actions":[{"reject":{"reason":"montant trop élevé"}},'
                               '"continue"]}')

    def test_an_event_it_cannot_read_is_rejected_with_why(self) -> None:
        output = json.loads(handle(Recorder(), "on_message", "{not json"))
        reason = output["actions"][0]["reject"]["reason"]
        self.assertTrue(reason.startswith("the hook cannot read its event: not JSON"), reason)

    def test_an_exception_propagates_and_is_logged_with_where(self) -> None:
        with self.assertRaisesRegex(ValueError, "boom"):
            handle(Broken(), "on_message", event("on_message"))
        [(level, line)] = FakeHost.take()
        self.assertEqual(level, FakeHost.LogLevel.ERROR)
        self.assertIn("on_message raised ValueError: boom (at ", line)
        self.assertIn("test_hook.py:", line)
        self.assertIn(" in on_message", line)

    def test_a_method_returning_none_fails_rather_than_carrying_on(self) -> None:
        with self.assertRaisesRegex(TypeError, r"on_start returned NoneType.*\[\] to carry on"):
            handle(Broken(), "on_start", event("on_start"))

    def test_an_action_not_built_by_the_kit_fails(self) -> None:
        with self.assertRaisesRegex(TypeError, "a dict among its actions"):
            handle(Broken(), "on_timeout", event("on_timeout"))

    def test_prints_go_to_the_log_during_a_call(self) -> None:
        stdout, stderr = sys.stdout, sys.stderr
        self.assertEqual(handle(Printer(), "on_message", event("on_message")), "{}")
        info, warn = FakeHost.LogLevel.INFO, FakeHost.LogLevel.WARN
        self.assertEqual(FakeHost.take(), [(info, "first line"), (info, "second line"),
                                           (warn, "careful"), (info, "no newline")])
        self.assertIs(sys.stdout, stdout)
        self.assertIs(sys.stderr, stderr)

    def test_prints_before_an_exception_are_kept_and_the_streams_put_back(self) -> None:
        stdout = sys.stdout
        with self.assertRaises(RuntimeError):
            handle(Printer(), "on_start", event("on_start"))
        lines = [line for _, line in FakeHost.take()]
        self.assertEqual(lines[0], "before the fall")
        self.assertIn("on_start raised RuntimeError: fell", lines[1])
        self.assertIs(sys.stdout, stdout)

    def test_a_value_that_is_not_json_fails(self) -> None:
        with self.assertRaises(ValueError):
            answer([Action.set_var("score", float("nan"))])
        with self.assertRaises(TypeError):
            answer([Action.set_var("when", object())])


class Export(unittest.TestCase):
    def test_each_export_runs_its_method(self) -> None:
        world_class = export(Recorder)
        self.assertIn(support.WitWorld, world_class.__mro__)  # a Protocol: no issubclass
        world = world_class()
        for export_name, method in [("start", "on_start"), ("message", "on_message"),
                                    ("timeout", "on_timeout")]:
            with self.subTest(export=export_name):
                output = json.loads(getattr(world, export_name)(event(method)))
                self.assertEqual(output, {"actions": [{"set_vars": {"ran": method}}]})

    def test_an_instance_is_exported_as_it_is(self) -> None:
        hook = Recorder()
        self.assertEqual(json.loads(export(hook)().start(event("on_start")))["actions"][0],
                         {"set_vars": {"ran": "on_start"}})

    def test_only_hooks_are_exported(self) -> None:
        with self.assertRaises(TypeError):
            export(object)  # type: ignore[arg-type]

    def test_an_exception_escapes_the_export(self) -> None:
        # In the component, an exception out of the export traps: the hook fails.
        with self.assertRaises(ValueError):
            export(Broken)().message(event("on_message"))


if __name__ == "__main__":
    unittest.main()
