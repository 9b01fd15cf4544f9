"""Approval records and ``ApprovalRequest``, the typed view of one."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, Literal

import attrs

from .errors import StoreCorruptError
from .messages import ToolCall, thaw

__all__ = ["ApprovalRequest", "approval_id_for", "new_record"]

_NAMESPACE = uuid.UUID("6f1d2c8e-6a57-4c1e-9a61-4c2b8f6c7d10")


def approval_id_for(run_id: str, call_id: str) -> str:
    """The approval id of one tool call of one turn: the same after a crash and resume."""
    return "appr-" + uuid.uuid5(_NAMESPACE, f"{run_id}|{call_id}").hex


@attrs.frozen
class ApprovalRequest:
    """A tool call waiting for (or given) a human decision."""

    id: str
    session_id: str | None
    turn_id: str | None
    run_id: str
    call: ToolCall
    status: Literal["pending", "approved", "denied"] = "pending"
    reason: str | None = None
    created_at: str | None = None
    resolved_at: str | None = None

    @property
    def tool(self) -> str:
        return self.call.name

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> ApprovalRequest:
        """The request a stored record describes; ``StoreCorruptError`` if it is malformed."""
        try:
            return cls._from_record(record)
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            shown = str(record.get("id"))[:40] if isinstance(record, Mapping) else "?"
            raise StoreCorruptError(
                f"approval {shown!r}: not a valid approval record: {exc!r}"
            ) from exc

    @classmethod
    def _from_record(cls, record: Mapping[str, Any]) -> ApprovalRequest:
        call = record.get("call") or {}
        return cls(
            id=str(record["id"]),
            session_id=record.get("session_id"),
            turn_id=record.get("turn_id"),
            run_id=str(record.get("run_id", "")),
            call=ToolCall(
                str(call.get("id", "")), str(call.get("name", "")), call.get("arguments") or {}
            ),
            status=record.get("status", "pending"),
            reason=record.get("reason"),
            created_at=record.get("created_at"),
            resolved_at=record.get("resolved_at"),
        )


def new_record(
    approval_id: str, *, session_id: str | None, turn_id: str | None, run_id: str, call: ToolCall
) -> dict[str, Any]:
    return {
        "id": approval_id,
        "session_id": session_id,
        "turn_id": turn_id,
        "run_id": run_id,
        "call": {"id": call.id, "name": call.name, "arguments": thaw(call.arguments)},
        "tool": call.name,
        "status": "pending",
        "reason": None,
        "created_at": datetime.now(timezone.utc).isoformat(),
        "resolved_at": None,
    }
