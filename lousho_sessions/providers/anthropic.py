"""``AnthropicProvider``: the Messages API (``/v1/messages``), streamed over ``requests``."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

from ..abort import AbortSignal
from ..errors import ProviderError
from ..messages import ImagePart, Message, TextPart, ToolCall, Usage
from ..pricing import Pricing, price_usage
from ._http import HttpClient, RetryPolicy, Timeout
from ._sse import DEFAULT_MAX_EVENT_SIZE
from ._wire import (
    api_key_from,
    env,
    event_json,
    image_base64,
    image_media_type,
    parse_arguments,
    pick_settings,
    plain_json,
)
from .base import (
    FinishReason,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    ModelToolCallDelta,
)

__all__ = ["AnthropicProvider"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"

#: ``ModelRequest.settings`` keys sent as request-body fields (``stop`` becomes ``stop_sequences``).
SETTINGS = (
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "stop_sequences",
    "tool_choice",
    "metadata",
    "thinking",
    "service_tier",
)

_FINISH: Mapping[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "pause_turn": "stop",
    "refusal": "stop",
}

#: Error types of the ``error`` stream event and the HTTP status each stands for.
_ERROR_STATUS: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}


class AnthropicProvider:
    """A Claude model through the Messages API (``POST {base_url}/v1/messages``, streamed).

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``; ``base_url`` to
    ``ANTHROPIC_BASE_URL``, else the public endpoint, which needs a key.
    ``max_tokens`` caps each reply (the API requires a cap;
    ``settings["max_tokens"]`` overrides it per call). ``timeout``,
    ``max_retries``, ``retry``, ``pricing``, ``headers``, ``max_duration``
    and ``max_event_size`` work as for
    ``OpenAIProvider``. Token usage counts cache reads and writes as input
    tokens, priced at the plain input price.

    Failures raise ``ProviderError``; an aborted signal ends the call at once.
    """

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: Timeout = (10.0, 600.0),
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        max_tokens: int = 4096,
        pricing: Mapping[str, Pricing] | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        max_duration: float | None = None,
        max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE,
    ) -> None:
        self.model = model
        self.name = name or f"anthropic/{model}"
        self.base_url = (base_url or env("ANTHROPIC_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.max_tokens = max_tokens
        self.pricing = dict(pricing or {})
        key = api_key_from(api_key, "ANTHROPIC_API_KEY")
        self._needs_key = key is None and self.base_url == DEFAULT_BASE_URL
        sent: dict[str, str] = {
            "Accept": "text/event-stream",
            "Content-Type": "application/json",
            "anthropic-version": API_VERSION,
        }
        if key:
            sent["x-api-key"] = key.reveal()
        sent.update(headers or {})
        policy = retry or RetryPolicy()
        if max_retries is not None:
            policy = attrs.evolve(policy, max_retries=max_retries)
        self._http = HttpClient(
            provider=self.name,
            base_url=self.base_url,
            headers=sent,
            secret=key,
            timeout=timeout,
            retry=policy,
            max_duration=max_duration,
            max_event_size=max_event_size,
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.model!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close pooled connections (the provider still works afterwards)."""
        self._http.close()

    def __enter__(self) -> AnthropicProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        system = [request.system] if request.system else []
        # system messages inside the transcript join the top-level system text
        system += [m.text for m in request.messages if m.role == "system" and m.text]
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": _messages(request.messages),
            "stream": True,
        }
        if system:
            body["system"] = "\n\n".join(system)
        if request.tools:
            body["tools"] = [
                {
                    "name": spec.name,
                    "description": spec.description,
                    "input_schema": plain_json(spec.parameters),
                }
                for spec in request.tools
            ]
        body.update(pick_settings(request.settings, SETTINGS, {"stop": "stop_sequences"}))
        return body

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        """Stream the model's answer: text and tool-call deltas, then one ``ModelResponse``."""
        return self._http.guard(self._stream(request, signal))

    def _stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        if self._needs_key:
            raise ProviderError(
                None,
                f"{self.name}: no API key; pass api_key= or set ANTHROPIC_API_KEY",
                retryable=False,
            )
        body = self.build_body(request)
        with self._http.stream("v1/messages", body, signal) as reply:
            state = _StreamState(self.name, reply.request_id)
            for event in reply.events():
                data = event_json(event, self.name, reply.request_id)
                yield from state.event(str(data.get("type") or event.event), data)
                if state.done:
                    reply.drain()
                    break
        if not state.done:
            raise ProviderError(
                None,
                f"{self.name}: the event stream ended before message_stop; the reply is incomplete",
                retryable=True,
                request_id=state.request_id,
            )
        yield state.response(self.model, self.pricing)


@attrs.define
class _Block:
    kind: str
    call_index: int = -1  # for tool_use blocks: the call's position among the calls
    id: str = ""
    name: str = ""
    parts: list[str] = attrs.field(factory=list)


@attrs.define
class _StreamState:
    """What the events told so far."""

    provider: str
    request_id: str | None
    blocks: dict[int, _Block] = attrs.field(factory=dict)
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None
    done: bool = False

    def event(self, kind: str, data: Mapping[str, Any]) -> Iterator[ModelEvent]:
        if kind == "message_start":
            message = data.get("message") or {}
            self._usage(message.get("usage") or {})
        elif kind == "content_block_start":
            yield from self._start(int(data.get("index", len(self.blocks))), data)
        elif kind == "content_block_delta":
            yield from self._delta(int(data.get("index", 0)), data.get("delta") or {})
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if delta.get("stop_reason"):
                self.stop_reason = str(delta["stop_reason"])
            self._usage(data.get("usage") or {})
        elif kind == "message_stop":
            self.done = True
        elif kind == "error":
            raise self._error(data.get("error") or {})
        # ping, content_block_stop and event types added later need nothing

    def _usage(self, usage: Mapping[str, Any]) -> None:
        # message_delta counts are cumulative: the last value seen wins
        if "input_tokens" in usage:
            self.input_tokens = sum(
                int(usage.get(key) or 0)
                for key in (
                    "input_tokens",
                    "cache_creation_input_tokens",
                    "cache_read_input_tokens",
                )
            )
        if "output_tokens" in usage:
            self.output_tokens = int(usage.get("output_tokens") or 0)

    def _start(self, index: int, data: Mapping[str, Any]) -> Iterator[ModelEvent]:
        block = data.get("content_block") or {}
        kind = str(block.get("type") or "")
        if kind == "tool_use":
            started = _Block(
                kind, self.calls, str(block.get("id") or ""), str(block.get("name") or "")
            )
            self.calls += 1
            self.blocks[index] = started
            given = block.get("input")
            if given:  # servers that send the input whole rather than as deltas
                started.parts.append(json.dumps(given))
            yield ModelToolCallDelta(
                index=started.call_index,
                id=started.id or None,
                name=started.name or None,
                arguments="".join(started.parts),
            )
        else:
            self.blocks[index] = _Block(kind)
            text = block.get("text") if kind == "text" else None
            if isinstance(text, str) and text:
                self.blocks[index].parts.append(text)
                yield ModelTextDelta(text)

    def _delta(self, index: int, delta: Mapping[str, Any]) -> Iterator[ModelEvent]:
        block = self.blocks.get(index)
        if block is None:
            block = self.blocks[index] = _Block("text")
        kind = delta.get("type")
        if kind == "text_delta":
            text = delta.get("text")
            if isinstance(text, str) and text:
                block.parts.append(text)
                yield ModelTextDelta(text)
        elif kind == "input_json_delta" and block.kind == "tool_use":
            fragment = delta.get("partial_json")
            if isinstance(fragment, str) and fragment:
                block.parts.append(fragment)
                yield ModelToolCallDelta(index=block.call_index, arguments=fragment)
        # thinking, signature and citation deltas are not part of the transcript

    def _error(self, error: Mapping[str, Any]) -> ProviderError:
        kind = str(error.get("type") or "error")
        status = _ERROR_STATUS.get(kind)
        retryable = status is not None and (status == 429 or status >= 500)
        return ProviderError(
            status,
            f"{self.provider}: the server reported an error in the stream: "
            f"{error.get('message') or kind} ({kind})",
            retryable=retryable,
            request_id=self.request_id,
        )

    def response(self, model: str, pricing: Mapping[str, Pricing]) -> ModelResponse:
        text: list[str] = []
        calls: list[ToolCall] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.kind == "text":
                text.extend(block.parts)
            elif block.kind == "tool_use":
                call_id = block.id or f"toolu_{index}"
                if not block.name:
                    raise ProviderError(
                        None,
                        f"{self.provider}: the model sent tool call {call_id} without a name",
                        retryable=True,
                        request_id=self.request_id,
                    )
                arguments = parse_arguments(
                    "".join(block.parts),
                    provider=self.provider,
                    name=block.name,
                    call_id=call_id,
                    request_id=self.request_id,
                )
                calls.append(ToolCall(call_id, block.name, arguments))
        finish = _FINISH.get(self.stop_reason or "end_turn", "stop")
        if calls and finish == "stop":
            finish = "tool_calls"
        usage = price_usage(Usage(self.input_tokens, self.output_tokens), model, pricing)
        message = Message.assistant("".join(text), tool_calls=calls, usage=usage)
        return ModelResponse(message=message, usage=usage, finish_reason=finish)


def _messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The transcript as Messages API turns; tool results go in user turns.

    Consecutive user-side messages (tool results, then maybe user text) merge
    into one user turn with the tool results first, as the API requires.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue  # sent as the top-level system text
        if message.role == "assistant":
            content = _content(message.content)
            for call in message.tool_calls:
                content.append(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.name,
                        "input": plain_json(call.arguments),
                    }
                )
            role = "assistant"
        elif message.role == "tool":
            result: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": _content(message.content) or message.text,
            }
            if message.is_error:
                result["is_error"] = True
            content, role = [result], "user"
        else:
            content, role = _content(message.content), "user"
        if not content:
            continue  # the API rejects empty turns
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
    return out


def _content(parts: tuple[TextPart | ImagePart, ...]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, TextPart):
            if part.text:  # the API rejects empty text blocks
                blocks.append({"type": "text", "text": part.text})
        elif part.url is not None:
            blocks.append({"type": "image", "source": {"type": "url", "url": part.url}})
        else:
            blocks.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": image_media_type(part),
                        "data": image_base64(part),
                    },
                }
            )
    return blocks
