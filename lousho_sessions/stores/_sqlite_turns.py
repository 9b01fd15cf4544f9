"""The turn locks and fences of a ``SqliteStore`` (``lousho_sessions.stores.sqlite``).

A file database holds session ``id`` for a turn with an OS file lock on
``<db>.locks/<id>.lock`` (freed when its process dies), and writes the lease's
fence into that lock file while holding it: taking a lease commits no
transaction. ``":memory:"`` keeps locks and fences in this process (``LocalLeases``).

A write carrying a fence checks it inside the write's own transaction:

1. against the ``leases`` row, the newest fence a write has carried: an older
   fence is refused, a newer one raises the row to it (in the transaction the
   write makes anyway), so the first write of each lease records its fence;
2. unless the fence is the one of the lease this store object holds right now
   (then nobody can hold a newer one: the OS lock excludes), against the fence
   in the lock file, the newest handed out: an older one is refused.

So a writer whose lease was lost (released, or its lock file taken over) is
refused with ``LeaseLostError`` and changes nothing.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from ..errors import SessionBusyError, StoreError
from . import _lockfile
from .lease import Lease, LocalLeases, check_fence

__all__ = ["RECORD_FENCE", "UNREAD", "SqliteTurns"]


class _Unread:
    """The type of ``UNREAD``: a stored fence the caller did not read."""


#: ``SqliteTurns.check(stored=...)`` default: the check reads the stored fence itself
UNREAD = _Unread()

MEMORY = ":memory:"
#: Lock file paths remembered (by session id) before the memo starts again.
_PATHS_KEPT = 1024


#: a lease's fence recorded in the ``leases`` row (by its first write)
RECORD_FENCE = (
    "INSERT INTO leases (session_id, fence) VALUES (?, ?) "
    "ON CONFLICT (session_id) DO UPDATE SET fence = excluded.fence"
)


class SqliteTurns:
    """Turn locks of one ``SqliteStore`` (of the database at ``path``), and its writes' fence check."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock_dir = Path(path + ".locks")
        self.memory = LocalLeases() if path == MEMORY else None
        #: session id -> fence of the lease this store holds on it right now
        self._held: dict[str, int] = {}
        self._held_lock = threading.Lock()
        self._paths: dict[str, Path] = {}

    def lock_path(self, id: str) -> Path:
        path = self._paths.get(id)
        if path is None:  # a Path costs more to build than the flock it names: kept per id
            if len(self._paths) >= _PATHS_KEPT:
                self._paths.clear()
            path = self._paths[id] = self.lock_dir / f"{id}.lock"
        return path

    def acquire(
        self, id: str, timeout: float | None, while_waiting: Callable[[], None] | None = None
    ) -> Lease:
        """Hold ``id`` for a turn; ``SessionBusyError`` when not acquired within ``timeout`` s.
        ``while_waiting``: see ``_lockfile.acquire_fenced``."""
        if self.memory is not None:
            return self.memory.acquire(id, timeout)
        lock_path = self.lock_path(id)
        try:
            close, fence = _lockfile.acquire_fenced(
                lock_path, timeout, make_parent=self._make_lock_dir, while_waiting=while_waiting
            )
        except _lockfile.LockTimeout as exc:
            raise SessionBusyError(
                f"session {id!r} is held by another turn: {lock_path} not acquired within {timeout} s"
            ) from exc
        with self._held_lock:
            self._held[id] = fence

        def release() -> None:
            with self._held_lock:
                if self._held.get(id) == fence:
                    del self._held[id]
            close()

        return Lease(id, fence, release)

    def held(self, id: str) -> bool:
        """Whether a live turn holds ``id`` now: its lock file locked (or, in memory, its lock)."""
        if self.memory is not None:
            return self.memory.held(id)
        return _lockfile.is_held(self.lock_path(id))

    def check(
        self,
        conn: sqlite3.Connection,
        session_id: str,
        fence: int | None,
        stored: int | _Unread | None = UNREAD,
    ) -> None:
        """In a write transaction: ``LeaseLostError`` if ``fence`` is older than the session's
        newest; else record it in the ``leases`` row if it is newer than the row's.

        ``stored``: the ``leases`` row's fence, read by the caller in this transaction (one
        statement with what else it reads); not given, it is read here."""
        if fence is None:
            return
        if isinstance(stored, _Unread):
            row = conn.execute(
                "SELECT fence FROM leases WHERE session_id = ?", (session_id,)
            ).fetchone()
            stored = None if row is None else int(row[0])
        elif stored is not None:
            stored = int(stored)
        check_fence(session_id, fence, stored, where=self.path)
        if self.memory is not None:
            self.memory.check(session_id, fence, where=self.path)
        elif self._held.get(session_id) != fence:
            latest = _lockfile.read_fence(self.lock_path(session_id))
            check_fence(session_id, fence, latest, where=str(self.lock_path(session_id)))
        if stored is None or stored < fence:
            conn.execute(RECORD_FENCE, (session_id, fence))

    def keep_fence(self, conn: sqlite3.Connection, session_id: str) -> None:
        """In a write transaction, before the lock file may be deleted: raise the ``leases``
        row to the lock file's fence, so writers with older fences stay refused."""
        if self.memory is not None:
            return
        latest = _lockfile.read_fence(self.lock_path(session_id))
        if latest is not None:
            conn.execute(
                "INSERT INTO leases (session_id, fence) VALUES (?, ?) ON CONFLICT (session_id) "
                "DO UPDATE SET fence = max(fence, excluded.fence)",
                (session_id, latest),
            )

    def after_fork_in_child(self) -> None:
        """The parent's leases are not this process's: forget them (and their locks)."""
        self._held_lock = threading.Lock()
        self._held = {}
        if self.memory is not None:
            self.memory = LocalLeases()

    def _make_lock_dir(self) -> None:
        try:
            self.lock_dir.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"{self.lock_dir}: cannot create the lock directory: {exc}") from exc
