"""A reverse proxy on loopback that adds an agent's bearer token to every request it passes
on, and passes everything else (method, path, `Host`, `Origin`, the body, a streamed answer)
as it came. The MCP conformance suite has no way to send a credential; through this proxy
it tests `/mcp` as an agent would reach it."""

from __future__ import annotations

import socket
import threading
import time
from typing import AsyncIterator

import httpx2
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

#: Headers of one hop only (RFC 9110 section 7.6.1), never passed on.
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade",
              "proxy-authorization", "proxy-authenticate", "content-length"}


def credential_proxy(upstream: str, token: str) -> Starlette:
    client = httpx2.AsyncClient(base_url=upstream, timeout=httpx2.Timeout(60.0))

    async def forward(request: Request) -> StreamingResponse:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["authorization"] = f"Bearer {token}"
        outgoing = client.build_request(request.method, request.url.path + (
            f"?{request.url.query}" if request.url.query else ""),
            headers=headers, content=await request.body())
        answer = await client.send(outgoing, stream=True)

        async def body() -> AsyncIterator[bytes]:
            try:
                async for chunk in answer.aiter_raw():
                    yield chunk
            finally:
                await answer.aclose()

        passed = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
        return StreamingResponse(body(), status_code=answer.status_code, headers=passed)

    methods = ["GET", "POST", "DELETE", "PUT", "PATCH", "OPTIONS"]
    return Starlette(routes=[Route("/{path:path}", forward, methods=methods)])


class RunningProxy:
    """The proxy served by uvicorn on a free loopback port, in a thread of its own."""

    def __init__(self, upstream: str, token: str) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        config = uvicorn.Config(credential_proxy(upstream, token), host="127.0.0.1",
                                port=port, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("the credential proxy did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
