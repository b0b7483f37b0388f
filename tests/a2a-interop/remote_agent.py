"""A remote A2A agent written with the official A2A Python SDK (a2a-sdk 1.3) as its own
server: Colloquy's bridge reaches it as the agent `seller` of an agents file
(`a2a: http://127.0.0.1:PORT/`), in a fipa-request or a fipa-contract-net.

    python tests/a2a-interop/remote_agent.py PORT

Its AgentExecutor completes every task at once with one data artifact. What it answers
depends on the Colloquy performative the bridge names in `metadata.colloquy.performative`
(A2A itself has none):
- `cfp`: a proposal, `{"price": 42, "item": <the cfp's item>}`;
- `accept-proposal`: the delivery, `{"delivered": <the item>}`;
- anything else (a `request`): `{"done": <the request's action>}`.

The JSON-RPC endpoint is `/`, served with the SDK's v0.3 compatibility layer on, so a
`message/send` without an `A2A-Version` header (A2A v0.3) is served as well as v1.0's
`SendMessage`. `GET /calls` lists what it was called with (method and `A2A-Version`
header), for the tests to say which protocol the bridge spoke.
"""

from __future__ import annotations

import argparse
import json

import uvicorn
from a2a.helpers.proto_helpers import get_data_parts, new_data_part, new_task_from_user_message
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types.a2a_pb2 import AgentCapabilities, AgentCard, AgentInterface, AgentSkill
from google.protobuf.json_format import MessageToDict
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


def answer(performative: str, content: object) -> dict:
    """The artifact's data for a message of `performative` with `content`."""
    asked = content if isinstance(content, dict) else {}
    if performative == "cfp":
        return {"price": 42, "item": asked.get("item", "unnamed")}
    if performative == "accept-proposal":
        return {"delivered": asked.get("item", "the proposal's item")}
    return {"done": asked.get("action", "unnamed")}


class SellerExecutor(AgentExecutor):
    """Completes each task at once with the answer as one data artifact."""

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        assert message is not None  # execute is called for a message
        metadata = MessageToDict(message.metadata) if message.metadata else {}
        performative = metadata.get("colloquy", {}).get("performative", "request")
        data = get_data_parts(message.parts)
        content = data[0] if data else {}
        task = context.current_task or new_task_from_user_message(message)
        if context.current_task is None:
            await event_queue.enqueue_event(task)
        updater = TaskUpdater(event_queue, task.id, task.context_id)
        await updater.add_artifact([new_data_part(answer(performative, content))],
                                   name=f"answer to {performative}")
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def card(url: str) -> AgentCard:
    return AgentCard(
        name="seller",
        description="An a2a-sdk 1.3 agent: answers requests, bids on calls for proposals.",
        version="1.0.0",
        supported_interfaces=[
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="1.0"),
            AgentInterface(url=url, protocol_binding="JSONRPC", protocol_version="0.3"),
        ],
        capabilities=AgentCapabilities(streaming=True),
        default_input_modes=["application/json", "text/plain"],
        default_output_modes=["application/json"],
        skills=[AgentSkill(id="sell", name="sell", description="Bids and delivers.",
                           tags=["colloquy-interop"])],
    )


def app(port: int) -> Starlette:
    url = f"http://127.0.0.1:{port}/"
    agent_card = card(url)
    handler = DefaultRequestHandler(agent_executor=SellerExecutor(),
                                    task_store=InMemoryTaskStore(), agent_card=agent_card)
    calls: list[dict] = []

    async def record(request: Request, call_next):  # type: ignore[no-untyped-def]
        if request.method == "POST" and request.url.path == "/":
            body = await request.body()
            try:
                method = json.loads(body).get("method")
            except ValueError:
                method = None
            calls.append({"method": method, "a2a_version": request.headers.get("A2A-Version")})
        return await call_next(request)

    async def list_calls(_: Request) -> JSONResponse:
        return JSONResponse(calls)

    routes = [
        *create_agent_card_routes(agent_card),
        *create_jsonrpc_routes(handler, rpc_url="/", enable_v0_3_compat=True),
        Route("/calls", list_calls, methods=["GET"]),
    ]
    return Starlette(routes=routes, middleware=[Middleware(BaseHTTPMiddleware, dispatch=record)])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("port", type=int)
    args = parser.parse_args()
    print(f"seller: a2a-sdk agent on http://127.0.0.1:{args.port}/", flush=True)
    uvicorn.run(app(args.port), host="127.0.0.1", port=args.port, log_level="warning")
