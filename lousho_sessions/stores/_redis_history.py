"""``rewind`` and ``fork`` of the Redis session store: one Lua script each.

``REWIND`` checks the fence and the length, trims the messages list to the kept ones
(``LTRIM``) and writes the new length and revision, in one script on the session's slot.
``FORK`` runs on the keys of both sessions: it refuses an existing new id, copies the kept
messages server-side and writes the new session's ``meta`` naming its ``parent`` and
``fork_point``. On Redis Cluster two sessions may live in two slots, which no script may
span: there ``fork`` takes the contract's default (read, then a create-only write).
"""

from __future__ import annotations

import secrets
from typing import Any

from ..errors import StoreConflictError, StoreCorruptError
from ._history_requests import (
    Forked,
    ForkRequest,
    RewindRequest,
    Rewound,
    check_keep,
    exists_error,
    missing_error,
)
from ._redis_base import text
from ._redis_history_scripts import FORK, REWIND
from ._summaries import SessionInfo
from .base import validate_session_id

__all__ = ["FORK", "REWIND", "redis_fork", "redis_info", "redis_rewind"]


def redis_rewind(part: Any, request: RewindRequest) -> Rewound:
    store, id = part.store, request.id
    revision = secrets.token_hex(8)
    reply = store.run(
        "REWIND",
        id,
        str(request.keep),
        "" if request.fence is None else str(int(request.fence)),
        "" if request.expected_length is None else str(request.expected_length),
        revision,
        store.ttl_arg(id),
        what=f"rewind {id!r}",
    )
    outcome = text(reply[0], source="rewind")
    if outcome == "ok":
        return Rewound(int(reply[1]), revision)
    if outcome == "lease-lost":
        raise store.lease_lost(id, request.fence, reply[1])
    if outcome == "missing":
        raise StoreConflictError(f"cannot rewind session {id!r} ({store.where}): it is not stored")
    if outcome == "short":
        check_keep(id, request.keep, int(reply[1]), store.where)
    if outcome == "corrupt":
        raise StoreCorruptError(
            f"{store.where}: session {id!r}: the length and the {reply[1]} stored messages "
            "disagree; nothing was written"
        )
    raise StoreConflictError(
        f"session {id!r} ({store.where}): expected {request.expected_length} stored messages, "
        f"found {reply[1]}"
    )


def redis_fork(part: Any, request: ForkRequest) -> Forked:
    store, source, new_id = part.store, request.source, request.new_id
    revision = secrets.token_hex(8)
    reply = store.run_on(
        "FORK",
        [*store.session_keys(source), *store.session_keys(new_id)],
        "" if request.keep is None else str(request.keep),
        revision,
        source,
        store.ttl_arg(new_id),
        what=f"fork {source!r} into {new_id!r}",
    )
    outcome = text(reply[0], source="fork")
    if outcome == "exists":
        raise exists_error(new_id, store.where)
    if outcome == "missing":
        raise missing_error(source, store.where)
    if outcome == "short":
        check_keep(source, request.keep, int(reply[1]), store.where)
    if store.sealing.enabled:
        _reseal_fork(part, source, new_id)
    return Forked(int(reply[1]), revision)


def _reseal_fork(part: Any, source: str, new_id: str) -> None:
    """The forked messages sealed again for ``new_id`` (a record is bound to its session):
    each swapped by a compare-and-set right after the fork script, before anyone else
    knows the new id."""
    from ._rotation import _REDIS_SWAP

    store = part.store
    key = store.key(new_id, "messages")
    with store.call(f"seal the fork {new_id!r}") as client:
        items = [text(v, source=key) for v in client.lrange(key, 0, -1)]
        texts = store.sealing.forked_texts(source, new_id, items, where=store.where)
        swap = client.register_script(_REDIS_SWAP)
        for i, (old, new) in enumerate(zip(items, texts, strict=True)):
            if new != old:
                swap(keys=[key], args=["list", old, new, str(i)], client=client)


def redis_info(part: Any, id: str) -> SessionInfo | None:
    store = part.store
    validate_session_id(id)
    with store.call(f"info of {id!r}") as client:
        length, updated, parent, point = client.hmget(
            store.key(id, "meta"), ["length", "updated", "parent", "fork_point"]
        )
    if length is None:
        return None
    source = f"{store.where}: session {id!r}"
    at = None if updated is None else int(float(text(updated, source=source))) / 1e6
    return SessionInfo(
        id,
        int(text(length, source=source)),
        at,
        None if parent is None else text(parent, source=source),
        None if point is None else int(text(point, source=source)),
    )
