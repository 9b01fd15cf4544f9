"""Where ``async def`` tools run: an event loop on its own thread, one per agent.

The sync core runs tools on threads; an async tool's coroutine is handed to the
agent's ``ToolLoop`` and the tool thread waits for it. One loop per agent (not one
per call) lets async tools share loop-bound clients (``httpx.AsyncClient``, a database
pool) between calls, and the calls of one step run concurrently on it. Aborting the
turn cancels the coroutine. ``asyncio`` is imported only when an async tool runs.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Awaitable, Coroutine
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

from ..abort import AbortedError, AbortSignal

if TYPE_CHECKING:
    import asyncio

__all__ = ["ToolLoop", "run_awaitable"]


class ToolLoop:
    """An event loop on a daemon thread, started on first use; ``close()`` stops and joins it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def run(self, awaitable: Awaitable[Any], signal: AbortSignal) -> Any:
        """Await ``awaitable`` on the loop and return its result; blocks this thread.

        The caller's context variables are copied into the task. When ``signal`` is
        aborted the task is cancelled and ``AbortedError`` raised once it has ended.
        """
        return _wait(self._start(), awaitable, signal)

    def close(self, timeout: float | None = 5.0) -> None:
        """Cancel running coroutines, stop the loop and join its thread. A later ``run`` starts anew."""
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        if thread is not threading.current_thread():
            thread.join(timeout)

    def _start(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is not None:
                return self._loop
            import asyncio

            loop = asyncio.new_event_loop()
            thread = threading.Thread(
                target=_serve, args=(loop,), name="lousho-tool-loop", daemon=True
            )
            thread.start()
            self._loop, self._thread = loop, thread
            return loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    import asyncio

    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:  # as asyncio.run ends: cancel what is left, so waiting tool threads wake
        while tasks := asyncio.all_tasks(loop):
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def run_awaitable(awaitable: Awaitable[Any], signal: AbortSignal) -> Any:
    """Await ``awaitable`` on a new loop on this thread (tools run without an agent's loop)."""
    import asyncio

    loop = asyncio.new_event_loop()
    try:
        return _wait(loop, awaitable, signal, run_here=True)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def _wait(
    loop: asyncio.AbstractEventLoop,
    awaitable: Awaitable[Any],
    signal: AbortSignal,
    *,
    run_here: bool = False,
) -> Any:
    import asyncio

    done: Future[Any] = Future()
    context = contextvars.copy_context()
    tasks: list[asyncio.Task[Any]] = []

    def settle(task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            reason = signal.reason if signal.aborted else "the agent's tool loop was closed"
            done.set_exception(AbortedError(reason))
        elif task.exception() is not None:
            done.set_exception(task.exception())
        else:
            done.set_result(task.result())

    def start() -> None:
        try:
            task = context.run(loop.create_task, _as_coroutine(awaitable))
        except BaseException as exc:
            done.set_exception(exc)
            return
        tasks.append(task)
        task.add_done_callback(settle)

    def cancel(_: AbortSignal) -> None:
        def now() -> None:
            for task in tasks:
                task.cancel()

        with contextlib.suppress(RuntimeError):  # a closed loop has nothing left to cancel
            loop.call_soon_threadsafe(now)

    if run_here:
        start()
        remove = signal.add_callback(cancel)
        try:
            if tasks:
                loop.run_until_complete(asyncio.wait(tasks))
        finally:
            remove()
        return done.result()
    loop.call_soon_threadsafe(start)
    remove = signal.add_callback(cancel)  # after start: cancel runs after it on the loop
    try:
        return done.result()
    finally:
        remove()


async def _await(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


def _as_coroutine(awaitable: Awaitable[Any]) -> Coroutine[Any, Any, Any]:
    if isinstance(awaitable, Coroutine):
        return awaitable
    return _await(awaitable)
