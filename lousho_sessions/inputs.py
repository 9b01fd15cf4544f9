"""What ``send()`` and ``stream()`` accept: a str, parts (one user message), or messages.

Input is checked here, before anything is stored: text must be a ``str`` that
UTF-8 can encode (no lone surrogates), and message metadata and tool-call
arguments must be JSON — no NaN or infinity, no nesting deeper than
``MAX_DEPTH`` levels. The same checks apply to the tool calls a model sends.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Union

from .messages import EMPTY, ImagePart, Message, Part, ReasoningPart, TextPart

__all__ = ["MAX_DEPTH", "Input", "check_json", "check_text", "to_messages"]

#: What ``send()``, ``stream()``, ``enqueue()`` and ``steer()`` take: a str, parts (one
#: user message) or messages, in a sequence or one alone. Parts and messages mixed in
#: one sequence are refused when the call is made (``TypeError``); the element type is
#: one union so that a list literal such as ``[TextPart(...), ImagePart(...)]``
#: type-checks (against a union of sequence types mypy infers ``list[object]``).
Input = Union[str, Part, Message, Sequence[Union[Part, Message]]]

#: The deepest nesting of lists and objects accepted in metadata and tool arguments.
MAX_DEPTH = 100


def to_messages(input: Input) -> list[Message]:
    """The user's input as messages; ``TypeError``/``ValueError`` say what was not accepted."""
    messages = _messages(input)
    for index, message in enumerate(messages):
        check_message(message, f"input message {index}")
    return messages


def _messages(input: Any) -> list[Message]:
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


def check_message(message: Message, what: str) -> None:
    """Refuse a message whose text, metadata or tool-call arguments cannot be sent and saved."""
    for index, part in enumerate(message.content):
        if isinstance(part, (TextPart, ReasoningPart)):
            check_text(part.text, f"{what}, part {index}")
        elif not isinstance(part, ImagePart):
            raise TypeError(
                f"{what}, part {index}: expected TextPart, ImagePart or ReasoningPart, "
                f"got {_kind(part)}"
            )
    check_json(message.metadata, f"{what}: metadata")
    for call in message.tool_calls:
        check_text(call.name, f"{what}: tool call {call.id!r} name")
        check_json(call.arguments, f"{what}: arguments of tool call {call.id!r}")


def check_text(text: object, what: str) -> None:
    """``TypeError`` if ``text`` is not a str; ``ValueError`` naming the position of a lone surrogate."""
    if not isinstance(text, str):
        raise TypeError(f"{what}: text must be a str, got {_kind(text)}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what}: lone surrogate {text[exc.start]!r} at position {exc.start} "
            "(not valid Unicode text; decode bytes with errors='replace' first)"
        ) from None


def check_json(value: object, what: str) -> None:
    """Refuse what JSON cannot hold: NaN/infinity (``ValueError``), nesting deeper than
    ``MAX_DEPTH`` (``ValueError``), non-str keys and other types (``TypeError``), bad text."""
    if value is EMPTY:  # the shared empty mapping: most metadata and many arguments
        return
    stack: list[tuple[object, int, tuple[object, ...]]] = [(value, 0, ())]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, str):
            check_text(item, _where(what, path))
        elif item is None or isinstance(item, (bool, int)):
            continue
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise ValueError(
                    f"{_where(what, path)} is {item!r}: NaN and infinity cannot be saved as JSON"
                )
        elif isinstance(item, (Mapping, list, tuple)):
            if depth >= MAX_DEPTH:
                raise ValueError(f"{what} is nested more than {MAX_DEPTH} levels deep")
            if isinstance(item, Mapping):
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise TypeError(f"{_where(what, path)}: keys must be str, got {_kind(key)}")
                    stack.append((child, depth + 1, (*path, key)))
            else:
                stack.extend((child, depth + 1, (*path, i)) for i, child in enumerate(item))
        else:
            raise TypeError(f"{_where(what, path)}: {_kind(item)} is not a JSON value")


def _where(what: str, path: tuple[object, ...]) -> str:
    if not path:
        return what
    text = "".join(f"[{p!r}]" for p in path)
    return f"{what} at {text[:80] + '…' if len(text) > 80 else text}"


def _kind(value: object) -> str:
    return type(value).__name__
