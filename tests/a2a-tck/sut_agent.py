"""The A2A TCK's system under test, on Colloquy's side: the agent `tck` written with the
project's Python SDK, behaving as the TCK's scenarios (`scenarios/*.feature` of the kit)
describe. The A2A message id's prefix says what to do; an A2A client's task reaches this
agent as an `a2a-task` conversation (`colloquy serve --a2a-template a2a-task`), the message
id as the opening request's id.

    python tests/a2a-tck/sut_agent.py http://127.0.0.1:7700 tck

What each A2A outcome is in the conversation:
- completed with an artifact: `inform` (a string is a text part; `{"files": […]}` file
  parts; any other object one data part);
- working: `agree`; input-required: `query-ref`, answered by the client's next message;
- rejected: `refuse`; canceled: the `inform` that confirms the client's `cancel`;
- a message instead of a task: `reply`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import signal

from colloquy import Agent, Client, Incoming

# The scenarios' "2x streaming timeout": long enough for the TCK to subscribe and drop.
LONG_TASK_SECONDS = 4.0
TEMPLATE = "a2a-task"


def file_part(**where: str) -> dict:
    """`{"files": [one A2A file]}`: `output.txt` as text/plain, bytes or a URL."""
    return {"files": [{"name": "output.txt", "mimeType": "text/plain", **where}]}


TCK_FILE = file_part(bytes=base64.b64encode(b"tck").decode())
TCK_FILE_URL = file_part(uri="https://example.com/output.txt")

# Prefix → the answers the agent gives, in order, after the request. The longest prefix
# wins (`tck-artifact-file-url` before `tck-artifact-file`).
SCENARIOS: dict[str, list[tuple[str, object]]] = {
    "tck-complete-task": [("inform", "Hello from TCK")],
    "tck-artifact-text": [("inform", "Generated text content")],
    "tck-artifact-file-url": [("inform", TCK_FILE_URL)],
    "tck-artifact-file": [("inform", TCK_FILE)],
    "tck-artifact-data": [("inform", {"key": "value", "count": 42})],
    "tck-message-response": [("reply", "Direct message response")],
    "tck-input-required": [("query-ref", {"question": "More input, please"})],
    "tck-reject-task": [("refuse", {"reason": "rejected"})],
    "tck-stream-001": [("agree", {}), ("inform", "Stream hello from TCK")],
    "tck-stream-002": [("inform", {})],
    "tck-stream-003": [("agree", {}), ("inform", "Stream task lifecycle")],
    "tck-stream-ordering-001": [("agree", {}), ("inform", "Ordered output")],
    "tck-stream-artifact-text": [("agree", {}), ("inform", "Streamed text content")],
    "tck-stream-artifact-file": [("agree", {}), ("inform", TCK_FILE)],
    "tck-stream-artifact-chunked": [("agree", {}), ("inform", "chunk-1 chunk-2")],
    "test-resubscribe-message-id": [("agree", {}), ("sleep", LONG_TASK_SECONDS),
                                    ("inform", "done")],
}


def scenario(message_id: str) -> list[tuple[str, object]]:
    """The answers for a message id: its longest matching prefix's, else an echo."""
    matching = [prefix for prefix in SCENARIOS if message_id.startswith(prefix)]
    if not matching:
        return [("inform", f"Unhandled messageId prefix: {message_id}")]
    return SCENARIOS[max(matching, key=len)]


async def play(msg: Incoming) -> None:
    for performative, content in scenario(msg.message.id):
        if performative == "sleep":
            await asyncio.sleep(float(content))  # type: ignore[arg-type]
        else:
            await msg.reply(performative, content)


def build(agent: Agent) -> None:
    @agent.on("request", template=TEMPLATE)
    async def request(msg: Incoming) -> None:
        await play(msg)

    @agent.on("inform", template=TEMPLATE)
    async def answered(msg: Incoming) -> None:
        # The client answered the agent's question: go on as its message id says.
        await play(msg)

    @agent.on("cancel", template=TEMPLATE)
    async def cancel(msg: Incoming) -> None:
        await msg.inform({"cancelled": True})


async def main(url: str, agent_id: str) -> None:
    async with Client(url, agent_id, os.environ.get("COLLOQUY_TOKEN")) as client:
        await client.ready()
        agent = Agent(client, concurrency=32)
        build(agent)
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, agent.stop)
        print(f"{agent_id}: the TCK's agent, serving its inbox at {url}", flush=True)
        await agent.run()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", nargs="?", default="http://127.0.0.1:7700")
    parser.add_argument("agent", nargs="?", default="tck")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.agent))
