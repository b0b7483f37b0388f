"""Write Colloquy lifecycle hooks in Python, built into a WebAssembly component.

A hook is a `Hook` subclass whose methods get the `Event` and return `Action`\\ s; `export`
turns it into the class componentize-py needs::

    from colloquy_hook import Action, Event, Hook, export

    class AmountGuard(Hook):
        def on_message(self, event: Event) -> list[Action]:
            limit = event.config_uint("max_amount") or 10_000
            amount = event.content_uint("amount")
            if amount is not None and amount > limit:
                return [Action.reject(f"amount {amount} is over {limit}")]
            return []

    WitWorld = export(AmountGuard)

``guest-sdk/python/build.sh my_hook.py my_hook.wasm`` builds it (docs/hooks-python.md).
In plain CPython, `handle` runs a hook on JSON text as the component does, and `log` and
`now_ms` go to a stand-in (`take_logs`, `set_now_ms`), so hooks are unit-tested without wasm.

Layout:
- `event`: the event (`Event`, `Conversation`, `Thread`, `Message`, `Timeout`).
- `fields`: `Fields`, typed reads of the free-form parts (content, config, vars, ...).
- `actions`: `Action` and its builders, one per action of the output schema.
- `host`: `log` and `now_ms`, the host functions (and their stand-in off wasm).
- `hook`: `Hook`, `handle` (one call on JSON text) and `export` (the component's exports).
"""

from .actions import Action, LogLevel, Outcome, RouteMode
from .event import Conversation, Event, EventError, HookName, Message, Thread, Timeout
from .fields import Fields
from .hook import Hook, answer, export, handle
from .host import in_component, log, now_ms, set_now_ms, take_logs

#: The hook ABI version this kit speaks (the event's ``abi_version``).
HOOKS_ABI_VERSION = 1

__all__ = [
    "HOOKS_ABI_VERSION", "Action", "Conversation", "Event", "EventError", "Fields", "Hook",
    "HookName", "LogLevel", "Message", "Outcome", "RouteMode", "Thread", "Timeout", "answer",
    "export", "handle", "in_component", "log", "now_ms", "set_now_ms", "take_logs",
]
