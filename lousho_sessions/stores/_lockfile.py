"""OS file locks that may be deleted safely, with errors that name the lock file.

A lock is an ``flock`` on an empty file, so the kernel frees it the moment its
process dies (even on ``SIGKILL``). Deleting a lock file is safe here because
every acquirer checks, once it holds the lock, that the file it locked is still
the one at the path (same device and inode, not unlinked); if not, it lets go
and tries again on the new file. Without that check, a process waiting on a
file that another one deletes would take a lock nobody else can see, and two
processes would hold "the lock" at once. So a lock file is only ever deleted by
a holder of the lock (``remove_if_free``), and every process that takes it must
use this module (``filelock`` does an equivalent check since version 4).

Lock files are created with mode 0600 and never followed through a symlink.
Where ``fcntl`` does not exist (Windows), ``filelock`` locks the file instead
and lock files are never deleted.

``acquire_fenced`` also hands out a fence (``lease.next_fence``) and writes it into
the lock file while holding it; ``read_fence`` reads it back. The fence is not
fsynced: should a power loss undo it, ``next_fence`` still grows with the clock.
Where ``fcntl`` does not exist, the fence lives in a ``<name>.fence`` file beside.
"""

from __future__ import annotations

import errno
import os
import struct
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import StoreCorruptError, StoreError
from .lease import bump_fence_file, next_fence, read_fence_file

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "LOCK_FILE_MODE",
    "LockTimeout",
    "acquire",
    "acquire_fenced",
    "hold",
    "is_held",
    "read_fence",
    "remove_if_free",
]

#: Mode of new lock files; the store's data files are 0600 too.
LOCK_FILE_MODE = 0o600
_POLL_MIN = 0.001
_POLL_MAX = 0.05
#: A fence is written as this many ASCII digits (padded), so a rewrite never leaves a tail.
_FENCE_WIDTH = 24

# The waiting line (Linux): open-file-description byte-range locks, which do not
# interact with ``flock`` on a local file system and belong to the open file (so
# they work between threads too). The ticket counter lives at ``_TICKET_AT``
# (after the fence, which is read from the first 32 bytes), guarded by a lock on
# the byte ``_TICKET_GUARD``; ticket ``t`` is the byte ``_LINE_AT + t``.
_LINE = sys.platform == "linux" and hasattr(fcntl, "F_OFD_SETLKW")
_TICKET_GUARD = 48
_TICKET_AT = 64
_TICKET_SIZE = 20
_LINE_AT = 1 << 40
#: the *queued* byte of ticket ``t`` is ``_QUEUED_AT + t`` (held until its holder has the lock)
_QUEUED_AT = 1 << 41
#: ``struct flock`` for ``F_OFD_*``: type, whence, start, length (0: to the end), pid (0)
_FLOCK = struct.Struct("hhqqi4x")


class LockTimeout(Exception):
    """The lock was not acquired in time (callers turn this into their own error)."""


def _open(path: Path, mode: int) -> int:
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EMLINK and path.is_symlink()):
            raise StoreError(
                f"lock file {path} is a symbolic link; refusing to follow it "
                "(remove the link: lock files are plain files the store creates)"
            ) from exc
        if isinstance(exc, PermissionError):
            raise StoreError(
                f"lock file {path} cannot be opened for writing ({exc.strerror}); "
                "the store needs read and write access to its lock files and their directory"
            ) from exc
        if isinstance(exc, IsADirectoryError):
            raise StoreError(f"lock file {path} is a directory") from exc
        raise StoreError(f"lock file {path}: cannot open: {exc}") from exc
    return fd


def _still_linked(fd: int, path: Path) -> bool:
    """Whether ``fd`` is still the file at ``path`` (not deleted or replaced since opening)."""
    try:
        here = os.lstat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return mine.st_nlink > 0 and (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _open_or_make_parent(path: Path, mode: int, make_parent: Callable[[], None] | None) -> int:
    """``_open``; if the directory is missing, ``make_parent()`` and open again (once per
    missing directory, not a ``mkdir`` per lock)."""
    try:
        return _open(path, mode)
    except StoreError as exc:
        if make_parent is None or not isinstance(exc.__cause__, FileNotFoundError):
            raise
    make_parent()
    return _open(path, mode)


def _range(fd: int, kind: int, start: int, wait: bool) -> None:
    """Lock (``F_WRLCK``) or unlock (``F_UNLCK``) the byte ``start`` of ``fd``'s open file."""
    command = fcntl.F_OFD_SETLKW if wait else fcntl.F_OFD_SETLK
    fcntl.fcntl(fd, command, _FLOCK.pack(kind, os.SEEK_SET, start, 1, 0))


def _line_empty(fd: int) -> bool:
    """Whether no open file (of any process, this one's other descriptors included) holds a
    ticket on ``fd``'s lock file: nobody is waiting in line, nor holds the lock by the line."""
    found = fcntl.fcntl(
        fd, fcntl.F_OFD_GETLK, _FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, _LINE_AT, 0, 0)
    )
    return bool(_FLOCK.unpack(found)[0] == fcntl.F_UNLCK)


def _wait_in_line(fd: int, while_waiting: Callable[[], None] | None = None) -> int:
    """Take a ticket on ``fd``'s lock file and return it once every earlier ticket holder
    has let go of the file (holds its own ticket until ``fd`` is closed).

    Only the order is decided here: the ``flock`` taken next still excludes. A holder
    that dies frees its ticket with its descriptors, so the line never stalls on it.
    A ticket's *queued* byte is held from the ticket's taking until its holder has the
    lock (``_acquire`` frees it then): ``while_waiting`` is called once, when the one
    just ahead in line holds the lock (so every turn before it has ended), before
    waiting for that one to end.
    """
    _range(fd, fcntl.F_WRLCK, _TICKET_GUARD, True)
    try:
        raw = os.pread(fd, _TICKET_SIZE, _TICKET_AT).strip(b"\0 ")
        ticket = int(raw) if raw.isdigit() else 0
        # hold the ticket before counting it: a ticket the counter shows is one in line
        # (a holder coming straight back sees it), never one about to be
        _range(fd, fcntl.F_WRLCK, _LINE_AT + ticket, False)
        _range(fd, fcntl.F_WRLCK, _QUEUED_AT + ticket, False)
        os.pwrite(fd, str(ticket + 1).ljust(_TICKET_SIZE).encode("ascii"), _TICKET_AT)
    finally:
        _range(fd, fcntl.F_UNLCK, _TICKET_GUARD, False)
    if ticket > 0:
        if while_waiting is not None:  # once the one ahead holds the lock
            _range(fd, fcntl.F_WRLCK, _QUEUED_AT + ticket - 1, True)
            _range(fd, fcntl.F_UNLCK, _QUEUED_AT + ticket - 1, False)
            while_waiting()
        # wait for the one before (who waited for the one before it)
        _range(fd, fcntl.F_WRLCK, _LINE_AT + ticket - 1, True)
        _range(fd, fcntl.F_UNLCK, _LINE_AT + ticket - 1, False)
    return ticket


def _acquire(
    path: Path,
    timeout: float | None,
    mode: int,
    make_parent: Callable[[], None] | None = None,
    while_waiting: Callable[[], None] | None = None,
) -> int:
    """An fd holding the lock on the file now at ``path``; ``LockTimeout`` after ``timeout``.

    Without a timeout, waiters are served in the order they came (``_wait_in_line``)
    where the platform has open-file-description locks; with one, they poll. When
    nobody is in line, the lock is taken at once if it is free (the common case of
    one process and one turn at a time: no ticket, five system calls fewer); a
    turn that just ended and comes back still queues behind anyone already waiting,
    since waiters hold their tickets until they let go of the lock."""
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    delay = _POLL_MIN
    while True:
        fd = _open_or_make_parent(path, mode, make_parent)
        try:
            if timeout is None:
                # free now and nobody in line: take it; else queue, even when free now (a
                # turn just ended must not jump the line)
                if not _LINE:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                elif not (_line_empty(fd) and _try_lock(fd)):
                    ticket = _wait_in_line(fd, while_waiting)
                    while_waiting = None  # once
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    _range(fd, fcntl.F_UNLCK, _QUEUED_AT + ticket, False)  # the next may read
                locked = True
            else:
                locked = _try_lock(fd)
            if locked and _still_linked(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # not locked, or locked a file that was deleted meanwhile: try again
        if locked:
            continue
        if deadline is not None and time.monotonic() >= deadline:
            raise LockTimeout(str(path))
        time.sleep(delay if deadline is None else min(delay, max(deadline - time.monotonic(), 0)))
        delay = min(delay * 2, _POLL_MAX)


def acquire(
    path: Path,
    timeout: float | None,
    *,
    mode: int = LOCK_FILE_MODE,
    make_parent: Callable[[], None] | None = None,
) -> Callable[[], None]:
    """Take the lock file ``path`` (created if missing) and return the function that releases
    it; ``LockTimeout`` if not acquired in ``timeout`` seconds (``None``: wait as long as it
    takes), ``StoreError`` naming the lock file if it cannot be used (a symlink, not writable).
    ``make_parent`` creates the directory when opening finds it missing."""
    if fcntl is None:  # pragma: no cover - Windows
        from filelock import FileLock, Timeout

        if make_parent is not None:
            make_parent()
        lock = FileLock(path, timeout=-1 if timeout is None else timeout)
        try:
            lock.acquire()
        except Timeout as exc:
            raise LockTimeout(str(path)) from exc
        return lambda: lock.release()
    fd = _acquire(path, timeout, mode, make_parent)
    return lambda: os.close(fd)  # closing the last descriptor releases the flock


def acquire_fenced(
    path: Path,
    timeout: float | None,
    *,
    mode: int = LOCK_FILE_MODE,
    make_parent: Callable[[], None] | None = None,
    while_waiting: Callable[[], None] | None = None,
) -> tuple[Callable[[], None], int]:
    """``acquire``, then write a fence newer than the one the file holds into it.

    Returns the release function and the fence. ``make_parent`` creates the lock
    file's directory when opening finds it missing. ``while_waiting`` is called at most
    once, on this thread, if the caller waits in line: when the one just ahead of it
    holds the lock (``_wait_in_line``); never when the lock is taken at once.
    """
    if fcntl is None:  # pragma: no cover - Windows
        if make_parent is not None:
            make_parent()
        release = acquire(path, timeout, mode=mode)
        try:
            fence = bump_fence_file(_fence_twin(path))
        except BaseException:
            release()
            raise
        return release, fence
    fd = _acquire(path, timeout, mode, make_parent, while_waiting)
    try:
        fence = next_fence(_parse_fence(path, os.pread(fd, _FENCE_WIDTH + 8, 0)))
        os.pwrite(fd, str(fence).ljust(_FENCE_WIDTH).encode("ascii"), 0)
    except BaseException as exc:
        os.close(fd)
        if isinstance(exc, OSError):
            raise StoreError(f"lock file {path}: cannot write the fence: {exc}") from exc
        raise
    return lambda: os.close(fd), fence


def read_fence(path: Path) -> int | None:
    """The fence last written into the lock file ``path`` by ``acquire_fenced``, or ``None``."""
    if fcntl is None:  # pragma: no cover - Windows
        return read_fence_file(_fence_twin(path))
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StoreError(f"lock file {path}: cannot read the fence: {exc}") from exc
    try:
        return _parse_fence(path, os.pread(fd, _FENCE_WIDTH + 8, 0))
    finally:
        os.close(fd)


def _parse_fence(path: Path, data: bytes) -> int | None:
    text = data.strip(b"\0 \t\r\n")  # NUL: the gap before the ticket counter
    if not text:
        return None  # a new lock file, or one written before fences were kept in it
    try:
        return int(text.decode("ascii"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise StoreCorruptError(
            f"lock file {path}: holds {data[:40]!r}, not a fence (an integer)"
        ) from exc


def _fence_twin(path: Path) -> Path:  # pragma: no cover - Windows
    return path.with_name(path.name + ".fence")


@contextmanager
def hold(path: Path, timeout: float | None, *, mode: int = LOCK_FILE_MODE) -> Iterator[None]:
    """``acquire`` as a context manager."""
    release = acquire(path, timeout, mode=mode)
    try:
        yield
    finally:
        release()


def is_held(path: Path) -> bool:
    """Whether a process (this one included) holds the lock file ``path`` now; never blocks.

    Takes the lock without waiting and lets go at once; a missing file is not held.
    """
    if fcntl is None:  # pragma: no cover - Windows
        return False
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"lock file {path}: cannot open: {exc}") from exc
    try:
        return not _try_lock(fd)
    finally:
        os.close(fd)  # closing lets go of a lock taken just now


def remove_if_free(path: Path) -> bool:
    """Delete the lock file ``path`` if nobody holds it right now; whether it was deleted.

    Takes the lock without waiting, deletes the file while holding it, then lets go:
    a process that was waiting on the old file sees it was deleted and locks the new
    one. Never blocks, so it is safe to call while this process holds the lock
    through another descriptor (the attempt then just fails).
    """
    if fcntl is None:  # pragma: no cover - Windows
        return False
    try:
        fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False  # gone already, a symlink, or not ours to delete
    try:
        if not _try_lock(fd) or not _still_linked(fd, path):
            return False
        try:
            os.unlink(path)
        except OSError:
            return False
        return True
    finally:
        os.close(fd)
