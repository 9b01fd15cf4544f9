"""A process whose durable turn changes ``ctx.state`` in a tool and is killed (SIGKILL):

- ``model``: while the model answers after the tool; the change is only in the turn's
  checkpoint. It prints ``dying`` just before it dies.
- ``commit``: as the turn commits, at the call of its session store's ``commit_turn``, with
  the finished turn's messages and state in hand; whatever was written before that call
  is in the store. It prints ``committing`` just before it dies.

``python state_kill_child.py WHEN KIND PATH``: session "s1" of the store of ``KIND`` under
``PATH``, killed at ``WHEN`` (``model`` or ``commit``).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

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
from lousho_sessions.stores.adapters import store_parts


@tool
def bump(ctx: ToolContext) -> str:
    """Count a visit in the session's state."""
    ctx.state["visits"] = ctx.state.get("visits", 0) + 1
    return "counted"


def model(request: ModelRequest) -> Message:
    if request.messages[-1].role == "user":
        return Message.assistant("", tool_calls=[ToolCall("c1", "bump", {})])
    return Message.assistant("done")


def dying_model(request: ModelRequest) -> Message:
    if request.messages[-1].role == "user":
        return model(request)
    print("dying", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # the tool's result is checkpointed, not committed
    raise AssertionError("unreachable")


def die_at_commit(store: Any) -> None:
    """The store's sessions part, as it is but for ``commit_turn``: the process dies there."""
    part = store_parts(store).sessions
    right = type(part)

    def commit_turn(self: Any, request: Any) -> Any:
        print("committing", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        raise AssertionError("unreachable")

    part.__class__ = type(f"Dying{right.__name__}", (right,), {"commit_turn": commit_turn})


def main() -> None:
    when, kind, path = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if when not in ("model", "commit"):
        raise SystemExit(f"WHEN must be 'model' or 'commit', got {when!r}")
    store = open_store(kind, path)
    if when == "commit":
        die_at_commit(store)
    answer = dying_model if when == "model" else model
    agent = create_agent(provider=FunctionProvider(answer), tools=[bump], store=store)
    agent.session("s1").send("hello")


if __name__ == "__main__":
    main()
