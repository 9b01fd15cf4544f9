"""Bounds on a PostgreSQL store's statements and checks of its idle connections.

A statement waits for the server's reply on a blocking socket. A hung server (a
stopped process, a proxy or load balancer that stopped forwarding) never replies
and never closes the socket, so the statement, and whatever waits for it (a lease
renewal, ``close()``), would wait forever: libpq has no timeout for a reply, and
a server-side ``statement_timeout`` needs a server that runs. ``Watchdog`` bounds
them from the client: a statement registers its connection with a deadline; one
thread shuts the socket down (``shutdown(2)`` on a duplicate of its descriptor,
which is safe while another thread reads it) once the deadline passes; the read
fails at once, libpq marks the connection broken, the statement raises and the
pool replaces the connection. ``cut_all()`` does the same for every registered
statement (``close()``). The thread sleeps until the nearest deadline it saw (a
statement that returned is not looked at until then), so statements one after
another wake it about once a bound, not once each; with nothing watched it looks again
after ``IDLE_LOOK`` seconds, so that a statement registered meanwhile with a later
deadline need not wake it (when the thread is slow to run, each short statement would
have returned before it looked, and every next one would have woken it).

``idle_connection_dead`` tells, with no round trip, whether the server closed a
pooled connection while it sat idle (``idle_session_timeout``, a restart, a
failover, a PgBouncer ``client_idle_timeout``): such a server sends an error and
closes the socket, so an idle connection with anything to read is dead.
"""

from __future__ import annotations

import itertools
import logging
import os
import select
import socket
import threading
import time
from typing import Any

from psycopg import pq

__all__ = ["Watchdog", "idle_connection_dead"]

log = logging.getLogger("lousho_sessions.stores.postgres")

#: seconds the thread sleeps with no statement watched before it looks again
IDLE_LOOK = 1.0

_OK = pq.ConnStatus.OK


def idle_connection_dead(conn: Any) -> bool:
    """Whether the idle pooled connection ``conn`` is broken or was closed by the server."""
    pgconn = conn.pgconn
    if pgconn.status != _OK:  # a closed connection's is BAD (``conn.closed`` reads the same)
        return True
    try:
        fd, poller = conn.__dict__.get("_lousho_poll") or (None, None)
        if fd != pgconn.socket or poller is None:  # made once a connection (and socket)
            fd, poller = pgconn.socket, select.poll()
            poller.register(fd, select.POLLIN | select.POLLPRI)
            conn.__dict__["_lousho_poll"] = (fd, poller)
        return bool(poller.poll(0))  # an idle connection is sent nothing but its end
    except Exception:  # no socket, or one poll() refuses: not usable
        return True


class Watchdog:
    """Cuts the connection of each statement still running past its deadline (see the module)."""

    def __init__(self, name: str) -> None:
        self.name = name
        # the Condition's own lock, taken directly on the statements' path (a ``with`` on the
        # Condition is two Python calls more, twice a statement)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        #: the statements watched: a ticket (``watch()``'s answer) -> (socket, deadline)
        self._watches: dict[int, tuple[int, float]] = {}
        self._tickets = itertools.count()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._stopped = False
        #: when the sleeping thread wakes next by itself (0.0: it is awake or starting)
        self._wake_at = float("inf")

    def watch(self, conn: Any, seconds: float | None) -> int | None:
        """Watch ``conn``'s next statement for ``seconds`` (``None``: unbounded, no watch); the
        ticket to give ``done()`` when it returns."""
        if seconds is None:
            return None
        deadline = time.monotonic() + seconds
        ticket = next(self._tickets)
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's thread is not here
                self._pid, self._thread, self._watches = os.getpid(), None, {}
            self._watches[ticket] = (conn.pgconn.socket, deadline)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._wake_at = 0.0  # it looks at every watch once it runs
                self._thread.start()
            elif deadline < self._wake_at:
                self._cond.notify_all()
        return ticket

    def done(self, ticket: int | None) -> None:
        """The statement of ``ticket`` returned: its connection is not cut after this."""
        if ticket is not None:
            with self._lock:
                self._watches.pop(ticket, None)

    def cut_all(self) -> None:
        """Cut every watched statement's connection now and stop the thread (``close()``)."""
        with self._cond:
            self._stopped = True
            for fd, _ in self._watches.values():
                _cut(fd)
            self._watches.clear()
            self._cond.notify_all()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                now = time.monotonic()
                late = [t for t, (_, deadline) in self._watches.items() if deadline <= now]
                for ticket in late:
                    log.warning(
                        "a statement got no reply within its bound: its connection is cut "
                        "(a hung server, or a proxy that stopped forwarding?)"
                    )
                    _cut(self._watches.pop(ticket)[0])  # under the lock: it cannot return now
                nearest = min((deadline for _, deadline in self._watches.values()), default=None)
                self._wake_at = now + IDLE_LOOK if nearest is None else nearest
                self._cond.wait(max(self._wake_at - now, 0.001))
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
