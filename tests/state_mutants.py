"""The faults of a session's state for the mutation test (``test_kit_mutants.py``).

Each fault is written once for every store: a request rewritten before the right method
runs (the state dropped from a commit or a fork), a write made outside the method's own
(the state saved before a commit that may be refused), or a store's records put back
after it (a prune that leaves the state of the sessions it removed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from lousho_sessions.stores._file_records import FileCheckpointStore
from lousho_sessions.stores.base import CommitTurn, ForkRequest, SaveState

__all__ = ["STATE_FAULTS"]

Fault = Callable[[Callable[..., Any]], Callable[..., Any]]


def _commit_without_state(right: Callable[..., Any]) -> Callable[..., Any]:
    def commit_turn(self: Any, request: CommitTurn) -> Any:
        return right(self, attrs.evolve(request, state=None))

    return commit_turn


def _state_saved_apart(right: Callable[..., Any]) -> Callable[..., Any]:
    """The state saved before the commit, in a write of its own: a refused commit keeps it."""

    def commit_turn(self: Any, request: CommitTurn) -> Any:
        if request.state is not None:
            self.save_state(
                SaveState(request.id, request.state, None, request.fence, request.checkpoints)
            )
        return right(self, attrs.evolve(request, state=None))

    return commit_turn


def _fork_without_state(right: Callable[..., Any]) -> Callable[..., Any]:
    def fork(self: Any, request: ForkRequest) -> Any:
        return right(self, attrs.evolve(request, state=False))

    return fork


def _fork_keeps_old_state(right: Callable[..., Any]) -> Callable[..., Any]:
    """A new id holding state of its own keeps it: the source's is copied only where none was."""

    def fork(self: Any, request: ForkRequest) -> Any:
        if request.state and self.load_state(request.new_id, request.checkpoints)[1]:
            return right(self, attrs.evolve(request, state=False))
        return right(self, request)

    return fork


def _state_home(self: Any) -> Any:
    """The checkpoint store in which the sessions part ``self`` keeps (and prunes) its
    sessions' state, as each store does."""
    kind = type(self).__mro__[1].__name__
    if kind == "MemorySessionStore":
        return self._checkpoints
    if kind == "FileSessionStore":
        return FileCheckpointStore(self.dir)
    return self.store.checkpoints  # SQLite, PostgreSQL, Redis: the same database


def _prune_keeps_state(right: Callable[..., Any]) -> Callable[..., Any]:
    """The sessions removed, their state records put back as they were."""

    def prune(self: Any, older_than: Any) -> Any:
        home = _state_home(self)
        states = {id: self.load_state(id, home) for id in self.list_ids()}
        done = right(self, older_than)
        for id, (state, version) in states.items():
            if version and self.load(id) is None:
                self.save_state(SaveState(id, state, None, None, home))
        return done

    return prune


#: (what is wrong, method, fault, a word of the kit tests likeliest to catch it)
STATE_FAULTS: list[tuple[str, str, Fault, str]] = [
    ("state dropped", "commit_turn", _commit_without_state, "state"),
    ("state saved apart", "commit_turn", _state_saved_apart, "state"),
    ("state not copied", "fork", _fork_without_state, "state"),
    ("old state kept", "fork", _fork_keeps_old_state, "state"),
    ("state kept", "prune", _prune_keeps_state, "state"),
]
