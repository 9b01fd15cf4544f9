"""The one JSON codec every store uses: a cattrs converter plus ``json``.

Messages, their parts and usage go through ``converter`` (turn checkpoints too: the
engine's ``_checkpoint_codec`` registers ``TurnState`` on it, since the engine owns that
format). Fields this release does not know (written by a newer one) are kept
in the object's ``extra`` mapping on load and written back on save, so they
round-trip unchanged. Bytes are base64 text; datetimes are ISO 8601 strings;
read-only mappings and tuples are written as JSON objects and arrays, and read
back frozen.
"""

from __future__ import annotations

import base64
import binascii
import json
import json.scanner
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn

from ._kept_json import EncodedObject, keep_text, kept_text, note_valid
from ._message_codec import LoadCache, message_dict, message_from_canonical
from .errors import DecryptionError, StoreCorruptError
from .messages import (
    FrozenMapping,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCall,
    Usage,
    freeze,
    thaw,
)

__all__ = [
    "MAX_JSON_DEPTH",
    "check_json_value",
    "converter",
    "decode_json_object",
    "dumps",
    "encode_json_object",
    "kept_message_json",
    "known_valid",
    "loads",
    "message_from_dict",
    "message_json",
    "message_to_dict",
    "messages_from_json",
    "messages_from_json_texts",
    "messages_to_json",
    "remember_valid",
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
    cannot hold. An ``EncodedObject`` whose text is made: that text."""
    if type(value) is EncodedObject and value.text is not None:
        return value.text
    return _checked_json(value, what)[0]


def _checked_json(value: Any, what: str) -> tuple[str, int]:
    """``to_json``'s text of ``value`` and how many brackets open in it."""
    try:
        text = _ENCODER.encode(value)
    except (ValueError, RecursionError) as exc:
        check_json_value(value, what=what)  # names the field
        raise ValueError(f"{what}: not valid JSON: {exc}") from exc
    except TypeError as exc:
        raise TypeError(f"{what}: not JSON-serialisable: {exc}") from exc
    # Nesting depth is at most the number of brackets: only a text with many is walked.
    brackets = text.count("{") + text.count("[")
    if brackets >= MAX_JSON_DEPTH:
        check_json_value(value, what=what)
    return text, brackets


def _plain(value: Any) -> Any:
    """What ``json`` writes for a read-only mapping: its items (tuples it writes as arrays)."""
    if isinstance(value, FrozenMapping):
        return dict(value)
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


#: ``json.dumps(value, separators=(",", ":"), allow_nan=False, default=_plain)``, made once
#: (``dumps`` with arguments builds an encoder per call); encoding keeps no state: thread-safe.
_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_plain)


def encode_json_object(value: Mapping[str, Any], *, what: str) -> str:
    """JSON text for a checkpoint or approval; ``TypeError`` naming ``what`` if it is not
    JSON-able, ``ValueError`` naming the field for NaN, infinity or absurd nesting."""
    if type(value) is not dict and not isinstance(value, Mapping):  # a dict: no ABC check
        raise TypeError(f"{what}: expected a JSON object (a mapping), got {type(value).__name__}")
    return to_json(value, what=what)


def decode_json_object(text: str | bytes, *, source: str) -> dict[str, Any]:
    """Parse a stored JSON object; ``StoreCorruptError`` naming ``source`` if it is not one."""
    if not isinstance(text, (str, bytes)):
        raise StoreCorruptError(f"{source}: expected JSON text, got {type(text).__name__}")
    try:
        value = json.loads(text)
    except RecursionError as exc:
        raise StoreCorruptError(f"{source}: JSON nested too deeply to read") from exc
    except ValueError as exc:
        raise StoreCorruptError(f"{source}: not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise StoreCorruptError(f"{source}: expected a JSON object, got {type(value).__name__}")
    return value


converter = cattrs.Converter(omit_if_default=False)

#: ``Message.metadata``, ``ToolCall.arguments`` and ``extra``: plain JSON out, frozen in.
_JSON_OBJECT = Mapping[str, Any]


def _structure_json_object(value: Any, _: Any) -> FrozenMapping:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a JSON object, got {type(value).__name__}")
    frozen: FrozenMapping = freeze(value)
    return frozen


converter.register_unstructure_hook_func(lambda t: t == _JSON_OBJECT, thaw)
converter.register_unstructure_hook(FrozenMapping, thaw)
converter.register_structure_hook_func(lambda t: t == _JSON_OBJECT, _structure_json_object)

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


def _with_extra(
    cls: type[Any], omit_none: tuple[str, ...] = (), omit_zero: tuple[str, ...] = ()
) -> None:
    """Register hooks for ``cls`` that keep unknown keys in ``extra``.

    Fields named in ``omit_none`` are left out when ``None``, those in ``omit_zero`` when
    ``0``: an optional field added later changes nothing in what is written for objects
    that do not use it.
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
        for name in omit_zero:
            if data.get(name) == 0:
                data.pop(name, None)
        for name in fixed:
            data[name] = getattr(obj, name)
        extra = data.pop("extra", None)
        if extra:
            for key, value in extra.items():
                data.setdefault(key, value)  # already plain: thawed by its hook
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
for _part in (TextPart, ImagePart, ReasoningPart):
    _with_extra(_part)
_with_extra(ToolCall, omit_none=("raw_arguments",))
_with_extra(Usage, omit_zero=("cache_read_tokens", "cache_write_tokens", "reasoning_tokens"))
_with_extra(Message)

_PARTS: dict[str, type[Any]] = {"text": TextPart, "image": ImagePart, "reasoning": ReasoningPart}


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


converter.register_structure_hook_func(
    lambda t: t == tuple[Part, ...], lambda data, _: tuple(_structure_part(d, None) for d in data)
)


def message_to_dict(message: Message) -> dict[str, Any]:
    """A JSON-able dict for ``message`` (not checked: ``message_json`` refuses NaN and the like)."""
    fast = message_dict(message)  # the same dict, without the converter's dispatch
    if fast is not None:
        return fast
    data: dict[str, Any] = converter.unstructure(message, Message)
    return data


def remember_valid(messages: Iterable[Message]) -> None:
    """Note that ``messages`` encode as stored JSON (``message_json`` would not refuse them),
    so that a store only checking them (the memory store) need not encode them again."""
    note_valid(messages)


def known_valid(message: Message) -> bool:
    """Whether ``message`` is known to encode: ``remember_valid`` noted it, or its text is
    kept (still held)."""
    return kept_text(message) is not None


#: how deep a record nests a message it holds (a checkpoint's ``results``, a result record's):
#: a message kept with fewer brackets than the limit less this is spliced in unchecked
SPLICE_DEPTH = 4


def kept_message_json(message: Message, data: Mapping[str, Any]) -> str | None:
    """``message_json(message)`` made from ``data`` (its ``message_to_dict``) and kept (see
    ``_kept_json``), so the turn's next checkpoint and its commit use it again; ``None`` when
    it nests so deep that a record holding it must be encoded whole to be checked."""
    kept = kept_text(message)
    if kept is None or kept[1] is None:
        text, brackets = _checked_json(data, f"message {message.id!r}")
        kept = keep_text(message, text, brackets < MAX_JSON_DEPTH - SPLICE_DEPTH)
    return kept[1] if kept[2] else None


def message_json(message: Message) -> str:
    """One message as compact JSON text; ``ValueError`` naming the field for NaN, infinity
    or nesting deeper than ``MAX_JSON_DEPTH`` (in ``metadata``, tool arguments, ``usage``).
    The text a turn's checkpoint made of it, if that is kept."""
    kept = kept_text(message)
    if kept is not None and kept[1] is not None:
        return kept[1]
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
    fast = message_from_canonical(data)  # the shape this release writes, read directly
    if fast is not None:
        return fast
    if isinstance(data, Mapping) and "lousho.sealed" in data:  # never read as an empty message
        raise DecryptionError(
            f"message {data.get('id')!r} is sealed (encryption at rest): read it through the "
            "store that wrote it, with its encryption keys"
        )
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
        cache = LoadCache()  # equal usages and texts read in this load share one object
        return [message_from_canonical(d, cache) or message_from_dict(d) for d in data]
    except ValueError as exc:
        raise StoreCorruptError(f"{source}: cannot read messages: {exc}") from exc


#: The scanner ``json.loads`` runs (the C one), made once: it keeps no state between calls.
_SCAN = json.scanner.make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # duck-typed


def _loads_compact(text: Any) -> Any:
    """``json.loads(text)``, faster for the compact text the stores write: the decoder's scanner
    called directly (no whitespace regexes); anything else goes to ``json.loads`` itself."""
    if type(text) is str:
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            pass  # not a JSON value at the start: json.loads names the problem
        else:
            if end == len(text):
                return value
    return json.loads(text)


def messages_from_json_texts(texts: Iterable[str], *, source: str = "<json>") -> list[Message]:
    """``messages_from_json`` for messages stored one JSON object each (a store's rows).

    One message at a time: the parsed dicts die young (a lower peak, less GC work).
    """
    out = []
    cache = LoadCache()  # equal usages and texts read in this load share one object
    try:
        for text in texts:
            try:
                data = _loads_compact(text)
            except RecursionError as exc:
                raise ValueError("nested too deeply to read") from exc
            except TypeError as exc:
                raise ValueError(f"expected JSON text, got {type(text).__name__}") from exc
            out.append(message_from_canonical(data, cache) or message_from_dict(data))
    except ValueError as exc:
        raise StoreCorruptError(f"{source}: cannot read messages: {exc}") from exc
    return out


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
