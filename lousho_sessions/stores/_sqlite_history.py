"""``rewind`` and ``fork`` of the SQLite session store: one transaction each.

A rewind deletes the tail rows (``seq >= keep``) and writes the session row with a new
revision *generation*, so ``load_since`` from a revision read before it answers ``None``;
a fork copies the kept rows with one ``INSERT ... SELECT`` and writes the new session's
row naming its ``parent`` and ``fork_point`` (schema version 4), and, asked to, copies the
source's state record (``<id>.state`` in the checkpoints table) as the new session's, in
the same transaction. Neither reads a message (but to seal it again for the new session).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..errors import StoreConflictError
from ._history_requests import (
    Forked,
    ForkRequest,
    RewindRequest,
    Rewound,
    check_keep,
    copy_state,
    exists_error,
    missing_error,
)
from ._sqlite_records import SAVE_CHECKPOINT, STATE_VERSION, SqliteCheckpointStore
from ._state_requests import state_key, state_record, state_text, with_version

#: the store's revision rule: ``touch(conn, id, length) -> revision`` (``sqlite._touch``)
Touch = Callable[..., int]

__all__ = ["sqlite_fork", "sqlite_rewind"]

#: the leases row's fence and the session's length, in one statement
_FENCE_AND_LENGTH = (
    "SELECT (SELECT fence FROM leases WHERE session_id = ?1), s.length "
    "FROM (SELECT 1) LEFT JOIN sessions s ON s.id = ?1"
)


def sqlite_rewind(part: Any, request: RewindRequest, _touch: Touch) -> Rewound:
    """Delete the rows after the first ``keep`` and give the session a new generation."""
    id, where = request.id, part.store.path
    with part.store.transaction() as conn:
        stored_fence, length = conn.execute(_FENCE_AND_LENGTH, (id,)).fetchone()
        part.store._turns.check(conn, id, request.fence, stored_fence)
        if length is None:
            raise StoreConflictError(f"cannot rewind session {id!r} ({where}): it is not stored")
        _expect(id, where, request.expected_length, int(length))
        keep = check_keep(id, request.keep, int(length), where)
        conn.execute("DELETE FROM messages WHERE session_id = ? AND seq >= ?", (id, keep))
        revision = _touch(conn, id, keep)  # a new generation: not an append
    return Rewound(int(length) - keep, revision)


def sqlite_fork(part: Any, request: ForkRequest, _touch: Touch) -> Forked:
    """Copy the kept rows of ``source`` to ``new_id`` and write its row, in one transaction;
    with ``request.state``, the state too (in that transaction when it is kept in this
    database's checkpoints, else after it: ``copy_state``)."""
    source, new_id, where = request.source, request.new_id, part.store.path
    here = isinstance(request.checkpoints, SqliteCheckpointStore) and (
        request.checkpoints.store is part.store
    )
    with part.store.transaction() as conn:
        rows = conn.execute(
            "SELECT id, length FROM sessions WHERE id IN (?, ?)", (source, new_id)
        ).fetchall()
        lengths = {row[0]: int(row[1]) for row in rows}
        if new_id in lengths:
            raise exists_error(new_id, where)
        if source not in lengths:
            raise missing_error(source, where)
        keep = check_keep(source, request.keep, lengths[source], where)
        if part.store.sealing.enabled:  # each record is bound to its session: sealed again
            rows = conn.execute(
                "SELECT seq, json FROM messages WHERE session_id = ? AND seq < ? ORDER BY seq",
                (source, keep),
            ).fetchall()
            texts = part.store.sealing.forked_texts(
                source, new_id, [row[1] for row in rows], where=where
            )
            conn.executemany(
                "INSERT INTO messages (session_id, seq, json) VALUES (?, ?, ?)",
                [(new_id, row[0], text) for row, text in zip(rows, texts, strict=True)],
            )
        else:
            conn.execute(
                "INSERT INTO messages (session_id, seq, json) "
                "SELECT ?, seq, json FROM messages WHERE session_id = ? AND seq < ?",
                (new_id, source, keep),
            )
        revision = _touch(conn, new_id, keep)
        conn.execute(
            "UPDATE sessions SET parent = ?, fork_point = ? WHERE id = ?", (source, keep, new_id)
        )
        if request.state and here:
            _fork_state(part, conn, source, new_id)
    if request.state and not here:
        copy_state(part, request)
    return Forked(keep, revision)


def _fork_state(part: Any, conn: Any, source: str, new_id: str) -> None:
    """In the fork's transaction: the source's state record as the new session's, at the
    version after the one ``new_id`` had (sealed again for it: a record is bound to its
    session); a source without one copies none."""
    row = conn.execute(
        "SELECT json FROM checkpoints WHERE turn_id = ?", (state_key(source),)
    ).fetchone()
    if row is None:
        return
    sealing = part.store.sealing
    what = f"{part.store.path}: the state of session {source!r}"
    state, _ = state_record(source, sealing.record("checkpoint", source, row[0], source=what))
    text = state_text(sealing, new_id, state)
    key = state_key(new_id)
    row = conn.execute(STATE_VERSION, (key,)).fetchone()
    version = 0 if row is None or row[0] is None else int(row[0])
    conn.execute(SAVE_CHECKPOINT, (key, with_version(text, version + 1), time.time()))


def _expect(id: str, where: str, expected: int | None, length: int) -> None:
    if expected is not None and expected != length:
        raise StoreConflictError(
            f"session {id!r} ({where}): expected {expected} stored messages, found {length}"
        )
