"""The session worker: one thread per live (store, session id), fed by a queue.

Jobs run one after another in submission order. A worker whose queue stays
empty for ``IDLE_SECONDS`` removes itself from the registry and its thread ends,
so 10,000 sessions that are not in use hold no threads. The next submission
starts a new one.
"""

from __future__ import annotations

import collections
import contextvars
import logging
import threading
from collections.abc import Callable, Generator, Hashable
from concurrent.futures import Future
from typing import Any, TypeVar

__all__ = [
    "IDLE_SECONDS",
    "Job",
    "Steps",
    "Worker",
    "drive",
    "inside",
    "submit",
    "withdraw",
    "worker_for",
]

T = TypeVar("T")

#: A call made of several waits: it yields a ``Future`` (awaited) or a blocking
#: callable (called off the event loop by ``aio``) and gets its result back.
#: ``drive`` runs one on the calling thread; ``aio`` awaits the same generator.
Steps = Generator["Future[Any] | Callable[[], Any]", Any, T]

log = logging.getLogger("lousho_sessions.worker")

#: How long an idle worker thread waits for more work before it ends.
IDLE_SECONDS = 2.0

_registry: dict[Hashable, Worker] = {}
_registry_lock = threading.Lock()
#: The keys of the workers whose job this code runs in (tools on pool threads inherit it).
_inside: contextvars.ContextVar[frozenset[Hashable]] = contextvars.ContextVar(
    "lousho_worker_keys", default=frozenset()
)


class Job:
    """A unit of work for a worker; ``future`` gets its result or error."""

    __slots__ = ("fn", "future", "kind", "state")

    def __init__(self, fn: Callable[[Job], Any], kind: str = "turn", state: Any = None) -> None:
        self.fn = fn
        self.kind = kind
        self.state = state
        self.future: Future[Any] = Future()

    def run(self, key: Hashable = None) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        token = _inside.set(_inside.get() | {key})
        try:
            result = self.fn(self)
        except BaseException as exc:
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)
        finally:
            _inside.reset(token)


class Worker:
    """Runs the jobs of one session in order on its own thread."""

    def __init__(self, key: Hashable, owner: Any = None) -> None:
        self.key = key
        self.owner = owner  # keeps the store alive while its key is registered
        self._cond = threading.Condition()
        self._queue: collections.deque[Job] = collections.deque()
        self._thread: threading.Thread | None = None
        self.current: Job | None = None
        self._stop = False

    @property
    def thread(self) -> threading.Thread | None:
        return self._thread

    def busy(self) -> bool:
        with self._cond:
            # a job whose result is out is done, though its thread may not have cleared ``current`` yet
            running = self.current is not None and not self.current.future.done()
            return running or bool(self._queue)

    def jobs(self) -> list[Job]:
        """The running job (first) and the waiting ones, in order."""
        with self._cond:
            return ([self.current] if self.current is not None else []) + list(self._queue)

    def _submit(self, job: Job) -> None:
        with self._cond:
            self._queue.append(job)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop, name=f"lousho-session-{self.key!r}"[:60], daemon=True
                )
                self._thread.start()
            else:
                self._cond.notify()

    def stop_when_idle(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()

    def _loop(self) -> None:
        while True:
            with self._cond:
                if not self._queue:
                    self._cond.wait(0 if self._stop else IDLE_SECONDS)
                if not self._queue:
                    if self._retire():
                        return
                    continue
                job = self._queue.popleft()
                self.current = job
            try:
                job.run(self.key)
            except BaseException:  # job.run stores errors in the future; this is a bug guard
                log.exception("session worker job failed")
            finally:
                with self._cond:
                    self.current = None

    def _retire(self) -> bool:
        """Leave the registry if still idle (called holding ``_cond``)."""
        self._cond.release()
        try:
            with _registry_lock, self._cond:
                if self._queue:
                    return False
                if _registry.get(self.key) is self:
                    del _registry[self.key]
                self._thread = None
                return True
        finally:
            self._cond.acquire()


def inside(key: Hashable) -> bool:
    """True when called from a job of the worker for ``key`` (or a tool thread it started).

    Such a caller must not wait for another job of that worker: it would wait for itself.
    """
    return key in _inside.get()


def withdraw(key: Hashable, job: Job) -> bool:
    """Take ``job`` out of its worker's queue if it has not started; True if it was taken.

    A withdrawn job never runs; its caller settles ``job.future`` itself.
    """
    worker = worker_for(key)
    if worker is None:
        return False
    with worker._cond:
        try:
            worker._queue.remove(job)
        except ValueError:
            return False
        return True


def worker_for(key: Hashable) -> Worker | None:
    """The live worker for ``key``, if any."""
    with _registry_lock:
        return _registry.get(key)


def submit(key: Hashable, job: Job, owner: Any = None) -> Worker:
    """Queue ``job`` on the worker for ``key``, starting one if needed."""
    with _registry_lock:
        worker = _registry.get(key)
        if worker is None:
            worker = _registry[key] = Worker(key, owner)
        worker._submit(job)
    return worker


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
