"""Processes opening one new SQLite database at the same moment all open it.

Each switches the new file to WAL; SQLite answers "database is locked" at once, without
its busy handler, to one that would wait for another's switch while holding its own read
lock. Real processes, started together at a barrier, open fresh databases one after
another: before the store tried the switch again, about one open in ten failed here.
"""

from __future__ import annotations

import queue
import sqlite3
from pathlib import Path

import fork_server

from lousho_sessions.sqlite import SqliteStore

PROCESSES = 3
DATABASES = 40
WAIT = 60.0


def _open_each(root: str, barrier: object, out: object) -> None:
    failures: list[str] = []
    for n in range(DATABASES):
        barrier.wait(WAIT)  # type: ignore[attr-defined]
        try:
            SqliteStore(Path(root) / f"{n}.db").close()
        except Exception as exc:  # reported to the test, which names it
            failures.append(f"{n}.db: {type(exc).__name__}: {exc}")
    out.put(failures)  # type: ignore[attr-defined]


def test_processes_opening_a_new_database_at_once_all_open_it(tmp_path: Path) -> None:
    barrier = fork_server.CONTEXT.Barrier(PROCESSES)
    out = fork_server.CONTEXT.Queue()
    children = [
        fork_server.CONTEXT.Process(target=_open_each, args=(str(tmp_path), barrier, out))
        for _ in range(PROCESSES)
    ]
    for child in children:
        child.start()
    try:
        failures = [failure for _ in children for failure in out.get(timeout=WAIT)]
    except queue.Empty:
        raise AssertionError("a child said nothing within 60 s") from None
    finally:
        for child in children:
            child.join(WAIT)
    assert failures == []
    assert [child.exitcode for child in children] == [0] * PROCESSES
    for n in range(DATABASES):  # each one a WAL database with the schema
        with sqlite3.connect(tmp_path / f"{n}.db") as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        store = SqliteStore(tmp_path / f"{n}.db")
        try:
            store.sessions.save("s", [])
            assert store.sessions.load("s") == []
        finally:
            store.close()
