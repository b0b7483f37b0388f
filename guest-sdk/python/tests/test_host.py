"""The host functions: the bindings in a component, the stand-in in plain CPython."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import unittest

from support import KIT, FakeHost

import colloquy_hook
from colloquy_hook import in_component, log, now_ms


class WithBindings(unittest.TestCase):
    def setUp(self) -> None:
        FakeHost.take()

    def test_log_passes_the_bindings_level(self) -> None:
        self.assertTrue(in_component())
        for level in ("debug", "info", "warn", "error"):
            log(level, f"{level} line")
        self.assertEqual(FakeHost.take(), [
            (FakeHost.LogLevel.DEBUG, "debug line"), (FakeHost.LogLevel.INFO, "info line"),
            (FakeHost.LogLevel.WARN, "warn line"), (FakeHost.LogLevel.ERROR, "error line"),
        ])

    def test_an_unknown_level_is_refused(self) -> None:
        with self.assertRaises(ValueError):
            log("fatal", "x")  # type: ignore[arg-type]

    def test_now_ms_asks_the_host(self) -> None:
        FakeHost.now = 1767225600123
        self.assertEqual(now_ms(), 1767225600123)

    def test_the_package_exports_what_its_docs_list(self) -> None:
        for name in colloquy_hook.__all__:
            self.assertTrue(hasattr(colloquy_hook, name), name)


class WithoutBindings(unittest.TestCase):
    def test_plain_cpython_gets_the_stand_in(self) -> None:
        # A fresh interpreter without the fake bindings, as a hook author's own tests run.
        script = textwrap.dedent("""
            import colloquy_hook as kit
            assert not kit.in_component()
            kit.log("warn", "careful")
            kit.set_now_ms(42)
            assert kit.now_ms() == 42
            assert kit.take_logs() == [("warn", "careful")], kit.take_logs()
            assert kit.take_logs() == []
            class Hook(kit.Hook):
                def on_start(self, event):
                    return [kit.Action.set_var("n", event.now)]
            world = kit.export(Hook)()
            assert world.start('{"now": 7, "conversation": {}}') == \
                '{"actions":[{"set_vars":{"n":7}}]}'
            print("stand-in ok")
        """)
        env = dict(os.environ, PYTHONPATH=str(KIT))
        result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                                text=True, check=False)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.strip(), "stand-in ok")


if __name__ == "__main__":
    unittest.main()
