"""Compaction: replace older messages with one summary written by the agent's model.

Tokens are estimated, not counted: ``ceil(characters / 4)`` per text part (and per
reasoning part, its visible text and opaque data) plus a
fixed 4 per message and 256 per image, which is close to what OpenAI and
Anthropic tokenizers give for English text. The threshold of
``Compaction(max_tokens=...)`` is compared with that estimate for the system
text plus the transcript.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import attrs

from .abort import AbortSignal
from .events import CompactionDone, CompactionStart
from .messages import NO_USAGE, ImagePart, Message, ReasoningPart, TextPart, Usage, thaw
from .providers.base import ModelRequest, Provider, complete
from .results import CompactionResult
from .usage_totals import SUMMARY_KEY

if TYPE_CHECKING:
    from .telemetry._spans import Telemetry

__all__ = [
    "SUMMARY_KEY",
    "Compaction",
    "compact_transcript",
    "estimate_tokens",
    "split_point",
    "summarise",
]


DEFAULT_INSTRUCTIONS = (
    "Summarise the conversation below for the assistant who will continue it. Keep every "
    "fact the user stated, decisions made, open tasks, and tool results still relevant. "
    "Write plain prose, no preamble."
)


@attrs.frozen
class Compaction:
    """Automatic compaction: before a turn whose estimated prompt exceeds ``max_tokens``,
    summarise all but the last ``keep_last`` messages."""

    max_tokens: int
    keep_last: int = 4
    instructions: str | None = None

    def __attrs_post_init__(self) -> None:
        if self.max_tokens <= 0 or self.keep_last < 0:
            raise ValueError("Compaction needs max_tokens > 0 and keep_last >= 0")


def estimate_tokens(messages: Sequence[Message], system: str | None = None) -> int:
    """Estimated prompt tokens (see the module docstring)."""
    total = -(-len(system) // 4) if system else 0
    for m in messages:
        total += 4
        for part in m.content:
            if isinstance(part, TextPart):
                total += -(-len(part.text) // 4)
            elif isinstance(part, ImagePart):
                total += 256
            elif isinstance(part, ReasoningPart):  # sent back to the family that made it
                total += -(-(len(part.text) + len(part.data or "")) // 4)
        for call in m.tool_calls:
            total += -(-(len(call.name) + len(json.dumps(thaw(call.arguments)))) // 4)
    return total


def split_point(messages: Sequence[Message], keep_last: int) -> int:
    """Index where the kept tail starts: at most ``keep_last`` messages are kept, and a
    tool call is never separated from its results, nor from the assistant message that
    made it (whose reasoning parts its provider needs back with the results)."""
    index = max(0, len(messages) - keep_last)
    while 0 < index < len(messages) and messages[index].role == "tool":
        index -= 1  # keep the assistant message that made the calls with its results
    return index


def _render(messages: Sequence[Message]) -> str:
    lines = []
    for m in messages:
        if m.metadata.get(SUMMARY_KEY):
            lines.append(f"[earlier summary] {m.text}")
            continue
        text = m.text
        if any(isinstance(p, ImagePart) for p in m.content):
            text += " [image]"
        for call in m.tool_calls:
            text += f" [calls {call.name}({json.dumps(thaw(call.arguments))})]"
        label = "tool result" if m.role == "tool" else m.role
        lines.append(f"{label}: {text.strip()}")
    return "\n".join(lines)


def summarise(
    provider: Provider,
    messages: Sequence[Message],
    instructions: str | None,
    telemetry: Telemetry | None = None,
    model: str | None = None,
    *,
    signal: AbortSignal | None = None,
) -> tuple[str, Usage]:
    """Ask ``provider`` for a summary of ``messages``; returns its text and usage (the
    call traced as a ``chat`` span when ``telemetry`` is given, ``model`` its name)."""
    request = ModelRequest(
        system=instructions or DEFAULT_INSTRUCTIONS,
        messages=(Message.user(_render(messages)),),
        signal=signal or AbortSignal(),
    )
    chat = None
    if telemetry is not None:
        name = provider.name.split("/", 1)[0]
        chat = telemetry.compaction(request.messages, provider=name, model=model)
    try:
        response = complete(provider, request)
    except BaseException as exc:
        if chat is not None:
            chat.end(None, exc)
        raise
    if chat is not None:
        chat.end(response)
    return response.message.text.strip(), response.usage


def summary_message(text: str, replaced: Sequence[Message], usage: Usage) -> Message:
    """The message that stands for ``replaced``; it carries their spend so budgets hold."""
    spent = usage
    steps = 0
    calls = 0
    for m in replaced:
        if m.usage is not None:
            spent = spent + m.usage
        if m.role == "assistant":
            steps += 1
            calls += len(m.tool_calls)
        prior = m.metadata.get(SUMMARY_KEY)
        if isinstance(prior, Mapping):
            spent = spent + Usage(**prior.get("usage", {}))
            steps += int(prior.get("steps", 0))
            calls += int(prior.get("tool_calls", 0))
    meta = {
        SUMMARY_KEY: {
            "replaced": len(replaced),
            "usage": attrs.asdict(spent),
            "steps": steps,
            "tool_calls": calls,
        }
    }
    return Message.user(f"Summary of the conversation so far:\n{text}", metadata=meta)


def spent_by(messages: Sequence[Message]) -> tuple[Usage, int, int]:
    """Usage, model calls and tool calls recorded in ``messages`` (summaries included)."""
    usage = NO_USAGE
    steps = calls = 0
    for m in messages:
        if m.role == "assistant":
            steps += 1
            calls += len(m.tool_calls)
            if m.usage is not None:
                usage = usage + m.usage
        elif m.metadata:
            prior = m.metadata.get(SUMMARY_KEY)
            if isinstance(prior, Mapping):
                usage = usage + Usage(**prior.get("usage", {}))
                steps += int(prior.get("steps", 0))
                calls += int(prior.get("tool_calls", 0))
    return usage, steps, calls


class _Saving(Protocol):
    """What ``compact_transcript`` needs of a session's transcript."""

    @property
    def messages(self) -> Sequence[Message]: ...

    def save(self, messages: list[Message]) -> None: ...


def compact_transcript(
    transcript: _Saving,
    provider: Provider,
    model_name: str | None,
    telemetry: Telemetry | None,
    session_id: str,
    keep_last: int,
    instructions: str | None,
    notify: Callable[[Any], None],
) -> CompactionResult:
    """Summarise all but the last ``keep_last`` messages of ``transcript`` and save it,
    telling ``notify`` when it starts and ends (a session's compaction, under its lock)."""
    before = list(transcript.messages)
    cut = split_point(before, keep_last)
    if cut == 0:
        return CompactionResult("", len(before), len(before), compacted=False)
    notify(CompactionStart(session_id))
    text, usage = summarise(provider, before[:cut], instructions, telemetry, model_name)
    summary = summary_message(text, before[:cut], usage)
    after = [summary, *before[cut:]]
    transcript.save(after)
    result = CompactionResult(text, len(before), len(after), usage)
    notify(CompactionDone(session_id, result))
    return result
