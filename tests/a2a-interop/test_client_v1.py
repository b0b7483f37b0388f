"""The official A2A Python SDK's client (a2a-sdk 1.3, A2A v1.0) against a Colloquy agent, as
a user would drive it: the card from its card resolver, a client from its ClientFactory,
over JSON-RPC and over HTTP+JSON.

The agent is `tck` (tests/a2a-tck/sut_agent.py) behind `colloquy serve --a2a-template
a2a-task`; the A2A message id's prefix tells it what to do:
- `tck-complete-task`: `inform` "Hello from TCK" (completed, one text artifact);
- `tck-message-response`: `reply` (v1.0 answers a message instead of a task);
- `tck-input-required`: `query-ref` (input-required); the client's next message to the task
  goes on as that message's own id says;
- `tck-stream-001`: `agree` (working), then `inform` "Stream hello from TCK";
- `test-resubscribe-message-id`: `agree`, 4 s of work, then `inform` "done".
A `cancel` it confirms with an `inform`, once it is done with what it was doing: it handles
one conversation's messages one after another.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import get_artifact_text, get_message_text, new_text_part
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)

from conftest import SentLog

BINDINGS = ["JSONRPC", "HTTP+JSON"]
# Where each binding's calls go, below the agent's URL (the card's supportedInterfaces).
BINDING_PATH = {"JSONRPC": "/a2a/tck", "HTTP+JSON": "/a2a/tck/rest"}
# How long a test waits for a task to reach a state it polls for.
POLL_S = 15.0

COMPLETED = TaskState.TASK_STATE_COMPLETED
WORKING = TaskState.TASK_STATE_WORKING
INPUT_REQUIRED = TaskState.TASK_STATE_INPUT_REQUIRED
CANCELED = TaskState.TASK_STATE_CANCELED
SUBMITTED = TaskState.TASK_STATE_SUBMITTED


def state_name(state: int) -> str:
    return TaskState.Name(state)


def message(prefix: str, text: str = "hello", task_id: str | None = None) -> Message:
    """A user's text message whose id starts with `prefix` (the fixture agent's cue)."""
    msg = Message(role=Role.ROLE_USER, message_id=f"{prefix}-{uuid.uuid4()}",
                  parts=[new_text_part(text)])
    if task_id:
        msg.task_id = task_id
    return msg


@pytest.fixture
async def card(http, tck_url: str) -> AgentCard:
    return await A2ACardResolver(http, tck_url).get_agent_card()


def build_client(http, card: AgentCard, binding: str, *, streaming: bool):
    config = ClientConfig(streaming=streaming, httpx_client=http,
                          supported_protocol_bindings=[binding])
    return ClientFactory(config).create(card)


@pytest.fixture(params=BINDINGS)
def binding(request) -> str:
    return request.param


@pytest.fixture
async def client(http, card: AgentCard, binding: str):
    """A client that sends without streaming: `send_message` blocks for the answer."""
    async with build_client(http, card, binding, streaming=False) as built:
        yield built


@pytest.fixture
async def streaming_client(http, card: AgentCard, binding: str):
    async with build_client(http, card, binding, streaming=True) as built:
        yield built


async def send(client, msg: Message, **configuration) -> StreamResponse:
    """The one answer of a non-streaming send."""
    request = SendMessageRequest(message=msg,
                                 configuration=SendMessageConfiguration(**configuration))
    answers = [answer async for answer in client.send_message(request)]
    assert len(answers) == 1, answers
    return answers[0]


async def send_for_task(client, msg: Message, **configuration) -> Task:
    answer = await send(client, msg, **configuration)
    assert answer.HasField("task"), answer
    return answer.task


async def wait_for_state(client, task_id: str, states: set[int]) -> Task:
    deadline = time.monotonic() + POLL_S
    while True:
        task = await client.get_task(GetTaskRequest(id=task_id))
        if task.status.state in states or time.monotonic() > deadline:
            return task
        await asyncio.sleep(0.1)


def assert_went_by(sent: SentLog, binding: str) -> None:
    """Every call went to the binding's URL, saying A2A-Version 1.0."""
    posts = sent.posts()
    assert posts, "the client sent nothing"
    for request in posts:
        assert request.path.startswith(BINDING_PATH[binding]), request
        if binding == "JSONRPC":
            assert request.path == BINDING_PATH[binding], request
        assert request.a2a_version == "1.0", request


async def test_card_offers_both_bindings_of_v1(card: AgentCard, tck_url: str) -> None:
    interfaces = {(i.protocol_binding, i.protocol_version): i.url
                  for i in card.supported_interfaces}
    assert interfaces[("JSONRPC", "1.0")] == tck_url
    assert interfaces[("HTTP+JSON", "1.0")] == f"{tck_url}/rest"
    assert card.name == "tck"
    assert card.capabilities.streaming
    assert "a2a-task" in {skill.id for skill in card.skills}


async def test_blocking_send_completes_with_the_text_artifact(client, binding, sent) -> None:
    msg = message("tck-complete-task")
    task = await send_for_task(client, msg)

    assert state_name(task.status.state) == state_name(COMPLETED)
    assert [get_artifact_text(a) for a in task.artifacts] == ["Hello from TCK"]
    assert task.context_id == task.id
    assert msg.message_id in [m.message_id for m in task.history]
    assert_went_by(sent, binding)


async def test_a_reply_is_answered_as_a_message(client, binding, sent) -> None:
    answer = await send(client, message("tck-message-response"))

    assert answer.HasField("message"), answer
    assert answer.message.role == Role.ROLE_AGENT
    assert get_message_text(answer.message) == "Direct message response"
    assert_went_by(sent, binding)


async def test_get_task_keeps_the_latest_history(client, binding, sent) -> None:
    task = await send_for_task(client, message("tck-complete-task"))

    full = await client.get_task(GetTaskRequest(id=task.id))
    latest = await client.get_task(GetTaskRequest(id=task.id, history_length=1))
    none = await client.get_task(GetTaskRequest(id=task.id, history_length=0))

    assert state_name(full.status.state) == state_name(COMPLETED)
    assert [m.role for m in full.history] == [Role.ROLE_USER, Role.ROLE_AGENT]
    assert [m.message_id for m in latest.history] == [full.history[-1].message_id]
    assert latest.history[0].role == Role.ROLE_AGENT
    assert list(none.history) == []
    assert [get_artifact_text(a) for a in latest.artifacts] == ["Hello from TCK"]
    assert_went_by(sent, binding)


async def test_list_tasks_finds_the_task(client, binding, sent) -> None:
    task = await send_for_task(client, message("tck-complete-task"))

    listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))

    assert [t.id for t in listed.tasks] == [task.id]
    assert state_name(listed.tasks[0].status.state) == state_name(COMPLETED)
    assert_went_by(sent, binding)


async def test_streaming_send_ends_completed_after_an_artifact_update(
        streaming_client, binding, sent) -> None:
    # 4 s of work between the agent's agree and its inform: the stream is open by then.
    request = SendMessageRequest(message=message("test-resubscribe-message-id"))
    events = [event async for event in streaming_client.send_message(request)]

    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds[0] == "task", kinds
    task_id = events[0].task.id
    assert state_name(events[0].task.status.state) in {state_name(SUBMITTED),
                                                       state_name(WORKING)}
    artifacts = [e.artifact_update for e in events if e.HasField("artifact_update")]
    assert [get_artifact_text(a.artifact) for a in artifacts] == ["done"]
    assert all(a.task_id == task_id for a in artifacts)
    assert kinds[-1] == "status_update", kinds
    assert state_name(events[-1].status_update.status.state) == state_name(COMPLETED)
    assert kinds.index("artifact_update") < len(kinds) - 1
    assert_went_by(sent, binding)


async def test_a_quick_stream_ends_completed_with_the_artifact(
        streaming_client, binding, sent) -> None:
    # agree and inform at once: they may come before the stream's first read, so the
    # stream may be the finished task alone; what it tells must still add up.
    request = SendMessageRequest(message=message("tck-stream-001"))
    events = [event async for event in streaming_client.send_message(request)]

    assert events[0].HasField("task"), events[0]
    texts = [get_artifact_text(a) for a in events[0].task.artifacts]
    texts += [get_artifact_text(e.artifact_update.artifact)
              for e in events if e.HasField("artifact_update")]
    assert texts == ["Stream hello from TCK"]
    last = events[-1]
    final = last.status_update.status if last.HasField("status_update") else last.task.status
    assert state_name(final.state) == state_name(COMPLETED)
    assert_went_by(sent, binding)


async def test_subscribe_follows_a_working_task_to_its_end(
        client, streaming_client, binding, sent) -> None:
    task = await send_for_task(client, message("test-resubscribe-message-id"),
                               return_immediately=True)
    task = await wait_for_state(client, task.id, {WORKING})
    assert state_name(task.status.state) == state_name(WORKING)

    events = [event async for event in
              streaming_client.subscribe(SubscribeToTaskRequest(id=task.id))]

    assert events[0].HasField("task"), events[0]
    assert events[0].task.id == task.id
    texts = [get_artifact_text(e.artifact_update.artifact)
             for e in events if e.HasField("artifact_update")]
    assert texts == ["done"]
    assert state_name(events[-1].status_update.status.state) == state_name(COMPLETED)
    assert_went_by(sent, binding)


async def test_an_answer_to_an_input_required_task_completes_it(client, binding, sent) -> None:
    task = await send_for_task(client, message("tck-input-required"))
    assert state_name(task.status.state) == state_name(INPUT_REQUIRED)
    assert list(task.artifacts) == []

    # The answer's own message id is the agent's next cue: complete.
    answered = await send_for_task(client, message("tck-complete-task", "more input",
                                                   task_id=task.id))

    assert answered.id == task.id
    assert state_name(answered.status.state) == state_name(COMPLETED)
    assert [get_artifact_text(a) for a in answered.artifacts] == ["Hello from TCK"]
    assert_went_by(sent, binding)


async def test_cancel_of_an_input_required_task(client, binding, sent) -> None:
    task = await send_for_task(client, message("tck-input-required"))
    assert state_name(task.status.state) == state_name(INPUT_REQUIRED)

    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))

    assert canceled.id == task.id
    assert state_name(canceled.status.state) == state_name(CANCELED)
    assert get_message_text(canceled.status.message) == "cancelled"
    # The agent's confirmation is no result.
    assert list(canceled.artifacts) == []
    again = await client.get_task(GetTaskRequest(id=task.id))
    assert state_name(again.status.state) == state_name(CANCELED)
    assert_went_by(sent, binding)


async def test_cancel_of_a_working_task(client, binding, sent) -> None:
    task = await send_for_task(client, message("test-resubscribe-message-id"),
                               return_immediately=True)
    assert state_name(task.status.state) in {state_name(SUBMITTED), state_name(WORKING)}
    task = await wait_for_state(client, task.id, {WORKING})
    assert state_name(task.status.state) == state_name(WORKING)

    # Colloquy waits up to 5 s for the agent to confirm; this agent answers once its 4 s of
    # work are over, so on a slow machine the answer may still say working: the task must
    # end canceled all the same.
    canceled = await client.cancel_task(CancelTaskRequest(id=task.id))
    assert canceled.id == task.id
    assert state_name(canceled.status.state) in {state_name(CANCELED), state_name(WORKING)}
    final = await wait_for_state(client, task.id, {CANCELED})

    assert state_name(final.status.state) == state_name(CANCELED)
    assert_went_by(sent, binding)


async def test_the_sdk_v03_transport_on_the_cards_v03_interface(http, card, sent) -> None:
    """The card also offers JSON-RPC 0.3 at the same URL. The SDK prefers 1.0; offered only
    the 0.3 interface (as by an agent that speaks no 1.0), it speaks v0.3 through its compat
    transport, saying `A2A-Version: 0.3`, and Colloquy answers in v0.3."""
    v03_only = [i for i in card.supported_interfaces
                if (i.protocol_binding, i.protocol_version) == ("JSONRPC", "0.3")]
    assert len(v03_only) == 1, card.supported_interfaces
    del card.supported_interfaces[:]
    card.supported_interfaces.extend(v03_only)

    async with build_client(http, card, "JSONRPC", streaming=False) as client:
        done = await send_for_task(client, message("tck-complete-task"))
        asking = await send_for_task(client, message("tck-input-required"))
        got = await client.get_task(GetTaskRequest(id=done.id))
        canceled = await client.cancel_task(CancelTaskRequest(id=asking.id))

    assert state_name(done.status.state) == state_name(COMPLETED)
    assert [get_artifact_text(a) for a in got.artifacts] == ["Hello from TCK"]
    assert state_name(asking.status.state) == state_name(INPUT_REQUIRED)
    assert state_name(canceled.status.state) == state_name(CANCELED)
    posts = sent.posts()
    assert posts and all((p.path, p.a2a_version) == ("/a2a/tck", "0.3") for p in posts), posts
