"""A turn whose lease is taken over mid-turn gets ``LeaseLostError`` and writes nothing more.

The session's lease is force-released while the turn runs (as an expired lease
would be), another owner takes the session through the store's own ``turn_lock``
and writes with its newer fence; the first turn's next write is refused, its
caller gets the error, nothing is retried, and the checkpoint it left belongs to
the new owner (it is not deleted).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from storekit import WAIT, Kit, open_kit

from lousho_sessions import (
    ApprovalRequest,
    FunctionProvider,
    LeaseLostError,
    Message,
    ModelRequest,
    ToolCall,
    create_agent,
    tool,
)
from lousho_sessions.stores.base import AgentStore, TakenTurn, TakeTurn
from lousho_sessions.stores.lease import Lease

KINDS = ("memory", "files", "sqlite")


class Takeover:
    """Records the session's leases; ``take()`` loses the current one to a new owner."""

    def __init__(self, kit: Kit) -> None:
        self.kit = kit
        self.leases: list[Lease] = []
        self.original: Callable[..., Lease] = kit.sessions.turn_lock
        self.original_take: Callable[[TakeTurn], TakenTurn] = kit.sessions.take_turn
        kit.sessions.turn_lock = self.turn_lock
        # a store whose take_turn has its own fast path takes the lease without turn_lock
        kit.sessions.take_turn = self.take_turn

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        lease = self.original(id, timeout=timeout)
        self.leases.append(lease)
        return lease

    def take_turn(self, request: TakeTurn) -> TakenTurn:
        taken = self.original_take(request)
        if not self.leases or self.leases[-1] is not taken.lease:
            self.leases.append(taken.lease)
        return taken

    def take(self) -> None:
        """Force-release the turn's lease, then write as the new owner from another thread."""
        self.leases[-1].release()
        errors: list[BaseException] = []

        def new_owner() -> None:
            try:
                with self.original("s1", timeout=WAIT) as lease:
                    self.kit.sessions.append("s1", [Message.user("theirs")], 0, fence=lease.fence)
            except BaseException as exc:  # reported below
                errors.append(exc)

        thread = threading.Thread(target=new_owner)
        thread.start()
        thread.join(WAIT)
        assert not thread.is_alive() and not errors, errors


def agent_on(kit: Kit, **options: Any) -> Any:
    return create_agent(store=AgentStore(kit.sessions, kit.checkpoints, kit.approvals), **options)


@pytest.mark.parametrize("kind", KINDS)
def test_turn_taken_over_inside_a_tool_writes_nothing_more(kind: str, tmp_path: Path) -> None:
    kit = open_kit(kind, tmp_path)
    takeover = Takeover(kit)
    calls: list[int] = []
    runs: list[str] = []

    def model(request: ModelRequest) -> Message:
        calls.append(len(request.messages))
        return Message.assistant("", tool_calls=[ToolCall("c1", "slow", {})])

    @tool
    def slow() -> str:
        """Loses the session while it runs."""
        runs.append("slow")
        takeover.take()
        return "done"

    agent = agent_on(kit, provider=FunctionProvider(model), tools=[slow])
    try:
        with pytest.raises(LeaseLostError):
            agent.session("s1").send("mine")
        assert calls == [1] and runs == ["slow"]  # not retried
        assert [m.text for m in kit.sessions.load("s1") or []] == ["theirs"]
        # the checkpoint of the lost turn is the new owner's now: kept, and no tool result added
        assert kit.checkpoints.list("s1.") == ["s1.turn-0"]
        saved = kit.checkpoints.load("s1.turn-0")
        assert saved is not None and saved["results"] == {}
    finally:
        agent.close()
        kit.close()


@pytest.mark.parametrize("kind", KINDS)
def test_turn_taken_over_before_its_approval_creates_no_record(kind: str, tmp_path: Path) -> None:
    kit = open_kit(kind, tmp_path)
    takeover = Takeover(kit)

    def model(request: ModelRequest) -> Message:
        return Message.assistant("", tool_calls=[ToolCall("c1", "pay", {})])

    @tool(needs_approval=True)
    def pay() -> str:
        """Needs approval."""
        return "paid"

    def approve(request: ApprovalRequest) -> bool | None:
        takeover.take()
        return None  # ask a person: the turn would create an approval record now

    agent = agent_on(kit, provider=FunctionProvider(model), tools=[pay], approve=approve)
    try:
        with pytest.raises(LeaseLostError):
            agent.session("s1").send("mine")
        assert kit.approvals.list(status=None) == []
        assert [m.text for m in kit.sessions.load("s1") or []] == ["theirs"]
        assert kit.checkpoints.list("s1.") == ["s1.turn-0"]
    finally:
        agent.close()
        kit.close()


@pytest.mark.parametrize("kind", KINDS)
def test_commit_of_a_turn_taken_over_is_refused(kind: str, tmp_path: Path) -> None:
    kit = open_kit(kind, tmp_path)
    takeover = Takeover(kit)

    def model(request: ModelRequest) -> str:
        takeover.take()  # while the final answer is made
        return "answer"

    agent = agent_on(kit, provider=FunctionProvider(model))
    try:
        with pytest.raises(LeaseLostError):
            agent.session("s1").send("mine")
        assert [m.text for m in kit.sessions.load("s1") or []] == ["theirs"]
        assert kit.checkpoints.list("s1.") == ["s1.turn-0"]
    finally:
        agent.close()
        kit.close()
