"""``Session.state``, ``Session.update_state`` and ``Agent.state_scope``: state beside a transcript.

A session keeps one JSON object of state with its transcript (the store's
``load_state``/``save_state``; ``stores._state_requests``). Tools read and change it in
a turn through ``ToolContext.state``; the turn commits it with its messages. Outside
turns, ``update_state(fn)`` runs as a job on the session's lane, like a turn: under the
session's lease, a compare-and-set on the version read, fenced. A ``StateScope``
(``Agent.state_scope(id)``) is state shared by many sessions (a user's), kept under the
reserved id ``_scope-<id>`` and changed under that id's lease, with the same guarantee.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from .stores._state_requests import SaveState, check_state
from .stores.adapters import adapt_checkpoints, adapt_sessions
from .stores.base import BaseCheckpointStore, BaseSessionStore, validate_session_id

if TYPE_CHECKING:
    from .engine._session_core import SessionCore
    from .runtime._worker import Job

__all__ = ["StateMixin", "StateScope", "scope_key"]

#: What ``fn`` of ``update_state`` is: it changes its argument in place (returning
#: ``None``) or returns the new state.
StateChange = Callable[[dict[str, Any]], "Mapping[str, Any] | None"]


def scope_key(id: str) -> str:
    """The reserved id a scope's state and lease are kept under (``_scope-<id>``)."""
    if not isinstance(id, str) or not id:
        raise TypeError(f"a state scope id must be a non-empty string, got {id!r}")
    return validate_session_id(f"_scope-{id}")


def apply_change(
    owner: str,
    store: BaseSessionStore,
    id: str,
    checkpoints: BaseCheckpointStore | None,
    fence: int | None,
    fn: StateChange,
) -> Mapping[str, Any]:
    """Read the state of ``id``, apply ``fn`` to a copy, check and store the result
    (compare-and-set on the version read, fenced); the new state, read-only."""
    state, version = store.load_state(id, checkpoints)
    draft = copy.deepcopy(state)
    returned = fn(draft)
    new = check_state(owner, draft if returned is None else returned)
    store.save_state(SaveState(id, new, version, fence, checkpoints))
    return MappingProxyType(new)


class StateMixin:
    """``Session.state`` and ``Session.update_state`` (the session is ``self``)."""

    _core: SessionCore  # the session's core (``Session.__init__``)

    def _state_store(self) -> BaseCheckpointStore | None:
        return self._core.turns.state_store

    @property
    def state(self) -> Mapping[str, Any]:
        """The session's state: a read-only view of a copy of the JSON object stored with it
        (``{}`` when none), read after the turns queued before it."""

        def work(job: Job) -> Mapping[str, Any]:
            t = self._core.transcript
            return MappingProxyType(t.load_state(self._state_store()))

        result: Mapping[str, Any] = self._core.run(work, "state").result()
        return result

    def update_state(self, fn: StateChange) -> Mapping[str, Any]:
        """Change the session's state: ``fn`` gets a mutable copy and changes it in place or
        returns a new mapping; the result (JSON, at most 256 KiB, else ``StateTooLargeError``
        naming the session and the size) is stored under the session's lease, after the
        turns queued before it; no update of another process is lost. Returns the new state."""
        future: Future[Mapping[str, Any]] = self._update_state_future(fn)
        return future.result()

    def _update_state_future(self, fn: StateChange) -> Future[Mapping[str, Any]]:
        core = self._core
        core.lane.refuse_reentry("update_state")

        def work(job: Job) -> Mapping[str, Any]:
            t = core.transcript
            with t.turn_lock():
                owner = f"session {core.id!r}"
                return apply_change(owner, t.store, core.id, self._state_store(), t.fence, fn)

        future: Future[Mapping[str, Any]] = core.run(work, "update_state")
        return future


class StateScope:
    """State shared by many sessions (``Agent.state_scope(id)``): ``state`` and
    ``update_state(fn)`` as on a session, changed under the scope's own lease with a
    compare-and-set, so concurrent updates from threads or processes are never lost."""

    def __init__(self, id: str, store: object, checkpoints: object | None = None) -> None:
        self.id = id
        self._key = scope_key(id)
        self._store = adapt_sessions(store)
        self._checkpoints = None if checkpoints is None else adapt_checkpoints(checkpoints)

    @property
    def state(self) -> Mapping[str, Any]:
        """A read-only view of a copy of the scope's state (``{}`` when none)."""
        return MappingProxyType(self._store.load_state(self._key, self._checkpoints)[0])

    def update_state(self, fn: StateChange) -> Mapping[str, Any]:
        """Apply ``fn`` (as ``Session.update_state``) under the scope's lease; the new state."""
        with self._store.turn_lock(self._key) as lease:
            owner = f"state scope {self.id!r}"
            return apply_change(owner, self._store, self._key, self._checkpoints, lease.fence, fn)

    def __repr__(self) -> str:
        return f"StateScope({self.id!r})"
