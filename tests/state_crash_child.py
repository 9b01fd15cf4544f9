"""A process whose durable turn changes ``ctx.state`` in a tool, then is killed (SIGKILL)
while the model answers: the change is only in the turn's checkpoint.

``python state_crash_child.py KIND PATH``: session "s1" of the store of ``KIND`` under ``PATH``.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from history_stores import open_store

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    ToolCall,
    ToolContext,
    create_agent,
    tool,
)


@tool
def bump(ctx: ToolContext) -> str:
    """Count a visit in the session's state."""
    ctx.state["visits"] = ctx.state.get("visits", 0) + 1
    return "counted"


def model(request: ModelRequest) -> Message:
    if request.messages[-1].role == "user":
        return Message.assistant("", tool_calls=[ToolCall("c1", "bump", {})])
    print("dying", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the tool's result is checkpointed, not committed
    raise AssertionError("unreachable")


def main() -> None:
    kind, path = sys.argv[1], Path(sys.argv[2])
    agent = create_agent(
        provider=FunctionProvider(model), tools=[bump], store=open_store(kind, path)
    )
    agent.session("s1").send("hello")


if __name__ == "__main__":
    main()
