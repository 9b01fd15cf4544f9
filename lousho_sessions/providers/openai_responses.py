"""``OpenAIResponsesProvider``: OpenAI's Responses API (``POST /responses``), streamed.

Reasoning models carry their reasoning from one call of a turn to the next as
``reasoning`` items. With ``store=False`` (the default) nothing is kept at
OpenAI: the items come back encrypted (``include=["reasoning.encrypted_content"]``),
live in the transcript as ``ReasoningPart(provider="openai")`` and are sent
back byte for byte. With ``store=True`` a call continues the stored response
it follows (``previous_response_id``) and sends only the new items, falling
back to the whole transcript when that response is unknown or expired.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import attrs

from ..abort import AbortSignal
from ..errors import ProviderError
from ..messages import Message
from ._body_memo import Memo, opening, splice
from ._http_provider import HttpOptions, HttpProvider, Reply
from ._redact import Secret
from ._responses_items import (
    FAMILY,
    ContextHash,
    context_digest,
    input_items,
    message_items,
    reasoning_extra,
)
from ._sse import ServerSentEvent
from ._structured import json_schema_format
from ._wire import pick_settings, plain_json
from .base import FinishReason, ModelEvent, ModelRequest, ModelResponse

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["OpenAIResponsesProvider"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

#: ``ModelRequest.settings`` keys sent as request-body fields (``max_tokens`` becomes
#: ``max_output_tokens``; ``reasoning_effort`` becomes ``reasoning.effort``).
SETTINGS = (
    "temperature",
    "top_p",
    "max_output_tokens",
    "max_tool_calls",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "truncation",
    "metadata",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
    "top_logprobs",
    "include",
    "user",
)

#: the message ``extra`` keys a stored response is remembered by
RESPONSE_ID = "openai_response_id"
CONTEXT = "openai_context"

_FINISH: Mapping[str, FinishReason] = {
    "completed": "stop",
    "max_output_tokens": "length",
    "content_filter": "stop",
}

_INCLUDE = ["reasoning.encrypted_content"]


@attrs.define
class _Output:
    """What the stream told beyond a ``Reply``: items by ``output_index``, the response's id."""

    calls: dict[int, int] = attrs.field(factory=dict)  # output index -> call index
    reasoning: dict[int, Any] = attrs.field(factory=dict)  # output index -> reasoning block
    texted: set[int] = attrs.field(factory=set)  # output indexes whose text streamed
    response_id: str | None = None


class OpenAIResponsesProvider(HttpProvider):
    """An OpenAI model through the Responses API (``POST {base_url}/responses``, streamed).

    ``store=False`` (the default) keeps nothing at OpenAI: reasoning comes back
    encrypted and round-trips through the transcript. ``store=True`` lets
    OpenAI keep each response and continues it with ``previous_response_id``,
    sending only what is new (the whole transcript again when the stored
    response is unknown, expired or no longer matches the transcript).
    ``reasoning`` (e.g. ``{"effort": "medium", "summary": "auto"}``) is sent
    with every call; ``settings["reasoning"]`` overrides it per call.

    ``api_key`` defaults to ``OPENAI_API_KEY``; ``base_url`` to
    ``OPENAI_BASE_URL``, else the public endpoint. The other options are those
    of every HTTP provider: see :class:`~._http_provider.HttpProvider`.
    """

    KIND = "openai"
    KEY_ENV = "OPENAI_API_KEY"
    BASE_URL_ENV = "OPENAI_BASE_URL"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    PATH = "responses"
    END = "response.completed"
    FINISH = _FINISH
    DEFAULT_STOP = "completed"
    CALL_ID_PREFIX = "call_"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        store: bool = False,
        reasoning: Mapping[str, Any] | None = None,
        **options: Unpack[HttpOptions],
    ) -> None:
        super().__init__(model, api_key, base_url, **options)
        self.store = store
        self.reasoning = dict(reasoning) if reasoning else None

    def _key_headers(self, key: Secret | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {key.reveal()}"} if key else {}

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request`` (continuing a stored response when it can)."""
        return self._body(request, continuation=True)

    def _body(self, request: ModelRequest, *, continuation: bool) -> dict[str, Any]:
        per_message = [message_items(m, store=self.store) for m in request.messages]
        body: dict[str, Any] = {"model": self.model}
        if request.system:
            body["instructions"] = request.system
        start = self._continues(request.messages, per_message) if continuation else None
        if start is not None:
            previous, index = start
            body["previous_response_id"] = previous
            body["input"] = [item for items in per_message[index + 1 :] for item in items]
        else:
            body["input"] = [item for items in per_message for item in items]
        return self._frame(request, body)

    def encode_body(self, request: ModelRequest) -> bytes:
        """The body sent for ``request`` as JSON text: :meth:`build_body`'s, encoding only
        the messages the session's previous call did not send (see ``_body_memo``)."""
        return bytes(self._view(request))

    _VIEWED = encode_body

    def _view(self, request: ModelRequest) -> bytes | memoryview:
        return self._encode(request, continuation=True).data

    def _encode(self, request: ModelRequest, *, continuation: bool) -> _Encoded:
        """The body for ``request`` as JSON text, from the session's memo.

        With ``store=True`` the memo also keeps the context hash of its messages (what
        a stored response saw is checked, and a new one's recorded, by hashing only the
        new messages' items) and what that check found for its last assistant message.
        """
        encode = self._http.encode
        body: dict[str, Any] = {"model": self.model}
        if request.system:
            body["instructions"] = request.system
        body = self._frame(request, body)
        if "input" in body:  # (an ``extra_body`` input wins, as in build_body)
            whole = self._body(request, continuation=continuation)
            return _Encoded(encode(whole), None, "previous_response_id" in whole)
        messages = request.messages
        head = self._memos.head(request.session_id, messages, len(messages))
        memo = head.memo
        new = [message_items(m, store=self.store) for m in messages[head.start :]]
        items = [b",".join([encode(item) for item in m]) for m in new]  # b"": no item
        if not self.store:  # the whole transcript every call: in the session's buffer
            front = opening(encode, body, "input")
            firsts = range(head.start, len(messages))  # a turn a message
            view = self._memos.extend(
                request.session_id, head, messages, front, items, firsts, by_value=True
            )
            return _Encoded(view, None, False)
        # store=True: only what follows the response a stored one saw is sent
        kept = (len(memo.messages), memo.state) if memo is not None else None
        seen = _seen(messages, new, head.start, kept)
        every = head.turns + items
        turns = every
        if continuation and seen.previous is not None and seen.last < len(messages) - 1:
            body.setdefault("previous_response_id", seen.previous)
            turns = every[seen.last + 1 :]
        data = splice(encode, body, "input", turns, gaps=True)
        self._memos.keep(
            request.session_id, Memo(messages, every, list(range(len(messages))), seen)
        )
        return _Encoded(data, seen.hash, "previous_response_id" in body)

    def _frame(self, request: ModelRequest, body: dict[str, Any]) -> dict[str, Any]:
        """``body`` with what follows the input: stream, store, tools, reasoning, settings."""
        body.update(stream=True, store=self.store, include=list(_INCLUDE))
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": spec.name,
                    "description": spec.description,
                    "parameters": plain_json(spec.parameters),
                    "strict": False,
                }
                for spec in request.tools
            ]
        if self.reasoning:
            body["reasoning"] = plain_json(self.reasoning)
        policy = self.cache
        if policy is not None:  # OpenAI caches prefixes itself: the key only routes the call
            key = policy.key or request.session_id
            if key:
                body["prompt_cache_key"] = key
            if policy.retention:
                body["prompt_cache_retention"] = policy.retention
        settings = dict(request.settings)
        effort = settings.pop("reasoning_effort", None)
        body.update(pick_settings(settings, SETTINGS, {"max_tokens": "max_output_tokens"}))
        if effort is not None:
            body["reasoning"] = {**body.get("reasoning", {}), "effort": effort}
        if request.output_schema is not None:
            # a ``text.format`` given in settings wins; other ``text`` options are kept
            text = body.get("text")
            text = dict(text) if isinstance(text, Mapping) else {}
            text.setdefault(
                "format", {"type": "json_schema", **json_schema_format(request.output_schema)}
            )
            body["text"] = text
        return body

    def _continues(
        self, messages: tuple[Message, ...], per_message: list[list[dict[str, Any]]]
    ) -> tuple[str, int] | None:
        """The stored response the call can continue and the index of its message, or ``None``.

        Only the last assistant message counts, and only while the transcript up
        to it is the one the response saw (a rewind, an edit or a compaction
        before it sends everything again), with something new after it.
        """
        if not self.store:
            return None
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if message.role != "assistant":
                continue
            previous = message.extra.get(RESPONSE_ID)
            digest = message.extra.get(CONTEXT)
            if not isinstance(previous, str) or index == len(messages) - 1:
                return None
            seen = [item for items in per_message[: index + 1] for item in items]
            return (previous, index) if digest == context_digest(seen) else None
        return None

    def _stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        if self._needs_key:
            raise ProviderError(
                None,
                f"{self.name}: no API key; pass api_key= or set {self.KEY_ENV}",
                retryable=False,
            )
        first = self._encode(request, continuation=True)
        try:
            yield from self._call(request, first, signal)
        except ProviderError as exc:
            if not first.continues or not _not_found(exc):
                raise
            # the stored response is gone (expired, deleted, another project): send it all
            yield from self._call(request, self._encode(request, continuation=False), signal)

    def _call(
        self, request: ModelRequest, body: _Encoded, signal: AbortSignal
    ) -> Iterator[ModelEvent]:
        output = _Output()
        with self._http.stream(self.PATH, body.data, signal, request.on_sent) as stream:
            reply = Reply(self.name, stream.request_id)
            yield from _read(stream.events(), reply, output)
            if reply.done:
                stream.drain()
        if not reply.done:
            raise ProviderError(
                None,
                f"{self.name}: the event stream ended before {self.END}; the reply is incomplete",
                retryable=True,
                request_id=reply.request_id,
            )
        yield self._finish(request, reply, output, body.seen)

    def _finish(
        self, request: ModelRequest, reply: Reply, output: _Output, seen: ContextHash | None
    ) -> ModelResponse:
        response = self._response(reply)
        message = response.message
        if self.store and output.response_id:
            message = stamp(message, output.response_id, request.messages, seen)
        return attrs.evolve(response, message=message)


def stamp(
    message: Message, response_id: str, sent: tuple[Message, ...], seen: ContextHash | None
) -> Message:
    """``message`` (a stored response) with its id and the digest of what it saw: the
    items of ``sent`` (``seen``: their context hash, when the body's memo had it) and its own."""
    if seen is None:
        digest = context_digest(input_items((*sent, message), store=True))
    else:
        context = seen.copy()
        context.add(message_items(message, store=True))
        digest = context.digest()
    return attrs.evolve(message, extra={**message.extra, RESPONSE_ID: response_id, CONTEXT: digest})


@attrs.frozen
class _Encoded:
    """A request body as JSON text; ``seen``: the context hash of the request's messages
    (``store=True``); ``continues``: it names a ``previous_response_id``."""

    data: bytes | memoryview
    seen: ContextHash | None
    continues: bool


@attrs.frozen
class _Seen:
    """What a ``store=True`` memo keeps beyond its turns: the context hash of its
    messages' items, the index of its last assistant message (-1: none) and that
    message's response id when the call can continue it (its digest matches)."""

    hash: ContextHash
    last: int
    previous: str | None


def _seen(
    messages: tuple[Message, ...],
    new: list[list[dict[str, Any]]],
    start: int,
    kept: tuple[int, _Seen] | None,
) -> _Seen:
    """What ``_continues`` finds for ``messages``, hashing only what the memo did not.

    ``new`` holds the items of ``messages[start:]``; ``kept``: the memo's message count
    and what it kept (``None``: no memo, so ``start`` is 0 and every message is hashed).
    """
    known, context, last, previous = 0, ContextHash(), -1, None
    if kept is not None:
        known, seen = kept
        context, last, previous = seen.hash.copy(), seen.last, seen.previous
    for index in range(known, len(messages)):
        context.add(new[index - start])
        message = messages[index]
        if message.role == "assistant":
            last, previous = index, message.extra.get(RESPONSE_ID)
            if not isinstance(previous, str) or message.extra.get(CONTEXT) != context.digest():
                previous = None
    return _Seen(context, last, previous)


def _not_found(exc: ProviderError) -> bool:
    text = exc.message.lower()
    return exc.status in (400, 404) and ("previous_response" in text or "previous response" in text)


def _read(events: Iterator[ServerSentEvent], reply: Reply, output: _Output) -> Iterator[ModelEvent]:
    for event in events:
        data = reply.json(event)
        kind = str(data.get("type") or event.event)
        index = data.get("output_index")
        index = index if isinstance(index, int) else -1
        if kind == "response.output_text.delta":
            output.texted.add(index)
            yield from reply.add_text(data.get("delta"))
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            yield from reply.blocks.add_reasoning_text(
                _block(reply, output, index), data.get("delta")
            )
        elif kind == "response.reasoning_summary_part.added" and data.get("summary_index"):
            # the visible text joins the summary's parts as the completed part does
            yield from reply.blocks.add_reasoning_text(_block(reply, output, index), "\n\n")
        elif kind == "response.function_call_arguments.delta":
            fragment = data.get("delta")
            if index in output.calls and isinstance(fragment, str) and fragment:
                yield reply.add_call(output.calls[index], arguments=fragment)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = data.get("item")
            if isinstance(item, Mapping):
                yield from _item(reply, output, index, item, done=kind.endswith("done"))
        elif kind in ("response.created", "response.in_progress"):
            _facts(reply, output, data.get("response") or {})
        elif kind in ("response.completed", "response.incomplete"):
            _facts(reply, output, data.get("response") or {})
            reply.done = True
            return
        elif kind == "response.failed":
            error = (data.get("response") or {}).get("error") or {}
            code = str(error.get("code") or "server_error")
            raise reply.stream_error(error.get("message") or code, code, None)
        elif kind == "error":
            code = str(data.get("code") or data.get("type") or "error")
            raise reply.stream_error(data.get("message") or code, code, None)
        # text.done, content parts, refusal deltas and event types added later need
        # nothing: the completed items carry what is kept


def _block(reply: Reply, output: _Output, index: int) -> Any:
    block = output.reasoning.get(index)
    if block is None:
        block = output.reasoning[index] = reply.blocks.reasoning(FAMILY)
    return block


def _item(
    reply: Reply, output: _Output, index: int, item: Mapping[str, Any], *, done: bool
) -> Iterator[ModelEvent]:
    kind = item.get("type")
    if kind == "reasoning":
        block = _block(reply, output, index)
        if isinstance(item.get("id"), str):
            block.id = item["id"]
        if done:  # the completed item is the one to keep: ``added`` may hold a partial one
            data = item.get("encrypted_content")
            block.data = data if isinstance(data, str) else None
            text, extra = reasoning_extra(item)
            block.text[:] = [text] if text else []
            block.extra.update(extra)
    elif kind == "function_call":
        if index not in output.calls:
            output.calls[index] = len(output.calls)
            arguments = item.get("arguments") if done else ""
            yield reply.add_call(
                output.calls[index],
                item.get("call_id"),
                item.get("name"),
                arguments if isinstance(arguments, str) else "",
            )
    elif kind == "message" and done and index not in output.texted:
        for content in item.get("content") or ():  # a reply whose text did not stream
            if isinstance(content, Mapping):
                yield from reply.add_text(content.get("text") or content.get("refusal"))


def _facts(reply: Reply, output: _Output, response: Mapping[str, Any]) -> None:
    if isinstance(response.get("id"), str):
        output.response_id = response["id"]
    if isinstance(response.get("model"), str):
        reply.model = response["model"]
    status = response.get("status")
    if status == "incomplete":
        reason = (response.get("incomplete_details") or {}).get("reason")
        reply.stop = str(reason or "max_output_tokens")
    elif status == "completed":
        reply.stop = "completed"
    usage = response.get("usage")
    if isinstance(usage, Mapping):
        reply.input_tokens = int(usage.get("input_tokens") or 0)
        reply.output_tokens = int(usage.get("output_tokens") or 0)
        details = usage.get("input_tokens_details") or {}
        reply.cache_read_tokens = int(details.get("cached_tokens") or 0)
        reply.cache_write_tokens = int(details.get("cache_write_tokens") or 0)
        # input_tokens includes the cached ones, output_tokens the reasoning ones, as Usage does
        out_details = usage.get("output_tokens_details") or {}
        reply.reasoning_tokens = int(out_details.get("reasoning_tokens") or 0)
