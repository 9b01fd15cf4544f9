"""The Messages API's rules for extended thinking, enforced by the test server.

``ProviderServer(rules=AnthropicThinkingRules())`` remembers every thinking,
redacted thinking and tool use block it streamed, and answers a follow-up ``400
invalid_request_error`` with the API's own wording when it breaks what the API
documents for thinking with tool use:

- with ``thinking`` enabled, the final assistant message of a tool cycle (the one
  whose ``tool_use`` the last user message answers) must start with a ``thinking``
  or ``redacted_thinking`` block;
- every thinking block sent back must be one the model made, text and signature
  unchanged; every redacted thinking block its ``data`` unchanged;
- the assistant messages of the current assistant turn (since the last user message
  that is not only tool results) must give back their thinking, redacted thinking and
  tool use blocks all, in the order the model sent them (interleaved thinking).

So a provider that drops, alters or moves a block fails here as it would against
the API.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from provider_server import JSONReply, Recorded, Reply, SSEReply

__all__ = ["FINAL_MUST_START_WITH_THINKING", "AnthropicThinkingRules"]

#: The API's answer to a final assistant message that does not start with thinking.
FINAL_MUST_START_WITH_THINKING = (
    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
    "`{found}`. When `thinking` is enabled, a final `assistant` message must start with a "
    "thinking block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We "
    "recommend you include thinking blocks from previous turns. To avoid this requirement, "
    "disable `thinking`. Please consult our documentation at "
    "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
)
INVALID_SIGNATURE = "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
INVALID_REDACTED = "messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
CANNOT_BE_MODIFIED = (
    "messages.{i}.content.{j}: `thinking` or `redacted_thinking` blocks in the latest "
    "assistant message cannot be modified. These blocks must remain as they were in the "
    "original response."
)

_KINDS = ("thinking", "redacted_thinking", "tool_use")


def _key(block: dict[str, Any]) -> tuple[str, str, str]:
    """What must come back unchanged of a block (text blocks are not checked)."""
    kind = block.get("type")
    if kind == "thinking":
        return ("thinking", str(block.get("thinking")), str(block.get("signature")))
    if kind == "redacted_thinking":
        return ("redacted_thinking", str(block.get("data")), "")
    return ("tool_use", str(block.get("id")), "")


class AnthropicThinkingRules:
    """Remembers what the server streamed; refuses follow-ups that break the thinking rules."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: tool use id -> the thinking/redacted/tool_use blocks of the response that made it
        self.responses: dict[str, list[tuple[str, str, str]]] = {}
        self.thinking: set[tuple[str, str]] = set()
        self.redacted: set[str] = set()
        #: every 400 the rules answered, its message
        self.refusals: list[str] = []
        #: the requests the rules let through with at least one thinking block, checked
        self.checked = 0

    # -- what the server sent --------------------------------------------------------

    def sent(self, reply: Reply) -> None:
        if not isinstance(reply, SSEReply):
            return
        blocks: dict[int, dict[str, Any]] = {}
        arguments: dict[int, list[str]] = {}
        for raw in reply.events:
            data = _data(raw)
            if data is None:
                continue
            if data.get("type") == "content_block_start":
                blocks[int(data["index"])] = dict(data["content_block"])
            elif data.get("type") == "content_block_delta":
                block, delta = blocks[int(data["index"])], data["delta"]
                if delta.get("type") == "thinking_delta":
                    block["thinking"] = block.get("thinking", "") + delta["thinking"]
                elif delta.get("type") == "signature_delta":
                    block["signature"] = block.get("signature", "") + delta["signature"]
                elif delta.get("type") == "input_json_delta":
                    arguments.setdefault(int(data["index"]), []).append(delta["partial_json"])
        ordered = [blocks[i] for i in sorted(blocks)]
        keys = [_key(b) for b in ordered if b.get("type") in _KINDS]
        with self._lock:
            for block in ordered:
                if block.get("type") == "thinking":
                    self.thinking.add((block.get("thinking", ""), block.get("signature", "")))
                elif block.get("type") == "redacted_thinking":
                    self.redacted.add(block.get("data", ""))
            for key in keys:
                if key[0] == "tool_use":
                    self.responses[key[1]] = keys

    # -- what the client sent back ---------------------------------------------------

    def check(self, request: Recorded) -> Reply | None:
        body = request.body
        if not request.path.endswith("/v1/messages") or not isinstance(body, dict):
            return None
        messages = body.get("messages") or []
        with self._lock:
            problem = self._problem(messages, (body.get("thinking") or {}).get("type"))
            if problem is None:
                if any(_kinds(m) & {"thinking", "redacted_thinking"} for m in messages):
                    self.checked += 1
                return None
            self.refusals.append(problem)
        error = {"type": "error", "error": {"type": "invalid_request_error", "message": problem}}
        return JSONReply(400, json.dumps(error))

    def _problem(self, messages: list[dict[str, Any]], thinking: Any) -> str | None:
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            for j, block in enumerate(_content(message)):
                kind = block.get("type")
                pair = (block.get("thinking"), block.get("signature"))
                if kind == "thinking" and pair not in self.thinking:
                    return INVALID_SIGNATURE.format(i=i, j=j)
                if kind == "redacted_thinking" and block.get("data") not in self.redacted:
                    return INVALID_REDACTED.format(i=i, j=j)
        if thinking != "enabled":
            return None
        start = _turn_start(messages)
        last_assistant = max(
            (i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=None
        )
        if (
            last_assistant is not None
            and last_assistant >= start
            and _kinds(messages[-1]) == {"tool_result"}
        ):
            content = _content(messages[last_assistant])
            first = content[0].get("type") if content else "nothing"
            if first not in ("thinking", "redacted_thinking"):
                return FINAL_MUST_START_WITH_THINKING.format(i=last_assistant, found=first)
        for i in range(start, len(messages)):
            message = messages[i]
            if message.get("role") != "assistant":
                continue
            content = _content(message)
            sent = [_key(b) for b in content if b.get("type") in _KINDS]
            ids = [key[1] for key in sent if key[0] == "tool_use"]
            original = self.responses.get(ids[0]) if ids else None
            if original is not None and sent != original:
                j = next(
                    (n for n, (a, b) in enumerate(zip(sent, original, strict=False)) if a != b), 0
                )
                return CANNOT_BE_MODIFIED.format(i=i, j=min(j, max(len(content) - 1, 0)))
        return None


def _data(raw: bytes) -> dict[str, Any] | None:
    for line in raw.decode("utf-8").splitlines():
        if line.startswith("data:"):
            try:
                value = json.loads(line[5:])
            except ValueError:  # another wire's stream (``data: [DONE]``): not ours to read
                return None
            return value if isinstance(value, dict) else None
    return None


def _content(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _kinds(message: dict[str, Any]) -> set[str]:
    return {str(b.get("type")) for b in _content(message)}


def _turn_start(messages: list[dict[str, Any]]) -> int:
    """The index after the last user message that is not only tool results."""
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.get("role") == "user" and _kinds(message) - {"tool_result"}:
            return i + 1
    return 0
