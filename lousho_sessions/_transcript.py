"""A session's view of its stored transcript: sync, commit, and the store's turn lock.

Used only on the session's worker thread. ``sync()`` reloads the transcript when the
store's ``revision`` says it changed (or always, without ``revision``); ``commit()``
appends a finished turn (``append`` with the expected length when the store has it,
else a whole ``save``); ``turn_lock()`` holds the session in the store for a turn.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .compaction import spent_by
from .messages import Message, Usage
from .stores.base import SessionStore

__all__ = ["Transcript"]


class Transcript:
    """The messages of session ``id`` as last read from or written to ``store``."""

    def __init__(self, store: SessionStore, id: str) -> None:
        self.store = store
        self.id = id
        self.messages: list[Message] = []
        #: what the transcript spent: usage, model calls, tool calls (for session limits)
        self.spent: tuple[Usage, int, int] = (Usage(), 0, 0)
        self._revision: object = None
        self._loaded = False

    def sync(self) -> None:
        """Reload the transcript if the store changed since this session last looked."""
        revision_of = getattr(self.store, "revision", None)
        if revision_of is not None:
            revision = revision_of(self.id)
            if self._loaded and revision == self._revision:
                return
        else:
            revision = None
        self.set(self.store.load(self.id) or [], revision)

    def reload(self) -> None:
        """Read the transcript now, whatever the revision says."""
        self._loaded = False
        self.sync()

    def set(self, messages: list[Message], revision: object = None) -> None:
        """Take ``messages`` as the stored transcript (just loaded or saved)."""
        self.messages = messages
        self.spent = spent_by(messages)
        self._loaded = True
        if revision is None:
            revision_of = getattr(self.store, "revision", None)
            revision = revision_of(self.id) if revision_of is not None else None
        self._revision = revision

    def save(self, messages: list[Message]) -> None:
        """Replace the stored transcript with ``messages``."""
        self.store.save(self.id, messages)
        self.set(messages)

    def commit(self, new: list[Message]) -> None:
        """Append a finished turn's messages to the stored transcript."""
        append = getattr(self.store, "append", None)
        if append is not None:
            append(self.id, new, len(self.messages))
        else:
            self.store.save(self.id, [*self.messages, *new])
        self.messages.extend(new)
        usage, steps, calls = spent_by(new)
        old_usage, old_steps, old_calls = self.spent
        self.spent = (old_usage + usage, old_steps + steps, old_calls + calls)
        revision_of = getattr(self.store, "revision", None)
        self._revision = revision_of(self.id) if revision_of is not None else None

    def turn_lock(self) -> contextlib.AbstractContextManager[Any]:
        """Hold the session in the store for a turn (a no-op for a store without a turn lock)."""
        lock = getattr(self.store, "turn_lock", None)
        return lock(self.id) if lock is not None else contextlib.nullcontext()
