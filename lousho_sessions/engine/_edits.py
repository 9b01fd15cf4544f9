"""Calls approved with edited arguments: the turn runs them so, and its transcript says so.

An approver may replace a call's arguments (``agent.approvals.resolve(..., arguments=)``).
The approval store keeps them in the record, written in the same compare-and-set as the
decision, so a process that dies after ``resolve()`` loses nothing; the turn reads them
with the decision into ``TurnState.decisions`` (its checkpoint). The call then runs with
them, and the assistant message that asked for it is replaced by one whose call holds
them, the model's kept in ``ToolCall.extra["original_arguments"]``: the model reads what
ran. The replaced message is saved with the turn's checkpoint before the call runs.
``decide`` gives a call's decision: none needed, pending, or the one recorded or given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..errors import PropagatingToolError
from ..messages import Message, ToolCall, thaw
from ..tools import Tool
from ._approvals import ApprovalRequest, approval_id_for
from ._turn_config import TurnConfig
from ._turn_state import TurnState

__all__ = ["ORIGINAL_ARGUMENTS", "decide", "decision_of", "edited", "show_edits"]

#: The key of ``ToolCall.extra`` holding the model's arguments of an edited call.
ORIGINAL_ARGUMENTS = "original_arguments"


def decision_of(record: Mapping[str, Any]) -> dict[str, Any]:
    """The decision an approval ``record`` holds (approved or denied), as the turn keeps it."""
    decision = {"approved": record["status"] == "approved", "reason": record.get("reason")}
    arguments = record.get("arguments")
    if decision["approved"] and isinstance(arguments, Mapping):
        decision["arguments"] = dict(arguments)
    return decision


def edited(call: ToolCall, decision: Mapping[str, Any]) -> ToolCall:
    """``call`` as the approver of ``decision`` edited it; ``call`` itself when not edited."""
    arguments = decision.get("arguments")
    if not decision.get("approved") or not isinstance(arguments, Mapping):
        return call
    if ORIGINAL_ARGUMENTS in call.extra and thaw(call.arguments) == thaw(arguments):
        return call  # edited already (a resumed turn whose checkpoint holds the edited call)
    original = call.extra.get(ORIGINAL_ARGUMENTS, call.arguments)
    extra = {**thaw(call.extra), ORIGINAL_ARGUMENTS: thaw(original)}
    return attrs.evolve(call, arguments=arguments, extra=extra)


def show_edits(
    state: TurnState, config: TurnConfig, assistant: Message, calls: Sequence[ToolCall]
) -> Message:
    """Put the edited ones of ``calls`` in ``assistant`` (the last message of ``state.new``)
    and save the checkpoint; ``assistant`` as it is now."""
    by_id = {c.id: c for c in calls}
    tool_calls = [by_id.get(c.id, c) for c in assistant.tool_calls]
    if all(a is b for a, b in zip(tool_calls, assistant.tool_calls, strict=True)):
        return assistant
    assistant = attrs.evolve(assistant, tool_calls=tool_calls)
    state.new[-1] = assistant
    if config.checkpoints is not None:
        config.checkpoints.save(state)
    return assistant


def decide(
    state: TurnState, config: TurnConfig, call: ToolCall, tool: Tool
) -> dict[str, Any] | str | None:
    """Whether ``call`` may run: None, no approval needed; "pending", wait; else the decision
    (kept in ``state.decisions``: asked once)."""
    if call.id in state.decisions:
        return state.decisions[call.id]
    try:
        needed = tool.requires_approval(call.arguments)
    except Exception as exc:
        raise PropagatingToolError(f"needs_approval of tool {tool.name!r} raised: {exc}") from exc
    if not needed:
        return None
    approval_id = approval_id_for(state.run_id, call.id)
    record = config.approvals.get(approval_id)
    if record is not None and record.get("status") in ("approved", "denied"):
        decision = decision_of(record)
    elif config.approve is not None:
        request = ApprovalRequest(approval_id, state.session_id, state.turn_id, state.run_id, call)
        answer = config.approve(request)
        if answer is None:
            return "pending"
        decision = {"approved": bool(answer), "reason": None}
    else:
        return "pending"
    state.decisions[call.id] = decision
    return decision
