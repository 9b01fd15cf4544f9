"""A tool's parameters: the JSON schema of its type hints, and a check of a model's arguments.

``json_schema`` describes a hint or raises ``ToolDefinitionError``; ``Parameters.check``
applies the rule of ``_arguments`` (JSON types must match) to every argument and
names each problem, so the model can fix its call.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import inspect
import json
import re
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any, Literal, Union

import attrs

from ..errors import ToolArgumentsError, ToolDefinitionError
from ..messages import thaw
from ._arguments import (
    NONE_TYPE,
    argument_problems,
    converter,
    describe_type,
    describe_value,
    is_mapping_hint,
    is_record,
    is_sequence,
    type_name,
)

__all__ = ["Parameters", "describe_parameters", "json_schema", "parse_doc"]

_SCALARS: dict[Any, dict[str, Any]] = {
    str: {"type": "string"},
    bool: {"type": "boolean"},
    int: {"type": "integer"},
    float: {"type": "number"},
    NONE_TYPE: {"type": "null"},
    dt.datetime: {"type": "string", "format": "date-time"},
    dt.date: {"type": "string", "format": "date"},
    dt.time: {"type": "string", "format": "time"},
    uuid.UUID: {"type": "string", "format": "uuid"},
}
_SUPPORTED = (
    "str, int, float, bool, None, datetime, date, time, UUID, Literal, Enum, list, set, "
    "tuple, dict[str, ...], Optional/Union, TypedDict, attrs classes and dataclasses"
)


# -- schema ---------------------------------------------------------------------


def json_schema(hint: Any, _stack: tuple[Any, ...] = ()) -> dict[str, Any]:
    """The JSON schema of a type hint; ``ToolDefinitionError`` (a ``TypeError``) if it has none."""
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint in _SCALARS:
        return dict(_SCALARS[hint])
    supertype = getattr(hint, "__supertype__", None)  # typing.NewType
    if supertype is not None:
        return json_schema(supertype, _stack)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return json_schema(args[0], _stack)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return {"enum": [_json_value(m.value, hint) for m in hint]}
    if origin is Literal:
        return {
            "enum": [_json_value(a.value if isinstance(a, enum.Enum) else a, hint) for a in args]
        }
    if origin in (Union, types.UnionType):
        non_null = [a for a in args if a is not NONE_TYPE]
        schemas = [json_schema(a, _stack) for a in non_null]
        if len(non_null) < len(args):
            schemas.append({"type": "null"})
        return {"anyOf": schemas}
    if origin is tuple and args and args[-1] is not Ellipsis:
        if args == ((),):  # tuple[()]
            return {"type": "array", "maxItems": 0}
        items = [json_schema(a, _stack) for a in args]
        return {
            "type": "array",
            "prefixItems": items,
            "minItems": len(items),
            "maxItems": len(items),
        }
    if is_sequence(hint):
        schema: dict[str, Any] = {
            "type": "array",
            "items": json_schema(args[0], _stack) if args else {},
        }
        if origin in (set, frozenset, AbstractSet) or hint in (set, frozenset):
            schema["uniqueItems"] = True
        return schema
    if is_mapping_hint(hint):
        if args and args[0] is not str and args[0] is not Any:
            raise ToolDefinitionError(
                f"cannot describe type {type_name(hint)} as JSON schema: JSON object keys are strings"
            )
        obj: dict[str, Any] = {"type": "object"}
        if len(args) == 2 and args[1] is not Any:
            obj["additionalProperties"] = json_schema(args[1], _stack)
        return obj
    if is_record(hint):
        if hint in _stack:
            raise ToolDefinitionError(
                f"cannot describe type {type_name(hint)} as JSON schema: it contains itself"
            )
        return _record_schema(hint, (*_stack, hint))
    raise ToolDefinitionError(
        f"cannot describe type {type_name(hint)} as JSON schema; use {_SUPPORTED}"
    )


def _record_schema(cls: type, stack: tuple[Any, ...]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, hint, default, has_default in _record_fields(cls):
        try:
            schema = json_schema(hint, stack)
        except ToolDefinitionError as exc:
            raise ToolDefinitionError(f"field {type_name(cls)}.{name}: {exc}") from None
        if not has_default:
            required.append(name)
        elif default is not None and _json_safe(default):
            schema["default"] = default
        properties[name] = schema
    result: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        result["required"] = required
    return result


def _record_fields(cls: type) -> list[tuple[str, Any, Any, bool]]:
    """(name, hint, default, has_default) of an attrs class, dataclass or TypedDict."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:
        raise ToolDefinitionError(f"cannot read the type hints of {type_name(cls)}: {exc}") from exc
    if typing.is_typeddict(cls):
        required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
        return [(n, h, None, n not in required_keys) for n, h in hints.items()]
    out: list[tuple[str, Any, Any, bool]] = []
    if attrs.has(cls):
        for field in attrs.fields(cls):
            if not field.init:
                continue
            default = field.default
            has_default = default is not attrs.NOTHING
            if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = None
            out.append((field.name, hints.get(field.name, Any), default, has_default))
        return out
    for dc_field in dataclasses.fields(cls):
        if not dc_field.init:
            continue
        has_default = dc_field.default is not dataclasses.MISSING
        has_factory = dc_field.default_factory is not dataclasses.MISSING
        default = dc_field.default if has_default else None
        out.append(
            (dc_field.name, hints.get(dc_field.name, Any), default, has_default or has_factory)
        )
    return out


def _json_value(value: Any, owner: Any) -> Any:
    if not _json_safe(value):
        raise ToolDefinitionError(
            f"cannot describe type {type_name(owner)} as JSON schema: {value!r} is not a JSON value"
        )
    return value


def _json_safe(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# -- the parameters of a function ---------------------------------------------


@attrs.frozen
class Parameters:
    """What a tool function takes: its JSON schema and how to check arguments against it."""

    schema: Mapping[str, Any]
    hints: Mapping[str, Any]
    required: tuple[str, ...]
    takes_context: bool = False
    accepts_extra: bool = False

    def check(self, tool_name: str, arguments: Any) -> dict[str, Any]:
        """The arguments as the function's types; ``ToolArgumentsError`` naming every problem.

        The values are new, plain and mutable (``dict``, ``list``) even where the call's
        arguments are read-only: a tool may change what it is given.
        """
        if not isinstance(arguments, Mapping):
            raise ToolArgumentsError(
                f"invalid arguments for tool {tool_name!r}: expected a JSON object, "
                f"got {describe_value(arguments)}"
            )
        arguments = thaw(arguments)  # JSON types, as the model sent them: arrays are lists
        problems: list[str] = []
        for name in arguments:
            if name not in self.hints and not self.accepts_extra:
                known = ", ".join(self.hints) or "none"
                problems.append(f"unknown argument {name!r} (parameters: {known})")
        for name in self.required:
            if name not in arguments:
                problems.append(
                    f"missing required argument {name!r} ({describe_type(self.hints[name])})"
                )
        values: dict[str, Any] = {}
        for name, value in arguments.items():
            hint = self.hints.get(name)
            if hint is None:
                values[name] = value
                continue
            try:
                values[name] = converter.structure(value, hint)
            except Exception as exc:
                problems.extend(argument_problems(exc, name))
        if problems:
            raise ToolArgumentsError(
                f"invalid arguments for tool {tool_name!r}: " + "; ".join(problems)
            )
        return values


def describe_parameters(fn: Callable[..., Any], tool_name: str, context_type: type) -> Parameters:
    """The ``Parameters`` of ``fn``; ``ToolDefinitionError`` naming the tool and the parameter."""
    sig = inspect.signature(fn)
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: cannot read type hints: {exc}") from exc
    _, arg_docs = parse_doc(inspect.getdoc(fn) or "")
    properties: dict[str, Any] = {}
    kept: dict[str, Any] = {}
    required: list[str] = []
    takes_context = accepts_extra = False
    for index, (pname, param) in enumerate(sig.parameters.items()):
        hint = hints.get(pname, Any)
        if index == 0 and (hint is context_type or typing.get_origin(hint) is context_type):
            takes_context = True
            continue
        if param.kind is param.VAR_POSITIONAL:
            continue
        if param.kind is param.VAR_KEYWORD:
            accepts_extra = True
            continue
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(
                f"tool {tool_name!r}, parameter {pname!r}: positional-only parameters are not "
                "supported (the model passes arguments by name)"
            )
        try:
            schema = json_schema(hint)
            converter.get_structure_hook(hint)
        except Exception as exc:
            raise ToolDefinitionError(f"tool {tool_name!r}, parameter {pname!r}: {exc}") from None
        if pname in arg_docs:
            schema = {**schema, "description": arg_docs[pname]}
        if param.default is param.empty:
            required.append(pname)
        elif _json_safe(param.default):
            schema = {**schema, "default": param.default}
        properties[pname] = schema
        kept[pname] = hint
    schema_out: dict[str, Any] = {
        "type": "object",
        "properties": properties,
        "additionalProperties": accepts_extra,
    }
    if required:
        schema_out["required"] = required
    return Parameters(schema_out, kept, tuple(required), takes_context, accepts_extra)


def parse_doc(doc: str) -> tuple[str, dict[str, str]]:
    """The description (text before ``Args:``) and each argument's description."""
    summary_lines: list[str] = []
    args: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for raw in doc.splitlines():
        line = raw.strip()
        header = re.fullmatch(
            r"(Args|Arguments|Parameters|Returns|Raises|Yields|Example|Examples):", line
        )
        if header:
            section = header.group(1)
            current = None
            continue
        if section is None:
            summary_lines.append(raw)
        elif section in ("Args", "Arguments", "Parameters") and line:
            m = re.match(r"(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)", line)
            if (
                m
                and raw.startswith((" ", "\t"))
                and (current is None or not raw.startswith("        "))
            ):
                current = m.group(1)
                args[current] = m.group(2)
            elif current is not None:
                args[current] = (args[current] + " " + line).strip()
    return "\n".join(summary_lines).strip(), args
