"""The faults of ``rewind`` and ``fork`` for the mutation test (``test_kit_mutants.py``).

Each fault is written once for every store: a request rewritten before the right method
runs, or (for the revision a rewind must change) the store's stored revision put back
after it, which each store keeps in its own way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from lousho_sessions.stores._history_requests import HistoryVerbs
from lousho_sessions.stores.base import ForkRequest, RewindRequest, Rewound

__all__ = ["HISTORY_FAULTS"]

Fault = Callable[[Callable[..., Any]], Callable[..., Any]]


def _request(change: Callable[[Any, Any], Any]) -> Fault:
    """A fault calling the right method with its request changed by ``change(self, request)``."""

    def fault(right: Callable[..., Any]) -> Callable[..., Any]:
        def faulty(self: Any, request: Any) -> Any:
            return right(self, change(self, request))

        return faulty

    return fault


def _stored(self: Any, id: str) -> int:
    return len(self.load(id) or [])


def _no_fence(self: Any, request: RewindRequest) -> RewindRequest:
    return attrs.evolve(request, fence=None)


def _no_length(self: Any, request: RewindRequest) -> RewindRequest:
    return attrs.evolve(request, expected_length=None)


def _one_more_gone(self: Any, request: RewindRequest) -> RewindRequest:
    return attrs.evolve(request, keep=max(request.keep - 1, 0))


def _one_fewer_gone(self: Any, request: RewindRequest) -> RewindRequest:
    return attrs.evolve(request, keep=min(request.keep + 1, _stored(self, request.id)))


def _one_more_copied(self: Any, request: ForkRequest) -> ForkRequest:
    length = _stored(self, request.source)
    keep = length if request.keep is None else request.keep
    return attrs.evolve(request, keep=min(keep + 1, length))


def _overwrites(right: Callable[..., Any]) -> Callable[..., Any]:
    def fork(self: Any, request: ForkRequest) -> Any:
        if self.load(request.source) is not None:
            self.delete(request.new_id)  # whatever was stored there is gone
        return right(self, request)

    return fork


def _forgets_parent(right: Callable[..., Any]) -> Callable[..., Any]:
    """The contract's default fork: the right messages, but no parent or fork point kept."""

    def fork(self: Any, request: ForkRequest) -> Any:
        return HistoryVerbs.fork(self, request)

    return fork


def _put_back(self: Any, id: str, revision: object) -> None:
    """Write ``revision`` as the stored revision of ``id``, as the store keeps it (the file
    store's revision is its file's, which cannot be put back: there only the answer lies)."""
    kind = type(self).__mro__[1].__name__
    if kind == "MemorySessionStore":
        self._revisions[id] = revision
    elif kind == "SqliteSessionStore":
        with self.store.transaction() as conn:
            conn.execute("UPDATE sessions SET revision = ? WHERE id = ?", (revision, id))
    elif kind == "PostgresSessionStore":
        with self.store.transaction() as conn:
            self.store.run(
                conn,
                "UPDATE {s}.sessions SET revision = %(rev)s WHERE id = %(sid)s",
                {"rev": revision, "sid": id},
            )
    elif kind == "RedisSessionStore":
        with self.store.call("kit mutant") as client:
            client.hset(self.store.key(id, "meta"), "revision", str(revision))


def _keeps_revision(right: Callable[..., Any]) -> Callable[..., Any]:
    def rewind(self: Any, request: RewindRequest) -> Rewound:
        before = self.revision(request.id)
        done: Rewound = right(self, request)
        _put_back(self, request.id, before)
        return Rewound(done.removed, before)

    return rewind


#: (what is wrong, method, fault, a word of the kit tests likeliest to catch it)
HISTORY_FAULTS: list[tuple[str, str, Fault, str]] = [
    ("rewind keeps the revision", "rewind", _keeps_revision, "load_since"),
    ("fence ignored", "rewind", _request(_no_fence), "fence"),
    ("expected length ignored", "rewind", _request(_no_length), "refuses"),
    ("one message too many removed", "rewind", _request(_one_more_gone), "prefix"),
    ("one message too few removed", "rewind", _request(_one_fewer_gone), "prefix"),
    ("existing id overwritten", "fork", _overwrites, "refuses"),
    ("one message too many copied", "fork", _request(_one_more_copied), "prefix"),
    ("parent forgotten", "fork", _forgets_parent, "parent"),
]
