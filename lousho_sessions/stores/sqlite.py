"""SQLite stores: transcripts, checkpoints and approvals in one transactional file.

Import it as ``from lousho_sessions.sqlite import SqliteStore``: the root package
never imports ``sqlite3``. Messages are rows ``(session_id, seq, json)``, so an
``append`` writes only the new messages; a per-session row holds the length and
a revision. The schema is versioned with ``PRAGMA user_version``: each entry of
``MIGRATIONS`` takes the database one version up, applied on open (the connection,
schema and migrations are ``_sqlite_db``'s). A ``leases``
row keeps the newest fence a write of each session carried; fenced writes compare
with it, and with the fence in the session's turn lock file, in their own
transaction (``_sqlite_turns``).
"""

from __future__ import annotations

import logging
import os
import secrets
import sqlite3
import time
from collections.abc import Sequence
from datetime import timedelta

from ..encryption import EncryptionOption
from ..errors import StoreConflictError
from ..messages import Message, Usage
from ..serde import messages_from_json_texts
from ..usage_totals import sqlite_usage_sql, usage_from_row
from . import _lockfile
from ._history_requests import Forked, ForkRequest, RewindRequest, Rewound
from ._rotation import BATCH, RotationResult, rotate_sqlite
from ._sealing import Sealing, Value
from ._sqlite_db import MIGRATIONS, SCHEMA_VERSION, SqliteDatabase
from ._sqlite_history import sqlite_fork, sqlite_rewind
from ._sqlite_records import (
    SAVE_CHECKPOINT,
    STATE_VERSION,
    Part,
    SqliteApprovalStore,
    SqliteCheckpointStore,
    prune_approvals,
    prune_checkpoints,
    prune_leases,
    prune_sessions,
)
from ._sqlite_turns import RECORD_FENCE
from ._state_requests import commit_text, state_key, with_version
from ._turn_requests import CommitTurn, ReadAhead, TakenTurn, TakeTurn
from .base import (
    BaseSessionStore,
    LockScope,
    PruneResult,
    SessionInfo,
    older_than_seconds,
    validate_session_id,
    validate_turn_id,
)
from .lease import Lease, next_fence

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "SqliteApprovalStore",
    "SqliteCheckpointStore",
    "SqliteSessionStore",
    "SqliteStore",
]

log = logging.getLogger("lousho_sessions.stores.sqlite")

_MEMORY = ":memory:"
#: ``SqliteSessionStore.usage``: the session's length, how many of its messages are JSON text,
#: and the sums of ``usage``'s fields over those
_USAGE_OF_TEXT = (
    f"SELECT s.length, count(m.json), {sqlite_usage_sql('m.json')} FROM sessions s "
    "LEFT JOIN messages m ON m.session_id = s.id AND typeof(m.json) = 'text' "
    "WHERE s.id = ? GROUP BY s.id"
)
#: the sums over the sealed messages (BLOBs: the clear fields' JSON, a NUL, the token), each
#: one's clear part cut out once (``LIMIT -1``: not for each of the sums' json_extract calls)
_USAGE_OF_SEALED = (
    f"SELECT {sqlite_usage_sql('m.clear')} FROM (SELECT "
    "CAST(substr(json, 1, instr(json, x'00') - 1) AS TEXT) AS clear FROM messages "
    "WHERE session_id = ? AND typeof(json) = 'blob' LIMIT -1) m"
)


class SqliteStore(SqliteDatabase):
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
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        mode: int = 0o600,
        encryption: EncryptionOption = None,
    ) -> None:
        self.sealing = Sealing(encryption, binary=True)
        super().__init__(path, synchronous=synchronous, mode=mode)
        self.checkpoints = SqliteCheckpointStore(self)
        self.sessions = SqliteSessionStore(self)
        self.approvals = SqliteApprovalStore(self)

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"SqliteStore({self.path!r}, {state})"

    def __enter__(self) -> SqliteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def rotate_key(self, *, batch_size: int = BATCH) -> RotationResult:
        """Reseal every record not sealed with the current key, in batches (``rotate-key``)."""
        return rotate_sqlite(self, batch_size)

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete sessions and checkpoints not updated within ``older_than`` (seconds or a
        ``timedelta``) and approvals resolved that long ago; pending approvals are kept."""
        cutoff = time.time() - older_than_seconds(older_than)
        held = self._turns.held  # a running turn's session, checkpoints and fence stay
        with self.transaction() as conn:
            sessions = prune_sessions(conn, cutoff, held)
            checkpoints = prune_checkpoints(conn, cutoff, held)
            approvals = prune_approvals(conn, cutoff)
            leases = prune_leases(conn, held)
        lock_files = self._prune_lock_files()
        log.info(
            "%s: pruned %d sessions, %d checkpoints, %d approvals, %d lock files, %d leases",
            self.path,
            sessions,
            checkpoints,
            approvals,
            lock_files,
            leases,
        )
        return PruneResult(sessions, checkpoints, approvals, lock_files=lock_files, leases=leases)


class SqliteSessionStore(Part, BaseSessionStore):
    """The transcripts of a ``SqliteStore``: one row per message.

    ``append`` writes only the new rows, ``revision`` is one indexed SELECT, and
    ``turn_lock`` spans processes (``lock_scope`` ``"machine"``) except for
    ``":memory:"`` (``"process"``). A session's state is its ``<id>.state`` row of the
    checkpoints table (the contract's default place), written by a turn's commit, copied by
    a fork and deleted by a prune in their own transactions.
    """

    commits_state = True
    forks_state = True
    prunes_state = True
    #: the turn's first checkpoint is written by the turn once its first request has left
    #: (measured: cheaper on the way to the model than a write transaction in the take)
    saves_start_checkpoint = False

    def __init__(self, store: SqliteStore) -> None:
        super().__init__(store)
        self.lock_scope: LockScope = "process" if store.path == _MEMORY else "machine"
        self._checkpoints = store.checkpoints

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
        source = f"{self.store.path}: session {id!r}"
        texts = self.store.sealing.open_texts(id, [row[0] for row in rows], source=source)
        return messages_from_json_texts(texts, source=source)

    def save(self, id: str, messages: Sequence[Message]) -> None:
        validate_session_id(id)
        rows = _rows(self.store.sealing, id, messages, 0)
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
        rows = _rows(self.store.sealing, validate_session_id(id), messages, expected_length)
        with self.store.transaction() as conn:
            self._append(conn, id, rows, expected_length, fence)

    def commit_turn(self, request: CommitTurn) -> object | None:
        """Append the turn, store its state (``request.state``) and delete its checkpoints
        ``delete``: one transaction when ``checkpoints`` is this database's; returns the new
        revision."""
        id, expected = request.id, request.expected_length
        rows = _rows(self.store.sealing, validate_session_id(id), request.messages, expected)
        checkpoints = request.checkpoints
        if not (isinstance(checkpoints, SqliteCheckpointStore) and checkpoints.store is self.store):
            return super().commit_turn(request)
        keys = [(validate_turn_id(key),) for key in request.delete]
        text = commit_text(self.store.sealing, id, request.state)
        with self.store.transaction() as conn:
            revision = self._append(conn, id, rows, expected, request.fence)
            if text is not None:
                _save_state(conn, id, text)
            conn.executemany("DELETE FROM checkpoints WHERE turn_id = ?", keys)
        return revision

    def _append(
        self,
        conn: sqlite3.Connection,
        id: str,
        rows: list[tuple[str, int, Value]],
        expected_length: int,
        fence: int | None,
    ) -> int:
        if fence is None:
            row = conn.execute(
                "SELECT length, revision FROM sessions WHERE id = ?", (id,)
            ).fetchone()
        else:  # the stored fence and the session row in one statement
            stored, stored_length, stored_revision = conn.execute(_FENCE_AND_ROW, (id,)).fetchone()
            self.store._turns.check(conn, id, fence, stored)
            row = None if stored_length is None else (stored_length, stored_revision)
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
        source = f"{self.store.path}: session {id!r}"
        texts = self.store.sealing.open_texts(id, texts, source=source)
        return messages_from_json_texts(texts, source=source)

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

    def list_ids(self) -> list[str]:
        with self.store.connection() as conn:
            return [row[0] for row in conn.execute("SELECT id FROM sessions ORDER BY id")]

    def info(self, id: str) -> SessionInfo | None:
        validate_session_id(id)
        with self.store.connection() as conn:
            row = conn.execute(
                "SELECT length, updated_at, parent, fork_point FROM sessions WHERE id = ?", (id,)
            ).fetchone()
        return None if row is None else SessionInfo(id, int(row[0]), float(row[1]), *row[2:])

    def rewind(self, request: RewindRequest) -> Rewound:
        """Delete the tail rows and write a new revision generation: one transaction."""
        return sqlite_rewind(self, request, _touch)

    def fork(self, request: ForkRequest) -> Forked:
        """One ``INSERT ... SELECT`` of the kept rows, the new session's row and (asked for, and
        kept in this database) its state: one transaction."""
        return sqlite_fork(self, request, _touch)

    def usage(self, id: str) -> Usage | None:
        """The stored transcript's usage totals, summed by SQLite over the message JSON (a
        sealed message's clear fields), in one read snapshot."""
        validate_session_id(id)
        sealed = None
        with self.store.connection() as conn:
            conn.execute("BEGIN")  # both statements read one snapshot
            try:
                row = conn.execute(_USAGE_OF_TEXT, (id,)).fetchone()
                if row is not None and row[1] < row[0]:
                    sealed = conn.execute(_USAGE_OF_SEALED, (id,)).fetchone()
            finally:
                conn.execute("COMMIT")
        if row is None:
            return None
        usage = usage_from_row(row[2:])
        return usage if sealed is None else usage + usage_from_row(sealed)

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Hold session ``id`` for a turn; see ``SqliteStore.turn_lock``."""
        return self.store.turn_lock(id, timeout=timeout)

    def take_turn(self, request: TakeTurn) -> TakenTurn:
        """The lease (``SqliteStore.turn_lock``), then one statement reading the session's
        revision and whether a checkpoint of it is stored, then only what was added since
        what the caller holds. An offered first checkpoint is not saved here (the turn writes
        it once its first request has left). While the turn waits in line, when the turn just
        ahead of it is the last, it reads ahead what the turns before appended
        (``ReadAhead``)."""
        id = request.id
        ahead = ReadAhead(self, request)
        while_waiting = ahead if request.held_length is not None else None
        lease = self.store.turn_lock(id, timeout=request.timeout, while_waiting=while_waiting)
        here = request.checkpoints
        ours = isinstance(here, SqliteCheckpointStore) and here.store is self.store
        try:
            with self.store.connection() as conn:  # one statement: one snapshot
                revision, pending = conn.execute(
                    _AT_START, (id, f"{id}.", f"{id}/", state_key(id))
                ).fetchone()
        except BaseException:
            lease.release()
            raise
        return ahead.taken(
            lease, None if revision is None else int(revision), no_checkpoints=not pending and ours
        )

    def take_over(self, id: str) -> int:
        """A fence newer than the holder's, recorded in the ``leases`` row (the holder's
        writes compare with it in their own transactions)."""
        validate_session_id(id)
        turns = self.store._turns
        if turns.memory is not None:
            return turns.memory.issue(id)
        with self.store.transaction() as conn:
            row = conn.execute("SELECT fence FROM leases WHERE session_id = ?", (id,)).fetchone()
            known = [int(row[0])] if row is not None else []
            latest = _lockfile.read_fence(turns.lock_path(id))
            fence = next_fence(max([*known, *([] if latest is None else [latest])], default=None))
            conn.execute(RECORD_FENCE, (id, fence))
        return fence

    def turn_held(self, id: str) -> bool:
        """Whether a live turn holds ``id`` now; see ``SqliteStore.turn_lock``."""
        return self.store._turns.held(validate_session_id(id))

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the sessions not updated within ``older_than`` (seconds or a ``timedelta``)
        and their state."""
        cutoff = time.time() - older_than_seconds(older_than)
        held = self.store._turns.held
        with self.store.transaction() as conn:
            sessions = prune_sessions(conn, cutoff, held)
            leases = prune_leases(conn, held)
        return PruneResult(sessions=sessions, checkpoints=0, approvals=0, leases=leases)


def _save_state(conn: sqlite3.Connection, id: str, text: str) -> None:
    """In a write transaction: the state record ``text`` (a ``state_text``) as the state of
    ``id``, at the version after the stored one."""
    key = state_key(id)
    row = conn.execute(STATE_VERSION, (key,)).fetchone()
    version = 0 if row is None or row[0] is None else int(row[0])
    conn.execute(SAVE_CHECKPOINT, (key, with_version(text, version + 1), time.time()))


def _rows(
    sealing: Sealing, id: str, messages: Sequence[Message], start: int
) -> list[tuple[str, int, Value]]:
    rows = []
    for i, m in enumerate(messages, start):
        if not isinstance(m, Message):
            raise TypeError(f"session {id!r}: expected Message objects, got {type(m).__name__}")
        rows.append((id, i, sealing.message_value(id, m)))
    return rows


#: The low bits of a revision count appends; the high bits are the *generation*.
_COUNTER_BITS = 32
_COUNTER_MASK = (1 << _COUNTER_BITS) - 1


#: what a turn first looks at, read once its lock is held: the revision, and whether a
#: checkpoint of the session is stored (turn ids ``<id>.<...>``: from ``<id>.`` to ``<id>/``;
#: its state record ``?4``, ``<id>.state``, is none)
_AT_START = (
    "SELECT (SELECT revision FROM sessions WHERE id = ?1), "
    "EXISTS (SELECT 1 FROM checkpoints WHERE turn_id >= ?2 AND turn_id < ?3 AND turn_id <> ?4)"
)

#: a fenced append's reads: the ``leases`` row's fence and the session's length and revision
_FENCE_AND_ROW = (
    "SELECT (SELECT fence FROM leases WHERE session_id = ?1), s.length, s.revision "
    "FROM (SELECT 1) LEFT JOIN sessions s ON s.id = ?1"
)


#: the session row written with its new length and revision
_TOUCH = (
    "INSERT INTO sessions (id, length, revision, updated_at) VALUES (?, ?, ?, ?) "
    "ON CONFLICT (id) DO UPDATE SET length = excluded.length, revision = excluded.revision, "
    "updated_at = excluded.updated_at"
)


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
    conn.execute(_TOUCH, (id, length, revision, time.time()))
    return revision
