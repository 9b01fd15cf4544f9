"""SQLite stores: transcripts, checkpoints and approvals in one transactional file.

Import it as ``from lousho_sessions.sqlite import SqliteStore``: the root package
never imports ``sqlite3``. Messages are rows ``(session_id, seq, json)``, so an
``append`` writes only the new messages; a per-session row holds the length and
a revision. The schema is versioned with ``PRAGMA user_version``: each entry of
``MIGRATIONS`` takes the database one version up, applied on open. A ``leases``
row keeps the newest fence a write of each session carried; fenced writes compare
with it, and with the fence in the session's turn lock file, in their own
transaction (``_sqlite_turns``).
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from ..errors import (
    SchemaVersionError,
    StoreClosedError,
    StoreConflictError,
    StoreCorruptError,
    StoreError,
)
from ..messages import Message
from ..serde import messages_from_json
from . import _lockfile
from ._sqlite_records import (
    Part,
    SqliteApprovalStore,
    SqliteCheckpointStore,
    prune_approvals,
    prune_checkpoints,
    prune_sessions,
)
from ._sqlite_turns import SqliteTurns
from .base import (
    BaseCheckpointStore,
    BaseSessionStore,
    LockScope,
    PruneResult,
    message_json,
    older_than_seconds,
    validate_session_id,
    validate_turn_id,
)
from .lease import Lease

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

    A new database file is created with ``mode`` (default 0600: transcripts are
    private, as the file store's are); SQLite gives its ``-wal`` and ``-shm``
    files the database's mode, and turn lock files are 0600. An existing file
    keeps its mode. Every write checks that the file at ``path`` is still the one
    opened (one ``stat``), so a database deleted or replaced while open raises
    ``StoreError`` instead of writing into a file nobody will read again.
    """

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
            sessions = prune_sessions(conn, cutoff)
            checkpoints = prune_checkpoints(conn, cutoff)
            approvals = prune_approvals(conn, cutoff)
        lock_files = self._prune_lock_files()
        log.info(
            "%s: pruned %d sessions, %d checkpoints, %d approvals, %d lock files",
            self.path,
            sessions,
            checkpoints,
            approvals,
            lock_files,
        )
        return PruneResult(sessions, checkpoints, approvals, lock_files=lock_files)

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
        """A write transaction (``BEGIN IMMEDIATE``): committed on success, else rolled back.

        ``StoreError`` if the database file was deleted or replaced since it was opened.
        """
        with self.connection() as conn:
            self._check_identity()
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
        the holding process dies) and writes the lease's fence into it: no
        transaction is committed. ``":memory:"`` uses a lock per id in this store.
        ``SessionBusyError`` when not acquired within ``timeout`` seconds.
        """
        validate_session_id(id)
        with self._lock:
            if self._conn is None and not self._reopen:
                raise StoreClosedError(f"{self.path}: the SQLite store was closed")
        return self._turns.acquire(id, timeout)

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


class SqliteSessionStore(Part, BaseSessionStore):
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
        rows = _rows(validate_session_id(id), messages, expected_length)
        with self.store.transaction() as conn:
            self._append(conn, id, rows, expected_length, fence)

    def append_and_delete(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        checkpoints: BaseCheckpointStore | None = None,
        delete: Sequence[str] = (),
        fence: int | None = None,
    ) -> object | None:
        """``append`` and delete the checkpoints ``delete``: one transaction when
        ``checkpoints`` is this database's; returns the new revision."""
        rows = _rows(validate_session_id(id), messages, expected_length)
        if not (isinstance(checkpoints, SqliteCheckpointStore) and checkpoints.store is self.store):
            return super().append_and_delete(
                id, messages, expected_length, checkpoints=checkpoints, delete=delete, fence=fence
            )
        keys = [(validate_turn_id(key),) for key in delete]
        with self.store.transaction() as conn:
            revision = self._append(conn, id, rows, expected_length, fence)
            conn.executemany("DELETE FROM checkpoints WHERE turn_id = ?", keys)
        return revision

    def _append(
        self,
        conn: sqlite3.Connection,
        id: str,
        rows: list[tuple[str, int, str]],
        expected_length: int,
        fence: int | None,
    ) -> int:
        self.store.check_fence(conn, id, fence)
        row = conn.execute("SELECT length, revision FROM sessions WHERE id = ?", (id,)).fetchone()
        length = row[0] if row else 0
        if length != expected_length:
            raise StoreConflictError(
                f"session {id!r} ({self.store.path}): expected {expected_length} stored "
                f"messages, found {length}"
            )
        conn.executemany("INSERT INTO messages (session_id, seq, json) VALUES (?, ?, ?)", rows)
        return _touch(conn, id, length + len(rows), None if row is None else int(row[1]))

    def load_since(self, id: str, length: int, revision: object) -> list[Message] | None:
        """The messages after the first ``length``, if only appends changed ``id`` since
        ``revision`` (the same generation: see ``_touch``); else ``None``."""
        validate_session_id(id)
        if not isinstance(revision, int) or isinstance(revision, bool):
            return None
        with self.store.connection() as conn:
            rows = conn.execute(  # one statement: one snapshot of the row and the messages
                "SELECT s.revision, s.length, m.json FROM sessions s LEFT JOIN messages m "
                "ON m.session_id = s.id AND m.seq >= ? WHERE s.id = ? ORDER BY m.seq",
                (length, id),
            ).fetchall()
        if not rows or rows[0][0] >> _COUNTER_BITS != revision >> _COUNTER_BITS:
            return None
        if rows[0][1] < length:
            return None
        texts = [row[2] for row in rows if row[2] is not None]
        if len(texts) != rows[0][1] - length:
            return None
        text = "[" + ",".join(texts) + "]"
        return messages_from_json(text, source=f"{self.store.path}: session {id!r}")

    def delete(self, id: str) -> None:
        """Delete the transcript and its turn lock file (unless a turn holds it right now;
        ``SqliteStore.prune`` removes it later)."""
        validate_session_id(id)
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM messages WHERE session_id = ?", (id,))
            conn.execute("DELETE FROM sessions WHERE id = ?", (id,))
            self.store._turns.keep_fence(conn, id)  # the lock file and its fence go next
        self.store.remove_lock_file(id)

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
            return PruneResult(sessions=prune_sessions(conn, cutoff), checkpoints=0, approvals=0)


def _rows(id: str, messages: Sequence[Message], start: int) -> list[tuple[str, int, str]]:
    rows = []
    for i, m in enumerate(messages, start):
        if not isinstance(m, Message):
            raise TypeError(f"session {id!r}: expected Message objects, got {type(m).__name__}")
        rows.append((id, i, message_json(m)))
    return rows


#: The low bits of a revision count appends; the high bits are the *generation*.
_COUNTER_BITS = 32
_COUNTER_MASK = (1 << _COUNTER_BITS) - 1


def _touch(conn: sqlite3.Connection, id: str, length: int, appended_to: int | None = None) -> int:
    """Write the session row with a new revision and return it.

    A revision is a random *generation* (high bits) and an append counter (low
    bits). ``save`` (``appended_to`` None) starts a new random generation: a
    session deleted and saved again must not repeat a revision another process
    remembers. An append keeps the generation and counts up, so ``load_since``
    can tell that only appends happened since a revision of the same generation.
    """
    if appended_to is None:
        revision = secrets.randbits(63)
    else:
        revision = (appended_to & ~_COUNTER_MASK) | ((appended_to + 1) & _COUNTER_MASK)
    conn.execute(
        "INSERT INTO sessions (id, length, revision, updated_at) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (id) DO UPDATE SET length = excluded.length, revision = excluded.revision, "
        "updated_at = excluded.updated_at",
        (id, length, revision, time.time()),
    )
    return revision
