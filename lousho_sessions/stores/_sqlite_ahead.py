"""Reading a shared session's new messages while its turn waits in line (``SqliteStore``).

When turns of several processes queue on one session, each turn must first read what
the others appended since it last looked: with 8 processes, 14 messages a turn, and
decoding them is most of what the queue's turns add to a turn. A turn that is next in
line (``_lockfile`` calls back while the turn before it runs) reads and decodes them
then, so under the lock only the messages of the turn just before are left to read.

Nothing read ahead is trusted on its own: a session's rows at a given position never
change within one *generation* of its revision (appends add rows; ``save``, a delete
or a new session start another generation: see ``sqlite._touch``), so
``load_since`` uses messages read ahead only when the revision it reads under the
lock, the caller's revision and the read-ahead are of the same generation, and reads
every row after them in that same statement.
"""

from __future__ import annotations

import threading

from ..messages import Message

__all__ = ["ReadAhead"]

#: The low bits of a revision count appends; the high bits are the *generation*.
COUNTER_BITS = 32
#: Sessions remembered before the memo starts again (a store may serve thousands).
_KEPT = 1024


class ReadAhead:
    """Per session: where the transcript this store last served ends, and the messages
    after it read ahead (decoded), each with its generation."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: session id -> (generation, length) of the transcript last read or written here
        self._ends: dict[str, tuple[int, int]] = {}
        #: session id -> (generation, position of the first, messages) read ahead
        self._ahead: dict[str, tuple[int, int, list[Message]]] = {}

    def seen(self, id: str, revision: int, length: int) -> None:
        """A caller now holds ``id``'s first ``length`` messages, stored at ``revision``."""
        with self._lock:
            if len(self._ends) >= _KEPT:
                self._ends.clear()
                self._ahead.clear()
            self._ends[id] = (revision >> COUNTER_BITS, length)

    def end(self, id: str) -> tuple[int, int] | None:
        """``(generation, length)`` a read ahead of ``id`` starts from, if known."""
        return self._ends.get(id)

    def keep(self, id: str, generation: int, start: int, messages: list[Message]) -> None:
        """Keep ``messages``, read at ``generation`` from position ``start``."""
        with self._lock:
            self._ahead[id] = (generation, start, messages)

    def take(self, id: str, generation: int, length: int) -> tuple[list[Message], int] | None:
        """The messages read ahead from position ``length`` on and the position after them,
        if they are of ``generation`` and start at or before ``length``; taken once."""
        with self._lock:
            ahead = self._ahead.pop(id, None)
        if ahead is None or ahead[0] != generation:
            return None
        _, start, messages = ahead
        end = start + len(messages)
        if not start <= length <= end:
            return None
        return messages[length - start :], end
