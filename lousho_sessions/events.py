"""Stream events: frozen attrs classes tagged by ``type``.

A run yields ``run.start``, ``step.start``, ``reasoning.delta``, ``text.delta``, ``tool.call``,
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
    "ReasoningDeltaEvent",
    "RunDone",
    "RunStart",
    "SessionEvent",
    "StepStart",
    "TextDelta",
    "ToolCallEvent",
    "ToolResultEvent",
]


@attrs.frozen
class _RunEvent:
    """What every event of a run carries: the id of the run it belongs to."""

    run_id: str


@attrs.frozen
class RunStart(_RunEvent):
    type: Literal["run.start"] = "run.start"


@attrs.frozen
class StepStart(_RunEvent):
    step: int
    type: Literal["step.start"] = "step.start"


@attrs.frozen
class TextDelta(_RunEvent):
    text: str
    type: Literal["text.delta"] = "text.delta"


@attrs.frozen
class ReasoningDeltaEvent(_RunEvent):
    """A piece of the model's visible reasoning, as it arrives (before its text and calls).

    The pieces of a step join to the visible text of its ``ReasoningPart`` s; a model
    whose reasoning is hidden (redacted or encrypted) sends none. ``text.delta`` never
    carries reasoning.
    """

    text: str
    type: Literal["reasoning.delta"] = "reasoning.delta"


@attrs.frozen
class ToolCallEvent(_RunEvent):
    call: ToolCall
    type: Literal["tool.call"] = "tool.call"


@attrs.frozen
class ToolResultEvent(_RunEvent):
    call_id: str
    output: str
    is_error: bool = False
    type: Literal["tool.result"] = "tool.result"
    #: what the tool raised (or the ``ToolArgumentsError`` of arguments that did not fit);
    #: not compared and not saved
    exception: BaseException | None = attrs.field(default=None, eq=False, kw_only=True)


@attrs.frozen
class ApprovalRequested(_RunEvent):
    approval_id: str
    call: ToolCall
    type: Literal["approval.requested"] = "approval.requested"


@attrs.frozen
class InputQueued(_RunEvent):
    input_id: str
    type: Literal["input.queued"] = "input.queued"


@attrs.frozen
class InputApplied(_RunEvent):
    input_id: str
    type: Literal["input.applied"] = "input.applied"


@attrs.frozen
class ErrorEvent(_RunEvent):
    error: BaseException
    type: Literal["error"] = "error"


@attrs.frozen
class RunDone(_RunEvent):
    finish_reason: str
    result: ExecutionResult | None
    type: Literal["run.done"] = "run.done"


@attrs.frozen
class _SessionEvent:
    """What every session event carries: the id of the session it happened to."""

    session_id: str


@attrs.frozen
class CompactionStart(_SessionEvent):
    type: Literal["compaction.start"] = "compaction.start"


@attrs.frozen
class CompactionDone(_SessionEvent):
    result: CompactionResult
    type: Literal["compaction.done"] = "compaction.done"


@attrs.frozen
class ContextCleared(_SessionEvent):
    type: Literal["context.cleared"] = "context.cleared"


Event = Union[
    RunStart,
    StepStart,
    ReasoningDeltaEvent,
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
