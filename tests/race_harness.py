"""Processes racing to resolve one approval (imported by test_races.py in processes forked from tests/fork_server.py)."""

from __future__ import annotations

import os
from typing import Any

from crash_harness import open_store

from lousho_sessions import (
    ApprovalAlreadyResolvedError,
    ScriptedProvider,
    ToolCall,
    create_agent,
    tool,
)


def make_agent(kind: str, path: str, logfile: str, replies: list[Any]) -> Any:
    @tool(needs_approval=True)
    def pay(amount: int) -> str:
        """Pay."""
        with open(logfile, "a", encoding="utf-8") as f:
            f.write(f"pay {amount} pid {os.getpid()}\n")
            f.flush()
            os.fsync(f.fileno())
        return "paid"

    return create_agent(
        provider=ScriptedProvider(replies), tools=[pay], store=open_store(kind, path)
    )


def pause(kind: str, path: str, logfile: str, round_: int) -> str:
    """Start a turn that waits on an approval; return the approval id."""
    from lousho_sessions import Message

    call = Message.assistant("", tool_calls=[ToolCall(f"pay-{round_}", "pay", {"amount": round_})])
    agent = make_agent(kind, path, logfile, [call])
    result = agent.session(f"race-{round_}").send("pay")
    assert result.approval_id is not None
    return str(result.approval_id)


def racer(
    kind: str, path: str, logfile: str, rounds: int, barrier: Any, ids: Any, results: Any
) -> None:
    for round_ in range(rounds):
        barrier.wait(60)
        approval_id = ids.get(timeout=60)
        agent = make_agent(kind, path, logfile, ["done"])
        try:
            agent.approvals.resolve(id=approval_id, approved=True)
            results.put((round_, "won"))
        except ApprovalAlreadyResolvedError:
            results.put((round_, "lost"))
        except BaseException as exc:
            results.put((round_, f"error {type(exc).__name__}: {exc}"))
        barrier.wait(60)
