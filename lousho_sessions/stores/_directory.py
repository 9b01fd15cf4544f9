"""A file store's directory: atomic durable writes, OS errors wrapped, stale temp files swept.

Every write goes to a temp file ``.<name>.<pid>.<random>.tmp`` beside its target,
is fsynced, moved over the target with ``os.replace``, and the directory is
fsynced. A process killed mid-write leaves its temp file behind; the first write
of a store object (and ``prune``) removes temp files whose writer is gone: its
pid is not running on this machine and the file is older than
``DEAD_WRITER_GRACE`` seconds, or the file is older than ``STALE_TEMP_AGE``
whatever its pid says (a pid may be reused, or belong to another PID namespace
sharing the directory). ``check_fence_file`` compares a fenced write with the
fence a session's turn lock handed out last (``<dir>/<id>.fence``).
"""

from __future__ import annotations

import os
import re
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from ..errors import StoreError
from . import _lockfile
from .lease import check_fence, read_fence_file

__all__ = [
    "DEAD_WRITER_GRACE",
    "STALE_TEMP_AGE",
    "WRITE_LOCK_TIMEOUT",
    "Directory",
    "check_fence_file",
]

#: A temp file of a writer whose pid is gone is removed once it is this old (seconds).
DEAD_WRITER_GRACE = 30.0
#: Any temp file this old is removed: no write takes an hour.
STALE_TEMP_AGE = 3600.0
#: How long a write waits for another process's write of the same file; writes are short.
WRITE_LOCK_TIMEOUT = 60.0
#: Mode of every file the store writes: transcripts are private.
FILE_MODE = 0o600
_TEMP = re.compile(r"^\..+\.tmp$")
_TEMP_PID = re.compile(r"^\..+\.(\d+)\.[0-9a-f]{8}\.tmp$")


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. EPERM: it exists, under another user
        return True
    return True


class Directory:
    """A store directory: created on first write, atomic durable writes, wrapped OS errors."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(os.fspath(path)).absolute()
        self._swept = False

    def ensure(self) -> None:
        """Create the directory if missing (it is recreated if someone removed it) and, the
        first time, sweep temp files of dead writers."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except FileExistsError as exc:
            raise StoreError(f"{self.path}: the store directory is not a directory") from exc
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot create the store directory: {exc}") from exc
        if not self._swept:
            self._swept = True
            self.sweep_temp_files()

    def sweep_temp_files(self, now: float | None = None) -> int:
        """Remove temp files left by dead writers (see the module docstring); how many."""
        now = time.time() if now is None else now
        removed = 0
        try:
            names = os.listdir(self.path)
        except OSError:
            return 0
        for name in names:
            if not _TEMP.match(name):
                continue
            match = _TEMP_PID.match(name)
            path = self.path / name
            try:
                age = now - path.lstat().st_mtime
            except OSError:
                continue
            pid = match.group(1) if match else None
            dead = pid is not None and age > DEAD_WRITER_GRACE and not _pid_alive(int(pid))
            if dead or age > STALE_TEMP_AGE:
                with suppress(OSError):
                    path.unlink()
                    removed += 1
        return removed

    def read(self, path: Path) -> bytes | None:
        """The file's bytes, or ``None`` when it does not exist."""
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc}") from exc

    def write(self, path: Path, data: bytes) -> os.stat_result:
        """Replace ``path`` with ``data`` atomically and durably; returns the new file's stat."""
        tmp = self.path / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(tmp, flags, FILE_MODE)
        except OSError as exc:
            raise StoreError(f"{path}: cannot create a temp file: {exc}") from exc
        try:
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
                stat = os.fstat(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException as exc:
            with suppress(OSError):
                os.unlink(tmp)
            if isinstance(exc, OSError):
                raise StoreError(f"{path}: cannot write: {exc}") from exc
            raise
        self.sync()
        return stat

    def remove(self, path: Path) -> bool:
        """Delete ``path``; whether it existed."""
        try:
            path.unlink()
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise StoreError(f"{path}: cannot delete: {exc}") from exc
        self.sync()
        return True

    def sync(self) -> None:
        """Fsync the directory so a rename or unlink survives a power loss (POSIX only)."""
        if os.name != "posix":
            return
        try:
            fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot fsync the directory: {exc}") from exc

    def names(self, suffix: str) -> list[str]:
        """Names of the files ending in ``suffix`` (temp and hidden files excluded)."""
        try:
            names = os.listdir(self.path)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StoreError(f"{self.path}: cannot list: {exc}") from exc
        return [n for n in names if n.endswith(suffix) and not n.startswith(".")]

    def age(self, path: Path, now: float) -> float | None:
        """Seconds since ``path`` was last written, or ``None`` if it does not exist."""
        try:
            return now - path.stat().st_mtime
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{path}: cannot stat: {exc}") from exc

    @contextmanager
    def lock(self, path: Path, timeout: float | None, what: str) -> Iterator[None]:
        """Hold the lock file ``path`` (freed when this process dies), or raise ``StoreError``."""
        self.ensure()
        try:
            release = _lockfile.acquire(path, timeout)
        except _lockfile.LockTimeout as exc:
            raise StoreError(f"{what}: lock {path} not acquired within {timeout} s") from exc
        try:
            yield
        finally:
            release()


def check_fence_file(directory: Directory, session_id: str, fence: int | None) -> None:
    """``LeaseLostError`` if ``fence`` is older than the one in ``<dir>/<id>.fence``."""
    if fence is not None:
        path = directory.path / f"{session_id}.fence"
        check_fence(session_id, fence, read_fence_file(path), where=str(path))
