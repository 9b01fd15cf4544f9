"""Single turns: ``agent.send``/``stream``/``resume`` from an empty history; ``AgentExecutor``.

A single turn runs as a job on the agent's workers, in a lane of its own: keyed by
its session id when it is durable (so two sends with one id run one after the
other), else by its run id. A durable one is checkpointed under
``TurnKey("single", id).turn_id`` (``f"{id}.send"``) and runs holding the lease of
session ``id`` in the agent's session store (``turn_lock``), its writes carrying the
lease's fence: so a sweeper (``lousho_sessions.recovery``) can tell a running send from
one whose process died, and a send whose lease was taken over writes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import contextmanager
from functools import partial
from typing import Any, Protocol

from .._random import uuid4_hex
from ..abort import AbortController, AbortSignal
from ..errors import SessionAwaitingApprovalError, SessionBusyError
from ..events import Event
from ..inputs import Input, to_messages
from ..messages import Message
from ..results import ExecutionResult
from ..run import AgentRun
from ..runtime._calls import Stop, Stoppable, linked
from ..runtime._session_lane import SessionLane, aborted, ending
from ..runtime._worker import Job
from ..stores.adapters import adapt_sessions
from ..stores.base import ApprovalStore, CheckpointStore, validate_session_id
from ..stores.lease import Lease
from ._approvals import TurnKey
from ._checkpoints import TurnCheckpoints
from ._config import Approve
from ._output import OutputSpec
from ._runner import TurnRequest, TurnRunner
from ._turn import TurnState

__all__ = ["AgentExecutor", "HasRunner", "SingleTurns"]


def _queued(call: Stoppable, queue: bool) -> Stoppable:
    """``call``, queued now if ``queue`` (else when waited for: ``Stoppable``)."""
    if queue:
        call.queued()
        call.start = None
    return call


class HasRunner(Protocol):
    """What ``AgentExecutor`` needs of an agent: its turn runner."""

    @property
    def runner(self) -> TurnRunner: ...


class SingleTurns:
    """Queues, stops and resumes the single turns of one agent."""

    def __init__(self, runner: TurnRunner) -> None:
        self.runner = runner

    def submit(
        self,
        messages: list[Message],
        controller: AbortController,
        session_id: str | None,
        *,
        emit: Callable[[Event], None] | None,
        approve: Approve | None,
        run_id: str | None = None,
        wire: Callable[[Future[Any], Stop | None], None] | None = None,
        context: Any = None,
        output: OutputSpec | None = None,
        queue: bool = True,
    ) -> Stoppable:
        """One single turn: its Future and what stops it (a queued turn is withdrawn, a
        running one aborted). ``wire`` gets both before the turn is queued; ``context``
        is the caller's object for tools. ``queue=False``: queued when waited for."""
        run_id = run_id or "run-" + uuid4_hex()
        if session_id is not None:
            validate_session_id(session_id)
        durable = session_id is not None and self.runner.config.store.checkpoints is not None
        turn = TurnKey("single", session_id or run_id)
        checkpoints = self._store(durable)
        lane = self.lane(checkpoints, turn.key)
        lane.refuse_reentry("agent.send")
        sessions = self.runner.config.store.sessions
        if durable and SessionLane(lane.workers, "session", sessions, turn.key).inside():
            raise SessionBusyError(
                f"agent.send(session_id={turn.key!r}) was called from inside a turn of session "
                f"{turn.key!r}, whose lease a durable send needs; it would wait for itself "
                "forever. Use another session id."
            )

        def work(job: Job) -> ExecutionResult:
            with self.lease(turn.key, durable) as fence:
                if session_id is not None:
                    # finish (or refuse to overwrite) the run this id left unfinished
                    earlier = self.finish(
                        turn, checkpoints, None, context=context, approve=approve, fence=fence
                    )
                    if earlier is not None and earlier.finish_reason == "awaiting-approval":
                        raise _waiting(turn, earlier.approval_id)
                state = TurnState.start(
                    messages, session_id=session_id, turn_id=turn.turn_id, run_id=run_id
                )
                writer = TurnCheckpoints(checkpoints, durable=durable, fence=fence)
                return self.runner.run(
                    TurnRequest(
                        state, controller, writer, turn=turn, emit=emit, approve=approve,
                        context=context, output=output,
                    )
                )  # fmt: skip

        job = Job(ending(work, emit, run_id), "single")
        call = lane.call(job, controller.abort, partial(aborted, run_id, session_id, emit))
        if wire is not None:
            wire(job.future, call.stop)
        return _queued(call, queue)

    def resume(
        self,
        key: str,
        context: Any = None,
        *,
        emit: Callable[[Event], None] | None = None,
        run_id: str = "",
        wire: Callable[[Future[Any], AbortController], None] | None = None,
        output: OutputSpec | None = None,
        queue: bool = True,
    ) -> Stoppable:
        """Finish the durable single turn of ``key``, if one is pending; its Future and what
        stops it. With ``emit`` the turn is streamed (and pauses on every approval); ``wire``
        gets the Future and controller before the job is queued. ``queue=False``: queued
        when waited for."""
        durable = self.runner.config.store.checkpoints is not None
        checkpoints = self._store(durable)
        lane = self.lane(checkpoints, key)
        lane.refuse_reentry("resume")
        controller = AbortController()
        approve = self.runner.config.approve if emit is None else None

        def finish(job: Job) -> ExecutionResult | None:
            turn = TurnKey("single", key)
            with self.lease(key, durable) as fence:
                return self.finish(
                    turn, checkpoints, controller.signal, context=context, emit=emit,
                    approve=approve, fence=fence, output=output,
                )  # fmt: skip

        job = Job(ending(finish, emit, run_id), "single")
        if wire is not None:
            wire(job.future, controller)
        call = lane.call(job, controller.abort, lambda: None)
        return _queued(call, queue)  # a resume that never ran ends None: it finished no turn

    def resume_stream(
        self, key: str, context: Any, run_id: str, output: OutputSpec | None = None
    ) -> AgentRun:
        """``resume``, streamed: an ``AgentRun`` of the continued turn."""
        holder: list[AgentRun] = []

        def wire(future: Future[Any], controller: AbortController) -> None:
            holder.append(AgentRun(run_id, future, controller))  # before any event

        self.resume(
            key, context, emit=lambda e: holder[0]._push(e), run_id=run_id, wire=wire,
            output=output,
        )  # fmt: skip
        return holder[0]

    def finish(
        self,
        turn: TurnKey,
        checkpoints: CheckpointStore,
        signal: AbortSignal | None,
        *,
        context: Any = None,
        emit: Callable[[Event], None] | None = None,
        approve: Approve | None,
        fence: int | None = None,
        output: OutputSpec | None = None,
    ) -> ExecutionResult | None:
        """Run the pending single turn ``turn`` to an end; None if none is pending.

        ``fence`` is the lease's (``lease``) that the caller holds."""
        writer = TurnCheckpoints(checkpoints, durable=True, fence=fence)
        state = self.runner.load(writer, turn)
        if state is None:
            return None
        self.runner.release(state, lambda approval_id: _waiting(turn, approval_id))
        return self.runner.run(
            TurnRequest(
                state,
                linked(signal),
                writer,
                turn=turn,
                emit=emit,
                approve=approve,
                resumed=True,
                context=context,
                output=output,
            )
        )

    @contextmanager
    def lease(self, key: str, durable: bool, *, held: Lease | None = None) -> Iterator[int | None]:
        """Hold session ``key`` in the agent's session store while a durable send runs;
        yields the lease's fence (``None``, holding nothing, when not durable). ``held``:
        a lease taken already (a sweep's claim), used and released instead."""
        sessions = self.runner.config.store.sessions
        if held is not None:
            with held:
                yield held.fence
            return
        if not durable or sessions is None:
            yield None
            return
        with adapt_sessions(sessions).turn_lock(key) as lease:
            yield lease.fence

    def lane(self, checkpoints: CheckpointStore, key: str) -> SessionLane:
        """The lane of the single turns keyed ``key``: one at a time per key and store."""
        return SessionLane(self.runner.runtime.workers, "single", checkpoints, key)

    def _store(self, durable: bool) -> CheckpointStore:
        """The agent's checkpoint store when durable; else paused turns in memory."""
        store = self.runner.config.store.checkpoints
        return store if durable and store is not None else self.runner.runtime.pauses


def _waiting(turn: TurnKey, approval_id: str | None) -> SessionAwaitingApprovalError:
    return SessionAwaitingApprovalError(
        f"run {turn.turn_id!r} waits on approval {approval_id!r}; resolve it first",
        approval_id=approval_id,
    )


class AgentExecutor:
    """Runs one turn directly, on the calling thread, with explicit stores."""

    @staticmethod
    def execute(
        agent: HasRunner,
        input: Input,
        *,
        session_id: str | None = None,
        history: Sequence[Message] = (),
        checkpoint_store: CheckpointStore | None = None,
        approval_store: ApprovalStore | None = None,
        signal: AbortSignal | None = None,
        emit: Callable[[Event], None] | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> ExecutionResult:
        """One turn of ``agent`` after ``history``; checkpointed under ``<session_id>.send`` when a
        checkpoint store is given. The transcript is yours to keep: see ``result.messages``.
        ``context`` is given to tools as ``ToolContext.context``; ``output_type`` as for
        ``Agent.send``."""
        key = validate_session_id(session_id) if session_id is not None else "run-" + uuid4_hex()
        turn = TurnKey("single", key)
        state = TurnState.start(
            to_messages(input), history=history, session_id=session_id, turn_id=turn.turn_id
        )
        runner = agent.runner
        store = checkpoint_store or runner.runtime.pauses
        writer = TurnCheckpoints(store, durable=checkpoint_store is not None)
        approve: Approve | None = runner.config.approve
        return runner.run(
            TurnRequest(
                state, linked(signal), writer, turn=turn, emit=emit, approve=approve,
                approvals=approval_store, context=context,
                output=runner.config.output_for(output_type),
            )
        )  # fmt: skip
