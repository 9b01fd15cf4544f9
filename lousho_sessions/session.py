"""``Session``: a multi-turn conversation that keeps its transcript in a store.

Every call that touches the store runs as a job on the session's worker thread
(one per (store, session id) in a process), so calls queue in order and a
blocking ``send()`` works the same from a script, a web view or a notebook.
"""

from __future__ import annotations

import builtins
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Literal

from . import _worker
from ._checkpoints import TurnCheckpoints
from ._inbox import Inbox, Ticket
from ._turn import Turn, TurnConfig, TurnState
from .abort import AbortController, AbortSignal
from .compaction import estimate_tokens, spent_by, split_point, summarise, summary_message
from .errors import SessionAwaitingApprovalError, SessionBusyError, StoreCorruptError
from .events import (
    CompactionDone,
    CompactionStart,
    ContextCleared,
    ErrorEvent,
    Event,
    RunDone,
    SessionEvent,
)
from .failures import is_permanent
from .inputs import Input, to_messages
from .messages import Message, Usage
from .results import CompactionResult, ExecutionResult, Limits, PendingTurn
from .run import AgentRun
from .serde import message_to_dict, turn_state_from_checkpoint
from .stores.base import CheckpointStore, SessionStore, validate_session_id

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["Session", "TurnPolicy"]

log = logging.getLogger("lousho_sessions.session")

TurnPolicy = Literal["wait", "queue", "steer"]
#: Stops a queued or running turn, given the reason.
Stop = Callable[[Any], None]
_POLICIES = ("wait", "queue", "steer")


class Session:
    """A conversation: ``send()``/``stream()`` turns that see the whole transcript.

    Create one with ``agent.session(...)``. See the docs for the guarantees:
    ordered turns, an unchanged transcript after a failed or aborted turn, and,
    with a checkpoint store, turns that survive a crash.
    """

    def __init__(
        self,
        agent: Agent,
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
        self.agent = agent
        self.store = store
        self.checkpoint_store = checkpoint_store
        self.turn_policy: TurnPolicy = turn_policy
        self.limits = limits
        # without a checkpoint store, only a turn paused on an approval is kept, in memory
        self._pauses: CheckpointStore = checkpoint_store or agent._pause_store
        self._key = ("session", builtins.id(store), self.id)
        self._cache: list[Message] = []
        self._revision: object = None
        self._loaded = False
        self._spent: tuple[Usage, int, int] = (Usage(), 0, 0)
        self._listeners: list[Callable[[SessionEvent], None]] = []
        self._listeners_lock = threading.Lock()

    # -- turns --------------------------------------------------------------

    def send(
        self, input: Input, *, signal: AbortSignal | None = None, timeout: float | None = None
    ) -> ExecutionResult:
        """Run one turn with the whole transcript and return its result.

        Aborted (``signal`` or ``timeout``): returns ``finish_reason == "aborted"``
        and leaves the transcript as it was.
        """
        result: ExecutionResult = _wait(*self._send_future(input, signal), timeout)
        return result

    def _send_future(
        self, input: Any, signal: AbortSignal | None
    ) -> tuple[Future[ExecutionResult | None], Stop | None]:
        """Queue the turn; its Future and what stops it (None if it joined another turn)."""
        self._refuse_reentry("send")
        messages = to_messages(input)
        joined = self._join(messages)
        if joined is not None:
            return joined, None
        controller = _linked(signal)
        job = self._submit_turn(messages, controller, emit=None, approve=self.agent.approve)
        return job.future, self._stopper(job)

    def stream(self, input: Input, *, signal: AbortSignal | None = None) -> AgentRun:
        """Queue a turn now and stream it; see ``AgentRun``."""
        self._refuse_reentry("stream")
        messages = to_messages(input)
        joined = self._join(messages)
        if joined is not None:
            return _joined_run(joined)
        controller = _linked(signal)
        holder: list[AgentRun] = []
        job = self._submit_turn(
            messages, controller, emit=lambda e: holder[0]._push(e), approve=None, defer=True
        )
        run = AgentRun(
            job.state.run_id,
            job.future,
            controller,
            join=self._joiner(job),
            stop=self._stopper(job),
        )
        holder.append(run)
        _worker.submit(self._key, job, owner=self.store)
        return run

    def resume(self, *, signal: AbortSignal | None = None) -> ExecutionResult | None:
        """Finish the interrupted (or approved) turn; ``None`` when none is pending."""
        result: ExecutionResult | None = self._resume_future(signal)[0].result()
        return result

    def _resume_future(
        self, signal: AbortSignal | None
    ) -> tuple[Future[ExecutionResult | None], AbortController]:
        self._refuse_reentry("resume")
        controller = _linked(signal)

        def work(job: _worker.Job) -> ExecutionResult | None:
            with self._turn_lock():
                self._sync()
                return self._finish_pending(controller, emit=None)

        return self._run_job(work, "resume"), controller

    def _submit_turn(
        self,
        messages: list[Message],
        controller: AbortController,
        *,
        emit: Callable[[Event], None] | None,
        approve: Any,
        defer: bool = False,
    ) -> _worker.Job:
        state = _TurnJob(messages, controller, emit, approve)
        job = _worker.Job(self._execute_turn, "turn", state)
        if not defer:
            _worker.submit(self._key, job, owner=self.store)
        return job

    def _execute_turn(self, job: _worker.Job) -> ExecutionResult:
        tj: _TurnJob = job.state
        emit = tj.emit
        try:
            if tj.controller.signal.aborted:
                return self._skip_turn(tj)
            with self._turn_lock():
                self._sync()
                earlier = self._finish_pending(
                    AbortController(), emit=None, link=tj.controller.signal
                )
                if earlier is not None and earlier.finish_reason == "awaiting-approval":
                    # the pending turn went on and paused again: it keeps its turn id, and
                    # this input waits until that approval is resolved (never overwrites it)
                    raise self._awaiting(earlier.approval_id, "send() again after resolving it")
                self._maybe_compact()
                turn_id = self._free_turn_id()
                state = TurnState.start(
                    tj.messages,
                    history=self._cache,
                    session_id=self.id,
                    turn_id=turn_id,
                    run_id=tj.run_id,
                )
                result = self._drive(
                    state, tj.controller, emit=emit, approve=tj.approve, inbox=tj.inbox
                )
        except BaseException as exc:
            _emit(emit, ErrorEvent(tj.run_id, exc))
            _emit(emit, RunDone(tj.run_id, "error", None))
            raise
        _emit(emit, RunDone(tj.run_id, result.finish_reason, result))
        return result

    def _skip_turn(self, tj: _TurnJob) -> ExecutionResult:
        """End a turn aborted before it started: nothing ran, nothing is saved."""
        result = ExecutionResult("", finish_reason="aborted", run_id=tj.run_id, session_id=self.id)
        self._settle(tj.inbox, result, None, requeue=True)
        _emit(tj.emit, RunDone(tj.run_id, "aborted", result))
        return result

    def _stopper(self, job: _worker.Job) -> Stop:
        """What stops a queued turn: a turn that has not started is taken out of the queue and
        ends "aborted" at once (even behind a turn that never ends); a running one is aborted."""
        tj: _TurnJob = job.state

        def stop(reason: Any) -> None:
            tj.controller.abort(reason)
            if _worker.withdraw(self._key, job):
                job.future.set_result(self._skip_turn(tj))

        return stop

    def _refuse_reentry(self, call: str) -> None:
        """Refuse a call from this session's own turn (a tool or listener): it would wait for itself."""
        if _worker.inside(self._key):
            raise SessionBusyError(
                f"session {self.id!r}: {call}() was called from inside this session's own work "
                "(a tool or a listener); it would wait for itself forever. Return from the tool "
                "or listener first, or use another session."
            )

    def _drive(
        self,
        state: TurnState,
        controller: AbortController,
        *,
        emit: Callable[[Event], None] | None,
        approve: Any,
        inbox: Inbox | None,
        resumed: bool = False,
    ) -> ExecutionResult:
        """Run ``state`` to an end and save what it finished. Runs on the worker, under the turn lock."""
        agent = self.agent
        config = TurnConfig(
            provider=agent.provider,
            system=agent.system,
            tools=agent.tools,
            signal=controller.signal,
            approvals=agent._approval_store,
            settings=agent.settings,
            max_steps=agent.max_steps,
            limits=agent.limits,
            session_limits=self.limits,
            session_spent=self._spent,
            model_name=agent.model_name,
            pricing=agent.pricing,
            approve=approve,
            checkpoints=(checkpoints := self._checkpoints()),
            emit=emit,
            run_tools=agent._run_tools,
            tool_loop=agent._tool_loop,
            inbox=inbox,
        )
        kept = self.checkpoint_store is not None or resumed  # a checkpoint may exist
        try:
            result = Turn(state, config).run()
            if result.finish_reason not in ("aborted", "awaiting-approval"):
                self._commit(list(state.new))
        except BaseException as exc:
            permanent = is_permanent(exc)
            if inbox is not None:
                left = inbox.close()
                if left and self.checkpoint_store is not None and not permanent:
                    state.queued.extend(
                        {
                            "input_id": t.input_id,
                            "messages": [message_to_dict(m) for m in t.messages],
                        }
                        for t in left
                    )
                    checkpoints.save(state)
            if permanent and kept:
                # would fail the same way on every try: end the turn instead of keeping it
                log.warning("turn %s ended by a permanent failure: %r", state.turn_id, exc)
                self._forget_checkpoint(checkpoints, state)
            self._settle(inbox, None, exc)
            raise
        if result.finish_reason == "aborted":
            if kept:
                checkpoints.forget(state)
        elif result.finish_reason != "awaiting-approval" and kept:
            self._forget_checkpoint(checkpoints, state)
        self._settle(inbox, result, None, requeue=True)
        return result

    def _settle(
        self,
        inbox: Inbox | None,
        result: ExecutionResult | None,
        error: BaseException | None,
        *,
        requeue: bool = False,
    ) -> None:
        """Answer the callers that joined this turn; input it never took runs as the next turn."""
        if inbox is None:
            return
        left = inbox.close()
        for ticket in inbox.tickets:
            if ticket.future is None or ticket.future.done():
                continue
            if error is not None:
                ticket.future.set_exception(error)
            elif ticket in left and requeue:
                self._requeue(ticket)
            elif result is not None:
                ticket.future.set_result(result)

    def _requeue(self, ticket: Ticket) -> None:
        future = ticket.future
        assert future is not None
        job = self._submit_turn(
            list(ticket.messages), AbortController(), emit=None, approve=self.agent.approve
        )
        job.future.add_done_callback(lambda f: _chain(f, future))

    def _join(self, messages: list[Message]) -> Future[ExecutionResult | None] | None:
        """With turn_policy "queue"/"steer", join the running or waiting turn."""
        if self.turn_policy == "wait":
            return None
        worker = _worker.worker_for(self._key)
        if worker is None:
            return None
        for job in worker.jobs():
            if job.kind == "turn":
                future: Future[ExecutionResult | None] = Future()
                if job.state.inbox.join(messages, steer=self.turn_policy == "steer", future=future):
                    return future
        return None

    def _joiner(self, job: _worker.Job) -> Callable[[Any, bool], str]:
        def join(input: Any, steer: bool) -> str:
            messages = to_messages(input)
            ticket = job.state.inbox.join(messages, steer=steer)
            if ticket is not None:
                return str(ticket.input_id)
            # the turn has ended: the input runs as the next turn
            self._submit_turn(messages, AbortController(), emit=None, approve=self.agent.approve)
            return "in-next-turn"

        return join

    # -- durable turns --------------------------------------------------------

    def _checkpoints(self) -> TurnCheckpoints:
        """Every checkpoint with a checkpoint store; else only a pause, in memory."""
        return TurnCheckpoints(self._pauses, durable=self.checkpoint_store is not None)

    def _forget_checkpoint(self, checkpoints: TurnCheckpoints, state: TurnState) -> None:
        """Delete a finished turn's checkpoint. The turn is saved already, so a failure here
        must not fail the call: the checkpoint's key is behind the transcript now and is
        never taken for a pending turn (``prune()`` and ``clear()`` remove it)."""
        try:
            checkpoints.forget(state)
        except Exception:
            log.warning("could not delete the checkpoint of turn %s", state.turn_id, exc_info=True)

    def _awaiting(self, approval_id: str | None, then: str) -> SessionAwaitingApprovalError:
        return SessionAwaitingApprovalError(
            f"session {self.id!r} waits on approval {approval_id!r}; resolve it with "
            f"agent.approvals.resolve() or drop the turn with discard_pending(), then {then}",
            approval_id=approval_id,
        )

    def _free_turn_id(self) -> str:
        """The id of a new turn: ``<session id>.turn-<n>``, refused while a turn holds it.

        Called under the turn lock after the pending turn was finished, so the key is
        free unless that turn could not end; a checkpoint is never overwritten by another turn.
        """
        turn_id = f"{self.id}.turn-{len(self._cache)}"
        data = self._pauses.load(turn_id)
        if data is not None:
            if data.get("status") == "awaiting-approval":
                raise self._awaiting(data.get("approval_id"), "send() again")
            raise SessionBusyError(
                f"session {self.id!r}: turn {turn_id!r} is still pending; "
                "finish it with resume() or drop it with discard_pending()"
            )
        return turn_id

    def _pending_state(self) -> TurnState | None:
        turn_id = f"{self.id}.turn-{len(self._cache)}"
        data = self._pauses.load(turn_id)
        if data is None:
            return None
        last = self._cache[-1].id if self._cache else None
        if data.get("base_last_id") != last or data.get("base_length") != len(self._cache):
            log.warning("dropping stale checkpoint %s: the transcript changed under it", turn_id)
            self._pauses.delete(turn_id)
            return None
        try:
            state = turn_state_from_checkpoint(data, self._cache, source=f"checkpoint {turn_id!r}")
            self._checkpoints().merge_records(state)
        except (AttributeError, KeyError, TypeError) as exc:  # fields of the wrong type
            raise StoreCorruptError(
                f"checkpoint {turn_id!r}: cannot read checkpoint: {exc!r}"
            ) from exc
        return state

    def _finish_pending(
        self,
        controller: AbortController,
        *,
        emit: Callable[[Event], None] | None,
        link: AbortSignal | None = None,
    ) -> ExecutionResult | None:
        state = self._pending_state()
        if state is None:
            return None
        if state.status == "awaiting-approval":
            record = self.agent._approval_store.get(state.approval_id or "")
            if record is None or record.get("status") == "pending":
                raise self._awaiting(state.approval_id, "try again")
            state.status, state.approval_id = "running", None
        if link is not None:
            link.add_callback(lambda s: controller.abort(s.reason))
        return self._drive(
            state, controller, emit=emit, approve=self.agent.approve, inbox=None, resumed=True
        )

    def pending(self) -> PendingTurn | None:
        """The unfinished turn (running when the process stopped, or awaiting approval), if any."""
        result: PendingTurn | None = self._pending_future().result()
        return result

    def _pending_future(self) -> Future[PendingTurn | None]:

        def work(job: _worker.Job) -> PendingTurn | None:
            self._sync()
            state = self._pending_state()
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

        def work(job: _worker.Job) -> None:
            with self._turn_lock():
                self._sync()
                self._drop_pending()

        return self._run_job(work, "discard")

    def _drop_pending(self) -> None:
        approvals = self.agent._approval_store
        for turn_id in self._pauses.list(f"{self.id}.turn-"):
            try:
                data = self._pauses.load(turn_id)
            except StoreCorruptError as exc:  # unreadable: delete it and the approvals it made
                log.warning("deleting unreadable checkpoint %s: %s", turn_id, exc)
                for record in approvals.list(session_id=self.id, status=None):
                    if record.get("turn_id") == turn_id:
                        approvals.delete(str(record.get("id")))
                data = None
            if data and isinstance(data.get("approval_id"), str):
                approvals.delete(data["approval_id"])
            self._pauses.delete(turn_id)

    # -- transcript -----------------------------------------------------------

    @property
    def messages(self) -> tuple[Message, ...]:
        """The transcript as of the last load or turn (user, assistant, tool; no system prompt)."""
        return tuple(self._cache)

    def load(self) -> tuple[Message, ...]:
        """Read the saved transcript now."""
        result: tuple[Message, ...] = self._load_future().result()
        return result

    def _load_future(self) -> Future[tuple[Message, ...]]:

        def work(job: _worker.Job) -> tuple[Message, ...]:
            self._loaded = False
            self._sync()
            return tuple(self._cache)

        return self._run_job(work, "load")

    def clear(self) -> None:
        """Empty the transcript and save it empty; deletes a pending turn's checkpoint."""
        self._clear_future().result()

    def _clear_future(self) -> Future[None]:
        self._refuse_reentry("clear")
        self._ensure_idle()

        def work(job: _worker.Job) -> None:
            with self._turn_lock():
                self._sync()
                try:
                    state = self._pending_state()
                except StoreCorruptError as exc:  # clear() deletes it without reading it
                    log.warning(
                        "clear() of session %r drops an unreadable checkpoint: %s", self.id, exc
                    )
                    state = None
                if state is not None and state.status == "awaiting-approval":
                    record = self.agent._approval_store.get(state.approval_id or "")
                    if record is None or record.get("status") == "pending":
                        raise SessionAwaitingApprovalError(
                            f"session {self.id!r} waits on approval {state.approval_id!r}; "
                            "resolve it or call discard_pending() before clear()",
                            approval_id=state.approval_id,
                        )
                self._drop_pending()
                self.store.save(self.id, [])
                self._set_cache([])
            self._notify(ContextCleared(self.id))

        return self._run_job(work, "clear")

    def compact(self, *, keep_last: int = 4, instructions: str | None = None) -> CompactionResult:
        """Summarise all but the last ``keep_last`` messages into one summary message and save."""
        result: CompactionResult = self._compact_future(keep_last, instructions).result()
        return result

    def _compact_future(self, keep_last: int, instructions: str | None) -> Future[CompactionResult]:
        if keep_last < 0:
            raise ValueError(f"keep_last must be >= 0, got {keep_last}")

        def work(job: _worker.Job) -> CompactionResult:
            with self._turn_lock():
                self._sync()
                return self._compact(keep_last, instructions)

        return self._run_job(work, "compact")

    def _compact(self, keep_last: int, instructions: str | None) -> CompactionResult:
        before = list(self._cache)
        cut = split_point(before, keep_last)
        if cut == 0:
            return CompactionResult("", len(before), len(before), compacted=False)
        self._notify(CompactionStart(self.id))
        text, usage = summarise(self.agent.provider, before[:cut], instructions=instructions)
        summary = summary_message(text, before[:cut], usage)
        after = [summary, *before[cut:]]
        self.store.save(self.id, after)
        self._set_cache(after)
        result = CompactionResult(text, len(before), len(after), usage)
        self._notify(CompactionDone(self.id, result))
        return result

    def _maybe_compact(self) -> None:
        policy = self.agent.compaction
        if policy is None:
            return
        if estimate_tokens(self._cache, self.agent.system) > policy.max_tokens:
            self._compact(policy.keep_last, policy.instructions)

    def _sync(self) -> None:
        """Reload the transcript if the store changed since this session last looked."""
        revision_of = getattr(self.store, "revision", None)
        if revision_of is not None:
            revision = revision_of(self.id)
            if self._loaded and revision == self._revision:
                return
        else:
            revision = None
        self._set_cache(self.store.load(self.id) or [], revision)

    def _set_cache(self, messages: list[Message], revision: object = None) -> None:
        self._cache = messages
        self._spent = spent_by(messages)
        self._loaded = True
        if revision is None:
            revision_of = getattr(self.store, "revision", None)
            revision = revision_of(self.id) if revision_of is not None else None
        self._revision = revision

    def _commit(self, new: list[Message]) -> None:
        append = getattr(self.store, "append", None)
        if append is not None:
            append(self.id, new, len(self._cache))
        else:
            self.store.save(self.id, [*self._cache, *new])
        self._cache.extend(new)
        usage, steps, calls = spent_by(new)
        old_usage, old_steps, old_calls = self._spent
        self._spent = (old_usage + usage, old_steps + steps, old_calls + calls)
        revision_of = getattr(self.store, "revision", None)
        self._revision = revision_of(self.id) if revision_of is not None else None

    # -- plumbing -------------------------------------------------------------

    def _turn_lock(self) -> contextlib.AbstractContextManager[Any]:
        lock = getattr(self.store, "turn_lock", None)
        return lock(self.id) if lock is not None else contextlib.nullcontext()

    def _run_job(self, fn: Callable[[_worker.Job], Any], kind: str) -> Future[Any]:
        self._refuse_reentry(kind)
        job = _worker.Job(fn, kind)
        _worker.submit(self._key, job, owner=self.store)
        return job.future

    def _ensure_idle(self) -> None:
        worker = _worker.worker_for(self._key)
        if worker is not None and worker.thread is threading.current_thread():
            return
        if worker is not None and worker.busy():
            raise SessionBusyError(f"session {self.id!r} has a turn running or waiting to start")

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
        """End this session's worker thread once its queued work is done."""
        worker = _worker.worker_for(self._key)
        if worker is not None:
            worker.stop_when_idle()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Session {self.id!r} messages={len(self._cache)}>"


class _TurnJob:
    """What a queued turn carries until its worker runs it."""

    __slots__ = ("approve", "controller", "emit", "inbox", "messages", "run_id")

    def __init__(
        self, messages: list[Message], controller: AbortController, emit: Any, approve: Any
    ) -> None:
        self.messages = messages
        self.controller = controller
        self.emit = emit
        self.approve = approve
        self.inbox = Inbox()
        self.run_id = "run-" + uuid.uuid4().hex


def _emit(emit: Callable[[Event], None] | None, event: Event) -> None:
    if emit is not None:
        emit(event)


def _linked(signal: AbortSignal | None) -> AbortController:
    controller = AbortController()
    if signal is not None:
        signal.add_callback(lambda s: controller.abort(s.reason))
    return controller


def _wait(future: Future[Any], stop: Stop | None, timeout: float | None) -> Any:
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


def _chain(source: Future[Any], target: Future[Any]) -> None:
    if target.done():
        return
    error = source.exception()
    if error is not None:
        target.set_exception(error)
    else:
        target.set_result(source.result())


def _joined_run(future: Future[ExecutionResult | None]) -> AgentRun:
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
