"""What ``send()`` and ``stream()`` accept: a str, parts (one user message), or messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .messages import ImagePart, Message, TextPart

__all__ = ["to_messages"]


def to_messages(input: Any) -> list[Message]:
    """The user's input as messages; ``TypeError`` says what was not accepted."""
    if isinstance(input, str):
        return [Message.user(input)]
    if isinstance(input, Message):
        input = [input]
    if isinstance(input, (TextPart, ImagePart)):  # one part: one user message
        return [Message.user([input])]
    if isinstance(input, Sequence) and input:
        items = list(input)
        if all(isinstance(i, Message) for i in items):
            for m in items:
                if m.role == "system":
                    raise TypeError("input messages cannot be system messages; use instructions=")
            return items
        if all(isinstance(i, (TextPart, ImagePart)) for i in items):
            return [Message.user(items)]
        kinds = sorted({type(i).__name__ for i in items})
        raise TypeError(
            f"input mixes or holds unsupported items ({', '.join(kinds)}): give parts or messages"
        )
    raise TypeError(
        f"unsupported input {type(input).__name__}: give a str, a sequence of TextPart/ImagePart, "
        "or a sequence of Message"
    )
