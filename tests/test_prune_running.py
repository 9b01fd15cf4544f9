"""``prune`` during a running turn, and the lease records it leaves (issue 27 item 4).

A session whose turn runs right now is never pruned, however old (the kit's
``test_prune_keeps_a_session_whose_turn_holds_its_lease`` checks each store's part);
here a real agent's turn, whose tool runs while ``prune(0)`` does, commits its transcript.
And the lease record (the last fence) of a session that no longer exists is removed by
``prune`` on every store, while fences keep growing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_admin import new_url

from lousho_sessions import FunctionProvider, Message, ToolCall, create_agent, open_store, tool

KINDS = ("memory", "files", "sqlite", "postgres", "redis")
WAIT = 30.0


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    url, drop = ("memory:", None) if request.param == "memory" else new_url(request.param, tmp_path)
    opened = open_store(url)
    try:
        yield opened
    finally:
        opened.close()
        if drop is not None:
            drop()


def test_a_turn_running_while_prune_runs_keeps_its_session_and_commits(store: Any) -> None:
    inside, go = threading.Event(), threading.Event()
    ran: list[str] = []

    @tool
    def pay(to: str) -> str:
        """Pay someone."""
        ran.append(to)
        inside.set()
        assert go.wait(WAIT)
        return f"paid {to}"

    def model(request: Any) -> Message:
        last = request.messages[-1]
        if last.role == "user" and last.text == "pay bob":
            return Message.assistant("", tool_calls=[ToolCall("p1", "pay", {"to": "bob"})])
        return Message.assistant(f"ok: {last.text}")

    agent = create_agent(provider=FunctionProvider(model), tools=[pay], store=store)
    session = agent.session("old")
    session.send("hello")  # a session with a transcript: the prune below finds it old
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(session.send("pay bob")))
    worker.start()
    try:
        assert inside.wait(WAIT)
        pruned = store.prune(0)  # everything is older than 0 s: only the held session stays
        assert pruned.sessions == 0 and pruned.checkpoints == 0, pruned
    finally:
        go.set()
        worker.join(WAIT)
    assert results and results[0].text == "ok: paid bob"
    assert [m.text for m in session.load()] == [
        "hello",
        "ok: hello",
        "pay bob",
        "",
        "paid bob",
        "ok: paid bob",
    ]
    assert ran == ["bob"]
    assert store.prune(0).sessions == 1  # no turn holds it now
    assert store.sessions.load("old") is None


def test_prune_removes_the_lease_records_of_sessions_that_are_gone(store: Any) -> None:
    sessions = store.sessions
    fences = []
    for _ in range(2):
        with sessions.turn_lock("gone", timeout=WAIT) as lease:
            sessions.append(
                "gone", [Message.user("x")], len(sessions.load("gone") or []), fence=lease.fence
            )
            fences.append(lease.fence)
    with sessions.turn_lock("kept", timeout=WAIT) as lease:
        sessions.append("kept", [Message.user("y")], 0, fence=lease.fence)
    sessions.delete("gone")
    assert store.prune(3600).leases == 1  # the deleted session's; the live one stays
    assert store.prune(3600).leases == 0
    assert sessions.load("kept") is not None
    with sessions.turn_lock("gone", timeout=WAIT) as lease:
        assert lease.fence > fences[-1]  # fences still grow
        sessions.append("gone", [Message.user("z")], 0, fence=lease.fence)
    with sessions.turn_lock("kept", timeout=WAIT) as lease:
        assert lease.fence > 0
