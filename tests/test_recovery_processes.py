"""Recovery with real processes (issue 16): workers SIGKILLed mid-turn, sweepers finishing
their turns from other processes, on every store that outlives a process.

One body per scenario, parametrised over files, SQLite, PostgreSQL and Redis.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from sweep_harness import TURNS, WAIT, build, open_store

from lousho_sessions.recovery import SweptTurn, abandoned_turns, stale_turns, sweep

HARNESS = str(Path(__file__).with_name("sweep_harness.py"))
KINDS = ("files", "sqlite", "postgres", "redis")


@pytest.fixture(params=KINDS)
def place(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A store kind and the directory naming its store (a schema, a key prefix) in every process."""
    kind: str = request.param
    if kind == "postgres":
        from services_pg import drop_schema, require_postgres, schema_for

        require_postgres()
        yield kind, tmp_path
        drop_schema(schema_for(tmp_path))
    elif kind == "redis":
        from services_redis import drop_prefix, prefix_for, require_redis

        require_redis()
        yield kind, tmp_path
        drop_prefix(prefix_for(tmp_path))
    else:
        yield kind, tmp_path


def start(mode: str, kind: str, path: Path, logfile: Path) -> subprocess.Popen[str]:
    # tests/ first, then what PYTHONPATH held (a checkout's own code, not the installed one)
    where = (str(Path(__file__).parent), os.environ.get("PYTHONPATH", ""))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in where if p)}
    return fork_server.Popen(
        [HARNESS, mode, kind, str(path), str(logfile)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def finish(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, err = process.communicate(timeout=WAIT + 15)
    assert process.returncode == 0, err
    result: dict[str, Any] = json.loads(out)
    return result


def lines(logfile: Path) -> list[str]:
    """The log without process ids."""
    return [line.split(" ", 1)[1] for line in logfile.read_text().splitlines()]


def roles_and_texts(store: Any, session_id: str) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in store.sessions.load(session_id) or []]


def test_killed_workers_turns_are_finished_once_by_racing_sweepers(
    place: tuple[str, Path],
) -> None:
    kind, path = place
    logfile = path / "log.txt"
    worker = start("worker", kind, path, logfile)
    worker.communicate(timeout=WAIT + 15)
    assert worker.returncode == -signal.SIGKILL
    before = lines(logfile)
    assert sorted(x for x in before if x.startswith("at ")) == ["at c", "at m", "at n", "at s"]

    sweepers = [start("sweep", kind, path, logfile) for _ in range(2)]
    reports = [finish(p) for p in sweepers]
    assert all(r["left"] == [] for r in reports), reports
    claimed = Counter(
        turn
        for r in reports
        for turn, outcome, _, _ in r["outcomes"]
        if outcome not in ("taken", "parked")
    )
    # each turn resumed once, by one sweeper; a turn parked on an approval is reported parked
    # by every sweeper that finds it so (the second, on a loaded machine, comes after the
    # first parked it), but it was run up to its approval once: its first attempt
    assert claimed == Counter(t for t in TURNS if t != "c.turn-0"), reports
    parked = [
        attempts
        for r in reports
        for turn, outcome, attempts, _ in r["outcomes"]
        if turn == "c.turn-0" and outcome != "taken"
    ]
    assert parked in ([1], [1, 1]), reports
    outcomes = {
        turn: outcome
        for r in reports
        for turn, outcome, _, _ in r["outcomes"]
        if outcome != "taken"
    }
    assert {t: outcomes[t] for t in TURNS if t != "c.turn-0"} == dict.fromkeys(
        ["m.turn-0", "n.turn-0", "s.send"], "finished"
    )
    assert outcomes["c.turn-0"] == "parked"  # charge may have run: a human decides

    after = lines(logfile)[len(before) :]
    # the sweepers' work: m's and s's model answered once, n's idempotent note ran again,
    # c's finished note was not run again, nor its interrupted charge
    assert Counter(x.split(" ")[0] + " " + x.split(" ")[1] for x in after) == Counter(
        {"model m": 1, "model s": 1, "model n": 1, "note n": 1}
    ), after
    note_keys = {x for x in before + after if x.startswith("note n ")}
    assert len(note_keys) == 1  # the same idempotency key both times

    store = open_store(kind, str(path))
    try:
        assert roles_and_texts(store, "m") == [("user", "go-m"), ("assistant", "done m")]
        assert roles_and_texts(store, "n")[-1] == ("assistant", "done n")
        assert store.checkpoints.load("s.send") is None
        assert stale_turns(store) == [] and abandoned_turns(store) == []
        agent = build(store, str(logfile))
        [approval] = agent.approvals.list(session_id="c")
        assert approval.tool == "charge" and approval.note is not None
        assert "may have run" in approval.note
        result = agent.approvals.resolve(approval.id, approved=True)
        assert result is not None and result.text == "done c"
        assert [x for x in lines(logfile) if x.startswith("charge")].__len__() == 2
        assert [r for r, _ in roles_and_texts(store, "c")] == [
            "user", "assistant", "tool", "assistant", "tool", "assistant",
        ]  # fmt: skip
        agent.close()
    finally:
        close(kind, store)


def test_a_stopped_worker_is_not_swept_while_it_holds_its_lock_and_refused_once_swept(
    place: tuple[str, Path],
) -> None:
    """SIGSTOP keeps an OS lock (files, SQLite): not stale. A lease (PostgreSQL, Redis)
    runs out: the turn is swept, and the worker, woken, is refused its next write."""
    kind, path = place
    logfile = path / "log.txt"
    worker = start("stall", kind, path, logfile)
    store = open_store(kind, str(path))
    agent = build(store, str(logfile))
    try:
        deadline = _deadline()
        while "stalled" not in lines(logfile) if logfile.exists() else True:
            assert worker.poll() is None and _before(deadline), "the worker never stalled"
            _wait(0.02)
        os.kill(worker.pid, signal.SIGSTOP)
        try:
            if kind in ("files", "sqlite"):
                assert stale_turns(store) == []  # a stopped process still holds its lock
                assert [s.outcome for s in sweep(store, agent=agent)] == []
                swept_by_us = False
            else:
                swept: list[SweptTurn] = []
                while not swept:  # until the stopped worker's lease runs out
                    assert _before(deadline), "the lease never ran out"
                    swept = sweep(store, agent=agent)
                    _wait(0.05)
                assert [(s.turn_id, s.outcome) for s in swept] == [("p.turn-0", "finished")]
                swept_by_us = True
        finally:
            (path / "go").touch()
            os.kill(worker.pid, signal.SIGCONT)
        report = finish(worker)
        if swept_by_us:
            assert report["outcome"].startswith("lease-lost"), report
        else:
            assert report["outcome"] == "finished done p", report
        assert roles_and_texts(store, "p") == [("user", "go-p"), ("assistant", "done p")]
        assert stale_turns(store) == []
    finally:
        agent.close()
        close(kind, store)


def close(kind: str, store: Any) -> None:
    if kind != "files":  # a file store holds nothing open
        store.close()


def _deadline() -> float:
    return time.monotonic() + WAIT


def _before(deadline: float) -> bool:
    return time.monotonic() < deadline


def _wait(seconds: float) -> None:
    threading.Event().wait(seconds)
