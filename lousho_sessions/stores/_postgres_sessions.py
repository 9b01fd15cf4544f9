"""The transcripts of a ``PostgresStore`` (``lousho_sessions.stores.postgres``): messages as rows.

An append is one call of the schema's ``append_turn`` function (schema v3; PL/pgSQL, so
the server keeps its plans without client-side prepared statements): it checks
the lease's fence and the stored length and inserts the new rows; a turn's commit
(``commit_turn``) deletes the turn's checkpoints in that same transaction, and one that
changed the session's state calls ``commit_turn`` (schema v5) instead, which writes the
state record (``<id>.state`` in the checkpoints table) in it too.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from datetime import timedelta

import psycopg
import psycopg_pool

from ..errors import StoreClosedError, StoreConflictError, StoreError
from ..messages import Message, Usage
from ..serde import messages_from_json_texts
from ..usage_totals import postgres_usage_sql, usage_from_row
from ._commit_check import commit_unknown, log_landed
from ._history_requests import Forked, ForkRequest, RewindRequest, Rewound
from ._postgres_core import FENCED, PgCore, PgPart
from ._postgres_history import postgres_fork, postgres_rewind
from ._postgres_lease import PostgresLease
from ._postgres_records import PostgresCheckpointStore
from ._sealing import Sealing
from ._state_requests import commit_text
from ._turn_requests import CommitTurn, ReadAhead, TakenTurn, TakeTurn
from ._waiting import waiting_for_lease
from .base import (
    BaseSessionStore,
    LockScope,
    PruneResult,
    SessionInfo,
    validate_session_id,
    validate_turn_id,
)
from .lease import Lease

__all__ = ["PostgresSessionStore"]

#: the sums of ``usage``'s fields over a session's messages ``m`` (``PostgresSessionStore.usage``)
_USAGE_SUMS = postgres_usage_sql("m.body")
#: Reads of the session after a commit's reply was lost, before saying "unknown".
LOOK_AGAIN_TRIES = 3
#: How long that read waits for a commit still running on the lost connection.
LOOK_AGAIN_LOCK_MS = 5000


class PostgresSessionStore(PgPart, BaseSessionStore):
    """The transcripts of a ``PostgresStore``: one row per message; ``lock_scope`` ``"cluster"``."""

    lock_scope: LockScope = "cluster"
    saves_start_checkpoint = True
    commits_state = True
    forks_state = True
    prunes_state = True
    store: PgCore

    def load(self, id: str) -> list[Message] | None:
        validate_session_id(id)
        rows = self.store.fetch(
            "SELECT m.body::text FROM {s}.sessions s LEFT JOIN {s}.messages m "
            "ON m.session_id = s.id AND m.seq < s.length WHERE s.id = %(id)s ORDER BY m.seq",
            {"id": id},
        )
        if not rows:
            return None
        if rows[0][0] is None:
            return []
        source = f"{self.store.where}: session {id!r}"
        texts = self.store.sealing.open_texts(id, [row[0] for row in rows], source=source)
        return messages_from_json_texts(texts, source=source)

    def save(self, id: str, messages: Sequence[Message]) -> None:
        """Replace the transcript (refused with ``LeaseLostError`` if this thread's lease was lost)."""
        validate_session_id(id)
        bodies = _bodies(self.store.sealing, id, messages)
        fence = self.store.effective_fence(id, None)
        with self.store.transaction() as conn:
            if fence is not None:
                (fenced,) = self.store.run(
                    conn,
                    FENCED + " SELECT fenced FROM ok",
                    {"sid": id, "fence": fence},
                ).fetchone()
                self.store.check_fenced(fenced, id, None)
            self.store.run(conn, "DELETE FROM {s}.messages WHERE session_id = %s", (id,))
            self.store.run(
                conn,
                "INSERT INTO {s}.messages (session_id, seq, body) SELECT %(id)s, u.seq - 1, u.body "
                "FROM unnest(%(bodies)s::json[]) WITH ORDINALITY AS u(body, seq)",
                {"id": id, "bodies": bodies},
            )
            self.store.run(
                conn,
                "INSERT INTO {s}.sessions (id, length, revision, updated_at) "
                "VALUES (%(id)s, %(n)s, %(rev)s, now()) ON CONFLICT (id) DO UPDATE SET "
                "length = excluded.length, revision = excluded.revision, updated_at = now()",
                {"id": id, "n": len(bodies), "rev": secrets.randbits(63)},
            )

    def append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        fence: int | None = None,
    ) -> None:
        """Add ``messages`` if ``expected_length`` are stored, else ``StoreConflictError``;
        ``LeaseLostError`` if ``fence`` is older than the session's newest. One statement."""
        self._append(id, messages, expected_length, fence, ())

    def commit_turn(self, request: CommitTurn) -> object | None:
        """Append the turn, store its state (``request.state``) and delete its checkpoints in
        one statement (one transaction) when ``checkpoints`` is this store's, freeing the
        lease ``release`` in it too (and waking a waiter) when it is this store's lease on
        ``id`` with fence ``fence``: its renewals stop first; a refused write frees nothing
        and they go on. Returns the new revision."""
        id, checkpoints, fence, lease = (
            request.id, request.checkpoints, request.fence, request.release,
        )  # fmt: skip
        if not (
            isinstance(checkpoints, PostgresCheckpointStore) and checkpoints.store is self.store
        ):
            return super().commit_turn(request)
        messages, expected, delete = request.messages, request.expected_length, request.delete
        state = commit_text(self.store.sealing, validate_session_id(id), request.state)
        if not (
            isinstance(lease, PostgresLease)
            and lease.owner is self.store
            and lease.session_id == id
            and fence is not None
            and lease.fence == fence
            and not lease.lost
        ):
            return self._append(id, messages, expected, fence, delete, state=state)
        return lease.freed_by(
            lambda: self._append(id, messages, expected, fence, delete, release=True, state=state)
        )

    def _append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        fence: int | None,
        delete: Sequence[str],
        *,
        release: bool = False,
        state: str | None = None,
    ) -> int:
        """The fenced, length-checked append, deleting the checkpoints ``delete`` and writing
        the state record ``state`` (a ``state_text``: ``commit_turn`` of schema v5) if it lands."""
        validate_session_id(id)
        bodies = "[" + ",".join(_bodies(self.store.sealing, id, messages)) + "]"
        # turn ids are [A-Za-z0-9_.-]: an array literal needs no quoting of them
        keys = "{" + ",".join(validate_turn_id(key) for key in delete) + "}"
        revision = secrets.randbits(63)
        fence = self.store.effective_fence(id, fence)
        params = [
            id,
            None if fence is None else str(fence),
            str(expected_length),
            str(revision),
            bodies,
            keys,
            # the store's NOTIFY channel: also free the lease of ``fence``
            self.store._channel if release else None,
        ]
        try:
            if state is None:
                row = self.store.call(_APPEND_TURN, params)
            else:
                row = self.store.call(_COMMIT_TURN, [*params, state])
        except StoreError as exc:
            if not _reply_lost(exc) or not self._landed(id, messages, expected_length, exc):
                raise
            log_landed(self.store.where, id, expected_length, exc)
            return revision
        written, fenced, length = row[0] == "t", row[1] == "t", row[2]
        if written:
            return revision
        self.store.check_fenced(fenced, id, fence)
        raise StoreConflictError(
            f"session {id!r} ({self.store.where}): expected {expected_length} stored "
            f"messages, found {length or 0}"
        )

    def _landed(
        self, id: str, messages: Sequence[Message], expected_length: int, lost: StoreError
    ) -> bool:
        """Whether the commit of ``messages`` at ``expected_length``, whose reply was lost
        (``lost``), landed: read on another connection (``_commit_check``). Waits first for
        a commit still running on the lost connection (it holds the session's lease row
        ``FOR SHARE``); ``CommitUnknownError`` when the session cannot be read (a new
        connection waits up to the pool's ``timeout``)."""
        look: StoreError | None = None
        for _ in range(LOOK_AGAIN_TRIES):  # a pooled connection may have died with the other
            try:
                with self.store.transaction() as conn:
                    self.store.run(conn, f"SET LOCAL lock_timeout = '{LOOK_AGAIN_LOCK_MS}ms'")
                    self.store.run(
                        conn,
                        "SELECT 1 FROM {s}.leases WHERE session_id = %(id)s FOR UPDATE",
                        {"id": id},
                    )
                    rows = self.store.run(
                        conn,
                        "SELECT m.body->>'id' FROM {s}.sessions s JOIN {s}.messages m "
                        "ON m.session_id = s.id AND m.seq < s.length WHERE s.id = %(id)s "
                        "AND m.seq >= %(n)s ORDER BY m.seq LIMIT %(k)s",
                        {"id": id, "n": expected_length, "k": len(messages)},
                    ).fetchall()
            except StoreClosedError:
                raise
            except StoreError as exc:
                look = exc
                if isinstance(exc.__cause__, psycopg_pool.PoolTimeout):
                    break  # no connection within the pool's timeout: the server is away
                continue
            return [row[0] for row in rows] == [m.id for m in messages]
        assert look is not None
        raise commit_unknown(self.store.where, id, messages, lost, look) from lost

    def delete(self, id: str) -> None:
        validate_session_id(id)
        with self.store.transaction() as conn:
            self.store.run(conn, "DELETE FROM {s}.sessions WHERE id = %s", (id,))
            self.store.run(conn, "DELETE FROM {s}.messages WHERE session_id = %s", (id,))

    def revision(self, id: str) -> int | None:
        """A value that changes with every write of ``id``; ``None`` when nothing is stored."""
        validate_session_id(id)
        rows = self.store.fetch("SELECT revision FROM {s}.sessions WHERE id = %(id)s", {"id": id})
        return None if not rows else int(rows[0][0])

    def list_ids(self) -> list[str]:
        # COLLATE "C": sorted as Python sorts, whatever the database's collation
        rows = self.store.fetch('SELECT id FROM {s}.sessions ORDER BY id COLLATE "C"')
        return [row[0] for row in rows]

    def info(self, id: str) -> SessionInfo | None:
        validate_session_id(id)
        rows = self.store.fetch(
            "SELECT length, extract(epoch FROM updated_at)::float8, parent, fork_point "
            "FROM {s}.sessions WHERE id = %(id)s",
            {"id": id},
        )
        if not rows:
            return None
        length, updated, parent, point = rows[0]
        return SessionInfo(id, int(length), float(updated), parent, point)

    def rewind(self, request: RewindRequest) -> Rewound:
        """Fenced, length-checked delete of the tail rows: one transaction (``_postgres_history``)."""
        return postgres_rewind(self, request)

    def fork(self, request: ForkRequest) -> Forked:
        """The new session's row, one ``INSERT ... SELECT`` of the kept rows and (asked for,
        and kept in this store) the state record: one transaction."""
        return postgres_fork(self, request)

    def usage(self, id: str) -> Usage | None:
        """The stored transcript's usage totals, summed by PostgreSQL over the message JSON."""
        validate_session_id(id)
        rows = self.store.fetch(
            f"SELECT s.id, {_USAGE_SUMS} FROM {{s}}.sessions s "
            "LEFT JOIN {s}.messages m ON m.session_id = s.id WHERE s.id = %(id)s GROUP BY s.id",
            {"id": id},
        )
        return None if not rows else usage_from_row(rows[0][1:])

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Lease session ``id`` for a turn; see ``PostgresStore.turn_lock``."""
        return self.store.turn_lock(id, timeout=timeout)

    def take_turn(self, request: TakeTurn) -> TakenTurn:
        """The lease, taken in one statement with the session's revision, whether it has a
        checkpoint and (when offered and nothing moved) the turn's first checkpoint (see
        ``PostgresStore.acquire``); then only what was added since what the caller holds."""
        with waiting_for_lease(request.signal):
            lease, revision, empty, saved = self.store.acquire(request)
        here = request.checkpoints
        empty = empty and isinstance(here, PostgresCheckpointStore) and here.store is self.store
        return ReadAhead(self, request).taken(
            lease, revision, no_checkpoints=empty, saved_checkpoint=saved
        )

    def claim_stale(self, ids: Sequence[str]) -> dict[str, Lease]:
        """Lease those of ``ids`` no live turn holds; see ``PostgresStore.claim_stale``."""
        return self.store.claim_stale(ids)

    def take_over(self, id: str) -> int:
        """A new fence in the session's ``leases`` row, expired at once: the holder's
        renewals and writes are refused from now on; the row stays (refusing them) until a
        ``prune`` older than now removes it once the session is gone."""
        validate_session_id(id)
        rows = self.store.fetch(
            "INSERT INTO {s}.leases AS l (session_id, fence, holder, expires_at) "
            "VALUES (%(id)s, nextval('{s}.fences'), NULL, now()) ON CONFLICT (session_id) "
            "DO UPDATE SET fence = excluded.fence, holder = NULL, expires_at = now() "
            "RETURNING l.fence",
            {"id": id},
        )
        return int(rows[0][0])

    def turn_held(self, id: str) -> bool:
        """Whether a lease on ``id`` is unexpired now (its holder still heartbeats)."""
        validate_session_id(id)
        rows = self.store.fetch(
            "SELECT 1 FROM {s}.leases WHERE session_id = %(id)s AND expires_at > now()",
            {"id": id},
        )
        return bool(rows)

    def held_sessions(self, ids: Sequence[str]) -> set[str]:
        """Those of ``ids`` whose lease is unexpired now, in one query."""
        wanted = [validate_session_id(i) for i in dict.fromkeys(ids)]
        if not wanted:
            return set()
        rows = self.store.fetch(
            "SELECT session_id FROM {s}.leases WHERE session_id = ANY(%(ids)s) "
            "AND expires_at > now()",
            {"ids": wanted},
        )
        return {row[0] for row in rows}

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the sessions not updated within ``older_than`` (seconds or a ``timedelta``)
        and their state."""
        return self.store.prune_parts(older_than, checkpoints=False, approvals=False)


#: a turn's commit (schema v3)
_APPEND_TURN = (
    "SELECT * FROM {s}.append_turn($1, $2::bigint, $3::integer, $4::bigint, $5::json, "
    "$6::text[], $7)"
)
#: a turn's commit with the state it changed (schema v5)
_COMMIT_TURN = (
    "SELECT * FROM {s}.commit_turn($1, $2::bigint, $3::integer, $4::bigint, $5::json, "
    "$6::text[], $7, $8::json)"
)


def _reply_lost(error: StoreError) -> bool:
    """Whether ``error`` may have lost the reply of a statement that ran: the connection
    failed (libpq's own error, with no SQLSTATE, or an operational one such as a server
    shutdown), not an answer from the server such as a constraint."""
    cause = error.__cause__
    if isinstance(error, StoreClosedError) or not isinstance(cause, psycopg.Error):
        return False
    return cause.sqlstate is None or isinstance(
        cause, (psycopg.OperationalError, psycopg.InterfaceError)
    )


def _bodies(sealing: Sealing, id: str, messages: Sequence[Message]) -> list[str]:
    bodies = []
    for m in messages:
        if not isinstance(m, Message):
            raise TypeError(f"session {id!r}: expected Message objects, got {type(m).__name__}")
        bodies.append(sealing.message_text(id, m))
    return bodies
