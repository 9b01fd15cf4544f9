"""The one read that starts a turn on a SqliteStore session (``SqliteSessionStore.turn_lock``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lousho_sessions.messages import Message
from lousho_sessions.sqlite import SqliteStore


@pytest.mark.parametrize("where", ["file", ":memory:"])
def test_turn_lock_reads_the_revision_and_whether_a_turn_is_pending(
    tmp_path: Path, where: str
) -> None:
    """The lease carries the session's revision and, when no checkpoint of the session is
    stored (a neighbour's whose id starts the same does not count), the checkpoint store."""
    with SqliteStore(tmp_path / "db.sqlite" if where == "file" else where) as store:
        with store.sessions.turn_lock("s") as lease:
            assert lease.start_revision == (None,)
            assert lease.start_no_checkpoints is store.checkpoints
        store.sessions.append("s", [Message.user("a0")], 0)
        store.checkpoints.save("s1.turn-0", {"x": 1})
        store.checkpoints.save("s-.turn-0", {"x": 1})
        store.checkpoints.save("r.turn-0", {"x": 1})
        with store.sessions.turn_lock("s") as lease:
            assert lease.start_revision == (store.sessions.revision("s"),)
            assert lease.start_no_checkpoints is store.checkpoints
        store.checkpoints.save("s.turn-1", {"x": 1})
        with store.sessions.turn_lock("s") as lease:
            assert lease.start_no_checkpoints is None
            assert lease.start_revision == (store.sessions.revision("s"),)
