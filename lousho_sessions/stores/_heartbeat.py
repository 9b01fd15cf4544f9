"""One heartbeat thread per store, renewing every lease it holds when each falls due.

A turn's lease must be renewed while the turn runs (a model call may take
minutes). Starting a thread per lease put two thread hand-offs on every turn
(``start()`` waits for the new thread to run, ``release()`` joins it), each a
wake-up of a sleeping thread: on a loaded machine hundreds of µs. So a store
keeps one daemon thread, started on the first lease, that calls each registered
``beat`` every ``interval`` seconds; taking and releasing a lease only adds and
removes an entry under a lock.

``beat()`` returns whether to go on (``False``: the lease is lost or ended, drop
it). The heartbeat thread only finds the beats due and hands each to a small pool
of worker threads, so a renewal blocked on a hung connection delays no other
lease's renewal (one lease's beats never overlap). A beat must still bound its own
blocking (the stores' calls have timeouts) and judge lateness by its own clock
readings, as the leases do (lost after ``ttl`` without a successful renewal).
``remove()`` waits for a beat of that entry in progress to finish, so once it
returns no renewal of that lease can reach the server after the release;
``close()`` waits for none.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from .lease import Lease

__all__ = ["Beat", "Heartbeat", "RenewedLease"]

T = TypeVar("T")

#: How many renewals of one store may run at once (each is a short, bounded statement).
_WORKERS = 8

log = logging.getLogger("lousho_sessions.stores")


class Beat:
    """One registered renewal: ``beat`` every ``interval`` seconds until removed or it says stop."""

    __slots__ = ("beat", "due", "interval", "removed", "runner", "running")

    def __init__(self, beat: Callable[[], bool], interval: float) -> None:
        self.beat = beat
        self.interval = interval
        self.due = time.monotonic() + interval
        self.running = False
        self.removed = False
        self.runner = 0  # the thread running the beat now (its ident)


class Heartbeat:
    """The heartbeat thread of one store (``name`` names the thread)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._cond = threading.Condition()
        self._beats: list[Beat] = []
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._stopped = False
        #: when the sleeping thread wakes next (0: it is awake and will look at the entries)
        self._sleep_until = 0.0
        #: beats handed to the worker threads (``None``: a worker's signal to end)
        self._queue: queue.SimpleQueue[Beat | None] = queue.SimpleQueue()
        self._workers = 0  # worker threads started
        self._idle = 0  # of them, not running a beat
        self._backlog = 0  # beats handed over, not yet taken by a worker

    def add(self, beat: Callable[[], bool], interval: float) -> Beat:
        """Call ``beat`` every ``interval`` seconds from the heartbeat thread, starting then."""
        entry = Beat(beat, interval)
        with self._cond:
            if self._pid != os.getpid():  # a forked child: the parent's threads are not here
                self._pid, self._thread, self._beats = os.getpid(), None, []
                self._queue, self._workers, self._idle, self._backlog = queue.SimpleQueue(), 0, 0, 0
            self._beats.append(entry)
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            elif entry.due < self._sleep_until:  # else the thread wakes in time by itself
                self._cond.notify_all()
        return entry

    def remove(self, entry: Beat) -> None:
        """Stop ``entry``; waits for a beat of it in progress (unless called from that beat)."""
        with self._cond:
            entry.removed = True
            self._cond.wait_for(lambda: not entry.running or self._in_beat(entry))
            if entry in self._beats:
                self._beats.remove(entry)

    def close(self) -> None:
        """Stop the threads (entries left are dropped); renewals in progress are not waited for."""
        with self._cond:
            self._stopped = True
            self._beats = []
            self._cond.notify_all()
            thread, workers = self._thread, self._workers
        if thread is not None and thread is not threading.current_thread():
            thread.join()  # it never waits for a beat
        for _ in range(workers):
            self._queue.put(None)

    def _in_beat(self, entry: Beat) -> bool:
        return entry.runner == threading.get_ident()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    now = time.monotonic()
                    due = [
                        b for b in self._beats if b.due <= now and not b.removed and not b.running
                    ]
                    if due:
                        break
                    waiting = [b.due for b in self._beats if not b.running]
                    wait = max(min(waiting, default=now + 3600.0) - now, 0.0)
                    self._sleep_until = now + wait
                    self._cond.wait(wait)
                    self._sleep_until = 0.0
                for entry in due:
                    entry.running = True
                    self._backlog += 1
                    if self._backlog > self._idle and self._workers < _WORKERS:
                        self._workers += 1
                        self._idle += 1
                        name = f"{self.name}-{self._workers}"
                        threading.Thread(target=self._work, name=name, daemon=True).start()
                    self._queue.put(entry)

    def _work(self) -> None:
        """A worker thread: runs the beats handed to it, one at a time."""
        while True:
            entry = self._queue.get()
            if entry is None:
                return
            with self._cond:
                self._backlog -= 1
                self._idle -= 1
            go_on = False
            entry.runner = threading.get_ident()
            try:
                if not entry.removed:
                    go_on = entry.beat()
            except Exception:  # a beat handles its own errors; this one is a bug
                log.exception("%s: a lease renewal failed unexpectedly", self.name)
            with self._cond:
                entry.runner = 0
                entry.running = False
                entry.due = time.monotonic() + entry.interval
                if not go_on and entry in self._beats:
                    self._beats.remove(entry)
                self._idle += 1
                self._cond.notify_all()


class RenewedLease(Lease):
    """A lease its store's ``Heartbeat`` renews: ``_beat()`` every ``interval`` seconds from
    construction until it is released (the subclass's release calls ``stop_renewals()``)
    or a beat says stop. ``freed_by(write)`` runs a write that frees the lease on the
    server (a turn's commit: ``commit_turn(CommitTurn(release=))``)."""

    def __init__(
        self,
        session_id: str,
        fence: int,
        release: Callable[[], None],
        *,
        heartbeat: Heartbeat,
        interval: float,
    ) -> None:
        super().__init__(session_id, fence, release)
        self._heartbeat = heartbeat
        self._interval = interval
        self._beat_entry = heartbeat.add(self._beat, interval)

    def _beat(self) -> bool:
        """One renewal; whether to go on renewing."""
        raise NotImplementedError

    def stop_renewals(self) -> None:
        """Stop renewing; waits for a renewal in progress, so none reaches the server after."""
        self._heartbeat.remove(self._beat_entry)

    def freed_by(self, write: Callable[[], T]) -> T:
        """Run ``write``, which frees the lease on the server when it lands: the renewals
        stop first and start again if ``write`` raises (a refused write frees nothing);
        once it returns, the lease is released (its own ``release()`` does nothing)."""
        self.stop_renewals()
        try:
            result = write()
        except BaseException:
            if not self.lost:
                self._beat_entry = self._heartbeat.add(self._beat, self._interval)
            raise
        self.released_by_store()
        return result
