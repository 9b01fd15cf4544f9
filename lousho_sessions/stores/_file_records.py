"""The checkpoint and approval files of ``file_store(dir)`` (``lousho_sessions.stores.files``).

``<turn id>.checkpoint.json`` holds a durable turn's checkpoint and
``<approval id>.approval.json`` an approval record; ``.approvals.lock`` guards
approval writes. Writes are atomic and durable (``_directory``); fenced writes
compare with the session's ``<id>.fence`` file.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from datetime import timedelta
from pathlib import Path
from typing import Any

from ..encryption import EncryptionOption
from ..errors import ApprovalNotFoundError, StoreCorruptError
from . import _lockfile
from ._approval_records import check_new_approval
from ._directory import WRITE_LOCK_TIMEOUT, Directory, check_fence_file
from ._sealing import Sealing
from ._state_requests import is_state_key
from .base import (
    BaseApprovalStore,
    BaseCheckpointStore,
    PruneResult,
    approval_sort_key,
    check_approval_record,
    decode_json_object,
    older_than_seconds,
    resolved_approval,
    validate_approval_id,
    validate_session_id,
    validate_turn_id,
)
from .lease import fence_session_id

__all__ = ["FileApprovalStore", "FileCheckpointStore"]

log = logging.getLogger("lousho_sessions.stores.files")

_CHECKPOINT_SUFFIX = ".checkpoint.json"
_APPROVAL_SUFFIX = ".approval.json"


class FileCheckpointStore(BaseCheckpointStore):
    """Checkpoints as ``<dir>/<turn id>.checkpoint.json``; each save replaces the file atomically.

    A write given a ``fence`` checks it against the session's ``<dir>/<id>.fence``.
    """

    checks_json = True  # saved through encode_json_object (the sealing's record_text)
    fenced_writes = True

    def __init__(self, dir: str | os.PathLike[str], *, encryption: EncryptionOption = None) -> None:
        self._dir = Directory(dir)
        self.sealing = Sealing(encryption)

    @property
    def dir(self) -> Path:
        return self._dir.path

    def __repr__(self) -> str:
        return f"FileCheckpointStore({str(self.dir)!r})"

    def path(self, turn_id: str) -> Path:
        return self._dir.path / f"{validate_turn_id(turn_id)}{_CHECKPOINT_SUFFIX}"

    def load(self, turn_id: str) -> dict[str, Any] | None:
        path = self.path(turn_id)
        raw = self._dir.read(path)
        if raw is None:
            return None
        return self.sealing.record("checkpoint", fence_session_id(turn_id), raw, source=str(path))

    def save(
        self, turn_id: str, checkpoint: Mapping[str, Any], *, fence: int | None = None
    ) -> None:
        path = self.path(turn_id)
        text = self.sealing.record_text(
            "checkpoint", fence_session_id(turn_id), checkpoint, what=f"checkpoint {turn_id!r}"
        )
        check_fence_file(self._dir, fence_session_id(turn_id), fence)
        self._dir.ensure()
        self._dir.write(path, text.encode("utf-8"))

    def delete(self, turn_id: str, *, fence: int | None = None) -> None:
        path = self.path(turn_id)
        check_fence_file(self._dir, fence_session_id(turn_id), fence)
        self._dir.remove(path)

    def list(self, prefix: str = "") -> list[str]:
        """The stored turn ids that start with ``prefix``, sorted."""
        ids = (n[: -len(_CHECKPOINT_SUFFIX)] for n in self._dir.names(_CHECKPOINT_SUFFIX))
        return sorted(t for t in ids if t.startswith(prefix) and _is_turn_id(t))

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete checkpoints not written within ``older_than`` (seconds or a ``timedelta``),
        but those of a session whose turn holds its lock (``<dir>/<id>.lock``) right now."""
        seconds = older_than_seconds(older_than)
        count = 0
        for turn_id in self.list():
            path = self.path(turn_id)
            age = self._dir.age(path, time.time())
            if age is None or age <= seconds or is_state_key(turn_id):
                continue  # new enough, or a session's state record (kept with the session)
            if _lockfile.is_held(self._dir.path / f"{fence_session_id(turn_id)}.lock"):
                continue  # its turn runs right now
            if self._dir.remove(path):
                count += 1
        return PruneResult(0, count, 0)


def _is_turn_id(value: str) -> bool:
    try:
        validate_turn_id(value)
    except ValueError:
        return False
    return True


class FileApprovalStore(BaseApprovalStore):
    """Approval records as ``<dir>/<approval id>.approval.json``.

    ``create``, ``resolve`` and ``delete`` hold ``<dir>/.approvals.lock``, so
    ``resolve`` is a compare-and-set across threads and processes: exactly one
    caller turns a pending approval into approved or denied. ``create`` given a
    ``fence`` checks it against the record's session's ``<dir>/<id>.fence``.
    """

    fenced_writes = True

    def __init__(self, dir: str | os.PathLike[str], *, encryption: EncryptionOption = None) -> None:
        self._dir = Directory(dir)
        self.sealing = Sealing(encryption)

    @property
    def dir(self) -> Path:
        return self._dir.path

    def __repr__(self) -> str:
        return f"FileApprovalStore({str(self.dir)!r})"

    def path(self, id: str) -> Path:
        return self._dir.path / f"{validate_approval_id(id)}{_APPROVAL_SUFFIX}"

    def create(self, record: Mapping[str, Any], *, fence: int | None = None) -> None:
        """Store a new record; ``ValueError`` if one with its ``id`` exists or it is malformed."""
        approval_id = validate_approval_id(check_new_approval(record).get("id"))
        path = self.path(approval_id)
        session_id = record.get("session_id")
        text = self.sealing.record_text(
            "approval", _sid(session_id), record, what=f"approval {approval_id!r}"
        )
        with self._lock():
            if fence is not None and isinstance(session_id, str):
                check_fence_file(self._dir, validate_session_id(session_id), fence)
            if path.exists():
                raise ValueError(f"approval {approval_id!r} exists already ({path})")
            self._dir.write(path, text.encode("utf-8"))

    def get(self, id: str) -> dict[str, Any] | None:
        """The record, ``None`` if unknown; ``StoreCorruptError`` naming the file if unreadable."""
        path = self.path(id)
        raw = self._dir.read(path)
        return None if raw is None else _decode_approval(self.sealing, raw, path)

    def resolve(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        path = self.path(id)
        with self._lock():
            raw = self._dir.read(path)
            if raw is None:
                raise ApprovalNotFoundError(f"no approval with id {id!r} in {self.dir}")
            record = resolved_approval(
                _decode_approval(self.sealing, raw, path),
                approved=approved,
                reason=reason,
                source=repr(id),
                arguments=arguments,
            )
            self._dir.write(
                path,
                self.sealing.record_text(
                    "approval", _sid(record.get("session_id")), record, what=f"approval {id!r}"
                ).encode("utf-8"),
            )
            return record

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[dict[str, Any]]:
        """The matching records, oldest first. A file that cannot be read is skipped with a
        WARNING naming it (``corrupt()`` lists them), so it never hides the other records."""
        records = []
        for _, record in self._records():
            if isinstance(record, StoreCorruptError):
                log.warning("skipping unreadable approval record: %s", record)
                continue
            if (session_id is None or record.get("session_id") == session_id) and (
                status is None or record.get("status") == status
            ):
                records.append(record)
        return sorted(records, key=approval_sort_key)

    def corrupt(self) -> dict[str, str]:
        """The approval records ``list`` skips: approval id -> what is wrong (with the path)."""
        return {
            path.name[: -len(_APPROVAL_SUFFIX)]: str(record)
            for path, record in self._records()
            if isinstance(record, StoreCorruptError)
        }

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete approvals resolved more than ``older_than`` ago (seconds or a ``timedelta``,
        by the file's time of last write); pending and unreadable records are kept."""
        seconds = older_than_seconds(older_than)
        count = 0
        for path, record in self._records():
            if isinstance(record, StoreCorruptError) or record.get("status") == "pending":
                continue
            age = self._dir.age(path, time.time())
            if age is not None and age > seconds:
                with self._lock():
                    count += self._dir.remove(path)
        return PruneResult(0, 0, count)

    def _records(self) -> Iterator[tuple[Path, dict[str, Any] | StoreCorruptError]]:
        for name in self._dir.names(_APPROVAL_SUFFIX):
            path = self._dir.path / name
            raw = self._dir.read(path)
            if raw is None:  # deleted since the listing
                continue
            try:
                yield path, _decode_approval(self.sealing, raw, path)
            except StoreCorruptError as exc:
                yield path, exc

    def delete(self, id: str) -> None:
        path = self.path(id)
        if not self._dir.path.is_dir():
            return
        with self._lock():
            self._dir.remove(path)

    def _lock(self) -> AbstractContextManager[None]:
        return self._dir.lock(self._dir.path / ".approvals.lock", WRITE_LOCK_TIMEOUT, "approvals")


def _decode_approval(sealing: Sealing, raw: bytes, path: Path) -> dict[str, Any]:
    data = decode_json_object(raw, source=str(path))
    data = sealing.open_record("approval", _sid(data.get("session_id")), data, source=str(path))
    return check_approval_record(data, source=str(path))


def _sid(session_id: object) -> str | None:
    """An approval record's session id, as its sealing binds it."""
    return session_id if isinstance(session_id, str) else None
