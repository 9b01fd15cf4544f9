"""The Responses API's items: the transcript as ``input`` items.

What must go back verbatim is kept on the parts themselves: a ``reasoning``
item is a ``ReasoningPart(provider="openai")`` with the item's ``id``, its
``encrypted_content`` in ``data`` and its summary as ``text`` (the summary's
parts in ``extra["openai_summary"]`` when there are several, raw
``reasoning_text`` content in ``extra["openai_content"]``). Calls keep their
place among the parts (``replay_blocks``), so a reasoning item goes back just
before the call it came before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..messages import ImagePart, Message, Part, ReasoningPart, TextPart, ToolCall, thaw
from ._reasoning import replay_blocks
from ._wire import image_base64, image_media_type, plain_json

__all__ = [
    "CONTENT",
    "FAMILY",
    "SUMMARY",
    "ContextHash",
    "context_digest",
    "input_items",
    "message_items",
    "reasoning_extra",
]

#: ``ReasoningPart.provider`` of what the Responses API made
FAMILY = "openai"

SUMMARY = "openai_summary"
CONTENT = "openai_content"


def input_items(messages: Iterable[Message], *, store: bool) -> list[dict[str, Any]]:
    """The transcript as ``input`` items, in order."""
    out: list[dict[str, Any]] = []
    for message in messages:
        out.extend(message_items(message, store=store))
    return out


def message_items(message: Message, *, store: bool) -> list[dict[str, Any]]:
    """One message as ``input`` items (an assistant message may be several)."""
    if message.role == "system":
        return [{"type": "message", "role": "system", "content": message.text}]
    if message.role == "user":
        return [{"type": "message", "role": "user", "content": _user_content(message.content)}]
    if message.role == "tool":
        return [_call_output(message)]
    return _assistant(message, store)


def _user_content(parts: Sequence[Part]) -> str | list[dict[str, Any]]:
    if all(isinstance(part, (TextPart, ReasoningPart)) for part in parts):
        return "".join(part.text for part in parts if isinstance(part, TextPart))
    content: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            content.append({"type": "input_text", "text": part.text})
        elif isinstance(part, ImagePart):
            content.append(_image(part))
    return content


def _image(part: ImagePart) -> dict[str, Any]:
    if part.url is not None:
        url = part.url
    else:
        url = f"data:{image_media_type(part)};base64,{image_base64(part)}"
    return {"type": "input_image", "image_url": url, "detail": "auto"}


def _call_output(message: Message) -> dict[str, Any]:
    # Responses has no error flag for tool results; the text says it.
    output: str | list[dict[str, Any]]
    if any(isinstance(part, ImagePart) for part in message.content):
        output = _user_content(message.content)
    else:
        output = message.text
    return {"type": "function_call_output", "call_id": message.tool_call_id, "output": output}


def _assistant(message: Message, store: bool) -> list[dict[str, Any]]:
    """Reasoning, text and calls in the order the model sent them.

    A reasoning item with nothing after it (a reply cut off while reasoning) is
    left out: the API refuses one without its following item. So is one without
    ``encrypted_content`` when nothing is stored at OpenAI: the API could only
    look it up by id, and would find nothing.
    """
    out: list[dict[str, Any]] = []
    text: list[str] = []

    def flush() -> None:
        if text:
            out.append({"type": "message", "role": "assistant", "content": "".join(text)})
            text.clear()

    for block in replay_blocks(message, FAMILY):
        if isinstance(block, TextPart):
            text.append(block.text)
            continue
        flush()
        if isinstance(block, ToolCall):
            out.append(_call(block))
        elif isinstance(block, ReasoningPart):
            item = _reasoning(block, store)
            if item is not None:
                out.append(item)
        # images in assistant messages have no input form: left out
    flush()
    while out and out[-1]["type"] == "reasoning":
        out.pop()
    return out


def _reasoning(part: ReasoningPart, store: bool) -> dict[str, Any] | None:
    if not part.id or (part.data is None and not store):
        return None
    summary = part.extra.get(SUMMARY)
    texts = (
        list(summary) if isinstance(summary, (list, tuple)) else [part.text] if part.text else []
    )
    item: dict[str, Any] = {
        "type": "reasoning",
        "id": part.id,
        "summary": [{"type": "summary_text", "text": str(t)} for t in texts],
    }
    content = part.extra.get(CONTENT)
    if isinstance(content, (list, tuple)) and content:
        item["content"] = [{"type": "reasoning_text", "text": str(t)} for t in content]
    if part.data is not None:
        item["encrypted_content"] = part.data
    return item


def _call(call: ToolCall) -> dict[str, Any]:
    return {
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": json.dumps(plain_json(call.arguments), ensure_ascii=False),
    }


def reasoning_extra(item: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """A completed ``reasoning`` item's visible text and what else its part keeps."""
    texts = [
        str(s.get("text") or "")
        for s in item.get("summary") or ()
        if isinstance(s, Mapping) and s.get("type") == "summary_text"
    ]
    extra: dict[str, Any] = {}
    if len(texts) > 1:
        extra[SUMMARY] = texts
    content = [
        str(c.get("text") or "")
        for c in item.get("content") or ()
        if isinstance(c, Mapping) and c.get("type") == "reasoning_text"
    ]
    if content:
        extra[CONTENT] = content
    return "\n\n".join(texts), extra


def context_digest(items: Sequence[Mapping[str, Any]]) -> str:
    """A digest of ``items``: what a stored response saw, to tell a transcript still matches it.

    Stored in transcripts (``extra["openai_context"]``): changing what it hashes makes
    every stored continuation send the whole transcript again.
    """
    text = json.dumps(thaw(list(items)), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ContextHash:
    """:func:`context_digest` item by item: the digest of a transcript's items so far,
    extended by the items that follow without hashing the earlier ones again.

    The JSON text of a list is its items' texts between brackets, joined by commas, so
    the hash is fed ``[``, then each item's text (a comma before all but the first), and
    :meth:`digest` finishes a copy with ``]``. One kept in a memo is never added to:
    :meth:`copy` it first.
    """

    __slots__ = ("_empty", "_hash")

    def __init__(self) -> None:
        self._hash = hashlib.sha256(b"[")
        self._empty = True

    def copy(self) -> ContextHash:
        other = ContextHash.__new__(ContextHash)
        other._hash, other._empty = self._hash.copy(), self._empty
        return other

    def add(self, items: Iterable[Mapping[str, Any]]) -> None:
        """Hash ``items`` after those added before."""
        for item in items:
            text = json.dumps(thaw(item), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
            self._hash.update((text if self._empty else "," + text).encode("utf-8"))
            self._empty = False

    def digest(self) -> str:
        """:func:`context_digest` of every item added."""
        final = self._hash.copy()
        final.update(b"]")
        return final.hexdigest()
