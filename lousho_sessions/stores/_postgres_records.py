"""The checkpoints and approvals of a ``PostgresStore`` (``lousho_sessions.stores.postgres``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta
from typing import Any

from ..errors import ApprovalAlreadyResolvedError, ApprovalNotFoundError, StoreCorruptError
from ._approval_records import check_new_approval
from ._postgres_core import FENCED, PgPart
from ._sealing import CHECKPOINT_CLEAR
from .base import (
    BaseApprovalStore,
    BaseCheckpointStore,
    PruneResult,
    check_approval_record,
    decode_json_object,
    resolved_approval,
    validate_approval_id,
    validate_turn_id,
)
from .lease import fence_session_id

__all__ = ["PostgresApprovalStore", "PostgresCheckpointStore"]

log = logging.getLogger("lousho_sessions.stores.postgres")


class PostgresCheckpointStore(PgPart, BaseCheckpointStore):
    """The checkpoints of a ``PostgresStore``: one ``json`` row per turn id, kept unchanged."""

    checks_json = True  # saved through encode_json_object (the sealing's record_text)

    def load(self, turn_id: str) -> dict[str, Any] | None:
        validate_turn_id(turn_id)
        rows = self.store.fetch(
            "SELECT body::text FROM {s}.checkpoints WHERE turn_id = %(id)s", {"id": turn_id}
        )
        if not rows:
            return None
        return self.store.sealing.record(
            "checkpoint",
            fence_session_id(turn_id),
            rows[0][0],
            source=f"{self.store.where}: checkpoint {turn_id!r}",
        )

    def save(
        self, turn_id: str, checkpoint: Mapping[str, Any], *, fence: int | None = None
    ) -> None:
        """Store ``checkpoint``; ``LeaseLostError`` (nothing written) if ``fence`` is stale."""
        validate_turn_id(turn_id)
        sid = fence_session_id(turn_id)
        text = self.store.sealing.record_text(
            "checkpoint", sid, checkpoint, what=f"checkpoint {turn_id!r}"
        )
        rows = self.store.fetch(
            "SELECT {s}.save_checkpoint(%(sid)s, %(fence)s::bigint, %(id)s, %(body)s::json)",
            {
                "sid": sid,
                "fence": self.store.effective_fence(sid, fence),
                "id": turn_id,
                "body": text,
            },
        )
        self.store.check_fenced(rows[0][0], sid, fence)

    def delete(self, turn_id: str, *, fence: int | None = None) -> None:
        """Forget the checkpoint; ``LeaseLostError`` (nothing deleted) if ``fence`` is stale."""
        validate_turn_id(turn_id)
        sid = fence_session_id(turn_id)
        rows = self.store.fetch(
            FENCED + ", d AS (DELETE FROM {s}.checkpoints WHERE turn_id = %(id)s "
            "AND (SELECT fenced FROM ok)) SELECT fenced FROM ok",
            {"sid": sid, "fence": self.store.effective_fence(sid, fence), "id": turn_id},
        )
        self.store.check_fenced(rows[0][0], sid, fence)

    def list(self, prefix: str = "") -> list[str]:
        """The stored turn ids that start with ``prefix``, sorted."""
        rows = self.store.fetch(
            "SELECT turn_id FROM {s}.checkpoints WHERE left(turn_id, %(n)s) = %(p)s "
            'ORDER BY turn_id COLLATE "C"',
            {"n": len(prefix), "p": prefix},
        )
        return [row[0] for row in rows]

    def pending_checkpoints(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The durable turns' checkpoints, in one query (not their result records)."""
        rows = self.store.fetch(
            "SELECT turn_id, body::text FROM {s}.checkpoints "
            "WHERE turn_id ~ '^[A-Za-z0-9_-]{1,128}[.](turn-[0-9]+|send)$' "
            'ORDER BY turn_id COLLATE "C"'
        )
        for turn_id, body in rows:
            try:
                data = self.store.sealing.record(
                    "checkpoint",
                    fence_session_id(turn_id),
                    body,
                    source=f"{self.store.where}: checkpoint {turn_id!r}",
                )
            except StoreCorruptError as exc:
                log.warning("skipping unreadable checkpoint %s: %s", turn_id, exc)
                continue
            yield turn_id, data

    def pending_fields(self, fields: Sequence[str]) -> Iterator[tuple[str, dict[str, Any]]]:
        """The durable turns' checkpoints cut down to ``fields`` on the server, in one query.

        ``json_each`` refuses a body holding a ``\\u0000`` escape (a U+0000 a user typed or
        a tool returned: ``json`` keeps it, ``text`` cannot), which failed the whole query;
        such a body (or one merely holding that text), and one that is not an object
        (``json_each`` refuses it: written by hand), come whole and are judged here."""
        wanted = frozenset(fields)
        if self.store.sealing.enabled and not wanted <= CHECKPOINT_CLEAR:
            # a sealed checkpoint holds these fields in its token: opened here, not on the server
            yield from super().pending_fields(fields)
            return
        rows = self.store.fetch(
            "SELECT turn_id, whole, CASE WHEN whole THEN body::text ELSE "
            "coalesce((SELECT json_object_agg(key, value) FROM json_each(body) "
            "WHERE key = ANY(%(fields)s)), '{}'::json)::text END FROM "
            "(SELECT turn_id, body, (strpos(body::text, %(nul)s) > 0 "
            "OR json_typeof(body) <> 'object') AS whole "
            "FROM {s}.checkpoints "
            "WHERE turn_id ~ '^[A-Za-z0-9_-]{1,128}[.](turn-[0-9]+|send)$') c "
            'ORDER BY turn_id COLLATE "C"',
            {"fields": list(fields), "nul": "\\u0000"},
        )
        for turn_id, whole, body in rows:
            try:
                data = decode_json_object(
                    body, source=f"{self.store.where}: checkpoint {turn_id!r}"
                )
            except StoreCorruptError as exc:
                log.warning("skipping unreadable checkpoint %s: %s", turn_id, exc)
                continue
            if whole:
                data = self.store.sealing.open_record(
                    "checkpoint",
                    fence_session_id(turn_id),
                    data,
                    source=f"{self.store.where}: checkpoint {turn_id!r}",
                )
                data = {key: value for key, value in data.items() if key in wanted}
            yield turn_id, data

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the checkpoints not updated within ``older_than``."""
        return self.store.prune_parts(older_than, sessions=False, approvals=False)


class PostgresApprovalStore(PgPart, BaseApprovalStore):
    """The approval records of a ``PostgresStore``; ``resolve`` is one compare-and-set
    ``UPDATE … WHERE status = 'pending' RETURNING``, so across machines one caller wins."""

    def create(self, record: Mapping[str, Any], *, fence: int | None = None) -> None:
        """Store a new record; ``ValueError`` if one with its ``id`` exists or it is malformed."""
        approval_id = validate_approval_id(check_new_approval(record).get("id"))
        status = str(record["status"])
        session_id = record.get("session_id")
        sid = session_id if isinstance(session_id, str) else None
        text = self.store.sealing.record_text(
            "approval", sid, record, what=f"approval {approval_id!r}"
        )
        rows = self.store.fetch(
            FENCED + ", w AS (INSERT INTO {s}.approvals "
            "(id, session_id, status, created_key, body, resolved_at) "
            "SELECT %(id)s, %(sid)s, %(status)s, %(key)s, %(body)s::json, "
            "CASE WHEN %(status)s = 'pending' THEN NULL ELSE now() END "
            "WHERE (SELECT fenced FROM ok) ON CONFLICT (id) DO NOTHING RETURNING 1) "
            "SELECT (SELECT fenced FROM ok), EXISTS (SELECT 1 FROM w)",
            {
                "sid": sid,
                "fence": None if sid is None else self.store.effective_fence(sid, fence),
                "id": approval_id,
                "status": status,
                "key": str(record.get("created_at", "")).replace("\x00", ""),
                "body": text,
            },
        )
        fenced, created = rows[0]
        self.store.check_fenced(fenced, sid or "", fence)
        if not created:
            raise ValueError(f"approval {approval_id!r} exists already ({self.store.where})")

    def get(self, id: str) -> dict[str, Any] | None:
        validate_approval_id(id)
        rows = self.store.fetch(
            "SELECT body::text FROM {s}.approvals WHERE id = %(id)s", {"id": id}
        )
        return None if not rows else self._decode(id, rows[0][0])

    def resolve(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Approve or deny a pending record: exactly one caller wins, on any machine."""
        validate_approval_id(id)
        current = self.get(id)
        if current is None:
            raise ApprovalNotFoundError(f"no approval with id {id!r} in {self.store.where}")
        record = resolved_approval(
            current, approved=approved, reason=reason, source=repr(id), arguments=arguments
        )
        rows = self.store.fetch(
            "UPDATE {s}.approvals SET status = %(status)s, body = %(body)s::json, "
            "resolved_at = now() WHERE id = %(id)s AND status = 'pending' RETURNING 1",
            {
                "id": id,
                "status": record["status"],
                "body": self.store.sealing.record_text(
                    "approval", _sid(record.get("session_id")), record, what=f"approval {id!r}"
                ),
            },
        )
        if not rows:  # another caller won between our read and this compare-and-set
            now = self.get(id)
            if now is None:
                raise ApprovalNotFoundError(f"no approval with id {id!r} in {self.store.where}")
            raise ApprovalAlreadyResolvedError(
                f"approval {id!r} was already resolved ({now.get('status')})"
            )
        return record

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[dict[str, Any]]:
        rows = self.store.fetch(
            "SELECT id, body::text FROM {s}.approvals "
            "WHERE (%(sid)s::text IS NULL OR session_id = %(sid)s) "
            "AND (%(status)s::text IS NULL OR status = %(status)s) "
            'ORDER BY created_key COLLATE "C", id COLLATE "C"',
            {"sid": session_id, "status": status},
        )
        records = []
        for id, text in rows:
            try:
                records.append(self._decode(id, text))
            except StoreCorruptError as exc:
                log.warning("skipping unreadable approval record: %s", exc)
        return records

    def delete(self, id: str) -> None:
        validate_approval_id(id)
        self.store.fetch("DELETE FROM {s}.approvals WHERE id = %(id)s", {"id": id})

    def prune(self, older_than: timedelta | float) -> PruneResult:
        """Delete the records resolved more than ``older_than`` ago; pending ones stay."""
        return self.store.prune_parts(older_than, sessions=False, checkpoints=False)

    def _decode(self, id: str, text: str) -> dict[str, Any]:
        source = f"{self.store.where}: approval {id!r}"
        data = decode_json_object(text, source=source)
        data = self.store.sealing.open_record(
            "approval", _sid(data.get("session_id")), data, source=source
        )
        return check_approval_record(data, source=source)


def _sid(session_id: object) -> str | None:
    """An approval record's session id, as its sealing binds it."""
    return session_id if isinstance(session_id, str) else None
