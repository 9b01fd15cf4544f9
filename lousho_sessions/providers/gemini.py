"""``GeminiProvider``: the Gemini API's ``streamGenerateContent``, streamed over ``requests``."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import attrs

from ..errors import ProviderError
from ..messages import Part, ReasoningPart, TextPart, ToolCall
from ._body_memo import opening
from ._gemini_contents import (
    FAMILY,
    SIGNATURE_KEY,
    Names,
    call_names,
    contents,
    sign_foreign_calls,
    turns,
)
from ._gemini_schema import declaration, openapi_schema
from ._http_provider import HttpOptions, HttpProvider, Reply
from ._reasoning import AFTER_PARTS
from ._redact import Secret
from ._sse import ServerSentEvent
from ._wire import env, pick_settings, plain_json
from .base import FinishReason, ModelEvent, ModelReasoningDelta, ModelRequest, ModelResponse

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["GeminiProvider", "thinking_config"]

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com"

#: ``ModelRequest.settings`` keys sent in ``generationConfig`` (our name -> the API's).
GENERATION_SETTINGS = {
    "temperature": "temperature",
    "top_p": "topP",
    "topP": "topP",
    "top_k": "topK",
    "topK": "topK",
    "max_tokens": "maxOutputTokens",
    "max_output_tokens": "maxOutputTokens",
    "maxOutputTokens": "maxOutputTokens",
    "stop": "stopSequences",
    "stop_sequences": "stopSequences",
    "stopSequences": "stopSequences",
    "seed": "seed",
    "presence_penalty": "presencePenalty",
    "presencePenalty": "presencePenalty",
    "frequency_penalty": "frequencyPenalty",
    "frequencyPenalty": "frequencyPenalty",
    "response_mime_type": "responseMimeType",
    "responseMimeType": "responseMimeType",
    "media_resolution": "mediaResolution",
    "mediaResolution": "mediaResolution",
}
#: ``ModelRequest.settings`` keys sent as request-body fields (our name -> the API's).
BODY_SETTINGS = {
    "safety_settings": "safetySettings",
    "safetySettings": "safetySettings",
    "tool_config": "toolConfig",
    "toolConfig": "toolConfig",
    "cached_content": "cachedContent",
    "cachedContent": "cachedContent",
}

_FINISH: Mapping[str, FinishReason] = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "FINISH_REASON_UNSPECIFIED": "stop",
}
#: Finish reasons that mean the answer was withheld: with nothing said, they are errors.
_BLOCKED = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "LANGUAGE",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
    }
)
#: Finish reasons of a call the model got wrong: trying again may help.
_BAD_CALL = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS"})
#: ``google.rpc`` status names and the HTTP status each stands for (errors inside a stream).
_STATUS: Mapping[str, int] = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
_OLD_MODELS = re.compile(r"^(models/)?gemini-(1|2)[.-]")


class GeminiProvider(HttpProvider):
    """A Gemini model through the Gemini API (``POST {base_url}/v1beta/models/{model}:
    streamGenerateContent?alt=sse``).

    ``api_key`` defaults to ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY`` (the latter wins
    when both are set, as in Google's own SDK); it is sent in the ``x-goog-api-key``
    header. ``base_url`` defaults to ``GOOGLE_GEMINI_BASE_URL``, else the public
    endpoint, which needs a key; a base URL that ends with an API version
    (``.../v1beta``) is used as it is. ``model`` is the model's name
    (``"gemini-2.5-flash"``; a leading ``models/`` is allowed). The other options are
    those of every HTTP provider: see :class:`~._http_provider.HttpProvider`.

    ``settings`` go into ``generationConfig`` (``temperature``, ``top_p``, ``top_k``,
    ``max_tokens``, ``stop``, ``seed``, ...) or the body (``safety_settings``,
    ``tool_config``, ``cached_content``); ``tool_choice`` (``"auto"``, ``"required"``,
    ``"none"`` or a tool's name) becomes ``toolConfig``; ``thinking`` becomes
    ``thinkingConfig`` (see :func:`thinking_config`); ``extra_body`` is merged in.

    Thought parts come back as ``ReasoningPart(provider="gemini")`` (their text streamed
    as reasoning deltas) and every ``thoughtSignature`` is kept on the part it came with
    and sent back there (see ``_gemini_contents``). ``Usage.input_tokens`` is the prompt
    (cached tokens included, also reported as ``cache_read_tokens``: Gemini caches
    implicitly); ``output_tokens`` counts the answer and the thinking
    (``reasoning_tokens``). A structured answer uses ``responseMimeType:
    "application/json"`` with ``responseSchema`` (``responseJsonSchema`` when the schema
    does not fit the API's subset).
    """

    KIND = "gemini"
    KEY_ENV = "GEMINI_API_KEY"
    BASE_URL_ENV = "GOOGLE_GEMINI_BASE_URL"
    DEFAULT_BASE_URL = DEFAULT_BASE_URL
    PATH = "v1beta/models/{model}:streamGenerateContent?alt=sse"
    END = "a candidate's finishReason"
    FINISH = _FINISH
    DEFAULT_STOP = "STOP"
    CALL_ID_PREFIX = "call_"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        **options: Unpack[HttpOptions],
    ) -> None:
        if api_key is None and env("GOOGLE_API_KEY"):
            api_key = os.environ["GOOGLE_API_KEY"]
        super().__init__(model.removeprefix("models/"), api_key, base_url, **options)

    def _key_headers(self, key: Secret | None) -> dict[str, str]:
        return {"x-goog-api-key": key.reveal()} if key else {}

    def path(self) -> str:
        path = self.PATH.format(model=quote(self.model, safe=""))
        if re.search(r"/v1(alpha|beta)?\d*$", self.base_url):
            return path.split("/", 1)[1]  # the base URL names the version already
        return path

    @property
    def _checks_signatures(self) -> bool:
        """Gemini 3 and later refuse unsigned calls in the current turn."""
        return not _OLD_MODELS.match(self.model)

    def build_body(self, request: ModelRequest) -> dict[str, Any]:
        """The JSON body sent for ``request``."""
        body: dict[str, Any] = {
            "contents": contents(request.messages, placeholder=self._checks_signatures)
        }
        system = [m.text for m in request.messages if m.role == "system" and m.text]
        return self._frame(request, body, system)

    def encode_body(self, request: ModelRequest) -> bytes:
        """:meth:`build_body`'s body as JSON text, encoding only the last turn the
        session's previous call sent and the turns after it (see ``_body_memo``).

        The turns reused are kept as they were sent: with the signature placeholder on
        the unsigned calls of the current turn, and their form without it beside them
        (``Names.plain``) for the call whose new messages start a user turn.
        """
        return bytes(self._view(request))

    _VIEWED = encode_body

    def _view(self, request: ModelRequest) -> bytes | memoryview:
        messages, encode = request.messages, self._http.encode
        head = self._memos.head(request.session_id, messages, len(messages))
        memo = head.memo
        state: Names = memo.state if memo is not None else Names([], {}, frozenset())
        new = messages[len(memo.messages) :] if memo is not None else messages
        names = state.names_with(new)
        if names is None:  # a call of a new message renames a result sent before
            names, head = call_names(messages), attrs.evolve(head, start=0, count=0)
        start, count = head.start, head.count
        tail = messages[start:]
        out, firsts = turns(tail, names)
        plain = [encode(turn) for turn in out]
        sent = list(plain)
        # the memo's turns as this call sends them (it is this call's own: BodyMemos.head)
        kept: list[bytes] = [] if memo is None else memo.turns
        placeholders, same = state.reuse(kept, count, new)
        if self._checks_signatures:
            for n in sign_foreign_calls(out):
                sent[n] = encode(out[n])
                placeholders[count + n] = plain[n]
        system = [(i, text) for i, text in state.system if i < start]
        system += [(start + n, m.text) for n, m in enumerate(tail) if m.role == "system" and m.text]
        body = self._frame(request, {}, [text for _, text in system])
        if "contents" in body:  # an ``extra_body`` gave them: they win
            return encode(self.build_body(request))
        answered = state.answered | {m.tool_call_id for m in new if m.role == "tool"}
        return self._memos.extend(
            request.session_id,
            head,
            messages,
            opening(encode, body, "contents"),
            sent,
            [start + first for first in firsts],
            state=Names(system, names, answered, placeholders),
            same=same,
            by_value=True,
        )

    def _frame(
        self, request: ModelRequest, body: dict[str, Any], system: list[str]
    ) -> dict[str, Any]:
        """``body`` with what goes around the contents: system text, tools, settings."""
        system = [request.system, *system] if request.system else system
        config: dict[str, Any] = {}
        if request.tools:
            body["tools"] = [{"functionDeclarations": [declaration(s) for s in request.tools]}]
        if request.output_schema is not None:
            output = request.output_schema
            if request.tools and _OLD_MODELS.match(self.model):
                # before Gemini 3 a JSON answer cannot be combined with function calling:
                # the schema is asked for in words and the answer checked as usual
                schema = json.dumps(plain_json(output.schema), ensure_ascii=False)
                system.append(f"Give your final answer as JSON only, of this schema: {schema}")
            else:
                config["responseMimeType"] = "application/json"
                converted = openapi_schema(output.schema)
                if converted is not None:
                    config["responseSchema"] = converted
                else:
                    config["responseJsonSchema"] = plain_json(output.schema)
        if system:
            body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        settings = request.settings
        for key, value in settings.items():
            if value is None:
                continue
            if key in GENERATION_SETTINGS:
                name = GENERATION_SETTINGS[key]
                config[name] = (
                    [value] if name == "stopSequences" and isinstance(value, str) else value
                )
            elif key in BODY_SETTINGS:
                body[BODY_SETTINGS[key]] = plain_json(value)
        given = settings.get("generation_config") or settings.get("generationConfig")
        if isinstance(given, Mapping):
            config.update(plain_json(given))
        thinking = settings.get("thinking")
        if thinking is not None:
            config["thinkingConfig"] = thinking_config(thinking)
        if config:
            body["generationConfig"] = config
        choice = settings.get("tool_choice")
        if choice is not None and "toolConfig" not in body:
            body["toolConfig"] = _tool_config(choice)
        body.update(pick_settings(settings, ()))  # extra_body
        return body

    def _read(self, events: Iterator[ServerSentEvent], reply: Reply) -> Iterator[ModelEvent]:
        parts = _Parts()
        reply.wire = parts
        for event in events:
            data = reply.json(event)
            error = data.get("error")
            if isinstance(error, Mapping):
                status = str(error.get("status") or "")
                code = error.get("code")
                number = code if isinstance(code, int) else _STATUS.get(status)
                raise reply.stream_error(error.get("message") or status, status, number)
            if isinstance(data.get("modelVersion"), str):
                reply.model = data["modelVersion"]
            usage = data.get("usageMetadata")
            if isinstance(usage, Mapping):
                _usage(reply, usage)
            candidates = data.get("candidates") or ()
            feedback = data.get("promptFeedback")
            if not candidates and isinstance(feedback, Mapping) and feedback.get("blockReason"):
                raise ProviderError(
                    None,
                    f"{reply.provider}: the prompt was blocked ({feedback['blockReason']})",
                    retryable=False,
                    request_id=reply.request_id,
                )
            for candidate in candidates:
                if not isinstance(candidate, Mapping) or candidate.get("index", 0) != 0:
                    continue
                content = candidate.get("content") or {}
                for part in content.get("parts") or ():
                    if isinstance(part, Mapping):
                        yield from parts.add(reply, part)
                finish = candidate.get("finishReason")
                if isinstance(finish, str) and finish:
                    reply.stop = finish
                    _check_finish(reply, parts, finish, candidate.get("finishMessage"))
            if reply.stop is not None:
                # the chunk with the finish reason is the last (its usage is the total): a
                # server that keeps the body open after it must not hold the call
                break
        reply.done = reply.stop is not None

    def _response(self, reply: Reply) -> ModelResponse:
        response = super()._response(reply)
        parts: _Parts = reply.wire
        content, calls = parts.message(response.message.tool_calls)
        message = attrs.evolve(response.message, content=tuple(content), tool_calls=tuple(calls))
        return attrs.evolve(response, message=message)


def thinking_config(value: object) -> dict[str, Any]:
    """``settings["thinking"]`` as Gemini's ``thinkingConfig``.

    ``True`` shows thought summaries; ``False`` turns thinking off (budget 0). A mapping
    may use the API's names (``includeThoughts``, ``thinkingBudget``, ``thinkingLevel``),
    snake case ones (``include_thoughts``, ``budget``/``thinking_budget``,
    ``level``/``thinking_level``) or Anthropic's form (``{"type": "enabled",
    "budget_tokens": n}``, ``{"type": "disabled"}``); thoughts are shown unless
    ``include_thoughts`` is false.
    """
    if value is True:
        return {"includeThoughts": True}
    if value is False:
        return {"thinkingBudget": 0}
    if not isinstance(value, Mapping):
        raise ProviderError(
            None,
            f"gemini: settings['thinking'] must be True, False or a mapping, not {value!r}",
            retryable=False,
        )
    if value.get("type") == "disabled":
        return {"thinkingBudget": 0}
    out: dict[str, Any] = {}
    for keys, name in (
        (("includeThoughts", "include_thoughts"), "includeThoughts"),
        (("thinkingBudget", "thinking_budget", "budget", "budget_tokens"), "thinkingBudget"),
        (("thinkingLevel", "thinking_level", "level"), "thinkingLevel"),
    ):
        for key in keys:
            if value.get(key) is not None:
                out[name] = value[key]
                break
    out.setdefault("includeThoughts", True)
    return out


def _tool_config(choice: object) -> dict[str, Any]:
    modes = {"auto": "AUTO", "required": "ANY", "any": "ANY", "none": "NONE"}
    if isinstance(choice, str) and choice.lower() in modes:
        return {"functionCallingConfig": {"mode": modes[choice.lower()]}}
    if isinstance(choice, Mapping):
        kind = choice.get("type")
        if kind in ("auto", "any", "none") and not choice.get("name"):  # Anthropic's form
            return _tool_config(kind)
        # {"name": ...}, Anthropic's {"type": "tool", "name": ...} or OpenAI's "function"
        name = choice.get("name") or (choice.get("function") or {}).get("name")
    else:
        name = choice
    return {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [str(name)]}}


def _usage(reply: Reply, usage: Mapping[str, Any]) -> None:
    # every chunk carries the counts so far: the last one wins
    def count(key: str) -> int:
        value = usage.get(key)
        return value if isinstance(value, int) else 0

    thoughts = count("thoughtsTokenCount")
    reply.input_tokens = count("promptTokenCount") + count("toolUsePromptTokenCount")
    reply.cache_read_tokens = count("cachedContentTokenCount")
    reply.output_tokens = count("candidatesTokenCount") + thoughts
    reply.reasoning_tokens = thoughts


def _check_finish(reply: Reply, parts: _Parts, finish: str, message: object) -> None:
    said = f": {message}" if isinstance(message, str) and message else ""
    if finish in _BAD_CALL:
        raise ProviderError(
            None,
            f"{reply.provider}: the model ended with {finish}{said}",
            retryable=True,
            request_id=reply.request_id,
        )
    if finish in _BLOCKED and parts.empty:
        raise ProviderError(
            None,
            f"{reply.provider}: the answer was withheld ({finish}){said}",
            retryable=False,
            request_id=reply.request_id,
        )


@attrs.define
class _Run:
    """One part of the reply as it will be kept: text, thought, bare signature or call."""

    kind: str
    text: list[str] = attrs.field(factory=list)
    signature: str | None = None
    closed: bool = False
    index: int = -1


@attrs.define
class _Parts:
    """The reply's parts in order. Streamed text chunks join the run before them until a
    chunk carries a signature, which closes the run: each signature stays on its part."""

    runs: list[_Run] = attrs.field(factory=list)

    @property
    def empty(self) -> bool:
        return not any(run.kind == "call" or "".join(run.text) for run in self.runs)

    def add(self, reply: Reply, part: Mapping[str, Any]) -> Iterator[ModelEvent]:
        signature = part.get("thoughtSignature")
        signature = signature if isinstance(signature, str) and signature else None
        call = part.get("functionCall")
        if isinstance(call, Mapping):
            index = len(reply.calls)
            arguments = json.dumps(plain_json(call.get("args") or {}), ensure_ascii=False)
            self.runs.append(_Run("call", signature=signature, closed=True, index=index))
            yield reply.add_call(index, call.get("id"), call.get("name"), arguments)
            return
        text = part.get("text")
        if not isinstance(text, str):
            return  # parts we do not keep (executable code and the like)
        if part.get("thought"):
            run = self._open("thought")
            run.text.append(text)
            if text:
                yield ModelReasoningDelta(text)
        elif not text and signature:
            self.runs.append(_Run("signature", signature=signature, closed=True))
            return
        else:
            run = self._open("text")
            run.text.append(text)
            yield from reply.add_text(text)
        if signature:
            run.signature, run.closed = signature, True

    def _open(self, kind: str) -> _Run:
        last = self.runs[-1] if self.runs else None
        if last is not None and last.kind == kind and not last.closed:
            return last
        run = _Run(kind)
        self.runs.append(run)
        return run

    def message(self, calls: tuple[ToolCall, ...]) -> tuple[list[Part], list[ToolCall]]:
        """The content parts and the calls (``calls`` in index order) with their signatures."""
        content: list[Part] = []
        placed: list[tuple[int, ToolCall]] = []
        for run in self.runs:
            text = "".join(run.text)
            if run.kind == "call":
                call = calls[run.index]
                if run.signature:
                    call = attrs.evolve(call, extra={**call.extra, SIGNATURE_KEY: run.signature})
                placed.append((len(content), call))
            elif run.kind == "thought":
                content.append(ReasoningPart(text, FAMILY, run.signature))
            elif run.kind == "signature":
                content.append(ReasoningPart("", FAMILY, run.signature, extra={"thought": False}))
            elif text or run.signature:
                extra = {SIGNATURE_KEY: run.signature} if run.signature else {}
                content.append(TextPart(text, extra=extra))
        out = [
            attrs.evolve(call, extra={**call.extra, AFTER_PARTS: position})
            if position < len(content)
            else call
            for position, call in placed
        ]
        return content, out
