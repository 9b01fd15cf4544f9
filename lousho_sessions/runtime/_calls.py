"""What a blocking call does with the turn it queued: link its signal, wait with a timeout, stop it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import Any

from ..abort import AbortController, AbortSignal
from ..events import ErrorEvent, Event, RunDone
from ..results import ExecutionResult
from ..run import AgentRun
from ._worker import Job, Workers

__all__ = [
    "Stop",
    "Stoppable",
    "announced",
    "chain",
    "emit_to",
    "joined_run",
    "linked",
    "stoppable",
    "wait",
]  # fmt: skip

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


def stoppable(
    workers: Workers, key: Any, job: Job, abort: Stop, skipped: Callable[[], Any], owner: Any
) -> Stoppable:
    """``job``, not yet queued (``Stoppable.start`` queues it on ``key``'s lane for ``owner``).
    Its stop calls ``abort(reason)`` (a running job ends at its next check); a job that never
    ran, still queued or never queued (Ctrl-C before ``wait`` queued it), is withdrawn and its
    future given ``skipped()``, so nothing waits for a job no thread will run."""

    def stop(reason: Any) -> None:
        abort(reason)
        if workers.withdraw(key, job):
            job.future.set_result(skipped())

    return Stoppable(job.future, stop, partial(workers.submit, key, job, owner))


def _saved(future: Future[Any]) -> bool:
    """Wait for a stopped turn to end; True if it ended saved (not aborted, failed or absent)."""
    try:
        result = future.result()
    except Exception:
        return False
    return isinstance(result, ExecutionResult) and result.finish_reason != "aborted"


class Stoppable:
    """A step of a ``_worker.Steps`` call: a turn's Future and what stops it.

    Called (``_worker.drive``), it queues the turn and waits as ``wait`` does, so Ctrl-C stops
    the turn; ``aio`` queues it, awaits ``future`` and stops the turn when the awaiting task is
    cancelled. Each blocking call makes one: ``Session._send_call`` and the like.
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


def emit_to(emit: Callable[[Event], None] | None, event: Event) -> None:
    if emit is not None:
        emit(event)


def announced(
    work: Callable[[], ExecutionResult | None],
    emit: Callable[[Event], None] | None,
    run_id: str,
) -> ExecutionResult | None:
    """Run ``work`` (a resumed turn) and end its stream: ``error`` then ``run.done`` if it
    raised, else ``run.done`` with its result (``finish_reason`` "none" when no turn was left)."""
    try:
        result = work()
    except BaseException as exc:
        emit_to(emit, ErrorEvent(run_id, exc))
        emit_to(emit, RunDone(run_id, "error", None))
        raise
    emit_to(emit, RunDone(run_id, result.finish_reason if result is not None else "none", result))
    return result


def chain(source: Future[Any], target: Future[Any]) -> None:
    """Give ``target`` the outcome of ``source`` (a done callback), unless it has one."""
    if target.done():
        return
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


def joined_run(future: Future[ExecutionResult | None]) -> AgentRun:
    """A stream that joined another turn: it yields only that turn's ``run.done``."""
    run = AgentRun("run-" + uuid.uuid4().hex, future, AbortController())

    def done(f: Future[ExecutionResult | None]) -> None:
        error = f.exception()
        if error is not None:
            run._push(ErrorEvent(run.id, error))
            run._push(RunDone(run.id, "error", None))
        else:
            result = f.result()
            run._push(RunDone(run.id, result.finish_reason if result else "error", result))

    future.add_done_callback(done)
    return run
