"""``SessionCore``: one session as this process runs it, shared by everything that runs its turns.

``Session`` (and through it ``AsyncSession``), the approvals that continue a paused turn
and recovery's sweep all work on a session through this object: its lane
(``SessionLane``: the key, the re-entry check, stopping a queued or running turn, the
end of a turn's stream), its transcript and durable turns (``SessionTurns``), and its
turns as jobs on that lane — queued, joined (``turn_policy``), skipped when stopped
before they start, requeued when input joined too late, resumed. The agent keeps the
core of each live session, so a sweep or an approval continues a turn on the same lane
and transcript as the ``Session`` the caller holds.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal

from ..abort import AbortController, AbortSignal
from ..compaction import compact_transcript, estimate_tokens
from ..events import SessionEvent
from ..inputs import Input, to_messages
from ..messages import Message
from ..results import CompactionResult, ExecutionResult, Limits, PendingTurn
from ..run import AgentRun
from ..runtime._calls import Stoppable, chain, linked
from ..runtime._session_lane import (
    Emit,
    SessionLane,
    aborted,
    end_stream,
    ended,
    ending,
    joined_run,
)
from ..runtime._worker import Job
from ..stores.base import CheckpointStore, SessionStore, validate_session_id
from ._config import Approve
from ._durable import SessionTurns, TurnJob
from ._inbox import Ticket
from ._output import OutputSpec
from ._runner import TurnRunner, settle
from ._transcript import Transcript

__all__ = ["POLICIES", "SessionCore", "TurnPolicy"]

TurnPolicy = Literal["wait", "queue", "steer"]
POLICIES = ("wait", "queue", "steer")


class SessionCore:
    """One session's lane, transcript and durable turns, and its turns as jobs (see the module).

    Every method that queues work refuses to be called from the session's own work (a tool
    or a listener), which would wait for itself.
    """

    def __init__(self, runner: TurnRunner, id: str, *, store: SessionStore,
                 checkpoint_store: CheckpointStore | None, turn_policy: TurnPolicy = "wait",
                 limits: Limits | None = None) -> None:  # fmt: skip
        if turn_policy not in POLICIES:
            raise ValueError(f"turn_policy must be one of {POLICIES}, got {turn_policy!r}")
        self.id = validate_session_id(id)
        self.runner = runner
        self.store = store
        self.checkpoint_store = checkpoint_store
        self.turn_policy: TurnPolicy = turn_policy
        self.limits = limits
        self.lane = SessionLane(runner.runtime.workers, "session", store, self.id)
        self.transcript = Transcript(store, self.id)
        self.turns = SessionTurns(runner, self.transcript, checkpoint_store, limits)
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self._listeners_lock = threading.Lock()

    def like(self, id: str) -> SessionCore:
        """The core of session ``id`` with this one's store and settings (a fork)."""
        return SessionCore(self.runner, id, store=self.store, turn_policy=self.turn_policy,
                           checkpoint_store=self.checkpoint_store, limits=self.limits)  # fmt: skip

    @property
    def approve(self) -> Approve | None:
        """The agent's ``approve=`` callback, which blocking (not streamed) turns use."""
        return self.runner.config.approve

    def run(self, fn: Callable[[Job], Any], kind: str) -> Future[Any]:
        """Queue ``fn`` on the session's lane after the work queued before it; its Future."""
        return self.lane.run(fn, kind)

    # -- turns ------------------------------------------------------------------------

    def send_call(
        self, input: Input, signal: AbortSignal | None, context: Any, output_type: Any
    ) -> Stoppable:
        """A turn of ``input``, queued when waited for (so Ctrl-C stops it however soon it
        comes), or the turn it joined (``turn_policy``)."""
        self.lane.refuse_reentry("send")
        messages = to_messages(input)
        joined = self.join(messages)
        if joined is not None:
            return Stoppable(joined, None)
        output = self.runner.config.output_for(output_type)
        job = self.turn_job(messages, linked(signal), emit=None, approve=self.approve,
                            context=context, output=output)  # fmt: skip
        return self.call(job)

    def stream(
        self, input: Input, signal: AbortSignal | None, context: Any, output_type: Any
    ) -> AgentRun:
        """A turn of ``input``, queued now and streamed."""
        self.lane.refuse_reentry("stream")
        output = self.runner.config.output_for(output_type)
        messages = to_messages(input)
        joined = self.join(messages)
        if joined is not None:
            return joined_run(joined)
        job = self.turn_job(messages, linked(signal), emit=None, approve=None, context=context,
                            output=output)  # fmt: skip
        return self.streamed(job)

    def streamed(self, job: Job) -> AgentRun:
        """The ``AgentRun`` of the turn ``job`` (its events go to the run), queued now."""
        tj: TurnJob = job.state
        run = AgentRun(tj.run_id, job.future, tj.controller, join=self.joiner(job),
                       stop=self.call(job).stop)  # fmt: skip
        tj.emit = run._push  # before the job is queued: no event is missed
        self.lane.submit(job)
        return run

    def turn_job(
        self,
        messages: list[Message],
        controller: AbortController,
        *,
        emit: Emit | None,
        approve: Approve | None,
        context: Any = None,
        output: OutputSpec | None = None,
    ) -> Job:
        """The job of a new turn of ``messages``, not yet queued."""
        turn_job = TurnJob(messages, controller, emit, approve, context, output)
        return Job(self._execute_turn, "turn", turn_job)

    def call(self, job: Job) -> Stoppable:
        """The turn ``job``, to queue, and what stops it: not started, it is taken out of the
        queue and ends "aborted" at once; running, it is aborted."""
        tj: TurnJob = job.state
        return self.lane.call(job, tj.controller.abort, lambda: self._skip(tj, emit=tj.emit))

    def _execute_turn(self, job: Job) -> ExecutionResult:
        tj: TurnJob = job.state
        if tj.emit is None:  # nobody listens: no stream to end
            return self._turn(tj)
        return ended(self._turn, tj.emit, tj.run_id, tj)  # ``emit`` as it is now: see streamed

    def _turn(self, tj: TurnJob) -> ExecutionResult:
        if tj.controller.signal.aborted:
            return self._skip(tj)
        turns = self.turns
        offer = None if tj.prepare else turns.offer(tj.messages, tj.run_id)
        start = None if offer is None else offer.checkpoint
        with self.transcript.take(turns.pauses, start, tj.controller.signal) as taken:
            plan = turns.plan(taken, offer)  # what the turn starts from, decided once
            if tj.prepare is not None:  # regenerate, edit: the rewind, under this lease
                tj.messages = tj.prepare()
            link, context = tj.controller.signal, tj.context
            earlier = turns.finish_pending(plan, None, link=link, approve=self.approve,
                                           context=context)  # fmt: skip
            if earlier is not None and earlier.finish_reason == "aborted":
                return self._skip(tj, earlier.pending)  # kept; this input not taken
            if earlier is not None and earlier.finish_reason == "awaiting-approval":
                # it went on and paused again: this input waits for that approval
                raise turns.awaiting(earlier.approval_id, "send() again after resolving it")
            # found free (not needed when the store saved the offered turn's checkpoint)
            free = turns.next_turn() if earlier is None and plan.started is None else None
            self.maybe_compact()
            turn, state = turns.new_turn(plan, tj.messages, tj.run_id, free)
            return turns.run(
                state,
                turn,
                tj.controller,
                plan=plan,
                emit=tj.emit,
                approve=tj.approve,
                inbox=tj.inbox,
                requeue=self._requeue,
                context=tj.context,
                output=tj.output,
            )

    def _skip(
        self, tj: TurnJob, pending: PendingTurn | None = None, *, emit: Emit | None = None
    ) -> ExecutionResult:
        """End a turn stopped before it started: its input was not taken, nothing is saved
        (``pending``: the earlier turn it was finishing first, kept pending); the callers
        that joined it are answered. ``emit``: end its stream here (it never ran)."""
        result = aborted(tj.run_id, self.id, None, pending)
        settle(tj.inbox, result, None, self._requeue)
        end_stream(emit, tj.run_id, result)
        return result

    def _requeue(self, ticket: Ticket) -> None:
        future = ticket.future
        assert future is not None
        job = self.turn_job(list(ticket.messages), AbortController(), emit=None,
                            approve=self.approve)  # fmt: skip
        self.lane.submit(job)
        job.future.add_done_callback(lambda f: chain(f, future))

    def join(self, messages: list[Message]) -> Future[ExecutionResult | None] | None:
        """With turn_policy "queue"/"steer", join the running or waiting turn."""
        if self.turn_policy == "wait":
            return None
        for job in self.lane.jobs():
            if job.kind == "turn":
                future: Future[ExecutionResult | None] = Future()
                if job.state.inbox.join(messages, steer=self.turn_policy == "steer", future=future):
                    return future
        return None

    def joiner(self, job: Job) -> Callable[[Any, bool], str]:
        """``AgentRun.enqueue``/``steer`` of the turn ``job``."""

        def join(input: Input, steer: bool) -> str:
            messages = to_messages(input)
            ticket = job.state.inbox.join(messages, steer=steer)
            if ticket is not None:
                return str(ticket.input_id)
            # the turn has ended: the input runs as the next turn
            self.lane.submit(
                self.turn_job(messages, AbortController(), emit=None, approve=self.approve)
            )
            return "in-next-turn"

        return join

    # -- the pending turn -------------------------------------------------------------

    def resume_call(self, signal: AbortSignal | None, context: Any, output_type: Any) -> Stoppable:
        """Finish the pending turn (``None`` when none is), queued when waited for."""
        self.lane.refuse_reentry("resume")
        output = self.runner.config.output_for(output_type)
        controller = linked(signal)
        job = self._resume_job(controller, context, None, "", output)
        return self.lane.call(job, controller.abort, lambda: None)

    def resume_stream(self, context: Any, run_id: str, output_type: Any = None) -> AgentRun:
        """Finish the pending turn, streamed (``approvals.resolve_stream``); streams always pause."""
        self.lane.refuse_reentry("resume")
        output = self.runner.config.output_for(output_type)
        controller = AbortController()
        holder: list[AgentRun] = []
        job = self._resume_job(controller, context, lambda e: holder[0]._push(e), run_id, output)
        holder.append(AgentRun(run_id, job.future, controller))
        self.lane.submit(job)
        return holder[0]

    def _resume_job(self, controller: AbortController, context: Any, emit: Emit | None,
                    run_id: str, output: OutputSpec | None) -> Job:  # fmt: skip
        approve = self.approve if emit is None else None

        def finish(job: Job) -> ExecutionResult | None:
            turns = self.turns
            with self.transcript.take(turns.pauses, signal=controller.signal) as taken:
                return turns.finish_pending(
                    turns.plan(taken), controller, emit=emit, approve=approve, context=context,
                    output=output,
                )  # fmt: skip

        return Job(ending(finish, emit, run_id), "resume")

    # -- compaction and listeners -----------------------------------------------------

    def compact(self, keep_last: int, instructions: str | None) -> CompactionResult:
        """Summarise the transcript held (under the session's lease, on its lane)."""
        c = self.runner.config
        return compact_transcript(
            self.transcript, c.provider, c.model_name, self.runner.telemetry,
            self.id, keep_last, instructions, self.notify,
        )  # fmt: skip

    def maybe_compact(self) -> None:
        """Compact before a turn when the agent's policy says the transcript is too long."""
        config = self.runner.config
        policy = config.compaction
        if policy is None:
            return
        if estimate_tokens(self.transcript.messages, config.system) > policy.max_tokens:
            self.compact(policy.keep_last, policy.instructions)

    def on(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with compaction and clear events; returns its remover."""
        with self._listeners_lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._listeners_lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def notify(self, event: SessionEvent) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(event)

    def __repr__(self) -> str:
        return f"<SessionCore {self.id!r}>"
