"""What a store tells of its contents in summary: ``PruneResult`` and ``SessionInfo``."""

from __future__ import annotations

import attrs

__all__ = ["PruneResult", "SessionInfo"]


@attrs.frozen
class PruneResult:
    """What a ``prune`` deleted: sessions, checkpoints, resolved approvals, leftover lock and
    temp files, lease records of sessions gone. A held session's turn is never pruned."""

    sessions: int
    checkpoints: int
    approvals: int
    lock_files: int = 0
    temp_files: int = 0
    leases: int = 0

    def __add__(self, other: PruneResult) -> PruneResult:
        if not isinstance(other, PruneResult):
            return NotImplemented
        return PruneResult(
            *(a + b for a, b in zip(attrs.astuple(self), attrs.astuple(other), strict=True))
        )


@attrs.frozen
class SessionInfo:
    """What ``BaseSessionStore.info`` tells of a stored session without loading it all.

    ``updated_at`` is when it was last written (seconds since the epoch), ``None``
    when the store does not know.
    """

    id: str
    messages: int
    updated_at: float | None = None
