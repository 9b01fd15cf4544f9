"""What a turn returns: ``ExecutionResult``, ``PendingTurn``, ``CompactionResult``, ``Limits``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Literal

import attrs

if TYPE_CHECKING:  # a default (PEP 696): a bare ``ExecutionResult`` is ``ExecutionResult[Any]``
    from typing_extensions import TypeVar

    OutputT = TypeVar("OutputT", default=Any)
else:
    from typing import TypeVar

    OutputT = TypeVar("OutputT")

from .messages import Message, Usage

__all__ = [
    "CompactionResult",
    "ExecutionResult",
    "FinishReason",
    "Limits",
    "OutputT",
    "PendingTurn",
]

FinishReason = Literal[
    "stop", "length", "aborted", "awaiting-approval", "limit", "max-steps", "error"
]


@attrs.frozen
class ExecutionResult(Generic[OutputT]):
    """The outcome of one turn.

    ``messages`` are the turn's new messages (the user input included); ``usage``
    sums the turn's model calls; ``limit`` names the limit that stopped it when
    ``finish_reason == "limit"``. ``text`` is the final answer's text; ``output`` that
    answer parsed as the turn's ``output_type`` (docs/output.md). ``pending`` is set on
    an aborted turn that was kept instead of dropped because it was resumed or its tools
    ran: ``Session.pending()`` shows it, and ``resume()`` or the session's next ``send()``
    finishes it without running its recorded tools again.
    """

    text: str
    messages: tuple[Message, ...] = ()
    usage: Usage = Usage()
    finish_reason: FinishReason = "stop"
    approval_id: str | None = None
    limit: str | None = None
    run_id: str = ""
    session_id: str | None = None
    steps: int = 0
    #: the final answer as the turn's ``output_type``; None without one, or when the
    #: turn did not end with an answer (aborted, paused, a limit)
    output: OutputT | None = None
    pending: PendingTurn | None = None


@attrs.frozen
class PendingTurn:
    """A durable turn that has not finished."""

    status: Literal["running", "awaiting-approval"]
    turn_id: str
    approval_id: str | None = None


@attrs.frozen
class CompactionResult:
    """What ``Session.compact()`` did."""

    summary: str
    messages_before: int
    messages_after: int
    usage: Usage = Usage()
    compacted: bool = True


@attrs.frozen
class Limits:
    """Budgets. Per turn on ``create_agent(limits=)``; across all turns on ``agent.session(limits=)``."""

    max_cost_usd: float | None = None
    max_tokens: int | None = None
    max_steps: int | None = None
    max_tool_calls: int | None = None
