"""``rewind`` and ``fork`` of the SQLite session store: one transaction each.

A rewind deletes the tail rows (``seq >= keep``) and writes the session row with a new
revision *generation*, so ``load_since`` from a revision read before it answers ``None``;
a fork copies the kept rows with one ``INSERT ... SELECT`` and writes the new session's
row naming its ``parent`` and ``fork_point`` (schema version 4). Neither reads a message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import StoreConflictError
from ._history_requests import (
    Forked,
    ForkRequest,
    RewindRequest,
    Rewound,
    check_keep,
    exists_error,
    missing_error,
)

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
    """Copy the kept rows of ``source`` to ``new_id`` and write its row, in one transaction."""
    source, new_id, where = request.source, request.new_id, part.store.path
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
    return Forked(keep, revision)


def _expect(id: str, where: str, expected: int | None, length: int) -> None:
    if expected is not None and expected != length:
        raise StoreConflictError(
            f"session {id!r} ({where}): expected {expected} stored messages, found {length}"
        )
