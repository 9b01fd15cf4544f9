"""Real processes sharing one store: no lost turn, and a killed holder does not block."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import fork_server
import pytest
import store_workers
from storekit import SHARED_KINDS, WAIT, open_kit

from lousho_sessions.errors import SessionBusyError

CTX = fork_server.CONTEXT


@pytest.mark.parametrize(
    ("processes", "turns"), [(4, 25), pytest.param(8, 250, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize("kind", SHARED_KINDS)
def test_processes_lose_no_turn(kind: str, processes: int, turns: int, tmp_path: Path) -> None:
    location = tmp_path / "store"
    open_kit(kind, location).close()  # create the schema once, before the race
    go = CTX.Event()
    out: Any = CTX.Queue()
    workers = [
        CTX.Process(
            target=store_workers.run_turns,
            args=(kind, str(location), "shared", n, turns, go, out),
        )
        for n in range(processes)
    ]
    for w in workers:
        w.start()
    go.set()
    results = [out.get(timeout=WAIT * 2 + turns) for _ in workers]
    for w in workers:
        w.join(WAIT)
    assert [r for r in results if r[0] != "ok"] == []
    assert all(w.exitcode == 0 for w in workers)

    kit = open_kit(kind, location)
    messages = kit.sessions.load("shared") or []
    kit.close()
    assert len(messages) == 2 * processes * turns
    tags = []
    for user, assistant in zip(messages[::2], messages[1::2], strict=True):
        assert (user.role, assistant.role) == ("user", "assistant")
        assert user.text == assistant.text
        tags.append(user.text)
    assert sorted(tags) == sorted(f"w{w}-t{n}" for w in range(processes) for n in range(turns))
    for n in range(processes):  # each process's turns are in its own order
        mine = [t for t in tags if t.startswith(f"w{n}-")]
        assert mine == [f"w{n}-t{i}" for i in range(turns)]


def kill(process: Any) -> None:
    os.kill(process.pid, signal.SIGKILL)
    process.join(WAIT)
    assert process.exitcode == -signal.SIGKILL


@pytest.mark.parametrize("kind", SHARED_KINDS)
def test_killed_holder_does_not_block_the_next_turn(kind: str, tmp_path: Path) -> None:
    location = tmp_path / "store"
    kit = open_kit(kind, location)
    held, never = CTX.Event(), CTX.Event()
    holder = CTX.Process(
        target=store_workers.hold_turn_lock, args=(kind, str(location), "s1", held, never)
    )
    holder.start()
    try:
        assert held.wait(WAIT)
        with pytest.raises(SessionBusyError), kit.sessions.turn_lock("s1", timeout=0.2):
            pass
    finally:
        kill(holder)
    # the dead holder's lock is free: taken well before the test's usual WAIT
    with kit.sessions.turn_lock("s1", timeout=WAIT / 3):
        kit.sessions.append("s1", [], 0)
    kit.close()


def test_killed_writer_does_not_block_sqlite(tmp_path: Path) -> None:
    location = tmp_path / "store"
    kit = open_kit("sqlite", location)
    held, never = CTX.Event(), CTX.Event()
    writer = CTX.Process(
        target=store_workers.hold_write_transaction, args=(str(location), held, never)
    )
    writer.start()
    try:
        assert held.wait(WAIT)
    finally:
        kill(writer)
    started = time.monotonic()
    kit.sessions.append("s1", [], 0)  # the dead process's write lock is gone
    assert time.monotonic() - started < WAIT / 3  # generous: it takes milliseconds
    assert kit.checkpoints.list() == []  # its uncommitted insert was rolled back
    kit.close()
