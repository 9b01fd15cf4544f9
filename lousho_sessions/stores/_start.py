"""``turn_lock_saving``: a turn's lease taken together with the turn's first checkpoint;
``turn_lock_waiting``: a call back while a turn waits for its lease.

A part of the session store contract (``BaseSessionStore`` inherits it), kept in a
module of its own. A durable turn's first write is its input checkpoint, made just
after the lease is taken. A session that holds the transcript as of a known
revision can build that checkpoint before it asks for the lease, and a store that
keeps checkpoints in the same database can then write both in one atomic step: one
round trip fewer per turn. The default takes the lease and saves nothing; the
caller then saves the checkpoint itself, as before.

A turn that waits behind others for the lease must, once it has it, read what they
appended. A store that serves waiters in order (SQLite's ticket line) knows when all
but the last turn ahead have committed, and ``turn_lock_waiting`` calls the session
back then: it reads those messages while the last one runs, not after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ..serde import encode_json_object
from ._checks import validate_turn_id
from ._sealing import Sealing
from .lease import Lease, fence_session_id

__all__ = ["StartCheckpoint", "TurnStart", "start_body"]


@attrs.frozen
class StartCheckpoint:
    """A new turn's first checkpoint, offered to ``turn_lock_saving``.

    ``checkpoints`` is the checkpoint store it belongs in, ``turn_id`` its key,
    ``revision`` the session's revision (``revision(id)``, ``None``: nothing stored)
    the turn was built on, and ``build()`` the checkpoint without its ``"fence"``
    (a JSON object with at least one field), called only by a store that may save it.
    """

    checkpoints: object
    turn_id: str
    revision: object | None
    build: Callable[[], Mapping[str, Any]]


def start_body(id: str, start: StartCheckpoint, sealing: Sealing | None = None) -> str | None:
    """``start``'s checkpoint as JSON text without its ``"fence"`` (the store puts the new
    lease's first), for session ``id``'s lease; ``None`` when it is not one to save with
    it: its turn id is invalid or names another session, it does not encode (the
    turn's own ``save`` raises that, as before), or it is empty."""
    try:
        if fence_session_id(validate_turn_id(start.turn_id)) != id:
            return None
        data = dict(start.build())
        data.pop("fence", None)  # the store writes the lease's
        what = f"checkpoint {start.turn_id!r}"
        if not data:
            return None  # an empty checkpoint is not one to save with the lease
        if sealing is None:
            text = encode_json_object(data, what=what)
        else:
            text = sealing.record_text("checkpoint", id, data, what=what)
    except (TypeError, ValueError):
        return None
    return None if text == "{}" else text


class TurnStart:
    """The ``turn_lock_saving`` and ``turn_lock_waiting`` of ``BaseSessionStore``."""

    def turn_lock(self, id: str, *, timeout: float | None = None) -> Lease:
        raise NotImplementedError  # BaseSessionStore's

    def turn_lock_saving(
        self, id: str, start: StartCheckpoint, *, timeout: float | None = None
    ) -> Lease:
        """``turn_lock(id, timeout=)``, also saving ``start``'s checkpoint in the same atomic
        step when the store can; ``lease.start_saved`` says whether it did.

        A store saves it only if, once the lease is taken, the session's revision is
        still ``start.revision`` and no checkpoint of the session is stored in
        ``start.checkpoints`` (one of the store's own), and then stores
        ``{**start.build(), "fence": lease.fence}`` under ``start.turn_id`` durably
        with the lease: a crash after the call finds the turn pending, as after a
        ``save``. Otherwise it saves nothing (``start_saved`` false) and the caller
        saves the checkpoint itself. The default takes the lease and saves nothing.
        """
        return self.turn_lock(id, timeout=timeout)

    def turn_lock_waiting(
        self,
        id: str,
        while_waiting: Callable[[], None] | None,
        *,
        timeout: float | None = None,
    ) -> Lease:
        """``turn_lock(id, timeout=)``, calling ``while_waiting()`` at most once while the
        turn waits for the lease, at a point where the turns ahead of it have committed
        all but the last one's work (a store that serves waiters in order knows it).

        What a session does then is read ahead: it takes in the messages those turns
        appended, so that its sync under the lease reads only what the last one added.
        ``while_waiting`` runs on the waiting thread, without the lease; it must not
        raise (a session's catches everything). The default never calls it."""
        return self.turn_lock(id, timeout=timeout)
