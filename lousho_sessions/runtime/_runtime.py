"""``Runtime``: the threads and in-memory state one agent owns, and their ``close``.

An agent creates one runtime; its sessions and single sends share it. It holds
the worker threads (``_worker.Workers``), the thread pool that runs the tools of
one step in parallel, the event loop where ``async def`` tools run, and the
in-memory store of turns paused on an approval without a checkpoint store.
``close()`` stops and joins them; each starts again on its next use.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import TypeVar

from ..stores.memory import MemoryCheckpointStore
from ._tool_loop import ToolLoop
from ._worker import Workers

__all__ = ["Runtime"]

#: What one tool call gives back (the engine's ``ToolOutcome``: the runtime only carries it).
Outcome = TypeVar("Outcome")

log = logging.getLogger("lousho_sessions.agent")

#: Threads of the pool that runs the tools of one step in parallel.
TOOL_THREADS = 16


class Runtime:
    """Worker threads, the tool pool, the tool loop and paused turns of one agent."""

    def __init__(self) -> None:
        self.workers = Workers()
        self.tool_loop = ToolLoop()  # async tools; started on first use
        #: turns paused on an approval when there is no checkpoint store
        self.pauses = MemoryCheckpointStore()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    def run_tools(
        self, fns: Sequence[Callable[[], Outcome]]
    ) -> Iterator[tuple[int, Outcome | BaseException]]:
        """Run a step's tools: one inline, several on the pool; yields as each ends."""
        if len(fns) == 1:
            try:  # in a copy of the turn's context, as on the pool: what a tool sets stays there
                outcome: Outcome | BaseException = contextvars.copy_context().run(fns[0])
            except Exception as exc:
                outcome = exc
            yield 0, outcome
            return
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(TOOL_THREADS, thread_name_prefix="lousho-tool")
            pool = self._pool
        # each tool in a copy of this context: it knows whose turn it runs in (_worker.inside)
        futures = {
            pool.submit(contextvars.copy_context().run, fn): index for index, fn in enumerate(fns)
        }
        for f in as_completed(futures):  # not wait(FIRST_COMPLETED) in a loop: O(n) per call
            error = f.exception()
            yield futures[f], (error if error is not None else f.result())

    def close(self, timeout: float | None = None) -> bool:
        """Let queued turns finish, then stop and join every thread; False if ``timeout`` ran out.

        Threads still running after ``timeout`` end by themselves when their work is done.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        finished = self.workers.close(timeout)
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            # after the workers: no turn is left to use it (unless close timed out)
            pool.shutdown(wait=finished)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        self.tool_loop.close(left if finished else 0)
        if not finished and timeout is not None:
            log.warning(
                "agent.close(): threads still busy after %s s end when their work is done", timeout
            )
        return finished
