"""An approved turn whose process died is an ordinary stale turn (issue 27 item 3).

A turn paused on an approval keeps its checkpoint ``awaiting-approval`` until its next
whole save, so when the process continuing it after ``approvals.resolve()`` dies (a real
process, SIGKILLed inside the approved tool), or when ``lousho approvals resolve``
decides it without ``--agent``, the checkpoint says "awaiting approval" of an approval
that is decided. Such a turn must be listed by ``stale_turns``, flagged by ``doctor``
and finished by ``sweep``, applying the decision once; on every store that outlives a
process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
from approved_child import make_agent
from recovery_procs import until
from test_admin import lousho, new_url

from lousho_sessions import open_store
from lousho_sessions.recovery import stale_turns, sweep

TESTS = Path(__file__).parent
KINDS = ("files", "sqlite", "postgres", "redis")


@pytest.fixture(params=KINDS)
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    found, drop = new_url(request.param, tmp_path)
    try:
        yield found
    finally:
        drop()


def starts(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def doctor_check(url: str, name: str) -> dict[str, Any]:
    done = lousho("doctor", "--store", url, "--json")
    (check,) = [c for c in json.loads(done.stdout) if c["check"] == name]
    return dict(check)


def finishes_once(store: Any, agent: Any, turn_id: str, log: Path) -> None:
    """``turn_id`` is stale, swept once, and its transcript holds the approved call's result."""
    session_id = turn_id.partition(".")[0]
    until(
        lambda: [t.turn_id for t in stale_turns(store)] == [turn_id],
        f"{turn_id} listed as stale",
        detail=lambda: repr(stale_turns(store)),
    )
    [swept] = sweep(store, agent=agent)
    assert (swept.turn_id, swept.outcome) == (turn_id, "finished"), swept
    assert swept.result is not None and swept.result.text == "done: paid bob"
    messages = store.sessions.load(session_id)
    assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
    assert messages[2].text == "paid bob"
    assert starts(log).count("paid") == 1  # the decision applied once
    assert stale_turns(store) == [] and sweep(store, agent=agent) == []
    assert store.checkpoints.list(f"{session_id}.") == []
    assert store.approvals.list(status="pending") == []


def test_a_resolver_killed_in_the_approved_tool_leaves_a_turn_sweep_finishes(
    url: str, tmp_path: Path
) -> None:
    log = tmp_path / "pay.log"
    store = open_store(url)
    try:
        agent = make_agent(store, str(log))
        paused = agent.session("u1").send("pay bob")
        assert paused.finish_reason == "awaiting-approval" and paused.approval_id
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
        }
        victim = fork_server.Popen(
            [str(TESTS / "approved_child.py"), url, str(log), paused.approval_id],
            env=env,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            until(
                lambda: Path(str(log) + ".hanging").exists() or victim.poll() is not None,
                "the resolver inside the approved tool",
            )
            assert victim.poll() is None, victim.communicate()[1]
            os.kill(victim.pid, signal.SIGKILL)
            assert victim.wait(timeout=60) == -signal.SIGKILL
        finally:
            if victim.poll() is None:
                victim.kill()
            victim.communicate(timeout=60)
        assert starts(log) == ["start"]
        assert agent.approvals.get(paused.approval_id).status == "approved"
        assert agent.approvals.list() == []  # nothing pending: only a sweep can finish it
        until(lambda: stale_turns(store) != [], "the dead resolver's lease to run out")
        check = doctor_check(url, "decided approvals")
        assert check["status"] == "warn" and "u1.turn-0" in check["detail"], check
        finishes_once(store, agent, "u1.turn-0", log)
        assert doctor_check(url, "decided approvals")["status"] == "ok"
    finally:
        store.close()


def test_an_approval_resolved_without_agent_is_finished_by_the_next_sweep(
    url: str, tmp_path: Path
) -> None:
    log = tmp_path / "pay.log"
    store = open_store(url)
    try:
        agent = make_agent(store, str(log))
        paused = agent.session("u2").send("pay bob")
        assert paused.approval_id is not None
        assert stale_turns(store) == []  # pending: a human decides, never swept
        assert sweep(store, agent=agent) == []
        done = lousho("approvals", "resolve", paused.approval_id, "--approve", "--store", url)
        assert done.returncode == 0, done.stderr
        assert starts(log) == []
        finishes_once(store, agent, "u2.turn-0", log)
    finally:
        store.close()
