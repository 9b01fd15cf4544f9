"""Bodies of the processes the kit's multi-process tests start (with the "spawn" method).

Each opens the store with ``kit_class().reopen_store(location)``: the test class
travels by reference, so it must be defined at the top level of an importable module.
"""

from __future__ import annotations

import threading
import traceback
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from ..messages import Message
from ._support import WAIT, opened


def hold_lease(kit: type[Any], location: str, session_id: str, out: Queue[Any], go: Event) -> None:
    """Take the session's lease, report its fence, hold it until ``go`` is set, release."""
    try:
        with opened(kit().reopen_store, Path(location)) as parts:
            assert parts.sessions is not None
            with parts.sessions.turn_lock(session_id, timeout=WAIT) as lease:
                out.put(("held", lease.fence))
                assert go.wait(WAIT)
        out.put(("released", None))
    except BaseException:
        out.put(("error", traceback.format_exc()))


def hold_until_killed(kit: type[Any], location: str, session_id: str, out: Queue[Any]) -> None:
    """Take the session's lease, say so, then wait to be killed."""
    try:
        with opened(kit().reopen_store, Path(location)) as parts:
            assert parts.sessions is not None
            with parts.sessions.turn_lock(session_id, timeout=WAIT) as lease:
                out.put(("held", lease.fence))
                threading.Event().wait(WAIT)  # nothing sets it: the test kills this process
    except BaseException:
        out.put(("error", traceback.format_exc()))


def run_turns(
    kit: type[Any],
    location: str,
    session_id: str,
    worker: int,
    turns: int,
    go: Event,
    out: Queue[Any],
) -> None:
    """``turns`` turns under the lease: reload if another process wrote, append with the fence."""
    try:
        with opened(kit().reopen_store, Path(location)) as parts:
            sessions = parts.sessions
            assert sessions is not None
            known: list[Message] = []
            revision: object = None
            assert go.wait(WAIT)
            for n in range(turns):
                with sessions.turn_lock(session_id, timeout=WAIT) as lease:
                    current = sessions.revision(session_id)
                    if current is None or current != revision:
                        known = sessions.load(session_id) or []
                    tag = f"w{worker}-t{n}"
                    new = [Message.user(tag), Message.assistant(tag)]
                    sessions.append(session_id, new, len(known), fence=lease.fence)
                    known = known + new
                    revision = sessions.revision(session_id)
        out.put(("ok", worker))
    except BaseException:
        out.put(("error", traceback.format_exc()))
