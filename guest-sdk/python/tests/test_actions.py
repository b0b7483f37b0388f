"""Action builders: each writes the output schema's JSON, and every action has one."""

from __future__ import annotations

import json
import math
import unittest

import support  # noqa: F401  (first: the fake bindings)
from schema_check import errors

from colloquy_hook import Action, answer

OUTPUT_SCHEMA = json.loads((support.ROOT / "docs" / "hook-output.schema.json").read_text())
#: Rules only (CEL): hooks may not answer it.
RULES_ONLY = {"eval_vars"}

#: One call of every builder, with every optional field given and left out.
EVERY_BUILDER = [
    Action.continue_(),
    Action.reject("too large"),
    Action.set_vars({"status": "pending", "score": 0.5, "tags": ["a"], "seen": None}),
    Action.set_vars(status="pending", started_at=1767225600000),
    Action.set_vars({"a": 1}, b={"nested": [True]}),
    Action.set_var("risk_route", "special"),
    Action.send("inform", "desk", {"note": "é"}),
    Action.send("inform", ["desk", "risk"]),
    Action.route(["special-risk"]),
    Action.route("special-risk", mode="replace"),
    Action.route_to(["a", "b"]),
    Action.set_deadline(60_000),
    Action.extend_deadline(0),
    Action.retry(1000),
    Action.retry(1000, 2.0, 3),
    Action.retry(1000, backoff=2),
    Action.complete("success"),
    Action.complete("escalated", "handed over"),
    Action.escalate("human-review", "max_retries_exceeded"),
    Action.log("hello"),
    Action.log("careful", "warn"),
]


def schema_action_names() -> set[str]:
    names = set()
    for branch in OUTPUT_SCHEMA["$defs"]["Action"]["oneOf"]:
        names.add(branch["const"] if "const" in branch else next(iter(branch["properties"])))
    return names


class OutputSchema(unittest.TestCase):
    def test_every_schema_action_has_a_builder(self) -> None:
        built = {action.name for action in EVERY_BUILDER}
        self.assertEqual(built, schema_action_names() - RULES_ONLY)

    def test_every_builder_validates_against_the_output_schema(self) -> None:
        for action in EVERY_BUILDER:
            output = json.loads(answer([action]))
            with self.subTest(action=action.json):
                self.assertEqual(errors(output, OUTPUT_SCHEMA, OUTPUT_SCHEMA), [])

    def test_the_whole_answer_validates_with_jsonschema_when_installed(self) -> None:
        try:
            import jsonschema
        except ImportError:
            self.skipTest("jsonschema is not installed (the schema_check test covers this)")
        output = json.loads(answer(EVERY_BUILDER))
        jsonschema.Draft202012Validator(OUTPUT_SCHEMA).validate(output)

    def test_the_checker_refuses_what_the_schema_refuses(self) -> None:
        # So the test above cannot pass by checking nothing.
        for bad in [{"actions": [{"reject": {"reasons": "typo"}}]},
                    {"actions": [{"retry": {"after_ms": -1}}]},
                    {"actions": [{"route": {"to": ["a"], "mode": "prepend"}}]},
                    {"actions": [{"complete": {}}]},
                    {"actions": ["stop"]},
                    {"actions": [], "extra": 1}]:
            with self.subTest(bad=bad):
                self.assertNotEqual(errors(bad, OUTPUT_SCHEMA, OUTPUT_SCHEMA), [])


class Builders(unittest.TestCase):
    def test_fields_are_the_schemas(self) -> None:
        self.assertEqual(Action.continue_().json, "continue")
        self.assertEqual(Action.reject("no").json, {"reject": {"reason": "no"}})
        self.assertEqual(Action.retry(1000, 2.0, 3).json,
                         {"retry": {"after_ms": 1000, "backoff": 2.0, "max_attempts": 3}})
        self.assertEqual(Action.retry(5).json, {"retry": {"after_ms": 5}})
        self.assertEqual(Action.route_to(["x"]).json, {"route": {"to": ["x"], "mode": "add"}})
        self.assertEqual(Action.send("inform", "desk").json,
                         {"send": {"performative": "inform", "to": ["desk"]}})
        self.assertEqual(Action.complete("failure").json, {"complete": {"outcome": "failure"}})
        self.assertEqual(Action.escalate("h", "why").json,
                         {"escalate": {"to": "h", "reason": "why"}})
        self.assertEqual(Action.log("l").json, {"log": {"level": "info", "message": "l"}})
        self.assertEqual(Action.set_deadline(7).json, {"set_deadline": {"in_ms": 7}})
        self.assertEqual(Action.extend_deadline(7).json, {"extend_deadline": {"by_ms": 7}})

    def test_set_vars_merges_mapping_and_keywords(self) -> None:
        self.assertEqual(Action.set_vars({"a": 1, "b": 1}, b=2).json,
                         {"set_vars": {"a": 1, "b": 2}})
        self.assertEqual(Action.set_vars().json, {"set_vars": {}})

    def test_backoff_is_written_as_a_float_like_the_rust_sdk(self) -> None:
        self.assertEqual(answer([Action.retry(1000, 2, 3)]),
                         '{"actions":[{"retry":{"after_ms":1000,"backoff":2.0,"max_attempts":3}}]}')

    def test_a_str_is_one_agent_not_its_letters(self) -> None:
        self.assertEqual(Action.route("risk").json["route"]["to"], ["risk"])

    def test_mistakes_raise_where_they_are_made(self) -> None:
        mistakes = [
            (TypeError, lambda: Action.reject(404)),
            (TypeError, lambda: Action.set_vars({1: "x"})),
            (TypeError, lambda: Action.send("inform", ["desk", 7])),
            (ValueError, lambda: Action.route(["a"], mode="prepend")),
            (ValueError, lambda: Action.set_deadline(-1)),
            (TypeError, lambda: Action.extend_deadline(1.5)),
            (TypeError, lambda: Action.retry(True)),
            (ValueError, lambda: Action.retry(10, backoff=math.nan)),
            (ValueError, lambda: Action.retry(10, backoff=math.inf)),
            (ValueError, lambda: Action.complete("done")),
            (TypeError, lambda: Action.escalate("h", None)),
            (ValueError, lambda: Action.log("x", "fatal")),
        ]
        for error, build in mistakes:
            with self.subTest(error=error):
                self.assertRaises(error, build)


if __name__ == "__main__":
    unittest.main()
