"""Bounds on a PostgreSQL store's statements and checks of its idle connections.

A statement waits for the server's reply on a blocking socket. A hung server (a
stopped process, a proxy or load balancer that stopped forwarding) never replies
and never closes the socket, so the statement, and whatever waits for it (a lease
renewal, ``close()``), would wait forever: libpq has no timeout for a reply, and
a server-side ``statement_timeout`` needs a server that runs. ``Watchdog`` bounds
them from the client: a statement registers its connection with a deadline; one
thread, sleeping while none is registered, shuts the socket down (``shutdown(2)``
on a duplicate of its descriptor, which is safe while another thread reads it)
once the deadline passes; the read fails at once, libpq marks the connection
broken, the statement raises and the pool replaces the connection.
``cut_all()`` does the same for every registered statement (``close()``).

``idle_connection_dead`` tells, with no round trip, whether the server closed a
pooled connection while it sat idle (``idle_session_timeout``, a restart, a
failover, a PgBouncer ``client_idle_timeout``): such a server sends an error and
closes the socket, so an idle connection with anything to read is dead.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import threading
import time
from typing import Any

from psycopg import pq

__all__ = ["Watch", "Watchdog", "idle_connection_dead"]

log = logging.getLogger("lousho_sessions.stores.postgres")


def idle_connection_dead(conn: Any) -> bool:
    """Whether the idle pooled connection ``conn`` is broken or was closed by the server."""
    pgconn = conn.pgconn
    if conn.closed or pgconn.status != pq.ConnStatus.OK:
        return True
    try:
        poller = select.poll()
        poller.register(pgconn.socket, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))  # an idle connection is sent nothing but its end
    except Exception:  # no socket, or one poll() refuses: not usable
        return True


class Watch:
    """One statement under a deadline (``Watchdog.watch``); ``done()`` ends the watch."""

    __slots__ = ("deadline", "fd", "watchdog")

    def __init__(self, watchdog: Watchdog, fd: int, deadline: float) -> None:
        self.watchdog = watchdog
        self.fd = fd
        self.deadline = deadline

    def done(self) -> None:
        """The statement returned: its connection is not cut after this."""
        watchdog = self.watchdog
        with watchdog._lock:  # ``forget``, inlined: twice a statement
            watchdog._watches.discard(self)


class Watchdog:
    """Cuts the connection of each statement still running past its deadline (see the module)."""

    def __init__(self, name: str) -> None:
        self.name = name
        # the Condition's own lock, taken directly on the statements' path (a ``with`` on the
        # Condition is two Python calls more, twice a statement)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._watches: set[Watch] = set()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._stopped = False
        #: when the sleeping thread wakes next by itself (inf: only when told)
        self._wake_at = float("inf")

    def watch(self, conn: Any, seconds: float | None) -> Watch | None:
        """Watch ``conn``'s next statement for ``seconds`` (``None``: unbounded, no watch)."""
        if seconds is None:
            return None
        entry = Watch(self, conn.pgconn.socket, time.monotonic() + seconds)
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._pid, self._thread, self._watches = os.getpid(), None, set()
            self._watches.add(entry)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            elif entry.deadline < self._wake_at:
                self._cond.notify_all()
        return entry

    def forget(self, entry: Watch) -> None:
        with self._lock:
            self._watches.discard(entry)

    def cut_all(self) -> None:
        """Cut every watched statement's connection now and stop the thread (``close()``)."""
        with self._cond:
            self._stopped = True
            for entry in self._watches:
                _cut(entry.fd)
            self._watches.clear()
            self._cond.notify_all()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                for entry in [w for w in self._watches if w.deadline <= now]:
                    log.warning(
                        "a statement got no reply within its bound: its connection is cut "
                        "(a hung server, or a proxy that stopped forwarding?)"
                    )
                    _cut(entry.fd)  # under the lock: the statement cannot return meanwhile
                    self._watches.discard(entry)
                nearest = min((w.deadline for w in self._watches), default=None)
                self._wake_at = float("inf") if nearest is None else nearest
                self._cond.wait(None if nearest is None else max(nearest - now, 0.001))
                self._wake_at = 0.0  # awake: it looks at every watch before sleeping again


def _cut(fd: int) -> None:
    """Shut down the socket ``fd`` (both ways) without closing the descriptor its owner holds."""
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        sock.close()
