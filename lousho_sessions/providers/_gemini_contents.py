"""The transcript as Gemini ``contents``, each thought signature on the part it came with.

Where a Gemini reply's signatures live in the transcript (``GeminiProvider`` writes
them so, this module sends them back):

- a thought part (``"thought": true``) is a ``ReasoningPart(provider="gemini")``, its
  ``thoughtSignature`` in ``signature``;
- a text part that carried one is a ``TextPart`` with it in ``extra["thought_signature"]``;
- an empty text part that carried only a signature (streams often end with one) is a
  ``ReasoningPart("", "gemini", signature=...)`` with ``extra["thought"] = False``;
- a ``functionCall`` part's is in ``ToolCall.extra["thought_signature"]`` (of parallel
  calls only the first has one, as the API sends them).

Parts go back in the order they came (``replay_blocks``), so each signature is on the
same part in the same position. Reasoning of other families is left out. A model turn of
the current turn whose calls carry no signature at all (they came from another family,
or were written by hand) gets the API's documented placeholder on its first call when
the model validates signatures (Gemini 3 and later).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from ..messages import ImagePart, Message, ReasoningPart, TextPart, ToolCall
from ._reasoning import replay_blocks
from ._wire import image_base64, image_media_type, plain_json

__all__ = [
    "FAMILY",
    "SIGNATURE_KEY",
    "SKIP_SIGNATURE",
    "Names",
    "call_names",
    "contents",
    "opens_turn",
    "sign_foreign_calls",
    "turns",
]

#: The family of the reasoning parts Gemini makes and gets back.
FAMILY = "gemini"
#: The key of ``TextPart.extra`` / ``ToolCall.extra`` that holds a part's signature.
SIGNATURE_KEY = "thought_signature"
#: The value the API documents for a call it did not make (its signature is not checked).
SKIP_SIGNATURE = "skip_thought_signature_validator"

_IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".heic": "image/heic",
    ".heif": "image/heif",
}


def contents(messages: Iterable[Message], *, placeholder: bool) -> list[dict[str, Any]]:
    """The ``contents`` of a request: user and model turns; tool results in user turns.

    Consecutive user-side messages (the results of parallel calls, maybe user text
    after them) join one user turn, results first, as the API wants them.
    ``placeholder``: give unsigned calls of the current turn the documented placeholder.
    """
    messages = list(messages)
    out, _ = turns(messages, call_names(messages))
    if placeholder:
        sign_foreign_calls(out)
    return out


def call_names(messages: Iterable[Message]) -> dict[str, str]:
    """The name of each call, by id (a tool result names the function it answers)."""
    return {call.id: call.name for m in messages if m.role == "assistant" for call in m.tool_calls}


@attrs.frozen
class Names:
    """What a memo of Gemini turns keeps beyond them (see ``_body_memo``): the system
    texts of its messages (by message index), the name of each call by id, the call
    ids its tool results answer (their function names were looked up by those ids), and
    the turns it sent with the signature placeholder, by turn index, as they are without
    it (what they become once a new user turn ends the current turn)."""

    system: list[tuple[int, str]]
    names: dict[str, str]
    answered: frozenset[str | None]
    plain: Mapping[int, bytes] = attrs.field(factory=dict)

    def reuse(
        self, turns: list[bytes], count: int, new: Sequence[Message]
    ) -> tuple[dict[int, bytes], int]:
        """The memo's first ``count`` ``turns`` made, in place, what this call sends: a new
        message with user content ends the current turn, so the turns that had the
        placeholder go back to their form without it. Returns the forms without it of
        those that keep it, and the first turn changed (``count``: none).

        ``count`` is every memo turn but the last (built again), or none."""
        plain = dict(self.plain) if count else {}
        plain.pop(count, None)
        if plain and any(opens_turn(m) for m in new):
            for n, turn in plain.items():
                turns[n] = turn
            return {}, min(plain)
        return plain, count

    def names_with(self, new: Iterable[Message]) -> dict[str, str] | None:
        """The call names with the calls of ``new`` messages; ``None`` when one of them
        changes the name of a call a result sent before answers."""
        names = dict(self.names)
        for message in new:
            if message.role == "assistant":
                for call in message.tool_calls:
                    if call.id in self.answered and names.get(call.id) != call.name:
                        return None
                    names[call.id] = call.name
        return names


def turns(
    messages: Sequence[Message], names: Mapping[str, str]
) -> tuple[list[dict[str, Any]], list[int]]:
    """The turns of ``messages`` (no placeholders) and the index of each turn's first message."""
    out: list[dict[str, Any]] = []
    firsts: list[int] = []
    for index, message in enumerate(messages):
        if message.role == "system":
            continue  # joins the system instruction
        if message.role == "assistant":
            parts, role = model_parts(message), "model"
        elif message.role == "tool":
            parts, role = [_function_response(message, names)], "user"
        else:
            parts, role = _user_parts(message.content), "user"
        if not parts:
            continue  # the API refuses a turn without parts
        if role == "user" and out and out[-1]["role"] == "user":
            out[-1]["parts"].extend(parts)
        else:
            out.append({"role": role, "parts": parts})
            firsts.append(index)
    return out, firsts


def opens_turn(message: Message) -> bool:
    """Whether ``message`` has user content (text or images): its user turn ends the
    current turn, whose unsigned calls get the placeholder (:func:`sign_foreign_calls`)."""
    return message.role not in ("system", "assistant", "tool") and bool(
        _user_parts(message.content)
    )


def model_parts(message: Message) -> list[dict[str, Any]]:
    """An assistant message's parts in the order the model sent them, signatures in place."""
    parts: list[dict[str, Any]] = []
    for block in replay_blocks(message, FAMILY):
        if isinstance(block, ToolCall):
            call: dict[str, Any] = {"name": block.name, "args": plain_json(block.arguments)}
            if block.id:
                call["id"] = block.id
            parts.append(_signed({"functionCall": call}, block.extra.get(SIGNATURE_KEY)))
        elif isinstance(block, ReasoningPart):
            if block.extra.get("thought") is False:  # an empty text part with a signature
                parts.append(_signed({"text": block.text}, block.signature))
            elif block.text or block.signature:
                parts.append(_signed({"text": block.text, "thought": True}, block.signature))
        elif isinstance(block, TextPart):
            signature = block.extra.get(SIGNATURE_KEY)
            if block.text or signature:
                parts.append(_signed({"text": block.text}, signature))
        else:
            parts.append(_image(block))
    return parts


def _signed(part: dict[str, Any], signature: object) -> dict[str, Any]:
    if isinstance(signature, str) and signature:
        part["thoughtSignature"] = signature
    return part


def _user_parts(content: Iterable[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            if part.text:
                parts.append({"text": part.text})
        elif isinstance(part, ImagePart):
            parts.append(_image(part))
        # reasoning goes back only in model turns
    return parts


def _image(part: ImagePart) -> dict[str, Any]:
    if part.url is None:
        return {"inlineData": {"mimeType": image_media_type(part), "data": image_base64(part)}}
    media_type = part.media_type
    if not media_type:
        path = part.url.split("?", 1)[0].lower()
        media_type = next(
            (kind for end, kind in _IMAGE_TYPES.items() if path.endswith(end)), "image/png"
        )
    return {"fileData": {"mimeType": media_type, "fileUri": part.url}}


def _function_response(message: Message, names: Mapping[str, str]) -> dict[str, Any]:
    call_id = message.tool_call_id or ""
    key = "error" if message.is_error else "output"
    response: dict[str, Any] = {
        "name": names.get(call_id, "unknown"),
        "response": {key: message.text},
    }
    if call_id:
        response["id"] = call_id
    return {"functionResponse": response}


def sign_foreign_calls(out: list[dict[str, Any]]) -> list[int]:
    """Give each model turn of the current turn without any signed call the placeholder;
    the indexes of the turns given it.

    The current turn starts after the last user turn with something other than
    function responses: the API checks the signatures of the calls after it.
    """
    start = 0
    for index, content in enumerate(out):
        if content["role"] == "user" and any("functionResponse" not in p for p in content["parts"]):
            start = index + 1
    signed: list[int] = []
    for index in range(start, len(out)):
        content = out[index]
        if content["role"] != "model":
            continue
        calls = [p for p in content["parts"] if "functionCall" in p]
        if calls and not any("thoughtSignature" in p for p in calls):
            calls[0]["thoughtSignature"] = SKIP_SIGNATURE
            signed.append(index)
    return signed
