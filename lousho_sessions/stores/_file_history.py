"""``rewind`` and ``fork`` of the file session store: one atomic file write each.

A rewind rewrites ``<id>.json`` with the kept messages under the file's write lock (fenced
like an append, compare-and-set on the length); the new random revision token makes
every revision read before it stale. A fork writes ``<new id>.json`` under that file's
write lock, refused if it exists, with an ``origin`` naming the parent and fork point, then
(asked to) the state (``copy_state``: the state record is a checkpoint file of its own).
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import StoreConflictError
from ._directory import check_fence_file
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

__all__ = ["file_fork", "file_rewind", "origin_json", "origin_of"]


def origin_of(origin: str) -> tuple[str | None, int | None]:
    """The parent and fork point written as ``origin`` (``,"origin":{...}`` or ``""``)."""
    if not origin:
        return None, None
    data = json.loads(origin[len(',"origin":') :])
    return str(data["parent"]), int(data["fork_point"])


def _kept(body: str, keep: int) -> str:
    """The first ``keep`` message JSON texts of a file's ``body``, joined as written."""
    if keep == 0:
        return ""
    dicts = json.loads(f"[{body}]")[:keep]
    return ",".join(json.dumps(d, separators=(",", ":")) for d in dicts)


def file_rewind(store: Any, request: RewindRequest) -> Rewound:
    id = request.id
    path = store.path(id)
    with store._write_lock(id, path):
        check_fence_file(store._dir, id, request.fence)
        current = store._current(id, path)
        if current is None:
            raise StoreConflictError(f"cannot rewind session {id!r} ({path}): it is not stored")
        if request.expected_length is not None and current.length != request.expected_length:
            raise StoreConflictError(
                f"session {id!r} ({path}): expected {request.expected_length} stored messages, "
                f"found {current.length}"
            )
        keep = check_keep(id, request.keep, current.length, str(path))
        revision = store._write(id, path, _kept(current.body, keep), keep, current.origin)
    return Rewound(current.length - keep, revision)


def file_fork(store: Any, request: ForkRequest) -> Forked:
    new_path = store.path(request.new_id)
    source_path = store.path(request.source)
    with store._write_lock(request.new_id, new_path):
        if new_path.exists():
            raise exists_error(request.new_id, str(new_path))
        source = store._current(request.source, source_path)
        if source is None:
            raise missing_error(request.source, str(source_path))
        keep = check_keep(request.source, request.keep, source.length, str(source_path))
        origin = origin_json(request.source, keep)
        body = _kept(source.body, keep)
        if store.sealing.enabled and body:  # each record is bound to its session: sealed again
            texts = [json.dumps(d, separators=(",", ":")) for d in json.loads(f"[{body}]")]
            texts = store.sealing.forked_texts(
                request.source, request.new_id, texts, where=str(source_path)
            )
            body = ",".join(texts)
        revision = store._write(request.new_id, new_path, body, keep, origin)
    copy_state(store, request)  # a file of its own: written after (a crash between: none)
    return Forked(keep, revision)


def origin_json(parent: str, fork_point: int) -> str:
    """What a forked session's file holds after its messages."""
    return ',"origin":' + json.dumps({"parent": parent, "fork_point": fork_point})
