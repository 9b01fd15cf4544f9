"""What a blocking call does with the turn it queued: link its signal, wait with a timeout, stop it."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..abort import AbortController, AbortSignal
from ..results import ExecutionResult

__all__ = ["Stop", "Stoppable", "chain", "linked", "saved", "wait"]

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

    __slots__ = ("future", "start", "stop")

    def __init__(
        self, future: Future[Any], stop: Stop | None, start: Callable[[], None] | None = None
    ) -> None:
        self.future = future
        self.stop = stop  # None: a turn joined, stopped by its own caller
        self.start = start  # queues the turn (in ``wait``); None: queued already

    def __call__(self) -> Any:
        return self.wait(None)

    def wait(self, timeout: float | None) -> Any:
        return wait(self.future, self.stop, timeout, self.start)

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
