"""SQLite stores: transcripts, checkpoints and approvals in one transactional file.

Import it as ``from lousho_sessions.sqlite import SqliteStore``: the root package
never imports ``sqlite3``. Messages are rows ``(session_id, seq, json)``, so an
``append`` writes only the new messages; a per-session row holds the length and
a revision. The schema is versioned with ``PRAGMA user_version``: each entry of
``MIGRATIONS`` takes the database one version up, applied on open. A ``leases``
row keeps the fence handed out last with each session's turn lock; fenced writes
compare with it in their own transaction.
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ..errors import (
    ApprovalNotFoundError,
    SchemaVersionError,
    SessionBusyError,
    StoreClosedError,
    StoreConflictError,
    StoreCorruptError,
    StoreError,
)
from ..messages import Message
from ..serde import messages_from_json
from .base import (
    BaseApprovalStore,
    BaseCheckpointStore,
    BaseSessionStore,
    LockScope,
    PruneResult,
    decode_json_object,
    encode_json_object,
    message_json,
    older_than_seconds,
    resolved_approval,
    validate_approval_id,
    validate_session_id,
    validate_turn_id,
)
from .lease import Lease, check_fence, fence_session_id, next_fence

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SqliteApprovalStore",
    "SqliteCheckpointStore",
    "SqliteSessionStore",
    "SqliteStore",
]

log = logging.getLogger("lousho_sessions.stores.sqlite")

#: ``(summary, statements)`` per schema version; entry ``n`` takes version ``n`` to ``n + 1``.
MIGRATIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "1: sessions with length and revision, messages as rows, checkpoints, approvals",
        (
            """CREATE TABLE sessions (
                id TEXT PRIMARY KEY,
                length INTEGER NOT NULL,
                revision INTEGER NOT NULL,
                updated_at REAL NOT NULL
            )""",
            """CREATE TABLE messages (
                session_id TEXT NOT NULL,
                seq INTEGER NOT NULL,
                json TEXT NOT NULL,
                PRIMARY KEY (session_id, seq)
            )""",
            """CREATE TABLE checkpoints (
                turn_id TEXT PRIMARY KEY,
                json TEXT NOT NULL,
                updated_at REAL NOT NULL
            )""",
            """CREATE TABLE approvals (
                id TEXT PRIMARY KEY,
                session_id TEXT,
                status TEXT,
                created_key TEXT NOT NULL,
                json TEXT NOT NULL,
                resolved_at REAL
            )""",
            "CREATE INDEX sessions_updated ON sessions (updated_at)",
            "CREATE INDEX checkpoints_updated ON checkpoints (updated_at)",
            "CREATE INDEX approvals_session ON approvals (session_id, status)",
            "CREATE INDEX approvals_resolved ON approvals (resolved_at)",
        ),
    ),
    (
        "2: leases: the fence handed out last with each session's turn lock",
        (
            """CREATE TABLE leases (
                session_id TEXT PRIMARY KEY,
                fence INTEGER NOT NULL
            ) WITHOUT ROWID""",
        ),
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_MEMORY = ":memory:"


class SqliteStore:
    """Sessions, checkpoints and approvals in one SQLite database (or ``":memory:"``).

    ``.sessions``, ``.checkpoints`` and ``.approvals`` are the ``AgentStore``
    parts. Safe to share between threads (one connection behind a lock) and
    between processes (WAL mode, a 5 s busy timeout). Creates the parent
    directory; raises ``StoreCorruptError`` for a file that is not SQLite and
    ``SchemaVersionError`` for a database written by a newer release. After
    ``close()`` every call raises ``StoreClosedError``.

    ``synchronous`` is SQLite's setting: ``"NORMAL"`` (default) survives a
    process crash but a power loss may lose the last commits; ``"FULL"`` syncs
    each commit and survives a power loss.
    """

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL") -> None:
        raw = os.fspath(path)
        self.path = raw if raw == _MEMORY else str(Path(raw).absolute())
        mode = synchronous.upper()
        if mode not in _SYNCHRONOUS:
            raise ValueError(
                f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {synchronous!r}"
            )
        self.synchronous = mode
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = self._open()
        self._memory_turns: dict[str, list[Any]] = {}  # ":memory:" turn locks: id -> [lock, users]
        self._reopen = False  # set in a forked child: open a connection of its own on first use
        self._inherited: list[sqlite3.Connection] = []
        _LIVE_STORES.add(self)
        self.sessions = SqliteSessionStore(self)
        self.checkpoints = SqliteCheckpointStore(self)
        self.approvals = SqliteApprovalStore(self)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"SqliteStore({self.path!r}, {state})"

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._conn is None and not self._reopen

    def close(self) -> None:
        """Close the database; later calls raise ``StoreClosedError``. Closing twice is fine."""
        with self._lock:
            self._reopen = False
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete sessions and checkpoints not updated within ``older_than`` (seconds or a
        ``timedelta``) and approvals resolved that long ago; pending approvals are kept."""
        cutoff = time.time() - older_than_seconds(older_than)
        with self.transaction() as conn:
            sessions = _prune_sessions(conn, cutoff)
            checkpoints = _prune_checkpoints(conn, cutoff)
            approvals = _prune_approvals(conn, cutoff)
        log.info(
            "%s: pruned %d sessions, %d checkpoints, %d approvals",
            self.path,
            sessions,
            checkpoints,
            approvals,
        )
        return PruneResult(sessions=sessions, checkpoints=checkpoints, approvals=approvals)

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, held under the store's lock; SQLite errors come out as ``StoreError``."""
        with self._lock:
            if self._conn is None and self._reopen:
                self._conn = self._open()
                self._reopen = False
            if self._conn is None:
                raise StoreClosedError(f"{self.path}: the SQLite store was closed")
            try:
                yield self._conn
            except sqlite3.Error as exc:
                raise _wrap(self.path, exc) from exc

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``): committed on success, else rolled back."""
        with self.connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Hold session ``id`` for a turn across threads and processes; see ``docs/stores.md``.

        A file database uses an OS file lock ``<db>.locks/<id>.lock`` (freed when
        the holding process dies); ``":memory:"`` a lock per id in this store.
        ``SessionBusyError`` when not acquired within ``timeout`` seconds. The
        lease's fence is written to the ``leases`` table while the lock is held.
        """
        validate_session_id(id)
        with self._lock:
            if self._conn is None and not self._reopen:
                raise StoreClosedError(f"{self.path}: the SQLite store was closed")
        release = (
            self._memory_turn(id, timeout) if self.path == _MEMORY else self._file_turn(id, timeout)
        )
        try:
            with self.transaction() as conn:
                row = conn.execute(
                    "SELECT fence FROM leases WHERE session_id = ?", (id,)
                ).fetchone()
                fence = next_fence(None if row is None else int(row[0]))
                conn.execute(
                    "INSERT INTO leases (session_id, fence) VALUES (?, ?) "
                    "ON CONFLICT (session_id) DO UPDATE SET fence = excluded.fence",
                    (id, fence),
                )
        except BaseException:
            release()
            raise
        return Lease(id, fence, release)

    def check_fence(self, conn: sqlite3.Connection, session_id: str, fence: int | None) -> None:
        """In a write transaction: ``LeaseLostError`` if ``fence`` is older than the session's."""
        if fence is None:
            return
        row = conn.execute(
            "SELECT fence FROM leases WHERE session_id = ?", (session_id,)
        ).fetchone()
        check_fence(session_id, fence, None if row is None else int(row[0]), where=self.path)

    def _file_turn(self, id: str, timeout: float | None) -> Callable[[], None]:
        lock_dir = Path(self.path + ".locks")
        try:
            lock_dir.mkdir(exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{lock_dir}: cannot create the lock directory: {exc}") from exc
        lock_path = lock_dir / f"{id}.lock"
        lock = FileLock(lock_path, timeout=-1 if timeout is None else timeout)
        try:
            lock.acquire()
        except Timeout as exc:
            raise SessionBusyError(
                f"session {id!r} is held by another turn: {lock_path} not acquired within {timeout} s"
            ) from exc
        return lock.release

    def _memory_turn(self, id: str, timeout: float | None) -> Callable[[], None]:
        with self._lock:
            entry = self._memory_turns.setdefault(id, [threading.Lock(), 0])
            entry[1] += 1
        lock: threading.Lock = entry[0]

        def leave() -> None:
            with self._lock:
                entry[1] -= 1
                if entry[1] == 0:
                    del self._memory_turns[id]

        if not lock.acquire(timeout=-1 if timeout is None else timeout):
            leave()
            raise SessionBusyError(
                f"session {id!r} is held by another turn (not acquired within {timeout} s)"
            )

        def release() -> None:
            lock.release()
            leave()

        return release

    def _after_fork_in_child(self) -> None:
        # SQLite connections must not cross a fork (gunicorn --preload, multiprocessing
        # "fork"): the child keeps the parent's connection object unused and unclosed
        # (closing it could undo the parent's locks) and opens its own on first use.
        # Locks held by the parent's other threads at the fork are replaced.
        self._lock = threading.RLock()
        self._memory_turns = {}
        if self._conn is not None and self.path != _MEMORY:
            self._inherited.append(self._conn)
            self._conn = None
            self._reopen = True

    def _open(self) -> sqlite3.Connection:
        if self.path != _MEMORY:
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"{self.path}: cannot create the directory: {exc}") from exc
        try:
            conn = sqlite3.connect(
                self.path, timeout=5.0, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise _wrap(self.path, exc) from exc
        try:
            conn.execute("PRAGMA busy_timeout = 5000")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            if self.path != _MEMORY:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    log.warning("%s: could not switch to WAL (journal_mode is %s)", self.path, mode)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            if version < SCHEMA_VERSION:
                self._migrate(conn)
        except BaseException as exc:
            conn.close()
            if isinstance(exc, sqlite3.Error):
                raise _wrap(self.path, exc) from exc
            raise
        return conn

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"{self.path}: schema version {version} was written by a newer lousho_sessions; "
                f"this release reads versions up to {SCHEMA_VERSION}"
            )

    def _migrate(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Read again under the write lock: another process may have migrated meanwhile.
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            for summary, statements in MIGRATIONS[version:]:
                log.info("%s: migrating the schema to version %s", self.path, summary)
                for statement in statements:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")


_LIVE_STORES: weakref.WeakSet[SqliteStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for store in list(_LIVE_STORES):
        store._after_fork_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _wrap(path: str, exc: sqlite3.Error) -> StoreError:
    # OperationalError covers "locked", "unable to open", "disk full": not corruption.
    if isinstance(exc, sqlite3.DatabaseError) and not isinstance(exc, sqlite3.OperationalError):
        return StoreCorruptError(f"{path}: not a SQLite database, or a damaged one: {exc}")
    return StoreError(f"{path}: {exc}")


class _Part:
    fenced_writes = True

    def __init__(self, store: SqliteStore) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store.path!r})"


class SqliteSessionStore(_Part, BaseSessionStore):
    """The transcripts of a ``SqliteStore``: one row per message.

    ``append`` writes only the new rows, ``revision`` is one indexed SELECT, and
    ``turn_lock`` spans processes (``lock_scope`` ``"machine"``) except for
    ``":memory:"`` (``"process"``).
    """

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store)
        self.lock_scope: LockScope = "process" if store.path == _MEMORY else "machine"

    def load(self, id: str) -> list[Message] | None:
        validate_session_id(id)
        with self.store.connection() as conn:
            rows = conn.execute(
                "SELECT m.json FROM sessions s LEFT JOIN messages m ON m.session_id = s.id "
                "WHERE s.id = ? ORDER BY m.seq",
                (id,),
            ).fetchall()
        if not rows:
            return None
        if rows[0][0] is None:
            return []
        text = "[" + ",".join(row[0] for row in rows) + "]"
        return messages_from_json(text, source=f"{self.store.path}: session {id!r}")

    def save(self, id: str, messages: Sequence[Message]) -> None:
        validate_session_id(id)
        rows = _rows(id, messages, 0)
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM messages WHERE session_id = ?", (id,))
            conn.executemany("INSERT INTO messages (session_id, seq, json) VALUES (?, ?, ?)", rows)
            _touch(conn, id, len(rows))

    def append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        fence: int | None = None,
    ) -> None:
        """Add ``messages`` if ``expected_length`` are stored, else ``StoreConflictError``;
        ``LeaseLostError`` if ``fence`` is older than the session's newest."""
        validate_session_id(id)
        rows = _rows(id, messages, expected_length)
        with self.store.transaction() as conn:
            self.store.check_fence(conn, id, fence)
            row = conn.execute("SELECT length FROM sessions WHERE id = ?", (id,)).fetchone()
            length = row[0] if row else 0
            if length != expected_length:
                raise StoreConflictError(
                    f"session {id!r} ({self.store.path}): expected {expected_length} stored "
                    f"messages, found {length}"
                )
            conn.executemany("INSERT INTO messages (session_id, seq, json) VALUES (?, ?, ?)", rows)
            _touch(conn, id, length + len(rows))

    def delete(self, id: str) -> None:
        validate_session_id(id)
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM messages WHERE session_id = ?", (id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (id,))

    def revision(self, id: str) -> int | None:
        """A value that changes with every write of ``id``; ``None`` when nothing is stored."""
        validate_session_id(id)
        with self.store.connection() as conn:
            row = conn.execute("SELECT revision FROM sessions WHERE id = ?", (id,)).fetchone()
        return None if row is None else int(row[0])

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Hold session ``id`` for a turn; see ``SqliteStore.turn_lock``."""
        return self.store.turn_lock(id, timeout=timeout)

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the sessions not updated within ``older_than`` (seconds or a ``timedelta``)."""
        cutoff = time.time() - older_than_seconds(older_than)
        with self.store.transaction() as conn:
            return PruneResult(sessions=_prune_sessions(conn, cutoff), checkpoints=0, approvals=0)


def _rows(id: str, messages: Sequence[Message], start: int) -> list[tuple[str, int, str]]:
    rows = []
    for i, m in enumerate(messages, start):
        if not isinstance(m, Message):
            raise TypeError(f"session {id!r}: expected Message objects, got {type(m).__name__}")
        rows.append((id, i, message_json(m)))
    return rows


def _prune_sessions(conn: sqlite3.Connection, cutoff: float) -> int:
    old = "SELECT id FROM sessions WHERE updated_at < ?"
    conn.execute(f"DELETE FROM messages WHERE session_id IN ({old})", (cutoff,))
    conn.execute(f"DELETE FROM leases WHERE session_id IN ({old})", (cutoff,))
    return int(conn.execute("DELETE FROM sessions WHERE updated_at < ?", (cutoff,)).rowcount)


def _prune_checkpoints(conn: sqlite3.Connection, cutoff: float) -> int:
    return int(conn.execute("DELETE FROM checkpoints WHERE updated_at < ?", (cutoff,)).rowcount)


def _prune_approvals(conn: sqlite3.Connection, cutoff: float) -> int:
    return int(
        conn.execute(
            "DELETE FROM approvals WHERE status IS NOT 'pending' AND resolved_at < ?", (cutoff,)
        ).rowcount
    )


def _touch(conn: sqlite3.Connection, id: str, length: int) -> None:
    # A random revision, not a counter: a session deleted and saved again must not
    # repeat a revision another process remembers.
    conn.execute(
        "INSERT INTO sessions (id, length, revision, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET length = excluded.length, revision = excluded.revision, "
        "updated_at = excluded.updated_at",
        (id, length, secrets.randbits(63), time.time()),
    )


class SqliteCheckpointStore(_Part, BaseCheckpointStore):
    """The checkpoints of a ``SqliteStore``, as opaque JSON per turn id."""

    def load(self, turn_id: str) -> dict[str, Any] | None:
        validate_turn_id(turn_id)
        with self.store.connection() as conn:
            row = conn.execute(
                "SELECT json FROM checkpoints WHERE turn_id = ?", (turn_id,)
            ).fetchone()
        if row is None:
            return None
        return decode_json_object(row[0], source=f"{self.store.path}: checkpoint {turn_id!r}")

    def save(
        self, turn_id: str, checkpoint: Mapping[str, Any], *, fence: int | None = None
    ) -> None:
        validate_turn_id(turn_id)
        text = encode_json_object(checkpoint, what=f"checkpoint {turn_id!r}")
        with self.store.transaction() as conn:
            self.store.check_fence(conn, fence_session_id(turn_id), fence)
            conn.execute(
                "INSERT INTO checkpoints (turn_id, json, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (turn_id) DO UPDATE SET json = excluded.json, "
                "updated_at = excluded.updated_at",
                (turn_id, text, time.time()),
            )

    def delete(self, turn_id: str, *, fence: int | None = None) -> None:
        validate_turn_id(turn_id)
        with self.store.transaction() as conn:
            self.store.check_fence(conn, fence_session_id(turn_id), fence)
            conn.execute("DELETE FROM checkpoints WHERE turn_id = ?", (turn_id,))

    def list(self, prefix: str = "") -> list[str]:
        """The stored turn ids that start with ``prefix``, sorted."""
        with self.store.connection() as conn:
            rows = conn.execute(
                "SELECT turn_id FROM checkpoints WHERE substr(turn_id, 1, ?) = ? ORDER BY turn_id",
                (len(prefix), prefix),
            ).fetchall()
        return [row[0] for row in rows]

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the checkpoints not updated within ``older_than``."""
        cutoff = time.time() - older_than_seconds(older_than)
        with self.store.transaction() as conn:
            return PruneResult(
                sessions=0, checkpoints=_prune_checkpoints(conn, cutoff), approvals=0
            )


class SqliteApprovalStore(_Part, BaseApprovalStore):
    """The approval records of a ``SqliteStore``; ``resolve`` is a compare-and-set in one
    transaction (``UPDATE ... WHERE status = 'pending'``), so across processes one caller wins."""

    def create(self, record: Mapping[str, Any], *, fence: int | None = None) -> None:
        """Store a new record; ``ValueError`` if one with its ``id`` exists."""
        approval_id = validate_approval_id(record.get("id"))
        text = encode_json_object(record, what=f"approval {approval_id!r}")
        status = record.get("status")
        session_id = record.get("session_id")
        with self.store.transaction() as conn:
            if isinstance(session_id, str):
                self.store.check_fence(conn, session_id, fence)
            try:
                conn.execute(
                    "INSERT INTO approvals (id, session_id, status, created_key, json, resolved_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        approval_id,
                        session_id if isinstance(session_id, str) else None,
                        status if isinstance(status, str) else None,
                        str(record.get("created_at", "")),
                        text,
                        None if status == "pending" else time.time(),
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise ValueError(
                    f"approval {approval_id!r} exists already ({self.store.path})"
                ) from exc

    def get(self, id: str) -> dict[str, Any] | None:
        validate_approval_id(id)
        with self.store.connection() as conn:
            row = conn.execute("SELECT json FROM approvals WHERE id = ?", (id,)).fetchone()
        return None if row is None else self._decode(id, row[0])

    def resolve(self, id: str, *, approved: bool, reason: str | None = None) -> dict[str, Any]:
        validate_approval_id(id)
        with self.store.transaction() as conn:
            row = conn.execute("SELECT json FROM approvals WHERE id = ?", (id,)).fetchone()
            if row is None:
                raise ApprovalNotFoundError(f"no approval with id {id!r} in {self.store.path}")
            record = resolved_approval(
                self._decode(id, row[0]), approved=approved, reason=reason, source=repr(id)
            )
            updated = conn.execute(
                "UPDATE approvals SET status = ?, json = ?, resolved_at = ? "
                "WHERE id = ? AND status = 'pending'",
                (
                    record["status"],
                    encode_json_object(record, what=f"approval {id!r}"),
                    time.time(),
                    id,
                ),
            ).rowcount
            if updated != 1:  # the JSON said pending but the column did not: keep them in step
                raise StoreCorruptError(
                    f"{self.store.path}: approval {id!r}: status column and record disagree"
                )
        return record

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[dict[str, Any]]:
        query = "SELECT id, json FROM approvals"
        clauses, params = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        with self.store.connection() as conn:
            rows = conn.execute(query + " ORDER BY created_key, id", params).fetchall()
        return [self._decode(row[0], row[1]) for row in rows]

    def delete(self, id: str) -> None:
        validate_approval_id(id)
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM approvals WHERE id = ?", (id,))

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the records resolved more than ``older_than`` ago; pending ones stay."""
        cutoff = time.time() - older_than_seconds(older_than)
        with self.store.transaction() as conn:
            return PruneResult(sessions=0, checkpoints=0, approvals=_prune_approvals(conn, cutoff))

    def _decode(self, id: str, text: str) -> dict[str, Any]:
        return decode_json_object(text, source=f"{self.store.path}: approval {id!r}")
