"""Checks every store shares: id patterns and validators, approval records, prune ages.

``lousho_sessions.stores.base`` re-exports all of it; import it from there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import ApprovalAlreadyResolvedError, InvalidSessionIdError, StoreCorruptError

__all__ = [
    "APPROVAL_ID_PATTERN",
    "SESSION_ID_PATTERN",
    "TURN_ID_PATTERN",
    "approval_sort_key",
    "check_approval_record",
    "is_session_id",
    "older_than_seconds",
    "resolved_approval",
    "shown",
    "validate_approval_id",
    "validate_session_id",
    "validate_turn_id",
]

SESSION_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}$"
#: A durable turn's key: ``<session id>.turn-<n>``, or ``<session id>.send`` for ``agent.send``.
TURN_ID_PATTERN = r"^[A-Za-z0-9_-]{1,128}\.[A-Za-z0-9_-]{1,64}$"
#: No leading dot: the file store keeps ``.``-names for its own temp and lock files.
APPROVAL_ID_PATTERN = r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,199}$"

_SESSION_ID = re.compile(SESSION_ID_PATTERN)
_TURN_ID = re.compile(TURN_ID_PATTERN)
_APPROVAL_ID = re.compile(APPROVAL_ID_PATTERN)


#: Ids longer than this are shown cut short in error messages.
_SHOWN_CHARS = 40


def shown(value: object) -> str:
    """``repr(value)`` for an error message, cut to its first 40 characters plus its length."""
    if isinstance(value, str) and len(value) > _SHOWN_CHARS:
        return f"{value[:_SHOWN_CHARS]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS * 2 else f"{text[: _SHOWN_CHARS * 2]}..."


def validate_session_id(session_id: object) -> str:
    """Return ``session_id`` if it matches ``SESSION_ID_PATTERN``, else raise ``InvalidSessionIdError``."""
    if isinstance(session_id, str) and _SESSION_ID.fullmatch(session_id):
        return session_id
    raise InvalidSessionIdError(
        f"invalid session id {shown(session_id)}: session ids must match {SESSION_ID_PATTERN} "
        "(letters, digits, '_' and '-', 1 to 128 characters; they become file names)"
    )


def validate_turn_id(turn_id: object) -> str:
    """Return ``turn_id`` if it matches ``TURN_ID_PATTERN``, else raise ``InvalidSessionIdError``."""
    if isinstance(turn_id, str) and _TURN_ID.fullmatch(turn_id):
        return turn_id
    raise InvalidSessionIdError(
        f"invalid checkpoint id {shown(turn_id)}: checkpoint ids must match {TURN_ID_PATTERN} "
        "(a session id, a dot, then e.g. 'turn-3')"
    )


def validate_approval_id(approval_id: object) -> str:
    """Return ``approval_id`` if it matches ``APPROVAL_ID_PATTERN``, else raise ``InvalidSessionIdError``."""
    if isinstance(approval_id, str) and _APPROVAL_ID.fullmatch(approval_id):
        return approval_id
    raise InvalidSessionIdError(
        f"invalid approval id {shown(approval_id)}: approval ids must match "
        f"{APPROVAL_ID_PATTERN} (letters, digits, '_', '-' and '.', not starting with '.')"
    )


def resolved_approval(
    record: Mapping[str, Any], *, approved: bool, reason: str | None, source: str
) -> dict[str, Any]:
    """The record after a successful ``resolve``; ``ApprovalAlreadyResolvedError`` unless pending.

    Stores call this inside their compare-and-set (a lock, a transaction) so every
    store writes the same fields: ``status``, ``reason`` and ``resolved_at`` (ISO 8601, UTC).
    """
    status = record.get("status")
    if status != "pending":
        raise ApprovalAlreadyResolvedError(f"approval {source} was already resolved ({status})")
    updated = dict(record)
    updated.update(
        status="approved" if approved else "denied",
        reason=reason,
        resolved_at=datetime.now(timezone.utc).isoformat(),
    )
    return updated


def approval_sort_key(record: Mapping[str, Any]) -> tuple[str, str]:
    """The order ``ApprovalStore.list`` returns records in: creation time, then id."""
    return (str(record.get("created_at", "")), str(record.get("id")))


def older_than_seconds(older_than: timedelta | float) -> float:
    """``prune``'s age as seconds; ``ValueError`` for a negative or non-finite age."""
    seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else float(older_than)
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"older_than must be a finite, non-negative age, got {older_than!r}")
    return seconds


def check_approval_record(record: Mapping[str, Any], *, source: str) -> dict[str, Any]:
    """``record`` as a dict if it has what every reader relies on, else ``StoreCorruptError``
    naming ``source``: a string ``id``, ``session_id`` a string or null, ``status`` one of
    pending/approved/denied, and ``call`` (if present) an object with an object ``arguments``."""
    problem = None
    call = record.get("call")
    if not isinstance(record.get("id"), str):
        problem = "'id' is not a string"
    elif record.get("session_id") is not None and not isinstance(record.get("session_id"), str):
        problem = "'session_id' is not a string"
    elif record.get("status") not in ("pending", "approved", "denied"):
        problem = f"'status' is {shown(record.get('status'))}, not pending, approved or denied"
    elif call is not None and not (
        isinstance(call, Mapping) and isinstance(call.get("arguments", {}), Mapping)
    ):
        problem = "'call' is not an object with an object 'arguments'"
    if problem:
        raise StoreCorruptError(f"{source}: not a valid approval record: {problem}")
    return dict(record)


def is_session_id(value: object) -> bool:
    """Whether ``value`` is a valid session id (``SESSION_ID_PATTERN``)."""
    return isinstance(value, str) and _SESSION_ID.fullmatch(value) is not None
