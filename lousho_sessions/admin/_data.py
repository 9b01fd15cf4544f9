"""Reading a whole store for the admin command: its sessions, turns and approvals, as JSON.

``dump_session`` is what ``sessions export`` writes and ``migrate`` copies and
compares: a session's messages (serde dicts), its checkpoints (as stored) and its
approval records. ``checksum`` hashes such dumps in a canonical form, so two
stores holding the same content give the same checksum whatever their kind.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..engine._turn_state import CHECKPOINT_FORMAT
from ..errors import StoreCorruptError, StoreError
from ..serde import message_to_dict
from ..stores.adapters import adapt_approvals, adapt_checkpoints, adapt_sessions
from ..stores.base import (
    AgentStore,
    BaseApprovalStore,
    BaseCheckpointStore,
    BaseSessionStore,
    is_session_id,
)
from ..stores.lease import fence_session_id

__all__ = [
    "EXPORT_FORMAT",
    "Parts",
    "checksum",
    "dump_session",
    "session_ids",
    "turn_row",
    "turn_rows",
]

EXPORT_FORMAT = "lousho.export"


class Parts:
    """The three parts of an ``AgentStore``, each under the contract; ``StoreError`` if one is missing."""

    def __init__(self, store: AgentStore) -> None:
        missing = [n for n in ("sessions", "checkpoints", "approvals") if getattr(store, n) is None]
        if missing:
            raise StoreError(f"{store!r} has no {', '.join(missing)}")
        self.store = store
        self.sessions: BaseSessionStore = adapt_sessions(store.sessions)
        self.checkpoints: BaseCheckpointStore = adapt_checkpoints(store.checkpoints)
        self.approvals: BaseApprovalStore = adapt_approvals(store.approvals)


def session_ids(parts: Parts) -> list[str]:
    """Every session the store knows of: with a transcript, a checkpoint or an approval."""
    ids = set(parts.sessions.list_ids())
    for turn_id in parts.checkpoints.list(""):
        ids.add(fence_session_id(turn_id))
    for record in parts.approvals.list(status=None):
        if is_session_id(record.get("session_id")):
            ids.add(record["session_id"])
    return sorted(ids)


def turn_row(turn_id: str, data: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """What ``turns list`` shows of a checkpoint; ``None`` for a tool-result record."""
    if data is not None and str(data.get("format", "")).startswith("lousho.turn-"):
        return None  # a result record beside its turn's checkpoint
    session_id = fence_session_id(turn_id)
    if data is None or data.get("format") != CHECKPOINT_FORMAT:
        return {"turn_id": turn_id, "session_id": session_id, "status": "unreadable"}
    new = data.get("new")
    return {
        "turn_id": turn_id,
        "session_id": session_id,
        "status": data.get("status"),
        "approval_id": data.get("approval_id"),
        "steps": data.get("steps"),
        "attempts": data.get("attempts", 0),
        "fence": data.get("fence"),
        "new_messages": len(new) if isinstance(new, list) else None,
        "created_at": data.get("created_at"),
        "updated_at": data.get("updated_at"),
        "run_id": data.get("run_id"),
    }


def turn_rows(parts: Parts, *, session_id: str | None = None) -> list[dict[str, Any]]:
    """A row per unfinished turn (``turn_row``), sorted by turn id."""
    prefix = "" if session_id is None else f"{session_id}."
    rows = []
    for turn_id in parts.checkpoints.list(prefix):
        try:
            data = parts.checkpoints.load(turn_id)
        except StoreCorruptError:
            data = None
        row = turn_row(turn_id, data)
        if row is not None:
            rows.append(row)
    return rows


def dump_session(
    parts: Parts, id: str, approvals: Iterable[Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """Session ``id`` as JSON: ``messages`` (``None``: no transcript), ``checkpoints``, ``approvals``.

    ``approvals`` are the store's records to pick from (read once for many sessions);
    ``None`` reads the session's.
    """
    messages = parts.sessions.load(id)
    checkpoints = {}
    for turn_id in parts.checkpoints.list(f"{id}."):
        data = parts.checkpoints.load(turn_id)
        if data is not None:
            checkpoints[turn_id] = data
    if approvals is None:
        records = parts.approvals.list(session_id=id, status=None)
    else:
        records = [dict(r) for r in approvals if r.get("session_id") == id]
    return {
        "id": id,
        "messages": None if messages is None else [message_to_dict(m) for m in messages],
        "checkpoints": checkpoints,
        "approvals": sorted(records, key=lambda r: str(r.get("id"))),
    }


def checksum(dumps: Iterable[Mapping[str, Any]]) -> str:
    """The SHA-256 of ``dumps`` in canonical JSON (sorted keys, by session id)."""
    digest = hashlib.sha256()
    for dump in sorted(dumps, key=lambda d: str(d.get("id"))):
        text = json.dumps(dump, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest.update(text.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()
