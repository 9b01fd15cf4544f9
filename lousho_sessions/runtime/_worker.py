"""The worker threads of one agent: each key's jobs in order, on threads it owns.

A *lane* is the queue of one key (a session in a store, or one single send).
Its jobs run one after another in submission order, never two at once. Threads
are not tied to lanes: a thread takes a lane that has work, runs its jobs until
the queue is empty, then takes the next lane or waits; a thread that waits
``IDLE_SECONDS`` with nothing to do ends. So 10,000 quiet sessions hold no
threads, a stream of single sends reuses the same few threads, and a burst of
new sessions starts threads as they are needed.

Threads are started by a *starter* thread, never by the caller: ``Thread.start()``
waits until the new thread runs, which under load (thousands of live threads
contending for the GIL) takes milliseconds, and an asyncio loop that queued a
turn would wait with it. ``Workers.close()`` lets queued work finish, then
joins every thread; a later ``submit`` starts threads again.
"""

from __future__ import annotations

import collections
import contextvars
import logging
import threading
import time
from collections.abc import Callable, Generator, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = ["IDLE_SECONDS", "Job", "Lane", "Steps", "Workers", "drive", "inside"]

T = TypeVar("T")

#: A call made of several waits: it yields a ``Future`` (awaited) or a blocking
#: callable (called off the event loop by ``aio``) and gets its result back.
#: ``drive`` runs one on the calling thread; ``aio`` awaits the same generator.
Steps = Generator["Future[Any] | Callable[[], Any]", Any, T]

log = logging.getLogger("lousho_sessions.worker")

#: How long an idle worker thread waits for more work before it ends.
IDLE_SECONDS = 2.0

#: The keys of the lanes whose job this code runs in (tools on pool threads inherit it).
_inside: contextvars.ContextVar[frozenset[Hashable]] = contextvars.ContextVar(
    "lousho_worker_keys", default=frozenset()
)


class Job:
    """A unit of work for a lane; ``future`` gets its result or error.

    It runs in a copy of the context variables of the thread that made it (the caller
    of ``send()``, or the task of an aio call), so request ids and auth set by the
    caller's middleware are seen by the turn, its tools and its model calls.
    """

    __slots__ = ("context", "fn", "future", "kind", "state", "withdrawn")

    def __init__(self, fn: Callable[[Job], Any], kind: str = "turn", state: Any = None) -> None:
        self.fn = fn
        self.withdrawn = False  # by ``Workers.withdraw``: it never runs
        self.kind = kind
        self.state = state
        self.future: Future[Any] = Future()
        self.context = contextvars.copy_context()

    def run(self, key: Hashable = None) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        self.context.run(self._run, key)

    def _run(self, key: Hashable) -> None:
        _inside.set(_inside.get() | {key})  # in the job's own context: gone when it ends
        try:
            result = self.fn(self)
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


class Lane:
    """The queue of one key. Guarded by its ``Workers``' lock."""

    __slots__ = ("current", "key", "owner", "queue", "retire", "scheduled", "thread")

    def __init__(self, key: Hashable, owner: Any) -> None:
        self.key = key
        self.owner = owner  # keeps the store alive while its key has work
        self.queue: collections.deque[Job] = collections.deque()
        self.current: Job | None = None
        self.thread: threading.Thread | None = None  # the thread running its jobs now
        self.scheduled = False  # waiting for a thread, or being run by one
        self.retire = False  # the thread that runs it ends when it is done (Session.close)


class Workers:
    """Runs the jobs of each key in order on threads this object starts, owns and joins."""

    def __init__(self, name: str = "lousho-session") -> None:
        self._name = name
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)  # threads wait here for a lane
        self._spawn = threading.Condition(self._lock)  # the starter waits here
        self._lanes: dict[Hashable, Lane] = {}
        self._ready: collections.deque[Lane] = collections.deque()
        self._idle = 0  # threads waiting for a lane
        self._coming = 0  # threads asked for and not yet waiting or working
        self._to_start = 0  # threads the starter has still to start
        self._threads: set[threading.Thread] = set()
        self._starter: threading.Thread | None = None
        self._generation = 0  # close() ends the threads of earlier generations once idle
        self._inline = 0  # jobs running on their callers' threads (``run_here``)
        self._inline_done = threading.Condition(self._lock)

    # -- callers ----------------------------------------------------------------

    def submit(self, key: Hashable, job: Job, owner: Any = None) -> None:
        """Queue ``job`` on the lane of ``key``; never starts a thread on this thread."""
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                lane = self._lanes[key] = Lane(key, owner)
            lane.queue.append(job)
            starter = self._schedule(lane) if not lane.scheduled else None
        if starter is not None:
            starter.start()  # once per burst, outside the lock

    def run_here(self, key: Hashable, job: Job, owner: Any = None) -> bool:
        """Run ``job`` on this thread, now, if the lane of ``key`` has nothing running or
        waiting (no handoff to a worker thread and back: two thread wake-ups less a call);
        True once it ran (or was withdrawn first). Else queue it (``submit``) and answer
        False. Jobs queued behind it meanwhile go to the worker threads when it ends."""
        with self._lock:
            if job.withdrawn:
                return True
            busy = key in self._lanes
            if not busy:
                lane = self._lanes[key] = Lane(key, owner)
                lane.scheduled = True
                lane.thread, lane.current = threading.current_thread(), job
                self._inline += 1
        if busy:
            self.submit(key, job, owner)
            return False
        starter = None
        try:
            job.run(key)
        finally:
            with self._lock:
                lane.current = lane.thread = None
                lane.scheduled = False
                self._inline -= 1
                self._inline_done.notify_all()
                if lane.queue:  # sent while it ran: the workers take them in order
                    starter = self._schedule(lane)
                elif self._lanes.get(key) is lane:
                    del self._lanes[key]
            if starter is not None:
                starter.start()
        return True

    def _schedule(self, lane: Lane) -> threading.Thread | None:
        """Holding the lock: put ``lane`` in line for a thread, asking for one if none is
        idle; the starter thread to start (outside the lock) when there is none yet."""
        lane.scheduled = True
        self._ready.append(lane)
        if len(self._ready) <= self._idle + self._coming:
            self._work.notify()
            return None
        self._coming += 1
        self._to_start += 1
        if self._starter is not None:
            self._spawn.notify()
            return None
        self._starter = threading.Thread(
            target=self._start_threads, name=f"{self._name}-starter", daemon=True
        )
        return self._starter

    def withdraw(self, key: Hashable, job: Job) -> bool:
        """Take ``job`` out of its lane if it has not started; True if it will never run:
        taken out, or never queued (a Ctrl-C on the caller's thread before ``submit`` queued it).

        A withdrawn job never runs; its caller settles ``job.future`` itself.
        """
        with self._lock:
            if job.withdrawn:
                return False  # once
            lane = self._lanes.get(key)
            if lane is not None and lane.current is job:
                return False
            if lane is not None and job in lane.queue:
                lane.queue.remove(job)
            elif job.future.running() or job.future.done():
                return False  # it ran (a thread takes a job out of the queue to run it)
            job.withdrawn = True
            return True

    def jobs(self, key: Hashable) -> list[Job]:
        """The running job of ``key`` (first) and the waiting ones, in order."""
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None:
                return []
            return ([lane.current] if lane.current is not None else []) + list(lane.queue)

    def busy(self, key: Hashable) -> bool:
        """True while ``key`` has a job running or waiting, unless called from that job."""
        with self._lock:
            lane = self._lanes.get(key)
            if lane is None or lane.thread is threading.current_thread():
                return False
            # a job whose result is out is done, though its thread may not have cleared ``current``
            running = lane.current is not None and not lane.current.future.done()
            return running or bool(lane.queue)

    def thread_of(self, key: Hashable) -> threading.Thread | None:
        """The thread running the jobs of ``key`` now, if any."""
        with self._lock:
            lane = self._lanes.get(key)
            return lane.thread if lane is not None else None

    def retire(self, key: Hashable) -> None:
        """Let the thread running ``key`` end once its queue is empty, instead of waiting for more."""
        with self._lock:
            lane = self._lanes.get(key)
            if lane is not None:
                lane.retire = True

    def threads(self) -> list[threading.Thread]:
        """The threads alive now (for tests and diagnostics)."""
        with self._lock:
            return [t for t in (*self._threads, self._starter) if t is not None]

    def close(self, timeout: float | None = None) -> bool:
        """Let queued work finish, end every thread and join them; False if ``timeout`` ran out.

        Called from one of these threads (a tool), it does not wait for them. A later
        ``submit`` starts threads again.
        """
        with self._lock:
            self._generation += 1
            self._work.notify_all()
            self._spawn.notify_all()
        if _inside.get():  # one of our jobs: joining would wait for itself
            return False
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:  # jobs running on their callers' threads end first
            while self._inline:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._inline_done.wait(left)
        me = threading.current_thread()
        while True:
            threads = [t for t in self.threads() if t is not me and t.is_alive()]
            if not threads:
                return True
            for thread in threads:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                thread.join(left)
                if thread.is_alive():
                    return False

    # -- threads ----------------------------------------------------------------

    def _start_threads(self) -> None:
        """The starter: start the threads asked for; end after ``IDLE_SECONDS`` with none asked."""
        generation = self._generation
        with self._lock:
            while True:
                if not self._to_start:
                    idle = generation != self._generation or not self._spawn.wait(IDLE_SECONDS)
                    if idle and not self._to_start:
                        self._starter = None
                        return
                    continue
                self._to_start -= 1
                thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._threads.add(thread)
                self._lock.release()
                try:
                    thread.start()
                except BaseException:
                    log.exception("could not start a worker thread")
                    self._lock.acquire()
                    self._threads.discard(thread)
                    self._coming -= 1
                    continue
                self._lock.acquire()

    def _run(self) -> None:
        """A worker thread: run ready lanes; end when idle too long or after ``close()``."""
        me = threading.current_thread()
        generation = self._generation
        named: Hashable = None  # the key in this thread's name: renamed when it changes
        with self._lock:
            self._coming -= 1
            try:
                while True:
                    if self._ready:
                        lane = self._ready.popleft()
                        if lane.key != named:
                            me.name, named = f"{self._name}-{lane.key!r}"[:60], lane.key
                        if self._drain(lane, me):
                            return
                        continue
                    if generation != self._generation:
                        return
                    self._idle += 1
                    woken = self._work.wait(IDLE_SECONDS)
                    self._idle -= 1
                    if not woken and not self._ready:
                        return
            finally:
                self._threads.discard(me)

    def _drain(self, lane: Lane, me: threading.Thread) -> bool:
        """Run ``lane``'s jobs until its queue is empty (called holding the lock, which it
        releases around each job); True if this thread should end (``Session.close``)."""
        lane.thread = me
        while lane.queue:
            job = lane.current = lane.queue.popleft()
            self._lock.release()
            try:
                job.run(lane.key)
            except BaseException:  # job.run stores errors in the future; this is a bug guard
                log.exception("worker job failed")
            finally:
                self._lock.acquire()
                lane.current = None
        lane.thread, lane.scheduled = None, False
        if self._lanes.get(lane.key) is lane:
            del self._lanes[lane.key]
        return lane.retire


def inside(key: Hashable) -> bool:
    """True when called from a job of the lane ``key`` (or a tool thread it started).

    Such a caller must not wait for another job of that lane: it would wait for itself.
    """
    return key in _inside.get()


def drive(steps: Steps[T]) -> T:
    """Run ``steps`` on this thread: wait for each Future it yields, call each callable."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            result: T = stop.value
            return result
        try:
            value, error = (step.result() if isinstance(step, Future) else step()), None
        except BaseException as exc:
            value, error = None, exc
