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
import socket
import threading
import time
import weakref
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import psycopg
import psycopg_pool
from psycopg.conninfo import conninfo_to_dict

from ..encryption import EncryptionOption
from ..errors import (
    SchemaVersionError,
    SessionBusyError,
    StoreClosedError,
    StoreError,
)
from ._heartbeat import Heartbeat
from ._postgres_core import PgCore
from ._postgres_lease import PostgresLease, ReleaseListener, WokenBy
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
from ._postgres_sessions import PostgresSessionStore
from ._postgres_watch import Watchdog
from ._sealing import Sealing
from ._secrets import scrub, secrets_of
from ._turn_requests import TakeTurn, start_body
from ._waiting import call_signal, lease_wait_stopped, until_text
from .base import (
    PruneResult,
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


#: How long ``close()`` waits for the pool's own threads (one may be connecting to a hung server).
_CLOSE_WAIT = 2.0

#: With ``prepare=True``: a statement is prepared on a connection from its second run there.
_PREPARE = 1


class PostgresStore(PgCore):
    """Sessions, checkpoints and approvals in one PostgreSQL schema, shared by every machine.

    ``PostgresStore("postgresql://user@host/db")`` opens a pool of its own
    (``min_size``, ``max_size``, ``timeout`` seconds to wait for a connection);
    ``PostgresStore(pool)`` uses a ``psycopg_pool.ConnectionPool`` of yours (then
    ``close()`` leaves it open). Connections are taken per statement, never held
    across a model or tool call, and carry no session state (no prepared
    statements, no session advisory locks), so PgBouncer in transaction mode works,
    with ``notify=False``: waiting for a busy session then polls with a backoff
    instead of ``LISTEN``ing on a dedicated connection. ``prepare=True`` (only for a
    pool of the store's own, and only with no PgBouncer in transaction mode before
    1.21 in between) lets each pooled connection prepare the statements it runs
    often: fewer bytes to parse and plan per turn.

    ``schema`` (default ``"lousho"``) holds the tables; it is created and migrated
    on open (``migrate=False``: only checked, for users who run ``migration_sql()``
    themselves). ``SchemaVersionError`` for a schema written by a newer release.

    ``statement_timeout`` (seconds, default 60; ``None``: no bound) bounds every
    statement from the client: one that gets no reply in time (a hung server, a proxy
    that stopped forwarding) has its connection cut and raises ``StoreError``; a lease
    renewal is bounded by a third of ``lease_ttl``. A pooled connection the server
    closed while idle is dropped before use, with no round trip.

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
        prepare: bool = False,
        statement_timeout: float | None = 60.0,
        encryption: EncryptionOption = None,
    ) -> None:
        self.sealing = Sealing(encryption)
        self.schema = validate_schema(schema)
        if not (isinstance(lease_ttl, (int, float)) and 0.1 <= lease_ttl <= 86400):
            raise ValueError(f"lease_ttl must be seconds between 0.1 and 86400, got {lease_ttl!r}")
        if statement_timeout is not None and not (
            isinstance(statement_timeout, (int, float)) and 0.1 <= statement_timeout <= 86400
        ):
            raise ValueError(
                "statement_timeout must be seconds between 0.1 and 86400 (or None: no bound), "
                f"got {statement_timeout!r}"
            )
        self.lease_ttl = float(lease_ttl)
        self.statement_timeout = None if statement_timeout is None else float(statement_timeout)
        self._watchdog = Watchdog(f"lousho-postgres-watchdog-{schema}")
        self.notify = notify
        self.prepare = prepare
        self._s = quoted(schema)
        self._sql: dict[str, bytes] = {}
        self._prepared = weakref.WeakKeyDictionary()
        self._channel = f"lousho_{schema}"
        self._closed = False
        #: How many schema versions this open applied (0: the schema was up to date).
        self.applied_migrations = 0
        self._held = threading.local()  # session id -> the lease this thread holds
        self._holder = f"{socket.gethostname()}:{os.getpid()}"
        pool: psycopg_pool.ConnectionPool[Any] | None = None
        if isinstance(conninfo, psycopg_pool.ConnectionPool):
            if prepare:
                raise ValueError(
                    "prepare=True applies to the store's own pool; for a pool of yours, "
                    "set prepare_threshold in its kwargs"
                )
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
                kwargs={
                    "autocommit": True,
                    "prepare_threshold": _PREPARE if prepare else None,
                    **self._connect_timeout(),
                },
                open=True,
                name=f"lousho-{schema}",
            )
        self._pool = pool
        self._listener = ReleaseListener(self._connect, self._channel)
        self._heartbeat = Heartbeat(f"lousho-postgres-heartbeat-{schema}")
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
        self._watchdog.cut_all()  # a statement waiting on a hung server fails now
        self._listener.close()
        self._heartbeat.close()
        if self._own_pool:
            # the pool joins its threads one by one, each perhaps connecting to a hung
            # server: all of it bounded by _CLOSE_WAIT, the rest left to finish by itself
            closing = threading.Thread(
                target=self._pool.close,
                kwargs={"timeout": _CLOSE_WAIT},
                name=f"lousho-postgres-close-{self.schema}",
                daemon=True,
            )
            closing.start()
            closing.join(_CLOSE_WAIT)

    # -- connections ---------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        """A connection of its own (migrations, ``LISTEN``), in autocommit mode."""
        kwargs = {
            **self._connect_timeout(),
            **self._kwargs,
            "autocommit": True,
            "prepare_threshold": None,
        }
        return psycopg.connect(self._conninfo, **kwargs)

    def _connect_timeout(self) -> dict[str, Any]:
        """``connect_timeout`` from ``statement_timeout`` unless the conninfo sets one: a
        connection attempt to a hung server is bounded too."""
        if self.statement_timeout is None or "connect_timeout" in self._conninfo:
            return {}
        return {"connect_timeout": max(2, round(self.statement_timeout))}

    def _open_schema(self, run: bool) -> None:
        failure: StoreError | None = None
        try:
            with self._connect() as conn:
                if run:
                    self.applied_migrations = migrate(conn, self.schema, where=self.where)
                    return
                version = stored_version(conn, self.schema)
        except psycopg.Error as exc:
            # libpq copies a password it cannot decode (a raw "%") into its message
            message = scrub(str(exc), secrets_of(self._conninfo))
            failure = StoreError(f"{self.where}: cannot open the schema: {message}")
            if message == str(exc):
                raise failure from exc
        if failure is not None:  # outside the except block: no __context__ with the password
            raise failure
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
        return self._turn_lock(id, timeout, None)[0]

    def acquire(self, request: TakeTurn) -> tuple[Lease, int | None, bool, bool]:
        """The lease of ``request`` (a ``take_turn``), taken in one statement that also reads
        the session's revision and whether it has a checkpoint here, and saves the turn's
        first checkpoint (``acquire_saving``, schema v3) when it goes to this store's
        checkpoints and nothing changed since it was built: ``(lease, revision, no
        checkpoints, saved)``."""
        return self._turn_lock(request.id, request.timeout, self._offer(request))

    def _offer(self, request: TakeTurn) -> tuple[str, str | None, str] | None:
        """``(turn id, revision, checkpoint text without its fence)``, or ``None``: not here."""
        revision = request.held_revision
        if not (
            request.checkpoint is not None
            and isinstance(request.checkpoints, PostgresCheckpointStore)
            and request.checkpoints.store is self
            and (revision is None or type(revision) is int)
        ):
            return None
        text = start_body(request, self.sealing)
        if text is None:
            return None
        return request.checkpoint.turn_id, (None if revision is None else str(revision)), text

    def _turn_lock(
        self, id: str, timeout: float | None, offer: tuple[str, str | None, str] | None
    ) -> tuple[Lease, int | None, bool, bool]:
        validate_session_id(id)
        if self._closed:
            raise StoreClosedError(f"{self.where}: the PostgreSQL store was closed")
        began = time.monotonic()
        deadline = None if timeout is None else began + max(timeout, 0.0)
        poll = _POLL_FIRST
        signal = call_signal()
        logged = None
        with self._listener.interest(id) as interest, WokenBy(self._listener, signal) as woken:
            while True:
                seen = interest.generation
                asked = time.monotonic()
                fence, holder, remaining, revision, checkpoints, saved = self._try_acquire(
                    id, offer
                )
                if fence is not None:
                    # read in the statement that took the lease: a turn's first look
                    return self._lease(id, fence, asked), revision, checkpoints is False, saved
                now = time.monotonic()
                if signal is not None and signal.aborted:
                    raise lease_wait_stopped(
                        id, holder, remaining, now - began, signal.reason, self.where
                    )
                if holder != logged and (deadline is None or deadline > now):
                    logged = holder
                    log.info(
                        "session %r: waiting for the lease held by %s until %s, unless it "
                        "is released or renewed first (%s)",
                        id,
                        holder or "an unknown holder",
                        until_text(remaining),
                        self.where,
                    )
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
                woken.arm()
                self._listener.wait(interest, seen, wait, signal)

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
                taken = self._try_acquire(sid)[0]
                if taken is not None:
                    claimed[sid] = self._lease(sid, taken)
        return claimed

    def _try_acquire(
        self, id: str, offer: tuple[str, str | None, str] | None = None
    ) -> tuple[int | None, str | None, float, int | None, bool | None, bool]:
        """One atomic attempt (one statement, ``acquire_saving`` of schema v3): the new fence,
        or ``None`` with the holder and its time left; then the session's revision, whether
        it has a checkpoint (read once the lease was taken), and whether ``offer``'s
        checkpoint was saved with the lease."""
        turn_id, revision, body = offer if offer is not None else (None, None, None)
        row = self.call(
            "SELECT * FROM {s}.acquire_saving($1, $2, $3, $4::bigint, $5, $6)",
            [id, f"{self._holder}:{threading.get_ident()}", repr(self.lease_ttl), revision,
             turn_id, body],
        )  # fmt: skip
        fence, holder, remaining, stored, checkpoints, saved = row
        return (
            None if fence is None else int(fence),
            holder,
            0.0 if remaining is None else float(remaining),
            None if stored is None else int(stored),
            None if checkpoints is None else checkpoints == "t",
            saved == "t",
        )

    def _lease(self, id: str, fence: int, asked: float | None = None) -> Lease:
        held = self._held_leases()
        params = {"id": id, "fence": fence, "ttl": self.lease_ttl, "channel": self._channel}
        # a renewal waits a sixth of the ttl at most, then tries another connection
        bound = min(self.lease_ttl / 6, self.statement_timeout or self.lease_ttl)

        def renew() -> bool:
            with self.connection(bound) as conn:
                return bool(
                    self.run(
                        conn,
                        "UPDATE {s}.leases SET expires_at = now() + make_interval(secs => %(ttl)s) "
                        "WHERE session_id = %(id)s AND fence = %(fence)s "
                        "AND expires_at IS NOT NULL RETURNING 1",
                        params,
                    ).fetchall()
                )

        def forget() -> None:
            if held.get(id) is lease:
                del held[id]

        def release() -> None:
            forget()
            try:
                # Not flushed to disk before it returns (synchronous_commit off for this one
                # transaction, in the schema's release function): a release lost in a server crash only leaves the lease to
                # run out; the fence it frees was made durable by the turn's first write.
                self.fetch("SELECT {s}.release(%(id)s, %(fence)s, %(channel)s)", params)
            except StoreError as exc:  # the row runs out by itself
                log.warning(
                    "session %r: cannot release the lease (%s); it expires in time", id, exc
                )

        lease = PostgresLease(
            id,
            fence,
            ttl=self.lease_ttl,
            renew=renew,
            release=release,
            heartbeat=self._heartbeat,
            owner=self,
            forget=forget,
            taken_at=asked,
        )
        held[id] = lease
        return lease

    # -- prune --------------------------------------------------------------------------

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete sessions and checkpoints not updated within ``older_than`` (seconds or a
        ``timedelta``, by the database's clock) and approvals resolved that long ago."""
        return self.prune_parts(older_than)


def _describe(conninfo: str, schema: str) -> str:
    """``host:port/dbname schema 'x'`` for messages: never the password."""
    try:
        params = conninfo_to_dict(conninfo)
    except psycopg.Error:
        params = {}
    host = params.get("host") or "localhost"
    port = params.get("port") or 5432
    return f"postgresql {host}:{port}/{params.get('dbname') or params.get('user') or ''} schema {schema!r}"
