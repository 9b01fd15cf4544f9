"""In-memory stores: tests, scripts, one process that never restarts."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import attrs

from ..encryption import Encryption, EncryptionOption
from ..errors import ApprovalNotFoundError, StoreConflictError
from ..messages import Message
from ._approval_records import check_decision, check_new_approval
from ._history_requests import (
    Forked,
    ForkRequest,
    RewindRequest,
    Rewound,
    check_keep,
    copy_state,
    exists_error,
    missing_error,
)
from ._rotation import BATCH, RotationResult
from ._state_requests import is_state_key, state_key
from .base import (
    AgentStore,
    BaseApprovalStore,
    BaseCheckpointStore,
    BaseSessionStore,
    PruneResult,
    SessionInfo,
    decode_json_object,
    encode_json_object,
    known_valid,
    message_json,
    older_than_seconds,
    resolved_approval,
    validate_approval_id,
    validate_session_id,
    validate_turn_id,
)
from .lease import LocalLeases, fence_session_id

__all__ = [
    "MemoryApprovalStore",
    "MemoryCheckpointStore",
    "MemorySessionStore",
    "MemoryStore",
    "memory_store",
]


def _check_messages(id: str, messages: Sequence[Message]) -> list[Message]:
    """``messages`` as a list, refused as a persistent store would refuse them: non-messages
    (``TypeError``), NaN, infinity or absurd nesting (``ValueError`` naming the field)."""
    new = list(messages)
    for m in new:
        if not isinstance(m, Message):
            raise TypeError(f"session {id!r}: expected Message objects, got {type(m).__name__}")
        if not known_valid(m):  # a turn's messages were encoded in its checkpoints
            message_json(m)
    return new


class MemorySessionStore(BaseSessionStore):
    """Transcripts in a dict; messages are frozen, so no copies of them are made.

    ``turn_lock`` excludes the threads of this process (``lock_scope`` ``"process"``);
    its fences live in ``leases``, which ``memory_store()`` shares with the
    checkpoint and approval stores so that their writes check them too. ``checkpoints``:
    the checkpoint store keeping its sessions' state records (``memory_store()`` gives
    its own), which ``prune`` removes with the sessions.
    """

    commits_state = True  # the default commit_turn's
    forks_state = True

    def __init__(
        self,
        *,
        leases: LocalLeases | None = None,
        checkpoints: MemoryCheckpointStore | None = None,
    ) -> None:
        self._leases = leases or LocalLeases()
        self._checkpoints = checkpoints
        self.prunes_state = checkpoints is not None
        self._lock = threading.Lock()
        self._data: dict[str, list[Message]] = {}
        self._revisions: dict[str, int] = {}
        self._updated: dict[str, float] = {}
        #: forked sessions: id -> (parent, fork point)
        self._origins: dict[str, tuple[str, int]] = {}
        self._counter = 0

    def load(self, id: str) -> list[Message] | None:
        validate_session_id(id)
        with self._lock:
            messages = self._data.get(id)
            return None if messages is None else list(messages)

    def save(self, id: str, messages: Sequence[Message]) -> None:
        validate_session_id(id)
        new = _check_messages(id, messages)
        with self._lock:
            self._data[id] = new
            self._bump(id)

    def append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        fence: int | None = None,
    ) -> None:
        validate_session_id(id)
        messages = _check_messages(id, messages)
        with self._lock:
            self._leases.check(id, fence, where="memory store")
            current = self._data.get(id, [])
            if len(current) != expected_length:
                raise StoreConflictError(
                    f"session {id!r}: expected {expected_length} stored messages, found {len(current)}"
                )
            self._data[id] = current
            current.extend(messages)
            self._bump(id)

    def delete(self, id: str) -> None:
        validate_session_id(id)
        with self._lock:
            self._data.pop(id, None)
            self._revisions.pop(id, None)
            self._updated.pop(id, None)
            self._origins.pop(id, None)

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete sessions not written within ``older_than`` (seconds or a ``timedelta``)."""
        cutoff = time.time() - older_than_seconds(older_than)
        with self._lock:
            old = [
                id
                for id, at in self._updated.items()
                if at < cutoff and not self._leases.held(id)  # a running turn's: kept
            ]
            for id in old:
                del self._data[id], self._revisions[id], self._updated[id]
                self._origins.pop(id, None)
                self.__dict__.get("_states", {}).pop(id, None)  # kept here without checkpoints
            leases = self._leases.forget_unheld(lambda id: id in self._data)
        if self._checkpoints is not None:
            self._checkpoints.forget([state_key(id) for id in old])
        return PruneResult(len(old), 0, 0, leases=leases)

    def revision(self, id: str) -> int | None:
        validate_session_id(id)
        return self._revisions.get(id)

    def list_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._data)

    def info(self, id: str) -> SessionInfo | None:
        validate_session_id(id)
        with self._lock:
            messages = self._data.get(id)
            if messages is None:
                return None
            parent, point = self._origins.get(id, (None, None))
            return SessionInfo(id, len(messages), self._updated[id], parent, point)

    def rewind(self, request: RewindRequest) -> Rewound:
        """Keep the first ``keep`` messages (fenced, compare-and-set), under the store's lock."""
        id = request.id
        with self._lock:
            self._leases.check(id, request.fence, where="memory store")
            current = self._data.get(id)
            if current is None:
                raise StoreConflictError(f"cannot rewind session {id!r}: it is not stored")
            if request.expected_length is not None and len(current) != request.expected_length:
                raise StoreConflictError(
                    f"session {id!r}: expected {request.expected_length} stored messages, "
                    f"found {len(current)}"
                )
            keep = check_keep(id, request.keep, len(current))
            self._data[id] = current[:keep]  # a new list: a reader's copy stays whole
            self._bump(id)
            return Rewound(len(current) - keep, self._revisions[id])

    def fork(self, request: ForkRequest) -> Forked:
        """Copy the first ``keep`` messages of ``source`` to the new ``new_id``, under the lock,
        then its state (``copy_state``)."""
        with self._lock:
            if request.new_id in self._data:
                raise exists_error(request.new_id, "memory store")
            source = self._data.get(request.source)
            if source is None:
                raise missing_error(request.source, "memory store")
            keep = check_keep(request.source, request.keep, len(source))
            self._data[request.new_id] = source[:keep]
            self._origins[request.new_id] = (request.source, keep)
            self._bump(request.new_id)
            revision = self._revisions[request.new_id]
        copy_state(self, request)  # after: nothing of this process runs between
        return Forked(keep, revision)

    def _bump(self, id: str) -> None:
        self._counter += 1
        self._revisions[id] = self._counter
        self._updated[id] = time.time()


class MemoryCheckpointStore(BaseCheckpointStore):
    """Checkpoints kept as JSON text, so they behave exactly as a persistent store's.

    Writes check fences when given the session store's ``leases`` (``memory_store()`` does).
    """

    checks_json = True  # saved through encode_json_object

    def __init__(self, *, leases: LocalLeases | None = None) -> None:
        self._leases = leases or LocalLeases()
        self.fenced_writes = leases is not None
        self._lock = threading.Lock()
        self._data: dict[str, tuple[str, float]] = {}  # turn id -> (JSON text, time written)

    def load(self, turn_id: str) -> dict[str, Any] | None:
        validate_turn_id(turn_id)
        entry = self._data.get(turn_id)
        if entry is None:
            return None
        return decode_json_object(entry[0], source=f"checkpoint {turn_id!r}")

    def save(
        self, turn_id: str, checkpoint: Mapping[str, Any], *, fence: int | None = None
    ) -> None:
        validate_turn_id(turn_id)
        text = encode_json_object(checkpoint, what=f"checkpoint {turn_id!r}")
        with self._lock:
            self._leases.check(fence_session_id(turn_id), fence, where="memory store")
            self._data[turn_id] = (text, time.time())

    def delete(self, turn_id: str, *, fence: int | None = None) -> None:
        validate_turn_id(turn_id)
        with self._lock:
            self._leases.check(fence_session_id(turn_id), fence, where="memory store")
            self._data.pop(turn_id, None)

    def list(self, prefix: str = "") -> list[str]:
        with self._lock:
            return sorted(k for k in self._data if k.startswith(prefix))

    def forget(self, turn_ids: Sequence[str]) -> None:
        """Delete the records ``turn_ids`` unfenced (a session prune's state records)."""
        with self._lock:
            for turn_id in turn_ids:
                self._data.pop(turn_id, None)

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete checkpoints not written within ``older_than`` (seconds or a ``timedelta``)."""
        cutoff = time.time() - older_than_seconds(older_than)
        with self._lock:
            old = [
                k
                for k, (_, at) in self._data.items()
                if at < cutoff
                and not self._leases.held(fence_session_id(k))
                and not is_state_key(k)
            ]
            for k in old:
                del self._data[k]
        return PruneResult(0, len(old), 0)


class MemoryApprovalStore(BaseApprovalStore):
    """Approval records in a dict; ``resolve`` is a compare-and-set under a lock.

    ``create`` checks fences when given the session store's ``leases``.
    """

    def __init__(self, *, leases: LocalLeases | None = None) -> None:
        self._leases = leases or LocalLeases()
        self.fenced_writes = leases is not None
        self._lock = threading.Lock()
        self._data: dict[str, str] = {}
        self._resolved: dict[str, float] = {}  # approval id -> when it was resolved

    def create(self, record: Mapping[str, Any], *, fence: int | None = None) -> None:
        """Store a new record; ``ValueError`` if one with its ``id`` exists or it is malformed."""
        approval_id = validate_approval_id(check_new_approval(record).get("id"))
        text = encode_json_object(record, what=f"approval {approval_id!r}")
        session_id = record.get("session_id")
        with self._lock:
            if isinstance(session_id, str):
                self._leases.check(session_id, fence, where="memory store")
            if approval_id in self._data:
                raise ValueError(f"approval {approval_id!r} exists already")
            self._data[approval_id] = text
            if record.get("status") != "pending":
                self._resolved[approval_id] = time.time()

    def get(self, id: str) -> dict[str, Any] | None:
        validate_approval_id(id)
        text = self._data.get(id)
        return None if text is None else decode_json_object(text, source=f"approval {id!r}")

    def resolve(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        validate_approval_id(id)
        check_decision(approved, reason, source=repr(id))
        with self._lock:
            text = self._data.get(id)
            if text is None:
                raise ApprovalNotFoundError(f"no approval with id {id!r}")
            record = resolved_approval(
                decode_json_object(text, source=f"approval {id!r}"),
                approved=approved,
                reason=reason,
                source=repr(id),
                arguments=arguments,
            )
            self._data[id] = encode_json_object(record, what=f"approval {id!r}")
            self._resolved[id] = time.time()
            return record

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[dict[str, Any]]:
        with self._lock:
            texts = list(self._data.items())
        records = [decode_json_object(t, source=f"approval {k!r}") for k, t in texts]
        return sorted(
            (
                r
                for r in records
                if (session_id is None or r.get("session_id") == session_id)
                and (status is None or r.get("status") == status)
            ),
            key=lambda r: (str(r.get("created_at", "")), str(r.get("id"))),
        )

    def delete(self, id: str) -> None:
        validate_approval_id(id)
        with self._lock:
            self._data.pop(id, None)
            self._resolved.pop(id, None)

    def corrupt(self) -> dict[str, str]:
        """Records ``list`` would skip; always empty here: ``create`` refuses malformed ones."""
        return {}

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete approvals resolved more than ``older_than`` ago; pending ones are kept."""
        cutoff = time.time() - older_than_seconds(older_than)
        with self._lock:
            old = [k for k, at in self._resolved.items() if at < cutoff]
            for k in old:
                del self._data[k], self._resolved[k]
        return PruneResult(0, 0, len(old))


@attrs.define
class MemoryStore(AgentStore):
    """The three memory stores, with a ``prune`` over all of them."""

    def rotate_key(self, *, batch_size: int = BATCH) -> RotationResult:
        """Nothing to rewrite: a memory store keeps nothing at rest."""
        return RotationResult()

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete sessions and checkpoints not written within ``older_than`` (seconds or a
        ``timedelta``) and approvals resolved that long ago; pending approvals are kept."""
        total = PruneResult(0, 0, 0)
        for part in (self.sessions, self.checkpoints, self.approvals):
            if isinstance(part, (MemorySessionStore, MemoryCheckpointStore, MemoryApprovalStore)):
                total += part.prune(older_than)
        return total


def memory_store(*, encryption: EncryptionOption = None) -> MemoryStore:
    """Sessions, checkpoints and approvals in memory, as one ``AgentStore``.

    ``encryption=`` is checked as the other stores check it, then not used: nothing of a
    memory store is at rest (it lives and dies with the process), so a program can switch
    between stores without changing its arguments."""
    Encryption.of(encryption)
    leases = LocalLeases()
    checkpoints = MemoryCheckpointStore(leases=leases)
    return MemoryStore(
        MemorySessionStore(leases=leases, checkpoints=checkpoints),
        checkpoints,
        MemoryApprovalStore(leases=leases),
    )
