"""Structured output on the wire: a schema in the strict form OpenAI's APIs want.

OpenAI's strict mode (Chat Completions ``response_format``, the Responses API's
``text.format``) takes a subset of JSON schema: every object lists all its properties
in ``required`` and sets ``additionalProperties: false``; a property that may be left
out is made nullable instead (the reader drops those nulls: ``_output``), and
``default`` is not allowed. A schema that cannot be put in that form (a free-form
``dict``, a fixed-length tuple) is sent as it is with ``strict: false``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._wire import plain_json

__all__ = ["strict_schema"]

_DROPPED = ("default", "uniqueItems")
_JSON_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"))


class _NotStrict(Exception):
    pass


def strict_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` in OpenAI's strict form; ``None`` when it has none."""
    try:
        return _strict(plain_json(schema))
    except _NotStrict:
        return None


def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in schema.items() if k not in _DROPPED}
    if "prefixItems" in out:
        raise _NotStrict
    if "anyOf" in out:
        out["anyOf"] = [_strict(s) for s in out["anyOf"]]
    if isinstance(out.get("items"), dict):
        out["items"] = _strict(out["items"])
    if "enum" in out and "type" not in out:
        kinds = {_json_type(v) for v in out["enum"]}
        if len(kinds) == 1 and None not in kinds:
            out["type"] = kinds.pop()
    if out.get("type") == "object":
        properties = out.get("properties")
        if not isinstance(properties, dict) or out.get("additionalProperties") is not False:
            raise _NotStrict  # a free-form mapping: strict mode has no way to say it
        required = set(out.get("required", ()))
        out["properties"] = {
            name: _strict(s) if name in required else _nullable(_strict(s))
            for name, s in properties.items()
        }
        out["required"] = list(properties)
    return out


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    options = schema.get("anyOf")
    if isinstance(options, list):
        if any(o.get("type") == "null" for o in options):
            return schema
        return {**schema, "anyOf": [*options, {"type": "null"}]}
    return {"anyOf": [schema, {"type": "null"}]}


def _json_type(value: Any) -> str | None:
    for kind, name in _JSON_TYPES:
        if isinstance(value, kind):
            return name
    return None
