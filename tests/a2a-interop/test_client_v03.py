"""The official A2A Python SDK's client of the v0.3 line (a2a-sdk 0.3.x, A2A v0.3) against a
Colloquy agent. A v0.3 client sends no `A2A-Version` header, and reads the v0.3 card,
which Colloquy serves at `.well-known/agent.json` (v1.0's `agent-card.json` has no
top-level `url`, which this client needs): the card resolver is pointed there.

The agent is `tck` (tests/a2a-tck/sut_agent.py); test_client_v1.py says what each message
id prefix makes it do.
"""

from __future__ import annotations

import uuid

import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import (
    AgentCard,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskIdParams,
    TaskQueryParams,
    TaskState,
    TaskStatusUpdateEvent,
    TextPart,
)

from conftest import SentLog

V03_CARD_PATH = "/.well-known/agent.json"


def message(prefix: str, text: str = "hello", task_id: str | None = None) -> Message:
    """A user's text message whose id starts with `prefix` (the fixture agent's cue)."""
    return Message(role=Role.user, message_id=f"{prefix}-{uuid.uuid4()}",
                   parts=[Part(root=TextPart(text=text))], task_id=task_id)


def texts(task: Task) -> list[str]:
    return [part.root.text for artifact in task.artifacts or [] for part in artifact.parts
            if isinstance(part.root, TextPart)]


@pytest.fixture
async def card(http, tck_url: str) -> AgentCard:
    return await A2ACardResolver(http, tck_url, agent_card_path=V03_CARD_PATH).get_agent_card()


@pytest.fixture
async def client(http, card: AgentCard):
    """A client that sends without streaming: `message/send` with `blocking: true`."""
    built = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
    yield built
    await built.close()


@pytest.fixture
async def streaming_client(http, card: AgentCard):
    built = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
    yield built
    await built.close()


async def send_for_task(client, msg: Message) -> Task:
    answers = [answer async for answer in client.send_message(msg)]
    assert len(answers) == 1, answers
    task, update = answers[0]
    assert isinstance(task, Task) and update is None, answers[0]
    return task


def assert_spoke_v03(sent: SentLog, tck_url: str) -> None:
    """Every call went to the card's JSON-RPC URL, without an A2A-Version header."""
    posts = sent.posts()
    assert posts, "the client sent nothing"
    for request in posts:
        assert request.path == "/a2a/tck", request
        assert request.a2a_version is None, request


async def test_the_v03_card(card: AgentCard, tck_url: str, sent: SentLog) -> None:
    assert card.url == tck_url
    assert card.protocol_version == "0.3.0"
    assert card.preferred_transport == "JSONRPC"
    assert card.name == "tck"
    assert card.capabilities.streaming
    assert [r.path for r in sent.requests] == ["/a2a/tck/.well-known/agent.json"]


async def test_send_completes_with_the_text_artifact(client, sent, tck_url) -> None:
    task = await send_for_task(client, message("tck-complete-task"))

    assert task.status.state == TaskState.completed
    assert texts(task) == ["Hello from TCK"]
    assert task.context_id == task.id
    assert_spoke_v03(sent, tck_url)


async def test_get_task(client, sent, tck_url) -> None:
    task = await send_for_task(client, message("tck-complete-task"))

    got = await client.get_task(TaskQueryParams(id=task.id, history_length=1))

    assert got.id == task.id
    assert got.status.state == TaskState.completed
    assert texts(got) == ["Hello from TCK"]
    assert_spoke_v03(sent, tck_url)


async def test_streaming_send_ends_completed(streaming_client, sent, tck_url) -> None:
    # 4 s of work between the agent's agree and its inform: the stream is open by then.
    events = [event async for event in
              streaming_client.send_message(message("test-resubscribe-message-id"))]

    updates = [update for _, update in events if update is not None]
    artifacts = [u for u in updates if isinstance(u, TaskArtifactUpdateEvent)]
    assert [part.root.text for a in artifacts for part in a.artifact.parts] == ["done"]
    assert isinstance(updates[-1], TaskStatusUpdateEvent), updates
    assert updates[-1].status.state == TaskState.completed
    assert updates[-1].final
    assert updates.index(artifacts[0]) < len(updates) - 1
    # The client's own aggregate of the stream.
    final_task = events[-1][0]
    assert final_task.status.state == TaskState.completed
    assert texts(final_task) == ["done"]
    assert_spoke_v03(sent, tck_url)


async def test_a_quick_stream_ends_completed(streaming_client, sent, tck_url) -> None:
    # agree and inform at once: they may come before the stream's first read, so the
    # stream may be the finished task alone; what the client makes of it must add up.
    events = [event async for event in streaming_client.send_message(message("tck-stream-001"))]

    final_task = events[-1][0]
    assert final_task.status.state == TaskState.completed
    assert texts(final_task) == ["Stream hello from TCK"]
    assert_spoke_v03(sent, tck_url)


async def test_an_answer_to_an_input_required_task_completes_it(client, sent, tck_url) -> None:
    task = await send_for_task(client, message("tck-input-required"))
    assert task.status.state == TaskState.input_required

    answered = await send_for_task(client, message("tck-complete-task", "more input",
                                                   task_id=task.id))

    assert answered.id == task.id
    assert answered.status.state == TaskState.completed
    assert texts(answered) == ["Hello from TCK"]
    assert_spoke_v03(sent, tck_url)


async def test_cancel_of_an_input_required_task(client, sent, tck_url) -> None:
    task = await send_for_task(client, message("tck-input-required"))
    assert task.status.state == TaskState.input_required

    canceled = await client.cancel_task(TaskIdParams(id=task.id))

    assert canceled.id == task.id
    assert canceled.status.state == TaskState.canceled
    assert texts(canceled) == []
    assert_spoke_v03(sent, tck_url)
