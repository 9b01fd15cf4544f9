"""What a turn is given besides its state: ``TurnConfig``, and how its tools run.

``Turn`` (``_turn``) reads everything outside its loop from a ``TurnConfig``: the
provider, the tools and how they run (``run_tools``: inline by default, a pool
when the runtime gives one), the approval store, limits, checkpoints, the event
sink and the inbox of queued input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import attrs

from ..abort import AbortSignal
from ..events import Event
from ..messages import Usage
from ..pricing import Pricing
from ..providers.base import Provider
from ..results import Limits
from ..stores.base import BaseApprovalStore
from ..telemetry._spans import TurnTrace
from ..tools import Tool, ToolLoop
from ._approvals import ApprovalRequest, TurnKey
from ._checkpoints import TurnCheckpoints
from ._inbox import Inbox
from ._output import OutputSpec

__all__ = ["RunTools", "ToolOutcome", "TurnConfig", "run_tools_inline"]

ToolOutcome = tuple[str, bool]  # (output, is_error)
RunTools = Callable[
    [Sequence[Callable[[], ToolOutcome]]], Iterator[tuple[int, "ToolOutcome | BaseException"]]
]


def run_tools_inline(
    fns: Sequence[Callable[[], ToolOutcome]],
) -> Iterator[tuple[int, ToolOutcome | BaseException]]:
    """Run tools one after another on this thread (the default when no pool is given)."""
    for index, fn in enumerate(fns):
        try:
            outcome: ToolOutcome | BaseException = fn()
        except Exception as exc:  # handed to the turn, which decides
            outcome = exc
        yield index, outcome


@attrs.define
class TurnConfig:
    """What a turn needs beyond its state. (``TurnRunner.run`` makes one a turn, passing every
    field by position: a new field goes in there too, in its place.)"""

    provider: Provider
    system: str | None
    tools: Mapping[str, Tool]
    signal: AbortSignal
    approvals: BaseApprovalStore
    settings: Mapping[str, Any] = attrs.field(factory=dict)
    max_steps: int = 20
    limits: Limits | None = None
    session_limits: Limits | None = None
    #: what the session spent before this turn: usage, model calls, tool calls
    session_spent: tuple[Usage, int, int] = (Usage(), 0, 0)
    model_name: str | None = None
    pricing: Mapping[str, Pricing] | None = None
    approve: Callable[[ApprovalRequest], bool | None] | None = None
    checkpoints: TurnCheckpoints | None = None
    emit: Callable[[Event], None] | None = None
    run_tools: RunTools = run_tools_inline
    inbox: Inbox | None = None
    #: where async tools run; None: a new event loop per call
    tool_loop: ToolLoop | None = None
    #: which turn this is, for the approval records it makes
    turn: TurnKey | None = None
    #: the caller's object for tools (``ToolContext.context``); never saved
    context: Any = None
    #: reads the session's stored state for ``ToolContext.state`` (None: no session)
    load_state: Callable[[], dict[str, Any]] | None = None
    #: this run's spans and measurements; None when the agent traces nothing
    trace: TurnTrace | None = None
    #: the type the final answer is parsed into (``output_type=``); None: free text
    output: OutputSpec | None = None
