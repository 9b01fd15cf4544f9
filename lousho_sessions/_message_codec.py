"""The hot path of ``serde`` for messages: plain functions instead of cattrs dispatch.

``message_dict`` and ``message_from_canonical`` give exactly what the cattrs hooks in
``serde`` give (tests/test_serde.py compares them on generated messages), for the
shapes this release writes: the classes themselves (no subclasses) and, when
reading, values of exactly the JSON types those classes hold. Anything else —
a subclass, an unknown part type, a value of another type — returns ``None`` and
``serde`` takes the general path, which also names what is wrong. Every turn
converts its messages and every load converts a whole transcript, so the cost
per message matters: this is several times cheaper than the generic converter.

Reading interns the role, keeps one shared empty tuple and mapping, and (given a
``LoadCache`` for the load) one ``Usage`` per distinct value and one content tuple per
distinct single text, so a loaded transcript holds less per message. It builds each
``Message`` from values it has already checked and converted, setting its slots
directly (``_read_message``): ``Message.__init__`` would run its converters again,
which is most of the cost of building one.
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import attrs

from .messages import (
    EMPTY,
    FrozenMapping,
    ImagePart,
    Message,
    Part,
    ReasoningPart,
    TextPart,
    ToolCall,
    Usage,
    thaw,
)

__all__ = [
    "LoadCache",
    "message_dict",
    "message_from_canonical",
    "usage_dict",
    "with_usage_and_calls",
]

_ROLES = {role: role for role in ("user", "assistant", "tool", "system")}
#: ``Message``'s fields in order (``_message_reader`` checks them at import)
_MESSAGE_FIELDS = (
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "is_error",
    "usage",
    "created_at",
    "id",
    "metadata",
    "extra",
)
#: the keys of a message this release writes (``extra``'s own keys are merged in, when any)
_MESSAGE_KEYS = frozenset(_MESSAGE_FIELDS) - {"extra"}
#: the keys of ``usage`` this release writes: the counts added with prompt caching and
#: reasoning only when not 0 (so a message that has none is written as before them, and
#: a message written before them reads them as 0)
_USAGE_KEYS = frozenset(
    {
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "cache_read_tokens",
        "cache_write_tokens",
        "reasoning_tokens",
    }
)
_USAGE_ALWAYS = frozenset({"input_tokens", "output_tokens", "cost_usd"})
_USAGE_COUNTS = ("cache_read_tokens", "cache_write_tokens", "reasoning_tokens")
_TOOL_CALL_KEYS = frozenset({"id", "name", "arguments", "raw_arguments"})
_REASONING_KEYS = frozenset({"text", "provider", "signature", "data", "id", "type"})


def _plain(mapping: Mapping[str, Any]) -> dict[str, Any]:
    plain: dict[str, Any] = {} if mapping is EMPTY else thaw(mapping)
    return plain


def _with_extra(data: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    if extra is not EMPTY and extra:  # most are the shared empty mapping: no len() call
        for key, value in thaw(extra).items():
            data.setdefault(key, value)
    return data


def _part_dict(part: Any) -> dict[str, Any] | None:
    kind = type(part)
    if kind is TextPart:
        return _with_extra({"text": part.text, "type": "text"}, part.extra)
    if kind is ImagePart:
        data = part.data
        return _with_extra(
            {
                "url": part.url,
                "data": None if data is None else base64.b64encode(data).decode("ascii"),
                "media_type": part.media_type,
                "type": "image",
            },
            part.extra,
        )
    if kind is ReasoningPart:
        return _with_extra(
            {
                "text": part.text,
                "provider": part.provider,
                "signature": part.signature,
                "data": part.data,
                "id": part.id,
                "type": "reasoning",
            },
            part.extra,
        )
    return None


def _call_dict(call: Any) -> dict[str, Any] | None:
    if type(call) is not ToolCall:
        return None
    data: dict[str, Any] = {"id": call.id, "name": call.name, "arguments": _plain(call.arguments)}
    if call.raw_arguments is not None:
        data["raw_arguments"] = call.raw_arguments
    return _with_extra(data, call.extra)


def usage_dict(usage: Usage) -> dict[str, Any]:
    """``usage`` as ``serde`` writes it (a plain ``Usage``)."""
    data: dict[str, Any] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "cost_usd": usage.cost_usd,
    }
    if usage.cache_read_tokens:
        data["cache_read_tokens"] = usage.cache_read_tokens
    if usage.cache_write_tokens:
        data["cache_write_tokens"] = usage.cache_write_tokens
    if usage.reasoning_tokens:
        data["reasoning_tokens"] = usage.reasoning_tokens
    return _with_extra(data, usage.extra)


def message_dict(message: Message) -> dict[str, Any] | None:
    """The dict ``serde.message_to_dict`` gives for ``message``, or ``None`` (take that path)."""
    if type(message) is not Message:
        return None
    content = []
    for part in message.content:
        part_data = _part_dict(part)
        if part_data is None:
            return None
        content.append(part_data)
    calls = []
    for call in message.tool_calls:
        call_data = _call_dict(call)
        if call_data is None:
            return None
        calls.append(call_data)
    usage = message.usage
    if usage is not None and type(usage) is not Usage:
        return None
    created_at = message.created_at
    if type(created_at) is not datetime:
        return None
    return _with_extra(
        {
            "role": message.role,
            "content": content,
            "tool_calls": calls,
            "tool_call_id": message.tool_call_id,
            "is_error": message.is_error,
            "usage": None if usage is None else usage_dict(usage),
            "created_at": created_at.isoformat(),
            "id": message.id,
            "metadata": _plain(message.metadata),
        },
        message.extra,
    )


def _frozen(value: Any) -> FrozenMapping | None:
    """``value`` frozen if it is a plain JSON object, else ``None``."""
    if type(value) is not dict:
        return None
    if not value:
        return EMPTY
    frozen = FrozenMapping(value)
    return frozen


def _part(data: Any) -> Part | None:
    if type(data) is not dict:
        return None
    kind = data.get("type")
    if kind == "reasoning":
        return _reasoning(data)
    if kind != "text" or len(data) != 2:
        return None
    text = data.get("text")
    return TextPart(text) if type(text) is str else None


def _reasoning(data: dict[str, Any]) -> ReasoningPart | None:
    if data.keys() != _REASONING_KEYS:
        return None
    text, provider = data["text"], data["provider"]
    if type(text) is not str or type(provider) is not str:
        return None
    opaque = (data["signature"], data["data"], data["id"])
    if any(value is not None and type(value) is not str for value in opaque):
        return None
    return ReasoningPart(text, provider, *opaque)


def _parts(items: list[Any]) -> tuple[Part, ...] | None:
    content = []
    for item in items:
        part = _part(item)
        if part is None:
            return None
        content.append(part)
    return tuple(content)


def _call(data: Any) -> ToolCall | None:
    if type(data) is not dict or not data.keys() <= _TOOL_CALL_KEYS:
        return None
    id, name, raw = data.get("id"), data.get("name"), data.get("raw_arguments")
    arguments = _frozen(data.get("arguments", {}))
    if type(id) is not str or type(name) is not str or arguments is None:
        return None
    if raw is not None and type(raw) is not str:
        return None
    return ToolCall(id, name, arguments, raw_arguments=raw)


class LoadCache:
    """What the messages of one load share: one ``Usage`` per distinct value, one content
    tuple per distinct single text. Both are immutable (frozen classes whose ``extra`` is
    the shared empty mapping), so equal ones can be one object. Each table stops growing
    at ``SIZE`` entries: past that, new values are simply not shared."""

    SIZE = 1024
    __slots__ = ("contents", "usages")

    def __init__(self) -> None:
        #: ``(input_tokens, output_tokens, cost key, cache read, cache write, reasoning)``
        #: -> the ``Usage`` read with them.
        self.usages: dict[tuple[int, int, Any, int, int, int], Usage] = {}
        #: A single text part's text -> the content tuple ``(TextPart(text),)``.
        self.contents: dict[str, tuple[TextPart]] = {}


def _usage(data: Any, cache: LoadCache | None) -> Usage | None:
    if type(data) is not dict:
        return None
    keys = data.keys()
    read = write = reasoning = 0
    if len(keys) != 3 or keys != _USAGE_ALWAYS:
        if not _USAGE_ALWAYS <= keys <= _USAGE_KEYS:
            return None
        read, write, reasoning = (data.get(name, 0) for name in _USAGE_COUNTS)
        for name in _USAGE_COUNTS:  # written only when not 0: a 0 is not this release's shape
            value = data.get(name)
            if value is not None and (type(value) is not int or not value):
                return None
    tokens_in, tokens_out, cost = data["input_tokens"], data["output_tokens"], data["cost_usd"]
    if type(tokens_in) is not int or type(tokens_out) is not int:
        return None
    if type(cost) is not float and type(cost) is not int:
        return None
    cost = float(cost)
    if cache is None:
        return Usage(
            tokens_in,
            tokens_out,
            cost,
            cache_read_tokens=read,
            cache_write_tokens=write,
            reasoning_tokens=reasoning,
        )
    # Zero is keyed by its text: 0.0 and -0.0 are equal but write apart.
    key = (tokens_in, tokens_out, cost if cost else repr(cost), read, write, reasoning)
    usages = cache.usages
    usage = usages.get(key)
    if usage is None:
        usage = Usage(
            tokens_in,
            tokens_out,
            cost,
            cache_read_tokens=read,
            cache_write_tokens=write,
            reasoning_tokens=reasoning,
        )
        if len(usages) < LoadCache.SIZE:
            usages[key] = usage
    return usage


def _single_text(data: Any, cache: LoadCache) -> tuple[TextPart] | None:
    """``(TextPart(text),)`` for one text part's ``data``, shared with equal ones in ``cache``."""
    if type(data) is not dict or data.get("type") != "text" or len(data) != 2:
        return None
    text = data.get("text")
    if type(text) is not str:
        return None
    contents = cache.contents
    content = contents.get(text)
    if content is None:
        content = (TextPart(text),)
        if len(contents) < LoadCache.SIZE:
            contents[text] = content
    return content


def _message_reader() -> Callable[..., Message]:
    """A ``Message`` maker for values already in the form ``Message.__init__`` would convert
    them to (a tuple of parts, a tuple of ``ToolCall``, a ``FrozenMapping``; ``extra`` empty):
    it sets the slots through their descriptors, as ``__init__`` does after converting."""
    names = tuple(a.name for a in attrs.fields(Message))
    if names != _MESSAGE_FIELDS:  # a new field must be read here too: tests fail at import
        raise RuntimeError(f"Message fields changed: {names}; update _message_codec")
    slots = vars(Message)
    new = object.__new__
    s_role, s_content, s_calls, s_call_id, s_error, s_usage, s_created, s_id, s_meta, s_extra = (
        slots[name].__set__ for name in names
    )

    def read(
        role: str,
        content: tuple[Part, ...],
        calls: tuple[ToolCall, ...],
        call_id: str | None,
        is_error: bool,
        usage: Usage | None,
        created_at: datetime,
        id: str,
        metadata: FrozenMapping,
        extra: FrozenMapping = EMPTY,
    ) -> Message:
        message: Message = new(Message)
        s_role(message, role)
        s_content(message, content)
        s_calls(message, calls)
        s_call_id(message, call_id)
        s_error(message, is_error)
        s_usage(message, usage)
        s_created(message, created_at)
        s_id(message, id)
        s_meta(message, metadata)
        s_extra(message, extra)
        return message

    return read


_read_message = _message_reader()


def with_usage_and_calls(
    message: Message, usage: Usage | None, calls: tuple[ToolCall, ...]
) -> Message:
    """``attrs.evolve(message, usage=usage, tool_calls=calls)`` (a model's answer with its priced
    usage and unique call ids, once a model call) without running ``Message``'s converters on
    the fields it keeps, which are converted already; ``calls`` is a tuple of ``ToolCall``."""
    if type(message) is not Message:
        return attrs.evolve(message, usage=usage, tool_calls=calls)
    m = message
    return _read_message(
        m.role, m.content, calls, m.tool_call_id, m.is_error, usage, m.created_at, m.id,
        m.metadata, m.extra,  # FrozenMappings: converted when the message was made
    )  # fmt: skip


def message_from_canonical(data: Any, cache: LoadCache | None = None) -> Message | None:
    """The message ``serde.message_from_dict`` reads from ``data`` when ``data`` has exactly the
    shape this release writes (no unknown fields, text and reasoning parts only); else ``None``.

    ``cache``, one for the messages of one load, shares equal usages and equal single-text
    contents among them."""
    if type(data) is not dict or data.keys() != _MESSAGE_KEYS:
        return None
    role = _ROLES.get(data["role"]) if type(data["role"]) is str else None
    id, created, call_id = data["id"], data["created_at"], data["tool_call_id"]
    is_error = data["is_error"]
    if role is None or type(id) is not str or type(created) is not str:
        return None
    if (call_id is not None and type(call_id) is not str) or type(is_error) is not bool:
        return None
    metadata = _frozen(data["metadata"])
    raw_content, raw_calls = data["content"], data["tool_calls"]
    if metadata is None or type(raw_content) is not list or type(raw_calls) is not list:
        return None
    content: tuple[Part, ...] | None
    content = None
    if cache is not None and len(raw_content) == 1:
        content = _single_text(raw_content[0], cache)
    if content is None:
        content = _parts(raw_content)
    if content is None:
        return None
    calls = []
    for item in raw_calls:
        call = _call(item)
        if call is None:
            return None
        calls.append(call)
    usage = None
    if data["usage"] is not None:
        usage = _usage(data["usage"], cache)
        if usage is None:
            return None
    try:
        created_at = datetime.fromisoformat(created)
    except ValueError:
        return None
    return _read_message(
        role, content, tuple(calls), call_id, is_error, usage, created_at, id, metadata
    )
