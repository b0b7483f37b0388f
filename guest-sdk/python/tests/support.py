"""Shared set-up of the kit's tests: import this module first.

It puts the kit on the path and installs a stand-in for ``wit_world``, the bindings
componentize-py generates at build time (same names and shapes as those of
guest-sdk/wit/hooks.wit), so the tests run the kit's component wiring in plain CPython:
`FakeHost` records what the hook sends the host.
"""

from __future__ import annotations

import enum
import json
import sys
import types
from abc import abstractmethod
from pathlib import Path
from typing import Any, Protocol

#: The repository root.
ROOT = Path(__file__).resolve().parents[3]
KIT = ROOT / "guest-sdk" / "python"


class FakeHost:
    """What ``wit_world.imports.host`` received: ``log`` lines and the ``now_ms`` answer."""

    class LogLevel(enum.Enum):
        DEBUG = 0
        INFO = 1
        WARN = 2
        ERROR = 3

    lines: list[tuple[Any, str]] = []
    now: int = 0

    @classmethod
    def log(cls, level: Any, line: str) -> None:
        if not isinstance(level, cls.LogLevel):
            raise TypeError(f"host.log takes a LogLevel, not {level!r}")
        cls.lines.append((level, line))

    @classmethod
    def now_ms(cls) -> int:
        return cls.now

    @classmethod
    def take(cls) -> list[tuple[Any, str]]:
        lines, cls.lines = cls.lines, []
        return lines


class WitWorld(Protocol):
    """As generated: the world's exports, to be implemented by the app's ``WitWorld``."""

    @abstractmethod
    def start(self, event: str) -> str: ...

    @abstractmethod
    def message(self, event: str) -> str: ...

    @abstractmethod
    def timeout(self, event: str) -> str: ...


def _install_fake_bindings() -> None:
    host = types.ModuleType("wit_world.imports.host")
    host.LogLevel = FakeHost.LogLevel  # type: ignore[attr-defined]
    host.log = FakeHost.log  # type: ignore[attr-defined]
    host.now_ms = FakeHost.now_ms  # type: ignore[attr-defined]
    imports = types.ModuleType("wit_world.imports")
    imports.host = host  # type: ignore[attr-defined]
    imports.__path__ = []  # a package, so `from wit_world.imports import host` works
    world = types.ModuleType("wit_world")
    world.WitWorld = WitWorld  # type: ignore[attr-defined]
    world.imports = imports  # type: ignore[attr-defined]
    world.__path__ = []
    sys.modules.update({"wit_world": world, "wit_world.imports": imports,
                        "wit_world.imports.host": host})


if "colloquy_hook" in sys.modules and "wit_world" not in sys.modules:
    raise RuntimeError("import support before colloquy_hook: the kit binds the host at import")
_install_fake_bindings()
sys.path.insert(0, str(KIT))


def event(hook: str, *, message: dict[str, Any] | None = None,
          timeout: dict[str, Any] | None = None, config: Any = None,
          **conversation: Any) -> str:
    """An event's JSON as the engine writes it (compact), with the parts given; the
    conversation has one thread, of ``risk``, in state ``assessing`` unless overridden."""
    value: dict[str, Any] = {
        "abi_version": 1, "hook": hook, "now": 1000,
        "conversation": {"id": "c", "template": "credit-assessment", "revision": "r",
                         "status": "active", "initiator": "desk", "participants": ["risk"],
                         "threads": [{"participant": "risk", "state": "assessing"}],
                         "vars": {}, "parameters": {}, "context": {}, "retry_attempts": 0,
                         **conversation},
    }
    if message is not None:
        value["message"] = message
    if timeout is not None:
        value["timeout"] = timeout
    value["config"] = config
    return json.dumps(value, separators=(",", ":"))


def load_module(path: Path, name: str) -> types.ModuleType:
    """Imports the Python file ``path`` as module ``name`` (a hook, outside the path)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
