"""``OpenAIProvider``: the Chat Completions wire format, streamed over ``requests``.

Works with OpenAI and with every server that speaks the same format (Ollama,
vLLM, llama.cpp server, LiteLLM proxy) through ``base_url``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from ..messages import ImagePart, Message, TextPart, ToolCall
from ._body_memo import frame_of, opening
from ._http_provider import HttpProvider, Reply
from ._redact import Secret
from ._sse import ServerSentEvent
from ._structured import json_schema_format
from ._wire import image_base64, image_media_type, pick_settings, plain_json
from .base import FinishReason, ModelEvent, ModelRequest, OutputSchema

__all__ = ["OpenAIProvider"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: ``ModelRequest.settings`` keys sent as request-body fields.
SETTINGS = (
    "temperature",
    "top_p",
    "max_tokens",
    "max_completion_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "reasoning_effort",
    "user",
)

_FINISH: Mapping[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    "function_call": "tool_calls",
    "content_filter": "stop",
}


class OpenAIProvider(HttpProvider):
    """A Chat Completions model (``POST {base_url}/chat/completions``, streamed).

    ``api_key`` defaults to ``OPENAI_API_KEY``; ``base_url`` to
    ``OPENAI_BASE_URL``, else the public endpoint, which needs a key (other
    servers are sent no ``Authorization`` header when there is no key). The
    options (``timeout``, ``max_retries``, ``retry``, ``pricing``,
    ``headers``, ``name``, ``max_duration``, ``max_event_size``) are those of
    every HTTP provider: see :class:`~._http_provider.HttpProvider`.
    """

    KIND = "openai"
    KEY_ENV = "OPENAI_API_KEY"
    BASE_URL_ENV = "OPENAI_BASE_URL"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    PATH = "chat/completions"
    END = "[DONE]"
    FINISH = _FINISH
    DEFAULT_STOP = "stop"
    CALL_ID_PREFIX = "call_"

    def _key_headers(self, key: Secret | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key.reveal()}"} if key else {}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        return self._frame(request, _messages(request))

    def encode_body(self, request: ModelRequest) -> bytes:
        """:meth:`build_body`'s body as JSON text, encoding only the messages the session's
        previous call did not send, and the frame (model, system, tools, settings) only
        when it changed (see ``_body_memo``)."""
        return bytes(self._view(request))

    _VIEWED = encode_body

    def _view(self, request: ModelRequest) -> bytes | memoryview:
        messages, encode = request.messages, self._http.encode
        head = self._memos.head(request.session_id, messages, len(messages))
        start, memo = head.start, head.memo
        # one item a message (b"": a message of a role it does not know, not sent)
        items = [b"" if item is None else encode(item) for item in map(_item, messages[start:])]
        parts = (
            self.model,
            self.cache,
            request.system,
            request.tools,
            request.output_schema,
            dict(request.settings),
            request.session_id,  # the cache key
        )
        frame: tuple[bytes, list[bytes]] | None = frame_of(memo, parts)
        if frame is None:
            body = self._frame(request, None)
            if body.pop("messages") is not None:  # an ``extra_body`` gave them: they win
                return encode(self.build_body(request))
            first = [encode(_system(request.system))] if request.system else []
            frame = (opening(encode, body, "messages"), first)
        front, first = frame
        firsts = range(start, len(messages))  # a turn a message: turn i is message i
        return self._memos.extend(
            request.session_id, head, messages, front, items, firsts, lead=first,
            frame=(parts, frame),
        )  # fmt: skip

    def _frame(self, request: ModelRequest, messages: Any) -> dict[str, Any]:
        """The body around the messages: model, tools, settings, cache key."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": spec.name,
                        "description": spec.description,
                        "parameters": plain_json(spec.parameters),
                    },
                }
                for spec in request.tools
            ]
        if request.output_schema is not None:
            body["response_format"] = response_format(request.output_schema)
        body.update(pick_settings(request.settings, SETTINGS))  # a response_format given wins
        policy = self.cache
        if policy is not None:  # OpenAI caches prefixes itself: the key only routes the call
            key = policy.key or request.session_id
            if key:
                body["prompt_cache_key"] = key
            if policy.retention:
                body["prompt_cache_retention"] = policy.retention
        return body

    def _read(self, events: Iterator[ServerSentEvent], reply: Reply) -> Iterator[ModelEvent]:
        for event in events:
            if event.data.strip() == "[DONE]":
                reply.done = True
                return
            yield from _chunk(reply.json(event), reply)


def _chunk(chunk: Mapping[str, Any], reply: Reply) -> Iterator[ModelEvent]:
    error = chunk.get("error")
    if error:
        if isinstance(error, Mapping):
            message = error.get("message") or error
            kind = str(error.get("type") or error.get("code") or "")
        else:
            message, kind = error, ""
        raise reply.stream_error(message, kind, None)
    if isinstance(chunk.get("model"), str):
        reply.model = chunk["model"]
    usage = chunk.get("usage")
    if isinstance(usage, Mapping):
        reply.input_tokens = int(usage.get("prompt_tokens") or 0)
        reply.output_tokens = int(usage.get("completion_tokens") or 0)
        # prompt_tokens includes the cached tokens, completion_tokens the reasoning ones,
        # as Usage does
        details = usage.get("prompt_tokens_details")
        if isinstance(details, Mapping):
            reply.cache_read_tokens = int(details.get("cached_tokens") or 0)
        details = usage.get("completion_tokens_details")
        if isinstance(details, Mapping):
            reply.reasoning_tokens = int(details.get("reasoning_tokens") or 0)
    for choice in chunk.get("choices") or ():
        if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
            continue
        delta = choice.get("delta") or {}
        yield from reply.add_text(delta.get("content"))
        yield from reply.add_text(delta.get("refusal"))  # a structured answer refused
        for call in delta.get("tool_calls") or ():
            index = call.get("index")
            if not isinstance(index, int):  # some servers send whole calls without an index
                index = len(reply.calls)
            function = call.get("function") or {}
            arguments = function.get("arguments") or ""
            if not isinstance(arguments, str):  # a server that sends the object itself
                arguments = json.dumps(arguments)
            echo = {k: v for k, v in call.items() if k not in _CALL_KEYS}
            yield reply.add_call(
                index,
                call.get("id"),
                function.get("name"),
                arguments,
                {ECHO: echo} if echo else None,
            )
        if choice.get("finish_reason"):
            reply.stop = str(choice["finish_reason"])


#: the fields of a streamed tool call Chat Completions defines; any other a compatible
#: server adds (Gemini's ``extra_content`` with its thought signature) is sent back
_CALL_KEYS = frozenset({"index", "id", "type", "function"})
#: where a call keeps those fields (``ToolCall.extra``), to send them back as they came
ECHO = "chat_extra"


def response_format(output: OutputSchema) -> dict[str, Any]:
    """The ``response_format`` asking for JSON of ``output.schema``: strict where it can be."""
    return {"type": "json_schema", "json_schema": json_schema_format(output)}


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    head = [_system(request.system)] if request.system else []
    return head + _items(request.messages)


def _system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def _items(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The messages as Chat Completions messages (one each, of a role it knows)."""
    return [item for item in map(_item, messages) if item is not None]


def _item(message: Message) -> dict[str, Any] | None:
    if message.role == "system":
        return _system(message.text)
    if message.role == "user":
        return {"role": "user", "content": _user_content(message)}
    if message.role == "assistant":
        item: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            item["tool_calls"] = [_call(call) for call in message.tool_calls]
        return item
    if message.role == "tool":
        # Chat Completions has no error flag for tool results; the text says it.
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
    return None


def _call(call: ToolCall) -> dict[str, Any]:
    """A tool call as sent back, with any fields the server added to it (``ECHO``)."""
    out: dict[str, Any] = {
        "id": call.id,
        "type": "function",
        "function": {
            "name": call.name,
            "arguments": json.dumps(plain_json(call.arguments), ensure_ascii=False),
        },
    }
    echo = call.extra.get(ECHO)
    if isinstance(echo, Mapping):
        for key, value in echo.items():
            out.setdefault(key, plain_json(value))
    return out


def _user_content(message: Message) -> str | list[dict[str, Any]]:
    if all(isinstance(part, TextPart) for part in message.content):
        return message.text  # a plain string: what every compatible server accepts
    parts: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            if part.url is not None:
                url = part.url
            else:
                url = f"data:{image_media_type(part)};base64,{image_base64(part)}"
            parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts
