"""Whether a Redis commit whose reply was lost (or refused after a retry) landed.

``_commit_check`` says why a store looks again; this is the Redis store's look: the
messages at the turn's place are the turn's own rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..errors import StoreClosedError, StoreError
from ..messages import Message
from ._commit_check import commit_unknown
from ._redis_base import text

__all__ = ["redis_landed"]


def redis_landed(
    store: Any,
    id: str,
    messages: Sequence[Message],
    rows: list[str],
    expected_length: int,
    lost: StoreError | None,
) -> bool:
    """Whether the append of ``rows`` at ``expected_length`` landed (``_commit_check``):
    the messages there are these. ``lost``: the error that lost the script's reply
    (``None``: the reply came, a refusal after a retry); when the session cannot be
    read, ``CommitUnknownError`` for a lost reply, else ``lost`` is raised as it was.
    Nothing to look for (no messages, or a length no append could have) is not landed."""
    if not rows or expected_length < 0:
        return False
    try:
        with store.call(f"look again at {id!r}") as client:
            stored = client.lrange(
                store.key(id, "messages"),
                expected_length,
                expected_length + len(rows) - 1,
            )
    except StoreClosedError:
        raise
    except StoreError as exc:
        if lost is None:
            return False  # the refusal is raised as the script gave it
        raise commit_unknown(store.where, id, messages, lost, exc) from lost
    return [text(row, source=f"session {id!r}") for row in stored] == rows
