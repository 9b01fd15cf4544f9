"""``SessionLane``: what every caller of a session's work shares, written once.

A session's turns (sync or async), a single send, a resumed turn and a recovered one
all run as jobs on one lane of the agent's ``Workers``, and each needs the same four
things: the lane's **key** (one per session id in one store, or per single send),
the **re-entry check** (a blocking call made from that lane's own job would wait for
itself), **stopping** a job whether it is still queued (taken out and ended
"aborted" at once) or running (aborted), and the **end of its stream** (``error``
then ``run.done``, or ``run.done`` with the result). ``SessionLane`` owns them; the
engine's ``SessionCore`` and ``SingleTurns`` and the face's recovery use it.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

from .._random import uuid4_hex
from ..abort import AbortController
from ..errors import SessionBusyError
from ..events import ErrorEvent, Event, RunDone
from ..results import ExecutionResult, PendingTurn
from ..run import AgentRun
from ._calls import Stop, Stoppable
from ._worker import Job, Workers, inside

__all__ = ["Emit", "SessionLane", "aborted", "end_stream", "ended", "ending", "joined_run"]

R = TypeVar("R")

#: Where a streamed turn's events go (``None``: nobody listens).
Emit = Callable[[Event], None]


class SessionLane:
    """The lane of one session id in one store (``"session"``) or of one single send's key
    (``"single"``) on an agent's workers; ``owner`` (the store) is kept alive while it has work.

    Two objects made for the same kind, owner and id are the same lane: their jobs run one
    after another, never two at once.
    """

    __slots__ = ("key", "owner", "workers")

    def __init__(self, workers: Workers, kind: str, owner: object, id: str) -> None:
        self.workers = workers
        self.owner = owner
        self.key: tuple[str, int, str] = (kind, builtins.id(owner), id)

    # -- the re-entry check ------------------------------------------------------

    def inside(self) -> bool:
        """True when called from a job of this lane (or a tool thread it started)."""
        return inside(self.key)

    def refuse_reentry(self, call: str, why: str | None = None) -> None:
        """Raise ``SessionBusyError`` when ``call`` is made from this lane's own work: it
        would wait for itself forever. ``why`` replaces the usual explanation."""
        if not inside(self.key):
            return
        kind, _, id = self.key
        noun = "session" if kind == "session" else "run"
        raise SessionBusyError(
            why
            or f"{noun} {id!r}: {call}() was called from inside this {noun}'s own work "
            "(a tool or a listener); it would wait for itself forever. Return from the tool "
            f"or listener first, or use another {noun}."
        )

    # -- queueing and stopping ----------------------------------------------------

    def submit(self, job: Job) -> None:
        """Queue ``job`` on the lane."""
        self.workers.submit(self.key, job, owner=self.owner)

    def run(self, fn: Callable[[Job], R], kind: str) -> Future[R]:
        """Queue ``fn`` as a job of ``kind`` (refused from the lane's own work); its Future."""
        self.refuse_reentry(kind)
        job = Job(fn, kind)
        self.submit(job)
        future: Future[R] = job.future
        return future

    def call(self, job: Job, abort: Stop, skipped: Callable[[], Any]) -> Stoppable:
        """``job``, not yet queued (``Stoppable.start`` queues it), and what stops it: running,
        ``abort(reason)`` (it ends at its next check); never run — still queued, or never
        queued (Ctrl-C before ``wait`` queued it) — it is withdrawn and its future given
        ``skipped()`` at once, so nothing waits for a job no thread will run (even behind
        a turn that never ends)."""

        def stop(reason: Any) -> None:
            abort(reason)
            if self.workers.withdraw(self.key, job):
                job.future.set_result(skipped())

        return Stoppable(
            job.future,
            stop,
            partial(self.workers.submit, self.key, job, self.owner),
            partial(self.workers.run_here, self.key, job, self.owner),
        )

    # -- what the lane holds --------------------------------------------------------

    def jobs(self) -> list[Job]:
        """The running job (first) and the waiting ones, in order."""
        return self.workers.jobs(self.key)

    def busy(self) -> bool:
        """True while a job runs or waits, unless called from that job."""
        return self.workers.busy(self.key)

    def retire(self) -> None:
        """Let the thread running the lane end once its queue is empty."""
        self.workers.retire(self.key)

    def __repr__(self) -> str:
        return f"<SessionLane {self.key[0]} {self.key[2]!r}>"


# -- the end of a turn's stream -------------------------------------------------------


def end_stream(
    emit: Emit | None,
    run_id: str,
    result: ExecutionResult | None = None,
    error: BaseException | None = None,
) -> None:
    """End a streamed turn: ``error`` then ``run.done`` "error" when it failed, else
    ``run.done`` with its result (``finish_reason`` "none" when no turn was left to run)."""
    if emit is None:
        return
    if error is not None:
        emit(ErrorEvent(run_id, error))
        emit(RunDone(run_id, "error", None))
    else:
        emit(RunDone(run_id, result.finish_reason if result is not None else "none", result))


def ending(work: Callable[[Job], R], emit: Emit | None, run_id: str) -> Callable[[Job], R]:
    """``work`` as a job's function whose stream is ended (``ended``); ``work`` itself
    when nobody listens."""
    return work if emit is None else partial(ended, work, emit, run_id)


def ended(work: Callable[..., R], emit: Emit | None, run_id: str, *args: Any) -> R:
    """``work(*args)`` (a turn, or the resume of one), its stream ended; as a job's function:
    ``Job(partial(ended, work, emit, run_id))`` (``work`` then gets the job)."""
    try:
        result = work(*args)
    except BaseException as exc:
        end_stream(emit, run_id, error=exc)
        raise
    if emit is not None:
        end_stream(emit, run_id, result if isinstance(result, ExecutionResult) else None)
    return result


def aborted(
    run_id: str,
    session_id: str | None,
    emit: Emit | None = None,
    pending: PendingTurn | None = None,
) -> ExecutionResult:
    """The result of a turn stopped before it started (its input not taken, nothing saved;
    ``pending``: the earlier turn it was finishing first, kept), its stream ended with it."""
    result = ExecutionResult(
        "", finish_reason="aborted", run_id=run_id, session_id=session_id, pending=pending
    )
    end_stream(emit, run_id, result)
    return result


def joined_run(future: Future[ExecutionResult | None]) -> AgentRun:
    """A stream that joined another turn (``turn_policy``): it yields that turn's end only."""
    run = AgentRun("run-" + uuid4_hex(), future, AbortController())

    def done(f: Future[ExecutionResult | None]) -> None:
        end_stream(run._push, run.id, None if f.exception() else f.result(), f.exception())

    future.add_done_callback(done)
    return run
