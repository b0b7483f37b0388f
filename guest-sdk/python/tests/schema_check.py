"""A validator for the part of JSON Schema that docs/hook-output.schema.json uses ($ref,
oneOf, anyOf, type, const, enum, properties, required, additionalProperties, items,
minimum), so the schema test needs no third-party package. When ``jsonschema`` is
installed, the tests also validate with it.
"""

from __future__ import annotations

from typing import Any

_TYPES = {
    "null": lambda v: v is None,
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}
_KNOWN = {"$ref", "oneOf", "anyOf", "type", "const", "enum", "properties", "required",
          "additionalProperties", "items", "minimum", "description", "format", "default",
          "$defs", "$schema", "title"}


def errors(value: Any, schema: Any, root: dict[str, Any], where: str = "") -> list[str]:
    """What is wrong with ``value`` under ``schema`` (``[]`` when it validates)."""
    if schema is True:
        return []
    if schema is False:
        return [f"{where or '/'}: no value is allowed here"]
    unknown = set(schema) - _KNOWN
    if unknown:
        raise ValueError(f"schema_check does not know {sorted(unknown)}: extend it")
    found: list[str] = []
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/$defs/")
        found += errors(value, root["$defs"][name], root, where)
    if "oneOf" in schema:
        passing = [s for s in schema["oneOf"] if not errors(value, s, root, where)]
        if len(passing) != 1:
            found.append(f"{where or '/'}: matches {len(passing)} of oneOf, not exactly 1")
    if "anyOf" in schema and not any(not errors(value, s, root, where)
                                     for s in schema["anyOf"]):
        found.append(f"{where or '/'}: matches none of anyOf")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_TYPES[t](value) for t in types):
            return found + [f"{where or '/'}: {value!r} is not of type {types}"]
    if "const" in schema and value != schema["const"]:
        found.append(f"{where or '/'}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        found.append(f"{where or '/'}: {value!r} is not one of {schema['enum']}")
    if "minimum" in schema and _TYPES["number"](value) and value < schema["minimum"]:
        found.append(f"{where or '/'}: {value} is under {schema['minimum']}")
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name in schema.get("required", []):
            if name not in value:
                found.append(f"{where}/{name}: required")
        for name, item in value.items():
            if name in properties:
                found += errors(item, properties[name], root, f"{where}/{name}")
            elif "additionalProperties" in schema:
                found += errors(item, schema["additionalProperties"], root, f"{where}/{name}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            found += errors(item, schema["items"], root, f"{where}/{index}")
    return found
