"""The checkpoints and approvals of a ``SqliteStore`` (``lousho_sessions.stores.sqlite``)."""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

from ..errors import ApprovalNotFoundError, StoreCorruptError
from ._approval_records import check_new_approval
from ._sealing import Value
from ._sqlite_db import SqliteDatabase
from ._state_requests import is_state_key, state_key
from .base import (
    BaseApprovalStore,
    BaseCheckpointStore,
    PruneResult,
    check_approval_record,
    decode_json_object,
    older_than_seconds,
    resolved_approval,
    validate_approval_id,
    validate_turn_id,
)
from .lease import fence_session_id

__all__ = [
    "SAVE_CHECKPOINT",
    "Part",
    "SqliteApprovalStore",
    "SqliteCheckpointStore",
    "prune_approvals",
    "prune_checkpoints",
    "prune_sessions",
]

log = logging.getLogger("lousho_sessions.stores.sqlite")


class Part:
    """A part of a ``SqliteStore``: its sessions, checkpoints or approvals."""

    fenced_writes = True

    def __init__(self, store: SqliteDatabase) -> None:
        self.store = store

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store.path!r})"


class SqliteCheckpointStore(Part, BaseCheckpointStore):
    """The checkpoints of a ``SqliteStore``, as opaque JSON per turn id."""

    checks_json = True  # saved through encode_json_object (the sealing's record_text)

    def load(self, turn_id: str) -> dict[str, Any] | None:
        validate_turn_id(turn_id)
        with self.store.connection() as conn:
            row = conn.execute(
                "SELECT json FROM checkpoints WHERE turn_id = ?", (turn_id,)
            ).fetchone()
        if row is None:
            return None
        return self.store.sealing.record(
            "checkpoint",
            fence_session_id(turn_id),
            row[0],
            source=f"{self.store.path}: checkpoint {turn_id!r}",
        )

    def save(
        self, turn_id: str, checkpoint: Mapping[str, Any], *, fence: int | None = None
    ) -> None:
        validate_turn_id(turn_id)
        sealing = self.store.sealing
        # a state record stays JSON text (its version a clear field the commit reads in SQL)
        seal = sealing.record_text if turn_id.endswith(".state") else sealing.record_value
        text = seal(
            "checkpoint", fence_session_id(turn_id), checkpoint, what=f"checkpoint {turn_id!r}"
        )
        with self.store.transaction() as conn:
            self.store.check_fence(conn, fence_session_id(turn_id), fence)
            _upsert(conn, turn_id, text)

    def save_and_delete(
        self,
        turn_id: str,
        checkpoint: Mapping[str, Any],
        delete: Sequence[str] = (),
        *,
        fence: int | None = None,
    ) -> None:
        """``save``, then delete the checkpoints ``delete``, in one transaction."""
        validate_turn_id(turn_id)
        keys = [(validate_turn_id(key),) for key in delete]
        sealing = self.store.sealing
        # a state record stays JSON text (its version a clear field the commit reads in SQL)
        seal = sealing.record_text if turn_id.endswith(".state") else sealing.record_value
        text = seal(
            "checkpoint", fence_session_id(turn_id), checkpoint, what=f"checkpoint {turn_id!r}"
        )
        with self.store.transaction() as conn:
            self.store.check_fence(conn, fence_session_id(turn_id), fence)
            _upsert(conn, turn_id, text)
            if keys:
                conn.executemany("DELETE FROM checkpoints WHERE turn_id = ?", keys)

    def delete(self, turn_id: str, *, fence: int | None = None) -> None:
        validate_turn_id(turn_id)
        with self.store.transaction() as conn:
            self.store.check_fence(conn, fence_session_id(turn_id), fence)
            conn.execute("DELETE FROM checkpoints WHERE turn_id = ?", (turn_id,))

    def list(self, prefix: str = "") -> list[str]:
        """The stored turn ids that start with ``prefix``, sorted."""
        with self.store.connection() as conn:
            rows = conn.execute(
                "SELECT turn_id FROM checkpoints WHERE substr(turn_id, 1, ?) = ? ORDER BY turn_id",
                (len(prefix), prefix),
            ).fetchall()
        return [row[0] for row in rows]

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the checkpoints not updated within ``older_than``."""
        cutoff = time.time() - older_than_seconds(older_than)
        with self.store.transaction() as conn:
            count = prune_checkpoints(conn, cutoff, self.store._turns.held)
        return PruneResult(sessions=0, checkpoints=count, approvals=0)


class SqliteApprovalStore(Part, BaseApprovalStore):
    """The approval records of a ``SqliteStore``; ``resolve`` is a compare-and-set in one
    transaction (``UPDATE ... WHERE status = 'pending'``), so across processes one caller wins."""

    def create(self, record: Mapping[str, Any], *, fence: int | None = None) -> None:
        """Store a new record; ``ValueError`` if one with its ``id`` exists or it is malformed."""
        approval_id = validate_approval_id(check_new_approval(record).get("id"))
        status = record.get("status")
        session_id = record.get("session_id")
        text = self.store.sealing.record_text(
            "approval", _sid(session_id), record, what=f"approval {approval_id!r}"
        )
        with self.store.transaction() as conn:
            if isinstance(session_id, str):
                self.store.check_fence(conn, session_id, fence)
            try:
                conn.execute(
                    "INSERT INTO approvals (id, session_id, status, created_key, json, resolved_at) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        approval_id,
                        session_id if isinstance(session_id, str) else None,
                        status if isinstance(status, str) else None,
                        str(record.get("created_at", "")),
                        text,
                        None if status == "pending" else time.time(),
                    ),
                )
            except sqlite3.IntegrityError as exc:
                raise ValueError(
                    f"approval {approval_id!r} exists already ({self.store.path})"
                ) from exc

    def get(self, id: str) -> dict[str, Any] | None:
        validate_approval_id(id)
        with self.store.connection() as conn:
            row = conn.execute("SELECT json FROM approvals WHERE id = ?", (id,)).fetchone()
        return None if row is None else self._decode(id, row[0])

    def resolve(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        validate_approval_id(id)
        with self.store.transaction() as conn:
            row = conn.execute("SELECT json FROM approvals WHERE id = ?", (id,)).fetchone()
            if row is None:
                raise ApprovalNotFoundError(f"no approval with id {id!r} in {self.store.path}")
            record = resolved_approval(
                self._decode(id, row[0]),
                approved=approved,
                reason=reason,
                source=repr(id),
                arguments=arguments,
            )
            updated = conn.execute(
                "UPDATE approvals SET status = ?, json = ?, resolved_at = ? "
                "WHERE id = ? AND status = 'pending'",
                (
                    record["status"],
                    self.store.sealing.record_text(
                        "approval", _sid(record.get("session_id")), record, what=f"approval {id!r}"
                    ),
                    time.time(),
                    id,
                ),
            ).rowcount
            if updated != 1:  # the JSON said pending but the column did not: keep them in step
                raise StoreCorruptError(
                    f"{self.store.path}: approval {id!r}: status column and record disagree"
                )
        return record

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[dict[str, Any]]:
        query = "SELECT id, json FROM approvals"
        clauses, params = [], []
        if session_id is not None:
            clauses.append("session_id = ?")
            params.append(session_id)
        if status is not None:
            clauses.append("status = ?")
            params.append(status)
        if clauses:
            query += " WHERE " + " AND ".join(clauses)
        with self.store.connection() as conn:
            rows = conn.execute(query + " ORDER BY created_key, id", params).fetchall()
        records = []
        for id, text in rows:
            try:
                records.append(self._decode(id, text))
            except StoreCorruptError as exc:
                log.warning("skipping unreadable approval record: %s", exc)
        return records

    def corrupt(self) -> dict[str, str]:
        """The approval records ``list`` skips: approval id -> what is wrong."""
        with self.store.connection() as conn:
            rows = conn.execute("SELECT id, json FROM approvals ORDER BY id").fetchall()
        found = {}
        for id, text in rows:
            try:
                self._decode(id, text)
            except StoreCorruptError as exc:
                found[str(id)] = str(exc)
        return found

    def delete(self, id: str) -> None:
        validate_approval_id(id)
        with self.store.transaction() as conn:
            conn.execute("DELETE FROM approvals WHERE id = ?", (id,))

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the records resolved more than ``older_than`` ago; pending ones stay."""
        cutoff = time.time() - older_than_seconds(older_than)
        with self.store.transaction() as conn:
            return PruneResult(sessions=0, checkpoints=0, approvals=prune_approvals(conn, cutoff))

    def _decode(self, id: str, text: str) -> dict[str, Any]:
        source = f"{self.store.path}: approval {id!r}"
        if not isinstance(text, str):
            raise StoreCorruptError(f"{source}: the json column holds {type(text).__name__}")
        data = decode_json_object(text, source=source)
        data = self.store.sealing.open_record(
            "approval", _sid(data.get("session_id")), data, source=source
        )
        return check_approval_record(data, source=source)


def _sid(session_id: object) -> str | None:
    """An approval record's session id, as its sealing binds it."""
    return session_id if isinstance(session_id, str) else None


#: a checkpoint saved (or saved over) under its turn id
SAVE_CHECKPOINT = (
    "INSERT INTO checkpoints (turn_id, json, updated_at) VALUES (?, ?, ?) "
    "ON CONFLICT (turn_id) DO UPDATE SET json = excluded.json, updated_at = excluded.updated_at"
)


def _upsert(conn: sqlite3.Connection, turn_id: str, text: Value) -> None:
    conn.execute(SAVE_CHECKPOINT, (turn_id, text, time.time()))


def prune_sessions(conn: sqlite3.Connection, cutoff: float, held: Callable[[str], bool]) -> int:
    """In a transaction: delete the sessions (their messages and state records) written before
    ``cutoff``, but those a turn holds right now (``held``)."""
    rows = conn.execute("SELECT id FROM sessions WHERE updated_at < ?", (cutoff,)).fetchall()
    old = [(id,) for (id,) in rows if not held(id)]
    conn.executemany("DELETE FROM messages WHERE session_id = ?", old)
    conn.executemany("DELETE FROM sessions WHERE id = ?", old)
    conn.executemany(
        "DELETE FROM checkpoints WHERE turn_id = ?", [(state_key(id),) for (id,) in old]
    )
    return len(old)


def prune_checkpoints(conn: sqlite3.Connection, cutoff: float, held: Callable[[str], bool]) -> int:
    """In a transaction: delete the checkpoints written before ``cutoff``, but those of
    sessions a turn holds right now (``held``) and the sessions' state records (``<id>.state``)."""
    rows = conn.execute("SELECT turn_id FROM checkpoints WHERE updated_at < ?", (cutoff,))
    old = [
        (turn_id,)
        for (turn_id,) in rows.fetchall()
        if not held(fence_session_id(turn_id)) and not is_state_key(turn_id)
    ]
    conn.executemany("DELETE FROM checkpoints WHERE turn_id = ?", old)
    return len(old)


def prune_leases(conn: sqlite3.Connection, held: Callable[[str], bool]) -> int:
    """In a transaction: delete the fences of sessions with neither a transcript nor a
    checkpoint that no turn holds (a turn holding one may still write: its fence stays)."""
    rows = conn.execute(
        "SELECT session_id FROM leases l WHERE NOT EXISTS "
        "(SELECT 1 FROM sessions s WHERE s.id = l.session_id) AND NOT EXISTS "
        "(SELECT 1 FROM checkpoints c WHERE c.turn_id >= l.session_id || '.' "
        "AND c.turn_id < l.session_id || '/')"
    ).fetchall()
    gone = [(id,) for (id,) in rows if not held(id)]
    conn.executemany("DELETE FROM leases WHERE session_id = ?", gone)
    return len(gone)


def prune_approvals(conn: sqlite3.Connection, cutoff: float) -> int:
    """In a transaction: delete the approvals resolved before ``cutoff``; pending ones stay."""
    return int(
        conn.execute(
            "DELETE FROM approvals WHERE status IS NOT 'pending' AND resolved_at < ?", (cutoff,)
        ).rowcount
    )


#: the version of a state record (a clear field of its JSON text, sealed or not; the checkpoint
#: store keeps state records as text even where it seals checkpoints as BLOBs)
STATE_VERSION = (
    "SELECT CASE typeof(json) WHEN 'text' THEN json_extract(json, '$.version') END "
    "FROM checkpoints WHERE turn_id = ?"
)
