"""The one JSON codec every store uses: a cattrs converter plus ``json``.

Fields this release does not know (written by a newer one) are kept in the
object's ``extra`` mapping on load and written back on save, so they round-trip
unchanged. Bytes are base64 text; datetimes are ISO 8601 strings.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from .errors import StoreCorruptError
from .messages import ImagePart, Message, Part, TextPart, ToolCall, Usage

__all__ = [
    "MAX_JSON_DEPTH",
    "check_json_value",
    "converter",
    "dumps",
    "loads",
    "message_from_dict",
    "message_json",
    "message_to_dict",
    "messages_from_json",
    "messages_to_json",
    "to_json",
]

T = TypeVar("T")

#: JSON values nested deeper than this are refused with a ``ValueError`` when written,
#: so that no reader of the data ever hits Python's recursion limit.
MAX_JSON_DEPTH = 200


def check_json_value(value: Any, *, what: str) -> None:
    """Refuse what must not be stored: ``ValueError`` naming the field for a NaN or
    infinite float, or for nesting deeper than ``MAX_JSON_DEPTH``.

    ``what`` names the value (``"message 'ab12'"``); the error adds the path inside
    it, e.g. ``message 'ab12': metadata.score is nan``. Walks iteratively, so a
    deeply nested value fails cleanly instead of with ``RecursionError``.
    """
    stack: list[tuple[Any, tuple[object, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(
                    f"{what}: {_path(path)} is {item!r}; NaN and infinity are not valid JSON "
                    "and are not stored"
                )
        elif isinstance(item, (dict, list, tuple, Mapping)):
            if len(path) >= MAX_JSON_DEPTH:
                raise ValueError(
                    f"{what}: {_path(path[:3])}... is nested more than {MAX_JSON_DEPTH} levels "
                    "deep; refusing to store it"
                )
            pairs = item.items() if isinstance(item, Mapping) else enumerate(item)
            stack.extend((v, (*path, k)) for k, v in pairs)


def _path(path: tuple[object, ...]) -> str:
    text = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")
    return text or "the value"


def to_json(value: Any, *, what: str) -> str:
    """Compact JSON text for plain data. ``ValueError`` naming the field for NaN, infinity or
    nesting deeper than ``MAX_JSON_DEPTH``; ``TypeError`` naming ``what`` for a value JSON
    cannot hold."""
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (ValueError, RecursionError) as exc:
        check_json_value(value, what=what)  # names the field
        raise ValueError(f"{what}: not valid JSON: {exc}") from exc
    except TypeError as exc:
        raise TypeError(f"{what}: not JSON-serialisable: {exc}") from exc
    # Nesting depth is at most the number of brackets: only a text with many is walked.
    if text.count("{") + text.count("[") >= MAX_JSON_DEPTH:
        check_json_value(value, what=what)
    return text


converter = cattrs.Converter(omit_if_default=False)

converter.register_unstructure_hook(bytes, lambda b: base64.b64encode(b).decode("ascii"))


def _structure_bytes(value: Any, _: Any) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"expected base64 text for bytes, got {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        shown = value if len(value) <= 40 else f"{value[:40]}... ({len(value)} characters)"
        raise ValueError(f"not valid base64: {shown!r}: {exc}") from exc


converter.register_structure_hook(bytes, _structure_bytes)
converter.register_unstructure_hook(datetime, lambda d: d.isoformat())
converter.register_structure_hook(
    datetime, lambda v, _: v if isinstance(v, datetime) else datetime.fromisoformat(v)
)


def _with_extra(cls: type[Any], omit_none: tuple[str, ...] = ()) -> None:
    """Register hooks for ``cls`` that keep unknown keys in ``extra``.

    Fields named in ``omit_none`` are left out when ``None``: an optional field added
    later changes nothing in what is written for objects that do not use it.
    """
    names = {a.name for a in attrs.fields(cls)}
    init_names = {a.name for a in attrs.fields(cls) if a.init}
    fixed = [a.name for a in attrs.fields(cls) if not a.init]  # e.g. a part's ``type`` tag
    base_un = make_dict_unstructure_fn(cls, converter)
    base_st = make_dict_structure_fn(cls, converter)

    def unstructure(obj: Any) -> dict[str, Any]:
        data = base_un(obj)
        for name in omit_none:
            if data.get(name) is None:
                data.pop(name, None)
        for name in fixed:
            data[name] = getattr(obj, name)
        extra = data.pop("extra", None)
        if extra:
            for key, value in extra.items():
                data.setdefault(key, value)
        return data

    def structure(data: Mapping[str, Any], _: Any) -> Any:
        if not isinstance(data, Mapping):
            raise TypeError(f"expected an object for {cls.__name__}, got {type(data).__name__}")
        known = {k: v for k, v in data.items() if k in init_names and k != "extra"}
        unknown = {k: v for k, v in data.items() if k not in names}
        if unknown:
            known["extra"] = unknown
        return base_st(known, cls)

    converter.register_unstructure_hook(cls, unstructure)
    converter.register_structure_hook(cls, structure)


# in this order: a class's hooks are built from those of the classes it holds
_with_extra(TextPart)
_with_extra(ImagePart)
_with_extra(ToolCall, omit_none=("raw_arguments",))
_with_extra(Usage)
_with_extra(Message)

_PARTS: dict[str, type[Any]] = {"text": TextPart, "image": ImagePart}


def _structure_part(data: Mapping[str, Any], _: Any) -> Part:
    kind = data.get("type")
    cls = _PARTS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown message part type {kind!r}; known: {sorted(_PARTS)}")
    part: Part = converter.structure(data, cls)
    return part


converter.register_structure_hook_func(lambda t: t == Part, _structure_part)
converter.register_unstructure_hook_func(
    lambda t: t == Part, lambda p: converter.unstructure(p, type(p))
)


def _structure_parts(data: Iterable[Mapping[str, Any]], _: Any) -> tuple[Part, ...]:
    return tuple(_structure_part(d, None) for d in data)


converter.register_structure_hook_func(lambda t: t == tuple[Part, ...], _structure_parts)


def message_to_dict(message: Message) -> dict[str, Any]:
    """A JSON-able dict for ``message`` (not checked: ``message_json`` refuses NaN and the like)."""
    data: dict[str, Any] = converter.unstructure(message, Message)
    return data


def message_json(message: Message) -> str:
    """One message as compact JSON text; ``ValueError`` naming the field for NaN, infinity
    or nesting deeper than ``MAX_JSON_DEPTH`` (in ``metadata``, tool arguments, ``usage``)."""
    what = f"message {message.id!r}"
    try:
        data = message_to_dict(message)
    except RecursionError as exc:  # the converter recurses: find the culprit without recursing
        fields = {
            "metadata": message.metadata,
            "tool_calls": [{"arguments": call.arguments} for call in message.tool_calls],
            "extra": message.extra,
        }
        check_json_value(fields, what=what)
        raise ValueError(f"{what}: nested too deeply to store") from exc
    return to_json(data, what=what)


def message_from_dict(data: Mapping[str, Any]) -> Message:
    """The message ``data`` describes; raises ``ValueError`` naming what is wrong."""
    try:
        return converter.structure(data, Message)
    except Exception as exc:  # cattrs raises several types; callers want one
        raise ValueError(f"not a valid message: {_describe(exc)}") from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(exc))
    return str(exc)


def messages_to_json(messages: Sequence[Message]) -> str:
    """A JSON array of ``messages``; ``ValueError`` as ``message_to_dict`` raises it."""
    return json.dumps(
        [message_to_dict(m) for m in messages], separators=(",", ":"), allow_nan=False
    )


def messages_from_json(text: str | bytes, *, source: str = "<json>") -> list[Message]:
    """Parse a JSON array of messages; ``StoreCorruptError`` names ``source`` when it fails."""
    try:
        try:
            data = json.loads(text)
        except RecursionError as exc:
            raise ValueError("nested too deeply to read") from exc
        if not isinstance(data, list):
            raise ValueError(f"expected a JSON array of messages, got {type(data).__name__}")
        return [message_from_dict(d) for d in data]
    except ValueError as exc:
        raise StoreCorruptError(f"{source}: cannot read messages: {exc}") from exc


def dumps(obj: Any, *, unstructure_as: Any = None) -> str:
    """JSON text for an attrs object (or plain data) through the shared converter.

    ``ValueError`` naming the field for NaN, infinity or nesting deeper than
    ``MAX_JSON_DEPTH``; ``TypeError`` for a value JSON cannot hold.
    """
    return to_json(converter.unstructure(obj, unstructure_as), what=type(obj).__name__)


def loads(text: str | bytes, cls: type[T]) -> T:
    """The ``cls`` object encoded in JSON ``text``; ``ValueError`` for text nested too deeply."""
    try:
        data = json.loads(text)
    except RecursionError as exc:
        raise ValueError(f"cannot read {cls.__name__}: JSON nested too deeply") from exc
    return converter.structure(data, cls)


def register(cls: type[Any]) -> Callable[[], None]:
    """Give ``cls`` (an attrs class) the keep-unknown-fields hooks; returns nothing useful."""
    _with_extra(cls)
    return lambda: None
