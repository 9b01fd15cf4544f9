"""The one JSON codec every store uses: a cattrs converter plus ``json``.

Fields this release does not know (written by a newer one) are kept in the
object's ``extra`` mapping on load and written back on save, so they round-trip
unchanged. Bytes are base64 text; datetimes are ISO 8601 strings.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from .errors import StoreCorruptError
from .messages import ImagePart, Message, Part, TextPart, ToolCall, Usage

__all__ = [
    "converter",
    "dumps",
    "loads",
    "message_from_dict",
    "message_to_dict",
    "messages_from_json",
    "messages_to_json",
]

T = TypeVar("T")

converter = cattrs.Converter(omit_if_default=False)

converter.register_unstructure_hook(bytes, lambda b: base64.b64encode(b).decode("ascii"))
converter.register_structure_hook(bytes, lambda v, _: base64.b64decode(v))
converter.register_unstructure_hook(datetime, lambda d: d.isoformat())
converter.register_structure_hook(
    datetime, lambda v, _: v if isinstance(v, datetime) else datetime.fromisoformat(v)
)


def _with_extra(cls: type[Any]) -> None:
    """Register hooks for ``cls`` that keep unknown keys in ``extra``."""
    names = {a.name for a in attrs.fields(cls)}
    init_names = {a.name for a in attrs.fields(cls) if a.init}
    fixed = [a.name for a in attrs.fields(cls) if not a.init]  # e.g. a part's ``type`` tag
    base_un = make_dict_unstructure_fn(cls, converter)
    base_st = make_dict_structure_fn(cls, converter)

    def unstructure(obj: Any) -> dict[str, Any]:
        data = base_un(obj)
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


for _cls in (TextPart, ImagePart, ToolCall, Usage, Message):
    _with_extra(_cls)

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
    """A JSON-able dict for ``message``."""
    data: dict[str, Any] = converter.unstructure(message, Message)
    return data


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
    return json.dumps([message_to_dict(m) for m in messages], separators=(",", ":"))


def messages_from_json(text: str | bytes, *, source: str = "<json>") -> list[Message]:
    """Parse a JSON array of messages; ``StoreCorruptError`` names ``source`` when it fails."""
    try:
        data = json.loads(text)
        if not isinstance(data, list):
            raise ValueError(f"expected a JSON array of messages, got {type(data).__name__}")
        return [message_from_dict(d) for d in data]
    except ValueError as exc:
        raise StoreCorruptError(f"{source}: cannot read messages: {exc}") from exc


def dumps(obj: Any, *, unstructure_as: Any = None) -> str:
    """JSON text for an attrs object (or plain data) through the shared converter."""
    return json.dumps(converter.unstructure(obj, unstructure_as), separators=(",", ":"))


def loads(text: str | bytes, cls: type[T]) -> T:
    """The ``cls`` object encoded in JSON ``text``."""
    return converter.structure(json.loads(text), cls)


def register(cls: type[Any]) -> Callable[[], None]:
    """Give ``cls`` (an attrs class) the keep-unknown-fields hooks; returns nothing useful."""
    _with_extra(cls)
    return lambda: None
