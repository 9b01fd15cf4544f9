"""What every part of a ``PostgresStore`` uses: pooled connections, statements, fence checks."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import psycopg
import psycopg_pool
from psycopg import errors as pg_errors
from psycopg import pq

from ..errors import LeaseLostError, StoreClosedError, StoreError
from ._postgres_watch import Watchdog, idle_connection_dead
from ._rotation import BATCH, RotationResult, rotate_postgres
from ._sealing import Sealing
from ._turn_requests import TakeTurn
from .base import PruneResult, older_than_seconds
from .lease import Lease

__all__ = ["FENCED", "PgCore", "PgPart"]

log = logging.getLogger("lousho_sessions.stores.postgres")

#: CTEs every fenced write starts with: ``ok.fenced`` is false when the session's lease row
#: carries a newer fence than ``%(fence)s`` (NULL: not written under a lease, never refused).
#: ``FOR SHARE`` makes a concurrent ``turn_lock`` wait for this write's commit, so a write
#: either lands before the new fence is handed out or is refused.
FENCED = (
    "WITH lease AS (SELECT fence FROM {s}.leases WHERE session_id = %(sid)s FOR SHARE), "
    "ok AS (SELECT (%(fence)s::bigint IS NULL "
    "OR NOT EXISTS (SELECT 1 FROM lease WHERE fence > %(fence)s::bigint)) AS fenced)"
)


class PgCore:
    """A ``PostgresStore`` without its lifecycle: what its parts call (see ``PostgresStore``)."""

    where: str
    _s: str
    _closed: bool
    _pool: psycopg_pool.ConnectionPool[Any]
    _held: threading.local
    _channel: str  # NOTIFY channel of releases
    _sql: dict[str, bytes]  # ``call``'s statements, as sent
    prepare: bool
    #: how records are written and read (``encryption=``)
    sealing: Sealing
    #: with ``prepare=True``: per pooled connection, ``call``'s statements prepared on it
    _prepared: weakref.WeakKeyDictionary[psycopg.Connection[Any], dict[bytes, bytes]]
    #: seconds a statement (or ``connection()`` block) may wait for the server; ``None``: no bound
    statement_timeout: float | None
    _watchdog: Watchdog

    def close(self) -> None:
        """Close the store (``PostgresStore.close``)."""
        raise NotImplementedError

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Lease session ``id`` for a turn (``PostgresStore.turn_lock``)."""
        raise NotImplementedError

    def acquire(self, request: TakeTurn) -> tuple[Lease, int | None, bool, bool]:
        """A ``take_turn``'s lease, revision, no checkpoints, saved (``PostgresStore.acquire``)."""
        raise NotImplementedError

    def claim_stale(self, ids: Sequence[str]) -> dict[str, Lease]:
        """Lease those of ``ids`` no live turn holds (``PostgresStore.claim_stale``)."""
        raise NotImplementedError

    @contextmanager
    def connection(self, bound: float | None = -1.0) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection for one statement or transaction; psycopg errors as ``StoreError``.

        The block is bounded (``bound`` seconds, by default ``statement_timeout``): past
        it the connection is cut and its statement raises (``_postgres_watch``)."""
        if self._closed:
            raise StoreClosedError(f"{self.where}: the PostgreSQL store was closed")
        try:
            conn = self._checkout()
            try:
                watch = self._watchdog.watch(
                    conn, self.statement_timeout if bound == -1.0 else bound
                )
                try:
                    with conn:  # a pooled connection: ends the transaction, stays open
                        yield conn
                finally:
                    self._watchdog.done(watch)
            finally:
                self._pool.putconn(conn)
        except psycopg.Error as exc:
            raise self._store_error(exc) from exc

    def _checkout(self) -> psycopg.Connection[Any]:
        """A connection from the pool that the server did not close while it sat idle (an
        ``idle_session_timeout``, a restart, a pooler's or load balancer's idle timeout):
        one found closed is dropped and another taken, before any statement is sent."""
        pool = self._pool
        conn: psycopg.Connection[Any] = pool.getconn()
        if not idle_connection_dead(conn):  # the common case, before any loop is set up
            return conn
        for left in range(pool.max_size, -1, -1):  # max_size more are checked, the last is not
            log.info(
                "%s: a pooled connection was closed by the server while idle; dropped", self.where
            )
            conn.close()
            pool.putconn(conn)  # closed: the pool replaces it
            conn = pool.getconn()  # a new one, or the pool's error
            if left == 0 or not idle_connection_dead(conn):
                break
        return conn

    def _store_error(self, exc: psycopg.Error) -> StoreError:
        """What a psycopg or pool error becomes for callers of the store."""
        if isinstance(exc, psycopg_pool.PoolTimeout):
            return StoreError(f"{self.where}: no connection available: {exc}")
        if self._closed:
            return StoreClosedError(f"{self.where}: the PostgreSQL store was closed")
        return StoreError(f"{self.where}: {exc}")

    @contextmanager
    def transaction(self) -> Iterator[psycopg.Connection[Any]]:
        """A pooled connection inside one transaction: committed on success, else rolled back."""
        with self.connection() as conn, conn.transaction():
            yield conn

    def fetch(self, query: str, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        """Run one statement (``{s}`` is the schema) in a transaction of its own; its rows."""
        sql = query.replace("{s}", self._s)
        with self.connection() as conn:
            if conn.autocommit:
                cur = conn.execute(sql, params)
                return cur.fetchall() if cur.description else []
            with conn.transaction():
                cur = conn.execute(sql, params)
                return cur.fetchall() if cur.description else []

    def call(self, query: str, params: Sequence[str | None]) -> list[str | None]:
        """Run one statement with text parameters (``$1``…; ``{s}`` is the schema) in a
        transaction of its own; its first row as text (``None`` for NULL).

        For the statements every turn makes (taking the lease, committing): it goes to
        libpq directly (``pq.PGconn.exec_params``, the GIL released while it waits),
        without psycopg's adaptation of parameters and rows, which costs more than the
        statement's own work on the client. Unnamed statements, as ``fetch``'s (no
        session state), unless ``prepare=True``: then each is prepared once per connection.
        """
        sql = self._sql.get(query)
        if sql is None:
            sql = self._sql[query] = query.replace("{s}", self._s).encode()
        if self._closed:
            raise StoreClosedError(f"{self.where}: the PostgreSQL store was closed")
        # getconn/putconn, not the pool's context manager: no transaction to end here
        try:
            conn = self._checkout()
        except psycopg.Error as exc:
            raise self._store_error(exc) from exc
        watch = self._watchdog.watch(conn, self.statement_timeout)
        try:
            pgconn = conn.pgconn
            codec = conn.info.encoding
            values = [None if p is None else p.encode(codec) for p in params]
            if self.prepare:
                # NULLs are sent as None (libpq), which psycopg's stub leaves out
                result = pgconn.exec_prepared(self._prepared_on(conn, sql), values)  # type: ignore[arg-type]
            else:
                result = pgconn.exec_params(sql, values)
            if result.status != pq.ExecStatus.TUPLES_OK:
                raise pg_errors.error_from_result(result, encoding=codec)
            row = [result.get_value(0, i) for i in range(result.nfields if result.ntuples else 0)]
            result.clear()
        except psycopg.Error as exc:
            raise self._store_error(exc) from exc
        finally:
            self._watchdog.done(watch)
            self._pool.putconn(conn)  # a broken connection is replaced by the pool
        return [None if v is None else v.decode(codec) for v in row]

    def _prepared_on(self, conn: psycopg.Connection[Any], sql: bytes) -> bytes:
        """The name of ``sql`` prepared on ``conn`` (``prepare=True``), preparing it once."""
        names = self._prepared.get(conn)
        if names is None:
            names = self._prepared[conn] = {}
        name = names.get(sql)
        if name is None:
            name = f"lousho_{len(names)}".encode()
            result = conn.pgconn.prepare(name, sql)
            if result.status != pq.ExecStatus.COMMAND_OK:
                raise pg_errors.error_from_result(result, encoding=conn.info.encoding)
            names[sql] = name
        return name

    def run(self, conn: psycopg.Connection[Any], query: str, params: Any = None) -> Any:
        """Run ``query`` (``{s}`` is the schema) on ``conn``; the cursor."""
        return conn.execute(query.replace("{s}", self._s), params)

    def effective_fence(self, session_id: str, fence: int | None) -> int | None:
        """``fence``, or, for ``None``, the fence of the lease this thread holds on the session."""
        if fence is not None:
            return fence
        lease = self._held_leases().get(session_id)
        return None if lease is None else lease.fence

    def check_fenced(self, fenced: bool, session_id: str, fence: int | None) -> None:
        """``LeaseLostError`` when a fenced statement reported the fence stale."""
        if fenced:
            return
        used = self.effective_fence(session_id, fence)
        raise LeaseLostError(
            f"session {session_id!r} ({self.where}): the write carries fence {used} but a "
            "newer fence was handed out since (the lease expired and another worker took the "
            "session); nothing was written"
        )

    def _held_leases(self) -> dict[str, Lease]:
        held: dict[str, Lease] | None = getattr(self._held, "leases", None)
        if held is None:
            held = self._held.leases = {}
        return held

    def prune_parts(
        self,
        older_than: timedelta | float,
        *,
        sessions: bool = True,
        checkpoints: bool = True,
        approvals: bool = True,
    ) -> PruneResult:
        """``prune`` limited to some parts, in one transaction."""
        params = {"age": older_than_seconds(older_than)}
        cutoff = "now() - make_interval(secs => %(age)s)"
        counts = [0, 0, 0, 0, 0, 0]
        # a session whose lease is live (its turn runs now) is kept, with its checkpoints
        live = "SELECT 1 FROM {s}.leases l WHERE l.session_id = %s AND l.expires_at > now()"
        live_session, live_turn = live % "s.id", live % "split_part(c.turn_id, '.', 1)"
        with self.transaction() as conn:
            if sessions:
                counts[0] = self.run(
                    conn,
                    f"WITH old AS (DELETE FROM {{s}}.sessions s WHERE updated_at <= {cutoff} "
                    f"AND NOT EXISTS ({live_session}) RETURNING id), "
                    "m AS (DELETE FROM {s}.messages WHERE session_id IN (SELECT id FROM old)), "
                    # the sessions' state records (a checkpoint prune keeps them)
                    "st AS (DELETE FROM {s}.checkpoints "
                    "WHERE turn_id IN (SELECT id || '.state' FROM old)) "
                    "SELECT count(*) FROM old",
                    params,
                ).fetchone()[0]
            if checkpoints:
                counts[1] = self.run(
                    conn,
                    f"DELETE FROM {{s}}.checkpoints c WHERE updated_at <= {cutoff} "
                    f"AND NOT EXISTS ({live_turn}) AND c.turn_id NOT LIKE '%%.state'",
                    params,
                ).rowcount
            if sessions:
                # the fences of sessions gone: released, or expired that long ago (a holder
                # paused past its lease may still write; its fence must refuse it)
                counts[5] = self.run(
                    conn,
                    "DELETE FROM {s}.leases l WHERE (l.expires_at IS NULL OR "
                    f"l.expires_at <= {cutoff}) AND NOT EXISTS (SELECT 1 FROM {{s}}.sessions s "
                    "WHERE s.id = l.session_id) AND NOT EXISTS (SELECT 1 FROM {s}.checkpoints c "
                    "WHERE starts_with(c.turn_id, l.session_id || '.'))",
                    params,
                ).rowcount
            if approvals:
                counts[2] = self.run(
                    conn,
                    "DELETE FROM {s}.approvals WHERE status <> 'pending' "
                    f"AND resolved_at <= {cutoff}",
                    params,
                ).rowcount
        result = PruneResult(*counts)
        log.info("%s: pruned %s", self.where, result)
        return result

    def rotate_key(self, *, batch_size: int = BATCH) -> RotationResult:
        """Reseal every record not sealed with the current key, in batches (``rotate-key``)."""
        return rotate_postgres(self, batch_size)


class PgPart:
    """A part of a ``PostgresStore``: its sessions, checkpoints or approvals."""

    fenced_writes = True

    def __init__(self, store: PgCore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store.where!r})"

    def close(self) -> None:
        """Close the whole ``PostgresStore`` (its parts share one pool)."""
        self.store.close()
