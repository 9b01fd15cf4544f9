"""``lousho sessions rm ID --force`` while the session's turn runs (issue 27 item 5).

The command takes the session over with a new fence before deleting, so the running
turn's writes (its checkpoints, its commit: on a first turn the whole transcript) are
refused and nothing of the session comes back; once the turn has ended, ``prune``
removes the session's lease record too.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_admin import lousho, new_url

from lousho_sessions import (
    FunctionProvider,
    LeaseLostError,
    Message,
    ToolCall,
    create_agent,
    open_store,
    tool,
)

KINDS = ("files", "sqlite", "postgres", "redis")
WAIT = 30.0


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    found, drop = new_url(request.param, tmp_path)
    try:
        yield found
    finally:
        drop()


@pytest.mark.parametrize("first", [True, False], ids=["first-turn", "later-turn"])
def test_rm_force_during_a_turn_leaves_nothing_of_the_session(url: str, first: bool) -> None:
    inside, go = threading.Event(), threading.Event()

    @tool
    def lookup(q: str) -> str:
        """Look something up."""
        inside.set()
        assert go.wait(WAIT)
        return f"found {q}"

    def model(request: Any) -> Message:
        last = request.messages[-1]
        if last.role == "user" and last.text == "private data":
            return Message.assistant("", tool_calls=[ToolCall("l1", "lookup", {"q": "x"})])
        if last.role == "tool":  # one more checkpointed step after the tool
            return Message.assistant("", tool_calls=[ToolCall("l2", "lookup", {"q": "y"})])
        return Message.assistant(f"ok: {last.text}")

    store: Any = open_store(url)
    try:
        agent = create_agent(provider=FunctionProvider(model), tools=[lookup], store=store)
        session = agent.session("user-1")
        if not first:
            go.set()
            session.send("hello")
            go.clear()
        errors: list[BaseException] = []

        def turn() -> None:
            try:
                session.send("private data")
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=turn)
        worker.start()
        try:
            assert inside.wait(WAIT)
            done = lousho("sessions", "rm", "user-1", "--force", "--store", url, "--json")
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout) == [{"id": "user-1", "outcome": "deleted"}]
        finally:
            go.set()
            worker.join(WAIT)
        assert not worker.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], LeaseLostError), errors
        assert store.sessions.load("user-1") is None
        assert store.checkpoints.list("user-1") == []
        assert store.approvals.list(session_id="user-1", status=None) == []
        assert "user-1" not in store.sessions.list_ids()
        assert store.prune(0).leases == 1  # the turn ended: its lease record goes too
        assert store.prune(0).leases == 0
    finally:
        store.close()
