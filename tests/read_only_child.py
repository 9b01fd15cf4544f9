"""A durable turn in a process of its own that is killed (SIGKILL) inside its tool.

``python read_only_child.py <db> <log> <read_only: 1|0>``: session "ro" on the SQLite
file ``db``; the model asks for ``lookup`` once, then answers; every model call and
tool run is appended (and fsynced) to ``log``. The tool kills the process the first
time it runs (the log says so before). ``tests/test_read_only_tools.py`` resumes the
turn in its own process with the same model.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from lousho_sessions import FunctionProvider, Message, ModelRequest, ToolCall, create_agent, tool
from lousho_sessions.sqlite import SqliteStore


def note(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def build(db: str, logfile: str, read_only: bool, *, die: bool) -> Any:
    """An agent whose model asks for ``lookup`` and then answers (``die``: killed inside
    the tool's first run)."""

    def model(request: ModelRequest) -> Message:
        note(logfile, f"model {[m.role for m in request.messages]}")
        if request.messages[-1].role == "tool":
            return Message.assistant("the answer")
        return Message.assistant("", tool_calls=[ToolCall("c1", "lookup", {"key": "k"})])

    @tool(read_only=read_only)
    def lookup(key: str) -> str:
        """Look ``key`` up."""
        note(logfile, "tool")
        if die:
            os.kill(os.getpid(), signal.SIGKILL)
        return f"{key}: found"

    return create_agent(provider=FunctionProvider(model), tools=[lookup], store=SqliteStore(db))


def main(argv: list[str]) -> None:
    db, logfile, read_only = argv[1], argv[2], argv[3] == "1"
    build(db, logfile, read_only, die=True).session("ro").send("Look it up")
    note(logfile, "not killed")


if __name__ == "__main__":
    main(sys.argv)
