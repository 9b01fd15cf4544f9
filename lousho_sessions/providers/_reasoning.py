"""Reasoning in the transcript: the order a model sent its blocks in, and the replay rule.

An assistant message keeps its content parts (text, reasoning) in ``content`` and its
tool calls in ``tool_calls``. When a model sent a tool call before some of its parts
(reasoning between two calls, text after a call), the call records where it came:
``ToolCall.extra["after_parts"]`` is the number of content parts sent before it. A
call without it came after all of them (what every model without interleaving
sends, so most messages never carry it). :func:`replay_blocks` puts the two back
together in the original order.

The replay rule: a ``ReasoningPart`` goes back only to the provider family that made
it, in its original place; a call to another family leaves it out, so a session can
switch models between turns.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Union

import attrs

from ..messages import Message, Part, ReasoningPart, TextPart, ToolCall
from .base import ModelReasoningDelta

__all__ = ["AFTER_PARTS", "Block", "ReasoningBlock", "ReplyBlocks", "replay_blocks"]

#: The key of ``ToolCall.extra`` that says how many content parts came before the call.
AFTER_PARTS = "after_parts"

Block = Union[Part, ToolCall]


def replay_blocks(message: Message, family: str) -> list[Block]:
    """``message``'s parts and tool calls in the order the model sent them, for ``family``.

    ``ReasoningPart`` s made by another family are left out (the replay rule); the
    position a call recorded (``AFTER_PARTS``) is read against the full content, so
    leaving parts out never moves a call. A position past the end (the content was
    edited) puts the call at the end.
    """
    content = message.content
    calls = message.tool_calls
    blocks: list[Block] = []
    pending = sorted(
        ((_position(call, len(content)), n, call) for n, call in enumerate(calls)),
        key=lambda item: (item[0], item[1]),
    )
    waiting = iter(pending)
    next_call = next(waiting, None)
    for index, part in enumerate(content):
        while next_call is not None and next_call[0] <= index:
            blocks.append(next_call[2])
            next_call = next(waiting, None)
        if isinstance(part, ReasoningPart) and part.provider != family:
            continue
        blocks.append(part)
    while next_call is not None:
        blocks.append(next_call[2])
        next_call = next(waiting, None)
    return blocks


def _position(call: ToolCall, parts: int) -> int:
    value = call.extra.get(AFTER_PARTS) if call.extra else None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < parts:
        return value
    return parts


@attrs.define
class ReasoningBlock:
    """A reasoning block as its deltas arrive."""

    provider: str
    text: list[str] = attrs.field(factory=list)
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    extra: dict[str, Any] = attrs.field(factory=dict)

    def part(self) -> ReasoningPart:
        return ReasoningPart(
            "".join(self.text),
            self.provider,
            self.signature,
            self.data,
            self.id,
            extra=self.extra,
        )


@attrs.define
class ReplyBlocks:
    """The order of a streamed reply's blocks: text runs, reasoning blocks, tool calls.

    A wire format tells it each block as it starts (:meth:`text`, :meth:`reasoning`,
    :meth:`call`); :meth:`message_parts` gives the content parts and the calls, each
    call with its position when it did not come after every part.
    """

    order: list[list[str] | ReasoningBlock | int] = attrs.field(factory=list)
    has_reasoning: bool = False

    def text(self, text: str) -> None:
        last = self.order[-1] if self.order else None
        if isinstance(last, list):
            last.append(text)
        else:
            self.order.append([text])

    def reasoning(
        self,
        provider: str,
        *,
        signature: str | None = None,
        data: str | None = None,
        id: str | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> ReasoningBlock:
        """A new reasoning block, in its place; fill it as its deltas come."""
        block = ReasoningBlock(
            provider, signature=signature, data=data, id=id, extra=dict(extra or {})
        )
        self.order.append(block)
        self.has_reasoning = True
        return block

    def add_reasoning_text(
        self, block: ReasoningBlock, text: object
    ) -> Iterator[ModelReasoningDelta]:
        """Keep ``text`` (a non-empty string) on ``block`` and give its delta."""
        if isinstance(text, str) and text:
            block.text.append(text)
            yield ModelReasoningDelta(text)

    def call(self, index: int) -> None:
        """Tool call ``index`` starts here (a call seen again keeps its first place)."""
        if index not in self.order:
            self.order.append(index)

    def message_parts(self, calls: Mapping[int, ToolCall]) -> tuple[list[Part], list[ToolCall]]:
        """The content parts in order, and the calls (by index) with their positions."""
        parts: list[Part] = []
        placed: list[tuple[int, ToolCall]] = []
        for block in self.order:
            if isinstance(block, list):
                text = "".join(block)
                if text:
                    parts.append(TextPart(text))
            elif isinstance(block, ReasoningBlock):
                parts.append(block.part())
            elif block in calls:
                placed.append((len(parts), calls[block]))
        seen = {id(call) for _, call in placed}
        placed += [(len(parts), call) for call in calls.values() if id(call) not in seen]
        out: list[ToolCall] = []
        for position, call in placed:
            if position < len(parts):
                call = attrs.evolve(call, extra={**call.extra, AFTER_PARTS: position})
            out.append(call)
        return parts, out
