"""``Session``: a multi-turn conversation that keeps its transcript in a store.

Every call that touches the store runs as a job on the session's lane of the
agent's workers (one lane per (store, session id) per agent), so calls queue in
order and a blocking ``send()`` works the same from a script, a web view or a
notebook. A ``Session`` is the face of its ``SessionCore`` (``engine._session_core``):
the lane, the transcript (``_transcript``), the durable turns (``_durable``) and the
turns as jobs, which ``AsyncSession``, the approvals and recovery use too; every turn
runs through the agent's ``TurnRunner``.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Literal, overload

from ._session_history import HistoryMixin
from ._session_state import StateMixin
from .abort import AbortSignal
from .engine._session_core import SessionCore, TurnPolicy
from .errors import SessionBusyError
from .events import ContextCleared, SessionEvent
from .inputs import Input
from .messages import Message, Usage
from .results import CompactionResult, ExecutionResult, PendingTurn
from .results import OutputT as _T
from .run import AgentRun
from .runtime._calls import Stop, Stoppable
from .runtime._worker import Job

__all__ = ["Session", "TurnPolicy"]


class Session(HistoryMixin, StateMixin):
    """A conversation: ``send()``/``stream()`` turns that see the whole transcript.

    Create one with ``agent.session(...)``. Guarantees (see the docs): ordered turns, an unchanged
    transcript after a failed or aborted turn, with a checkpoint store turns that survive a crash.
    """

    def __init__(self, core: SessionCore) -> None:
        self._core = core
        self.id = core.id
        self.store = core.store
        self.checkpoint_store = core.checkpoint_store
        self.limits = core.limits

    @property
    def turn_policy(self) -> TurnPolicy:
        """How a ``send`` meets a running turn: ``"wait"``, ``"queue"`` or ``"steer"``."""
        return self._core.turn_policy

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
        call = self._core.send_call(input, signal, context, output_type)
        result: ExecutionResult = call.wait(timeout)  # queues it: Ctrl-C stops it at any point
        return result

    def _send_future(
        self, input: Input, signal: AbortSignal | None, context: Any = None, output_type: Any = None
    ) -> tuple[Future[ExecutionResult | None], Stop | None]:
        """Queue the turn; its Future and what stops it (None if it joined another turn)."""
        return self._core.send_call(input, signal, context, output_type).queued()

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
        return self._core.stream(input, signal, context, output_type)

    def resume(
        self, *, signal: AbortSignal | None = None, context: Any = None, output_type: Any = None
    ) -> ExecutionResult | None:
        """Finish the interrupted (or approved) turn; ``None`` when none is pending.

        ``context`` is what its tools see as ``ToolContext.context`` and ``output_type``
        what its answer is parsed into (else the agent's); neither is saved with the turn.
        Aborted (``signal``, Ctrl-C), the turn stays pending with what finished recorded
        (``result.pending``).
        """
        result: ExecutionResult | None = self._core.resume_call(signal, context, output_type)()
        return result

    def _resume_call(
        self, signal: AbortSignal | None, context: Any = None, output_type: Any = None
    ) -> Stoppable:
        """The resume, queued when waited for (``aio`` queues it now)."""
        return self._core.resume_call(signal, context, output_type)

    # -- pending turns --------------------------------------------------------

    def pending(self) -> PendingTurn | None:
        """The unfinished turn (running when the process stopped, or awaiting approval), if any."""
        result: PendingTurn | None = self._pending_future().result()
        return result

    def _pending_future(self) -> Future[PendingTurn | None]:
        core = self._core

        def work(job: Job) -> PendingTurn | None:
            core.transcript.sync()
            state = core.turns.pending()
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
        core = self._core

        def work(job: Job) -> None:
            with core.transcript.turn_lock():
                core.transcript.sync()
                core.turns.drop_pending()

        return self._run_job(work, "discard")

    # -- transcript -----------------------------------------------------------

    @property
    def messages(self) -> tuple[Message, ...]:
        """The transcript as of the last load or turn (user, assistant, tool; no system prompt)."""
        return tuple(self._core.transcript.messages)

    def load(self) -> tuple[Message, ...]:
        """Read the saved transcript now."""
        result: tuple[Message, ...] = self._load_future().result()
        return result

    def _load_future(self) -> Future[tuple[Message, ...]]:
        transcript = self._core.transcript

        def work(job: Job) -> tuple[Message, ...]:
            transcript.reload()
            return tuple(transcript.messages)

        return self._run_job(work, "load")

    def usage(self) -> Usage:
        """Totals of every ``Usage`` field over the saved transcript (with what compaction
        summaries carry), summed by the store; ``Usage()`` when nothing is saved."""
        return self._usage_future().result()

    def _usage_future(self) -> Future[Usage]:
        store = self._core.transcript.store
        return self._run_job(lambda job: store.usage(self.id) or Usage(), "usage")

    def clear(self) -> None:
        """Empty the transcript and save it empty; deletes a pending turn's checkpoint."""
        self._clear_future().result()

    def _clear_future(self) -> Future[None]:
        core = self._core
        core.lane.refuse_reentry("clear")
        if core.lane.busy():
            raise SessionBusyError(f"session {self.id!r} has a turn running or waiting to start")

        def work(job: Job) -> None:
            with core.transcript.turn_lock():
                core.transcript.sync()
                core.turns.refuse_clear()
                core.turns.drop_pending()
                core.transcript.save([])
            core.notify(ContextCleared(self.id))

        return self._run_job(work, "clear")

    def compact(self, *, keep_last: int = 4, instructions: str | None = None) -> CompactionResult:
        """Summarise all but the last ``keep_last`` messages into one summary message and save."""
        result: CompactionResult = self._compact_future(keep_last, instructions).result()
        return result

    def _compact_future(self, keep_last: int, instructions: str | None) -> Future[CompactionResult]:
        if keep_last < 0:
            raise ValueError(f"keep_last must be >= 0, got {keep_last}")

        core = self._core

        def work(job: Job) -> CompactionResult:
            with core.transcript.turn_lock():
                core.transcript.sync()
                return core.compact(keep_last, instructions)

        return self._run_job(work, "compact")

    # -- plumbing -------------------------------------------------------------

    def _run_job(self, fn: Callable[[Job], Any], kind: str) -> Future[Any]:
        return self._core.run(fn, kind)

    def on(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Call ``listener`` with compaction and clear events; returns its remover."""
        return self._core.on(listener)

    def close(self) -> None:
        """Let the thread running this session's work end once its queued work is done.

        An idle session holds no thread; the agent's ``close()`` stops and joins them all.
        """
        self._core.lane.retire()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Session {self.id!r} messages={len(self._core.transcript.messages)}>"
