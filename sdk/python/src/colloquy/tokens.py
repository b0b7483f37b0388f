"""Tokens that change: a token provider is asked for the bearer token when the client has
none yet, when the one it has is near its expiry (a JWT's ``exp``, read without verifying:
the server verifies), and when the server refused it with 401 — then the request is sent
once more with the new token. For agents that sign in with the short-lived JWTs of an
identity provider (``colloquy serve --auth-jwks …``).

A provider is any callable taking the reason (``"first"``, ``"near_expiry"`` or
``"refused"``) and answering a token, or an awaitable of one::

    async def from_my_idp(reason: str) -> str:
        return await fetch_client_credentials_token()

    alice = Client(url, "alice", token=from_my_idp)
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import time
from typing import Awaitable, Callable, Optional, Union

#: How long before a JWT's ``exp`` the client asks for a new one (seconds), so a token
#: does not expire on its way to the server.
REFRESH_BEFORE_EXPIRY = 30.0

#: A token provider: called with the reason, answers a token (or an awaitable of one).
TokenProvider = Callable[[str], Union[str, Awaitable[str]]]


def expires_at(token: str) -> Optional[float]:
    """The ``exp`` of a JWT (Unix seconds), or None for a token that is no JWT or has none."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, TypeError):
        return None
    exp = claims.get("exp") if isinstance(claims, dict) else None
    return float(exp) if isinstance(exp, (int, float)) and not isinstance(exp, bool) else None


class ProvidedToken:
    """A provider and the token it last gave."""

    def __init__(self, provider: TokenProvider) -> None:
        self._provider = provider
        self._current: Optional[str] = None
        self._lock = asyncio.Lock()

    async def get(self, refused: Optional[str] = None) -> str:
        """The token to send. ``refused`` is the token the server just refused: a new one
        is asked for unless another request already replaced it."""
        async with self._lock:
            current = self._current
            if current is None:
                reason = "first"
            elif refused is not None and refused == current:
                reason = "refused"
            elif (exp := expires_at(current)) is not None and exp <= time.time() + REFRESH_BEFORE_EXPIRY:
                reason = "near_expiry"
            else:
                return current
            token = self._provider(reason)
            if inspect.isawaitable(token):
                token = await token
            if not isinstance(token, str) or not token:
                raise TypeError(f"the token provider answered {type(token).__name__}, not a token")
            self._current = token
            return token
