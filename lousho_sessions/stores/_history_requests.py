"""Changing a session's history in the store: ``rewind`` and ``fork``, each one request.

A part of the session store contract (``BaseSessionStore`` inherits ``HistoryVerbs``),
kept in a module of its own:

* ``rewind(RewindRequest(id, keep, fence=, expected_length=)) -> Rewound``: keep the
  first ``keep`` messages of ``id`` and drop the rest, fenced like an append and
  compare-and-set on the stored length; the revision changes so that no reader takes the
  shorter transcript for the old one plus appends (``load_since`` answers ``None``).
* ``fork(ForkRequest(source, new_id, keep=, state=, checkpoints=)) -> Forked``: create
  ``new_id`` holding the first ``keep`` messages of ``source`` (``None``: all), refused
  with ``SessionExistsError`` when ``new_id`` is stored; the new session's ``info()``
  names its ``parent`` and ``fork_point`` where the store keeps session metadata. With
  ``state``, the new session gets the source's state too (``load_state``/``save_state``,
  kept where ``checkpoints`` says), in the same write where the store can.

The defaults are built from ``load``/``save`` (the rewind with the fence check and the
length compare-and-set under the lock of ``append``'s default, so atomic within one
process only); the stores of ``lousho_sessions`` override both with one write each:
an SQL statement, a Lua script, one file write.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ..errors import SessionExistsError, StoreConflictError
from ..messages import Message
from ._checks import validate_session_id
from ._state_requests import SaveState

__all__ = [
    "ForkRequest",
    "Forked",
    "HistoryVerbs",
    "RewindRequest",
    "Rewound",
    "check_keep",
    "copy_state",
    "fork_with_state",
    "forks_state",
]


def _non_negative(instance: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if (value is None and not isinstance(instance, RewindRequest)) or (
        value is None and attribute.name == "expected_length"
    ):
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{attribute.name} must be an int >= 0, got {value!r}")


@attrs.frozen
class RewindRequest:
    """What ``rewind`` is asked: keep the first ``keep`` messages of session ``id``.

    ``fence``: the lease's, as for an append (``LeaseLostError`` when older than the
    session's newest). ``expected_length``: the stored length the caller holds
    (``StoreConflictError`` when it is not, and nothing is written); ``None``: not checked.
    """

    id: str = attrs.field(converter=validate_session_id)
    keep: int = attrs.field(validator=_non_negative)
    fence: int | None = None
    expected_length: int | None = attrs.field(default=None, validator=_non_negative)


@attrs.frozen
class Rewound:
    """What ``rewind`` answers: how many messages it ``removed`` and the ``revision`` after."""

    removed: int
    revision: object


@attrs.frozen
class ForkRequest:
    """What ``fork`` is asked: a new session ``new_id`` holding the first ``keep`` messages of
    ``source`` (``None``: all of them).

    ``state``: the new session gets the source's state too: ``load_state(new_id)`` then
    answers the source's state, at a version newer than any ``new_id`` had (a source with
    no state stored copies none). ``checkpoints``: where the state is kept, as
    ``SaveState.checkpoints`` (a ``BaseCheckpointStore``, or ``None``: the store object).
    """

    source: str = attrs.field(converter=validate_session_id)
    new_id: str = attrs.field(converter=validate_session_id)
    keep: int | None = attrs.field(default=None, validator=_non_negative)
    state: bool = False
    #: a ``BaseCheckpointStore`` (typed loosely: ``base`` imports this module)
    checkpoints: Any = None

    def __attrs_post_init__(self) -> None:
        if self.source == self.new_id:
            raise SessionExistsError(f"cannot fork session {self.source!r} into itself")


@attrs.frozen
class Forked:
    """What ``fork`` answers: the new session's length (``messages``) and ``revision``."""

    messages: int
    revision: object


def check_keep(id: str, keep: int | None, length: int, where: str = "") -> int:
    """``keep`` (``None``: ``length``) if the session holds that many, else ``StoreConflictError``."""
    if keep is None:
        return length
    if keep > length:
        at = f" ({where})" if where else ""
        raise StoreConflictError(
            f"session {id!r}{at}: cannot keep {keep} messages, it holds {length}"
        )
    return keep


def copy_state(store: Any, request: ForkRequest) -> None:
    """The default's copy of a fork's state (``request.state``), after its messages: the
    source's state saved as the new session's (``save_state``, under no fence: nobody knows
    the new id yet); none stored, nothing written. ``store`` is a ``BaseSessionStore``."""
    if not request.state:
        return
    state, version = store.load_state(request.source, request.checkpoints)
    if version:
        store.save_state(SaveState(request.new_id, state, None, None, request.checkpoints))


def fork_with_state(
    store: Any, source: str, new_id: str, keep: int | None, checkpoints: Any
) -> Forked:
    """``store.fork`` of ``source`` into ``new_id`` (its first ``keep`` messages) with its
    state, kept in ``checkpoints`` (as ``SaveState.checkpoints``): in the fork's write where the
    store copies it (``forks_state``), else just after it (``copy_state``; a crash between
    leaves the fork without state). ``store`` is a ``BaseSessionStore``."""
    request = ForkRequest(source, new_id, keep, state=True, checkpoints=checkpoints)
    if forks_state(store):
        forked: Forked = store.fork(request)
        return forked
    forked = store.fork(ForkRequest(source, new_id, keep))
    copy_state(store, request)
    return forked


def forks_state(store: object) -> bool:
    """Whether ``store.fork`` copies the state when asked (``ForkRequest.state``): the default
    does, and a store overriding it that declares ``forks_state = True``."""
    method = getattr(type(store), "fork", None)
    return method is HistoryVerbs.fork or bool(getattr(store, "forks_state", False))


def exists_error(new_id: str, where: str = "") -> SessionExistsError:
    at = f" ({where})" if where else ""
    return SessionExistsError(
        f"session {new_id!r}{at} already exists: fork into a new id, or delete it first"
    )


def missing_error(source: str, where: str = "") -> StoreConflictError:
    at = f" ({where})" if where else ""
    return StoreConflictError(f"cannot fork session {source!r}{at}: it is not stored")


class HistoryVerbs:
    """The ``rewind`` and ``fork`` of ``BaseSessionStore`` (defaults on ``load``/``save``)."""

    def load(self, id: str) -> list[Message] | None:
        raise NotImplementedError  # BaseSessionStore's

    def save(self, id: str, messages: Sequence[Message]) -> None:
        raise NotImplementedError  # BaseSessionStore's

    def revision(self, id: str) -> object | None:
        raise NotImplementedError  # BaseSessionStore's

    def rewind(self, request: RewindRequest) -> Rewound:
        """Keep the first ``request.keep`` messages of ``request.id``; see ``RewindRequest``.

        ``StoreConflictError`` when the session holds fewer than ``keep`` messages, is not
        stored, or is not at ``expected_length``; ``LeaseLostError`` for a stale fence.
        Nothing is written then. The default loads and saves the transcript under this
        object's write lock (atomic within this process only).
        """
        leases = self._local_leases()  # type: ignore[attr-defined]
        id = request.id
        with leases.write_lock:
            leases.check(id, request.fence, where=type(self).__name__)
            stored = self.load(id)
            if stored is None:
                raise StoreConflictError(f"cannot rewind session {id!r}: it is not stored")
            if request.expected_length is not None and len(stored) != request.expected_length:
                raise StoreConflictError(
                    f"session {id!r}: expected {request.expected_length} stored messages, "
                    f"found {len(stored)}"
                )
            keep = check_keep(id, request.keep, len(stored))
            self.save(id, stored[:keep])
        return Rewound(len(stored) - keep, self.revision(id))

    def fork(self, request: ForkRequest) -> Forked:
        """Create ``request.new_id`` with the first ``keep`` messages of ``request.source``.

        ``SessionExistsError`` when ``new_id`` is stored; ``StoreConflictError`` when
        ``source`` is not stored or holds fewer than ``keep``. The default loads the source
        and saves the new session under this object's write lock: it keeps no metadata
        (``info(new_id).parent`` is ``None``) and excludes other processes only where
        ``save`` does; then it copies the state (``copy_state``: a crash between leaves the
        fork without it).
        """
        leases = self._local_leases()  # type: ignore[attr-defined]
        with leases.write_lock:
            if self.load(request.new_id) is not None:
                raise exists_error(request.new_id)
            stored = self.load(request.source)
            if stored is None:
                raise missing_error(request.source)
            keep = check_keep(request.source, request.keep, len(stored))
            self.save(request.new_id, stored[:keep])
        copy_state(self, request)
        return Forked(keep, self.revision(request.new_id))
