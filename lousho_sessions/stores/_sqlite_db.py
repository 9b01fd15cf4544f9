"""The database of a ``SqliteStore`` (``lousho_sessions.stores.sqlite``): connection, schema.

One connection behind a lock, opened (and the parent directory and file created)
on construction; ``connection()`` and ``transaction()`` wrap SQLite errors as
``StoreError``. The schema is versioned with ``PRAGMA user_version``: each entry
of ``MIGRATIONS`` takes the database one version up, applied on open. Turn locks
and fences are ``_sqlite_turns``'; a forked child opens a connection of its own.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from ..errors import SchemaVersionError, StoreClosedError, StoreCorruptError, StoreError
from . import _lockfile
from ._sealing import Sealing
from ._sqlite_turns import SqliteTurns
from .base import validate_session_id
from .lease import Lease

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SqliteDatabase"]

log = logging.getLogger("lousho_sessions.stores.sqlite")

#: how long a statement waits for another connection's lock (seconds)
_BUSY_TIMEOUT = 5.0

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
    (
        # A turn writes its checkpoint and deletes it: one b-tree instead of three (the rows,
        # their turn-id index, the updated_at index) halves the pages those writes touch.
        # The table holds only unfinished turns and result records: prune scans it.
        "3: checkpoints keyed by turn id alone (WITHOUT ROWID, no updated_at index)",
        (
            """CREATE TABLE checkpoints_v3 (
                turn_id TEXT PRIMARY KEY,
                json TEXT NOT NULL,
                updated_at REAL NOT NULL
            ) WITHOUT ROWID""",
            "INSERT INTO checkpoints_v3 (turn_id, json, updated_at) "
            "SELECT turn_id, json, updated_at FROM checkpoints",
            "DROP TABLE checkpoints",
            "ALTER TABLE checkpoints_v3 RENAME TO checkpoints",
        ),
    ),
    (
        "4: sessions name the session they were forked from and the fork point",
        (
            "ALTER TABLE sessions ADD COLUMN parent TEXT",
            "ALTER TABLE sessions ADD COLUMN fork_point INTEGER",
        ),
    ),
    (
        # No statement: the tables stay as they are, but an older release must not read a
        # BLOB as a corrupt row (``_sealing``: the binary form; text values still open).
        "5: an encrypted store keeps sealed messages and checkpoints as BLOBs, not base64 text",
        (),
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
_SYNCHRONOUS = ("OFF", "NORMAL", "FULL", "EXTRA")
_MEMORY = ":memory:"


class SqliteDatabase:
    """One SQLite database file (or ``":memory:"``): what ``SqliteStore`` and its parts share.

    See ``SqliteStore`` for ``synchronous`` and ``mode``. After ``close()`` every
    call raises ``StoreClosedError``.
    """

    #: how records are written and read: clear unless the store was given ``encryption=``;
    #: sealed messages and checkpoints as BLOBs
    sealing: Sealing = Sealing(binary=True)

    def __init__(
        self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL", mode: int = 0o600
    ) -> None:
        raw = os.fspath(path)
        self.path = raw if raw == _MEMORY else str(Path(raw).absolute())
        level = synchronous.upper()
        if level not in _SYNCHRONOUS:
            raise ValueError(
                f"synchronous must be one of {', '.join(_SYNCHRONOUS)}, got {synchronous!r}"
            )
        if not isinstance(mode, int) or not 0 <= mode <= 0o777:
            raise ValueError(f"mode must be file permission bits like 0o600, got {mode!r}")
        self.synchronous = level
        self.mode = mode
        self._identity: tuple[int, int] | None = None  # (st_dev, st_ino) of the file opened
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = self._open()
        self._turns = SqliteTurns(self.path)
        self._reopen = False  # set in a forked child: open a connection of its own on first use
        self._inherited: list[sqlite3.Connection] = []
        _LIVE_STORES.add(self)

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

    def _lock_dir(self) -> Path:
        return self._turns.lock_dir

    def _prune_lock_files(self) -> int:
        """Remove the turn lock files of sessions that have no row (unless held right now)."""
        if self.path == _MEMORY:
            return 0
        try:
            names = [n for n in os.listdir(self._lock_dir()) if n.endswith(".lock")]
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise StoreError(f"{self._lock_dir()}: cannot list: {exc}") from exc
        with self.connection() as conn:
            live = {row[0] for row in conn.execute("SELECT id FROM sessions")}
        return sum(
            _lockfile.remove_if_free(self._lock_dir() / n) for n in names if n[:-5] not in live
        )

    def remove_lock_file(self, id: str) -> None:
        """Delete session ``id``'s turn lock file unless some turn holds it right now."""
        if self.path != _MEMORY:
            _lockfile.remove_if_free(self._lock_dir() / f"{validate_session_id(id)}.lock")

    def connection(self) -> _Connection:
        """The connection, held under the store's lock; SQLite errors come out as ``StoreError``."""
        return _Connection(self)

    def transaction(self) -> _Transaction:
        """A write transaction (``BEGIN IMMEDIATE``): committed on success, else rolled back.

        ``StoreError`` if the database file was deleted or replaced since it was opened.
        """
        return _Transaction(self)

    def _live(self) -> sqlite3.Connection:
        """The open connection (a forked child's own, opened now); held under ``_lock``."""
        if self._conn is None and self._reopen:
            self._conn = self._open()
            self._reopen = False
        if self._conn is None:
            raise StoreClosedError(f"{self.path}: the SQLite store was closed")
        return self._conn

    def turn_lock(
        self,
        id: str,
        *,
        timeout: float | None = None,
        while_waiting: Callable[[], None] | None = None,
    ) -> Lease:
        """Hold session ``id`` for a turn across threads and processes; see ``docs/stores.md``.

        A file database uses an OS file lock ``<db>.locks/<id>.lock`` (freed when
        the holding process dies) and writes the lease's fence into it: no
        transaction is committed. ``":memory:"`` uses a lock per id in this store.
        ``SessionBusyError`` when not acquired within ``timeout`` seconds.
        """
        validate_session_id(id)
        # no store lock for this look: with a thousand sessions' threads it made a convoy,
        # and a close() racing it is caught by the turn's first statement
        if self.closed:
            raise StoreClosedError(f"{self.path}: the SQLite store was closed")
        return self._turns.acquire(id, timeout, while_waiting)

    def check_fence(self, conn: sqlite3.Connection, session_id: str, fence: int | None) -> None:
        """In a write transaction: ``LeaseLostError`` if ``fence`` is older than the session's
        newest; the first write of a lease records its fence (see ``_sqlite_turns``)."""
        self._turns.check(conn, session_id, fence)

    def _after_fork_in_child(self) -> None:
        # SQLite connections must not cross a fork (gunicorn --preload, multiprocessing
        # "fork"): the child keeps the parent's connection object unused and unclosed
        # (closing it could undo the parent's locks) and opens its own on first use.
        # Locks held by the parent's other threads at the fork are replaced.
        self._lock = threading.RLock()
        self._turns.after_fork_in_child()
        if self._conn is not None and self.path != _MEMORY:
            self._inherited.append(self._conn)
            self._conn = None
            self._reopen = True

    def _check_identity(self) -> None:
        """``StoreError`` if the file at ``path`` is not the database this store opened."""
        if self._identity is None:
            return
        try:
            st = os.stat(self.path)
            now: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            now = None
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot stat the database file: {exc}") from exc
        if now != self._identity:
            what = "deleted" if now is None else "replaced by another file"
            raise StoreError(
                f"{self.path}: the database file was {what} while this store had it open; "
                "refusing to write where nobody would read it again (close this store and "
                "open the path again)"
            )

    def _create_file(self) -> None:
        """Create the database file with ``self.mode`` (SQLite copies it to -wal and -shm)."""
        path = Path(self.path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create the directory: {exc}") from exc
        if path.is_dir():
            raise StoreError(f"{self.path} is a directory, not an SQLite database file")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, self.mode)
        except FileExistsError:
            return  # an existing database keeps its mode
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create the database file: {exc}") from exc
        try:
            os.fchmod(fd, self.mode)  # exactly ``mode``, whatever the umask
        finally:
            os.close(fd)

    def _open(self) -> sqlite3.Connection:
        if self.path != _MEMORY:
            self._create_file()
        try:
            conn = sqlite3.connect(
                self.path, timeout=_BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise _wrap(self.path, exc) from exc
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT * 1000)}")
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            self._check_version(version)
            if self.path != _MEMORY:
                mode = _switch_to_wal(conn)
                if str(mode).lower() != "wal":
                    log.warning("%s: could not switch to WAL (journal_mode is %s)", self.path, mode)
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            if version < SCHEMA_VERSION:
                self._migrate(conn)
            if self.path != _MEMORY:
                st = os.stat(self.path)
                self._identity = (st.st_dev, st.st_ino)
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


_LIVE_STORES: weakref.WeakSet[SqliteDatabase] = weakref.WeakSet()


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


class _Connection:
    """``SqliteDatabase.connection()``: a class, not a generator (two to four uses a turn)."""

    __slots__ = ("db",)

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        db = self.db
        db._lock.acquire()
        try:
            return db._live()
        except BaseException:
            db._lock.release()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            if isinstance(exc, sqlite3.Error):
                raise _wrap(self.db.path, exc) from exc
        finally:
            self.db._lock.release()


def _switch_to_wal(conn: sqlite3.Connection) -> str:
    """``PRAGMA journal_mode = WAL``; the journal mode it gives. Processes opening a new
    database at once each switch it, and SQLite answers "database is locked" at once
    (without its busy handler) to one that would otherwise wait for another's switch
    while holding its own read lock: that one tries again, for as long as the busy
    timeout would have it wait."""
    deadline = time.monotonic() + _BUSY_TIMEOUT
    delay = 0.001
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)  # a back-off between tries (nothing to wait on but the lock)
        delay = min(delay * 2, 0.05)


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether SQLite said the database is busy (SQLITE_BUSY, 5, or one of its extended
    codes; before Python 3.11 the error carries no code: its message tells)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF == 5
    return "database is locked" in str(exc)


class _Transaction:
    """``SqliteDatabase.transaction()``: ``BEGIN IMMEDIATE`` on entry, ``COMMIT`` on a clean
    exit, ``ROLLBACK`` on an error (then re-raised, SQLite's as ``StoreError``)."""

    __slots__ = ("conn", "db")

    def __init__(self, db: SqliteDatabase) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        db = self.db
        db._lock.acquire()
        try:
            conn = db._live()
            db._check_identity()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _wrap(db.path, exc) from exc
        except BaseException:
            db._lock.release()
            raise
        self.conn = conn
        return conn

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        db, conn = self.db, self.conn
        try:
            try:
                if exc is None:
                    conn.execute("COMMIT")
                    return
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error as error:
                raise _wrap(db.path, error) from error
            if isinstance(exc, sqlite3.Error):
                raise _wrap(db.path, exc) from exc
        finally:
            db._lock.release()
