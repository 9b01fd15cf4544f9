"""A session's state beside its transcript: ``load_state`` and ``save_state(SaveState)``.

A session (and a state scope, ``Agent.state_scope(id)``) keeps one JSON object of state.
``BaseSessionStore`` has a default of each verb, so every store keeps state: the record
``{"state": {...}, "version": n}`` lives in the checkpoint store given, under the
reserved key ``<id>.state`` (sealed like every checkpoint when the store encrypts;
deleted, copied and migrated with the session's other checkpoint records), or, with no
checkpoint store, in this store object (one process). ``save_state`` is a
compare-and-set on the version read (``expected_version``) and fenced like a
checkpoint; callers write under the session's lease, so the default's read-then-write
is not raced by another turn of the session. A store may override both verbs to keep
the state in its own records.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..errors import StateTooLargeError, StoreConflictError, StoreCorruptError
from ._sealing import Sealing

__all__ = [
    "STATE_LIMIT",
    "SaveState",
    "StateVerbs",
    "changed_state",
    "check_state",
    "commit_text",
    "fingerprint",
    "is_state_key",
    "state_key",
    "state_record",
    "state_text",
    "turn_state",
    "with_version",
]

#: The largest state a session or scope keeps, in bytes of its JSON text.
STATE_LIMIT = 256 * 1024


def state_key(id: str) -> str:
    """The checkpoint-store key of the state of ``id`` (a session or a scope)."""
    return f"{id}.state"


def is_state_key(key: str) -> bool:
    """Whether the checkpoint-store key ``key`` is a state record (which a checkpoint
    ``prune`` keeps: it goes with its session)."""
    return key.endswith(".state")


def state_text(sealing: Sealing, id: str, state: Mapping[str, Any]) -> str:
    """The state record of ``id`` without its version, as JSON text (sealed as a checkpoint of
    ``id`` when ``sealing`` has keys): what a store writing the record in its own statement or
    script completes with the version it reads there (``with_version``)."""
    return sealing.record_text("checkpoint", id, {"state": state}, what=f"state of {id!r}")


def commit_text(sealing: Sealing, id: str, state: Mapping[str, Any] | None) -> str | None:
    """A commit's state (``CommitTurn.state``) checked (``check_state``) as ``state_text``;
    ``None`` for none."""
    if state is None:
        return None
    return state_text(sealing, id, check_state(f"session {id!r}", state))


def with_version(text: str, version: int) -> str:
    """The state record ``text`` (a ``state_text``) with ``"version"`` added last, in clear:
    what the default writes too (``"version"`` is a clear field of a sealed checkpoint)."""
    return f'{text[:-1]},"version":{int(version)}}}'


def fingerprint(state: Mapping[str, Any]) -> str:
    """A digest of ``state`` as JSON (keys sorted), to tell whether a turn changed it."""
    text = json.dumps(state, sort_keys=True, ensure_ascii=False, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def turn_state(extra: dict[str, Any], load: Callable[[], dict[str, Any]] | None) -> dict[str, Any]:
    """A turn's ``ToolContext.state``, in its checkpoint fields ``extra``: read (``load``, under
    the turn's lease) on first use, then kept in the checkpoint until the commit writes it."""
    held = extra.get("state")
    if not isinstance(held, dict):
        held = extra["state"] = load() if load is not None else {}
        extra["state_read"] = fingerprint(held)  # committed only if changed
    return held


def changed_state(extra: Mapping[str, Any]) -> dict[str, Any] | None:
    """The state a turn's checkpoint fields ``extra`` hold if its tools changed it since it
    was read (``"state"``, ``"state_read"``), else ``None``: nothing to write."""
    state = extra.get("state")
    if not isinstance(state, dict) or fingerprint(state) == extra.get("state_read"):
        return None
    return state


def check_state(owner: str, value: object) -> dict[str, Any]:
    """A plain JSON copy of ``value`` (a mapping with string keys), at most ``STATE_LIMIT``
    bytes; ``TypeError`` for one that is not JSON, ``StateTooLargeError`` naming ``owner``."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{owner}: state must be a mapping, got {type(value).__name__}")
    try:
        text = json.dumps(dict(value), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{owner}: state must be JSON (str keys, JSON values): {exc}") from None
    size = len(text.encode("utf-8"))
    if size > STATE_LIMIT:
        raise StateTooLargeError(
            f"{owner}: state is {size} bytes of JSON, over the limit of {STATE_LIMIT} bytes"
        )
    copied: dict[str, Any] = json.loads(text)
    return copied


@attrs.frozen
class SaveState:
    """What ``save_state`` is asked: make ``state`` the state of ``id``.

    ``expected_version``: the version ``load_state`` answered (``StoreConflictError``
    if another write came since; ``None``: write whatever is stored). ``fence``: the
    lease's (``LeaseLostError`` if stale, where the store fences). ``checkpoints``: the
    checkpoint store that keeps the record in the default.
    """

    id: str
    state: Mapping[str, Any]
    expected_version: int | None = None
    fence: int | None = None
    #: a ``BaseCheckpointStore`` (typed loosely: ``base`` imports this module)
    checkpoints: Any = None


def state_record(id: str, record: Mapping[str, Any] | None) -> tuple[dict[str, Any], int]:
    """``(state, version)`` of a stored state record (``None``: ``({}, 0)``);
    ``StoreCorruptError`` for one that is malformed."""
    if record is None:
        return {}, 0
    state, version = record.get("state"), record.get("version")
    if not isinstance(state, dict) or not isinstance(version, int):
        raise StoreCorruptError(f"session {id!r}: the state record is malformed")
    return dict(state), version


class StateVerbs:
    """The ``load_state`` and ``save_state`` of ``BaseSessionStore`` (defaults in the
    checkpoint store, or in this object)."""

    def load_state(self, id: str, checkpoints: Any = None) -> tuple[dict[str, Any], int]:
        """``(state, version)`` of ``id``: ``({}, 0)`` when none is stored."""
        if checkpoints is not None:
            return state_record(id, checkpoints.load(state_key(id)))
        with self._local_leases().write_lock:  # type: ignore[attr-defined]
            return state_record(id, self.__dict__.get("_states", {}).get(id))

    def save_state(self, request: SaveState) -> int:
        """Store ``request.state`` as the state of ``request.id``; its new version.

        ``StoreConflictError`` when ``expected_version`` is given and not the stored one;
        then nothing was written."""
        id = request.id
        state = check_state(f"session {id!r}", request.state)
        with self._local_leases().write_lock:  # type: ignore[attr-defined]
            _, version = self.load_state(id, request.checkpoints)
            if request.expected_version is not None and version != request.expected_version:
                raise StoreConflictError(
                    f"session {id!r}: its state changed (version {version}, "
                    f"expected {request.expected_version})"
                )
            record = {"state": state, "version": version + 1}
            if request.checkpoints is not None:
                request.checkpoints.save(state_key(id), record, fence=request.fence)
            else:
                self.__dict__.setdefault("_states", {})[id] = record
        return version + 1
