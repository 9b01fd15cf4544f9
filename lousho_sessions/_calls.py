"""What a blocking call does with the turn it queued: link its signal, wait with a timeout, stop it."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from .abort import AbortController, AbortSignal
from .events import ErrorEvent, Event, RunDone
from .results import ExecutionResult
from .run import AgentRun

__all__ = ["Stop", "chain", "emit_to", "joined_run", "linked", "wait"]

#: Stops a queued or running turn, given the reason.
Stop = Callable[[Any], None]


def linked(signal: AbortSignal | None) -> AbortController:
    """A controller of this call's own, aborted when ``signal`` is."""
    controller = AbortController()
    if signal is not None:
        signal.add_callback(lambda s: controller.abort(s.reason))
    return controller


def wait(future: Future[Any], stop: Stop | None, timeout: float | None) -> Any:
    """The turn's result. After ``timeout`` s: stop it and return what it ended with ("aborted",
    or its result if it was saved first); ``TimeoutError`` if it does not stop within as long again."""
    try:
        return future.result(timeout)
    except FutureTimeout:
        if stop is None:
            raise TimeoutError(f"no result within {timeout} s") from None
    stop("timeout")
    try:
        return future.result(timeout)
    except FutureTimeout:
        raise TimeoutError(
            f"no result within {timeout} s, and the turn did not stop within {timeout} s of being "
            "aborted (a model call or tool that ignores its signal); it may still be saved: "
            "see load() and pending()"
        ) from None


def emit_to(emit: Callable[[Event], None] | None, event: Event) -> None:
    if emit is not None:
        emit(event)


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
