"""Input that joins a running turn: ``enqueue``/``steer``, or a send under a queue/steer policy."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import attrs

from .._random import uuid4_hex
from ..events import Event, InputQueued
from ..messages import Message
from ..serde import message_from_dict

if TYPE_CHECKING:
    from ._turn_state import TurnState

__all__ = ["Inbox", "Ticket", "take_queued"]


@attrs.define
class Ticket:
    """Input that joins a running turn (``enqueue``/``steer`` or a queue/steer send)."""

    input_id: str
    messages: tuple[Message, ...]
    steer: bool = False
    applied: bool = False
    future: Future[Any] | None = None


class Inbox:
    """Queued input for one turn, shared between the turn and joining callers."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[Ticket] = []
        self.tickets: list[Ticket] = []
        self.closed = False
        self._on_steer: Callable[[], None] | None = None
        self.emit: Callable[[Event], None] | None = None
        self.run_id = ""

    def join(
        self, messages: Sequence[Message], *, steer: bool, future: Future[Any] | None = None
    ) -> Ticket | None:
        """Add input to the turn; ``None`` when the turn no longer takes input."""
        with self._lock:
            if self.closed:
                return None
            ticket = Ticket("in-" + uuid4_hex(), tuple(messages), steer, future=future)
            self._waiting.append(ticket)
            self.tickets.append(ticket)
            on_steer = self._on_steer if steer else None
            emit = self.emit
        if emit is not None:
            emit(InputQueued(self.run_id, ticket.input_id))
        if on_steer is not None:
            on_steer()
        return ticket

    def take(self) -> list[Ticket]:
        with self._lock:
            taken, self._waiting = self._waiting, []
            return taken

    def close_if_empty(self) -> bool:
        """Close the inbox unless input is waiting; True when closed."""
        with self._lock:
            if self._waiting:
                return False
            self.closed = True
            return True

    def close(self) -> list[Ticket]:
        """Close and return the input that was never applied."""
        with self._lock:
            self.closed = True
            left, self._waiting = self._waiting, []
            return left

    def set_steer_hook(self, hook: Callable[[], None] | None) -> None:
        with self._lock:
            self._on_steer = hook

    def has_steer(self) -> bool:
        with self._lock:
            return any(t.steer for t in self._waiting)


def take_queued(state: TurnState, inbox: Inbox | None, *, final: bool) -> list[str]:
    """Move queued input into ``state``'s turn; the ids of the inputs applied, in order.

    First the input an earlier attempt of this turn queued (kept in its checkpoint), then
    what waits in ``inbox``; at the final answer (``final``) the inbox is closed instead
    when nothing was applied and none waits.
    """
    applied: list[str] = []
    for item in state.queued:
        state.new.extend(message_from_dict(m) for m in item["messages"])
        applied.append(str(item["input_id"]))
    state.queued.clear()
    if inbox is not None and not (final and not applied and inbox.close_if_empty()):
        for ticket in inbox.take():
            state.new.extend(ticket.messages)
            ticket.applied = True
            applied.append(ticket.input_id)
    return applied
