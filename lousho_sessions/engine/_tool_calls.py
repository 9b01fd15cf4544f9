"""The tool calls of a model response: ids made unique, malformed arguments answered.

A call whose arguments are not JSON is answered with an error result the model
may act on (``malformed_text``), up to ``MAX_MALFORMED_TOOL_CALLS`` in one turn;
one more ends the turn with ``ProviderError`` (``check_malformed``).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from .._random import uuid4_hex
from ..errors import ProviderError
from ..messages import ToolCall
from ..tools._arguments import malformed_arguments_problem
from ._turn_state import TurnState

__all__ = ["MAX_MALFORMED_TOOL_CALLS", "check_malformed", "malformed_text", "unique_call_ids"]

#: Tool calls with malformed argument JSON answered with an error result in one turn;
#: one more ends the turn with ``ProviderError``.
MAX_MALFORMED_TOOL_CALLS = 3


def malformed_text(call: ToolCall) -> str:
    raw = call.raw_arguments or ""
    shown = raw if len(raw) <= 200 else raw[:200] + f"... ({len(raw)} characters)"
    return (
        f"Error: the arguments of this call to {call.name!r} are "
        f"{malformed_arguments_problem(raw)}: {shown!r}. The tool was not run; "
        "call it again with a JSON object that fits its schema."
    )


def check_malformed(state: TurnState, calls: Sequence[ToolCall], provider: str) -> None:
    """``ProviderError`` when ``calls`` take the turn past the malformed calls the model may retry."""
    malformed = [c for m in state.new for c in m.tool_calls if c.raw_arguments is not None]
    malformed += [c for c in calls if c.raw_arguments is not None]
    if len(malformed) <= MAX_MALFORMED_TOOL_CALLS:
        return
    last = malformed[-1]
    raw = last.raw_arguments or ""
    raise ProviderError(
        None,
        f"provider {provider!r}: the model sent {len(malformed)} tool calls with malformed "
        f"arguments in this turn (at most {MAX_MALFORMED_TOOL_CALLS} are sent back to it); "
        f"the last, to {last.name!r} (call {last.id}), was "
        f"{malformed_arguments_problem(raw)}: {raw[:200]!r}",
    )


def unique_call_ids(calls: Sequence[ToolCall], state: TurnState) -> tuple[ToolCall, ...]:
    """Give every call an id unique within the turn (some servers send none or repeat them)."""
    if not calls:
        return ()
    seen = {c.id for m in state.new for c in m.tool_calls}
    out: list[ToolCall] = []
    for index, call in enumerate(calls):
        call_id = call.id
        if not call_id or call_id in seen:
            call_id = f"call_{state.steps}_{index}_{uuid4_hex()[:8]}"
            call = attrs.evolve(call, id=call_id)
        seen.add(call_id)
        out.append(call)
    return tuple(out)
