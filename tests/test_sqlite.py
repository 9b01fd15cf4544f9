"""What only SqliteStore does: schema versions, corrupt files, closing, prune, rows."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from lousho_sessions.errors import (
    LeaseLostError,
    SchemaVersionError,
    SessionBusyError,
    StoreClosedError,
    StoreConflictError,
    StoreCorruptError,
)
from lousho_sessions.messages import ImagePart, Message
from lousho_sessions.sqlite import SCHEMA_VERSION, PruneResult, SqliteStore
from lousho_sessions.stores.base import CommitTurn

FIXTURES = Path(__file__).parent / "fixtures"


def turn(n: int) -> list[Message]:
    return [Message.user(f"q{n}"), Message.assistant(f"a{n}")]


def raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_creates_directory_and_schema(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "agent.db"
    with SqliteStore(path) as store:
        store.sessions.save("s1", turn(1))
    conn = raw(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"sessions", "messages", "checkpoints", "approvals"} <= tables
    finally:
        conn.close()


def test_settings(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "a.db") as store, store.connection() as conn:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with SqliteStore(tmp_path / "a.db", synchronous="full") as store, store.connection() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    with pytest.raises(ValueError, match="synchronous"):
        SqliteStore(tmp_path / "a.db", synchronous="sometimes")


def test_golden_v1_database(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    conn = raw(path)
    conn.executescript((FIXTURES / "store_v1.sql").read_text())
    conn.close()
    with SqliteStore(path) as store:
        messages = store.sessions.load("user-42")
        assert messages is not None
        assert [m.role for m in messages] == ["user", "assistant", "tool", "assistant"]
        image = messages[0].content[1]
        assert isinstance(image, ImagePart) and image.data == b"\x89PNG\r\n\x1a\n"
        assert messages[1].tool_calls[0].name == "lookup"
        assert store.sessions.revision("user-42") == 1234567
        assert store.checkpoints.list("user-42.") == ["user-42.turn-4"]
        assert store.checkpoints.load("user-42.turn-4") == {"version": 1, "step": 2, "future": [1]}
        assert [r["id"] for r in store.approvals.list()] == ["ap-1"]
        assert store.approvals.resolve("ap-1", approved=True)["status"] == "approved"
        store.sessions.append("user-42", turn(5), 4)
        assert len(store.sessions.load("user-42") or []) == 6
        # everything in the fixture is older than a day: prune removes it, not the new approval
        assert store.prune(timedelta(days=1)) == PruneResult(sessions=0, checkpoints=1, approvals=1)


def schema(path: Path) -> list[tuple[str, str]]:
    conn = raw(path)
    try:
        rows = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name"
        ).fetchall()
    finally:
        conn.close()
    return [(name, sql) for name, sql in rows]


def test_golden_v1_database_migrates_to_v2_with_leases(tmp_path: Path) -> None:
    path = tmp_path / "v1.db"
    conn = raw(path)
    conn.executescript((FIXTURES / "store_v1.sql").read_text())
    conn.close()
    with SqliteStore(path) as store:
        with store.turn_lock("user-42") as first:
            pass
        with store.turn_lock("user-42") as second:
            store.sessions.append("user-42", turn(5), 4, fence=second.fence)
        assert second.fence > first.fence
        with pytest.raises(LeaseLostError):
            store.sessions.append("user-42", turn(6), 6, fence=first.fence)
        with pytest.raises(LeaseLostError):
            store.checkpoints.delete("user-42.turn-4", fence=first.fence)
        assert len(store.sessions.load("user-42") or []) == 6
        assert store.checkpoints.list("user-42.") == ["user-42.turn-4"]
    conn = raw(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    assert conn.execute("SELECT session_id, fence FROM leases").fetchall() == [
        ("user-42", second.fence)
    ]
    conn.close()
    fresh = tmp_path / "fresh.db"
    SqliteStore(fresh).close()
    assert schema(path) == schema(fresh)  # a migrated database is a new one


def test_golden_v2_database_migrates_to_v3_with_checkpoints_keyed_by_turn_id(
    tmp_path: Path,
) -> None:
    path = tmp_path / "v2.db"
    conn = raw(path)
    conn.executescript((FIXTURES / "store_v2.sql").read_text())
    conn.close()
    with SqliteStore(path) as store:
        assert [m.text for m in store.sessions.load("user-42") or []] == ["q1", "r1"]
        assert store.checkpoints.list("user-42.") == ["user-42.turn-2", "user-42.turn-2-r1-1"]
        assert store.checkpoints.load("user-42.turn-2") == {
            "format": "lousho.turn",
            "version": 1,
            "note": "pending",
        }
        assert [r["id"] for r in store.approvals.list("user-42")] == ["ap1"]
        with pytest.raises(LeaseLostError):  # the fence the v2 database kept still counts
            store.sessions.append("user-42", turn(2), 2, fence=1767323046999999999)
        store.checkpoints.save("user-42.turn-2", {"format": "lousho.turn", "version": 1})
        assert store.prune(older_than=0).checkpoints == 2  # found without the old index
        assert store.checkpoints.list() == []
    conn = raw(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 5
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'checkpoints'").fetchone()[0]
    assert "WITHOUT ROWID" in sql
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "checkpoints_updated" not in names and "checkpoints_v3" not in names
    conn.close()
    fresh = tmp_path / "fresh.db"
    SqliteStore(fresh).close()
    assert schema(path) == schema(fresh)  # a migrated database is a new one


def test_fences_are_checked_in_the_writes_transaction(tmp_path: Path) -> None:
    # Another process (here: a raw connection) hands out a newer fence between our
    # lease and our write: the write sees it, because it reads the fence in its own
    # transaction, and changes nothing.
    with SqliteStore(tmp_path / "a.db") as store:
        with store.turn_lock("s1") as lease:
            conn = raw(tmp_path / "a.db")
            conn.execute("INSERT INTO leases VALUES ('s1', ?)", (lease.fence + 1,))
            conn.close()
            with pytest.raises(LeaseLostError):
                store.sessions.append("s1", turn(1), 0, fence=lease.fence)
            with pytest.raises(LeaseLostError):
                store.checkpoints.save("s1.turn-0", {}, fence=lease.fence)
            with pytest.raises(LeaseLostError):
                store.approvals.create(
                    {"id": "a1", "session_id": "s1", "status": "pending"}, fence=lease.fence
                )
        assert store.sessions.load("s1") is None
        assert store.checkpoints.list() == []
        assert store.approvals.list(status=None) == []


def test_migrates_an_empty_database(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")  # an empty file is a valid empty SQLite database (version 0)
    with SqliteStore(path) as store:
        store.sessions.save("s1", turn(1))
    conn = raw(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "future.db"
    conn = raw(path)
    conn.execute("CREATE TABLE sessions (x)")
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(SchemaVersionError) as info:
        SqliteStore(path)
    assert str(path) in str(info.value)
    assert f"version {SCHEMA_VERSION + 1}" in str(info.value)
    conn = raw(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    conn.close()


@pytest.mark.parametrize(
    "content", [b"this is not a database" * 100, b"SQLite format 3\x00" + b"\x01" * 200]
)
def test_not_a_database(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    with pytest.raises(StoreCorruptError) as info:
        SqliteStore(path)
    assert str(path) in str(info.value)
    assert path.read_bytes() == content


def test_corrupt_rows_name_the_session(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with SqliteStore(path) as store:
        store.sessions.save("s1", turn(1))
        store.checkpoints.save("s1.turn-0", {"a": 1})
    conn = raw(path)
    conn.execute("UPDATE messages SET json = '{\"role\": ' WHERE seq = 1")
    conn.execute("UPDATE checkpoints SET json = 'nope'")
    conn.close()
    with SqliteStore(path) as store:
        with pytest.raises(StoreCorruptError, match="session 's1'") as info:
            store.sessions.load("s1")
        assert str(path) in str(info.value)
        with pytest.raises(StoreCorruptError, match=r"checkpoint 's1\.turn-0'"):
            store.checkpoints.load("s1.turn-0")


def closed_calls(store: SqliteStore) -> list[Callable[[], Any]]:
    return [
        lambda: store.sessions.load("s1"),
        lambda: store.sessions.save("s1", turn(1)),
        lambda: store.sessions.append("s1", turn(1), 0),
        lambda: store.sessions.delete("s1"),
        lambda: store.sessions.revision("s1"),
        lambda: store.sessions.turn_lock("s1").__enter__(),
        lambda: store.checkpoints.load("s1.turn-0"),
        lambda: store.checkpoints.save("s1.turn-0", {}),
        lambda: store.checkpoints.delete("s1.turn-0"),
        lambda: store.checkpoints.list(),
        lambda: store.approvals.create({"id": "a1", "status": "pending"}),
        lambda: store.approvals.get("a1"),
        lambda: store.approvals.resolve("a1", approved=True),
        lambda: store.approvals.list(),
        lambda: store.approvals.delete("a1"),
        lambda: store.prune(0),
    ]


@pytest.mark.parametrize("where", ["file", "memory"])
def test_use_after_close(tmp_path: Path, where: str) -> None:
    store = SqliteStore(tmp_path / "a.db" if where == "file" else ":memory:")
    store.sessions.save("s1", turn(1))
    assert not store.closed
    store.close()
    store.close()  # closing twice is fine
    assert store.closed
    assert "closed" in repr(store)
    for call in closed_calls(store):
        with pytest.raises(StoreClosedError) as info:
            call()
        assert store.path in str(info.value)


def test_context_manager_closes(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "a.db") as store:
        store.sessions.save("s1", turn(1))
    with pytest.raises(StoreClosedError):
        store.sessions.load("s1")
    with SqliteStore(tmp_path / "a.db") as again:
        assert again.sessions.load("s1") is not None


def test_prune(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    store = SqliteStore(path)
    for sid in ("old", "new"):
        store.sessions.save(sid, turn(1))
        store.checkpoints.save(f"{sid}.turn-0", {})
    for aid in ("old-resolved", "old-pending", "new-resolved"):
        store.approvals.create({"id": aid, "session_id": "old", "status": "pending"})
    store.approvals.resolve("old-resolved", approved=True)
    store.approvals.resolve("new-resolved", approved=False)
    # Age the "old" rows by two days instead of waiting.
    two_days_ago = time.time() - 2 * 86400
    conn = raw(path)
    conn.execute("UPDATE sessions SET updated_at = ? WHERE id = 'old'", (two_days_ago,))
    conn.execute(
        "UPDATE checkpoints SET updated_at = ? WHERE turn_id = 'old.turn-0'", (two_days_ago,)
    )
    conn.execute("UPDATE approvals SET resolved_at = ? WHERE id LIKE 'old-%'", (two_days_ago,))
    conn.close()
    assert store.prune(timedelta(days=3)) == PruneResult(0, 0, 0)
    assert store.prune(86400.0) == PruneResult(sessions=1, checkpoints=1, approvals=1)
    assert store.sessions.load("old") is None
    assert store.sessions.load("new") is not None
    assert store.checkpoints.list() == ["new.turn-0"]
    assert store.approvals.get("old-pending") is not None  # unresolved: kept however old
    assert store.approvals.get("new-resolved") is not None
    conn = raw(path)
    assert conn.execute("SELECT count(*) FROM messages WHERE session_id = 'old'").fetchone()[0] == 0
    conn.close()
    assert store.prune(0) == PruneResult(sessions=1, checkpoints=1, approvals=1)
    assert [r["id"] for r in store.approvals.list()] == ["old-pending"]
    for bad in (-1, timedelta(seconds=-5), float("nan")):
        with pytest.raises(ValueError, match="older_than"):
            store.prune(bad)
    store.close()


def test_append_writes_only_new_rows(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with SqliteStore(path) as store:
        store.sessions.save("s1", turn(1))
        conn = raw(path)
        before = conn.execute("SELECT rowid, seq FROM messages ORDER BY seq").fetchall()
        store.sessions.append("s1", turn(2), 2)
        after = conn.execute("SELECT rowid, seq FROM messages ORDER BY seq").fetchall()
        assert after[:2] == before  # the old rows were not rewritten
        assert [seq for _, seq in after] == [0, 1, 2, 3]
        assert conn.execute("SELECT length FROM sessions WHERE id = 's1'").fetchone()[0] == 4
        statements: list[str] = []
        with store.connection() as own:
            own.set_trace_callback(statements.append)
        store.sessions.append("s1", turn(3), 4)
        store.sessions.revision("s1")
        with store.connection() as own:
            own.set_trace_callback(None)
        assert not [s for s in statements if s.upper().startswith(("DELETE", "UPDATE MESSAGES"))]
        assert sum(s.startswith("INSERT INTO messages") for s in statements) == 2
        conn.close()


def test_revision_query_uses_the_primary_key(tmp_path: Path) -> None:
    with SqliteStore(tmp_path / "a.db") as store, store.connection() as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT revision FROM sessions WHERE id = ?", ("s1",)
        ).fetchall()
        assert "USING INDEX" in " ".join(str(row[-1]) for row in plan)
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT m.json FROM sessions s LEFT JOIN messages m "
            "ON m.session_id = s.id WHERE s.id = ? ORDER BY m.seq",
            ("s1",),
        ).fetchall()
        assert "SCAN" not in " ".join(str(row[-1]) for row in plan)


def test_root_package_does_not_import_sqlite3() -> None:
    code = (
        "import sys\n"
        "import lousho_sessions, lousho_sessions.stores.files, lousho_sessions.stores.memory\n"
        "assert 'sqlite3' not in sys.modules, 'sqlite3 was imported'\n"
        "import lousho_sessions.sqlite\n"
        "assert 'sqlite3' in sys.modules\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr


def test_memory_databases_are_separate() -> None:
    with SqliteStore(":memory:") as one, SqliteStore(":memory:") as two:
        one.sessions.save("s1", turn(1))
        assert two.sessions.load("s1") is None
        with one.turn_lock("s1"):
            with pytest.raises(SessionBusyError):
                one.turn_lock("s1", timeout=0)
            with two.turn_lock("s1", timeout=0):  # another database: not held
                pass
        leases = one._turns.memory
        assert leases is not None and leases._held == {}  # per-id locks do not pile up


def test_store_opened_before_a_fork_works_in_the_child(tmp_path: Path) -> None:
    # gunicorn --preload opens the store in the master, then forks the workers.
    store = SqliteStore(tmp_path / "a.db")
    store.sessions.save("s1", turn(1))
    inherited = store._conn
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        code = 1
        try:
            store.sessions.append("s1", turn(2), 2)
            code = 2 if len(store.sessions.load("s1") or []) != 4 or store.closed else 0
            if store._conn is inherited:  # SQLite connections must not cross a fork
                code = 3
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 1) == b"\x00"
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    store.sessions.append("s1", turn(3), 4)  # the parent's connection still works
    assert len(store.sessions.load("s1") or []) == 6
    store.close()


def test_load_since_reads_only_appended_messages(tmp_path: Path) -> None:
    one, two, three = turn(1), turn(2), turn(3)
    with SqliteStore(tmp_path / "a.db") as store:
        sessions = store.sessions
        sessions.save("s1", one)
        first = sessions.revision("s1")
        sessions.append("s1", two, 2)
        second = sessions.revision("s1")
        assert second != first
        assert sessions.load_since("s1", 2, first) == two
        assert sessions.load_since("s1", 4, second) == []
        revision = sessions.commit_turn(CommitTurn("s1", three, 4))
        assert revision == sessions.revision("s1") != second
        assert sessions.load_since("s1", 4, second) == three
        sessions.save("s1", one)  # replaced, not appended to: the caller must load it all
        assert sessions.load_since("s1", 6, revision) is None
        assert sessions.load_since("s1", 0, revision) is None
        sessions.delete("s1")
        assert sessions.load_since("s1", 0, revision) is None
        assert sessions.load_since("s1", 0, "not a revision of ours") is None


def test_commit_turn_is_one_transaction(tmp_path: Path) -> None:
    messages = turn(1)
    with SqliteStore(tmp_path / "a.db") as store:
        store.checkpoints.save("s1.turn-0", {"step": 1})
        store.checkpoints.save("s1.turn-0-r1-1", {"step": 1})
        statements: list[str] = []
        with store.connection() as conn:
            conn.set_trace_callback(statements.append)
        store.sessions.commit_turn(
            CommitTurn(
                "s1",
                messages,
                0,
                checkpoints=store.checkpoints,
                delete=["s1.turn-0-r1-1", "s1.turn-0"],
            )
        )
        with store.connection() as conn:
            conn.set_trace_callback(None)
        assert [s for s in statements if s.split()[0] in ("BEGIN", "COMMIT")] == [
            "BEGIN IMMEDIATE",
            "COMMIT",
        ]
        assert store.checkpoints.list() == []
        assert store.sessions.load("s1") == messages
        store.checkpoints.save("s1.turn-2", {"step": 1})
        with pytest.raises(StoreConflictError):  # nothing is deleted when the append is refused
            store.sessions.commit_turn(
                CommitTurn("s1", turn(2), 0, checkpoints=store.checkpoints, delete=["s1.turn-2"])
            )
        assert store.checkpoints.list() == ["s1.turn-2"]
