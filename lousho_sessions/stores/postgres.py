"""PostgreSQL stores: sessions shared by many machines, one turn at a time, fenced writes.

Import it as ``from lousho_sessions.postgres import PostgresStore`` (the
``postgres`` extra: psycopg 3 and psycopg_pool); the root package never imports
psycopg. Messages are rows ``(session_id, seq)``; an append is one statement that
checks the stored length and the lease's fence and inserts the new rows. A turn's
lease is a row with a fence and an expiry kept by the database's clock
(``_postgres_lease``). See docs/stores.md, "PostgreSQL".
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

from ..errors import (
    SchemaVersionError,
    SessionBusyError,
    StoreClosedError,
    StoreConflictError,
    StoreError,
)
from ..messages import Message
from ..serde import messages_from_json
from ._postgres_core import FENCED, PgCore, PgPart
from ._postgres_lease import PostgresLease, ReleaseListener
from ._postgres_records import PostgresApprovalStore, PostgresCheckpointStore
from ._postgres_schema import (
    MIGRATIONS,
    SCHEMA_VERSION,
    migrate,
    migration_sql,
    quoted,
    stored_version,
    validate_schema,
)
from .base import (
    BaseSessionStore,
    LockScope,
    PruneResult,
    SessionInfo,
    message_json,
    validate_session_id,
)
from .lease import Lease

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "PostgresApprovalStore",
    "PostgresCheckpointStore",
    "PostgresSessionStore",
    "PostgresStore",
    "migration_sql",
]

log = logging.getLogger("lousho_sessions.stores.postgres")

#: With ``notify=True``, a waiter re-checks a busy session at least this often (a missed
#: notification, a holder that died and whose lease runs out).
_RECHECK = 5.0
#: With ``notify=False``: the first and the longest pause between re-checks.
_POLL_FIRST, _POLL_MAX = 0.05, 1.0


class PostgresStore(PgCore):
    """Sessions, checkpoints and approvals in one PostgreSQL schema, shared by every machine.

    ``PostgresStore("postgresql://user@host/db")`` opens a pool of its own
    (``min_size``, ``max_size``, ``timeout`` seconds to wait for a connection);
    ``PostgresStore(pool)`` uses a ``psycopg_pool.ConnectionPool`` of yours (then
    ``close()`` leaves it open). Connections are taken per statement, never held
    across a model or tool call, and carry no session state (no prepared
    statements, no session advisory locks), so PgBouncer in transaction mode works,
    with ``notify=False``: waiting for a busy session then polls with a backoff
    instead of ``LISTEN``ing on a dedicated connection.

    ``schema`` (default ``"lousho"``) holds the tables; it is created and migrated
    on open (``migrate=False``: only checked, for users who run ``migration_sql()``
    themselves). ``SchemaVersionError`` for a schema written by a newer release.

    ``turn_lock`` leases a session for ``lease_ttl`` seconds (database time),
    renewed every ``lease_ttl / 3`` s while held. Writes given the lease's fence,
    or made with ``fence=None`` by the thread holding the session's lease, are
    refused with ``LeaseLostError`` once another worker took the session over.
    """

    def __init__(
        self,
        conninfo: str | psycopg_pool.ConnectionPool[Any],
        *,
        schema: str = "lousho",
        min_size: int = 1,
        max_size: int = 10,
        timeout: float = 30.0,
        lease_ttl: float = 30.0,
        notify: bool = True,
        migrate: bool = True,
    ) -> None:
        self.schema = validate_schema(schema)
        if not (isinstance(lease_ttl, (int, float)) and 0.1 <= lease_ttl <= 86400):
            raise ValueError(f"lease_ttl must be seconds between 0.1 and 86400, got {lease_ttl!r}")
        self.lease_ttl = float(lease_ttl)
        self.notify = notify
        self._s = quoted(schema)
        self._channel = f"lousho_{schema}"
        self._closed = False
        #: How many schema versions this open applied (0: the schema was up to date).
        self.applied_migrations = 0
        self._held = threading.local()  # session id -> the lease this thread holds
        self._holder = f"{socket.gethostname()}:{os.getpid()}"
        pool: psycopg_pool.ConnectionPool[Any] | None = None
        if isinstance(conninfo, psycopg_pool.ConnectionPool):
            pool = conninfo
            self._own_pool = False
            info, kwargs = conninfo.conninfo, conninfo.kwargs  # may be callables (psycopg_pool 3.3)
            self._conninfo: str = info() if callable(info) else info
            self._kwargs: dict[str, Any] = dict((kwargs() if callable(kwargs) else kwargs) or {})
        elif isinstance(conninfo, str):
            self._conninfo = conninfo
            self._kwargs = {}
            self._own_pool = True
        else:
            raise TypeError(
                f"PostgresStore takes a conninfo string or a psycopg_pool.ConnectionPool, "
                f"got {type(conninfo).__name__}"
            )
        self.where = _describe(self._conninfo, schema)
        self._open_schema(migrate)
        if pool is None:
            pool = psycopg_pool.ConnectionPool(
                self._conninfo,
                min_size=min_size,
                max_size=max_size,
                timeout=timeout,
                kwargs={"autocommit": True, "prepare_threshold": None},
                open=True,
                name=f"lousho-{schema}",
            )
        self._pool = pool
        self._listener = ReleaseListener(self._connect, self._channel)
        self.sessions = PostgresSessionStore(self)
        self.checkpoints = PostgresCheckpointStore(self)
        self.approvals = PostgresApprovalStore(self)

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r})"

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @staticmethod
    def migration_sql(schema: str = "lousho", *, since: int = 0) -> str:
        """The SQL that creates (or, from version ``since``, upgrades) ``schema``, as a script."""
        return migration_sql(schema, since=since)

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Stop listening, close the pool (unless it is yours); later calls raise ``StoreClosedError``."""
        if self._closed:
            return
        self._closed = True
        self._listener.close()
        if self._own_pool:
            self._pool.close()

    # -- connections ---------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A connection of its own (migrations, ``LISTEN``), in autocommit mode."""
        kwargs = {**self._kwargs, "autocommit": True, "prepare_threshold": None}
        return psycopg.connect(self._conninfo, **kwargs)

    def _open_schema(self, run: bool) -> None:
        try:
            with self._connect() as conn:
                if run:
                    self.applied_migrations = migrate(conn, self.schema, where=self.where)
                    return
                version = stored_version(conn, self.schema)
        except psycopg.Error as exc:
            raise StoreError(f"{self.where}: cannot open the schema: {exc}") from exc
        if version != SCHEMA_VERSION:
            newer = version > SCHEMA_VERSION
            raise SchemaVersionError(
                f"{self.where}: schema {self.schema!r} is at version {version}, this release "
                + (
                    f"reads versions up to {SCHEMA_VERSION}"
                    if newer
                    else f"needs {SCHEMA_VERSION}: apply PostgresStore.migration_sql("
                    f"{self.schema!r}, since={version}) or open with migrate=True"
                )
            )

    # -- leases and fences -----------------------------------------------------------

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Lease session ``id`` for a turn, across machines; ``SessionBusyError`` after ``timeout`` s.

        Waits for a busy session by ``LISTEN`` (or polling with ``notify=False``),
        re-checking at least every few seconds and when the holder's lease runs out.
        """
        validate_session_id(id)
        if self._closed:
            raise StoreClosedError(f"{self.where}: the PostgreSQL store was closed")
        deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
        poll = _POLL_FIRST
        with self._listener.interest(id) as interest:
            while True:
                seen = interest.generation
                fence, holder, remaining = self._try_acquire(id)
                if fence is not None:
                    return self._lease(id, fence)
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    raise SessionBusyError(
                        f"session {id!r} is held by another turn ({holder or 'unknown holder'}, "
                        f"its lease runs out in {max(remaining, 0):.1f} s unless renewed; "
                        f"{self.where}): not acquired within {timeout} s"
                    )
                wait = max(remaining, 0.0) + 0.01
                if self.notify:
                    wait = min(wait, _RECHECK)
                    if not self._listener.start(min(wait, 2.0)):
                        wait = min(wait, _POLL_MAX)  # not listening yet: do not rely on it
                else:
                    wait, poll = min(wait, poll), min(poll * 2, _POLL_MAX)
                if deadline is not None:
                    wait = min(wait, max(deadline - time.monotonic(), 0.0))
                self._listener.wait(interest, seen, wait)

    def claim_stale(self, ids: Sequence[str]) -> dict[str, Lease]:
        """Lease, in one statement, those of sessions ``ids`` whose lease expired or was
        released; the others are left out. Rows another claimer is updating right now are
        skipped (``FOR UPDATE SKIP LOCKED``), so concurrent sweepers never wait on each other."""
        wanted = [validate_session_id(i) for i in dict.fromkeys(ids)]
        if not wanted:
            return {}
        params = {"ids": wanted, "holder": f"{self._holder}:sweep", "ttl": self.lease_ttl}
        rows = self.fetch(
            "WITH c AS (SELECT session_id FROM {s}.leases WHERE session_id = ANY(%(ids)s) "
            "AND (expires_at IS NULL OR expires_at <= now()) "
            "ORDER BY session_id FOR UPDATE SKIP LOCKED), "
            "u AS (UPDATE {s}.leases l SET fence = nextval('{s}.fences'), holder = %(holder)s, "
            "expires_at = now() + make_interval(secs => %(ttl)s) FROM c "
            "WHERE l.session_id = c.session_id RETURNING l.session_id, l.fence) "
            "SELECT u.session_id, u.fence FROM u UNION ALL "
            "SELECT i, NULL FROM unnest(%(ids)s::text[]) AS i "
            "WHERE NOT EXISTS (SELECT 1 FROM {s}.leases k WHERE k.session_id = i)",
            params,
        )
        claimed = {sid: self._lease(sid, int(fence)) for sid, fence in rows if fence is not None}
        for sid, fence in rows:
            if fence is None:  # never leased (a checkpoint written outside a lease)
                taken, _, _ = self._try_acquire(sid)
                if taken is not None:
                    claimed[sid] = self._lease(sid, taken)
        return claimed

    def _try_acquire(self, id: str) -> tuple[int | None, str | None, float]:
        """One atomic attempt: the new fence, or ``None`` with the holder and its time left."""
        rows = self.fetch(
            "WITH a AS (INSERT INTO {s}.leases AS l (session_id, fence, holder, expires_at) "
            "VALUES (%(id)s, nextval('{s}.fences'), %(holder)s, "
            "now() + make_interval(secs => %(ttl)s)) "
            "ON CONFLICT (session_id) DO UPDATE SET fence = excluded.fence, "
            "holder = excluded.holder, expires_at = excluded.expires_at "
            "WHERE l.expires_at IS NULL OR l.expires_at <= now() RETURNING l.fence) "
            "SELECT (SELECT fence FROM a), l.holder, "
            "extract(epoch FROM l.expires_at - now())::float8 "
            "FROM (SELECT 1) AS one LEFT JOIN {s}.leases l ON l.session_id = %(id)s",
            {"id": id, "holder": f"{self._holder}:{threading.get_ident()}", "ttl": self.lease_ttl},
        )
        fence, holder, remaining = rows[0]
        return (None if fence is None else int(fence)), holder, float(remaining or 0.0)

    def _lease(self, id: str, fence: int) -> Lease:
        held = self._held_leases()
        params = {"id": id, "fence": fence, "ttl": self.lease_ttl, "channel": self._channel}

        def renew() -> bool:
            return bool(
                self.fetch(
                    "UPDATE {s}.leases SET expires_at = now() + make_interval(secs => %(ttl)s) "
                    "WHERE session_id = %(id)s AND fence = %(fence)s RETURNING 1",
                    params,
                )
            )

        def release() -> None:
            if held.get(id) is lease:
                del held[id]
            try:
                self.fetch(
                    "WITH r AS (UPDATE {s}.leases SET expires_at = NULL, holder = NULL "
                    "WHERE session_id = %(id)s AND fence = %(fence)s RETURNING session_id) "
                    "SELECT pg_notify(%(channel)s, session_id) FROM r",
                    params,
                )
            except StoreError as exc:  # the row runs out by itself
                log.warning(
                    "session %r: cannot release the lease (%s); it expires in time", id, exc
                )

        lease = PostgresLease(id, fence, ttl=self.lease_ttl, renew=renew, release=release)
        held[id] = lease
        return lease

    # -- prune --------------------------------------------------------------------------

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete sessions and checkpoints not updated within ``older_than`` (seconds or a
        ``timedelta``, by the database's clock) and approvals resolved that long ago."""
        return self.prune_parts(older_than)


class PostgresSessionStore(PgPart, BaseSessionStore):
    """The transcripts of a ``PostgresStore``: one row per message; ``lock_scope`` ``"cluster"``."""

    lock_scope: LockScope = "cluster"
    store: PostgresStore

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
        text = "[" + ",".join(row[0] for row in rows) + "]"
        return messages_from_json(text, source=f"{self.store.where}: session {id!r}")

    def save(self, id: str, messages: Sequence[Message]) -> None:
        """Replace the transcript (refused with ``LeaseLostError`` if this thread's lease was lost)."""
        validate_session_id(id)
        bodies = _bodies(id, messages)
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
        validate_session_id(id)
        bodies = _bodies(id, messages)
        if expected_length == 0:  # the session may not exist yet
            upsert = (
                "INSERT INTO {s}.sessions AS t (id, length, revision, updated_at) "
                "SELECT %(sid)s, %(n)s, %(rev)s, now() WHERE (SELECT fenced FROM ok) "
                "ON CONFLICT (id) DO UPDATE SET length = excluded.length, "
                "revision = excluded.revision, updated_at = now() WHERE t.length = 0 RETURNING 1"
            )
        else:
            upsert = (
                "UPDATE {s}.sessions SET length = %(n)s, revision = %(rev)s, updated_at = now() "
                "WHERE id = %(sid)s AND length = %(expected)s AND (SELECT fenced FROM ok) "
                "RETURNING 1"
            )
        rows = self.store.fetch(
            FENCED + f", w AS ({upsert}), "
            "m AS (INSERT INTO {s}.messages (session_id, seq, body) "
            "SELECT %(sid)s, %(expected)s + u.seq - 1, u.body "
            "FROM unnest(%(bodies)s::json[]) WITH ORDINALITY AS u(body, seq) "
            "WHERE EXISTS (SELECT 1 FROM w) "
            "ON CONFLICT (session_id, seq) DO UPDATE SET body = excluded.body) "
            "SELECT EXISTS (SELECT 1 FROM w), (SELECT fenced FROM ok), "
            "(SELECT length FROM {s}.sessions WHERE id = %(sid)s)",
            {
                "sid": id,
                "fence": self.store.effective_fence(id, fence),
                "n": expected_length + len(bodies),
                "expected": expected_length,
                "rev": secrets.randbits(63),
                "bodies": bodies,
            },
        )
        written, fenced, length = rows[0]
        if written:
            return
        self.store.check_fenced(fenced, id, fence)
        raise StoreConflictError(
            f"session {id!r} ({self.store.where}): expected {expected_length} stored "
            f"messages, found {length or 0}"
        )

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
            "SELECT length, extract(epoch FROM updated_at)::float8 FROM {s}.sessions "
            "WHERE id = %(id)s",
            {"id": id},
        )
        return None if not rows else SessionInfo(id, int(rows[0][0]), float(rows[0][1]))

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Lease session ``id`` for a turn; see ``PostgresStore.turn_lock``."""
        return self.store.turn_lock(id, timeout=timeout)

    def claim_stale(self, ids: Sequence[str]) -> dict[str, Lease]:
        """Lease those of ``ids`` no live turn holds; see ``PostgresStore.claim_stale``."""
        return self.store.claim_stale(ids)

    def turn_held(self, id: str) -> bool:
        """Whether a lease on ``id`` is unexpired now (its holder still heartbeats)."""
        validate_session_id(id)
        rows = self.store.fetch(
            "SELECT 1 FROM {s}.leases WHERE session_id = %(id)s AND expires_at > now()",
            {"id": id},
        )
        return bool(rows)

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the sessions not updated within ``older_than`` (seconds or a ``timedelta``)."""
        return self.store.prune_parts(older_than, checkpoints=False, approvals=False)


def _bodies(id: str, messages: Sequence[Message]) -> list[str]:
    bodies = []
    for m in messages:
        if not isinstance(m, Message):
            raise TypeError(f"session {id!r}: expected Message objects, got {type(m).__name__}")
        bodies.append(message_json(m))
    return bodies


def _describe(conninfo: str, schema: str) -> str:
    """``host:port/dbname schema 'x'`` for messages: never the password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        params = {}
    host = params.get("host") or "localhost"
    port = params.get("port") or 5432
    return f"postgresql {host}:{port}/{params.get('dbname') or params.get('user') or ''} schema {schema!r}"
