"""The store contract: Protocols for users, base classes for stores, the ``AgentStore`` bundle.

A user's store needs only the small Protocol methods (``SessionStore``:
``load``/``save``/``delete``); ``store_parts`` wraps such an object once in an
adapter that supplies the rest of the contract with safe defaults. Stores that
do more subclass the base classes (``BaseSessionStore``, ``BaseCheckpointStore``,
``BaseApprovalStore``) and override what they can do better:

* ``append(id, messages, expected_length, *, fence=None)``: add a turn's new
  messages; ``StoreConflictError`` when the stored length is not ``expected_length``.
* ``revision(id)``: a cheap value that changes with every write of ``id`` (``None`` when
  nothing is stored), so a session reloads only when another session or process wrote.
* ``turn_lock(id, *, timeout=None)``: a ``Lease`` holding the session for a whole
  turn, with a fence its writes carry (``lousho_sessions.stores.lease``).
  ``lock_scope`` says what it excludes: ``"process"``, ``"machine"`` or ``"cluster"``.
* ``load_since(id, length, revision)``: only the messages after the first ``length``, when
  the store can tell that nothing but appends changed ``id`` since ``revision`` (else ``None``).
* ``take_turn(TakeTurn) -> TakenTurn``, ``commit_turn(CommitTurn) -> revision``: a turn's
  two calls (``_turn_requests``), by default built from the methods above.
* ``BaseCheckpointStore.save_and_delete(turn_id, checkpoint, delete, fence=)``:
  save a checkpoint and delete the records it replaces, in one transaction where it can.
* ``claim_stale(ids)``: a sweep's claim of the unheld; ``turn_held(id)``/``held_sessions``:
  whether a live turn holds them (``None``: cannot tell); ``take_over(id)``: a new fence, not
  waiting for the holder; ``pending_turns()``/``pending_fields()``: what recovery sweeps.
* ``rewind(RewindRequest(...))``: drop a transcript's tail (fenced, one write);
  ``fork(ForkRequest(...))``: a new session holding a prefix of another (``_history_requests``).
* ``prune(older_than)``, ``list_ids()``, ``info(id)`` (with a fork's parent), ``usage(id)``.
"""

from __future__ import annotations

import builtins
import logging
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from types import TracebackType
from typing import Any, Literal, Protocol, runtime_checkable

import attrs

from ..errors import SessionBusyError, StoreConflictError, StoreCorruptError
from ..messages import Message, Usage
from ..serde import decode_json_object, encode_json_object, known_valid, message_json
from ..usage_totals import transcript_usage
from ._approval_records import approval_sort_key, check_approval_record, resolved_approval, shown
from ._checks import (
    APPROVAL_ID_PATTERN,
    SESSION_ID_PATTERN,
    TURN_ID_PATTERN,
    is_session_id,
    older_than_seconds,
    validate_approval_id,
    validate_session_id,
    validate_turn_id,
)
from ._history_requests import Forked, ForkRequest, HistoryVerbs, RewindRequest, Rewound
from ._state_requests import SaveState, StateVerbs
from ._summaries import PruneResult, SessionInfo
from ._turn_requests import CommitTurn, StartCheckpoint, TakenTurn, TakeTurn, TurnVerbs
from .lease import Lease, LocalLeases

__all__ = [
    "APPROVAL_ID_PATTERN",
    "SESSION_ID_PATTERN",
    "TURN_ID_PATTERN",
    "AgentStore",
    "ApprovalStore",
    "BaseApprovalStore",
    "BaseCheckpointStore",
    "BaseSessionStore",
    "CheckpointStore",
    "CommitTurn",
    "ForkRequest",
    "Forked",
    "Lease",
    "LockScope",
    "PruneResult",
    "RewindRequest",
    "Rewound",
    "SaveState",
    "SessionInfo",
    "SessionStore",
    "StartCheckpoint",
    "TakeTurn",
    "TakenTurn",
    "approval_sort_key",
    "check_approval_record",
    "decode_json_object",
    "encode_json_object",
    "is_session_id",
    "known_valid",
    "message_json",
    "older_than_seconds",
    "resolved_approval",
    "shown",
    "validate_approval_id",
    "validate_session_id",
    "validate_turn_id",
]

log = logging.getLogger("lousho_sessions.stores")

#: What ``pending_turns`` lists: a durable turn's checkpoint, not its result records.
_PENDING_TURN = re.compile(r"[A-Za-z0-9_-]{1,128}\.(turn-[0-9]+|send)")


@runtime_checkable
class SessionStore(Protocol):
    """Keeps transcripts between calls. ``load`` of an unknown id returns ``None``."""

    def load(self, id: str) -> list[Message] | None: ...

    def save(self, id: str, messages: Sequence[Message]) -> None: ...

    def delete(self, id: str) -> None: ...


@runtime_checkable
class CheckpointStore(Protocol):
    """Keeps the checkpoints of unfinished durable turns (opaque JSON objects, stored
    unchanged), keyed by turn id."""

    def load(self, turn_id: str) -> dict[str, Any] | None: ...

    def save(self, turn_id: str, checkpoint: Mapping[str, Any]) -> None: ...

    def delete(self, turn_id: str) -> None: ...

    def list(self, prefix: str = "") -> list[str]: ...


@runtime_checkable
class ApprovalStore(Protocol):
    """Keeps approval records (JSON objects with at least ``id``, ``session_id``, ``status``:
    ``"pending"``, ``"approved"`` or ``"denied"``). ``resolve`` is an atomic compare-and-set
    from ``"pending"``: one caller wins, the others get ``ApprovalAlreadyResolvedError``; an
    unknown id raises ``ApprovalNotFoundError``. A store whose ``resolve`` also takes
    ``arguments`` (a JSON object, given only when approving: the call's edited arguments,
    kept in the record's ``"arguments"`` in the same compare-and-set) lets approvers edit
    a call's arguments."""

    def create(self, record: Mapping[str, Any]) -> None: ...

    def get(self, id: str) -> dict[str, Any] | None: ...

    def resolve(self, id: str, *, approved: bool, reason: str | None = None) -> dict[str, Any]: ...

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[dict[str, Any]]: ...

    def delete(self, id: str) -> None: ...


LockScope = Literal["process", "machine", "cluster"]

_STATE_LOCK = threading.Lock()


def _not_implemented(store: object, method: str) -> NotImplementedError:
    return NotImplementedError(f"{type(store).__name__} does not implement {method}()")


class _Closeable:
    """``close()`` (a no-op by default) and the context manager that calls it."""

    def close(self) -> None:
        """Free what the store holds (connections, files); the default holds nothing."""

    def __enter__(self) -> Any:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class BaseSessionStore(_Closeable, TurnVerbs, HistoryVerbs, StateVerbs, ABC):
    """The session store contract: ``load``/``save``/``delete`` required, the rest with safe defaults.

    Defaults, each meant to be overridden by a store that can do better:

    * ``append`` loads, compares the stored length with ``expected_length``
      (``StoreConflictError``), checks the fence and saves the whole transcript,
      under a lock of this object (atomic within this process only).
    * ``revision`` returns a new object on every call, equal to nothing: "unknown",
      so a caller that compares revisions reloads before every turn. ``None`` is kept
      for "nothing is stored".
    * ``turn_lock`` is a lease kept in this process (``LocalLeases``): it excludes
      threads, not processes, so ``lock_scope`` is ``"process"``.
    * ``prune`` and ``list_ids`` raise ``NotImplementedError``; every store of ours
      implements them.
    * ``info`` loads the transcript to count it; the time of the last write is unknown.

    ``fenced_writes`` declares that writes given a ``fence`` refuse a stale one
    with ``LeaseLostError`` (the conformance kit tests it when true).
    """

    #: What ``turn_lock`` excludes: threads of one process, processes of one machine, or all.
    lock_scope: LockScope = "process"
    #: Whether ``append(..., fence=)`` refuses a stale fence.
    fenced_writes: bool = True
    #: Whether ``take_turn`` may save the offered first checkpoint (``TakeTurn.checkpoint``)
    #: with the lease: a session builds that checkpoint before the lease only then.
    saves_start_checkpoint: bool = False
    #: Whether an overridden ``commit_turn`` writes ``CommitTurn.state`` in its write (the
    #: default ``commit_turn`` does; else a session saves the state just before it).
    commits_state: bool = False
    #: Whether an overridden ``fork`` copies the state when asked (``ForkRequest.state``; the
    #: default ``fork`` does; else a session copies it just after the fork).
    forks_state: bool = False
    #: Whether ``prune`` removes the state of the sessions it removes (where this store, or
    #: a checkpoint store it shares its records with, keeps it); the kit tests it when true.
    prunes_state: bool = False

    @abstractmethod
    def load(self, id: str) -> list[Message] | None:
        """The transcript of ``id``, or ``None`` when nothing is stored."""

    @abstractmethod
    def save(self, id: str, messages: Sequence[Message]) -> None:
        """Replace the transcript of ``id``."""

    @abstractmethod
    def delete(self, id: str) -> None:
        """Forget ``id``; deleting an unknown id does nothing."""

    def append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        fence: int | None = None,
    ) -> None:
        """Add ``messages`` if ``expected_length`` are stored, else ``StoreConflictError``.

        ``LeaseLostError`` if ``fence`` is older than the session's newest fence.
        """
        leases = self._local_leases()
        with leases.write_lock:
            leases.check(id, fence, where=type(self).__name__)
            stored = self.load(id) or []
            if len(stored) != expected_length:
                raise StoreConflictError(
                    f"session {id!r}: expected {expected_length} stored messages, found {len(stored)}"
                )
            self.save(id, [*stored, *messages])

    def revision(self, id: str) -> object | None:
        """A value that changes with every write of ``id``; ``None`` when nothing is stored.

        The default does not know: it returns a new object, equal to no other value.
        """
        return object()

    def load_since(self, id: str, length: int, revision: object) -> list[Message] | None:
        """The messages of ``id`` after its first ``length``, or ``None``: "load it all".

        A caller holding the first ``length`` messages as of ``revision`` (as returned by
        ``revision(id)`` or ``commit_turn``) gets the ones added since. A store
        returns a list only when it knows that nothing but appends changed ``id`` since
        ``revision`` (no ``save`` or ``delete``); else ``None``, and the caller calls
        ``load``. The default always returns ``None``.
        """
        return None

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        """Hold session ``id`` for a turn; ``SessionBusyError`` if not acquired within ``timeout`` s."""
        validate_session_id(id)
        return self._local_leases().acquire(id, timeout)

    def take_over(self, id: str) -> int:
        """A fence newer than any handed out for ``id``, recorded at once without waiting for
        the holder, whose writes are refused from then on (``lousho sessions rm --force``)."""
        return self._local_leases().issue(validate_session_id(id))

    def claim_stale(self, ids: Sequence[str]) -> dict[str, Lease]:
        """Take, without waiting, the turn locks of those of ``ids`` that no live turn holds:
        a lease (with a new fence) for each one taken, by id; the others are left out.

        What a sweep claims turns with (``lousho_sessions.recovery``). The default tries
        ``turn_lock(id, timeout=0)`` for each; a store that can claim many at once overrides it.
        """
        claimed: dict[str, Lease] = {}
        for id in dict.fromkeys(ids):
            try:
                claimed[id] = self.turn_lock(id, timeout=0)
            except SessionBusyError:
                continue
        return claimed

    def turn_held(self, id: str) -> bool | None:
        """Whether a live turn holds ``id`` now (its lock taken, its lease unexpired), asked
        without taking it or handing out a fence; ``None`` when the store cannot tell.

        The default knows the leases of this process (``LocalLeases``).
        """
        return self._local_leases().held(validate_session_id(id))

    def held_sessions(self, ids: Sequence[str]) -> set[str] | None:
        """Those of ``ids`` a live turn holds now, ``None`` if the store cannot tell for one
        (``turn_held`` of each by default; a database answers in one query)."""
        answers = {id: self.turn_held(id) for id in dict.fromkeys(ids)}
        return None if None in answers.values() else {id for id, a in answers.items() if a}

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the sessions not updated within ``older_than`` (seconds or a ``timedelta``),
        with their state where the store declares it (``prunes_state``)."""
        raise _not_implemented(self, "prune")

    def list_ids(self) -> list[str]:
        """Every stored session id, sorted (what ``lousho sessions list`` and ``migrate`` read).

        The default raises ``NotImplementedError``: a store that cannot enumerate its
        sessions must not look empty. Every store of ours implements it.
        """
        raise _not_implemented(self, "list_ids")

    def info(self, id: str) -> SessionInfo | None:
        """How many messages ``id`` holds and when it was last written; ``None`` if not stored.

        The default loads the transcript and does not know the time.
        """
        messages = self.load(id)
        return None if messages is None else SessionInfo(id, len(messages))

    def usage(self, id: str) -> Usage | None:
        """The totals of every ``Usage`` field over the stored transcript of ``id`` (its
        assistant messages and what compaction summaries carry); ``None`` if not stored.

        The default loads the transcript (``usage_totals.transcript_usage``).
        """
        messages = self.load(id)
        return None if messages is None else transcript_usage(messages)

    def _local_leases(self) -> LocalLeases:
        # Created on first use, so a subclass need not call ``super().__init__()``.
        leases = self.__dict__.get("_leases")
        if leases is None:
            with _STATE_LOCK:
                leases = self.__dict__.setdefault("_leases", LocalLeases())
        assert isinstance(leases, LocalLeases)
        return leases


class BaseCheckpointStore(_Closeable, ABC):
    """The checkpoint store contract. Checkpoints are opaque JSON objects keyed by turn id.

    ``save`` and ``delete`` take the turn's ``fence``: a store that knows a newer
    fence for the session (the turn id's part before the first ``"."``) refuses
    the write with ``LeaseLostError``; ``fenced_writes`` declares that it does.
    """

    fenced_writes: bool = False
    #: ``save`` writes what ``encode_json_object`` makes of the checkpoint (so refuses what
    #: it refuses): the engine then notes the messages in a saved checkpoint as valid
    #: (``serde.remember_valid``) and the memory store does not encode them again
    checks_json: bool = False

    @abstractmethod
    def load(self, turn_id: str) -> dict[str, Any] | None:
        """The checkpoint, or ``None``."""

    @abstractmethod
    def save(
        self, turn_id: str, checkpoint: Mapping[str, Any], *, fence: int | None = None
    ) -> None:
        """Store ``checkpoint`` unchanged, replacing an older one."""

    @abstractmethod
    def delete(self, turn_id: str, *, fence: int | None = None) -> None:
        """Forget the checkpoint; deleting an unknown one does nothing."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """The stored turn ids that start with ``prefix``, sorted."""

    def save_and_delete(
        self,
        turn_id: str,
        checkpoint: Mapping[str, Any],
        delete: Sequence[str] = (),
        *,
        fence: int | None = None,
    ) -> None:
        """Save ``checkpoint`` under ``turn_id``, then delete the checkpoints ``delete`` (the
        turn's result records it now holds); one transaction where the store can.

        Raises what ``save`` raises, and then nothing was written. The default saves,
        then deletes each with the same ``fence`` (a failed delete raises).
        """
        self.save(turn_id, checkpoint, fence=fence)
        for key in delete:
            self.delete(key, fence=fence)

    def pending_turns(self) -> builtins.list[str]:
        """The ids of the durable turns' checkpoints (``<id>.turn-<n>``, ``<id>.send``), sorted;
        not their result records. A store with an index of them overrides this."""
        return [key for key in self.list() if _PENDING_TURN.fullmatch(key)]

    def pending_checkpoints(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Each of ``pending_turns()`` with its checkpoint (one deleted meanwhile, or unreadable:
        logged, left out); loaded one by one by default, a database reads them in one query."""
        for turn_id in self.pending_turns():
            try:
                data = self.load(turn_id)
            except StoreCorruptError as exc:
                log.warning("skipping unreadable checkpoint %s: %s", turn_id, exc)
                continue
            if data is not None:
                yield turn_id, data

    def pending_fields(self, fields: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """``pending_checkpoints()`` with only the top-level ``fields`` of each (what a sweep
        reads); a database leaves the rest, e.g. the messages, on the server."""
        wanted = frozenset(fields)
        for turn_id, data in self.pending_checkpoints():
            yield turn_id, {key: value for key, value in data.items() if key in wanted}

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the checkpoints not updated within ``older_than``."""
        raise _not_implemented(self, "prune")


class BaseApprovalStore(_Closeable, ABC):
    """The approval store contract; ``resolve`` is an atomic compare-and-set from ``"pending"``.

    ``create`` takes the turn's ``fence``, checked against the record's
    ``session_id`` when ``fenced_writes`` is true.
    """

    fenced_writes: bool = False

    @abstractmethod
    def create(self, record: Mapping[str, Any], *, fence: int | None = None) -> None:
        """Store a new record; ``ValueError`` if one with its ``id`` exists."""

    @abstractmethod
    def get(self, id: str) -> dict[str, Any] | None:
        """The record, or ``None``."""

    @abstractmethod
    def resolve(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Approve or deny a pending record; exactly one concurrent caller wins.

        ``arguments`` (only when approving) are the call's edited arguments: written in the
        same compare-and-set as the decision, as the record's ``"arguments"``
        (``resolved_approval`` builds the record every built-in store writes)."""

    @abstractmethod
    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[dict[str, Any]]:
        """Records by creation time, filtered by session and status (``None``: any)."""

    @abstractmethod
    def delete(self, id: str) -> None:
        """Forget the record; deleting an unknown one does nothing."""

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the records resolved more than ``older_than`` ago; pending ones stay."""
        raise _not_implemented(self, "prune")


@attrs.define
class AgentStore:
    """The three parts an agent keeps: transcripts, checkpoints, approvals (each optional)."""

    sessions: SessionStore | None = None
    checkpoints: CheckpointStore | None = None
    approvals: ApprovalStore | None = None
