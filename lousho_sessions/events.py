"""Stream events: frozen attrs classes tagged by ``type``.

A run yields ``run.start``, ``step.start``, ``text.delta``, ``tool.call``,
``tool.result``, ``approval.requested``, ``input.queued``, ``input.applied``,
``error`` and finally ``run.done``. ``compaction.start``, ``compaction.done``
and ``context.cleared`` go only to ``Session.on()`` listeners.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, Union

import attrs

from .messages import ToolCall

if TYPE_CHECKING:
    from .results import CompactionResult, ExecutionResult

__all__ = [
    "ApprovalRequested",
    "CompactionDone",
    "CompactionStart",
    "ContextCleared",
    "ErrorEvent",
    "Event",
    "InputApplied",
    "InputQueued",
    "RunDone",
    "RunStart",
    "SessionEvent",
    "StepStart",
    "TextDelta",
    "ToolCallEvent",
    "ToolResultEvent",
]


@attrs.frozen
class RunStart:
    run_id: str
    type: Literal["run.start"] = "run.start"


@attrs.frozen
class StepStart:
    run_id: str
    step: int
    type: Literal["step.start"] = "step.start"


@attrs.frozen
class TextDelta:
    run_id: str
    text: str
    type: Literal["text.delta"] = "text.delta"


@attrs.frozen
class ToolCallEvent:
    run_id: str
    call: ToolCall
    type: Literal["tool.call"] = "tool.call"


@attrs.frozen
class ToolResultEvent:
    run_id: str
    call_id: str
    output: str
    is_error: bool = False
    type: Literal["tool.result"] = "tool.result"
    #: what the tool raised (or the ``ToolArgumentsError`` of arguments that did not fit);
    #: not compared and not saved
    exception: BaseException | None = attrs.field(default=None, eq=False, kw_only=True)


@attrs.frozen
class ApprovalRequested:
    run_id: str
    approval_id: str
    call: ToolCall
    type: Literal["approval.requested"] = "approval.requested"


@attrs.frozen
class InputQueued:
    run_id: str
    input_id: str
    type: Literal["input.queued"] = "input.queued"


@attrs.frozen
class InputApplied:
    run_id: str
    input_id: str
    type: Literal["input.applied"] = "input.applied"


@attrs.frozen
class ErrorEvent:
    run_id: str
    error: BaseException
    type: Literal["error"] = "error"


@attrs.frozen
class RunDone:
    run_id: str
    finish_reason: str
    result: ExecutionResult | None
    type: Literal["run.done"] = "run.done"


@attrs.frozen
class CompactionStart:
    session_id: str
    type: Literal["compaction.start"] = "compaction.start"


@attrs.frozen
class CompactionDone:
    session_id: str
    result: CompactionResult
    type: Literal["compaction.done"] = "compaction.done"


@attrs.frozen
class ContextCleared:
    session_id: str
    type: Literal["context.cleared"] = "context.cleared"


Event = Union[
    RunStart,
    StepStart,
    TextDelta,
    ToolCallEvent,
    ToolResultEvent,
    ApprovalRequested,
    InputQueued,
    InputApplied,
    ErrorEvent,
    RunDone,
]
SessionEvent = Union[CompactionStart, CompactionDone, ContextCleared]
