"""Where an Anthropic request marks ``cache_control``: its stable prefix, at most four places.

The Messages API caches the prefix of a request (tools, then system, then messages)
up to each block marked ``cache_control``, and a later request reads the longest
cached prefix that ends at one of its own marks or at most about 20 blocks before
one. A session re-sends its transcript and appends to it, so four marks are placed:

1. the last tool definition (tools change least),
2. the system text,
3. the last block of the message the previous model call ended with — the one just
   before the last assistant message — so this call reads exactly what the previous
   call wrote, however many blocks the model's reply and the tool results added,
4. the last block of the request, so the next call can read all of this one.

Marks never change what the model sees; the API allows four per request.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..messages import Message
from .caching import CachePolicy

__all__ = ["MAX_BREAKPOINTS", "mark_breakpoints", "marked_turn"]

#: the most ``cache_control`` marks the Messages API accepts in one request
MAX_BREAKPOINTS = 4
#: block types the API does not let carry ``cache_control``
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})
#: the encoded ``cache_control`` marks (``marked_turn``), by their items
_CONTROLS: dict[tuple[tuple[str, Any], ...], bytes] = {}


def mark_breakpoints(
    body: dict[str, Any],
    messages: Sequence[Message],
    ends: Mapping[int, tuple[int, int]],
    policy: CachePolicy,
) -> None:
    """Mark ``body``'s cache breakpoints in place (``ends``: message index -> its last
    block's (turn, block) position in ``body["messages"]``)."""
    control: dict[str, str] = {"type": "ephemeral"}
    if policy.ttl != "5m":
        control["ttl"] = policy.ttl
    marked: list[dict[str, Any]] = []
    tools = body.get("tools")
    if tools:
        marked.append(tools[-1])
    system = body.get("system")
    if isinstance(system, list) and system:
        marked.append(system[-1])
    positions: list[tuple[int, int]] = []
    previous = _previous_call_end(messages, ends)
    if previous is not None:
        positions.append(previous)
    if ends:
        last = ends[max(ends)]
        if last not in positions:
            positions.append(last)
    turns = body["messages"]
    for turn, index in positions:
        block = turns[turn]["content"][index]
        if block.get("type") not in _UNMARKABLE:
            marked.append(block)
    for chosen in marked[-MAX_BREAKPOINTS:]:
        chosen["cache_control"] = dict(control)


def _previous_call_end(
    messages: Sequence[Message], ends: Mapping[int, tuple[int, int]]
) -> tuple[int, int] | None:
    """Where the previous model call's request ended: the last message sent before the
    last assistant message (``None`` when there is no assistant message yet)."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index].role == "assistant":
            for before in range(index - 1, -1, -1):
                if before in ends:
                    return ends[before]
            return None
    return None


def marked_turn(turn: dict[str, Any], plain: bytes, encode: Callable[[Any], bytes]) -> bytes:
    """``encode(turn)``, given ``plain``: its text before ``mark_breakpoints`` marked it.

    A mark on the turn's last block (the usual place: the end of a message) is spliced
    into ``plain`` where the encoder writes it (the block's last member, before the
    closing ``}]}``); a turn marked elsewhere, or whose text held a mark already (from a
    block's ``extra``), is encoded again."""
    content = turn["content"]
    marked = [block for block in content if "cache_control" in block]
    if not marked:
        return plain
    last = content[-1]
    if (
        len(marked) == 1
        and marked[0] is last
        and len(last) > 1  # members before the mark: a comma goes before it
        and next(reversed(turn)) == "content"
        and next(reversed(last)) == "cache_control"
        and plain.endswith(b"}]}")
        and b'"cache_control"' not in plain
    ):
        control = last["cache_control"]
        key = tuple(control.items())
        text = _CONTROLS.get(key)
        if text is None:  # a few kinds of mark: each encoded once
            text = _CONTROLS[key] = encode(control)
        return b'%s, "cache_control": %s}]}' % (plain[:-3], text)
    return encode(turn)
