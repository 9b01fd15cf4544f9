"""Typed output test material: one case per supported type, and replies on each wire.

``CASES`` pairs an ``output_type`` with the JSON a model answers and the value
``result.output`` must then hold. ``openai_reply``/``anthropic_reply`` build the
server-sent events each vendor streams for a structured answer (Chat Completions:
the JSON as ``content`` deltas; Messages API: the input of the forced
``final_output`` tool as ``input_json_delta`` fragments), cut into pieces so a
streamed turn sees several deltas.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import Any, Literal, TypedDict

import attrs
from provider_server import SSEReply

from lousho_sessions import FunctionProvider, Message, ModelRequest


@attrs.frozen
class Item:
    """A line of a bill."""

    name: str
    price: float
    note: str | None = None
    qty: int = 1


@dataclasses.dataclass
class Bill:
    items: list[Item]
    total: float
    paid: bool = False


class Mood(enum.Enum):
    HAPPY = "happy"
    SAD = "sad"


class Contact(TypedDict):
    name: str
    age: int


@attrs.frozen
class Profile:
    contact: Contact
    mood: Mood
    tags: list[Literal["a", "b"]]


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    type: Any
    answer: Any  # the JSON value the model writes
    expected: Any  # result.output


CASES = [
    Case("attrs", Item, {"name": "tea", "price": 2.5}, Item("tea", 2.5)),
    Case(
        "dataclass",
        Bill,
        {"items": [{"name": "tea", "price": 2, "note": "hot", "qty": 2}], "total": 4},
        Bill([Item("tea", 2.0, "hot", 2)], 4.0),
    ),
    Case("typeddict", Contact, {"name": "Ali", "age": 31}, {"name": "Ali", "age": 31}),
    Case(
        "list",
        list[Item],
        {"value": [{"name": "a", "price": 1}, {"name": "b", "price": 2}]},
        [Item("a", 1.0), Item("b", 2.0)],
    ),
    Case("literal", Literal["yes", "no"], {"value": "no"}, "no"),
    Case("enum", Mood, {"value": "sad"}, Mood.SAD),
    Case("str", str, {"value": "plain"}, "plain"),
    Case("int", int, {"value": 7}, 7),
    Case("float", float, {"value": 7.25}, 7.25),
    Case("bool", bool, {"value": True}, True),
    Case(
        "nested",
        Profile,
        {"contact": {"name": "Ali", "age": 31}, "mood": "happy", "tags": ["b", "a"]},
        Profile({"name": "Ali", "age": 31}, Mood.HAPPY, ["b", "a"]),
    ),
    # OpenAI's strict mode writes null for an optional field left out: it is dropped
    Case(
        "strict-nulls",
        Item,
        {"name": "tea", "price": 1, "note": None, "qty": None},
        Item("tea", 1.0, None, 1),
    ),
]

#: a bill whose third price is not a number, and the problem that names it
BAD_BILL = {
    "items": [{"name": "a", "price": 1}, {"name": "b", "price": 2}, {"name": "c", "price": "ten"}],
    "total": 3,
}
BAD_PROBLEM = '$.items[2].price: expected number, got string "ten"'
GOOD_BILL = {"items": [{"name": "a", "price": 1}], "total": 1}


def pieces(text: str, n: int = 3) -> list[str]:
    size = max(1, len(text) // n)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    body = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {body}\n\n".encode()


def openai_reply(text: str) -> SSEReply:
    """Chat Completions streaming ``text`` as the assistant's content."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "test-model"}
    events = [
        _sse(
            None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        )
    ]
    for piece in pieces(text):
        events.append(_sse(None, {**base, "choices": [{"index": 0, "delta": {"content": piece}}]}))
    events.append(
        _sse(None, {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    )
    usage = {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    events.append(_sse(None, {**base, "choices": [], "usage": usage}))
    events.append(_sse(None, "[DONE]"))
    return SSEReply(events)


def anthropic_reply(text: str) -> SSEReply:
    """The Messages API calling ``final_output`` with ``text`` as its input."""
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "test-model",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 20, "output_tokens": 1},
        },
    }
    block = {"type": "tool_use", "id": "toolu_1", "name": "final_output", "input": {}}
    events = [
        _sse("message_start", start),
        _sse(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
    ]
    for piece in pieces(text):
        delta = {"type": "input_json_delta", "partial_json": piece}
        events.append(
            _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
        )
    events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": 0}))
    stop = {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use"},
        "usage": {"output_tokens": 9},
    }
    events.append(_sse("message_delta", stop))
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return SSEReply(events)


def gemini_reply(text: str) -> SSEReply:
    """The Gemini API streaming ``text`` as a JSON answer (``responseMimeType``)."""
    events = []
    chunks = pieces(text)
    for n, piece in enumerate(chunks):
        candidate: dict[str, Any] = {
            "content": {"parts": [{"text": piece}], "role": "model"},
            "index": 0,
        }
        if n == len(chunks) - 1:
            candidate["finishReason"] = "STOP"
        usage = {"promptTokenCount": 20, "candidatesTokenCount": 10, "totalTokenCount": 30}
        chunk = {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "test-model"}
        events.append(_sse(None, chunk))
    return SSEReply(events)


REPLIES = {"openai": openai_reply, "anthropic": anthropic_reply, "gemini": gemini_reply}


def scripted(*texts: str, seen: list[ModelRequest] | None = None) -> FunctionProvider:
    """A ``FunctionProvider`` answering ``texts`` in order, streamed in pieces; it keeps
    each request in ``seen`` and refuses a request that asks for no structured answer."""
    left = list(texts)
    kept = seen if seen is not None else []

    def model(request: ModelRequest) -> list[str | Message]:
        assert request.output_schema is not None, "no output_schema in the request"
        kept.append(request)
        return [*pieces(left.pop(0))]

    return FunctionProvider(model)
