"""The effect ledger: what a resumed turn does with a call a crash may have interrupted.

A call to a tool declared ``idempotent=False`` records its intent before it runs
(``TurnCheckpoints.save_started``: the call id joins ``TurnState.started``); its
result is recorded when it ends, as every call's is. Resuming, a call with a result
replays it; one with an intent and no result may have run:

* ``reconcile(ctx)`` given: it asks the outside system (by ``ctx.idempotency_key``);
  a text is the call's result, ``None`` means it did not happen, and it runs;
* else the turn parks as awaiting approval (``RERUN_NOTE``): approving runs the call
  again (recording a new intent, so a second crash asks again), denying gives the
  model an error result.

Calls to idempotent tools (the default) record no intent and simply run again.

Calls to tools declared ``read_only`` change nothing: a step of only such calls
(``reads_only``) does not save the model's response before they run; it is saved with
their results once the next request has left (``TurnCheckpoints.save(defer=True)``), and
a crash while they run asks the model again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol

from ..messages import ToolCall
from ..stores.base import BaseApprovalStore
from ..tools import Tool, ToolContext
from ._approvals import approval_id_for
from ._turn_config import TurnConfig
from ._turn_state import TurnState

__all__ = [
    "DENIED_TEXT",
    "RERUN_NOTE",
    "LedgerTurn",
    "Rerun",
    "ledger",
    "reads_only",
    "rerun_approval_id",
    "rerun_decision",
]

#: The note of the approval a parked call waits on.
RERUN_NOTE = "this call may have run; approve to run it again"
DENIED_TEXT = (
    "Not run again: this call may have run before its process stopped, "
    "and running it again was denied"
)

Rerun = Literal["pending", "approved", "denied"]


def rerun_approval_id(run_id: str, call: ToolCall, started: list[str]) -> str:
    """The approval id for running ``call`` again after its ``n``-th start was interrupted."""
    return approval_id_for(run_id, f"{call.id}#rerun-{started.count(call.id)}")


def rerun_decision(
    approvals: BaseApprovalStore, approval_id: str
) -> tuple[Rerun, dict[str, Any] | None]:
    """Whether the approval ``approval_id`` to run a call again is pending, approved or
    denied, and its record (``None`` when none was made yet)."""
    record = approvals.get(approval_id)
    if record is None or record.get("status") not in ("approved", "denied"):
        return "pending", record
    return ("approved" if record["status"] == "approved" else "denied"), record


class LedgerTurn(Protocol):
    """What the ledger needs of the turn (``_turn.Turn``)."""

    state: TurnState
    config: TurnConfig

    def context(self, call: ToolCall) -> ToolContext[Any]: ...

    def record(
        self,
        call: ToolCall,
        output: str,
        is_error: bool,
        *,
        checkpoint: bool,
        exception: BaseException | None = None,
    ) -> None: ...


def reads_only(calls: Sequence[ToolCall], tools: Mapping[str, Tool]) -> bool:
    """True when every one of ``calls`` is to a known tool declared ``read_only``."""
    for call in calls:
        tool = tools.get(call.name)
        if tool is None or not tool.read_only:
            return False
    return True


def ledger(turn: LedgerTurn, calls: list[ToolCall]) -> tuple[list[ToolCall], ToolCall | None]:
    """The effect ledger (``_effects``): of ``calls``, those to run now, and the first
    call parked until a human decides whether it runs again; records the intents."""
    state, config = turn.state, turn.config
    run: list[ToolCall] = []
    parked: ToolCall | None = None
    for call in calls:
        tool = config.tools[call.name]
        if tool.idempotent or call.id not in state.started:
            run.append(call)
        elif tool.reconcile is not None:  # it may have run: ask the outside system
            text = tool.reconcile(turn.context(call))
            if text is None:
                run.append(call)  # it did not happen
            else:
                turn.record(call, str(text), False, checkpoint=True)
        else:
            approval_id = rerun_approval_id(state.run_id, call, state.started)
            decision, record = rerun_decision(config.approvals, approval_id)
            if decision == "approved":
                run.append(call)
            elif decision == "denied":
                reason = record.get("reason") if record else None
                text = DENIED_TEXT + (f": {reason}" if reason else ".")
                turn.record(call, text, True, checkpoint=True)
            else:
                parked = parked or call
    starting = [c.id for c in run if not config.tools[c.name].idempotent]
    if starting:
        state.started.extend(starting)
        if config.checkpoints is not None:
            config.checkpoints.save_started(state, starting)
    return run, parked
