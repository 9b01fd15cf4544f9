"""A turn's two calls to the session store: ``take_turn`` and ``commit_turn``, each one request.

A turn of a session is two calls, whatever the store:

* ``take_turn(TakeTurn(...)) -> TakenTurn``: hold the session for the turn (a ``Lease``)
  and answer what the turn starts from: the transcript (whole, or only the messages
  added since what the caller holds), its revision, whether a turn is pending, and
  whether the store saved the turn's first checkpoint with the lease.
* ``commit_turn(CommitTurn(...)) -> revision``: append the finished turn (fenced,
  compare-and-set on the length), delete its checkpoints, and free the lease when the
  caller says it is the last write under it.

``BaseSessionStore`` has one default of each, built from its smaller methods
(``turn_lock``, ``revision``, ``load_since``/``load``; ``append``, the checkpoint
store's ``delete``); a store overrides a verb to do the same in fewer round trips. A
new optimisation is a field of a request or an answer, not a method. Delegation runs
one way: a verb may call the smaller methods, never the reverse.
"""

from __future__ import annotations

import inspect
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from .._kept_json import EncodedObject
from ..errors import StoreError
from ..messages import Message
from ..serde import encode_json_object
from ._checks import validate_turn_id
from ._sealing import Sealing
from ._state_requests import SaveState
from ._waiting import waiting_for_lease
from .lease import Lease, fence_session_id

__all__ = [
    "CommitTurn",
    "ReadAhead",
    "StartCheckpoint",
    "TakeTurn",
    "TakenTurn",
    "TurnVerbs",
    "check_retired",
    "commits_state",
    "start_body",
]

#: Methods of earlier releases a turn no longer calls, and what does their work now.
RETIRED = {
    "append_and_delete": "commit_turn(CommitTurn(...))",
    "turn_lock_saving": "take_turn(TakeTurn(..., checkpoint=...))",
    "turn_lock_waiting": "take_turn(TakeTurn(..., held_length=...)) with ReadAhead",
}

log = logging.getLogger("lousho_sessions.stores")


@attrs.frozen
class StartCheckpoint:
    """A new turn's first checkpoint, offered with ``TakeTurn(checkpoint=)``.

    ``turn_id`` is its key and ``build()`` the checkpoint without its ``"fence"`` (a
    JSON object with at least one field), called only by a store that may save it.
    It was built on the transcript the request holds (``held_length``/``held_revision``).
    """

    turn_id: str
    build: Callable[[], Mapping[str, Any]]


@attrs.frozen
class TakeTurn:
    """What ``take_turn`` is asked: hold session ``id`` for a turn.

    ``timeout``: seconds to wait for a lease held elsewhere (``None``: no bound;
    ``SessionBusyError`` after it). ``signal``: the call's ``AbortSignal``, which stops
    that wait. ``checkpoints``: the checkpoint store the turn writes to (the store
    answers whether it holds a checkpoint of the session, when it can tell in the same
    step). ``held_length``/``held_revision``: the transcript the caller holds (its first
    ``held_length`` messages as of ``held_revision``; ``held_length=None``: nothing
    held), so only what was added since is read, ahead of the lease where the store
    can. ``checkpoint``: the new turn's first checkpoint, saved with the lease where the
    store can, only if the session is still at ``held_revision`` and no checkpoint of
    it is stored in ``checkpoints``.
    """

    id: str
    timeout: float | None = None
    signal: Any = None
    #: a ``BaseCheckpointStore`` (typed loosely: ``base`` imports this module)
    checkpoints: Any = None
    held_length: int | None = None
    held_revision: object = None
    checkpoint: StartCheckpoint | None = None


@attrs.frozen
class TakenTurn:
    """What ``take_turn`` answers: the ``lease`` and what the turn starts from.

    ``messages`` is the transcript at ``revision`` when ``since`` is ``None``, else the
    messages after the first ``since`` (the request's ``held_length``). ``no_checkpoints``:
    the store saw no checkpoint of the session in the request's ``checkpoints`` while it
    held the lease (so no turn is pending); ``False`` when it did not look.
    ``saved_checkpoint``: the request's ``checkpoint`` was saved with the lease, with
    its fence (the caller does not save it again).
    """

    lease: Lease
    revision: object
    messages: list[Message]
    since: int | None = None
    no_checkpoints: bool = False
    saved_checkpoint: bool = False


@attrs.frozen
class CommitTurn:
    """What ``commit_turn`` is asked: append a finished turn's ``messages`` to ``id``.

    Refused with ``StoreConflictError`` unless ``expected_length`` messages are stored,
    with ``LeaseLostError`` if ``fence`` is older than the session's newest; then
    nothing was written. Once appended, the checkpoints ``delete`` of ``checkpoints``
    are deleted (a failed delete is logged: the turn is committed). ``release``: the
    lease, when this is the last write under it; a store may free it in the same write
    and then calls ``release.released_by_store()``.
    """

    id: str
    messages: Sequence[Message]
    expected_length: int
    #: a ``BaseCheckpointStore`` (typed loosely: ``base`` imports this module)
    checkpoints: Any = None
    delete: Sequence[str] = ()
    fence: int | None = None
    release: Lease | None = None
    #: the turn's state (``ToolContext.state``), to store with its messages; ``None``: unchanged
    state: Mapping[str, Any] | None = None


def start_body(request: TakeTurn, sealing: Sealing | None = None) -> str | None:
    """The request's checkpoint as JSON text without its ``"fence"`` (the store puts the new
    lease's first), sealed with ``sealing`` when the store encrypts; ``None`` when it is not
    one to save with the lease: none offered, nothing held, its turn id is invalid or names
    another session, it does not encode (the turn's own ``save`` raises that, as before),
    or it is empty."""
    start = request.checkpoint
    if start is None or request.held_length is None:
        return None
    try:
        if fence_session_id(validate_turn_id(start.turn_id)) != request.id:
            return None
        data = start.build()
        if "fence" in data or type(data) is not EncodedObject:
            data = dict(data)  # (an ``EncodedObject`` without it keeps its text)
            data.pop("fence", None)  # the store writes the lease's
        what = f"checkpoint {start.turn_id!r}"
        if not data:
            return None  # an empty checkpoint is not one to save with the lease
        if sealing is None:
            text = encode_json_object(data, what=what)
        else:
            text = sealing.record_text("checkpoint", request.id, data, what=what)
    except (TypeError, ValueError):
        return None
    return None if text == "{}" else text


class ReadAhead:
    """The read of what a turn starts from (``TakenTurn.messages``), from the smaller methods.

    Called (``__call__``) while the turn waits in line for its lease, it takes in what
    the turns ahead appended (``load_since``), without the lease: the revision is read
    first, so the one kept is never newer than the messages held. ``read(revision)``
    then, under the lease, reads only what was added since (or the whole transcript).
    """

    def __init__(self, store: Any, request: TakeTurn) -> None:  # a BaseSessionStore
        self.store = store
        self.request = request
        self.revision = request.held_revision
        self.added: list[Message] = []

    def __call__(self) -> None:
        request = self.request
        if request.held_length is None:
            return
        try:
            revision = self.store.revision(request.id)
            if revision != self.revision:
                length = request.held_length + len(self.added)
                added = self.store.load_since(request.id, length, self.revision)
                if added is not None:
                    self.added.extend(added)
                    self.revision = revision
        except Exception:  # the read under the lease meets it
            log.debug("session %r: reading ahead failed", request.id, exc_info=True)

    def read(self, revision: object) -> tuple[list[Message], int | None]:
        """``(messages, since)`` of the transcript at ``revision``, as ``TakenTurn`` holds them."""
        request, store = self.request, self.store
        if request.held_length is not None:
            if revision == self.revision:
                return self.added, request.held_length
            length = request.held_length + len(self.added)
            more = store.load_since(request.id, length, self.revision)
            if more is not None:
                return [*self.added, *more], request.held_length
        return store.load(request.id) or [], None

    def taken(
        self,
        lease: Lease,
        revision: object,
        *,
        no_checkpoints: bool = False,
        saved_checkpoint: bool = False,
    ) -> TakenTurn:
        """The ``TakenTurn`` of ``lease``, the transcript read at ``revision``; the lease is
        released if that read fails."""
        try:
            messages, since = self.read(revision)
        except BaseException:
            lease.release()
            raise
        return TakenTurn(lease, revision, messages, since, no_checkpoints, saved_checkpoint)


def check_retired(cls: type) -> None:
    """Warn when the session store class ``cls`` defines a method a turn no longer calls
    (``RETIRED``: still correct, but its work is done by the defaults now); refuse a
    ``commit_turn`` of the earlier form (``id, messages, expected_length, ...``), which a
    turn would call with one ``CommitTurn`` and fail."""
    for name, now in RETIRED.items():
        if name in vars(cls):
            warnings.warn(
                f"{cls.__name__}.{name}() is no longer called by a turn; override {now} "
                "instead (see the store contract in docs/stores.md)",
                DeprecationWarning,
                stacklevel=3,
            )
    own = vars(cls).get("commit_turn")
    if own is None:
        return
    try:
        parameters = inspect.signature(own).parameters
    except (TypeError, ValueError):
        return
    if "expected_length" in parameters or "messages" in parameters:
        raise StoreError(
            f"{cls.__name__}.commit_turn{inspect.signature(own)}: the store contract's "
            "commit_turn takes one request, commit_turn(self, request: CommitTurn) -> revision "
            "(its fields: id, messages, expected_length, checkpoints, delete, fence, release)"
        )


class TurnVerbs:
    """The ``take_turn`` and ``commit_turn`` of ``BaseSessionStore``: their defaults, built from
    its smaller methods (declared here for the type checker; ``BaseSessionStore``'s run)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_retired(cls)  # methods of earlier releases: warned about, or refused

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        raise NotImplementedError  # BaseSessionStore's

    def revision(self, id: str) -> object | None:
        raise NotImplementedError  # BaseSessionStore's

    def append(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        fence: int | None = None,
    ) -> None:
        raise NotImplementedError  # BaseSessionStore's

    def take_turn(self, request: TakeTurn) -> TakenTurn:
        """Hold session ``request.id`` for a turn and read what it starts from (``TakenTurn``).

        The default: ``turn_lock`` (waiting as ``request.timeout`` and ``request.signal``
        allow), then ``revision``, then only the messages added since what the request
        holds (``load_since``) or the whole transcript (``load``). It saves no checkpoint
        (``saved_checkpoint`` false: the caller saves it) and does not look for one
        (``no_checkpoints`` false). The lease is released if the read fails.
        """
        with waiting_for_lease(request.signal):
            lease = self.turn_lock(request.id, timeout=request.timeout)
        try:
            revision = self.revision(request.id)
        except BaseException:
            lease.release()
            raise
        return ReadAhead(self, request).taken(lease, revision)

    def commit_turn(self, request: CommitTurn) -> object | None:
        """Commit a finished turn (``CommitTurn``): ``append`` its messages, then delete its
        checkpoints; returns the session's revision after the write.

        Raises what ``append`` raises (``StoreConflictError``, ``LeaseLostError``), and
        then nothing was written. The default appends, then deletes each checkpoint with
        the same fence; a delete that fails after the append is logged, not raised: the
        turn is committed, and its checkpoint's turn id is behind the transcript now, so
        no turn loads it again (``prune()``, ``clear()`` and ``discard_pending()`` remove
        it). With a ``state``, it stores it (``save_state``) after the append and before the
        deletes: a crash between them leaves the turn's checkpoint, so a resumed turn writes
        the state again; a store that keeps both in one transaction overrides this. It
        ignores ``release``: the caller releases the lease.
        """
        id, fence = request.id, request.fence
        self.append(id, request.messages, request.expected_length, fence=fence)
        if request.state is not None:  # after the append, before the checkpoints go
            save = SaveState(id, request.state, None, fence, request.checkpoints)
            self.save_state(save)  # type: ignore[attr-defined]  # StateVerbs'
        if request.checkpoints is not None:
            for turn_id in request.delete:
                try:
                    request.checkpoints.delete(turn_id, fence=fence)
                except Exception:
                    log.warning("could not delete checkpoint %s", turn_id, exc_info=True)
        return self.revision(id)


def commits_state(store: object) -> bool:
    """Whether ``store.commit_turn`` writes ``CommitTurn.state``: the default does, and a store
    overriding it that declares ``commits_state = True``."""
    method = getattr(type(store), "commit_turn", None)
    return method is TurnVerbs.commit_turn or bool(getattr(store, "commits_state", False))
