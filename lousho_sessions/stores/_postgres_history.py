"""``rewind`` and ``fork`` of the PostgreSQL session store: one transaction each, no message read.

A rewind checks the fence (the lease row ``FOR SHARE``, as every fenced write) and the
length (the session row ``FOR UPDATE``), then deletes the tail rows and writes the new
length and a new random revision in one statement. A fork inserts the new session's row
(``ON CONFLICT DO NOTHING``: an existing id is refused, also against a concurrent fork)
and copies the kept rows server-side with one ``INSERT ... SELECT``; asked to, it copies
the source's state record (``<id>.state`` in the checkpoints table, ``state_versioned`` of
schema v5) in that statement too. On an encrypting store the copied records are sealed
again for the new session in the same transaction.
"""

from __future__ import annotations

import secrets
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
from ._postgres_core import FENCED
from ._postgres_records import PostgresCheckpointStore
from ._state_requests import state_key, state_record, state_text

__all__ = ["postgres_fork", "postgres_rewind"]

_REWIND_READ = (
    FENCED + ", s AS (SELECT length FROM {s}.sessions WHERE id = %(sid)s FOR UPDATE) "
    "SELECT (SELECT fenced FROM ok), (SELECT length FROM s)"
)

_REWIND_WRITE = (
    "WITH gone AS (DELETE FROM {s}.messages WHERE session_id = %(sid)s AND seq >= %(keep)s) "
    "UPDATE {s}.sessions SET length = %(keep)s, revision = %(rev)s, updated_at = now() "
    "WHERE id = %(sid)s"
)


def postgres_rewind(part: Any, request: RewindRequest) -> Rewound:
    store, id = part.store, request.id
    fence = store.effective_fence(id, request.fence)
    revision = secrets.randbits(63)
    with store.transaction() as conn:
        fenced, length = store.run(conn, _REWIND_READ, {"sid": id, "fence": fence}).fetchone()
        store.check_fenced(fenced, id, fence)
        if length is None:
            raise StoreConflictError(
                f"cannot rewind session {id!r} ({store.where}): it is not stored"
            )
        if request.expected_length is not None and length != request.expected_length:
            raise StoreConflictError(
                f"session {id!r} ({store.where}): expected {request.expected_length} stored "
                f"messages, found {length}"
            )
        keep = check_keep(id, request.keep, int(length), store.where)
        store.run(conn, _REWIND_WRITE, {"sid": id, "keep": keep, "rev": revision})
    return Rewound(int(length) - keep, revision)


_FORK_ROW = (
    "WITH src AS (SELECT length FROM {s}.sessions WHERE id = %(src)s FOR SHARE) "
    "SELECT (SELECT length FROM src), EXISTS (SELECT 1 FROM {s}.sessions WHERE id = %(new)s)"
)

_FORK_WRITE = (
    "WITH row AS (INSERT INTO {s}.sessions (id, length, revision, updated_at, parent, fork_point) "
    "VALUES (%(new)s, %(keep)s, %(rev)s, now(), %(src)s, %(keep)s) "
    "ON CONFLICT (id) DO NOTHING RETURNING id), "
    "copied AS (INSERT INTO {s}.messages (session_id, seq, body) "
    "SELECT %(new)s, seq, body FROM {s}.messages "
    "WHERE session_id = %(src)s AND seq < %(keep)s AND EXISTS (SELECT 1 FROM row) "
    "ON CONFLICT (session_id, seq) DO UPDATE SET body = excluded.body), "
    # the source's state (asked for: %(state)s), at the version after the new id's
    "st AS (INSERT INTO {s}.checkpoints AS c (turn_id, body, updated_at) "
    "SELECT %(new)s || '.state', {s}.state_versioned(f.body, 1), now() "
    "FROM {s}.checkpoints f WHERE f.turn_id = %(src)s || '.state' AND %(state)s "
    "AND EXISTS (SELECT 1 FROM row) ON CONFLICT (turn_id) DO UPDATE SET updated_at = now(), "
    "body = {s}.state_versioned(excluded.body, coalesce({s}.state_version(c.body), 0) + 1)) "
    "SELECT EXISTS (SELECT 1 FROM row)"
)


def postgres_fork(part: Any, request: ForkRequest) -> Forked:
    store, source, new_id = part.store, request.source, request.new_id
    revision = secrets.randbits(63)
    here = isinstance(request.checkpoints, PostgresCheckpointStore) and (
        request.checkpoints.store is store
    )
    state = request.state and here
    params = {"src": source, "new": new_id, "rev": revision, "state": state}
    with store.transaction() as conn:
        length, taken = store.run(conn, _FORK_ROW, params).fetchone()
        if taken:
            raise exists_error(new_id, store.where)
        if length is None:
            raise missing_error(source, store.where)
        keep = check_keep(source, request.keep, int(length), store.where)
        (inserted,) = store.run(conn, _FORK_WRITE, {**params, "keep": keep}).fetchone()
        if not inserted:  # created by a concurrent fork or turn since the read
            raise exists_error(new_id, store.where)
        if store.sealing.enabled:  # each record is bound to its session: sealed again
            rows = store.run(
                conn,
                "SELECT seq, body::text FROM {s}.messages WHERE session_id = %(new)s ORDER BY seq",
                params,
            ).fetchall()
            texts = store.sealing.forked_texts(
                source, new_id, [row[1] for row in rows], where=store.where
            )
            for (seq, _), body in zip(rows, texts, strict=True):
                store.run(
                    conn,
                    "UPDATE {s}.messages SET body = %(body)s::json "
                    "WHERE session_id = %(new)s AND seq = %(seq)s",
                    {"new": new_id, "seq": seq, "body": body},
                )
            if state:
                _reseal_state(store, conn, source, new_id)
    if request.state and not here:
        copy_state(part, request)
    return Forked(keep, revision)


def _reseal_state(store: Any, conn: Any, source: str, new_id: str) -> None:
    """In the fork's transaction: the new session's copy of the source's state (the fork
    statement wrote it bound to the source, at its new version) sealed again for it."""
    rows = store.run(
        conn, "SELECT body::text FROM {s}.checkpoints WHERE turn_id = %(key)s",
        {"key": state_key(source)},
    ).fetchall()  # fmt: skip
    if not rows:
        return  # none copied
    what = f"{store.where}: the state of session {source!r}"
    record = store.sealing.record("checkpoint", source, rows[0][0], source=what)
    state, _ = state_record(source, record)
    store.run(
        conn,
        "UPDATE {s}.checkpoints SET body = {s}.state_versioned(%(body)s::json, "
        "{s}.state_version(body)) WHERE turn_id = %(key)s",
        {"key": state_key(new_id), "body": state_text(store.sealing, new_id, state)},
    )
