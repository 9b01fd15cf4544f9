"""How a sweep finishes one stale turn: claim it, count the attempt, run it to an end.

The claim is the store's turn lock taken without waiting (``claim_stale``, by default
``turn_lock(id, timeout=0)``): it succeeds only when no live turn holds the session (an
OS lock freed by the holder's death, a lease whose heartbeats stopped), and it hands out
a new fence, so the old holder's next write is refused (``LeaseLostError``). The lease
taken is handed to the job that runs the turn, which releases it. Under that lease the
checkpoint is loaded again (another sweeper may have finished it meanwhile), its
``attempts`` raised and saved with the new fence (or, past ``max_attempts``, its status
set to ``"abandoned"``), and the turn runs as ``resume()`` would run it (the agent's
``approve=`` callback included). A turn paused on an approval is ``"parked"`` while the
approval is pending; once it is decided (its resolver died while the turn went on) the
claim applies the decision, as ``resume()`` would. Everything runs on the session's lane of the agent's
workers, like every other call on that session.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager
from typing import Any

import attrs

from .abort import AbortController
from .approvals import TurnKey
from .engine._checkpoints import TurnCheckpoints
from .engine._durable import TurnPlan
from .engine._runner import TurnRequest
from .engine._session_core import SessionCore
from .engine._single import SingleTurns
from .engine._turn_state import TurnState
from .errors import LeaseLostError
from .results import ExecutionResult
from .runtime._worker import Job
from .stores.lease import Lease

__all__ = ["Recovered", "recover_send", "recover_session_turn"]

log = logging.getLogger("lousho_sessions.recovery")


@attrs.frozen
class Recovered:
    """What one claim of a stale turn came to (``recovery.SweptTurn`` without the ids)."""

    outcome: str
    attempts: int = 0
    result: ExecutionResult | None = None
    error: BaseException | None = attrs.field(default=None, eq=False)


TAKEN = Recovered("taken")


def _claimed(lock: AbstractContextManager[Any], body: Callable[[Any], Recovered]) -> Recovered:
    """``body(held)`` under ``lock`` (``held`` what it yields); ``TAKEN`` when the claim is
    taken over meanwhile."""
    try:
        with lock as held:
            return body(held)
    except LeaseLostError as exc:  # someone else claimed it while this ran: theirs now
        log.info("a swept turn lost its lease to another claimer: %s", exc)
        return TAKEN


def _attempt(
    state: TurnState | None,
    checkpoints: TurnCheckpoints,
    run: Callable[[TurnState], ExecutionResult],
    *,
    max_attempts: int,
    fence: int | None,
    decided: Callable[[TurnState], bool],
) -> Recovered:
    """Count the attempt of the claimed ``state`` and run it (see the module docstring)."""
    if state is None:
        return TAKEN  # finished (or dropped) since it was found
    if fence is not None and state.fence != fence:
        return Recovered("taken", state.attempts)  # claimed by someone else since
    if state.status == "awaiting-approval":
        if not decided(state):
            return Recovered("parked", state.attempts)  # never swept: a human decides
        state.status, state.approval_id = "running", None  # decided: apply it now
    if state.status == "abandoned":
        return Recovered("abandoned", state.attempts)
    if state.attempts >= max_attempts:
        state.status = "abandoned"
        checkpoints.save(state)
        log.warning(
            "turn %s abandoned after %d attempts; it is kept (recovery.abandoned_turns)",
            state.turn_id,
            state.attempts,
        )
        return Recovered("abandoned", state.attempts)
    state.attempts += 1
    checkpoints.save(state)  # the claim, recorded: the old holder's writes are refused now
    try:
        result = run(state)
    except LeaseLostError:
        raise
    except Exception as exc:
        log.warning("swept turn %s failed: %r", state.turn_id, exc)
        return Recovered("failed", state.attempts, None, exc)
    outcome = "parked" if result.finish_reason == "awaiting-approval" else "finished"
    return Recovered(outcome, state.attempts, result)


def recover_session_turn(
    core: SessionCore,
    turn_id: str,
    lease: Lease,
    *,
    max_attempts: int,
    fence: int | None,
    context: Any = None,
) -> Future[Recovered]:
    """Finish the stale turn ``turn_id`` of the session of ``core`` (the live session's, if
    any), claimed with ``lease``, on its lane; the lease is released when it ends."""
    transcript, turns = core.transcript, core.turns

    def work(job: Job) -> Recovered:
        def body(lease: object) -> Recovered:
            transcript.sync()
            if turns.next_turn().turn_id != turn_id:
                return TAKEN  # the transcript moved on: that turn was committed
            checkpoints = turns.checkpoints()
            state = turns.pending()

            def run(state: TurnState) -> ExecutionResult:
                return turns.run(
                    state,
                    turns.next_turn(),
                    AbortController(),
                    plan=TurnPlan(),
                    emit=None,
                    approve=core.approve,
                    inbox=None,
                    requeue=None,
                    resumed=True,
                    context=context,
                )

            return _attempt(
                state,
                checkpoints,
                run,
                max_attempts=max_attempts,
                fence=fence,
                decided=turns.runner.decided,
            )

        return _claimed(transcript.turn_lock(lease), body)

    return _submitted(lambda: core.run(work, "recover"), lease)


def recover_send(
    singles: SingleTurns,
    key: str,
    lease: Lease,
    *,
    max_attempts: int,
    fence: int | None,
    context: Any = None,
) -> Future[Recovered]:
    """Finish the stale single send ``<key>.send``, claimed with ``lease``, on its lane."""
    runner = singles.runner
    store = runner.config.store.checkpoints
    assert store is not None  # a durable send has a checkpoint store
    turn = TurnKey("single", key)

    def work(job: Job) -> Recovered:
        def body(fence_held: int | None) -> Recovered:
            checkpoints = TurnCheckpoints(store, durable=True, fence=fence_held)
            state = runner.load(checkpoints, turn)

            def run(state: TurnState) -> ExecutionResult:
                return runner.run(
                    TurnRequest(
                        state,
                        AbortController(),
                        checkpoints,
                        turn=turn,
                        approve=runner.config.approve,
                        resumed=True,
                        context=context,
                    )
                )

            return _attempt(
                state,
                checkpoints,
                run,
                max_attempts=max_attempts,
                fence=fence,
                decided=runner.decided,
            )

        return _claimed(singles.lease(key, True, held=lease), body)

    return _submitted(lambda: singles.lane(store, key).run(work, "recover"), lease)


def _submitted(submit: Callable[[], Future[Recovered]], lease: Lease) -> Future[Recovered]:
    """``submit()``; the lease is released if the job could not even be queued."""
    try:
        return submit()
    except BaseException:
        lease.release()
        raise
