"""What a blocking call does with the turn it queued: link its signal, wait with a timeout, stop it."""

from __future__ import annotations

import _thread
import logging
import signal
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from .._signals import getsignal as _getsignal
from .._signals import setsignal as _setsignal
from ..abort import AbortController, AbortSignal
from ..results import ExecutionResult

__all__ = ["Stop", "Stoppable", "chain", "linked", "run_here", "saved", "wait"]

log = logging.getLogger("lousho_sessions.worker")

#: Stops a queued or running turn, given the reason.
Stop = Callable[[Any], None]


def linked(signal: AbortSignal | None) -> AbortController:
    """A controller of this call's own, aborted when ``signal`` is."""
    controller = AbortController()
    if signal is not None:
        signal.add_callback(lambda s: controller.abort(s.reason))
    return controller


def wait(
    future: Future[Any],
    stop: Stop | None,
    timeout: float | None,
    start: Callable[[], None] | None = None,
) -> Any:
    """The turn's result. After ``timeout`` s: stop it and return what it ended with ("aborted",
    or its result if it was saved first); ``TimeoutError`` if it does not stop within as long again.

    A ``KeyboardInterrupt`` (Ctrl-C, a Jupyter interrupt) while waiting stops the turn, waits
    for it to end and raises again, unless the turn was saved first: then its result is
    returned (what the store holds is what you are told). A second interrupt while the
    stopped turn ends raises at once.

    ``start`` queues the turn, called here so that an interrupt arriving at any point after
    it is queued (even before ``future.result`` is reached) stops it: one that came between
    queueing and waiting would leave the turn running with nobody waiting for it, its result
    saved though the caller was told it was interrupted. ``stop`` must settle ``future`` for
    a turn that was never queued (``Workers.withdraw`` answers True for it).
    """
    try:
        try:
            if start is not None:
                start()
            return future.result(timeout)
        except FutureTimeout:
            if stop is None:
                raise TimeoutError(f"no result within {timeout} s") from None
        stop("timeout")
        try:
            return future.result(timeout)
        except FutureTimeout:
            raise TimeoutError(
                f"no result within {timeout} s, and the turn did not stop within {timeout} s of "
                "being aborted (a model call or tool that ignores its signal); it may still be "
                "saved: see load() and pending()"
            ) from None
    except KeyboardInterrupt:
        if stop is None:
            raise
        stop("interrupted")
        if not _saved(future):
            raise
        return future.result()


def run_here(future: Future[Any], stop: Stop, here: Callable[[], bool]) -> Any:
    """The turn's result, run on this thread by ``here()`` when its lane is idle (queued
    and waited for as ``wait`` does when it is not: ``here()`` answers False). Only where
    ``can_run_here()``.

    On the main thread a Ctrl-C must not land inside the turn's own code: while it runs,
    SIGINT's handler (Python's default one, see ``can_run_here``) is replaced by one that
    stops the turn from a thread of its own, as ``wait`` does, and the call then raises
    ``KeyboardInterrupt`` unless the turn was saved first (its result is returned); a
    second Ctrl-C raises at once, inside the turn (which unwinds as after any exception)."""
    if threading.current_thread() is not threading.main_thread():
        return future.result() if here() else wait(future, stop, None)
    interrupts = 0

    def interrupted(signum: int, frame: Any) -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts > 1:
            raise KeyboardInterrupt
        # not here: the turn's code holds whatever it holds (a thread of threading's own
        # would need threading's locks, which that code may hold too)
        _thread.start_new_thread(_stop_quietly, (stop,))

    previous = _setsignal(signal.SIGINT, interrupted)
    try:
        ran = here()
    finally:
        _setsignal(signal.SIGINT, previous)
    if not ran:
        result = wait(future, stop, None)  # queued behind another: Ctrl-C as ``wait`` has it
        if not interrupts:
            return result
    if interrupts and not _saved(future):
        raise KeyboardInterrupt
    return future.result()


def can_run_here() -> bool:
    """Whether a blocking call may run its turn on this thread (see ``run_here``): any
    thread but the main one, and the main one while SIGINT has Python's default handler
    (with another handler, the application's own, the turn goes to a worker thread as
    before, so that handler sees the signal where it always did)."""
    if threading.current_thread() is not threading.main_thread():
        return True
    return _getsignal(signal.SIGINT) is signal.default_int_handler


def _stop_quietly(stop: Stop) -> None:
    try:
        stop("interrupted")
    except BaseException:  # pragma: no cover - nobody to raise it to on this thread
        log.exception("could not stop the interrupted turn")


def saved(result: object) -> bool:
    """Whether what a stopped turn ended with was saved: a result, not "aborted" (``None``:
    no turn ran). A caller stopped by Ctrl-C or a cancelled task is given it after all."""
    return isinstance(result, ExecutionResult) and result.finish_reason != "aborted"


def _saved(future: Future[Any]) -> bool:
    """Wait for a stopped turn to end; True if it ended saved (not aborted, failed or absent)."""
    try:
        result = future.result()
    except Exception:
        return False
    return saved(result)


class Stoppable:
    """A step of a ``_worker.Steps`` call: a turn's Future and what stops it.

    Called (``_worker.drive``), it queues the turn and waits as ``wait`` does, so Ctrl-C stops
    the turn; ``aio`` queues it, awaits ``future`` and stops the turn when the awaiting task is
    cancelled. Each blocking call makes one (``SessionLane.call``).
    """

    __slots__ = ("future", "here", "start", "stop")

    def __init__(
        self,
        future: Future[Any],
        stop: Stop | None,
        start: Callable[[], None] | None = None,
        here: Callable[[], bool] | None = None,
    ) -> None:
        self.future = future
        self.stop = stop  # None: a turn joined, stopped by its own caller
        self.start = start  # queues the turn (in ``wait``); None: queued already
        #: runs the turn on the waiting thread when its lane is idle (``run_here``)
        self.here = here

    def __call__(self) -> Any:
        return self.wait(None)

    def wait(self, timeout: float | None) -> Any:
        here, stop = self.here, self.stop
        if here and stop and timeout is None and self.start is not None and can_run_here():
            return run_here(self.future, stop, here)
        return wait(self.future, stop, timeout, self.start)

    def queued(self) -> tuple[Future[Any], Stop | None]:
        """Queue the turn now (for a caller Ctrl-C does not interrupt: aio)."""
        if self.start is not None:
            self.start()
        return self.future, self.stop


def chain(source: Future[Any], target: Future[Any]) -> None:
    """Give ``target`` the outcome of ``source`` (a done callback), unless it has one."""
    if target.done():
        return
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())
