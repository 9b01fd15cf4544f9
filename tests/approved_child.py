"""The agent of tests/test_approved_recovery.py, and its process that dies mid-turn.

``python approved_child.py URL LOG APPROVAL_ID`` approves ``APPROVAL_ID`` with
``agent.approvals.resolve()`` and continues the paused turn, whose ``pay`` tool
creates ``LOG.hanging`` and waits there until the test SIGKILLs the process.

Every run of ``pay`` is appended (fsynced) to ``LOG``: ``start <pid>`` as it
starts, ``paid <pid>`` when it returns.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    ToolCall,
    create_agent,
    tool,
)
from lousho_sessions.agent import Agent


def _log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{line} {os.getpid()}\n")
        f.flush()
        os.fsync(f.fileno())


def make_agent(store: Any, log: str, *, hang: bool = False) -> Agent:
    """The agent: the model asks for ``pay`` (which needs approval), then says what it got."""

    def model(request: ModelRequest) -> Message:
        last = request.messages[-1]
        if last.role == "user":
            return Message.assistant("", tool_calls=[ToolCall("pay-1", "pay", {"to": "bob"})])
        return Message.assistant(f"done: {last.text}")

    @tool(needs_approval=True)
    def pay(to: str) -> str:
        """Pay someone."""
        _log(log, "start")
        if hang:
            Path(log + ".hanging").touch()
            threading.Event().wait(120)  # nothing sets it: the test kills this process
        _log(log, "paid")
        return f"paid {to}"

    return create_agent(provider=FunctionProvider(model), tools=[pay], store=store)


if __name__ == "__main__":
    from lousho_sessions import open_store

    url, log, approval_id = sys.argv[1:4]
    agent = make_agent(open_store(url), log, hang=True)
    agent.approvals.resolve(approval_id, approved=True)
    raise SystemExit("the turn was not killed")
