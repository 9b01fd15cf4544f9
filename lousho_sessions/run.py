"""``AgentRun``: a streamed turn. Iterate it for events; ``result()`` for the outcome."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Generic

from .abort import AbortController
from .events import Event, RunDone
from .inputs import Input
from .results import ExecutionResult, OutputT

__all__ = ["AgentRun"]

_END = object()


class AgentRun(Generic[OutputT]):
    """A running (or finished) turn, streamed as typed events.

    Iterate it once: events come in order and end with ``run.done``. Leaving the
    loop early (``break``, an exception, leaving the ``with`` block) aborts the
    run unless it had already finished — then it is saved as usual.
    """

    def __init__(
        self,
        run_id: str,
        future: Future[ExecutionResult | None],
        controller: AbortController,
        join: Callable[[Any, bool], str] | None = None,
        stop: Callable[[Any], None] | None = None,
    ) -> None:
        self.id = run_id
        self._future = future
        self._controller = controller
        self._stop = stop or controller.abort
        self._events: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._join = join
        self._iterated = False
        self._finished = False
        self._sink: Callable[[Event], None] | None = None
        self._sink_lock = threading.Lock()

    # the sink the worker calls; must never block
    def _push(self, event: Event) -> None:
        if isinstance(event, RunDone):
            self._finished = True
        with self._sink_lock:
            if self._sink is not None:
                self._sink(event)
                return
            self._events.put(event)
        if isinstance(event, RunDone):
            self._events.put(_END)

    def _deliver_to(self, sink: Callable[[Event], None]) -> None:
        """Hand every event (those so far, in order, then the rest) to ``sink`` instead of iteration.

        ``sink`` is called on the worker thread and must not block (``aio`` uses it).
        """
        with self._sink_lock:
            if self._iterated:
                raise RuntimeError(f"run {self.id} was iterated already; events are delivered once")
            self._iterated = True
            while True:
                try:
                    item = self._events.get_nowait()
                except queue.Empty:
                    break
                if item is not _END:
                    sink(item)
            self._sink = sink

    @property
    def done(self) -> bool:
        """True once the turn has ended (its result is set)."""
        return self._future.done()

    def __iter__(self) -> Iterator[Event]:
        if self._iterated:
            raise RuntimeError(f"run {self.id} was iterated already; events are delivered once")
        self._iterated = True
        return self._iterate()

    def _iterate(self) -> Iterator[Event]:
        completed = False
        try:
            while True:
                item = self._events.get()
                if item is _END:
                    completed = True
                    return
                yield item
        finally:
            if not completed and not self._finished:
                self.abort("stream closed")

    def result(self, timeout: float | None = None) -> ExecutionResult[OutputT]:
        """Wait for the turn's result; raises the turn's error, or ``TimeoutError``."""
        result = self._future.result(timeout)
        if result is None:  # only resume() runs have no result; a stream always has one
            raise RuntimeError(f"run {self.id} has no result")
        return result

    def abort(self, reason: Any = None) -> None:
        """Abort the turn (nothing happens if it has finished).

        A turn still queued behind another ends "aborted" at once, without running.
        """
        self._stop(reason)

    def enqueue(self, input: Input) -> str:
        """Add input to this turn after the current step's tool results; returns its input id."""
        return self._join_input(input, steer=False)

    def steer(self, input: Input) -> str:
        """Like ``enqueue``, but remakes a model call that has not said anything yet."""
        return self._join_input(input, steer=True)

    def _join_input(self, input: Any, steer: bool) -> str:
        if self._join is None:
            raise RuntimeError(f"run {self.id} takes no more input")
        return self._join(input, steer)

    def __enter__(self) -> AgentRun[OutputT]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self._finished and not self._future.done():
            self.abort("stream closed")

    def __repr__(self) -> str:
        return f"<AgentRun {self.id} done={self.done}>"
