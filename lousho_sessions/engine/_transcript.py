"""A session's view of its stored transcript: sync, commit, and the store's turn lock.

Used only on the session's worker thread, through the store contract
(``BaseSessionStore``; a plain user store is adapted once). ``take()`` holds the
session for a turn and brings the transcript up to date in one call to the store
(``take_turn``: only the messages added since, when the store can tell);
``sync()`` does the same under a lease held otherwise (``turn_lock()``); ``commit()``
appends a finished turn and deletes its checkpoints (``commit_turn``, compare-and-set
on the length) with the fence of the lease held.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from ..abort import AbortSignal
from ..compaction import spent_by
from ..messages import NO_USAGE, Message, Usage
from ..stores._state_requests import SaveState, check_state
from ..stores._turn_requests import CommitTurn, StartCheckpoint, TakenTurn, TakeTurn, commits_state
from ..stores.adapters import adapt_sessions
from ..stores.base import BaseCheckpointStore, SessionStore
from ..stores.lease import Lease

__all__ = ["Transcript"]

log = logging.getLogger("lousho_sessions.session")


class Transcript:
    """The messages of session ``id`` as last read from or written to ``store``."""

    def __init__(self, store: SessionStore, id: str) -> None:
        self.store = adapt_sessions(store)
        self.id = id
        #: whether the store may save a turn's first checkpoint with its lease (else a
        #: session does not build the checkpoint before the lease just to offer it)
        self.saves_start = self.store.saves_start_checkpoint
        self.messages: list[Message] = []
        #: what the transcript spent: usage, model calls, tool calls (for session limits)
        self.spent: tuple[Usage, int, int] = (NO_USAGE, 0, 0)
        self._revision: object = None
        self._loaded = False
        #: the lease held (``take()`` or ``turn_lock()``), while it is
        self._lease: Lease | None = None

    @property
    def known(self) -> tuple[object] | None:
        """``(revision,)`` of the messages held, or ``None`` before they were first read."""
        return (self._revision,) if self._loaded else None

    def sync(self) -> None:
        """Bring the transcript up to date if the store changed since this session last looked."""
        revision = self.store.revision(self.id)
        if self._loaded and (revision == self._revision or self._take_since(revision)):
            return
        self.set(self.store.load(self.id) or [], revision)

    def _take_since(self, revision: object) -> bool:
        """Add the messages appended since the revision held, now at ``revision``; False
        when the store cannot tell them (``load_since`` says "load it all")."""
        added = self.store.load_since(self.id, len(self.messages), self._revision)
        if added is None:
            return False
        self._add(added)
        self._revision = revision
        return True

    def reload(self) -> None:
        """Read the whole transcript now, whatever the revision says."""
        revision = self.store.revision(self.id)
        self.set(self.store.load(self.id) or [], revision)

    def set(self, messages: list[Message], revision: object) -> None:
        """Take ``messages`` as the stored transcript at ``revision`` (read before they were)."""
        self.messages = messages
        self.spent = spent_by(messages)
        self._loaded = True
        self._revision = revision

    def save(self, messages: list[Message]) -> None:
        """Replace the stored transcript with ``messages``."""
        self.store.save(self.id, messages)
        self.set(messages, self.store.revision(self.id))

    def commit(
        self,
        new: list[Message],
        checkpoints: BaseCheckpointStore | None = None,
        delete: Sequence[str] = (),
        *,
        last: bool = False,
        state: dict[str, Any] | None = None,
        state_store: BaseCheckpointStore | None = None,
    ) -> None:
        """Append a finished turn's messages and delete its checkpoints ``delete``, under the
        lease's fence; ``LeaseLostError`` (nothing written) if the lease was lost.

        ``last``: the last write under the lease, which is handed to the store: it may
        release it in the same write (``CommitTurn.release``). ``state``: the turn's changed
        state (``ToolContext.state``), kept in ``state_store`` (``None``: the session store
        object): in the ``CommitTurn`` to a store whose ``commit_turn`` is the default or says
        it writes it (``commits_state``) and when ``state_store`` is ``checkpoints``; else
        saved first, fenced (a crash between leaves the turn's checkpoint: its resume writes
        the state again)."""
        store, fence = self.store, self.fence
        if state is not None:
            state = check_state(f"session {self.id!r}", state)
            if not commits_state(store) or state_store is not checkpoints:
                store.save_state(SaveState(self.id, state, None, fence, state_store))
                state = None
        request = CommitTurn(
            self.id,
            new,
            len(self.messages),
            checkpoints,
            delete,
            fence,
            self._lease if last else None,
            state,
        )
        self._revision = self.store.commit_turn(request)
        self._add(new)

    def load_state(self, checkpoints: BaseCheckpointStore | None) -> dict[str, Any]:
        """The session's stored state (``{}`` when none), read under the lease held."""
        return self.store.load_state(self.id, checkpoints)[0]

    def _add(self, new: Sequence[Message]) -> None:
        if not new:
            return
        self.messages.extend(new)
        usage, steps, calls = spent_by(new)
        old_usage, old_steps, old_calls = self.spent
        self.spent = (old_usage + usage, old_steps + steps, old_calls + calls)

    def take(
        self,
        checkpoints: BaseCheckpointStore | None = None,
        start: StartCheckpoint | None = None,
        signal: AbortSignal | None = None,
    ) -> _Hold:
        """Hold the session for a turn (``take_turn``) and bring the transcript up to date;
        entered, it gives the ``TakenTurn``. ``checkpoints``: where the turn's checkpoints
        go (the store says whether it holds one of this session). ``start``: the new turn's
        first checkpoint, built on the transcript held, for the store to save with the
        lease. ``signal``: the call's abort signal, which stops a wait for the lease."""
        loaded = self._loaded
        request = TakeTurn(  # by position (keywords cost a dict): id, timeout, signal, ...
            self.id,
            None,
            signal,
            checkpoints,
            len(self.messages) if loaded else None,  # held_length
            self._revision,  # held_revision
            start if loaded else None,  # checkpoint
        )
        return _Hold(self, request, None)

    def turn_lock(self, held: Lease | None = None) -> _Hold:
        """Hold the session in the store (``turn_lock``, or ``held``: a lease taken already, a
        sweep's claim, used and released); writes made meanwhile carry its fence. The
        transcript is not read: ``sync()`` does that."""
        return _Hold(self, None, held)

    @property
    def fence(self) -> int | None:
        """The fence of the lease held, for every write made under it (``None``: none held)."""
        return None if self._lease is None else self._lease.fence


class _Hold:
    """``Transcript.take()``/``turn_lock()``: takes the lease on entry, releases it on exit.
    (A class, not a generator: entered once a turn.)"""

    __slots__ = ("held", "lease", "request", "transcript")

    def __init__(
        self, transcript: Transcript, request: TakeTurn | None, held: Lease | None
    ) -> None:
        self.transcript = transcript
        self.request = request
        self.held = held

    def __enter__(self) -> TakenTurn:
        t = self.transcript
        if self.request is not None:
            taken = t.store.take_turn(self.request)
            if taken.since is None:
                t.set(taken.messages, taken.revision)
            else:
                t._add(taken.messages)
                t._revision = taken.revision
        else:
            lease = self.held if self.held is not None else t.store.turn_lock(t.id)
            taken = TakenTurn(lease, t._revision, [], len(t.messages))
        self.lease = taken.lease
        t._lease = taken.lease
        return taken

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        t = self.transcript
        t._lease = None
        if exc is None:
            self.lease.__exit__(kind, exc, tb)
            return
        try:
            self.lease.__exit__(kind, exc, tb)
        except Exception:  # the turn's own error is the one to raise; the lease runs out
            log.warning(
                "session %r: could not release the lease after a failed turn (%s): it runs "
                "out by itself",
                t.id, exc, exc_info=True,
            )  # fmt: skip
