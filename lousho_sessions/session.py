"""``Session``: a multi-turn conversation that keeps its transcript in a store.

Every call that touches the store runs as a job on the session's lane of the
agent's workers (one lane per (store, session id) per agent), so calls queue in
order and a blocking ``send()`` works the same from a script, a web view or a
notebook. The transcript is kept by ``_transcript``, durable turns by ``_durable``;
every turn runs through the agent's ``TurnRunner``.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any, Literal, overload

from ._calls import Stop, Stoppable, announced, chain, emit_to, joined_run, linked, stoppable
from ._config import Approve
from ._durable import SessionTurns, TurnJob
from ._inbox import Ticket
from ._output import OutputSpec
from ._runner import TurnRunner, settle
from ._session_history import HistoryMixin
from ._session_state import StateMixin
from ._transcript import Transcript
from ._worker import Job, inside
from .abort import AbortController, AbortSignal
from .compaction import compact_transcript, estimate_tokens
from .errors import SessionBusyError
from .events import (
    ContextCleared,
    ErrorEvent,
    Event,
    RunDone,
    SessionEvent,
)
from .inputs import Input, to_messages
from .messages import Message, Usage
from .results import CompactionResult, ExecutionResult, Limits, PendingTurn
from .results import OutputT as _T
from .run import AgentRun
from .stores.base import CheckpointStore, SessionStore, validate_session_id

__all__ = ["Session", "TurnPolicy"]

log = logging.getLogger("lousho_sessions.session")

TurnPolicy = Literal["wait", "queue", "steer"]
_POLICIES = ("wait", "queue", "steer")


class Session(HistoryMixin, StateMixin):
    """A conversation: ``send()``/``stream()`` turns that see the whole transcript.

    Create one with ``agent.session(...)``. Guarantees (see the docs): ordered turns, an unchanged
    transcript after a failed or aborted turn, with a checkpoint store turns that survive a crash.
    """

    def __init__(
        self,
        runner: TurnRunner,
        id: str,
        *,
        store: SessionStore,
        checkpoint_store: CheckpointStore | None,
        turn_policy: TurnPolicy = "wait",
        limits: Limits | None = None,
    ) -> None:
        if turn_policy not in _POLICIES:
            raise ValueError(f"turn_policy must be one of {_POLICIES}, got {turn_policy!r}")
        self.id = validate_session_id(id)
        self.store = store
        self.checkpoint_store = checkpoint_store
        self.turn_policy: TurnPolicy = turn_policy
        self.limits = limits
        self._runner = runner
        self._workers = runner.runtime.workers
        self._key = ("session", builtins.id(store), self.id)
        self._transcript = Transcript(store, self.id)
        self._turns = SessionTurns(runner, self._transcript, checkpoint_store, limits)
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self._listeners_lock = threading.Lock()

    # -- turns --------------------------------------------------------------

    @overload
    def send(self, input: Input, *, signal: AbortSignal | None = None, timeout: float | None = None,
             context: Any = None, output_type: type[_T]) -> ExecutionResult[_T]: ...  # fmt: skip
    @overload
    def send(self, input: Input, *, signal: AbortSignal | None = None, timeout: float | None = None,
             context: Any = None, output_type: Any = None) -> ExecutionResult: ...  # fmt: skip

    def send(
        self,
        input: Input,
        *,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> ExecutionResult:
        """Run one turn with the whole transcript and return its result.

        Aborted (``signal``, ``timeout`` or Ctrl-C): the transcript is left as it was and
        ``finish_reason == "aborted"`` returned (Ctrl-C raises ``KeyboardInterrupt``
        instead), unless the turn was saved first: then its result is returned. A turn whose
        tools ran, or a pending turn finished first, is kept pending (``result.pending``).
        ``context`` is given to tools as ``ToolContext.context``; the caller's context
        variables are seen by the turn's tools too. ``output_type`` (else the agent's):
        the answer is parsed into ``result.output`` (docs/output.md).
        """
        result: ExecutionResult = self._send_call(input, signal, context, output_type).wait(timeout)
        return result

    def _send_future(
        self, input: Input, signal: AbortSignal | None, context: Any = None, output_type: Any = None
    ) -> tuple[Future[ExecutionResult | None], Stop | None]:
        """Queue the turn; its Future and what stops it (None if it joined another turn)."""
        return self._send_call(input, signal, context, output_type).queued()

    def _send_call(
        self, input: Input, signal: AbortSignal | None, context: Any = None, output_type: Any = None
    ) -> Stoppable:
        """The turn, queued when waited for (so Ctrl-C stops it however soon it comes)."""
        self._refuse_reentry("send")
        messages = to_messages(input)
        joined = self._join(messages)
        if joined is not None:
            return Stoppable(joined, None)
        output = self._runner.config.output_for(output_type)
        job = self._submit_turn(messages, linked(signal), emit=None, approve=self._approve,
                                defer=True, context=context, output=output)  # fmt: skip
        return self._stopper(job)

    @overload
    def stream(self, input: Input, *, signal: AbortSignal | None = None, context: Any = None,
               output_type: type[_T]) -> AgentRun[_T]: ...  # fmt: skip
    @overload
    def stream(self, input: Input, *, signal: AbortSignal | None = None, context: Any = None,
               output_type: Any = None) -> AgentRun: ...  # fmt: skip

    def stream(
        self,
        input: Input,
        *,
        signal: AbortSignal | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> AgentRun:
        """Queue a turn now and stream it; see ``AgentRun``. Options as for ``send``."""
        self._refuse_reentry("stream")
        output = self._runner.config.output_for(output_type)
        messages = to_messages(input)
        joined = self._join(messages)
        if joined is not None:
            return joined_run(joined)
        controller = linked(signal)
        holder: list[AgentRun] = []
        job = self._submit_turn(messages, controller, emit=lambda e: holder[0]._push(e),
                                approve=None, defer=True, context=context, output=output)  # fmt: skip
        run = AgentRun(job.state.run_id, job.future, controller, join=self._joiner(job),
                       stop=self._stopper(job).stop)  # fmt: skip
        holder.append(run)
        self._workers.submit(self._key, job, owner=self.store)
        return run

    def resume(
        self, *, signal: AbortSignal | None = None, context: Any = None, output_type: Any = None
    ) -> ExecutionResult | None:
        """Finish the interrupted (or approved) turn; ``None`` when none is pending.

        ``context`` is what its tools see as ``ToolContext.context`` and ``output_type``
        what its answer is parsed into (else the agent's); neither is saved with the turn.
        Aborted (``signal``, Ctrl-C), the turn stays pending with what finished recorded
        (``result.pending``).
        """
        result: ExecutionResult | None = self._resume_call(signal, context, output_type)()
        return result

    def _resume_call(
        self, signal: AbortSignal | None, context: Any = None, output_type: Any = None
    ) -> Stoppable:
        """The resume, queued when waited for (so Ctrl-C stops it however soon it comes)."""
        self._refuse_reentry("resume")
        output = self._runner.config.output_for(output_type)
        controller = linked(signal)
        job = self._resume_job(controller, context, None, "", output)
        return stoppable(self._workers, self._key, job, controller.abort, lambda: None, self.store)

    def _resume_stream(self, context: Any, run_id: str, output_type: Any = None) -> AgentRun:
        """Finish the pending turn, streamed (``approvals.resolve_stream``); streams always pause."""
        self._refuse_reentry("resume")
        output = self._runner.config.output_for(output_type)
        controller = AbortController()
        holder: list[AgentRun] = []
        job = self._resume_job(controller, context, lambda e: holder[0]._push(e), run_id, output)
        holder.append(AgentRun(run_id, job.future, controller))
        self._workers.submit(self._key, job, owner=self.store)
        return holder[0]

    def _resume_job(
        self,
        controller: AbortController,
        context: Any,
        emit: Callable[[Event], None] | None,
        run_id: str,
        output: OutputSpec | None,
    ) -> Job:
        approve = self._approve if emit is None else None

        def finish() -> ExecutionResult | None:
            turns = self._turns
            with self._transcript.take(turns.pauses, signal=controller.signal) as taken:
                return turns.finish_pending(
                    turns.plan(taken), controller, emit=emit, approve=approve, context=context,
                    output=output,
                )  # fmt: skip

        return Job(lambda job: announced(finish, emit, run_id), "resume")

    @property
    def _approve(self) -> Approve | None:
        return self._runner.config.approve

    def _submit_turn(
        self,
        messages: list[Message],
        controller: AbortController,
        *,
        emit: Callable[[Event], None] | None,
        approve: Approve | None,
        defer: bool = False,
        context: Any = None,
        output: OutputSpec | None = None,
    ) -> Job:
        turn_job = TurnJob(messages, controller, emit, approve, context, output)
        job = Job(self._execute_turn, "turn", turn_job)
        if not defer:
            self._workers.submit(self._key, job, owner=self.store)
        return job

    def _execute_turn(self, job: Job) -> ExecutionResult:
        tj: TurnJob = job.state
        emit = tj.emit
        try:
            if tj.controller.signal.aborted:
                return self._skip_turn(tj)
            turns = self._turns
            offer = None if tj.prepare else turns.offer(tj.messages, tj.run_id)
            start = None if offer is None else offer.checkpoint
            with self._transcript.take(turns.pauses, start, tj.controller.signal) as taken:
                plan = turns.plan(taken, offer)  # what the turn starts from, decided once
                if tj.prepare is not None:  # regenerate, edit: the rewind, under this lease
                    tj.messages = tj.prepare()
                link, context = tj.controller.signal, tj.context
                earlier = turns.finish_pending(
                    plan, None, link=link, approve=self._approve, context=context
                )
                if earlier is not None and earlier.finish_reason == "aborted":
                    return self._skip_turn(tj, earlier.pending)  # kept; this input not taken
                if earlier is not None and earlier.finish_reason == "awaiting-approval":
                    # it went on and paused again: this input waits for that approval
                    raise turns.awaiting(earlier.approval_id, "send() again after resolving it")
                # found free (not needed when the store saved the offered turn's checkpoint)
                free = turns.next_turn() if earlier is None and plan.started is None else None
                self._maybe_compact()
                turn, state = turns.new_turn(plan, tj.messages, tj.run_id, free)
                result = turns.run(
                    state,
                    turn,
                    tj.controller,
                    plan=plan,
                    emit=emit,
                    approve=tj.approve,
                    inbox=tj.inbox,
                    requeue=self._requeue,
                    context=tj.context,
                    output=tj.output,
                )
        except BaseException as exc:
            emit_to(emit, ErrorEvent(tj.run_id, exc))
            emit_to(emit, RunDone(tj.run_id, "error", None))
            raise
        if emit is not None:  # built only when someone listens
            emit(RunDone(tj.run_id, result.finish_reason, result))
        return result

    def _skip_turn(self, tj: TurnJob, pending: PendingTurn | None = None) -> ExecutionResult:
        """End a turn aborted before it started: its input was not taken, nothing is saved
        (``pending``: the earlier turn it was finishing first, kept pending)."""
        result = ExecutionResult(
            "", finish_reason="aborted", run_id=tj.run_id, session_id=self.id, pending=pending
        )
        settle(tj.inbox, result, None, self._requeue)
        emit_to(tj.emit, RunDone(tj.run_id, "aborted", result))
        return result

    def _stopper(self, job: Job) -> Stoppable:
        """The turn, to queue, and what stops it: not started, it is taken out of the queue and
        ends "aborted" at once (even behind a turn that never ends); running, it is aborted."""
        tj: TurnJob = job.state
        skipped = partial(self._skip_turn, tj)
        return stoppable(self._workers, self._key, job, tj.controller.abort, skipped, self.store)

    def _refuse_reentry(self, call: str) -> None:
        """Refuse a call from this session's own turn (a tool or listener): it would wait for itself."""
        if inside(self._key):
            raise SessionBusyError(
                f"session {self.id!r}: {call}() was called from inside this session's own work "
                "(a tool or a listener); it would wait for itself forever. Return from the tool "
                "or listener first, or use another session."
            )

    def _requeue(self, ticket: Ticket) -> None:
        future = ticket.future
        assert future is not None
        job = self._submit_turn(
            list(ticket.messages), AbortController(), emit=None, approve=self._approve
        )
        job.future.add_done_callback(lambda f: chain(f, future))

    def _join(self, messages: list[Message]) -> Future[ExecutionResult | None] | None:
        """With turn_policy "queue"/"steer", join the running or waiting turn."""
        if self.turn_policy == "wait":
            return None
        for job in self._workers.jobs(self._key):
            if job.kind == "turn":
                future: Future[ExecutionResult | None] = Future()
                if job.state.inbox.join(messages, steer=self.turn_policy == "steer", future=future):
                    return future
        return None

    def _joiner(self, job: Job) -> Callable[[Any, bool], str]:
        def join(input: Input, steer: bool) -> str:
            messages = to_messages(input)
            ticket = job.state.inbox.join(messages, steer=steer)
            if ticket is not None:
                return str(ticket.input_id)
            # the turn has ended: the input runs as the next turn
            self._submit_turn(messages, AbortController(), emit=None, approve=self._approve)
            return "in-next-turn"

        return join

    # -- pending turns --------------------------------------------------------

    def pending(self) -> PendingTurn | None:
        """The unfinished turn (running when the process stopped, or awaiting approval), if any."""
        result: PendingTurn | None = self._pending_future().result()
        return result

    def _pending_future(self) -> Future[PendingTurn | None]:

        def work(job: Job) -> PendingTurn | None:
            self._transcript.sync()
            state = self._turns.pending()
            if state is None:
                return None
            status: Literal["running", "awaiting-approval"] = (
                "awaiting-approval" if state.status == "awaiting-approval" else "running"
            )
            return PendingTurn(status, state.turn_id or "", state.approval_id)

        return self._run_job(work, "pending")

    def discard_pending(self) -> None:
        """Drop the unfinished turn without running it (and its approval, if it waited on one)."""
        self._discard_pending_future().result()

    def _discard_pending_future(self) -> Future[None]:

        def work(job: Job) -> None:
            with self._transcript.turn_lock():
                self._transcript.sync()
                self._turns.drop_pending()

        return self._run_job(work, "discard")

    # -- transcript -----------------------------------------------------------

    @property
    def messages(self) -> tuple[Message, ...]:
        """The transcript as of the last load or turn (user, assistant, tool; no system prompt)."""
        return tuple(self._transcript.messages)

    def load(self) -> tuple[Message, ...]:
        """Read the saved transcript now."""
        result: tuple[Message, ...] = self._load_future().result()
        return result

    def _load_future(self) -> Future[tuple[Message, ...]]:

        def work(job: Job) -> tuple[Message, ...]:
            self._transcript.reload()
            return tuple(self._transcript.messages)

        return self._run_job(work, "load")

    def usage(self) -> Usage:
        """Totals of every ``Usage`` field over the saved transcript (with what compaction
        summaries carry), summed by the store; ``Usage()`` when nothing is saved."""
        return self._usage_future().result()

    def _usage_future(self) -> Future[Usage]:
        return self._run_job(lambda job: self._transcript.store.usage(self.id) or Usage(), "usage")

    def clear(self) -> None:
        """Empty the transcript and save it empty; deletes a pending turn's checkpoint."""
        self._clear_future().result()

    def _clear_future(self) -> Future[None]:
        self._refuse_reentry("clear")
        if self._workers.busy(self._key):
            raise SessionBusyError(f"session {self.id!r} has a turn running or waiting to start")

        def work(job: Job) -> None:
            with self._transcript.turn_lock():
                self._transcript.sync()
                self._turns.refuse_clear()
                self._turns.drop_pending()
                self._transcript.save([])
            self._notify(ContextCleared(self.id))

        return self._run_job(work, "clear")

    def compact(self, *, keep_last: int = 4, instructions: str | None = None) -> CompactionResult:
        """Summarise all but the last ``keep_last`` messages into one summary message and save."""
        result: CompactionResult = self._compact_future(keep_last, instructions).result()
        return result

    def _compact_future(self, keep_last: int, instructions: str | None) -> Future[CompactionResult]:
        if keep_last < 0:
            raise ValueError(f"keep_last must be >= 0, got {keep_last}")

        def work(job: Job) -> CompactionResult:
            with self._transcript.turn_lock():
                self._transcript.sync()
                return self._compact(keep_last, instructions)

        return self._run_job(work, "compact")

    def _compact(self, keep_last: int, instructions: str | None) -> CompactionResult:
        c = self._runner.config
        return compact_transcript(
            self._transcript, c.provider, c.model_name, self._runner.telemetry,
            self.id, keep_last, instructions, self._notify,
        )  # fmt: skip

    def _maybe_compact(self) -> None:
        config = self._runner.config
        policy = config.compaction
        if policy is None:
            return
        if estimate_tokens(self._transcript.messages, config.system) > policy.max_tokens:
            self._compact(policy.keep_last, policy.instructions)

    # -- plumbing -------------------------------------------------------------

    def _run_job(self, fn: Callable[[Job], Any], kind: str) -> Future[Any]:
        self._refuse_reentry(kind)
        job = Job(fn, kind)
        self._workers.submit(self._key, job, owner=self.store)
        return job.future

    def on(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with compaction and clear events; returns its remover."""
        with self._listeners_lock:
            self._listeners.append(listener)

        def remove() -> None:
            with self._listeners_lock, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return remove

    def _notify(self, event: SessionEvent) -> None:
        with self._listeners_lock:
            listeners = list(self._listeners)
        for listener in listeners:
            listener(event)

    def close(self) -> None:
        """Let the thread running this session's work end once its queued work is done.

        An idle session holds no thread; the agent's ``close()`` stops and joins them all.
        """
        self._workers.retire(self._key)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Session {self.id!r} messages={len(self._transcript.messages)}>"
