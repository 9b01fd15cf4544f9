"""JSON file stores: one plain, inspectable file per session, checkpoint and approval.

The three stores of ``file_store(dir)`` share one directory::

    <id>.json                    a session (see below)
    <id>.json.lock               guards writes of that session across processes
    <id>.lock                    the session's turn lock (``turn_lock``)
    <id>.fence                   the fence handed out last with that lock
    <turn id>.checkpoint.json    a durable turn's checkpoint (turn ids hold one dot)
    <approval id>.approval.json  an approval record
    .approvals.lock              guards approval writes

Session ids hold no dots and approval ids do not start with one, so these names
never collide; temp files are ``.<name>.<pid>.<random>.tmp``. Lock files are
empty, mode 0600, never followed through a symlink; ``delete`` and ``prune``
remove a session's lock files while holding them, which is safe because every
acquirer checks that the file it locked is still the one at the path (see
``_lockfile``). Every write is atomic and durable: a temp file in the same directory,
flushed and fsynced, moved over the old file with ``os.replace``, then the
directory is fsynced; a reader sees the old file or the new one, never a mix. A file that is
not what it should be raises ``StoreCorruptError`` naming its path and is left as
it is.

A session file is a versioned JSON object::

    {"format": "lousho.session", "version": 3, "revision": "<hex>", "messages": [...],
     "origin": {"parent": "<id>", "fork_point": <n>}}

``revision`` is a random token written with every save or append; ``origin`` is written
only for a session made by ``fork`` (kept by every later write of the file).
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

import attrs

from ..encryption import EncryptionOption
from ..errors import (
    SchemaVersionError,
    SessionBusyError,
    StoreConflictError,
    StoreCorruptError,
    StoreError,
)
from ..messages import Message
from ..serde import message_from_dict
from . import _lockfile
from ._directory import WRITE_LOCK_TIMEOUT, Directory, check_fence_file
from ._file_history import file_fork, file_rewind, origin_json, origin_of
from ._file_records import FileApprovalStore, FileCheckpointStore
from ._history_requests import Forked, ForkRequest, RewindRequest, Rewound
from ._rotation import BATCH, RotationResult, rotate_files
from ._sealing import Sealing
from ._state_requests import state_key
from .base import (
    AgentStore,
    BaseSessionStore,
    LockScope,
    PruneResult,
    SessionInfo,
    decode_json_object,
    is_session_id,
    older_than_seconds,
    validate_session_id,
)
from .lease import Lease, bump_fence_file

__all__ = [
    "SESSION_FILE_VERSION",
    "SESSION_FILE_VERSIONS",
    "FileApprovalStore",
    "FileCheckpointStore",
    "FileSessionStore",
    "FileStore",
    "file_store",
]

log = logging.getLogger("lousho_sessions.stores.files")

#: Every version of the session file, with what changed. A change bumps the
#: version, adds a line here, a migration in ``_parse_session`` and a golden fixture.
SESSION_FILE_VERSIONS: Mapping[int, str] = {
    1: "first version: messages as serde dicts, a random revision token per write",
    2: "messages may hold reasoning parts and tool calls their place (after_parts); v1 reads as is",
    3: "a forked session names its parent and fork point ('origin'); v1 and v2 read as is",
}
SESSION_FILE_VERSION = max(SESSION_FILE_VERSIONS)
_FORMAT = "lousho.session"
_HEADER = re.compile(rb'^\{"format":"lousho\.session","version":\d+,"revision":"([0-9a-f]{32})"')
_HEADER_BYTES = 128
#: The append cache keeps at most this many characters of serialized transcripts.
_CACHE_MAX_CHARS = 32 * 1024 * 1024


@attrs.frozen
class _Cached:
    """A session file as last written or read here: its revision, message JSON and count."""

    revision: str
    body: str
    length: int
    #: ``,"origin":{...}`` for a forked session, else ``""`` (written after the messages)
    origin: str = ""


def _revision(head: bytes, stat: os.stat_result) -> str:
    # The token changes with each write of ours; the stat part catches edits by hand.
    match = _HEADER.match(head)
    token = match.group(1).decode("ascii") if match else ""
    return f"{token}:{stat.st_ino}:{stat.st_mtime_ns}:{stat.st_size}"


def _parse_session(path: Path, raw: bytes) -> list[dict[str, Any]]:
    """The message dicts of a session file; ``StoreCorruptError``/``SchemaVersionError`` naming ``path``."""
    return _parse_file(path, raw)[0]


def _parse_file(path: Path, raw: bytes) -> tuple[list[dict[str, Any]], str]:
    """The message dicts of a session file and its ``origin`` as written after them."""
    data = decode_json_object(raw, source=str(path))
    if data.get("format") != _FORMAT:
        raise StoreCorruptError(
            f"{path}: not a lousho session file (format {data.get('format')!r}, expected {_FORMAT!r})"
        )
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise StoreCorruptError(f"{path}: invalid session file version {version!r}")
    if version > SESSION_FILE_VERSION:
        raise SchemaVersionError(
            f"{path}: session file version {version} was written by a newer lousho_sessions; "
            f"this release reads versions up to {SESSION_FILE_VERSION}"
        )
    messages = data.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise StoreCorruptError(f"{path}: 'messages' must be a JSON array of objects")
    origin = data.get("origin")
    if origin is None:
        return messages, ""
    if not (
        isinstance(origin, dict)
        and isinstance(origin.get("parent"), str)
        and isinstance(origin.get("fork_point"), int)
    ):
        raise StoreCorruptError(f"{path}: 'origin' must be an object with parent and fork_point")
    return messages, origin_json(origin["parent"], origin["fork_point"])


def _message_jsons(sealing: Sealing, id: str, messages: Sequence[Message]) -> list[str]:
    for m in messages:
        if not isinstance(m, Message):
            raise TypeError(f"session {id!r}: expected Message objects, got {type(m).__name__}")
    return [sealing.message_text(id, m) for m in messages]


class FileSessionStore(BaseSessionStore):
    """Transcripts as ``<dir>/<id>.json`` files, shared safely by threads and processes.

    ``append`` rewrites the file (atomically) but does not serialize the old
    messages again: the JSON of the transcripts this object last wrote or read is
    cached, checked against the file's revision. ``turn_lock`` is an OS file lock
    (``lock_scope`` ``"machine"``); its fence is kept in ``<dir>/<id>.fence``. ``prune``
    also removes the state record a checkpoint store of ``dir`` keeps of a pruned session.
    """

    lock_scope: LockScope = "machine"
    commits_state = True  # the default commit_turn's
    forks_state = True
    prunes_state = True

    def __init__(self, dir: str | os.PathLike[str], *, encryption: EncryptionOption = None) -> None:
        self._dir = Directory(dir)
        self.sealing = Sealing(encryption)
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._cache_chars = 0
        self._cache_lock = threading.Lock()
        _LIVE_SESSION_STORES.add(self)

    @property
    def dir(self) -> Path:
        return self._dir.path

    def __repr__(self) -> str:
        return f"FileSessionStore({str(self.dir)!r})"

    def path(self, id: str) -> Path:
        """The file that holds session ``id``."""
        return self._dir.path / f"{validate_session_id(id)}.json"

    def load(self, id: str) -> list[Message] | None:
        path = self.path(id)
        try:
            with open(path, "rb") as f:
                stat = os.fstat(f.fileno())
                raw = f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc}") from exc
        dicts, origin = _parse_file(path, raw)
        messages = []
        source = f"{path}: session {id!r}"
        for i, d in enumerate(dicts):
            try:
                messages.append(message_from_dict(self.sealing.open_message(id, d, source=source)))
            except ValueError as exc:
                raise StoreCorruptError(f"{path}: message {i}: {exc}") from exc
        body = ",".join(json.dumps(d, separators=(",", ":")) for d in dicts)
        self._remember(id, _Cached(_revision(raw[:_HEADER_BYTES], stat), body, len(dicts), origin))
        return messages

    def save(self, id: str, messages: Sequence[Message]) -> None:
        path = self.path(id)
        parts = _message_jsons(self.sealing, id, messages)
        with self._write_lock(id, path):
            current = self._current(id, path)  # its origin, if a fork, is kept
            self._write(id, path, ",".join(parts), len(parts), current.origin if current else "")

    def append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        fence: int | None = None,
    ) -> None:
        """Add ``messages`` if the file holds ``expected_length`` messages, else ``StoreConflictError``;
        ``LeaseLostError`` if ``fence`` is older than the session's newest."""
        path = self.path(id)
        parts = _message_jsons(self.sealing, id, messages)
        with self._write_lock(id, path):
            check_fence_file(self._dir, id, fence)
            current = self._current(id, path)
            length = current.length if current else 0
            if length != expected_length:
                raise StoreConflictError(
                    f"session {id!r} ({path}): expected {expected_length} stored messages, found {length}"
                )
            body = ",".join(([current.body] if current and current.body else []) + parts)
            self._write(id, path, body, length + len(parts), current.origin if current else "")

    def delete(self, id: str) -> None:
        """Delete the session file and its lock files (a lock file some process holds stays;
        ``prune`` removes it later)."""
        path = self.path(id)
        self._forget(id)
        if not self._dir.path.is_dir():
            return
        self._remove(id, path)
        _lockfile.remove_if_free(self._turn_lock_path(id))

    def _remove(self, id: str, path: Path, older_than: float | None = None) -> bool:
        """Delete the session file (only if not written for ``older_than`` seconds, when
        given) and its write lock file, holding that lock; whether the session was deleted."""
        write_lock = self._write_lock_path(path)
        with self._write_lock(id, path):
            age = self._dir.age(path, time.time())
            removed = False
            if older_than is None or (age is not None and age > older_than):
                removed = self._dir.remove(path)
                self._forget(id)
                # Safe while we hold it: every acquirer checks it locked the file now at the path.
                write_lock.unlink(missing_ok=True)
        return removed

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete sessions not written within ``older_than`` (seconds or a ``timedelta``), the
        lock files of sessions that no longer exist (unless held) and temp files left by dead
        writers. ``sessions``, ``lock_files`` and ``temp_files`` of the result are counted."""
        seconds = older_than_seconds(older_than)
        now = time.time()
        sessions = 0
        for name in self._dir.names(".json"):
            id = name[: -len(".json")]
            if "." in id or not _is_session_id(id):
                continue  # a checkpoint or approval file
            path = self._dir.path / name
            age = self._dir.age(path, now)
            if age is None or age <= seconds or self.turn_held(id):
                continue  # recent, or its turn runs right now
            if self._remove(id, path, seconds):
                sessions += 1
                self._dir.remove(self._dir.path / f"{state_key(id)}.checkpoint.json")
        lock_files = 0
        for name in self._dir.names(".lock"):
            id = name[: -len(".json.lock")] if name.endswith(".json.lock") else name[:-5]
            if _is_session_id(id) and not (self._dir.path / f"{id}.json").exists():
                lock_files += _lockfile.remove_if_free(self._dir.path / name)
        leases = 0
        for name in self._dir.names(".fence"):
            id = name[: -len(".fence")]
            if _is_session_id(id) and not any(
                (self._dir.path / f"{id}{suffix}").exists() for suffix in (".json", ".lock")
            ):
                self._remove_fence(id)
                leases += 1
        temp_files = self._dir.sweep_temp_files()
        return PruneResult(
            sessions, 0, 0, lock_files=lock_files, temp_files=temp_files, leases=leases
        )

    def list_ids(self) -> list[str]:
        """The ids of the ``<id>.json`` session files, sorted."""
        ids = (name[: -len(".json")] for name in self._dir.names(".json"))
        return sorted(id for id in ids if _is_session_id(id))

    def info(self, id: str) -> SessionInfo | None:
        """The session's length (the file is read once and cached) and its file's mtime."""
        path = self.path(id)
        current = self._current(id, path)
        if current is None:
            return None
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return None  # deleted meanwhile
        parent, point = origin_of(current.origin)
        return SessionInfo(id, current.length, mtime, parent, point)

    def rewind(self, request: RewindRequest) -> Rewound:
        """Keep the first ``keep`` messages: one atomic write of the file, under its write lock."""
        return file_rewind(self, request)

    def fork(self, request: ForkRequest) -> Forked:
        """Write the new session's file (refused if it exists), under its write lock."""
        return file_fork(self, request)

    def revision(self, id: str) -> str | None:
        """A value that changes with every write of ``id``; ``None`` when no file exists."""
        path = self.path(id)
        try:
            with open(path, "rb") as f:
                return _revision(f.read(_HEADER_BYTES), os.fstat(f.fileno()))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc}") from exc

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Hold session ``id`` for a turn, across threads and processes (``<dir>/<id>.lock``).

        The lock is an OS file lock, so it is freed when the holding process dies.
        ``SessionBusyError`` when it is not acquired within ``timeout`` seconds
        (``None``: wait as long as it takes). The lease's fence is written to
        ``<dir>/<id>.fence`` while the lock is held.
        """
        lock_path = self._dir.path / f"{validate_session_id(id)}.lock"
        try:
            release = _lockfile.acquire(lock_path, timeout, make_parent=self._dir.ensure)
        except _lockfile.LockTimeout as exc:
            raise SessionBusyError(
                f"session {id!r} is held by another turn: {lock_path} not acquired within {timeout} s"
            ) from exc
        try:
            fence = bump_fence_file(self._fence_path(id))
        except BaseException:
            release()
            raise
        return Lease(id, fence, release)

    def take_over(self, id: str) -> int:
        """A fence newer than the holder's, written to ``<dir>/<id>.fence`` at once."""
        return bump_fence_file(self._fence_path(validate_session_id(id)))

    def turn_held(self, id: str) -> bool:
        """Whether a live process holds ``<dir>/<id>.lock`` now (a dead one holds nothing)."""
        return _lockfile.is_held(self._dir.path / f"{validate_session_id(id)}.lock")

    def _fence_path(self, id: str) -> Path:
        return self._dir.path / f"{id}.fence"

    def _remove_fence(self, id: str) -> None:
        # Only for a pruned session with no turn lock file, so no lease is held; a later
        # lease's fence still grows (``next_fence`` takes the clock). ``delete`` keeps the
        # fence, so a writer whose lease is older than the delete stays refused.
        with suppress(OSError):
            self._fence_path(id).unlink(missing_ok=True)

    def _turn_lock_path(self, id: str) -> Path:
        return self._dir.path / f"{id}.lock"

    @staticmethod
    def _write_lock_path(path: Path) -> Path:
        return path.with_name(path.name + ".lock")

    def _write_lock(self, id: str, path: Path) -> AbstractContextManager[None]:
        return self._dir.lock(self._write_lock_path(path), WRITE_LOCK_TIMEOUT, f"session {id!r}")

    def _write(self, id: str, path: Path, body: str, length: int, origin: str = "") -> str:
        token = uuid.uuid4().hex
        text = (
            f'{{"format":"{_FORMAT}","version":{SESSION_FILE_VERSION},"revision":"{token}",'
            f'"messages":[{body}]{origin}}}\n'
        )
        data = text.encode("utf-8")
        stat = self._dir.write(path, data)
        revision = _revision(data[:_HEADER_BYTES], stat)
        self._remember(id, _Cached(revision, body, length, origin))
        return revision

    def _current(self, id: str, path: Path) -> _Cached | None:
        """The file's content as cached, read again only if its revision changed."""
        try:
            with open(path, "rb") as f:
                head = f.read(_HEADER_BYTES)
                revision = _revision(head, os.fstat(f.fileno()))
                with self._cache_lock:
                    cached = self._cache.get(id)
                if cached is not None and cached.revision == revision:
                    return cached
                raw = head + f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"{path}: cannot read: {exc}") from exc
        log.debug("session %r changed on disk; reading %s", id, path)
        dicts, origin = _parse_file(path, raw)
        body = ",".join(json.dumps(d, separators=(",", ":")) for d in dicts)
        entry = _Cached(revision, body, len(dicts), origin)
        self._remember(id, entry)
        return entry

    def _remember(self, id: str, entry: _Cached) -> None:
        with self._cache_lock:
            old = self._cache.pop(id, None)
            if old is not None:
                self._cache_chars -= len(old.body)
            if len(entry.body) > _CACHE_MAX_CHARS:
                return
            self._cache[id] = entry
            self._cache_chars += len(entry.body)
            while self._cache_chars > _CACHE_MAX_CHARS:
                _, evicted = self._cache.popitem(last=False)
                self._cache_chars -= len(evicted.body)

    def _forget(self, id: str) -> None:
        with self._cache_lock:
            old = self._cache.pop(id, None)
            if old is not None:
                self._cache_chars -= len(old.body)


_LIVE_SESSION_STORES: weakref.WeakSet[FileSessionStore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # Another thread of the parent may have held a cache lock at the fork.
    for store in list(_LIVE_SESSION_STORES):
        store._cache_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _is_session_id(value: str) -> bool:
    return is_session_id(value)


@attrs.define
class FileStore(AgentStore):
    """The three file stores of one directory, with a ``prune`` over all of them."""

    def rotate_key(self, *, batch_size: int = BATCH) -> RotationResult:
        """Reseal every record not sealed with the current key, in batches (``rotate-key``)."""
        return rotate_files(self, _parse_session, batch_size)

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete sessions and checkpoints not written within ``older_than`` (seconds or a
        ``timedelta``), approvals resolved that long ago (pending ones are kept), lock files
        of sessions that no longer exist (unless held) and temp files of dead writers."""
        total = PruneResult(0, 0, 0)
        for part in (self.sessions, self.checkpoints, self.approvals):
            if isinstance(part, (FileSessionStore, FileCheckpointStore, FileApprovalStore)):
                total += part.prune(older_than)
        log.info("pruned %s", total)
        return total


def file_store(dir: str | os.PathLike[str], *, encryption: EncryptionOption = None) -> FileStore:
    """Sessions, checkpoints and approvals as files in ``dir`` (sealed with ``encryption=``)."""
    e = encryption
    parts = FileSessionStore(dir, encryption=e), FileCheckpointStore(dir, encryption=e)
    return FileStore(*parts, FileApprovalStore(dir, encryption=e))
