"""The transcript's data model: messages, their parts, tool calls and usage.

Every class here is a frozen attrs class: a transcript snapshot cannot be edited
in place. ``extra`` holds fields written by a newer release so that they survive
a load and save by this one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Literal, Union

import attrs

__all__ = [
    "ImagePart",
    "Message",
    "Part",
    "Role",
    "TextPart",
    "ToolCall",
    "Usage",
]

Role = Literal["user", "assistant", "tool", "system"]


def _frozen_dict(value: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict(value) if value else {}


@attrs.frozen
class TextPart:
    """Plain text in a message."""

    text: str
    type: Literal["text"] = attrs.field(default="text", init=False)
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False, kw_only=True)


@attrs.frozen
class ImagePart:
    """An image, by ``url`` or inline ``data`` (bytes; kept as base64 in JSON)."""

    url: str | None = None
    data: bytes | None = None
    media_type: str | None = None
    type: Literal["image"] = attrs.field(default="image", init=False)
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False, kw_only=True)

    def __attrs_post_init__(self) -> None:
        if (self.url is None) == (self.data is None):
            raise ValueError("ImagePart needs exactly one of url= or data=")
        if self.data is not None and not isinstance(self.data, bytes):
            raise TypeError(
                f"ImagePart data= must be bytes (the decoded image), got {type(self.data).__name__}"
            )


Part = Union[TextPart, ImagePart]


@attrs.frozen
class ToolCall:
    """The model asks to run tool ``name`` with ``arguments``.

    ``raw_arguments`` is set only for a malformed call: the argument text the model
    sent when it was not a JSON object (``arguments`` is then empty). The turn does
    not run such a call; it answers it with an error result naming the JSON problem.
    """

    id: str
    name: str
    arguments: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_dict)
    raw_arguments: str | None = attrs.field(default=None, kw_only=True)
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False, kw_only=True)


@attrs.frozen
class Usage:
    """Tokens and money a model call (or a sum of them) used. Adds with ``+``."""

    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False, eq=False, kw_only=True)

    def __add__(self, other: Usage) -> Usage:
        if not isinstance(other, Usage):
            return NotImplemented
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cost_usd + other.cost_usd,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def _parts(value: str | Sequence[Part]) -> tuple[Part, ...]:
    if isinstance(value, str):
        return (TextPart(value),)
    return tuple(value)


def _part_tuple(value: Iterable[Part]) -> tuple[Part, ...]:
    return tuple(value)


def _call_tuple(value: Iterable[ToolCall]) -> tuple[ToolCall, ...]:
    return tuple(value)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _new_id() -> str:
    return uuid.uuid4().hex


@attrs.frozen
class Message:
    """One message of a transcript.

    Build them with :meth:`user`, :meth:`assistant`, :meth:`tool` and :meth:`system`.
    ``is_error`` marks a tool result that reports a failure.
    """

    role: Role
    content: tuple[Part, ...] = attrs.field(default=(), converter=_part_tuple)
    tool_calls: tuple[ToolCall, ...] = attrs.field(default=(), converter=_call_tuple)
    tool_call_id: str | None = None
    is_error: bool = False
    usage: Usage | None = None
    created_at: datetime = attrs.field(factory=_now)
    id: str = attrs.field(factory=_new_id)
    metadata: Mapping[str, Any] = attrs.field(factory=dict, converter=_frozen_dict)
    extra: Mapping[str, Any] = attrs.field(factory=dict, repr=False, kw_only=True)

    @property
    def text(self) -> str:
        """The text parts joined together."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @classmethod
    def user(cls, content: str | Sequence[Part], **kwargs: Any) -> Message:
        return cls("user", _parts(content), **kwargs)

    @classmethod
    def system(cls, content: str, **kwargs: Any) -> Message:
        return cls("system", _parts(content), **kwargs)

    @classmethod
    def assistant(
        cls,
        content: str | Sequence[Part] = "",
        *,
        tool_calls: Sequence[ToolCall] = (),
        usage: Usage | None = None,
        **kwargs: Any,
    ) -> Message:
        parts = _parts(content) if content else ()
        return cls("assistant", parts, tuple(tool_calls), usage=usage, **kwargs)

    @classmethod
    def tool(cls, call_id: str, output: str, is_error: bool = False, **kwargs: Any) -> Message:
        return cls("tool", (TextPart(output),), tool_call_id=call_id, is_error=is_error, **kwargs)
