"""The SDK's wire types follow the server's own description of its API.

Each component schema of ``GET /v1/openapi.json`` has a model here with the same fields,
the same required fields and the same field types, and forbids unknown fields exactly where
the document does (what the client sends); the outcome and commitment-state names are those
of ``docs/hook-input.schema.json`` and ``docs/template.schema.json``. A field added to the
API, a component added, or a name changed fails this test until the models follow.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from colloquy import models

from conftest import REPO

#: Each component schema of the OpenAPI document, and the model that follows it.
MODELS: dict[str, type[BaseModel]] = {
    "ErrorBody": models.ErrorBody,
    "SendMessage": models.SendMessage,
    "StartConversation": models.StartConversation,
    "Message": models.Message,
    "ThreadView": models.ThreadView,
    "CommitmentView": models.CommitmentView,
    "Violation": models.Violation,
    "ConversationView": models.ConversationView,
    "MovesView": models.MovesView,
    "OpenMove": models.OpenMove,
    "SendReceipt": models.SendReceipt,
    "ConversationSummary": models.ConversationSummary,
    "ConversationPage": models.ConversationPage,
    "CommitmentList": models.CommitmentList,
    "InboxItem": models.InboxItem,
    "InboxPage": models.InboxPage,
    "InboxAck": models.InboxAck,
    "InboxAcked": models.InboxAcked,
    "Readiness": models.Readiness,
    "AgentInfo": models.AgentInfo,
    "AgentList": models.AgentList,
    "AuditRecord": models.AuditRecord,
    "AuditTemplate": models.AuditTemplate,
    "AuditChain": models.AuditChain,
    "AuditSignature": models.AuditSignature,
    "Jwks": models.Jwks,
    "MessageSignature": models.MessageSignature,
}


@pytest.fixture(scope="module")
def openapi(server) -> dict[str, Any]:
    document = httpx.get(f"{server.url}/v1/openapi.json", timeout=30).json()
    # The served document is the one kept in the tree (what `docs/http-api.md` points at).
    kept = json.loads((REPO / "engine/server/src/openapi.json").read_text())
    assert document == kept, "the server serves another OpenAPI document than the tree's"
    return document


def _kind(schema: dict[str, Any], resolve: Any) -> tuple[Any, ...]:
    """A schema's shape, in terms both documents share: a JSON type, an enum's values, an
    array of a kind, a named object, or anything."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        target = resolve(name)
        if "enum" in target:
            return ("enum", tuple(sorted(target["enum"])))
        return ("object", name)
    if "anyOf" in schema:
        options = [option for option in schema["anyOf"] if option.get("type") != "null"]
        if len(options) == 1:
            return _kind(options[0], resolve)
        return ("anyOf", tuple(_kind(option, resolve) for option in options))
    if "enum" in schema:
        return ("enum", tuple(sorted(schema["enum"])))
    if schema.get("type") == "array":
        return ("array", _kind(schema.get("items", {}), resolve))
    if "type" not in schema:
        return ("any",)
    return (schema["type"],)


def _same(api: tuple[Any, ...], model: tuple[Any, ...]) -> bool:
    if api == model:
        return True
    # The document leaves some objects unnamed (`{"type": "object"}`) that the SDK types.
    if api[0] == "object" and model[0] == "object" and len(api) == 1:
        return True
    if api[0] == "array" and model[0] == "array":
        return _same(api[1], model[1])
    return False


def _compare(
    where: str,
    api: dict[str, Any],
    api_resolve: Any,
    model: dict[str, Any],
    model_resolve: Any,
    problems: list[str],
) -> None:
    api_fields, model_fields = set(api.get("properties", {})), set(model.get("properties", {}))
    if api_fields != model_fields:
        problems.append(f"{where}: fields {sorted(api_fields)} in the API, "
                        f"{sorted(model_fields)} in the model")
    if set(api.get("required", [])) != set(model.get("required", [])):
        problems.append(f"{where}: required {sorted(api.get('required', []))} in the API, "
                        f"{sorted(model.get('required', []))} in the model")
    if (api.get("additionalProperties") is False) != (model.get("additionalProperties") is False):
        problems.append(f"{where}: unknown fields refused in one and not the other")
    for name in sorted(api_fields & model_fields):
        api_field, model_field = api["properties"][name], model["properties"][name]
        api_kind = _kind(api_field, api_resolve)
        model_kind = _kind(model_field, model_resolve)
        if not _same(api_kind, model_kind):
            problems.append(f"{where}.{name}: {api_kind} in the API, {model_kind} in the model")
        elif "properties" in api_field and model_kind[0] == "object" and len(model_kind) == 2:
            _compare(f"{where}.{name}", api_field, api_resolve,
                     model_resolve(model_kind[1]), model_resolve, problems)


def test_every_component_has_a_model(openapi):
    assert sorted(openapi["components"]["schemas"]) == sorted(MODELS)


@pytest.mark.parametrize("component", sorted(MODELS))
def test_each_model_has_the_components_fields_and_types(openapi, component):
    components = openapi["components"]["schemas"]
    model_schema = MODELS[component].model_json_schema(by_alias=True)
    definitions: dict[str, Any] = model_schema.get("$defs", {})
    problems: list[str] = []
    _compare(component, components[component], components.__getitem__,
             model_schema, definitions.__getitem__, problems)
    assert problems == []


def _names(schema_file: str, definition: str) -> list[str]:
    document = json.loads((REPO / "docs" / schema_file).read_text())
    return sorted(option["const"] for option in document["$defs"][definition]["oneOf"])


def test_outcomes_and_commitment_states_are_the_documents(openapi):
    assert sorted(o.value for o in models.Outcome) == _names("hook-input.schema.json", "Outcome")
    assert sorted(s.value for s in models.CommitmentState) == _names(
        "template.schema.json", "CommitmentState")


def test_the_drift_check_sees_a_missing_field():
    # The check itself can fail: a model without a field of its component is reported.
    class Shorter(BaseModel):
        code: str

    api = {"properties": {"code": {"type": "string"}, "message": {"type": "string"}},
           "required": ["code", "message"]}
    problems: list[str] = []
    _compare("Shorter", api, {}.__getitem__, Shorter.model_json_schema(), {}.__getitem__,
             problems)
    assert len(problems) == 2




def test_an_event_the_sdk_does_not_act_on_reads_with_its_fields():
    # A refused message's event (or a kind a newer server adds) is no message: its fields
    # stay in ``model_extra`` and the typed ones stay empty.
    event = models.ConversationEvent.model_validate_json(
        '{"seq": 5, "at": 1767225602000, "type": "message_refused", "message_id": "b-7",'
        ' "sender": "bob", "performative": "cancel", "to": ["alice"],'
        ' "code": "out_of_protocol"}')
    assert (event.seq, event.type, event.message, event.transitions) == (
        5, "message_refused", None, [])
    assert event.model_extra == {"message_id": "b-7", "sender": "bob",
                                 "performative": "cancel", "to": ["alice"],
                                 "code": "out_of_protocol"}
    assert event.expired_thread() is None
