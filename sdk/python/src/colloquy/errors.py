"""What a call can fail with.

Every error answer of the API carries ``{"error": {"code", "message", "pointer"?}}``; it is
raised as the :class:`ApiError` subclass of its HTTP status, with the code, the message, the
pointer (a JSON pointer into the request naming the field at fault) and the status, so
agents catch the kind of failure they can act on (``except Conflict``) and read the code for
the detail (``error.code == "duplicate_conversation"``). The status table is
``docs/http-api.md``, "Errors".
"""

from __future__ import annotations

from typing import Optional

import httpx
from pydantic import ValidationError

from .models import ErrorBody


class ColloquyError(Exception):
    """Base of every error the SDK raises."""


class ApiError(ColloquyError):
    """The server answered with an error body."""

    #: The HTTP status this class stands for (``None``: any status without a class).
    status_code: Optional[int] = None

    def __init__(self, status: int, code: str, message: str, pointer: Optional[str] = None):
        self.status = status
        self.code = code
        self.message = message
        self.pointer = pointer
        where = f" at {pointer}" if pointer else ""
        super().__init__(f"HTTP {status} {code}: {message}{where}")

    @property
    def transient(self) -> bool:
        """Whether the same call may succeed later (the server's 5xx)."""
        return self.status >= 500


class BadRequest(ApiError):
    """400: malformed JSON, a missing, unknown or mistyped field, a bad query or path."""

    status_code = 400


class Unauthenticated(ApiError):
    """401: no credentials, or a token the server does not know."""

    status_code = 401


class Forbidden(ApiError):
    """403: not a party to the conversation, another agent's inbox, the admin acting."""

    status_code = 403


class NotFound(ApiError):
    """404: unknown conversation, template, commitment or route."""

    status_code = 404


class MethodNotAllowed(ApiError):
    """405: a known path asked with another method."""

    status_code = 405


class RequestTimeout(ApiError):
    """408: the request's body did not arrive in full within the server's 30 s."""

    status_code = 408


class Conflict(ApiError):
    """409: out of protocol (under ``enforce``), a duplicate conversation id, a settled
    commitment, a conversation ended at its message limit."""

    status_code = 409


class ConversationEnded(ApiError):
    """410: a message to a conversation that has ended."""

    status_code = 410


class PayloadTooLarge(ApiError):
    """413: a body over 1 MiB, or a context over the template's cap."""

    status_code = 413


class Unprocessable(ApiError):
    """422: the request is well formed but the conversation refuses it: an unknown
    performative, a schema violation, a rule or hook refusing the message, a taken
    ``message_id``."""

    status_code = 422


class ServiceUnavailable(ApiError):
    """503: the store is unreachable, the hook pool is full, the server is shutting down
    or has no template loaded. Nothing was recorded: retry."""

    status_code = 503


class ServerError(ApiError):
    """Any other 5xx: the detail is in the server's log, never in the answer."""


class TransportError(ColloquyError):
    """The server could not be reached, or the connection broke mid-answer."""


class DecodeError(ColloquyError):
    """The server answered something this SDK cannot read (not a Colloquy server?)."""


class AnswerTimeout(ColloquyError):
    """An initiator helper's time ran out before the final answer.

    The conversation goes on without the helper: read it with
    ``Client.conversation(error.conversation_id)``, or cancel it.
    """

    def __init__(self, conversation_id: str, timeout: float):
        self.conversation_id = conversation_id
        self.timeout = timeout
        super().__init__(
            f"no final answer in conversation {conversation_id!r} within {timeout:g} s"
        )


_BY_STATUS: dict[int, type[ApiError]] = {
    cls.status_code: cls
    for cls in (
        BadRequest,
        Unauthenticated,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        RequestTimeout,
        Conflict,
        ConversationEnded,
        PayloadTooLarge,
        Unprocessable,
        ServiceUnavailable,
    )
    if cls.status_code is not None
}


def error_from_answer(status: int, body: bytes) -> ApiError:
    """The exception for an error answer: its status's class, built from its body.

    A body that is not the API's error body (a proxy's page, a bare 400 from the HTTP
    layer) becomes code ``http_error`` with the body's text as the message.
    """
    try:
        detail = ErrorBody.model_validate_json(body).error
        code, message, pointer = detail.code, detail.message, detail.pointer
    except ValidationError:
        code, message, pointer = "http_error", body.decode("utf-8", "replace")[:512], None
    if status in _BY_STATUS:
        cls = _BY_STATUS[status]
    elif status >= 500:
        cls = ServerError
    else:
        cls = ApiError
    return cls(status, code, message, pointer)


async def raise_for_answer(response: httpx.Response) -> None:
    """Raises the :class:`ApiError` of a non-2xx answer (reading its body if streamed)."""
    if response.is_success:
        return
    body = await response.aread()
    raise error_from_answer(response.status_code, body)
