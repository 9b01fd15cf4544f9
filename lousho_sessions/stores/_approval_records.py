"""What every approval store shares: the record checks, the resolve compare-and-set, the order.

Re-exported by ``stores.base`` (with ``shown``, for error messages); here so that the contract module stays small.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from ..errors import (
    ApprovalAlreadyResolvedError,
    ApprovalCancelledError,
    ApprovalDecisionError,
    StoreCorruptError,
)

__all__ = [
    "approval_sort_key",
    "cancelled_error",
    "check_approval_record",
    "resolved_approval",
    "shown",
]


#: Ids longer than this are shown cut short in error messages.
_SHOWN_CHARS = 40


def shown(value: object) -> str:
    """``repr(value)`` for an error message, cut to its first 40 characters plus its length."""
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS * 2 else f"{text[: _SHOWN_CHARS * 2]}..."


def resolved_approval(
    record: Mapping[str, Any],
    *,
    approved: bool,
    reason: str | None,
    source: str,
    arguments: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The record after a successful ``resolve``; ``ApprovalAlreadyResolvedError`` unless pending.

    Stores call this inside their compare-and-set (a lock, a transaction) so every
    store writes the same fields: ``status``, ``reason`` and ``resolved_at`` (ISO 8601, UTC),
    and ``arguments`` when the call was approved with edited arguments (the JSON object the
    tool runs with; ``call.arguments`` keeps the model's). Checking them against the tool's
    schema is the caller's work (``Approvals.resolve`` does it before any store is asked).
    """
    status = record.get("status")
    if status == "cancelled":
        raise cancelled_error(record, source)
    if status != "pending":
        raise ApprovalAlreadyResolvedError(f"approval {source} was already resolved ({status})")
    updated = dict(record)
    updated.update(
        status="approved" if approved else "denied",
        reason=reason,
        resolved_at=datetime.now(timezone.utc).isoformat(),
    )
    if arguments is not None:
        if not approved:
            raise ApprovalDecisionError(
                f"approval {source}: arguments replace a call's only when it is approved"
            )
        updated["arguments"] = dict(arguments)
    return updated


def cancelled_error(record: Mapping[str, Any], source: str) -> ApprovalCancelledError:
    """What resolving a cancelled approval raises: its turn was dropped, and why."""
    why = record.get("reason") or "its turn was dropped"
    return ApprovalCancelledError(
        f"approval {source} was cancelled ({why}): it can no longer be resolved; "
        "send the session a new message instead"
    )


def approval_sort_key(record: Mapping[str, Any]) -> tuple[str, str]:
    """The order ``ApprovalStore.list`` returns records in: creation time, then id."""
    return (str(record.get("created_at", "")), str(record.get("id")))


def check_approval_record(record: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """``record`` as a dict if it has what every reader relies on, else ``StoreCorruptError``
    naming ``source``: a string ``id``, ``session_id`` a string or null, ``status`` one of
    pending/approved/denied/cancelled, ``call`` (if present) an object with an object
    ``arguments``, and ``arguments`` (the edited ones, if present) an object."""
    problem = None
    call = record.get("call")
    if not isinstance(record.get("id"), str):
        problem = "'id' is not a string"
    elif record.get("session_id") is not None and not isinstance(record.get("session_id"), str):
        problem = "'session_id' is not a string"
    elif record.get("status") not in ("pending", "approved", "denied", "cancelled"):
        problem = (
            f"'status' is {shown(record.get('status'))}, not pending, approved, denied or cancelled"
        )
    elif call is not None and not (
        isinstance(call, Mapping) and isinstance(call.get("arguments", {}), Mapping)
    ):
        problem = "'call' is not an object with an object 'arguments'"
    elif record.get("arguments") is not None and not isinstance(record["arguments"], Mapping):
        problem = "'arguments' (the edited arguments) is not an object"
    if problem:
        raise StoreCorruptError(f"{source}: not a valid approval record: {problem}")
    return dict(record)
