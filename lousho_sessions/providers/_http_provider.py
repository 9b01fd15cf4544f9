"""``HttpProvider``: what every HTTP provider shares, written once.

The key lookup, the headers, the retry policy, the HTTP client, ``close()``
and the stream skeleton (check the key, POST the body, read the events, drain
the connection, fail on an incomplete reply, price the usage, build the
``ModelResponse``) live here. A wire format subclass gives only its
constants, its auth headers, :meth:`HttpProvider.build_body` and
:meth:`HttpProvider._read`, which turns the events into deltas while filling
a :class:`Reply`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from typing import Any, ClassVar, TypedDict

import attrs

from .._random import uuid4_hex
from ..abort import AbortSignal
from ..errors import ProviderError
from ..messages import Message, ToolCall, Usage
from ..pricing import Pricing, price_usage
from ._body_memo import BodyMemos
from ._http import HttpClient, RetryPolicy, Timeout
from ._reasoning import ReplyBlocks
from ._redact import Secret
from ._sse import DEFAULT_MAX_EVENT_SIZE, ServerSentEvent
from ._wire import api_key_from, env
from .base import (
    FinishReason,
    ModelEvent,
    ModelRequest,
    ModelResponse,
    ModelTextDelta,
    ModelToolCallDelta,
    ProviderBase,
)
from .caching import CachePolicy, cache_policy

__all__ = ["HttpOptions", "HttpProvider", "Reply"]

#: ``json.loads`` without its checks of arguments (a call an event)
_DECODER = json.JSONDecoder()
_scan: Callable[[str, int], tuple[Any, int]] = _DECODER.scan_once  # type: ignore[attr-defined]


def _decode(text: str) -> Any:
    """``json.loads(text)``: an event's data is nearly always one value with nothing around
    it, which the scanner reads in one call; anything else (space around it, more after
    it, not JSON) gets the decoder's whole check and its error."""
    try:
        value, end = _scan(text, 0)
    except StopIteration:
        return _DECODER.decode(text)
    if end != len(text):
        return _DECODER.decode(text)
    return value


class HttpOptions(TypedDict, total=False):
    """The keyword options every HTTP provider takes (see :class:`HttpProvider`)."""

    timeout: Timeout
    max_retries: int | None
    retry: RetryPolicy | None
    pricing: Mapping[str, Pricing] | None
    headers: Mapping[str, str] | None
    name: str | None
    max_duration: float | None
    max_event_size: int | None
    cache: bool | CachePolicy


@attrs.define
class _Call:
    id: str = ""
    name: str = ""
    parts: list[str] = attrs.field(factory=list)
    #: what the call carried that must go back with it (``ToolCall.extra``)
    extra: dict[str, Any] = attrs.field(factory=dict)


@attrs.define
class Reply:
    """What the stream told so far: text, reasoning, tool calls by index, token counts, stop reason."""

    provider: str
    request_id: str | None
    text: list[str] = attrs.field(factory=list)
    calls: dict[int, _Call] = attrs.field(factory=dict)
    #: the order of text, reasoning and calls (reasoning blocks are started through it)
    blocks: ReplyBlocks = attrs.field(factory=ReplyBlocks)
    input_tokens: int = 0
    output_tokens: int = 0
    #: of ``input_tokens``, those read from and written to the provider's prompt cache
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: of ``cache_write_tokens``, those written with a 1-hour lifetime (priced apart)
    cache_write_1h_tokens: int = 0
    #: of ``output_tokens``, those spent reasoning
    reasoning_tokens: int = 0
    #: the model that answered, as the server names it
    model: str | None = None
    stop: str | None = None
    done: bool = False
    #: the tool whose input is the structured answer (``HttpProvider.output_tool``)
    output_tool: str | None = None
    #: a wire format's own record of the reply (Gemini: its parts and their signatures)
    wire: Any = None

    def add_text(self, text: object) -> Iterator[ModelTextDelta]:
        """Keep ``text`` (when it is a non-empty string) and give its delta."""
        if isinstance(text, str) and text:
            self.text.append(text)
            self.blocks.text(text)
            yield ModelTextDelta(text)

    def add_call(
        self,
        index: int,
        id: str | None = None,
        name: str | None = None,
        arguments: str = "",
        extra: Mapping[str, Any] | None = None,
    ) -> ModelToolCallDelta:
        """Keep a piece of tool call ``index`` and give its delta.

        An id or name is kept once: servers that repeat them must not double them.
        ``extra``: fields the call carried that must be sent back with it (kept in
        ``ToolCall.extra``).
        """
        call = self.calls.setdefault(index, _Call())
        if extra:
            call.extra.update(extra)
        self.blocks.call(index)
        if id and not call.id:
            call.id = id
        if name and not call.name:
            call.name = name
        if arguments:
            call.parts.append(arguments)
        return ModelToolCallDelta(
            index=index, id=id or None, name=name or None, arguments=arguments
        )

    def json(self, event: ServerSentEvent) -> dict[str, Any]:
        """The event's ``data`` as a JSON object, or a ``ProviderError`` saying what was wrong."""
        try:
            value = _decode(event.data)
        except ValueError as exc:
            raise self.error(f"an event whose data is not JSON ({exc})", event.data) from exc
        if not isinstance(value, dict):
            raise self.error("an event whose data is not a JSON object", event.data)
        return value

    def error(self, what: str, data: str, retryable: bool = False) -> ProviderError:
        """``ProviderError``: the server sent ``what``, showing the start of ``data``."""
        return ProviderError(
            None,
            f"{self.provider}: the server sent {what}: {data[:200]!r}",
            retryable=retryable,
            request_id=self.request_id,
        )

    def stream_error(self, message: object, kind: str, status: int | None) -> ProviderError:
        """The ``ProviderError`` for an error the server reported inside the stream."""
        if status is not None:
            retryable = status == 429 or status >= 500
        else:
            retryable = any(w in kind for w in ("server", "overload", "rate_limit", "timeout"))
        suffix = f" ({kind})" if kind else ""
        return ProviderError(
            status,
            f"{self.provider}: the server reported an error in the stream: {message}{suffix}",
            retryable=retryable,
            request_id=self.request_id,
        )

    def tool_calls(
        self, id_prefix: str, scrub: Callable[[str], str] = lambda text: text
    ) -> list[ToolCall]:
        """The calls in index order, their JSON arguments parsed.

        A call without an id gets ``id_prefix`` and a random suffix. A call without
        a name is a retryable ``ProviderError``. A call whose arguments are not a
        JSON object is kept with empty ``arguments`` and the text, passed through
        ``scrub``, in ``raw_arguments``: the turn answers it with an error result,
        so the model can try again.
        """
        calls: list[ToolCall] = []
        for index in sorted(self.calls):
            call = self.calls[index]
            call_id = call.id or f"{id_prefix}{uuid4_hex()[:24]}"
            if not call.name:
                raise ProviderError(
                    None,
                    f"{self.provider}: the model sent tool call {call_id} without a name",
                    retryable=True,
                    request_id=self.request_id,
                )
            text = "".join(call.parts)
            arguments = _json_object(text)
            extra = call.extra or None
            if arguments is None:
                calls.append(
                    ToolCall(call_id, call.name, raw_arguments=scrub(text), extra=extra or {})
                )
            else:
                calls.append(ToolCall(call_id, call.name, arguments, extra=extra or {}))
        return calls


def _json_object(text: str) -> dict[str, Any] | None:
    """``text`` as a JSON object (``{}`` when blank); ``None`` when it is not one."""
    if not text.strip():
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


class HttpProvider(ProviderBase):
    """A model behind an HTTP API that streams server-sent events.

    ``api_key`` defaults to the wire's environment variable (``KEY_ENV``);
    ``base_url`` to ``BASE_URL_ENV``, else the public endpoint, which needs a
    key (other servers are sent no key header when there is no key). The key
    is stripped of surrounding whitespace; one HTTP cannot carry raises
    ``ProviderConfigError`` (a ``ValueError``) that does not show it.
    ``timeout`` is seconds, or ``(connect, read)`` where read is the longest
    silence allowed while waiting for the reply or inside the stream.
    ``max_retries`` (default 2) and ``retry`` set how failed requests are tried
    again (see ``RetryPolicy``). ``pricing`` adds to or overrides the price
    table used for ``Usage.cost_usd``. ``headers`` are extra HTTP headers.
    ``max_duration`` (seconds; default ``None``, no limit) bounds a whole
    call, retries and stream included; ``max_event_size`` (characters, 16 MiB
    by default) bounds one line or event of the stream. ``cache`` (default
    ``True``) asks for the service's prompt cache; ``False`` turns that off and
    a ``CachePolicy`` tunes it (see ``CachePolicy``).

    Failures raise ``ProviderError``, scrubbed of the key; an aborted signal
    ends the call at once (it raises the SDK's internal abort error, which the
    turn handles). ``close()`` closes pooled connections (the provider still
    works afterwards).
    """

    reports_sent: ClassVar[bool] = True  # ``request.on_sent`` once the request has left
    KIND: ClassVar[str]
    KEY_ENV: ClassVar[str]
    BASE_URL_ENV: ClassVar[str]
    DEFAULT_BASE_URL: ClassVar[str]
    PATH: ClassVar[str]
    END: ClassVar[str]  #: the event that ends a complete reply
    FINISH: ClassVar[Mapping[str, FinishReason]]
    DEFAULT_STOP: ClassVar[str]
    CALL_ID_PREFIX: ClassVar[str]

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
        cache: bool | CachePolicy = True,
    ) -> None:
        self.model = model
        #: the prompt-cache policy ``cache=`` stands for; ``None``: no cache hints are sent
        self.cache: CachePolicy | None = cache_policy(cache)
        self.name = name or f"{self.KIND}/{model}"
        self.base_url = (base_url or env(self.BASE_URL_ENV) or self.DEFAULT_BASE_URL).rstrip("/")
        self.pricing = dict(pricing or {})
        key = api_key_from(api_key, self.KEY_ENV)
        self._needs_key = key is None and self.base_url == self.DEFAULT_BASE_URL
        sent = {"Accept": "text/event-stream", "Content-Type": "application/json"}
        sent.update(self._key_headers(key))
        sent.update(headers or {})
        policy = retry or RetryPolicy()
        if max_retries is not None:
            policy = attrs.evolve(policy, max_retries=max_retries)
        #: the transcript's turns as sent last, per session (see ``_body_memo``)
        self._memos = BodyMemos()
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
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r})"

    @property
    def needs_key(self) -> bool:
        """True when there is no key and the endpoint is the public one, which needs one."""
        return self._needs_key

    def close(self) -> None:
        """Close pooled connections and forget the sessions' encoded turns (the provider
        still works afterwards)."""
        self._http.close()
        self._memos.clear()

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        """Stream the model's answer: text and tool-call deltas, then one ``ModelResponse``."""
        return self._http.guard(self._stream(request, signal))

    def _stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        if self._needs_key:
            raise ProviderError(
                None,
                f"{self.name}: no API key; pass api_key= or set {self.KEY_ENV}",
                retryable=False,
            )
        body = self._request_body(request)
        with self._http.stream(self.path(), body, signal, request.on_sent) as stream:
            reply = Reply(self.name, stream.request_id, output_tool=self.output_tool(request))
            yield from self._read(stream.events(), reply)
            if reply.done:
                stream.drain()
        if not reply.done:
            raise ProviderError(
                None,
                f"{self.name}: the event stream ended before {self.END}; the reply is incomplete",
                retryable=True,
                request_id=reply.request_id,
            )
        yield self._response(reply)

    def _response(self, reply: Reply) -> ModelResponse:
        calls = reply.tool_calls(self.CALL_ID_PREFIX, self._http.redact)
        finish = self.FINISH.get(reply.stop or self.DEFAULT_STOP, "stop")
        if calls and finish == "stop":  # some compatible servers say "stop" after tool calls
            finish = "tool_calls"
        counted = Usage(
            reply.input_tokens,
            reply.output_tokens,
            cache_read_tokens=reply.cache_read_tokens,
            cache_write_tokens=reply.cache_write_tokens,
            reasoning_tokens=reply.reasoning_tokens,
        )
        usage = price_usage(
            counted, self.model, self.pricing, cache_write_1h_tokens=reply.cache_write_1h_tokens
        )
        if reply.blocks.has_reasoning:  # reasoning keeps its place among text and calls
            parts, calls = reply.blocks.message_parts(
                dict(zip(sorted(reply.calls), calls, strict=True))
            )
            message = Message.assistant(parts, tool_calls=calls, usage=usage)
        else:
            message = Message.assistant("".join(reply.text), tool_calls=calls, usage=usage)
        return ModelResponse(message=message, usage=usage, finish_reason=finish, model=reply.model)

    # --- what a wire format gives ---------------------------------------------------

    def _key_headers(self, key: Secret | None) -> dict[str, str]:
        """The headers that carry ``key`` (and any the API always wants)."""
        raise NotImplementedError

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        raise NotImplementedError

    def encode_body(self, request: ModelRequest) -> bytes:
        """The body sent for ``request`` as UTF-8 JSON text: :meth:`build_body`'s, which a
        wire format may produce faster (reusing what it encoded for the session's
        previous call, see ``_body_memo``) but never different in meaning."""
        return self._http.encode(self.build_body(request))

    #: a wire format's ``encode_body`` when it is ``bytes(self._view(request))``: the body
    #: is then sent as that view (a subclass overriding ``encode_body`` has its own sent)
    _VIEWED: ClassVar[Callable[..., bytes] | None] = None

    def _request_body(self, request: ModelRequest) -> bytes | memoryview:
        """The body :meth:`_stream` sends: :meth:`encode_body`'s, or a view of the same
        bytes a wire format keeps for the session's next call (``_body_memo.write``)."""
        if type(self).encode_body is type(self)._VIEWED:
            return self._view(request)
        return self.encode_body(request)

    def _view(self, request: ModelRequest) -> bytes | memoryview:
        """:meth:`encode_body`'s bytes, as a view of the buffer the session's memo keeps
        (wire formats that set ``_VIEWED``)."""
        raise NotImplementedError

    def _read(self, events: Iterator[ServerSentEvent], reply: Reply) -> Iterator[ModelEvent]:
        """Turn events into deltas while filling ``reply``; return once ``reply.done``."""
        raise NotImplementedError

    def path(self) -> str:
        """Where requests go, after ``base_url`` (``PATH``, unless the wire's depends on more)."""
        return self.PATH

    def output_tool(self, request: ModelRequest) -> str | None:
        """The tool a wire forces for ``request.output_schema``, whose input is the answer
        (its ``_read`` gives that input as the message's text); None: no such tool."""
        return None
