"""``rewind`` and ``fork`` of the Redis session store: one Lua script each.

``REWIND`` checks the fence and the length, trims the messages list to the kept ones
(``LTRIM``) and writes the new length and revision, in one script on the session's slot.
``FORK`` runs on the keys of both sessions: it refuses an existing new id, copies the kept
messages (and, asked to, the state record) server-side and writes the new session's
``meta`` naming its ``parent`` and ``fork_point``. An encrypting store seals the copies
again for the new session first (``FORK_READ``, then ``FORK_SEALED``: still one write).
On Redis Cluster two sessions may live in two slots, which no script may span: there
``fork`` takes the contract's default (read, then a create-only write).
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
    copy_state,
    exists_error,
    missing_error,
)
from ._redis_base import text
from ._redis_history_scripts import FORK, REWIND
from ._redis_records import RedisCheckpointStore
from ._state_requests import state_record, state_text
from ._summaries import SessionInfo
from .base import validate_session_id

__all__ = ["FORK", "FORK_TRIES", "REWIND", "redis_fork", "redis_info", "redis_rewind"]


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
    here = isinstance(request.checkpoints, RedisCheckpointStore) and (
        request.checkpoints.store is store
    )
    if store.sealing.enabled:
        kept = _fork_sealed(part, request, request.state and here)
    else:
        revision = secrets.token_hex(8)
        reply = store.run_on(
            "FORK",
            [*store.session_keys(source), *store.session_keys(new_id)],
            "" if request.keep is None else str(request.keep),
            revision,
            source,
            store.ttl_arg(new_id),
            new_id,
            "1" if request.state and here else "",
            what=f"fork {source!r} into {new_id!r}",
        )
        kept = Forked(int(_fork_outcome(store, request, reply)), revision)
    if request.state and not here:
        copy_state(part, request)
    return kept


def _fork_outcome(store: Any, request: ForkRequest, reply: Any) -> Any:
    """The second item of a fork script's reply when it is ``'ok'``; else its error."""
    outcome = text(reply[0], source="fork")
    if outcome == "exists":
        raise exists_error(request.new_id, store.where)
    if outcome == "missing":
        raise missing_error(request.source, store.where)
    if outcome == "short":
        check_keep(request.source, request.keep, int(reply[1]), store.where)
    if outcome != "ok":
        raise StoreCorruptError(f"{store.where}: fork: unexpected reply {outcome!r}")
    return reply[1]


#: How often an encrypting store's fork reads its source again when it changed meanwhile.
FORK_TRIES = 5


def _fork_sealed(part: Any, request: ForkRequest, state: bool) -> Forked:
    """The fork of an encrypting store: its records are bound to their session, so the client
    reads the source (``FORK_READ``), seals each copy again for the new session and writes
    them all with one script (``FORK_SEALED``), which refuses an existing new id and a source
    written since the read (then read again): the new session is whole or absent."""
    store, source, new_id = part.store, request.source, request.new_id
    keys = [*store.session_keys(source), *store.session_keys(new_id)]
    what = f"fork {source!r} into {new_id!r}"
    keep = "" if request.keep is None else str(request.keep)
    for _ in range(FORK_TRIES):
        reply = store.run_on("FORK_READ", keys, keep, "1" if state else "", what=what)
        _fork_outcome(store, request, reply)
        revision_read, items, record = reply[1], reply[2], reply[3]
        where = f"{store.where}: session {source!r}"
        texts = store.sealing.forked_texts(
            source, new_id, [text(v, source=where) for v in items], where=store.where
        )
        version, new_state = "", ""
        if record is not None:
            opened, version_read = state_record(
                source, store.sealing.record("checkpoint", source, record, source=where)
            )
            version, new_state = str(version_read), state_text(store.sealing, new_id, opened)
        elif state:
            version = "0"  # none stored: still none at the write
        revision = secrets.token_hex(8)
        reply = store.run_on(
            "FORK_SEALED",
            keys,
            "" if revision_read is None else text(revision_read, source=where),
            version,
            revision,
            source,
            store.ttl_arg(new_id),
            new_id,
            new_state,
            *texts,
            what=what,
        )
        if text(reply[0], source="fork") != "changed":
            return Forked(int(_fork_outcome(store, request, reply)), revision)
    raise StoreConflictError(
        f"cannot fork session {source!r} ({store.where}): it changed {FORK_TRIES} times "
        "while its records were sealed again for the new session"
    )


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
