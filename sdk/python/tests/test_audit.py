"""The audit record checker against the engine's own hashing: RFC 8785 output (the RFC's
number vectors), and a record the server made, verified and then altered."""

from __future__ import annotations

import pytest

from colloquy import Agent, Incoming
from colloquy.audit import AuditBroken, canonical, verify_chain


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0.0, "0"), (-0.0, "0"), (5e-324, "5e-324"), (-5e-324, "-5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"), (9007199254740992.0, "9007199254740992"),
        (295147905179352830000.0, "295147905179352830000"), (1e21, "1e+21"), (1e-7, "1e-7"),
        (0.000001, "0.000001"), (99.5, "99.5"), (333333333.3333333, "333333333.3333333"),
        (1424953923781206.2, "1424953923781206.2"), (4.5, "4.5"), (2e-3, "0.002"),
    ],
)
def test_numbers_are_written_as_ecmascript_writes_them(number, text):
    assert canonical(number) == text


def test_keys_sort_by_utf16_and_strings_escape_as_json_stringify():
    assert canonical({"b": 1, "a": [True, None], "\U0001f600": 0, "\ufb33": 0}) == (
        '{"a":[true,null],"b":1,"\U0001f600":0,"\ufb33":0}')
    assert canonical("\u0001\n\"é") == '"\\u0001\\n\\"é"'
    assert canonical(2**60) == "1152921504606847000"  # past 2^53: the nearest double


async def test_a_record_the_server_made_verifies_and_an_altered_one_does_not(agents, serving):
    alice, bob_client = agents(), agents()
    bob = Agent(bob_client)

    @bob.on("request", template="fipa-request")
    async def book(msg: Incoming) -> None:
        await msg.agree({"price": 99.5, "note": "é\n"})
        await msg.inform({"done": True})

    serving(bob)
    answer = await alice.request(bob_client.agent_id, {"action": "book-room", "n": 2**40})
    record = await alice.audit(answer.conversation_id)
    summary = verify_chain(record)
    assert (summary.length, summary.head, summary.chained_from) == (
        record.chain.length, record.chain.head, 1)

    altered = record.model_dump(mode="json", exclude_none=True)
    agree = next(i for i, e in enumerate(altered["events"])
                 if e.get("message", {}).get("performative") == "agree")
    altered["events"][agree]["message"]["content"]["price"] = 9.5
    with pytest.raises(AuditBroken) as broken:
        verify_chain(altered)
    assert (broken.value.seq, broken.value.check) == (agree + 2, "chain")
