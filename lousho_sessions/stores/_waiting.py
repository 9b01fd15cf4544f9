"""What a turn waiting for its session's lease answers to: the call's abort signal.

A turn whose session is held by another holder (often one that died: its lease
runs out only after ``lease_ttl``) waits in ``turn_lock``. The session's worker
thread sets the signal of the call it runs (``send(timeout=)`` or an abort aborts
it) around ``turn_lock`` with ``waiting_for_lease(signal)``; the stores that wait
for a lease held elsewhere (PostgreSQL, Redis) read it with ``call_signal()``, wake
when it is aborted and raise ``lease_wait_stopped(...)``: a ``SessionBusyError``
that says what was waited for, until when, and why the wait stopped. The store
contract's ``turn_lock(id, timeout=)`` stays as it is: a store that never waits
long ignores the signal.
"""

from __future__ import annotations

import threading
from datetime import datetime, timedelta, timezone
from typing import Any

from ..errors import SessionBusyError

__all__ = ["call_signal", "lease_wait_stopped", "until_text", "waiting_for_lease"]

_local = threading.local()


def waiting_for_lease(signal: Any) -> _Waiting:
    """While the block runs, ``call_signal()`` on this thread is ``signal`` (an ``AbortSignal``)."""
    return _Waiting(signal)


class _Waiting:
    """``waiting_for_lease``'s block (a class, not a generator: entered once a turn)."""

    __slots__ = ("before", "signal")

    def __init__(self, signal: Any) -> None:
        self.signal = signal

    def __enter__(self) -> None:
        self.before = getattr(_local, "signal", None)
        _local.signal = self.signal

    def __exit__(self, *exc: object) -> None:
        _local.signal = self.before


def call_signal() -> Any:
    """The abort signal of the call this thread takes a lease for, or ``None``."""
    return getattr(_local, "signal", None)


def until_text(remaining: float) -> str:
    """When a lease with ``remaining`` seconds left runs out: a UTC time and the seconds."""
    at = datetime.now(timezone.utc) + timedelta(seconds=max(remaining, 0.0))
    return f"{at.strftime('%H:%M:%S')} UTC, in {max(remaining, 0.0):.1f} s"


def lease_wait_stopped(
    session_id: str, holder: str | None, remaining: float, waited: float, reason: Any, where: str
) -> SessionBusyError:
    """The error of a lease wait the call's timeout or abort stopped."""
    why = (
        "the call's timeout ran out"
        if reason == "timeout"
        else f"the call was aborted ({reason!r})"
        if reason is not None
        else "the call was aborted"
    )
    return SessionBusyError(
        f"session {session_id!r}: {why} after {waited:.1f} s waiting for the lease held by "
        f"{holder or 'an unknown holder'} ({where}); a previous turn holds it (if its "
        f"process died, until the lease runs out at {until_text(remaining)}, unless renewed). "
        "Nothing of this turn ran or was saved; send again later, or with a longer timeout"
    )
