"""The per-turn and per-session limits a turn checks before each model call and tool run."""

from __future__ import annotations

from ..messages import NO_USAGE
from ._turn_config import TurnConfig
from ._turn_state import TurnState

__all__ = ["limit_reached", "tool_calls_left"]


def limit_reached(state: TurnState, config: TurnConfig) -> str | None:
    """The limit (turn or session) this turn has reached, by name; ``None`` while none is."""
    if config.limits is None and config.session_limits is None:
        return None  # the common case: no limits at all
    spent, steps, calls = config.session_spent
    for limits, base_usage, base_steps, base_calls in (
        (config.limits, NO_USAGE, 0, 0),
        (config.session_limits, spent, steps, calls),
    ):
        if limits is None:
            continue
        usage = base_usage + state.usage
        if limits.max_cost_usd is not None and usage.cost_usd >= limits.max_cost_usd:
            return "max_cost_usd"
        if limits.max_tokens is not None and usage.total_tokens >= limits.max_tokens:
            return "max_tokens"
        if limits.max_steps is not None and base_steps + state.steps >= limits.max_steps:
            return "max_steps"
        if (
            limits.max_tool_calls is not None
            and base_calls + state.tool_calls >= limits.max_tool_calls
        ):
            return "max_tool_calls"
    return None


def tool_calls_left(state: TurnState, config: TurnConfig) -> int | None:
    """How many more tools may run under ``max_tool_calls`` (turn and session); None: no cap."""
    left: int | None = None
    for limits, base in ((config.limits, 0), (config.session_limits, config.session_spent[2])):
        if limits is not None and limits.max_tool_calls is not None:
            room = max(0, limits.max_tool_calls - base - state.tool_calls)
            left = room if left is None else min(left, room)
    return left
