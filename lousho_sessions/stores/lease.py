"""Leases and fences: how a turn holds its session, and how its writes prove it still does.

``turn_lock(id)`` returns a ``Lease`` carrying a **fence**: an integer greater than
every fence the store handed out before for that session id. Each write made
during the turn can carry it (``append(..., fence=lease.fence)``, a checkpoint's
``save``/``delete``, an approval's ``create``); a store that knows a newer fence
for the session refuses the write with ``LeaseLostError`` and changes nothing.
``fence=None`` means "not written under a lease" (``clear()``, admin tools) and
is never refused. See "How to do distributed locking" (Kleppmann) for why a
lock alone is not enough once a lease can expire.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from types import TracebackType

from ..errors import LeaseLostError, SessionBusyError, StoreCorruptError, StoreError

__all__ = [
    "Lease",
    "LocalLeases",
    "bump_fence_file",
    "check_fence",
    "fence_session_id",
    "next_fence",
    "read_fence_file",
]


def fence_session_id(turn_id: str) -> str:
    """The session a turn id belongs to: its part before the first ``"."``."""
    return turn_id.split(".", 1)[0]


def next_fence(last: int | None) -> int:
    """A fence after ``last``: the clock in nanoseconds, or ``last + 1`` if that is not larger.

    Taking the clock keeps fences growing even if the record of the last one was lost
    (a deleted fence file, a pruned row, a power loss before it reached the disk).
    """
    now = time.time_ns()
    return now if last is None or now > last else last + 1


def check_fence(session_id: str, fence: int | None, latest: int | None, *, where: str) -> None:
    """Raise ``LeaseLostError`` if ``fence`` is older than ``latest``, the session's newest fence.

    ``fence=None`` (a write made outside a lease) and ``latest=None`` (no lease was
    ever handed out) pass. ``where`` names the store in the message.
    """
    if fence is not None and latest is not None and fence < latest:
        raise LeaseLostError(
            f"session {session_id!r} ({where}): the write carries fence {fence} but fence "
            f"{latest} was handed out since; this turn lost its lease, so nothing was written"
        )


class Lease:
    """Holds one session for a turn. A context manager; ``release()`` is idempotent.

    ``fence`` is greater than every fence handed out before for this session id by
    the same store; pass it to the turn's writes. ``lost`` is true once the lease
    was released, or when ``current`` (given by stores that can tell) says another
    holder took the session over. Stores whose leases expire subclass it.
    """

    def __init__(
        self,
        session_id: str,
        fence: int,
        release: Callable[[], None],
        *,
        current: Callable[[], bool] | None = None,
    ) -> None:
        self.session_id = session_id
        self.fence = fence
        self._release = release
        self._current = current
        self._released = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        state = "lost" if self.lost else "held"
        return f"Lease({self.session_id!r}, fence={self.fence}, {state})"

    @property
    def lost(self) -> bool:
        """True once released, expired or taken over; writes carrying its fence may be refused."""
        if self._released:
            return True
        return self._current is not None and not self._current()

    def check(self) -> None:
        """Raise ``LeaseLostError`` if the lease is lost."""
        if self.lost:
            raise LeaseLostError(
                f"session {self.session_id!r}: the lease with fence {self.fence} is lost "
                "(released, expired or taken over)"
            )

    def release(self) -> None:
        """Free the session for the next turn; calling it again does nothing."""
        with self._lock:
            if self._released:
                return
            self._released = True
        self._release()

    def released_by_store(self) -> None:
        """Mark the lease released without releasing it: the store freed the session in a
        write (``commit_turn(CommitTurn(release=))``). ``release()`` does nothing afterwards."""
        with self._lock:
            self._released = True

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()


class _Slot:
    """One session id's lock and how many callers hold or wait for it (dropped at zero)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.users = 0


class LocalLeases:
    """Turn locks and fences kept in this process: one lock per session id, fences in a dict.

    What ``BaseSessionStore.turn_lock`` uses by default, and what the memory
    stores share so that a checkpoint or approval write can check the session's
    fence. It excludes threads of this process only. ``write_lock`` serializes the
    default ``append`` (load, compare, save) of the store that owns it.
    """

    def __init__(self) -> None:
        self.write_lock = threading.RLock()
        self._lock = threading.Lock()
        self._held: dict[str, _Slot] = {}
        self._fences: dict[str, int] = {}
        self._counter = itertools.count(1)

    def acquire(self, session_id: str, timeout: float | None = None) -> Lease:
        """Hold ``session_id``; ``SessionBusyError`` if not acquired within ``timeout`` seconds."""
        with self._lock:
            entry = self._held.setdefault(session_id, _Slot())
            entry.users += 1
        lock = entry.lock
        acquired = False
        try:
            acquired = lock.acquire(timeout=-1 if timeout is None else max(timeout, 0))
            if not acquired:
                raise SessionBusyError(
                    f"session {session_id!r} is held by another turn "
                    f"(not acquired within {timeout} s)"
                )
            fence = self.issue(session_id)
        except BaseException:
            if acquired:
                lock.release()
            self._leave(session_id, entry)
            raise

        def release() -> None:
            lock.release()
            self._leave(session_id, entry)

        return Lease(session_id, fence, release, current=lambda: self.current(session_id, fence))

    def issue(self, session_id: str) -> int:
        """A new fence for ``session_id``, now its newest (for a lock held elsewhere)."""
        with self._lock:
            fence = self._fences[session_id] = next(self._counter)
        return fence

    def current(self, session_id: str, fence: int) -> bool:
        """Whether ``fence`` is still the newest fence of ``session_id``."""
        return self._fences.get(session_id) == fence

    def held(self, session_id: str) -> bool:
        """Whether a lease of this process holds ``session_id`` now."""
        with self._lock:
            entry = self._held.get(session_id)
            return entry is not None and entry.lock.locked()

    def forget_unheld(self, keep: Callable[[str], bool]) -> int:
        """Drop the fences of the sessions nobody holds for which ``keep(id)`` is false (a
        deleted session's: no turn can write with an older fence any more); how many."""
        with self._lock:
            gone = [id for id in self._fences if id not in self._held and not keep(id)]
            for id in gone:
                del self._fences[id]
        return len(gone)

    def latest(self, session_id: str) -> int | None:
        """The fence handed out last for ``session_id``, or ``None``."""
        return self._fences.get(session_id)

    def check(self, session_id: str, fence: int | None, *, where: str) -> None:
        """``LeaseLostError`` if ``fence`` is older than the last fence handed out for the session."""
        check_fence(session_id, fence, self._fences.get(session_id), where=where)

    def _leave(self, session_id: str, entry: _Slot) -> None:
        with self._lock:
            entry.users -= 1
            if entry.users == 0 and self._held.get(session_id) is entry:
                del self._held[session_id]


def read_fence_file(path: Path) -> int | None:
    """The fence kept in ``path`` (the file store's ``<id>.fence``), or ``None`` if there is none."""
    try:
        text = path.read_text(encoding="ascii")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{path}: cannot read the fence: {exc}") from exc
    try:
        return int(text.strip())
    except ValueError as exc:
        raise StoreCorruptError(f"{path}: not a fence (an integer): {text[:40]!r}") from exc


def bump_fence_file(path: Path) -> int:
    """Write a fence after the one in ``path`` and return it; the caller holds the turn lock.

    The file (mode 0600) is replaced atomically (readers see the old or the new
    fence) but not fsynced: should a power loss undo the write, ``next_fence`` still grows with the clock.
    """
    fence = next_fence(read_fence_file(path))
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(tmp, flags, 0o600)  # private, as the store's other files
        try:
            os.write(fd, str(fence).encode("ascii"))
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with suppress(OSError):
            tmp.unlink()
        raise StoreError(f"{path}: cannot write the fence: {exc}") from exc
    return fence
