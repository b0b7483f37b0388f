"""The MCP server of `colloquy serve` (`/mcp`) driven by the official MCP Python SDK's client:
both protocol eras over Streamable HTTP and the `colloquy mcp` stdio bridge. A buyer and two
bidders, each an MCP client, play a contract net through the tools alone; subscriptions,
the engine's verdicts (accepted, accepted with a violation, refused with the moves allowed),
resources, the prompt, and bad input (the spec's errors, nothing changed)."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError

from conftest import ADMIN_TOKEN, Server, connect, token

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

TOOLS = ["list_templates", "start_conversation", "send_message", "wait_for_messages",
         "get_conversation", "list_conversations", "list_commitments"]
READ_ONLY = {"list_templates", "wait_for_messages", "get_conversation", "list_conversations",
             "list_commitments"}


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


async def call(client: Any, tool: str, **arguments: Any) -> dict[str, Any]:
    """A tool's structured result; the test fails on a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.structured_content
    assert isinstance(result.structured_content, dict)
    return result.structured_content


async def wait_for(client: Any, conversation_id: str, performative: str,
                   cursor: int = 0) -> tuple[dict[str, Any], int]:
    """Reads the inbox from `cursor` until a `performative` of the conversation comes; the
    message and the cursor to pass next."""
    with anyio.fail_after(60):
        while True:
            page = await call(client, "wait_for_messages", cursor=cursor, wait_ms=5000)
            for item in page["messages"]:
                message = item["message"]
                if item["conversation_id"] == conversation_id and \
                        message["performative"] == performative:
                    return message, page["next_cursor"]
            cursor = page["next_cursor"]


@pytest.mark.parametrize("era", ["modern", "legacy", "stdio"])
async def test_tools_are_listed_with_schemas_and_hints(server: Server, era: str) -> None:
    async with connect(server, "watcher", era) as client:
        expected = "2025-11-25" if era == "legacy" else "2026-07-28"
        assert client.protocol_version == expected
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        assert sorted(tools) == sorted(TOOLS)
        for name, tool in tools.items():
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema and tool.output_schema["type"] == "object"
            assert tool.annotations and tool.annotations.read_only_hint == (name in READ_ONLY)
        assert "FIPA" in (tools["list_templates"].description or "")


@pytest.mark.parametrize("era", ["modern", "legacy", "stdio"])
async def test_a_contract_net_played_by_mcp_clients(server: Server, era: str) -> None:
    async with connect(server, "buyer", era) as buyer, \
            connect(server, "seller-1", era) as seller_1, \
            connect(server, "seller-2", era) as seller_2:
        # The sellers' cursors start past what earlier tests left in their inboxes.
        cursors = {}
        for name, seller in (("seller-1", seller_1), ("seller-2", seller_2)):
            page = await call(seller, "wait_for_messages", wait_ms=0, limit=256)
            cursors[name] = page["next_cursor"]
        templates = await call(buyer, "list_templates", name="fipa-contract-net")
        assert templates["templates"][0]["thread"]["initial"] == "start"
        started = await call(buyer, "start_conversation", template="fipa-contract-net",
                             participants=["seller-1", "seller-2"], performative="cfp",
                             content={"task": "paint the fence"})
        conversation_id = started["conversation"]["id"]
        assert [m["performative"] for m in started["conversation"]["messages"]] == ["cfp"]

        bids = {"seller-1": 90.5, "seller-2": 120}
        for name, seller in (("seller-1", seller_1), ("seller-2", seller_2)):
            cfp, cursors[name] = await wait_for(seller, conversation_id, "cfp", cursors[name])
            view = await call(seller, "get_conversation", conversation_id=conversation_id)
            moves = {move["performative"]: move for move in view["moves"]}
            assert {"propose", "refuse"} <= set(moves)
            assert moves["propose"]["to"] == ["buyer"]
            sent = await call(seller, "send_message", conversation_id=conversation_id,
                              performative="propose", content={"price": bids[name]},
                              in_reply_to=cfp["id"])
            assert sent["result"] == "accepted", sent

        proposals = {}
        cursor = 0
        with anyio.fail_after(60):
            while len(proposals) < 2:
                page = await call(buyer, "wait_for_messages", cursor=cursor, wait_ms=5000)
                for item in page["messages"]:
                    message = item["message"]
                    if item["conversation_id"] == conversation_id and \
                            message["performative"] == "propose":
                        proposals[message["sender"]] = message
                cursor = page["next_cursor"]
        assert proposals["seller-1"]["content"] == {"price": 90.5}
        # The buyer's moves now: accept or reject each proposal.
        view = await call(buyer, "get_conversation", conversation_id=conversation_id)
        accept = next(m for m in view["moves"] if m["performative"] == "accept-proposal")
        assert sorted(accept["to"]) == ["seller-1", "seller-2"]
        # A bidder sees its own thread only: not the other bid.
        seller_view = await call(seller_1, "get_conversation", conversation_id=conversation_id)
        senders = {m["sender"] for m in seller_view["conversation"]["messages"]}
        assert "seller-2" not in senders

        await call(buyer, "send_message", conversation_id=conversation_id,
                   performative="accept-proposal", to=["seller-1"],
                   in_reply_to=proposals["seller-1"]["id"], content={})
        await call(buyer, "send_message", conversation_id=conversation_id,
                   performative="reject-proposal", to=["seller-2"],
                   in_reply_to=proposals["seller-2"]["id"], content={})
        accepted, cursors["seller-1"] = await wait_for(
            seller_1, conversation_id, "accept-proposal", cursors["seller-1"])
        done = await call(seller_1, "send_message", conversation_id=conversation_id,
                          performative="inform", content={"painted": True},
                          in_reply_to=accepted["id"])
        assert done["result"] == "accepted"
        assert done["status"] == "completed" and done["outcome"] == "success", done
        listed = await call(buyer, "list_conversations", template="fipa-contract-net")
        assert conversation_id in [c["id"] for c in listed["conversations"]]


async def test_wait_for_messages_acknowledges_only_what_the_next_call_passes(
        server: Server) -> None:
    async with connect(server, "buyer") as buyer, connect(server, "assessor") as assessor:
        first = await call(assessor, "wait_for_messages", wait_ms=0, limit=256)
        start = first["next_cursor"]
        started = await call(buyer, "start_conversation", template="fipa-request",
                             participants=["assessor"], performative="request",
                             content={"action": "check"})
        conversation_id = started["conversation"]["id"]
        page = await call(assessor, "wait_for_messages", cursor=start, wait_ms=5000)
        assert [i["conversation_id"] for i in page["messages"]] == [conversation_id]
        # The result was "lost": the same cursor reads the message again.
        again = await call(assessor, "wait_for_messages", cursor=start, wait_ms=0)
        assert [i["seq"] for i in again["messages"]] == [i["seq"] for i in page["messages"]]
        # Passing next_cursor acknowledges it: nothing is left.
        after = await call(assessor, "wait_for_messages", cursor=page["next_cursor"], wait_ms=0)
        assert after["messages"] == []


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_out_of_protocol_under_report_is_accepted_with_its_violation(
        server: Server, era: str) -> None:
    async with connect(server, "buyer", era) as buyer:
        started = await call(buyer, "start_conversation", template="fipa-contract-net",
                             participants=["seller-1"], performative="cfp", content={})
        sent = await call(buyer, "send_message", conversation_id=started["conversation"]["id"],
                          performative="inform", content={"early": True})
        assert sent["result"] == "accepted_with_violation"
        assert sent["violation"]["kind"] == "out_of_protocol"


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_move_refused_under_enforce_names_the_moves_allowed(
        server: Server, era: str) -> None:
    async with connect(server, "loan-desk", era) as desk, \
            connect(server, "assessor", era) as assessor:
        started = await call(desk, "start_conversation", template="credit-assessment",
                             participants=["assessor"], performative="request",
                             content={"amount": 1000, "purpose": "a car"},
                             parameters={"applicant_id": "A-1", "income_source": "salary"})
        conversation_id = started["conversation"]["id"]
        result = await assessor.call_tool("send_message", {
            "conversation_id": conversation_id, "performative": "propose", "content": {}})
        assert result.is_error
        refusal = result.structured_content
        assert refusal["result"] == "refused"
        assert refusal["error"]["code"] == "out_of_protocol"
        assert [m["performative"] for m in refusal["allowed_moves"]] == \
            ["inform", "refuse", "failure"]
        # Nothing changed: the thread still waits for the assessment.
        view = await call(assessor, "get_conversation", conversation_id=conversation_id)
        assert view["conversation"]["threads"][0]["state"] == "assessing"
        # A content schema refusal names the field.
        result = await desk.call_tool("start_conversation", {
            "template": "credit-assessment", "participants": ["assessor"],
            "performative": "request", "content": {"amount": -5, "purpose": "x"},
            "parameters": {"applicant_id": "A-2", "income_source": "salary"}})
        assert result.is_error
        assert result.structured_content["error"]["pointer"].startswith("/message/content")


async def test_a_subscribed_conversation_tells_of_its_changes_in_both_eras(
        server: Server) -> None:
    async with connect(server, "buyer") as buyer:
        started = await call(buyer, "start_conversation", template="fipa-request",
                             participants=["seller-2"], performative="request",
                             content={"action": "quote"})
        conversation_id = started["conversation"]["id"]
    uri = f"colloquy://conversations/{conversation_id}"
    updates: list[str] = []
    got_update = anyio.Event()

    async def on_message(message: Any) -> None:
        params = getattr(getattr(message, "root", message), "params", None)
        if getattr(params, "uri", None) == uri:
            updates.append(uri)
            got_update.set()

    # 2025-11-25: resources/subscribe, updates on the session's stream.
    async with connect(server, "buyer", "legacy", message_handler=on_message) as legacy, \
            connect(server, "seller-2") as seller:
        await legacy.subscribe_resource(uri)
        await call(seller, "send_message", conversation_id=conversation_id,
                   performative="agree", content={})
        with anyio.fail_after(30):
            await got_update.wait()
    # 2026-07-28: subscriptions/listen.
    async with connect(server, "buyer") as modern, connect(server, "seller-2") as seller:
        async with modern.listen(resource_subscriptions=[uri]) as subscription:
            await call(seller, "send_message", conversation_id=conversation_id,
                       performative="inform", content={"quote": 12})
            with anyio.fail_after(30):
                event = await subscription.__anext__()
            assert event.uri == uri
        read = await modern.read_resource(uri)
        assert '"outcome":"success"' in read.contents[0].text.replace(" ", "")


async def test_resources_and_the_prompt(server: Server) -> None:
    async with connect(server, "watcher", "legacy") as client:
        listed = [r.uri for r in (await client.list_resources()).resources]
        assert "colloquy://inbox/watcher" in listed
        assert "colloquy://templates/fipa-contract-net" in listed
        template = await client.read_resource("colloquy://templates/fipa-query")
        assert '"name":"fipa-query"' in template.contents[0].text.replace(" ", "")
        prompt = await client.get_prompt("take_part", {"template": "fipa-contract-net",
                                                       "role": "participant"})
        text = prompt.messages[0].content.text
        assert "you may send `propose`" in text
        with pytest.raises(MCPError):
            await client.read_resource("colloquy://conversations/no-such-conversation")
        with pytest.raises(MCPError):
            await client.read_resource("colloquy://inbox/buyer")  # another agent's inbox


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_bad_tool_calls_get_the_specs_errors(server: Server, era: str) -> None:
    async with connect(server, "watcher", era) as client:
        before = await call(client, "list_conversations")
        with pytest.raises(MCPError) as unknown:
            await client.call_tool("drop_database", {})
        assert unknown.value.error.code == -32602
        with pytest.raises(MCPError) as invalid:
            await client.call_tool("send_message", {"conversation_id": "x", "performative": 7})
        assert invalid.value.error.code == -32602
        assert "performative" in invalid.value.error.message
        assert await call(client, "list_conversations") == before


async def test_http_level_refusals(server: Server) -> None:
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}
    headers = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
    async with httpx2.AsyncClient(timeout=30) as http:
        # No token, a token nobody issued: 401 pointing at the resource metadata.
        for credentials in ({}, {"Authorization": "Bearer nobody"}):
            answer = await http.post(server.mcp, json=initialize,
                                     headers=headers | credentials)
            assert answer.status_code == 401
            assert answer.json()["error"]["code"] == "unauthenticated"
            challenge = answer.headers["www-authenticate"]
            assert 'resource_metadata="' in challenge
            metadata_url = challenge.split('resource_metadata="')[1].rstrip('"')
            metadata = (await http.get(metadata_url)).json()
            assert metadata["resource"] == server.mcp
        # The admin is no agent.
        answer = await http.post(server.mcp, json=initialize,
                                 headers=headers | {"Authorization": f"Bearer {ADMIN_TOKEN}"})
        assert answer.status_code == 403
        good = headers | {"Authorization": f"Bearer {token('watcher')}"}
        # A browser page of another origin (DNS rebinding): refused.
        answer = await http.post(server.mcp, json=initialize,
                                 headers=good | {"Origin": "http://evil.example"})
        assert answer.status_code == 403
        # A Host that is not this server's name.
        answer = await http.post(server.mcp, json=initialize,
                                 headers=good | {"Host": "evil.example"})
        assert answer.status_code == 403
        # An unknown protocol version.
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        answer = await http.post(server.mcp, json=listing,
                                 headers=good | {"MCP-Protocol-Version": "1999-01-01"})
        assert answer.status_code == 400
        # The same origin as the server is welcome.
        answer = await http.post(server.mcp, json=initialize,
                                 headers=good | {"Origin": server.url})
        assert answer.status_code == 200


async def test_refusals_leave_the_connection_usable(server: Server) -> None:
    """Refusals before the body is read (the gate's 401, the SDK's `Host` and `Origin` 403s)
    used to make the server close a kept-alive connection under the client, whose next
    request then failed with no answer (about one in twenty here); the body is now read
    first, so every request on one connection gets its answer."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}
    base = {"Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {token('watcher')}"}
    refusals = [({"Host": "evil.example"}, 403), ({"Origin": "http://evil.example"}, 403),
                ({"Authorization": "Bearer nobody"}, 401)]
    async with httpx2.AsyncClient(timeout=30) as http:
        for _ in range(100):
            for headers, status in refusals:
                answer = await http.post(server.mcp, json=body, headers=base | headers)
                assert answer.status_code == status
