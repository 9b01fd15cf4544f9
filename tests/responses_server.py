"""OpenAI's Responses API on the loopback server, applying the rules OpenAI applies.

:class:`ResponsesRules` answers ``POST /v1/responses`` on a
:class:`~provider_server.ProviderServer`. Each request body is first checked
against the ``openai`` package's own request type (``ResponseCreateParamsStreaming``,
unknown keys refused); then the conversation rules, with OpenAI's error texts:

- with ``store=false`` a ``reasoning`` item must carry ``encrypted_content``, byte for
  byte the one this server issued (404 "Item with id ... not found. Items are not
  persisted ..." without it, 400 "... could not be verified" when altered);
- a ``function_call`` this server issued after a reasoning item needs that item
  before it (400 "Item 'fc_...' of type 'function_call' was provided without its
  required 'reasoning' item: 'rs_...'."); a reasoning item needs a following item;
- every ``function_call_output`` needs its call, and every call its output;
- ``previous_response_id`` must name a response stored here (400
  ``previous_response_not_found`` otherwise; :meth:`ResponsesRules.forget` expires one).

Replies are scripted as items (:class:`Think`, :class:`Say`, :class:`Call`); each is
streamed in the documented event shapes with fresh ids (encrypted content only when
the request asked for it, and only a partial one in ``output_item.added``).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import threading
import typing
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from provider_server import JSONReply, ProviderServer, Recorded, Reply, SSEReply

__all__ = [
    "Call",
    "ResponsesRules",
    "Say",
    "Think",
    "check_chat_request",
    "check_request",
    "check_stream_event",
    "stream_events",
]


@dataclass(frozen=True)
class Think:
    """A reasoning item with these summary parts."""

    summary: Sequence[str] = ()


@dataclass(frozen=True)
class Say:
    """An assistant message."""

    text: str


@dataclass(frozen=True)
class Call:
    """A function call."""

    name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)


Item = Think | Say | Call

_ADAPTERS: dict[str, Any] = {}


def _adapter(name: str) -> Any:
    if name not in _ADAPTERS:
        from openai.types.responses import ResponseStreamEvent
        from openai.types.responses.response_create_params import (
            ResponseCreateParamsStreaming,
        )
        from pydantic import ConfigDict, TypeAdapter

        # the list wrapper lets the config reach the TypedDicts: unknown keys are refused
        _ADAPTERS["request"] = TypeAdapter(
            list[ResponseCreateParamsStreaming], config=ConfigDict(extra="forbid")
        )
        _ADAPTERS["event"] = TypeAdapter(ResponseStreamEvent)
        (union, *_) = typing.get_args(ResponseStreamEvent)
        _ADAPTERS["events"] = {
            kind: member
            for member in typing.get_args(union)
            for kind in typing.get_args(member.model_fields["type"].annotation)
        }
    return _ADAPTERS[name]


def _consume(value: Any) -> None:
    """Walk a validated value: pydantic checks ``Iterable`` fields only as they are read."""
    if isinstance(value, Mapping):
        for child in value.values():
            _consume(child)
    elif isinstance(value, (list, tuple)) or type(value).__name__ == "ValidatorIterator":
        for child in value:
            _consume(child)


def check_request(body: Any) -> None:
    """Raise ``pydantic.ValidationError`` unless ``body`` is a valid streamed Responses request."""
    _consume(_adapter("request").validate_python([body]))


def check_chat_request(body: Any) -> None:
    """Raise unless ``body`` is a valid streamed Chat Completions request (unknown keys refused)."""
    if "chat" not in _ADAPTERS:
        from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
        from pydantic import ConfigDict, TypeAdapter

        _ADAPTERS["chat"] = TypeAdapter(
            list[CompletionCreateParamsStreaming], config=ConfigDict(extra="forbid")
        )
    _consume(_ADAPTERS["chat"].validate_python([_without_echoes(body)]))


def _without_echoes(body: Any) -> Any:
    """``body`` without the ``extra_content`` of its assistant tool calls: a documented
    extension of OpenAI-compatible servers (Gemini's thought signature rides there) that
    the provider sends back as it came, and the SDK's types do not know."""
    if not isinstance(body, Mapping) or not isinstance(body.get("messages"), list):
        return body
    messages = []
    for message in body["messages"]:
        if isinstance(message, Mapping) and isinstance(message.get("tool_calls"), list):
            calls = [
                {k: v for k, v in c.items() if k != "extra_content"}
                if isinstance(c, Mapping)
                else c
                for c in message["tool_calls"]
            ]
            message = {**message, "tool_calls": calls}
        messages.append(message)
    return {**body, "messages": messages}


def check_stream_event(event: Mapping[str, Any]) -> None:
    """Raise unless ``event`` is the SDK's ``ResponseStreamEvent`` of its ``type``."""
    _adapter("event")
    _ADAPTERS["events"][event["type"]].model_validate(event)


def _error(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> JSONReply:
    body = {
        "error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    }
    return JSONReply(status, json.dumps(body))


class ResponsesRules:
    """Answers Responses requests on ``server`` from scripted items, enforcing OpenAI's rules."""

    def __init__(self, server: ProviderServer, model: str = "o4-mini-2025-04-16") -> None:
        self.server = server
        self.model = model
        self._scripts: deque[tuple[Sequence[Item], Mapping[str, int], str] | Reply] = deque()
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        #: reasoning item id -> the encrypted content issued with it
        self.encrypted: dict[str, str] = {}
        #: call_id -> (function_call item id, id of the reasoning item just before it)
        self.calls: dict[str, tuple[str, str | None]] = {}
        #: response id -> every item of its conversation (input and output)
        self.stored: dict[str, list[dict[str, Any]]] = {}
        #: the requests refused, with why (tests assert on these)
        self.refused: list[tuple[int, str]] = []
        #: request bodies that did not validate against the SDK's type
        self.invalid: list[str] = []
        server.route = self.route

    def reply(
        self, *items: Item, usage: Mapping[str, int] | None = None, status: str = "completed"
    ) -> None:
        """Queue one reply made of ``items``."""
        with self._lock:
            self._scripts.append((items, dict(usage or {}), status))

    def reply_raw(self, *replies: Reply) -> None:
        """Queue replies sent as they are (errors, cut streams)."""
        with self._lock:
            self._scripts.extend(replies)

    def forget(self, response_id: str) -> None:
        """Expire a stored response, as OpenAI does after 30 days."""
        self.stored.pop(response_id, None)

    def _new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):04d}{hashlib.sha1(prefix.encode()).hexdigest()[:20]}"

    # --- answering ---------------------------------------------------------------

    def route(self, recorded: Recorded) -> Reply:
        body = recorded.body
        try:
            check_request(body)
        except Exception as exc:  # the SDK type refused it: a 400 naming what was wrong
            self.invalid.append(str(exc))
            return self._refuse(400, f"invalid request body: {exc}")
        with self._lock:
            refusal = self._check(body)
            if refusal is not None:
                return refusal
            if not self._scripts:
                return self._refuse(500, "the test scripted no reply")
            script = self._scripts.popleft()
            if not isinstance(script, tuple):
                return script
            return self._answer(body, *script)

    def _refuse(self, status: int, message: str, **kwargs: Any) -> JSONReply:
        self.refused.append((status, message))
        return _error(status, message, **kwargs)

    def _context(self, body: Mapping[str, Any]) -> list[dict[str, Any]] | JSONReply:
        given = body.get("input")
        items = (
            [{"type": "message", "role": "user", "content": given}]
            if isinstance(given, str)
            else list(given or [])
        )
        previous = body.get("previous_response_id")
        if previous is None:
            return items
        if previous not in self.stored:
            return self._refuse(
                400,
                f"Previous response with id '{previous}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return self.stored[previous] + items

    def _check(self, body: Mapping[str, Any]) -> JSONReply | None:
        context = self._context(body)
        if isinstance(context, JSONReply):
            return context
        store = body.get("store", True)
        given = body.get("input")
        for item in given if isinstance(given, list) else ():
            if item.get("type") != "reasoning":
                continue
            item_id = item["id"]
            encrypted = item.get("encrypted_content")
            if encrypted is None and (not store or item_id not in self.encrypted):
                return self._refuse(
                    404,
                    f"Item with id '{item_id}' not found. Items are not persisted when `store` "
                    "is set to false. Try again with `store` set to true, or remove this item "
                    "from your input.",
                    param="input",
                )
            if encrypted is not None and self.encrypted.get(item_id) != encrypted:
                return self._refuse(
                    400,
                    f"The encrypted content for item {item_id} could not be verified.",
                    code="invalid_encrypted_content",
                )
        seen_reasoning: set[str] = set()
        calls: set[str] = set()
        outputs: set[str] = set()
        for position, item in enumerate(context):
            kind = item.get("type")
            if kind == "reasoning":
                if position + 1 == len(context):
                    return self._refuse(
                        400,
                        f"Item '{item['id']}' of type 'reasoning' was provided without its "
                        "required following item.",
                        param="input",
                    )
                seen_reasoning.add(item["id"])
            elif kind == "function_call":
                call_id = item["call_id"]
                issued = self.calls.get(call_id)
                if issued is not None and issued[1] is not None and issued[1] not in seen_reasoning:
                    return self._refuse(
                        400,
                        f"Item '{issued[0]}' of type 'function_call' was provided without its "
                        f"required 'reasoning' item: '{issued[1]}'.",
                        param="input",
                    )
                calls.add(call_id)
            elif kind == "function_call_output":
                if item["call_id"] not in calls:
                    return self._refuse(
                        400,
                        f"No tool call found for function call output with call_id {item['call_id']}.",
                        param="input",
                    )
                outputs.add(item["call_id"])
        missing = sorted(calls - outputs)
        if missing:
            return self._refuse(
                400, f"No tool output found for function call {missing[0]}.", param="input"
            )
        return None

    def _answer(
        self, body: Mapping[str, Any], items: Sequence[Item], usage: Mapping[str, int], status: str
    ) -> SSEReply:
        encrypt = "reasoning.encrypted_content" in (body.get("include") or ())
        response_id = self._new_id("resp")
        output: list[dict[str, Any]] = []
        last_reasoning: str | None = None
        for spec in items:
            if isinstance(spec, Think):
                item_id = self._new_id("rs")
                secret = base64.b64encode(hashlib.sha512(item_id.encode()).digest() * 6).decode()
                self.encrypted[item_id] = "gAAAAB" + secret
                item: dict[str, Any] = {
                    "id": item_id,
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": t} for t in spec.summary],
                }
                if encrypt:
                    item["encrypted_content"] = self.encrypted[item_id]
                last_reasoning = item_id
            elif isinstance(spec, Say):
                item = {
                    "id": self._new_id("msg"),
                    "type": "message",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": spec.text, "annotations": []}],
                }
                last_reasoning = None
            else:
                call_id = self._new_id("call")
                item = {
                    "id": self._new_id("fc"),
                    "type": "function_call",
                    "status": "completed",
                    "call_id": call_id,
                    "name": spec.name,
                    "arguments": json.dumps(spec.arguments),
                }
                self.calls[call_id] = (item["id"], last_reasoning)
                last_reasoning = None
            output.append(item)
        if body.get("store", True):
            context = self._context(body)
            assert isinstance(context, list)
            self.stored[response_id] = context + output
        events = stream_events(response_id, self.model, output, usage, status)
        return SSEReply([f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events])


def _response(
    response_id: str,
    model: str,
    status: str,
    output: list[dict[str, Any]],
    usage: Mapping[str, int] | None,
) -> dict[str, Any]:
    response: dict[str, Any] = {
        "id": response_id,
        "object": "response",
        "created_at": 1741476542,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": None,
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "temperature": 1.0,
        "top_p": 1.0,
        "usage": None,
    }
    if usage is not None:
        response["usage"] = {
            "input_tokens": usage.get("input", 0),
            "input_tokens_details": {
                "cached_tokens": usage.get("cached", 0),
                "cache_write_tokens": usage.get("cache_write", 0),
            },
            "output_tokens": usage.get("output", 0),
            "output_tokens_details": {"reasoning_tokens": usage.get("reasoning", 0)},
            "total_tokens": usage.get("input", 0) + usage.get("output", 0),
        }
    return response


def _halves(text: str) -> list[str]:
    cut = max(1, len(text) // 2)
    return [piece for piece in (text[:cut], text[cut:]) if piece]


def stream_events(
    response_id: str,
    model: str,
    output: list[dict[str, Any]],
    usage: Mapping[str, int] | None = None,
    status: str = "completed",
) -> list[dict[str, Any]]:
    """The documented event sequence that streams a response with these output items."""
    events: list[dict[str, Any]] = [
        {
            "type": "response.created",
            "response": _response(response_id, model, "in_progress", [], None),
        },
        {
            "type": "response.in_progress",
            "response": _response(response_id, model, "in_progress", [], None),
        },
    ]
    for index, item in enumerate(output):
        events += _item_events(index, item)
    final = _response(response_id, model, status, output, usage or {})
    events.append({"type": f"response.{status}", "response": final})
    for number, event in enumerate(events):
        event["sequence_number"] = number
    return events


def _item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    kind = item["type"]
    events: list[dict[str, Any]] = []
    where = {"item_id": item["id"], "output_index": index}
    if kind == "reasoning":
        added = {**item, "summary": []}
        if "encrypted_content" in item:  # a partial value here: only ``done`` has the real one
            added["encrypted_content"] = item["encrypted_content"][:40]
        events.append({"type": "response.output_item.added", "output_index": index, "item": added})
        for number, part in enumerate(item["summary"]):
            at = {**where, "summary_index": number}
            events.append(
                {
                    "type": "response.reasoning_summary_part.added",
                    **at,
                    "part": {"type": "summary_text", "text": ""},
                }
            )
            for piece in _halves(part["text"]):
                events.append(
                    {"type": "response.reasoning_summary_text.delta", **at, "delta": piece}
                )
            events.append(
                {"type": "response.reasoning_summary_text.done", **at, "text": part["text"]}
            )
            events.append({"type": "response.reasoning_summary_part.done", **at, "part": part})
    elif kind == "message":
        added = {**item, "status": "in_progress", "content": []}
        events.append({"type": "response.output_item.added", "output_index": index, "item": added})
        for number, part in enumerate(item["content"]):
            at = {**where, "content_index": number}
            events.append(
                {"type": "response.content_part.added", **at, "part": {**part, "text": ""}}
            )
            for piece in _halves(part["text"]):
                events.append(
                    {"type": "response.output_text.delta", **at, "delta": piece, "logprobs": []}
                )
            events.append(
                {"type": "response.output_text.done", **at, "text": part["text"], "logprobs": []}
            )
            events.append({"type": "response.content_part.done", **at, "part": part})
    else:
        added = {**item, "status": "in_progress", "arguments": ""}
        events.append({"type": "response.output_item.added", "output_index": index, "item": added})
        for piece in _halves(item["arguments"]):
            events.append(
                {"type": "response.function_call_arguments.delta", **where, "delta": piece}
            )
        events.append(
            {
                "type": "response.function_call_arguments.done",
                **where,
                "name": item["name"],
                "arguments": item["arguments"],
            }
        )
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events
