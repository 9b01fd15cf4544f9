"""A commit whose reply was lost: find out whether it landed before saying it failed.

A turn's commit (``commit_turn``) is one transaction or script: it
appends the turn's messages and deletes its checkpoints together. When the connection
drops after the commit was sent and before its reply came back (a server restart, a
proxy or load balancer cutting the connection, a socket timeout), the commit may or may
not have landed. Reporting it as a plain failure would be wrong half the time: the
checkpoints are gone, ``pending()`` is ``None``, and a caller who sends the input again
stores the turn twice and runs its tools again. So the store reads the session again on
a new connection and compares the messages at the turn's place with the turn's own
(message ids are unique): there, the commit landed and it returns as if nothing
happened; not there, the error is raised as it was (the turn stays pending). When the
store cannot be read again either, ``CommitUnknownError`` says that the turn may be
saved and how to tell.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ..errors import CommitUnknownError
from ..messages import Message

__all__ = ["commit_unknown", "log_landed"]

log = logging.getLogger("lousho_sessions.stores")


def commit_unknown(
    where: str, id: str, messages: Sequence[Message], lost: BaseException, look: BaseException
) -> CommitUnknownError:
    """The error of a commit whose reply was lost (``lost``) and whose session could not be
    read again (``look``)."""
    ids = tuple(m.id for m in messages)
    return CommitUnknownError(
        f"session {id!r} ({where}): the turn's commit was sent but its reply was lost "
        f"({lost}), and reading the session again failed ({look}): the turn MAY BE SAVED. "
        "Do not send it again. Once the store answers: if session.pending() is not None the "
        "turn was not saved, and resume() (or the next send()) finishes it without running "
        f"its recorded tools again; otherwise it was saved (session.load() holds message "
        f"{ids[0] if ids else None!r} and the {len(ids) - 1} after it). See "
        "docs/operations.md, 'A committed-but-failed send'.",
        session_id=id,
        message_ids=ids,
    )


def log_landed(where: str, id: str, expected_length: int, lost: BaseException) -> None:
    log.warning(
        "session %r (%s): the reply to the turn's commit was lost (%s), but the turn is in the "
        "store (at message %d): it landed",
        id, where, lost, expected_length,
    )  # fmt: skip
