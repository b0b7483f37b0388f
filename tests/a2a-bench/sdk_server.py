"""The baseline of the A2A benchmark (tests/src/bin/a2a_bench.rs): an agent served by the
A2A Python SDK's own server (a2a-sdk 1.3, JSON-RPC at `/`, A2A v1.0), answering the same
`SendMessage` as Colloquy's agent `bob` does.

    python tests/a2a-bench/sdk_server.py [--port PORT]

Its AgentExecutor completes every task at once with one data artifact `{"ok": true}`, as
bob's `inform` does on Colloquy, so both servers do the same A2A work per request: open a
task, store it, add an artifact, complete it, answer (or stream) the task. One uvicorn
process (one worker, so one core at most), log level warning, no access log. It binds its
socket before it prints its URL, so a connection made once the line is read waits in the
listen backlog rather than being refused.
"""

from __future__ import annotations

import argparse
import socket

import uvicorn
from a2a.helpers.proto_helpers import new_data_part, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from starlette.applications import Starlette

# The listen backlog: above the benchmark's largest connection count.
BACKLOG = 1024


class OkExecutor(AgentExecutor):
    """Completes each task at once with `{"ok": true}` as one data artifact."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None  # execute is called for a message
        task = context.current_task or new_task_from_user_message(message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.add_artifact([new_data_part({"ok": True})], name="ok")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def card(url: str) -> AgentCard:
    return AgentCard(
        name="bench",
        description="An a2a-sdk 1.3 agent that completes every task at once.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["text/plain", "application/json"],
        default_output_modes=["application/json"],
        skills=[AgentSkill(id="ok", name="ok", description="Answers ok.", tags=["bench"])],
    )


def app(url: str) -> Starlette:
    agent_card = card(url)
    handler = DefaultRequestHandler(agent_executor=OkExecutor(),
                                    task_store=InMemoryTaskStore(), agent_card=agent_card)
    routes = [
        *create_agent_card_routes(agent_card),
        *create_jsonrpc_routes(handler, rpc_url="/"),
    ]
    return Starlette(routes=routes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0, help="0: any free port")
    args = parser.parse_args()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(BACKLOG)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
    config = uvicorn.Config(app(url), workers=1, log_level="warning", access_log=False)
    print(f"a2a-sdk server on {url}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])
