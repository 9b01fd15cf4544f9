"""Ids every store checks: the patterns, their validators, and prune's age.

``lousho_sessions.stores.base`` re-exports all of it; import it from there.
"""

from __future__ import annotations

import re
from datetime import timedelta

from ..errors import InvalidSessionIdError
from ._approval_records import shown

__all__ = [
    "APPROVAL_ID_PATTERN",
    "SESSION_ID_PATTERN",
    "TURN_ID_PATTERN",
    "is_session_id",
    "older_than_seconds",
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


def is_session_id(value: object) -> bool:
    """Whether ``value`` is a valid session id (``SESSION_ID_PATTERN``)."""
    return isinstance(value, str) and _SESSION_ID.fullmatch(value) is not None


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


def older_than_seconds(older_than: timedelta | float) -> float:
    """``prune``'s age as seconds; ``ValueError`` for a negative or non-finite age."""
    seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else float(older_than)
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"older_than must be a finite, non-negative age, got {older_than!r}")
    return seconds
