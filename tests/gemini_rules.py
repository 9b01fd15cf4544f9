"""The Gemini API on the loopback server, applying the rules Google applies to thought signatures.

``ProviderServer(rules=GeminiRules())`` answers ``POST /v1beta/models/{model}:
streamGenerateContent?alt=sse``. Each request body is first checked against the
``google-genai`` package's own types (``Content``, ``Tool``, ``ToolConfig``,
``GenerationConfig``, ``SafetySetting``; unknown keys refused: the package's models
forbid extra fields), then the conversation rules, answered ``400 INVALID_ARGUMENT``
in the Google error shape with the API's words:

- in the current turn (the model turns after the last user turn with something other
  than function responses) the first ``functionCall`` part of each model turn must carry
  its ``thoughtSignature`` ("Function call is missing a thought_signature in
  functionCall parts. ..."), byte for byte the one this server sent on that very part
  (the documented placeholder is accepted only on calls this server did not make);
- every signature sent back anywhere must be one this server issued, on the part it
  came with ("Corrupted thought signature.");
- a model turn with N function calls is followed by N function responses.

Replies are scripted as parts (:class:`Think`, :class:`Say`, :class:`Call`) and streamed
in the documented shapes: thought and text chunks, the signature on the first function
call of a reply (parallel calls: only the first), or, in a reply without calls, on its
last part, which by default is a final chunk with empty text; ``usageMetadata`` with
thought and cached token counts on every chunk.
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from provider_server import JSONReply, Recorded, Reply, SSEReply

__all__ = [
    "MISSING_SIGNATURE",
    "Call",
    "GeminiRules",
    "Say",
    "Think",
    "check_request",
    "google_error",
    "stream_chunks",
]

MISSING_SIGNATURE = (
    "Function call is missing a thought_signature in functionCall parts. This is required "
    "for tools to work correctly, and missing thought_signature may lead to degraded model "
    "performance. Additional data, function call `default_api:{name}` , position {position}. "
    "Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details."
)
CORRUPTED_SIGNATURE = "Corrupted thought signature."
RESPONSE_COUNT = (
    "Please ensure that the number of function response parts is equal to the number of "
    "function call parts of the function call turn."
)
SKIP = "skip_thought_signature_validator"


@dataclass(frozen=True)
class Think:
    """A thought summary (``"thought": true``), streamed in two chunks."""

    text: str
    signed: bool = False


@dataclass(frozen=True)
class Say:
    """Answer text, streamed in two chunks."""

    text: str


@dataclass(frozen=True)
class Call:
    """A function call (whole, in one chunk, as the API streams them)."""

    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None


Item = Think | Say | Call

_TYPES: dict[str, Any] = {}


def check_request(body: Any) -> None:
    """Raise ``pydantic.ValidationError`` (or ``ValueError``) unless ``body`` is a valid
    ``generateContent`` request by the ``google-genai`` package's types."""
    if not _TYPES:
        from google.genai import types

        _TYPES.update(
            contents=types.Content,
            systemInstruction=types.Content,
            tools=types.Tool,
            toolConfig=types.ToolConfig,
            generationConfig=types.GenerationConfig,
            safetySettings=types.SafetySetting,
            cachedContent=str,
        )
    if not isinstance(body, dict):
        raise ValueError("the body is not a JSON object")
    unknown = set(body) - set(_TYPES)
    if unknown:
        raise ValueError(f"unknown request fields: {sorted(unknown)}")
    if not body.get("contents"):
        raise ValueError("contents is required")
    for key, value in body.items():
        kind = _TYPES[key]
        if kind is str:
            if not isinstance(value, str):
                raise ValueError(f"{key} must be a string")
            continue
        for item in value if isinstance(value, list) else [value]:
            kind.model_validate_json(json.dumps(item))  # camelCase aliases, base64 bytes


def google_error(status: int, message: str, kind: str = "INVALID_ARGUMENT") -> JSONReply:
    """An error reply in Google's shape: ``{"error": {"code", "message", "status"}}``."""
    body = {"error": {"code": status, "message": message, "status": kind}}
    return JSONReply(status, json.dumps(body, indent=2))


def _chunk(parts: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
    candidate.update(extra)
    return {"candidates": [candidate]}


def stream_chunks(
    items: Sequence[Item],
    sign: Any,
    *,
    text_signature: Literal["empty", "last", "first"] = "empty",
    usage: Mapping[str, int] | None = None,
    thoughts: bool = True,
    finish: str = "STOP",
) -> list[dict[str, Any]]:
    """The chunks of one reply, as ``streamGenerateContent?alt=sse`` sends them.

    ``sign(part)`` gives a signature for a part (and records it). ``thoughts=False``
    leaves thought parts out (the request did not ask for them).
    """
    chunks: list[list[dict[str, Any]]] = []
    has_call = any(isinstance(item, Call) for item in items)
    first_call = True
    last_said = ""
    for item in items:
        if isinstance(item, Think):
            if not thoughts:
                continue
            half = len(item.text) // 2
            pieces = [item.text[:half], item.text[half:]]
            chunks += [[{"text": p, "thought": True}] for p in pieces]
            if item.signed:
                chunks[-1][0]["thoughtSignature"] = sign(chunks[-1][0], item.text)
        elif isinstance(item, Say):
            words = item.text.split(" ")
            pieces = [" ".join(words[: len(words) // 2]) + " ", " ".join(words[len(words) // 2 :])]
            chunks += [[{"text": p}] for p in pieces if p.strip()]
            last_said = item.text
        else:
            call: dict[str, Any] = {"name": item.name, "args": dict(item.args)}
            if item.id:
                call["id"] = item.id
            part: dict[str, Any] = {"functionCall": call}
            if first_call:  # parallel calls: only the first carries the signature
                part["thoughtSignature"] = sign(part, None)
                first_call = False
            if chunks and "functionCall" in chunks[-1][-1]:
                chunks[-1].append(part)  # parallel calls arrive in one chunk
            else:
                chunks.append([part])
    if not has_call:
        said = [c for c in chunks if "thought" not in c[-1]]
        if text_signature == "empty" or not said:
            part = {"text": ""}
            part["thoughtSignature"] = sign(part, "")
            chunks.append([part])
        else:
            # streamed text joins into one part up to the chunk with the signature
            if text_signature == "last":
                said[-1][-1]["thoughtSignature"] = sign(said[-1][-1], last_said)
            else:
                said[0][-1]["thoughtSignature"] = sign(said[0][-1], None)
    counts = dict(usage or {})
    metadata = {
        "promptTokenCount": counts.get("input", 20),
        "candidatesTokenCount": counts.get("output", 10),
        "totalTokenCount": counts.get("input", 20)
        + counts.get("output", 10)
        + counts.get("thoughts", 0),
    }
    if counts.get("thoughts"):
        metadata["thoughtsTokenCount"] = counts["thoughts"]
    if counts.get("cached"):
        metadata["cachedContentTokenCount"] = counts["cached"]
    out = []
    for n, parts in enumerate(chunks or [[{"text": ""}]]):
        last = n == len(chunks) - 1 or not chunks
        chunk = _chunk(parts, finishReason=finish) if last else _chunk(parts)
        chunk["usageMetadata"] = metadata
        chunk["modelVersion"] = "gemini-3-pro-preview"
        chunk["responseId"] = "resp-test"
        out.append(chunk)
    return out


def _sse(chunks: Sequence[Mapping[str, Any]]) -> SSEReply:
    return SSEReply([f"data: {json.dumps(c)}\r\n\r\n".encode() for c in chunks])


def _what(part: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a signature is bound to: the part it came with, less the signature."""
    if "functionCall" in part:
        call = part["functionCall"]
        return ("call", call.get("name"), json.dumps(call.get("args") or {}, sort_keys=True))
    return ("thought" if part.get("thought") else "text", part.get("text"))


class GeminiRules:
    """Scripted Gemini replies, and the API's refusals of what breaks its signature rules."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._script: list[tuple[tuple[Item, ...], dict[str, Any]]] = []
        self._numbers = itertools.count(1)
        #: every signature sent, and what it was sent on
        self.issued: dict[str, tuple[Any, ...]] = {}
        #: the calls sent with a signature, by what they are
        self.signed_calls: set[tuple[Any, ...]] = set()
        #: the request bodies that failed the google-genai types (tests assert none)
        self.invalid: list[str] = []
        #: the refusals sent, as (status, message)
        self.refusals: list[tuple[int, str]] = []

    def reply(
        self,
        *items: Item,
        text_signature: Literal["empty", "last", "first"] = "empty",
        usage: Mapping[str, int] | None = None,
        finish: str = "STOP",
    ) -> None:
        """Queue one reply made of ``items``."""
        with self._lock:
            options = {"text_signature": text_signature, "usage": usage, "finish": finish}
            self._script.append((items, options))

    def _sign(self, part: Mapping[str, Any], text: str | None) -> str:
        number = next(self._numbers)
        signature = base64.b64encode(f"sig-{number:04d}-".encode() + bytes(range(40))).decode()
        what = _what(part) if text is None else ("thought" if part.get("thought") else "text", text)
        self.issued[signature] = what
        if what[0] == "call":
            self.signed_calls.add(what)
        return signature

    # --- the Rules protocol of ProviderServer ---------------------------------------

    def check(self, request: Recorded) -> Reply | None:
        body = request.body
        try:
            check_request(body)
        except Exception as exc:  # pydantic's ValidationError or ours
            self.invalid.append(str(exc))
            return self._refuse(400, f"Invalid JSON payload received. {exc}")
        refusal = self._check_signatures(body["contents"])
        if refusal is not None:
            return self._refuse(400, refusal)
        with self._lock:
            if not self._script:
                return google_error(500, "the test scripted no reply", "INTERNAL")
            items, options = self._script.pop(0)
        thinking = (body.get("generationConfig") or {}).get("thinkingConfig") or {}
        chunks = stream_chunks(
            items, self._sign, thoughts=bool(thinking.get("includeThoughts")), **options
        )
        return _sse(chunks)

    def sent(self, reply: Reply) -> None:
        pass  # replies are made in check()

    def _refuse(self, status: int, message: str) -> JSONReply:
        self.refusals.append((status, message))
        return google_error(status, message)

    def _check_signatures(self, contents: list[dict[str, Any]]) -> str | None:
        start = 0
        for index, content in enumerate(contents):
            if content.get("role") == "user" and any(
                "functionResponse" not in p for p in content["parts"]
            ):
                start = index + 1
        for index, content in enumerate(contents):
            parts = content.get("parts") or []
            if content.get("role") != "model":
                continue
            calls = [p for p in parts if "functionCall" in p]
            if calls:
                after = contents[index + 1] if index + 1 < len(contents) else None
                answered = [p for p in (after or {}).get("parts", []) if "functionResponse" in p]
                if after is not None and len(answered) != len(calls):
                    return RESPONSE_COUNT
            if index >= start and calls and "thoughtSignature" not in calls[0]:
                name = calls[0]["functionCall"].get("name")
                return MISSING_SIGNATURE.format(name=name, position=index + 1)
            for part in parts:
                signature = part.get("thoughtSignature")
                if signature is None:
                    continue
                if signature == SKIP and _what(part) not in self.signed_calls:
                    continue  # the placeholder, on a call this server did not make
                if self.issued.get(signature) != _what(part):
                    return CORRUPTED_SIGNATURE
        return None
