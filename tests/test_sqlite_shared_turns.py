"""Turns queued on one SqliteStore session: reading ahead while next in line, and the
one read that starts a turn (``SqliteSessionStore.turn_lock``)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from storekit import WAIT

from lousho_sessions.messages import Message
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores import _lockfile

pytestmark = pytest.mark.skipif(not _lockfile._LINE, reason="the waiting line needs OFD locks")


def _tickets(path: Path) -> int:
    raw = path.read_bytes()[64:84].strip(b"\0 ")
    return int(raw) if raw else 0


def _queue(path: Path, target: object, n: int) -> threading.Thread:
    """Start ``target`` on a thread and return once it has taken ticket ``n`` (in line)."""
    thread = threading.Thread(target=target, daemon=True)  # type: ignore[arg-type]
    thread.start()
    deadline = time.monotonic() + WAIT
    while _tickets(path) < n + 1 and time.monotonic() < deadline:
        threading.Event().wait(0.001)
    assert _tickets(path) == n + 1
    return thread


def test_when_next_runs_once_the_waiter_before_holds_the_lock(tmp_path: Path) -> None:
    """Behind a holder and a waiter, ``when_next`` runs after the holder let go (the waiter
    before is through), before this waiter holds the lock; the order stays first come."""
    path = tmp_path / "s.lock"
    release, _ = _lockfile.acquire_fenced(path, None)  # ticket 0
    events: list[str] = []

    def first() -> None:
        done = _lockfile.acquire(path, None)
        events.append("first holds")
        done()

    def second() -> None:
        done, _ = _lockfile.acquire_fenced(path, None, when_next=lambda: events.append("next"))
        events.append("second holds")
        done()

    threads = [_queue(path, first, 1), _queue(path, second, 2)]
    assert events == []  # the holder has not let go: neither waiter is next yet
    events.append("holder lets go")
    release()
    for thread in threads:
        thread.join(WAIT)
    assert events.index("holder lets go") < events.index("next") < events.index("second holds")
    assert events.index("first holds") < events.index("second holds")
    assert events.count("next") == 1


def test_when_next_is_not_called_when_the_lock_is_free(tmp_path: Path) -> None:
    path = tmp_path / "s.lock"
    called: list[int] = []
    for _ in range(3):
        release, _ = _lockfile.acquire_fenced(path, None, when_next=lambda: called.append(1))
        release()
    assert called == []


def _message(text: str) -> Message:
    return Message.user(text)


def test_messages_read_ahead_join_the_ones_read_under_the_lock(tmp_path: Path) -> None:
    """Another store appends, this one reads ahead, the other appends again: ``load_since``
    returns every message after the caller's, once each, in order."""
    path = tmp_path / "db.sqlite"
    with SqliteStore(path) as mine, SqliteStore(path) as other:
        mine.sessions.append("s", [_message("a0"), _message("a1")], 0)
        known = mine.sessions.revision("s")
        other.sessions.append("s", [_message("b0"), _message("b1")], 2)
        mine.sessions.read_ahead("s")
        other.sessions.append("s", [_message("c0"), _message("c1")], 4)
        added = mine.sessions.load_since("s", 2, known)
        assert added is not None
        assert [m.text for m in added] == ["b0", "b1", "c0", "c1"]
        # taken once: the next call reads the rows
        assert [m.text for m in mine.sessions.load_since("s", 4, known) or []] == ["c0", "c1"]


def test_messages_read_ahead_are_not_used_once_the_session_was_rewritten(tmp_path: Path) -> None:
    """A ``save`` (or a delete and a new session) after the read-ahead starts another
    generation: ``load_since`` answers None (read it all), not the messages read ahead."""
    path = tmp_path / "db.sqlite"
    with SqliteStore(path) as mine, SqliteStore(path) as other:
        mine.sessions.append("s", [_message("a0"), _message("a1")], 0)
        known = mine.sessions.revision("s")
        other.sessions.append("s", [_message("b0"), _message("b1")], 2)
        mine.sessions.read_ahead("s")
        other.sessions.save("s", [_message(f"x{n}") for n in range(6)])
        assert mine.sessions.load_since("s", 2, known) is None
        assert [m.text for m in mine.sessions.load("s") or []] == [f"x{n}" for n in range(6)]


def test_turn_lock_reads_the_revision_and_whether_a_turn_is_pending(tmp_path: Path) -> None:
    """The lease carries the revision and, when no checkpoint of the session is stored (a
    neighbour's with a longer id does not count), the checkpoint store."""
    with SqliteStore(tmp_path / "db.sqlite") as store:
        with store.sessions.turn_lock("s") as lease:
            assert lease.start_revision == (None,)
            assert lease.start_no_checkpoints is store.checkpoints
        store.sessions.append("s", [_message("a0")], 0)
        store.checkpoints.save("s1.turn-0", {"x": 1})
        store.checkpoints.save("s-.turn-0", {"x": 1})
        with store.sessions.turn_lock("s") as lease:
            assert lease.start_revision == (store.sessions.revision("s"),)
            assert lease.start_no_checkpoints is store.checkpoints
        store.checkpoints.save("s.turn-1", {"x": 1})
        with store.sessions.turn_lock("s") as lease:
            assert lease.start_no_checkpoints is None
