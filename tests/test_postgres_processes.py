"""PostgresStore across real processes: one turn at a time, crashes, stale workers, races.

Needs the PostgreSQL server of ``tests/services_pg.py``; each test uses a schema
of its own. Processes fork from tests/fork_server.py and report through queues.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import fork_server
import pg_workers
import pytest
from services_pg import fresh_schema, postgres_url

from lousho_sessions import FunctionProvider, Message, SessionBusyError, create_agent
from lousho_sessions.postgres import SCHEMA_VERSION, PostgresStore
from lousho_sessions.stores.base import AgentStore

SPAWN = fork_server.CONTEXT
WAIT = 60.0
TTL = 1.5  # seconds: short, so a dead or stopped holder's lease runs out quickly


@pytest.fixture
def pg_schema() -> Iterator[str]:
    """A schema of this test's own on the server, dropped after it."""
    yield from fresh_schema()


def store(schema: str, ttl: float = TTL) -> PostgresStore:
    return PostgresStore(postgres_url(), schema=schema, max_size=2, lease_ttl=ttl)


def results(out: Any, n: int) -> list[Any]:
    """``n`` reports from ``out``; a worker's traceback fails the test."""
    found = [out.get(timeout=WAIT) for _ in range(n)]
    errors = [detail for state, detail in found if state == "error"]
    assert not errors, "\n".join(errors)
    return [detail for _, detail in found]


def until(condition: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``condition`` (it asks the store) until true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        pause.wait(0.05)


def expect(log: Any, wanted: tuple[str, str]) -> list[Any]:
    """Reports from ``log`` up to ``wanted``; fails on a worker's traceback."""
    seen = []
    while True:
        item = log.get(timeout=WAIT)
        assert item[0] != "error", item[1]
        seen.append(item)
        if item == wanted:
            return seen


@pytest.fixture
def processes() -> Iterator[list[Any]]:
    """Started processes, killed and joined after the test whatever happened."""
    started: list[Any] = []
    yield started
    for p in started:
        if p.is_alive():
            with_signal(p.pid, signal.SIGCONT)
            p.kill()
        p.join(WAIT)


def with_signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def start(processes: list[Any], target: Callable[..., None], *args: Any) -> Any:
    p = SPAWN.Process(target=target, args=args)
    p.start()
    processes.append(p)
    return p


def can_take(s: PostgresStore, id: str) -> bool:
    try:
        s.turn_lock(id, timeout=0).release()
    except SessionBusyError:
        return False
    return True


def test_eight_processes_send_on_one_session(pg_schema: str, processes: list[Any]) -> None:
    """8 processes x 25 sends through the agent on one session id: 400 messages, strict pairs."""
    workers, turns = 8, 25
    store(pg_schema).close()  # create the schema once, outside the timed part
    barrier, out = SPAWN.Barrier(workers), SPAWN.Queue()
    for n in range(workers):
        start(processes, pg_workers.send_turns, pg_schema, n, turns, barrier, out)
    results(out, workers)
    with store(pg_schema) as s:
        messages = s.sessions.load("shared") or []
    assert len(messages) == 2 * workers * turns
    for user, answer in zip(messages[::2], messages[1::2], strict=True):
        assert (user.role, answer.role) == ("user", "assistant")
        assert answer.text == user.text
    tags = [m.text for m in messages[::2]]
    assert sorted(tags) == sorted(f"w{w}-t{t}" for w in range(workers) for t in range(turns))
    for w in range(workers):  # each process's turns in its own order
        assert [t for t in tags if t.startswith(f"w{w}-")] == [f"w{w}-t{t}" for t in range(turns)]


def test_sixteen_processes_open_a_new_schema_at_once(pg_schema: str, processes: list[Any]) -> None:
    """16 processes open a schema nobody made yet: one of them migrates, none fails."""
    n = 16
    barrier, out = SPAWN.Barrier(n), SPAWN.Queue()
    for _ in range(n):
        start(processes, pg_workers.open_at_once, pg_schema, barrier, out)
    applied = results(out, n)
    # each version applied once, by one process (one transaction per version: the
    # process that applied version 1 may not be the one that applies version 2)
    assert sum(applied) == SCHEMA_VERSION
    assert sum(1 for a in applied if a) <= SCHEMA_VERSION
    with store(pg_schema) as s, s.connection() as conn:
        rows = conn.execute(
            f'SELECT version FROM "{pg_schema}".schema_version ORDER BY version'
        ).fetchall()
    assert rows == [(v,) for v in range(1, SCHEMA_VERSION + 1)]


def test_eight_processes_race_each_approval(pg_schema: str, processes: list[Any]) -> None:
    """Each round 8 processes resolve one pending approval at once: exactly one wins."""
    workers, rounds = 8, 10
    barrier, out = SPAWN.Barrier(workers + 1), SPAWN.Queue()
    with store(pg_schema) as s:
        for n in range(workers):
            start(processes, pg_workers.race_approvals, pg_schema, rounds, barrier, out, n)
        for n in range(rounds):
            s.approvals.create(
                {"id": f"r{n}", "session_id": "s1", "status": "pending", "created_at": f"{n:03}"}
            )
            barrier.wait(WAIT)  # go
            barrier.wait(WAIT)  # all tried
        won = results(out, workers)
        winners = sorted(r for rounds_won in won for r in rounds_won)
        assert winners == list(range(rounds))
        records = s.approvals.list(status=None)
    assert [r["status"] for r in records] == ["approved"] * rounds
    assert all(r["reason"].startswith("worker ") for r in records)


def test_killed_holder_frees_the_session_and_resume_runs_no_finished_tool(
    pg_schema: str, processes: list[Any]
) -> None:
    """SIGKILL inside tool_b: the lease runs out, another process resumes; tool_a ran once."""
    log = SPAWN.Queue()
    victim = start(processes, pg_workers.turn_until_killed, pg_schema, TTL, log)
    ran = expect(log, ("inside", "tool_b"))
    with store(pg_schema) as s:
        assert not can_take(s, "crash")  # held by the victim, renewed by its heartbeat
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(WAIT)
        until(lambda: can_take(s, "crash"), "the killed holder's lease runs out")
    start(processes, pg_workers.resume_turn, pg_schema, TTL, log)
    ran += expect(log, ("ran", "tool_b"))
    final = log.get(timeout=WAIT)
    assert final[0] == "ok", final
    text, texts = final[1]
    assert text == "all done"
    assert texts[0] == "go" and texts[-1] == "all done"
    tools = [name for kind, name in ran if kind == "ran"]
    assert tools == ["tool_a", "tool_b", "tool_b"]  # tool_a finished before the kill: once


def test_killed_in_the_model_call_of_a_turn_saved_with_its_lease_resumes_elsewhere(
    pg_schema: str, processes: list[Any]
) -> None:
    """A turn whose first checkpoint came in the statement that took its lease: SIGKILL in
    its model call, and the turn is pending, with that lease's fence, and resumes elsewhere."""
    log = SPAWN.Queue()
    victim = start(processes, pg_workers.second_turn_until_killed, pg_schema, TTL, log)
    expect(log, ("inside", "model"))
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(WAIT)
    with store(pg_schema) as s:
        [(body,)] = s.fetch("SELECT body::text FROM {s}.checkpoints WHERE turn_id = 'warm.turn-2'")
        [(fence,)] = s.fetch("SELECT fence FROM {s}.leases WHERE session_id = 'warm'")
        # the fence first: spliced in by acquire_saving, the statement that took the lease
        assert body.startswith(f'{{"fence":{fence},"format":"lousho.turn"')
        until(lambda: can_take(s, "warm"), "the killed holder's lease runs out")
        agent = create_agent(
            provider=FunctionProvider(lambda r: f"resumed: {r.messages[-1].text}"), store=s
        )
        result = agent.session("warm").resume()
        agent.close()
        assert result is not None
        assert result.text == "resumed: second"
        assert [m.text for m in s.sessions.load("warm") or []] == [
            "first",
            "first answer",
            "second",
            "resumed: second",
        ]
        assert s.checkpoints.list() == []


def test_stopped_worker_is_refused_after_another_took_over(
    pg_schema: str, processes: list[Any]
) -> None:
    """SIGSTOP a worker mid-turn until its lease runs out, let another process finish a turn,
    SIGCONT: its write is refused (LeaseLostError) and only the new owner's turn is stored."""
    log, go = SPAWN.Queue(), SPAWN.Event()
    stale = start(processes, pg_workers.stale_turn, pg_schema, TTL, log, go)
    expect(log, ("inside", "model"))
    os.kill(stale.pid, signal.SIGSTOP)
    try:
        with store(pg_schema) as s:
            until(lambda: can_take(s, "stale"), "the stopped worker's lease runs out")
            agent = create_agent(
                provider=FunctionProvider(lambda r: Message.assistant("new owner's answer")),
                store=AgentStore(sessions=s.sessions),
            )
            assert agent.session("stale").send("from the new owner").text == "new owner's answer"
            agent.close()
        os.kill(stale.pid, signal.SIGCONT)
        go.set()  # after SIGCONT: set() waits for the sleeping process to wake
        assert log.get(timeout=WAIT) == ("refused", "LeaseLostError")
    finally:
        with_signal(stale.pid, signal.SIGCONT)
    stale.join(WAIT)
    with store(pg_schema) as s:
        assert [m.text for m in s.sessions.load("stale") or []] == [
            "from the new owner",
            "new owner's answer",
        ]
