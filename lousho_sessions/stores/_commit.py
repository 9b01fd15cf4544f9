"""``commit_turn``: a turn's commit told that it is the last write under its lease.

A part of the session store contract (``BaseSessionStore`` inherits it), kept in a
module of its own. The default calls ``append_and_delete`` and ignores the lease;
a store that can free the lease in the same write (Redis) overrides it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages import Message
from .lease import Lease

__all__ = ["TurnCommit"]


class TurnCommit:
    """The ``commit_turn`` of ``BaseSessionStore`` (``checkpoints``: a ``BaseCheckpointStore``,
    typed loosely here because ``base`` imports this module)."""

    def append_and_delete(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        checkpoints: Any = None,
        delete: Sequence[str] = (),
        fence: int | None = None,
    ) -> object | None:
        raise NotImplementedError  # BaseSessionStore's

    def commit_turn(
        self,
        id: str,
        messages: Sequence[Message],
        expected_length: int,
        *,
        checkpoints: Any = None,
        delete: Sequence[str] = (),
        fence: int | None = None,
        release: Lease | None = None,
    ) -> object | None:
        """``append_and_delete``, told that it is the last write under the lease ``release``
        (fence ``fence``; ``None``: not known to be the last).

        A store may free the session in the same write, and then calls
        ``release.released_by_store()``: the lease's own ``release()`` does nothing
        afterwards (it stays idempotent). A refused write (``LeaseLostError``,
        ``StoreConflictError``) releases nothing. The default ignores ``release`` and
        calls ``append_and_delete``; the caller releases the lease as before.
        """
        return self.append_and_delete(
            id, messages, expected_length, checkpoints=checkpoints, delete=delete, fence=fence
        )
