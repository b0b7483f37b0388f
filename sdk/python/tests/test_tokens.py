"""A token provider instead of a fixed token: asked first, again when the JWT it gave is
near its ``exp``, and again when the server refuses its token with 401 (the request then
goes out once more). Against a stand-in server (``httpx.MockTransport``) that accepts only
the token it was told to."""

from __future__ import annotations

import base64
import json
import time

import httpx
import pytest

from colloquy import Client, Unauthenticated
from colloquy.tokens import expires_at


def jwt(exp: float) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'EdDSA'})}.{part({'sub': 'alice', 'exp': int(exp)})}.c2ln"


def stand_in(accepted: set[str], seen: list[str]) -> httpx.AsyncClient:
    def answer(request: httpx.Request) -> httpx.Response:
        token = request.headers.get("authorization", "").removeprefix("Bearer ")
        seen.append(token)
        if token not in accepted:
            return httpx.Response(401, json={"error": {"code": "unauthenticated",
                                                       "message": "bearer JWT refused"}})
        return httpx.Response(200, json={"conversations": []})

    return httpx.AsyncClient(transport=httpx.MockTransport(answer))


async def test_a_refused_token_is_replaced_and_the_request_sent_again():
    reasons: list[str] = []
    fresh = jwt(time.time() + 600)

    async def provider(reason: str) -> str:
        reasons.append(reason)
        return "stale" if reason == "first" else fresh

    seen: list[str] = []
    async with Client("http://stand-in", "alice", token=provider,
                      http_client=stand_in({fresh}, seen)) as alice:
        page = await alice.conversations()
        assert page.conversations == []
        await alice.conversations()
    assert reasons == ["first", "refused"]
    assert seen == ["stale", fresh, fresh]


async def test_a_jwt_near_expiry_is_replaced_before_it_is_sent():
    reasons: list[str] = []
    soon, later = jwt(time.time() + 10), jwt(time.time() + 600)
    tokens = iter([soon, later])

    def provider(reason: str) -> str:  # a plain function will do
        reasons.append(reason)
        return next(tokens)

    seen: list[str] = []
    async with Client("http://stand-in", "alice", token=provider,
                      http_client=stand_in({soon, later}, seen)) as alice:
        await alice.conversations()
        await alice.conversations()
        await alice.conversations()
    assert reasons == ["first", "near_expiry"]
    assert seen == [soon, later, later]
    assert expires_at(later) is not None and expires_at("not-a-jwt") is None


async def test_a_second_refusal_is_the_callers():
    async with Client("http://stand-in", "alice", token=lambda reason: "never-good",
                      http_client=stand_in(set(), [])) as alice:
        with pytest.raises(Unauthenticated):
            await alice.conversations()
