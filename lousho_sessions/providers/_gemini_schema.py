"""JSON schema in the OpenAPI subset Gemini's ``Schema`` takes (tools, structured answers).

Gemini's ``Schema`` (``FunctionDeclaration.parameters``, ``GenerationConfig.responseSchema``)
is a subset of OpenAPI 3.0: upper-case ``type`` names, ``nullable`` instead of a ``null``
type, ``enum`` only of strings, ``format`` only where the API knows it, no
``additionalProperties``, ``prefixItems`` or ``const``. :func:`openapi_schema` converts
what fits, keeping the property order (``propertyOrdering``, which the model follows when
it writes a structured answer), and drops constraints the subset cannot say (the tool's
own argument check still applies them). A schema that cannot be said at all (a free-form
mapping, a fixed-length tuple, an enum of numbers) gives ``None``: the caller then sends
it whole as ``parametersJsonSchema`` / ``responseJsonSchema``, which newer models accept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._wire import plain_json

__all__ = ["declaration", "openapi_schema"]

_TYPES = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
}
#: the formats the API accepts, by type (others are said in the description instead)
_FORMATS = {"STRING": {"enum", "date-time"}, "NUMBER": {"float", "double"}}
_FORMATS["INTEGER"] = {"int32", "int64"}
#: keywords copied as they are (the subset names them the same way)
_KEPT = (
    "title",
    "description",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "minLength",
    "maxLength",
    "minProperties",
    "maxProperties",
    "pattern",
    "default",
    "example",
)
#: keywords the subset lacks that only narrow what is valid: dropped
_DROPPED = frozenset(
    {
        "$schema",
        "$id",
        "additionalProperties",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "uniqueItems",
        "examples",
        "readOnly",
        "writeOnly",
        "deprecated",
        "$comment",
    }
)


class _Unsayable(Exception):
    pass


def openapi_schema(schema: Mapping[str, Any]) -> dict[str, Any] | None:
    """``schema`` as a Gemini ``Schema``; ``None`` when the subset cannot say it."""
    try:
        return _convert(plain_json(schema))
    except (_Unsayable, RecursionError):
        return None


def _convert(schema: Any) -> dict[str, Any]:
    if schema is True or schema == {}:
        raise _Unsayable  # any value at all: the subset has no way to say it
    if not isinstance(schema, dict):
        raise _Unsayable
    unknown = set(schema) - _DROPPED - set(_KEPT)
    unknown -= {"type", "anyOf", "oneOf", "enum", "const", "format", "items", "properties"}
    unknown -= {"required", "nullable"}
    if unknown or "$ref" in schema or "prefixItems" in schema:
        raise _Unsayable
    if schema.get("type") == "object" and _free_form(schema):
        raise _Unsayable
    options = schema.get("anyOf", schema.get("oneOf"))
    if options is not None:
        return _any_of(schema, options)
    out: dict[str, Any] = {}
    nullable = bool(schema.get("nullable"))
    kind = schema.get("type")
    if isinstance(kind, list):
        names = [k for k in kind if k != "null"]
        nullable = nullable or len(names) < len(kind)
        if len(names) != 1:
            raise _Unsayable
        kind = names[0]
    enum = schema.get("enum")
    if "const" in schema:
        enum = [schema["const"]]
    if enum is not None:
        if not all(isinstance(v, str) for v in enum if v is not None) or not enum:
            raise _Unsayable
        nullable = nullable or None in enum
        enum = [v for v in enum if v is not None]
        kind = kind or "string"
    if kind is None:
        raise _Unsayable
    if kind == "null":
        raise _Unsayable
    if kind not in _TYPES:
        raise _Unsayable
    out["type"] = _TYPES[kind]
    if nullable:
        out["nullable"] = True
    if enum is not None:
        out["enum"] = enum
        out["format"] = "enum"
    for key in _KEPT:
        if key in schema:
            out[key] = schema[key]
    form = schema.get("format")
    if isinstance(form, str) and enum is None:
        if form in _FORMATS.get(out["type"], ()):
            out["format"] = form
        else:  # the model still gets told, in words
            said = f"(format: {form})"
            out["description"] = f"{out['description']} {said}" if "description" in out else said
    if out["type"] == "ARRAY" and "items" in schema:
        out["items"] = _convert(schema["items"])
    if out["type"] == "OBJECT":
        properties = schema.get("properties") or {}
        if properties:
            out["properties"] = {name: _convert(s) for name, s in properties.items()}
            out["propertyOrdering"] = list(properties)
        required = [name for name in schema.get("required", ()) if name in properties]
        if required:
            out["required"] = required
    return out


def _free_form(schema: dict[str, Any]) -> bool:
    """An object whose keys are not listed (``dict[str, X]``): the subset cannot say it."""
    extra = schema.get("additionalProperties", True)
    return not schema.get("properties") and extra is not False


def _any_of(schema: dict[str, Any], options: Any) -> dict[str, Any]:
    if not isinstance(options, list) or not options:
        raise _Unsayable
    nulls = [o for o in options if isinstance(o, dict) and o.get("type") == "null"]
    rest = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
    if not rest:
        raise _Unsayable
    if len(rest) == 1:
        out = _convert({**rest[0], **{k: schema[k] for k in _KEPT if k in schema}})
    else:
        out = {"anyOf": [_convert(o) for o in rest]}
        out.update({k: schema[k] for k in ("title", "description") if k in schema})
    if nulls:
        out["nullable"] = True
    return out


def declaration(spec: Any) -> dict[str, Any]:
    """A tool's ``FunctionDeclaration``: its parameters in the OpenAPI subset, or as JSON
    schema (``parametersJsonSchema``) where the subset cannot say them; none said for a
    tool without parameters."""
    out: dict[str, Any] = {"name": spec.name, "description": spec.description}
    schema = plain_json(spec.parameters)
    if not schema.get("properties") and schema.get("type", "object") == "object":
        return out  # no parameters: the API wants none said
    converted = openapi_schema(schema)
    if converted is not None:
        out["parameters"] = converted
    else:
        out["parametersJsonSchema"] = schema
    return out
