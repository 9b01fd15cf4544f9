"""``AnthropicProvider``: the Messages API (``/v1/messages``), streamed over ``requests``."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ProviderError
from ..messages import Message, Part, ReasoningPart, TextPart, ToolCall
from ._body_memo import frame_of, opening
from ._breakpoints import mark_breakpoints, marked_turn
from ._http_provider import HttpOptions, HttpProvider, Reply
from ._reasoning import ReasoningBlock, replay_blocks
from ._redact import Secret
from ._sse import ServerSentEvent
from ._wire import image_base64, image_media_type, pick_settings, plain_json
from .base import FinishReason, ModelEvent, ModelRequest

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["OUTPUT_TOOL", "AnthropicProvider"]

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
#: the tool forced for a structured answer (``output_type``); its input is the answer
OUTPUT_TOOL = "final_output"
#: The family of the reasoning parts this provider makes and sends back.
FAMILY = "anthropic"

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


class AnthropicProvider(HttpProvider):
    """A Claude model through the Messages API (``POST {base_url}/v1/messages``, streamed).

    ``api_key`` defaults to ``ANTHROPIC_API_KEY``; ``base_url`` to
    ``ANTHROPIC_BASE_URL``, else the public endpoint, which needs a key.
    ``max_tokens`` caps each reply (the API requires a cap;
    ``settings["max_tokens"]`` overrides it per call). The other options are
    those of every HTTP provider: see :class:`~._http_provider.HttpProvider`.
    ``Usage.input_tokens`` is the API's ``input_tokens`` plus its cache reads
    and writes, which are also reported apart (``cache_read_tokens``,
    ``cache_write_tokens``) and priced at their own rates.

    A structured answer (``ModelRequest.output_schema``) is asked for with a tool,
    ``final_output``, whose input schema is the answer's and which the model must call
    (``tool_choice``: that tool, or any tool when the agent has tools of its own;
    left to the model when ``thinking`` is on, which allows no forced tool). Its input
    comes back as the message's text, streamed as text deltas.
    """

    KIND = "anthropic"
    KEY_ENV = "ANTHROPIC_API_KEY"
    BASE_URL_ENV = "ANTHROPIC_BASE_URL"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    PATH = "v1/messages"
    END = "message_stop"
    FINISH = _FINISH
    DEFAULT_STOP = "end_turn"
    CALL_ID_PREFIX = "toolu_"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        max_tokens: int = 4096,
        **options: Unpack[HttpOptions],
    ) -> None:
        super().__init__(model, api_key, base_url, **options)
        self.max_tokens = max_tokens

    def _key_headers(self, key: Secret | None) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if key:
            headers["x-api-key"] = key.reveal()
        return headers

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        messages, ends, _ = _messages(request.messages)
        body = self._frame(request, _system_texts(request.messages), messages)
        if self.cache is not None:
            mark_breakpoints(body, request.messages, ends, self.cache)
        return body

    def encode_body(self, request: ModelRequest) -> bytes:
        """:meth:`build_body`'s body as JSON text, encoding only the turns from the one
        before the previous call's end on (the cache marks are there) when the session's
        previous call sent the turns before it, and the frame (model, system, tools,
        settings) only when it changed (see ``_body_memo``)."""
        return bytes(self._view(request))

    _VIEWED = encode_body

    def _view(self, request: ModelRequest) -> bytes | memoryview:
        messages, encode = request.messages, self._http.encode
        head = self._memos.head(request.session_id, messages, _boundary(messages))
        start, memo = head.start, head.memo
        system: list[tuple[int, str]] = []
        if memo is not None:
            system += [(index, text) for index, text in memo.state if index < start]
        tail = messages[start:]
        system += [(start + n, m.text) for n, m in enumerate(tail) if m.role == "system" and m.text]
        turns, ends, firsts = _messages(tail)
        plain = [encode(turn) for turn in turns]  # kept without this call's marks
        texts = [text for _, text in system]
        parts = (
            self.model,
            self.max_tokens,
            self.cache,
            request.system,
            texts,
            request.tools,
            request.output_schema,
            dict(request.settings),
        )
        front: bytes | None = frame_of(memo, parts)
        if front is None:
            body = self._frame(request, texts, turns)
            if body["messages"] is not turns:  # an ``extra_body`` gave them: they win
                return encode(self.build_body(request))
            if self.cache is not None:
                mark_breakpoints(body, tail, ends, self.cache)
            del body["messages"]
            front = opening(encode, body, "messages")
        elif self.cache is not None:  # the frame's marks are in ``front``: the turns' now
            mark_breakpoints({"messages": turns}, tail, ends, self.cache)
        # this call's turns, marked: the plain text with each mark spliced in
        sent = b", ".join(
            [marked_turn(t, text, encode) for t, text in zip(turns, plain, strict=True)]
        )
        return self._memos.extend(
            request.session_id,
            head,
            messages,
            front,
            plain,
            [start + f for f in firsts],
            sent=(sent,),
            state=system,
            frame=(parts, front),
        )

    def _frame(
        self, request: ModelRequest, system: list[str], messages: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The body around the turns: model, system text, tools, settings."""
        system = [request.system, *system] if request.system else system
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "messages": messages,
            "stream": True,
        }
        if system:
            body["system"] = [{"type": "text", "text": "\n\n".join(system)}]
        if request.tools:
            body["tools"] = [
                {
                    "name": spec.name,
                    "description": spec.description,
                    "input_schema": plain_json(spec.parameters),
                }
                for spec in request.tools
            ]
        if request.output_schema is not None:
            self._ask_output(body, request)
        body.update(pick_settings(request.settings, SETTINGS, {"stop": "stop_sequences"}))
        return body

    def _ask_output(self, body: dict[str, Any], request: ModelRequest) -> None:
        """Add the forced ``final_output`` tool that carries the structured answer."""
        output = request.output_schema
        assert output is not None
        if any(spec.name == OUTPUT_TOOL for spec in request.tools):
            raise ProviderError(
                None,
                f"{self.name}: a tool is named {OUTPUT_TOOL!r}, the tool that carries a "
                "structured answer (output_type); rename it",
                retryable=False,
            )
        description = "Give your final answer by calling this tool; its input is the answer."
        if output.description:
            description += f" The answer: {output.description}"
        body.setdefault("tools", []).append(
            {
                "name": OUTPUT_TOOL,
                "description": description,
                "input_schema": plain_json(output.schema),
            }
        )
        thinking = request.settings.get("thinking")
        if isinstance(thinking, Mapping) and thinking.get("type") not in (None, "disabled"):
            return  # extended thinking allows no forced tool: the model is asked, not made
        only = {"type": "tool", "name": OUTPUT_TOOL}
        body["tool_choice"] = {"type": "any"} if request.tools else only

    def output_tool(self, request: ModelRequest) -> str | None:
        return OUTPUT_TOOL if request.output_schema is not None else None

    def _read(self, events: Iterator[ServerSentEvent], reply: Reply) -> Iterator[ModelEvent]:
        blocks: dict[int, tuple[str, int]] = {}  # content block index -> (type, call index)
        thinking: dict[int, ReasoningBlock] = {}  # content block index -> its reasoning
        for event in events:
            data = reply.json(event)
            kind = str(data.get("type") or event.event)
            if kind == "message_start":
                message = data.get("message") or {}
                if isinstance(message.get("model"), str):
                    reply.model = message["model"]
                _usage(reply, message.get("usage") or {})
            elif kind == "content_block_start":
                index = int(data.get("index", len(blocks)))
                block = data.get("content_block") or {}
                if block.get("type") in ("thinking", "redacted_thinking"):
                    blocks[index] = (str(block["type"]), -1)
                    yield from _start_thinking(reply, thinking, index, block)
                else:
                    yield from _start(reply, blocks, index, block)
            elif kind == "content_block_delta":
                index = int(data.get("index", 0))
                if index in thinking:
                    yield from _thinking_delta(reply, thinking[index], data)
                else:
                    yield from _delta(reply, blocks, index, data)
            elif kind == "message_delta":
                stop = (data.get("delta") or {}).get("stop_reason")
                if stop == "tool_use" and not reply.calls and reply.output_tool:
                    stop = "end_turn"  # only the answer's tool was called: the answer is final
                if stop:
                    reply.stop = str(stop)
                _usage(reply, data.get("usage") or {})
            elif kind == "message_stop":
                reply.done = True
                return
            elif kind == "error":
                error = data.get("error") or {}
                kind = str(error.get("type") or "error")
                message = error.get("message") or kind
                raise reply.stream_error(message, kind, _ERROR_STATUS.get(kind))
            # ping, content_block_stop and event types added later need nothing


def _usage(reply: Reply, usage: Mapping[str, Any]) -> None:
    # message_delta counts are cumulative: the last value seen wins. The API counts
    # input_tokens apart from cache reads and writes; Usage.input_tokens holds all three.
    if "input_tokens" in usage:
        read = _count(usage.get("cache_read_input_tokens"))
        write = _count(usage.get("cache_creation_input_tokens"))
        reply.input_tokens = _count(usage.get("input_tokens")) + read + write
        reply.cache_read_tokens = read
        reply.cache_write_tokens = write
        split = usage.get("cache_creation")
        if isinstance(split, Mapping):
            reply.cache_write_1h_tokens = min(_count(split.get("ephemeral_1h_input_tokens")), write)
    if "output_tokens" in usage:
        reply.output_tokens = _count(usage.get("output_tokens"))


def _count(value: object) -> int:
    """A token count from the wire; anything else (``null``, a string) counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _start(
    reply: Reply, blocks: dict[int, tuple[str, int]], index: int, block: Mapping[str, Any]
) -> Iterator[ModelEvent]:
    kind = str(block.get("type") or "")
    if kind == "tool_use" and reply.output_tool and block.get("name") == reply.output_tool:
        blocks[index] = ("output", -1)
        reply.text.clear()  # the answer is the tool's input, not a preamble before it
        given = block.get("input")
        if given:
            yield from reply.add_text(json.dumps(given))
        return
    if kind != "tool_use":
        blocks[index] = (kind, -1)
        if kind == "text":
            yield from reply.add_text(block.get("text"))
        return
    call_index = len(reply.calls)
    blocks[index] = (kind, call_index)
    given = block.get("input")  # servers that send the input whole rather than as deltas
    arguments = json.dumps(given) if given else ""
    yield reply.add_call(call_index, block.get("id"), block.get("name"), arguments)


def _start_thinking(
    reply: Reply, thinking: dict[int, ReasoningBlock], index: int, block: Mapping[str, Any]
) -> Iterator[ModelEvent]:
    """A ``thinking`` or ``redacted_thinking`` block starts: kept in its place, verbatim."""
    data = block.get("data")
    signature = block.get("signature")
    part = thinking[index] = reply.blocks.reasoning(
        FAMILY,
        signature=signature if isinstance(signature, str) and signature else None,
        data=data if block.get("type") == "redacted_thinking" and isinstance(data, str) else None,
    )
    yield from reply.blocks.add_reasoning_text(part, block.get("thinking"))


def _thinking_delta(
    reply: Reply, part: ReasoningBlock, data: Mapping[str, Any]
) -> Iterator[ModelEvent]:
    delta = data.get("delta") or {}
    if delta.get("type") == "thinking_delta":
        yield from reply.blocks.add_reasoning_text(part, delta.get("thinking"))
    elif delta.get("type") == "signature_delta":
        signature = delta.get("signature")
        if isinstance(signature, str):
            part.signature = (part.signature or "") + signature


def _delta(
    reply: Reply, blocks: dict[int, tuple[str, int]], index: int, data: Mapping[str, Any]
) -> Iterator[ModelEvent]:
    kind, call_index = blocks.setdefault(index, ("text", -1))
    delta = data.get("delta") or {}
    if delta.get("type") == "text_delta":
        yield from reply.add_text(delta.get("text"))
    elif delta.get("type") == "input_json_delta" and kind == "output":
        yield from reply.add_text(delta.get("partial_json"))
    elif delta.get("type") == "input_json_delta" and kind == "tool_use":
        fragment = delta.get("partial_json")
        if isinstance(fragment, str) and fragment:
            yield reply.add_call(call_index, arguments=fragment)
    # citation deltas are not part of the transcript (thinking ones go to _thinking_delta)


def _system_texts(messages: Iterable[Message]) -> list[str]:
    """The text of the system messages inside the transcript (they join the top-level
    system text)."""
    return [m.text for m in messages if m.role == "system" and m.text]


def _messages(
    messages: tuple[Message, ...],
) -> tuple[list[dict[str, Any]], dict[int, tuple[int, int]], list[int]]:
    """The transcript as Messages API turns (tool results go in user turns), where each
    message ended (message index -> (turn index, block index) of its last block) and
    the index of each turn's first message.

    Consecutive user-side messages (tool results, then maybe user text) merge
    into one user turn with the tool results first, as the API requires.
    """
    out: list[dict[str, Any]] = []
    ends: dict[int, tuple[int, int]] = {}
    firsts: list[int] = []
    for index, message in enumerate(messages):
        content, role = _turn_content(message)
        if not content:
            continue  # the API rejects empty turns (system text is sent apart)
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(content)
        else:
            out.append({"role": role, "content": content})
            firsts.append(index)
        ends[index] = (len(out) - 1, len(out[-1]["content"]) - 1)
    return out, ends, firsts


def _turn_content(message: Message) -> tuple[list[dict[str, Any]], str]:
    """A message's blocks and the role of the turn they go in (none for system text)."""
    if message.role == "system":
        return [], "system"  # sent as the top-level system text
    if message.role == "assistant":
        return _assistant_content(message), "assistant"
    if message.role == "tool":
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id,
            "content": _content(message.content) or message.text,
        }
        if message.is_error:
            result["is_error"] = True
        return [result], "user"
    return _content(message.content), "user"


def _boundary(messages: tuple[Message, ...]) -> int:
    """The first message a call's cache marks may fall on: the one the previous call
    ended with (see ``_breakpoints``), else the last (``len(messages)``: none yet)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            for before in range(index - 1, -1, -1):
                if _turn_content(messages[before])[0]:
                    return before
            break
    return len(messages)


def _assistant_content(message: Message) -> list[dict[str, Any]]:
    """An assistant turn's blocks in the order the model sent them: thinking (verbatim,
    signature and all; only what an Anthropic model made), text and tool use."""
    content: list[dict[str, Any]] = []
    for block in replay_blocks(message, FAMILY):
        if isinstance(block, ToolCall):
            content.append(
                {
                    "type": "tool_use",
                    "id": block.id,
                    "name": block.name,
                    "input": plain_json(block.arguments),
                }
            )
        elif isinstance(block, ReasoningPart):
            content.append(_thinking(block))
        else:
            content += _content((block,))
    return content


def _thinking(part: ReasoningPart) -> dict[str, Any]:
    if part.data is not None:
        return {"type": "redacted_thinking", "data": part.data}
    return {"type": "thinking", "thinking": part.text, "signature": part.signature or ""}


def _content(parts: Iterable[Part]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, ReasoningPart):
            continue  # only assistant turns carry reasoning back
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
