"""A session's view of its stored transcript: sync, commit, and the store's turn lock.

Used only on the session's worker thread, through the store contract
(``BaseSessionStore``; a plain user store is adapted once). ``sync()`` reads the
transcript again only when the store's ``revision`` says it changed, and then
only the messages added since when the store can tell (``load_since``);
``commit()`` appends a finished turn and deletes its checkpoints
(``commit_turn``/``append_and_delete``, compare-and-set on the length) with the fence of the
lease ``turn_lock()`` holds.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from types import TracebackType

from .abort import AbortSignal
from .compaction import spent_by
from .messages import Message, Usage
from .stores._start import StartCheckpoint, TurnStart
from .stores._waiting import waiting_for_lease
from .stores.adapters import adapt_sessions
from .stores.base import BaseCheckpointStore, SessionStore
from .stores.lease import Lease

__all__ = ["Transcript"]

log = logging.getLogger("lousho_sessions.session")


class Transcript:
    """The messages of session ``id`` as last read from or written to ``store``."""

    def __init__(self, store: SessionStore, id: str) -> None:
        self.store = adapt_sessions(store)
        self.id = id
        #: whether the store can save a turn's first checkpoint with its lease (else a
        #: session does not build the checkpoint before the lease just to offer it)
        self.saves_start = type(self.store).turn_lock_saving is not TurnStart.turn_lock_saving
        #: whether the store calls back while a turn waits in line (``turn_lock_waiting``)
        self.reads_ahead = type(self.store).turn_lock_waiting is not TurnStart.turn_lock_waiting
        self.messages: list[Message] = []
        #: what the transcript spent: usage, model calls, tool calls (for session limits)
        self.spent: tuple[Usage, int, int] = (Usage(), 0, 0)
        #: the fence of the lease ``turn_lock()`` holds, for every write made under it
        self.fence: int | None = None
        self._revision: object = None
        self._loaded = False
        #: the revision the lease was taken with, for the first ``sync()`` under it
        self._start_revision: tuple[object | None] | None = None
        #: the checkpoint store the lease saw empty for this session when taken (one use)
        self._start_no_checkpoints: object | None = None
        #: the lease ``turn_lock()`` holds, while it does
        self._lease: Lease | None = None
        #: set under ``turn_lock()`` when the next ``commit()`` is the last write under it:
        #: the store may then free the lease in that same write (``commit_turn``)
        self.last_write = False
        #: whether the lease was taken with the turn's first checkpoint (one use)
        self._start_saved = False

    @property
    def known(self) -> tuple[object] | None:
        """``(revision,)`` of the messages held, or ``None`` before they were first read."""
        return (self._revision,) if self._loaded else None

    def sync(self) -> None:
        """Bring the transcript up to date if the store changed since this session last looked."""
        known, self._start_revision = self._start_revision, None
        revision = known[0] if known is not None else self.store.revision(self.id)
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

    def read_ahead(self) -> None:
        """While a turn waits in line for the lease: take in what the turns ahead of it
        appended, so that the ``sync()`` under the lease reads only the last one's work.

        A read of committed data, made without the lease: the revision is read first, so
        the one kept is never newer than the messages held, and the ``sync()`` after
        compares with it as usual. Any error is left for that ``sync()`` to meet."""
        try:
            revision = self.store.revision(self.id)
            if revision != self._revision:
                self._take_since(revision)
        except Exception:
            log.debug("session %r: reading ahead failed", self.id, exc_info=True)

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
    ) -> None:
        """Append a finished turn's messages and delete its checkpoints ``delete``, under the
        lease's fence; ``LeaseLostError`` (nothing written) if the lease was lost.

        With ``last_write`` set, the lease is handed to the store, which may release it in
        the same write (``commit_turn(..., release=)``)."""
        release, self.last_write = (self._lease if self.last_write else None), False
        self._revision = self.store.commit_turn(
            self.id,
            new,
            len(self.messages),
            checkpoints=checkpoints,
            delete=delete,
            fence=self.fence,
            release=release,
        )
        self._add(new)

    def start_saved(self) -> bool:
        """Whether the lease was taken together with the checkpoint offered to ``turn_lock``
        (``turn_lock_saving``); answers once per lease."""
        saved, self._start_saved = self._start_saved, False
        return saved

    def no_checkpoints_in(self, checkpoints: object) -> bool:
        """Whether the lease, when taken, saw no checkpoint of this session in
        ``checkpoints`` (so no turn is pending); answers once per lease."""
        seen, self._start_no_checkpoints = self._start_no_checkpoints, None
        return seen is not None and seen is checkpoints

    def _add(self, new: Sequence[Message]) -> None:
        self.messages.extend(new)
        usage, steps, calls = spent_by(new)
        old_usage, old_steps, old_calls = self.spent
        self.spent = (old_usage + usage, old_steps + steps, old_calls + calls)

    def turn_lock(
        self,
        held: Lease | None = None,
        start: StartCheckpoint | None = None,
        signal: AbortSignal | None = None,
    ) -> _TurnLock:
        """Hold the session in the store for a turn; writes made meanwhile carry its fence.

        ``held``: a lease on the session taken already (a sweep's claim), used and released
        instead of taking one. ``start``: the new turn's first checkpoint, offered to the
        store to save with the lease (``start_saved()`` tells). ``signal``: the call's abort
        signal, which stops a wait for a lease held elsewhere (``stores._waiting``). (A
        class, not a generator: entered once a turn.)"""
        return _TurnLock(self, held, start, signal)


class _TurnLock:
    """``Transcript.turn_lock()``: takes the lease on entry, releases it on exit."""

    __slots__ = ("held", "lease", "signal", "start", "transcript")

    def __init__(
        self,
        transcript: Transcript,
        held: Lease | None,
        start: StartCheckpoint | None,
        signal: AbortSignal | None,
    ) -> None:
        self.transcript = transcript
        self.held = held
        self.start = start
        self.signal = signal

    def __enter__(self) -> Lease:
        t = self.transcript
        if self.held is not None:
            lease = self.held
        else:
            with waiting_for_lease(self.signal):
                lease = self._take(t)
        self.lease = lease
        t.fence = lease.fence
        t._lease = lease
        t.last_write = False
        # read with the lease: a writer with an older fence can no longer land
        t._start_revision = lease.start_revision
        t._start_no_checkpoints = lease.start_no_checkpoints
        t._start_saved = self.held is None and self.start is not None and lease.start_saved
        return lease

    def _take(self, t: Transcript) -> Lease:
        if self.start is not None:
            return t.store.turn_lock_saving(t.id, self.start)
        if t.reads_ahead and t._loaded:  # a transcript held, to read ahead from
            return t.store.turn_lock_waiting(t.id, t.read_ahead)
        return t.store.turn_lock(t.id)

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        t = self.transcript
        t.fence = None
        t._start_revision = None
        t._start_no_checkpoints = None
        t._start_saved = False
        t._lease = None
        t.last_write = False
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
