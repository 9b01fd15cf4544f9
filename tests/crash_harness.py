"""A durable turn run in a real process that dies at a chosen point (crash tests).

``python crash_harness.py turn <kind> <path> <log> <point> <how>`` runs one turn of
session "crash" on a file or SQLite store and dies at ``point`` (``os._exit`` or
SIGKILL). ``python crash_harness.py resume <kind> <path> <log>`` finishes it in a
new process and prints the transcript as JSON.

The turn: the model calls ``tool_a``, then ``tool_b``, then answers. Every model
call and tool run is appended (and fsynced) to ``log``, so the test can count
what ran in both processes. The crash points hook the real stores from outside.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from storekit import open_kit

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    ToolCall,
    ToolContext,
    create_agent,
    tool,
)
from lousho_sessions.stores.base import AgentStore

#: Points a turn can die at, in turn order (checkpoint writes are numbered from 1).
POINTS = (
    "after-input",  # checkpoint 1: the user message is taken
    "inside-model-1",
    "after-model-1",  # checkpoint 2: the response asking for tool_a
    "inside-tool-a",
    "after-tool-a",  # checkpoint 3: tool_a's result
    "after-model-2",  # checkpoint 4: the response asking for tool_b (drops tool_a's record)
    "between-tools",  # tool_b about to start, tool_a's result recorded
    "inside-tool-b",
    "after-last-tool",  # checkpoint 5: tool_b's result
    "inside-model-3",  # the final answer is being made
    "final-save-before",  # the final answer arrived (not checkpointed): the commit starts
    "final-append-only",  # files: appended, the checkpoints not deleted yet (SQLite: one write)
    "final-save-after",  # the commit is done: transcript appended, checkpoints deleted
)
#: Points where the commit is one transaction, so there is no moment to die at.
ONE_TRANSACTION = {"final-append-only": ("sqlite",)}
_AFTER_SAVE = {"after-input": 1, "after-model-1": 2, "after-tool-a": 3, "after-model-2": 4, "after-last-tool": 5}  # fmt: skip


def log(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def die(how: str) -> None:
    if how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    os._exit(17)


def open_store(kind: str, path: str) -> AgentStore:
    """The store of ``kind`` under the directory ``path``, as storekit builds it for every test."""
    kit = open_kit(kind, Path(path))
    return AgentStore(kit.sessions, kit.checkpoints, kit.approvals)


def build(kind: str, path: str, logfile: str, point: str | None, how: str) -> Any:
    store = open_store(kind, path)

    def crash() -> None:
        if point:
            die(how)

    def model(request: ModelRequest) -> Message:
        done = sum(1 for m in request.messages if m.role == "tool")
        log(logfile, f"model-{done + 1}")
        if point == f"inside-model-{done + 1}":
            crash()
        if done == 0:
            return Message.assistant("", tool_calls=[ToolCall("call-a", "tool_a", {})])
        if done == 1:
            return Message.assistant("", tool_calls=[ToolCall("call-b", "tool_b", {})])
        return Message.assistant("all done")

    @tool
    def tool_a(ctx: ToolContext) -> str:
        """First tool."""
        log(logfile, f"tool_a {ctx.idempotency_key}")
        if point == "inside-tool-a":
            crash()
        return "A"

    @tool
    def tool_b(ctx: ToolContext) -> str:
        """Second tool."""
        if point == "between-tools":
            crash()
        log(logfile, f"tool_b {ctx.idempotency_key}")
        if point == "inside-tool-b":
            crash()
        return "B"

    assert store.checkpoints is not None and store.sessions is not None
    if point in _AFTER_SAVE:
        hook_checkpoint_writes(store.checkpoints, _AFTER_SAVE[point], crash)
    if point in ("final-save-before", "final-save-after", "final-append-only"):
        hook_commit(store.sessions, point, crash)
    return create_agent(provider=FunctionProvider(model), tools=[tool_a, tool_b], store=store)


def hook_checkpoint_writes(checkpoints: Any, at: int, crash: Callable[[], None]) -> None:
    """Die after the ``at``-th checkpoint write (``save`` or ``save_and_delete``, outermost)."""
    count = [0]
    depth = [0]

    def hooked(original: Callable[..., None]) -> Callable[..., None]:
        def write(*args: Any, **kwargs: Any) -> None:
            depth[0] += 1
            try:
                original(*args, **kwargs)
            finally:
                depth[0] -= 1
            if depth[0] == 0:
                count[0] += 1
                if count[0] == at:
                    crash()

        return write

    checkpoints.save = hooked(checkpoints.save)
    checkpoints.save_and_delete = hooked(checkpoints.save_and_delete)


def die_in_the_call_after(provider: Any, checkpoints: Any, at: int) -> None:
    """SIGKILL this process at the first event of the model call under way when the
    ``at``-th checkpoint write ends (a step's last tool result is written once the next
    call's request has left): the server has answered that call, its answer is lost."""
    saved = threading.Event()
    hook_checkpoint_writes(checkpoints, at, saved.set)
    stream = provider.stream

    def killing(request: Any, signal_: Any) -> Any:
        for event in stream(request, signal_):
            if saved.is_set():
                os.kill(os.getpid(), signal.SIGKILL)
            yield event

    provider.stream = killing  # on the instance: the class still says it reports sends


def hook_commit(sessions: Any, point: str, crash: Callable[[], None]) -> None:
    """Die as the turn's commit (``commit_turn``) starts, after its append, or after it."""
    original_commit = sessions.commit_turn
    original_append = sessions.append

    def commit(*args: Any, **kwargs: Any) -> object:
        if point == "final-save-before":
            crash()
        revision = original_commit(*args, **kwargs)
        crash()
        return revision

    def append(*args: Any, **kwargs: Any) -> None:
        original_append(*args, **kwargs)
        if point == "final-append-only":
            crash()

    sessions.commit_turn = commit
    sessions.append = append


def main(argv: list[str]) -> None:
    mode, kind, path, logfile = argv[:4]
    if mode == "turn":
        point, how = argv[4], argv[5]
        agent = build(kind, path, logfile, point, how)
        agent.session("crash").send("go")
        print(json.dumps({"finished": True}))
        return
    agent = build(kind, path, logfile, None, "exit")
    session = agent.session("crash")
    result = session.resume()
    messages = session.load()
    out = {
        "resumed": result is not None,
        "text": result.text if result else None,
        "transcript": [
            [m.role, m.text, [c.id for c in m.tool_calls], m.tool_call_id] for m in messages
        ],
        "pending": session.pending() is not None,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1:])
