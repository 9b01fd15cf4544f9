"""``OpenAIProvider``: the Chat Completions wire format, streamed over ``requests``.

Works with OpenAI and with every server that speaks the same format (Ollama,
vLLM, llama.cpp server, LiteLLM proxy) through ``base_url``.
"""

from __future__ import annotations

import json
import uuid
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


class OpenAIProvider:
    """A Chat Completions model (``POST {base_url}/chat/completions``, streamed).

    ``api_key`` defaults to ``OPENAI_API_KEY``; ``base_url`` to
    ``OPENAI_BASE_URL``, else the public endpoint, which needs a key (other
    servers are sent no ``Authorization`` header when there is no key).
    ``timeout`` is seconds, or ``(connect, read)`` where read is the longest
    silence allowed while waiting for the reply or inside the stream.
    ``max_retries`` (default 2) and ``retry`` set how failed requests are tried
    again (see ``RetryPolicy``). ``pricing`` adds to or overrides the price
    table used for ``Usage.cost_usd``. ``headers`` are extra HTTP headers.
    ``max_duration`` (seconds; default ``None``, no limit) bounds a whole
    call, retries and stream included; ``max_event_size`` (characters, 16 MiB
    by default) bounds one line or event of the stream. The key is stripped of
    surrounding whitespace; one HTTP cannot carry raises
    ``ProviderConfigError`` (a ``ValueError``) that does not show it.

    Failures raise ``ProviderError``; an aborted signal ends the call at once
    (it raises the SDK's internal abort error, which the turn handles).
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
        pricing: Mapping[str, Pricing] | None = None,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        max_duration: float | None = None,
        max_event_size: int | None = DEFAULT_MAX_EVENT_SIZE,
    ) -> None:
        self.model = model
        self.name = name or f"openai/{model}"
        self.base_url = (base_url or env("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.pricing = dict(pricing or {})
        key = api_key_from(api_key, "OPENAI_API_KEY")
        self._needs_key = key is None and self.base_url == DEFAULT_BASE_URL
        sent: dict[str, str] = {"Accept": "text/event-stream", "Content-Type": "application/json"}
        if key:
            sent["Authorization"] = f"Bearer {key.reveal()}"
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
        return f"OpenAIProvider(model={self.model!r}, base_url={self.base_url!r})"

    def close(self) -> None:
        """Close pooled connections (the provider still works afterwards)."""
        self._http.close()

    def __enter__(self) -> OpenAIProvider:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": _messages(request),
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
        body.update(pick_settings(request.settings, SETTINGS))
        return body

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        """Stream the model's answer: text and tool-call deltas, then one ``ModelResponse``."""
        return self._http.guard(self._stream(request, signal))

    def _stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        if self._needs_key:
            raise ProviderError(
                None,
                f"{self.name}: no API key; pass api_key= or set OPENAI_API_KEY",
                retryable=False,
            )
        body = self.build_body(request)
        with self._http.stream("chat/completions", body, signal) as reply:
            state = _StreamState(self.name, reply.request_id)
            for event in reply.events():
                if event.data.strip() == "[DONE]":
                    state.done = True
                    reply.drain()
                    break
                yield from state.chunk(event_json(event, self.name, reply.request_id))
        if not state.done:
            raise ProviderError(
                None,
                f"{self.name}: the event stream ended before [DONE]; the reply is incomplete",
                retryable=True,
                request_id=state.request_id,
            )
        yield state.response(self.model, self.pricing)


@attrs.define
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = attrs.field(factory=list)


@attrs.define
class _StreamState:
    """What the chunks told so far."""

    provider: str
    request_id: str | None
    text: list[str] = attrs.field(factory=list)
    calls: dict[int, _PartialCall] = attrs.field(factory=dict)
    finish: str | None = None
    usage: Mapping[str, Any] | None = None
    done: bool = False

    def chunk(self, chunk: Mapping[str, Any]) -> Iterator[ModelEvent]:
        error = chunk.get("error")
        if error:
            raise _stream_error(self.provider, error, self.request_id)
        if isinstance(chunk.get("usage"), Mapping):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                self.text.append(content)
                yield ModelTextDelta(content)
            for call in delta.get("tool_calls") or ():
                yield self._call_delta(call)
            if choice.get("finish_reason"):
                self.finish = str(choice["finish_reason"])

    def _call_delta(self, call: Mapping[str, Any]) -> ModelToolCallDelta:
        index = call.get("index")
        if not isinstance(index, int):  # some servers send whole calls without an index
            index = len(self.calls)
        function = call.get("function") or {}
        partial = self.calls.setdefault(index, _PartialCall())
        call_id = call.get("id") or None
        name = function.get("name") or None
        arguments = function.get("arguments") or ""
        # a name or id is sent once; servers that repeat it must not double it
        if call_id and not partial.id:
            partial.id = call_id
        if name and not partial.name:
            partial.name = name
        if not isinstance(arguments, str):  # a server that sends the object itself
            arguments = json.dumps(arguments)
        partial.arguments.append(arguments)
        return ModelToolCallDelta(index=index, id=call_id, name=name, arguments=arguments)

    def response(self, model: str, pricing: Mapping[str, Pricing]) -> ModelResponse:
        calls = []
        for index in sorted(self.calls):
            partial = self.calls[index]
            call_id = partial.id or f"call_{uuid.uuid4().hex[:24]}"
            if not partial.name:
                raise ProviderError(
                    None,
                    f"{self.provider}: the model sent tool call {call_id} without a name",
                    retryable=True,
                    request_id=self.request_id,
                )
            arguments = parse_arguments(
                "".join(partial.arguments),
                provider=self.provider,
                name=partial.name,
                call_id=call_id,
                request_id=self.request_id,
            )
            calls.append(ToolCall(call_id, partial.name, arguments))
        finish = _FINISH.get(self.finish or "stop", "stop")
        if calls and finish == "stop":  # some compatible servers say "stop" after tool calls
            finish = "tool_calls"
        usage = Usage()
        if self.usage:
            usage = Usage(
                input_tokens=int(self.usage.get("prompt_tokens") or 0),
                output_tokens=int(self.usage.get("completion_tokens") or 0),
            )
        usage = price_usage(usage, model, pricing)
        message = Message.assistant("".join(self.text), tool_calls=calls, usage=usage)
        return ModelResponse(message=message, usage=usage, finish_reason=finish)


def _stream_error(provider: str, error: Any, request_id: str | None) -> ProviderError:
    if isinstance(error, Mapping):
        message = str(error.get("message") or error)
        kind = str(error.get("type") or error.get("code") or "")
    else:
        message, kind = str(error), ""
    retryable = any(word in kind for word in ("server", "overload", "rate_limit", "timeout"))
    suffix = f" ({kind})" if kind else ""
    return ProviderError(
        None,
        f"{provider}: the server reported an error in the stream: {message}{suffix}",
        retryable=retryable,
        request_id=request_id,
    )


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for message in request.messages:
        if message.role == "system":
            out.append({"role": "system", "content": message.text})
        elif message.role == "user":
            out.append({"role": "user", "content": _user_content(message)})
        elif message.role == "assistant":
            item: dict[str, Any] = {"role": "assistant", "content": message.text or None}
            if message.tool_calls:
                item["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(plain_json(call.arguments), ensure_ascii=False),
                        },
                    }
                    for call in message.tool_calls
                ]
            out.append(item)
        elif message.role == "tool":
            # Chat Completions has no error flag for tool results; the text says it.
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
            )
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
