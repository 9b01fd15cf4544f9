"""The PostgreSQL store's leases: a heartbeat per held lease, and waking waiters on release.

A lease is a row ``leases(session_id, fence, holder, expires_at)``, never a held
connection, transaction or advisory lock: between its statements the holder keeps
no connection, so a turn's model and tool calls hold nothing in the pool. Every
time is the database's (``now()``), so workers' clocks do not matter.

``PostgresLease`` has its row renewed every ``ttl / 3`` seconds by the store's
heartbeat thread (``_heartbeat``), and stops that on release. ``ReleaseListener`` holds one ``LISTEN`` connection
per store (the only session-level state the store uses; ``notify=False`` turns it
off for PgBouncer in transaction mode) and wakes the threads waiting for a session
when its holder releases it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ._heartbeat import Heartbeat, RenewedLease

__all__ = ["PostgresLease", "ReleaseListener", "WokenBy"]

log = logging.getLogger("lousho_sessions.stores.postgres")

#: The first pause before a failed lease renewal is tried again (doubling, up to ttl / 6).
_RETRY_FIRST = 0.05

#: How long ``ReleaseListener.close()`` waits for its thread (a daemon, left behind after).
_CLOSE_WAIT = 2.0


class PostgresLease(RenewedLease):
    """A lease kept alive by the store's heartbeat; ``lost`` once a renewal fails.

    ``renew()`` returns whether the row still carries this lease's fence (then its
    expiry moved ``ttl`` on); the store's ``Heartbeat`` calls it every ``ttl / 3``
    seconds. A renewal that finds another fence, or that cannot reach the
    database for ``ttl`` seconds, marks the lease lost: ``lost`` turns true and
    the turn's writes (which carry the fence) are refused by the database.
    ``release()`` stops the renewals (waiting for one in progress), then frees the row.
    """

    def __init__(
        self,
        session_id: str,
        fence: int,
        *,
        ttl: float,
        renew: Callable[[], bool],
        release: Callable[[], None],
        heartbeat: Heartbeat,
        owner: object = None,
        forget: Callable[[], None] = lambda: None,
        taken_at: float | None = None,
    ) -> None:
        self.ttl = ttl
        #: the store whose row this is (a commit may free it: ``commit_turn(CommitTurn(release=))``)
        self.owner = owner
        self._renew = renew
        self._free = release
        self._forget = forget
        self._lost = threading.Event()
        #: when the last renewal that succeeded was sent (the row's expiry is later than
        #: this plus ``ttl``, by the database's clock): first, when the lease was asked for
        self._last_ok = time.monotonic() if taken_at is None else taken_at
        super().__init__(session_id, fence, self._finish, heartbeat=heartbeat, interval=ttl / 3)

    @property
    def lost(self) -> bool:
        """True once released, once a renewal found the session taken over, or once ``ttl``
        seconds passed since the last renewal that succeeded was sent (a renewal failing,
        or hanging on a hung database: the row may have expired and been taken)."""
        if self._lost.is_set() or super().lost:
            return True
        if time.monotonic() - self._last_ok >= self.ttl:
            self._lost.set()  # stays lost: another turn may have taken the session meanwhile
            return True
        return False

    def _beat(self) -> bool:
        """One renewal, tried again at once (after a short pause) while it fails and the
        lease is not lost: a renewal cut on a dead connection retries on another one
        within the ttl, not a third of it later. Whether to go on renewing."""
        pause = _RETRY_FIRST
        while True:
            sent = time.monotonic()
            try:
                held = self._renew()
                break
            except Exception as exc:  # the database is unreachable: retry until the ttl is spent
                if self.lost:
                    log.error(
                        "session %r: lease lost, not renewed for %.1f s: %s",
                        self.session_id,
                        self.ttl,
                        exc,
                    )
                    return False
                log.warning("session %r: lease renewal failed, retrying: %s", self.session_id, exc)
            if self._beat_entry.removed:  # released meanwhile
                return False
            time.sleep(min(pause, self.ttl / 6))  # a backoff; release() waits at most this
            pause *= 2
        if self.lost:  # the reply came too late: the row may have expired meanwhile
            log.error("session %r: lease lost, not renewed for %.1f s", self.session_id, self.ttl)
            return False
        if not held:
            log.warning(
                "session %r: lease with fence %d was taken over (it expired); "
                "this turn's writes will be refused",
                self.session_id,
                self.fence,
            )
            self._lost.set()
            return False
        self._last_ok = sent
        return True

    def released_by_store(self) -> None:
        """Freed by the store's write (the turn's commit): this thread holds it no more."""
        self._forget()
        super().released_by_store()

    def _finish(self) -> None:
        self.stop_renewals()
        self._free()


class _Interest:
    """How many threads wait for one session, and how many releases they were told of."""

    __slots__ = ("generation", "users")

    def __init__(self) -> None:
        self.users = 0
        self.generation = 0


class ReleaseListener:
    """``LISTEN``s on the store's channel on a thread of its own; wakes waiters of a released session.

    Started on the first wait (``start()``), stopped by ``close()``. If its
    connection breaks it reconnects with a backoff and then wakes every waiter
    (a release may have been missed); waiters re-check on a bounded timer anyway.
    """

    def __init__(self, connect: Callable[[], Any], channel: str) -> None:
        self._connect = connect
        self._channel = channel
        self._cond = threading.Condition()
        self._interests: dict[str, _Interest] = {}
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1

    @contextlib.contextmanager
    def interest(self, session_id: str) -> Iterator[_Interest]:
        """Register as a waiter for ``session_id`` while the block runs."""
        with self._cond:
            entry = self._interests.setdefault(session_id, _Interest())
            entry.users += 1
        try:
            yield entry
        finally:
            with self._cond:
                entry.users -= 1
                if entry.users == 0 and self._interests.get(session_id) is entry:
                    del self._interests[session_id]

    def wait(self, entry: _Interest, seen: int, timeout: float, signal: Any = None) -> None:
        """Wait until a release newer than ``seen`` is announced, ``signal`` (an
        ``AbortSignal``, woken by ``poke()``) is aborted, or ``timeout`` seconds."""
        with self._cond:
            self._cond.wait_for(
                lambda: (
                    entry.generation != seen
                    or self._stop.is_set()
                    or (signal is not None and signal.aborted)
                ),
                timeout,
            )

    def poke(self) -> None:
        """Wake the waiting threads to look at their signals."""
        with self._cond:
            self._cond.notify_all()

    def start(self, timeout: float) -> bool:
        """Start listening (once); whether ``LISTEN`` is in place within ``timeout`` seconds."""
        with self._cond:
            if self._thread is None and not self._stop.is_set():
                self._wake_r, self._wake_w = os.pipe()
                self._thread = threading.Thread(
                    target=self._run, name="lousho-postgres-listen", daemon=True
                )
                self._thread.start()
        return self._ready.wait(timeout)

    def close(self) -> None:
        """Stop the listening thread and close its connection; waiters re-check at once."""
        with self._cond:
            self._stop.set()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            os.write(self._wake_w, b"x")
            thread.join(_CLOSE_WAIT)  # it may be connecting to a hung server: not waited for
            if thread.is_alive():
                log.warning(
                    "the LISTEN thread did not stop within %.0f s; left behind", _CLOSE_WAIT
                )
                return  # its pipe stays open: the thread may still select on it
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _announce(self, session_id: str | None) -> None:
        with self._cond:
            for key, entry in self._interests.items():
                if session_id is None or key == session_id:
                    entry.generation += 1
            self._cond.notify_all()

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                conn = self._connect()
            except Exception as exc:
                log.warning("cannot open the LISTEN connection, retrying: %s", exc)
                if self._wait_stop(backoff):
                    return
                backoff = min(backoff * 2, 5.0)
                continue
            try:
                conn.execute(f'LISTEN "{self._channel}"')
                self._ready.set()
                backoff = 0.1
                self._announce(None)  # releases while not listening were missed
                self._listen(conn)
            except Exception as exc:
                if not self._stop.is_set():
                    log.warning("the LISTEN connection failed, reconnecting: %s", exc)
            finally:
                self._ready.clear()
                with contextlib.suppress(Exception):
                    conn.close()
            if self._wait_stop(backoff):
                return

    def _listen(self, conn: Any) -> None:
        fd = conn.fileno()
        while not self._stop.is_set():
            readable, _, _ = select.select([fd, self._wake_r], [], [])
            if self._wake_r in readable:
                return
            for note in conn.notifies(timeout=0):
                self._announce(note.payload)

    def _wait_stop(self, seconds: float) -> bool:
        with self._cond:
            return self._cond.wait_for(self._stop.is_set, seconds)


class WokenBy:
    """While its block runs, aborting ``signal`` wakes the threads waiting for a release, from
    ``arm()`` on: called before each wait (the wait checks ``signal`` first), so a lease
    taken at the first try registers nothing."""

    __slots__ = ("listener", "remove", "signal")

    def __init__(self, listener: ReleaseListener, signal: Any) -> None:
        self.listener = listener
        self.signal = signal
        self.remove: Callable[[], None] | None = None

    def __enter__(self) -> WokenBy:
        return self

    def arm(self) -> None:
        if self.remove is None and self.signal is not None:
            listener = self.listener
            self.remove = self.signal.add_callback(lambda s: listener.poke())

    def __exit__(self, *exc: object) -> None:
        if self.remove is not None:
            self.remove()
