"""Strict checking of a model's tool arguments against type hints, with cattrs.

The rule: the JSON type must be the one the schema names. A string is never turned
into a number or a boolean (``"30"`` for an ``int`` is refused), with two exceptions
that JSON itself makes: an integer is a valid ``float``, and a number with no
fraction (``3.0``) a valid ``int``. Strings become ``datetime``/``date``/``time``/
``UUID`` values when they are ISO 8601 (or UUID) text, enums and ``Literal`` values
match by value and JSON type, and objects become attrs classes, dataclasses or
TypedDicts (unknown keys are refused). ``X | Y`` takes the first member that fits.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import types
import typing
import uuid
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from typing import Any, Literal, Union

import attrs
import cattrs
from cattrs.cols import is_mapping, mapping_structure_factory
from cattrs.errors import IterableValidationError, IterableValidationNote
from cattrs.gen import make_dict_structure_fn
from cattrs.gen.typeddicts import make_dict_structure_fn as make_typeddict_structure_fn

__all__ = [
    "argument_problems",
    "converter",
    "describe_type",
    "describe_value",
    "malformed_arguments_problem",
    "value_problems",
]

NONE_TYPE = type(None)


def is_record(hint: Any) -> bool:
    return isinstance(hint, type) and (
        attrs.has(hint) or dataclasses.is_dataclass(hint) or typing.is_typeddict(hint)
    )


def is_sequence(hint: Any) -> bool:
    origin = typing.get_origin(hint) or hint
    return origin in (list, tuple, set, frozenset, Sequence, AbstractSet)


def is_mapping_hint(hint: Any) -> bool:
    origin = typing.get_origin(hint) or hint
    return origin in (dict, Mapping)


def type_name(hint: Any) -> str:
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__qualname__
    return repr(hint).replace("typing.", "")


class _Mismatch(TypeError):
    """A value of the wrong JSON type; the message is what the model reads."""

    def __init__(self, hint: Any, value: Any, detail: str = "") -> None:
        text = f"expected {describe_type(hint)}, got {describe_value(value)}"
        super().__init__(text + (f" ({detail})" if detail else ""))


def describe_type(hint: Any) -> str:
    """A short description of a type hint in JSON terms, for error messages."""
    simple = {
        str: "string",
        bool: "boolean",
        int: "integer",
        float: "number",
        NONE_TYPE: "null",
        dt.datetime: "ISO 8601 date-time string",
        dt.date: "ISO 8601 date string",
        dt.time: "ISO 8601 time string",
        uuid.UUID: "UUID string",
    }
    if hint in simple:
        return simple[hint]
    supertype = getattr(hint, "__supertype__", None)
    if supertype is not None:
        return describe_type(supertype)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return describe_type(args[0])
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(json.dumps(m.value) for m in hint)
    if origin is Literal:
        values = [a.value if isinstance(a, enum.Enum) else a for a in args]
        return "one of " + ", ".join(json.dumps(v) for v in values)
    if origin in (Union, types.UnionType):
        return " or ".join(describe_type(a) for a in args)
    if origin is tuple and args and args[-1] is not Ellipsis:
        return f"array of {len(args)} items [" + ", ".join(describe_type(a) for a in args) + "]"
    if is_sequence(hint):
        return "array" + (f" of {describe_type(args[0])}" if args else "")
    if is_mapping_hint(hint):
        return "object" + (f" of {describe_type(args[1])}" if len(args) == 2 else "")
    if is_record(hint):
        return f"object {hint.__name__}"
    return "any JSON value" if hint is Any else type_name(hint)


def describe_value(value: Any) -> str:
    kinds = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array"}
    kind = (
        "null"
        if value is None
        else kinds.get(
            type(value), "object" if isinstance(value, Mapping) else type(value).__name__
        )
    )
    text = json.dumps(value, default=repr) if kind != "object" else ""
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{kind} {text}".strip()


def _structure_str(value: Any, hint: Any) -> str:
    if not isinstance(value, str):
        raise _Mismatch(hint, value)
    return value


def _structure_bool(value: Any, hint: Any) -> bool:
    if not isinstance(value, bool):
        raise _Mismatch(hint, value)
    return value


def _structure_int(value: Any, hint: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Mismatch(hint, value)
    if isinstance(value, float):
        if not value.is_integer():
            raise _Mismatch(hint, value)
        return int(value)
    return value


def _structure_float(value: Any, hint: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Mismatch(hint, value)
    return float(value)


def _structure_none(value: Any, hint: Any) -> None:
    if value is not None:
        raise _Mismatch(hint, value)


def _iso(parse: Callable[[str], Any]) -> Callable[[Any, Any], Any]:
    def hook(value: Any, hint: Any) -> Any:
        if not isinstance(value, str):
            raise _Mismatch(hint, value)
        text = (
            value[:-1] + "+00:00" if value.endswith(("Z", "z")) and hint is not dt.date else value
        )
        try:
            return parse(text)
        except ValueError as exc:
            raise _Mismatch(hint, value, str(exc)) from None

    return hook


def _unless_enum(hook: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    """``hook``, except for enums: cattrs dispatches an ``IntEnum`` by its ``int`` base."""

    def structure(value: Any, hint: Any) -> Any:
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            return _enum_hook(hint)(value, hint)
        return hook(value, hint)

    return structure


def _enum_hook(cls: type[enum.Enum]) -> Callable[[Any, Any], Any]:
    def hook(value: Any, hint: Any) -> Any:
        for member in cls:
            if member.value == value and type(member.value) is type(value):
                return member
        raise _Mismatch(hint, value)

    return hook


def _literal_hook(hint: Any) -> Callable[[Any, Any], Any]:
    allowed = typing.get_args(hint)

    def hook(value: Any, _: Any) -> Any:
        for option in allowed:
            raw = option.value if isinstance(option, enum.Enum) else option
            if raw == value and type(raw) is type(value):
                return option
        raise _Mismatch(hint, value)

    return hook


def _union_hook(hint: Any) -> Callable[[Any, Any], Any]:
    members = typing.get_args(hint)

    def hook(value: Any, _: Any) -> Any:
        if value is None and NONE_TYPE in members:
            return None
        for member in members:
            if member is NONE_TYPE:
                continue
            try:
                return converter.structure(value, member)
            except Exception:  # try the next member; none fits: one message for all
                continue
        raise _Mismatch(hint, value)

    return hook


def _sequence_hook(hint: Any) -> Callable[[Any, Any], Any]:
    origin, args = typing.get_origin(hint) or hint, typing.get_args(hint)
    fixed = origin is tuple and bool(args) and args[-1] is not Ellipsis
    item_types = list(args) if fixed else None
    item_type = args[0] if args else Any

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, list):
            raise _Mismatch(hint, value)
        if item_types is not None and len(value) != len(item_types):
            raise _Mismatch(hint, value, f"{len(value)} items")
        out: list[Any] = []
        errors: list[Exception] = []
        for index, item in enumerate(value):
            item_hint = item_types[index] if item_types is not None else item_type
            try:
                out.append(converter.structure(item, item_hint))
            except Exception as exc:
                exc.__notes__ = [  # type: ignore[attr-defined]
                    *getattr(exc, "__notes__", []),
                    IterableValidationNote(f"Structuring item @ index {index}", index, item_hint),
                ]
                errors.append(exc)
        if errors:
            raise IterableValidationError(f"While structuring {type_name(hint)}", errors, hint)
        if origin is tuple:
            return tuple(out)
        if origin in (set, AbstractSet):
            return set(out)
        if origin is frozenset:
            return frozenset(out)
        return out

    return hook


def _object_hook(hint: Any, inner: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, Mapping):
            raise _Mismatch(hint, value)
        return inner(value, hint)

    return hook


def _is_literal(hint: Any) -> bool:
    return typing.get_origin(hint) is Literal


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _makeconverter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    exact: dict[Any, Callable[[Any, Any], Any]] = {
        str: _structure_str,
        bool: _structure_bool,
        int: _structure_int,
        float: _structure_float,
        NONE_TYPE: _structure_none,
        dt.datetime: _iso(dt.datetime.fromisoformat),
        dt.date: _iso(dt.date.fromisoformat),
        dt.time: _iso(dt.time.fromisoformat),
        uuid.UUID: _iso(uuid.UUID),
    }
    for cls, hook in exact.items():
        conv.register_structure_hook(cls, _unless_enum(hook))
    conv.register_structure_hook_factory(
        lambda t: isinstance(t, type) and issubclass(t, enum.Enum), _enum_hook
    )
    conv.register_structure_hook_factory(_is_literal, _literal_hook)
    conv.register_structure_hook_factory(_is_union, _union_hook)
    conv.register_structure_hook_factory(is_sequence, _sequence_hook)
    conv.register_structure_hook_factory(
        lambda t: is_mapping_hint(t) and is_mapping(t),
        lambda t: _object_hook(t, mapping_structure_factory(t, conv)),
    )
    conv.register_structure_hook_factory(
        lambda t: isinstance(t, type) and typing.is_typeddict(t),
        lambda t: _object_hook(t, make_typeddict_structure_fn(t, conv)),
    )
    conv.register_structure_hook_factory(
        lambda t: isinstance(t, type) and (attrs.has(t) or dataclasses.is_dataclass(t)),
        lambda t: _object_hook(t, make_dict_structure_fn(t, conv)),
    )
    return conv


converter = _makeconverter()


def argument_problems(exc: Exception, name: str) -> list[str]:
    """One message per failure inside ``exc``, each naming the argument and the path in it."""
    out: list[str] = []
    for line in cattrs.transform_error(exc, path=name, format_exception=_format):
        message, _, path = line.rpartition(" @ ")
        out.append(f"argument {path!r}: {message}" if message else f"argument {name!r}: {line}")
    return out


def value_problems(exc: Exception, path: str = "$") -> list[str]:
    """One ``"<path>: <message>"`` per failure inside ``exc`` (``$.items[2].price: ...``)."""
    out: list[str] = []
    for line in cattrs.transform_error(exc, path=path, format_exception=_format):
        message, _, where = line.rpartition(" @ ")
        out.append(f"{where}: {message}" if message else f"{path}: {line}")
    return out


def _format(exc: BaseException, hint: Any) -> str:
    if isinstance(exc, _Mismatch):
        return str(exc)
    if isinstance(exc, KeyError):
        return (
            f"missing required field ({describe_type(hint)})"
            if hint is not None
            else "missing required field"
        )
    if isinstance(exc, cattrs.ForbiddenExtraKeysError):
        return f"unknown fields: {', '.join(sorted(exc.extra_fields))}"
    return f"{type(exc).__name__}: {exc}"


def malformed_arguments_problem(raw: str) -> str:
    """Why argument text is not a JSON object (``"not valid JSON (...)"``), for the model."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        return f"not valid JSON ({exc})"
    if isinstance(value, dict):  # a hand-made ToolCall may carry text that parses
        return "not accepted"
    return f"not a JSON object (got {describe_value(value)})"
