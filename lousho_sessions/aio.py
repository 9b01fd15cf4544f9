"""``lousho_sessions.aio``: await the sync core from asyncio code.

``AsyncAgent(agent)``, ``AsyncSession(session)`` and ``AsyncAgentRun`` wrap the
sync objects (``.sync`` gives them back). The work runs on the same session
worker threads as the sync API: awaiting waits on the job's
``concurrent.futures.Future`` through ``asyncio.wrap_future``, and stream events
reach the loop through ``loop.call_soon_threadsafe``, so the event loop never
blocks. Cancelling the task that awaits a turn aborts the turn, which leaves the
transcript as it was.

This is the only module of the package that imports asyncio.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import Future
from types import TracebackType
from typing import Any, Generic, ParamSpec, TypeVar, overload

from ._session_history import point_of
from .abort import AbortSignal
from .agent import Agent
from .agent import create_agent as _create_agent
from .approvals import ApprovalRequest, Approvals
from .events import Event, RunDone, SessionEvent
from .inputs import Input
from .messages import Message, Usage
from .results import CompactionResult, ExecutionResult, OutputT, PendingTurn
from .run import AgentRun
from .runtime import _worker
from .runtime._calls import Stoppable, saved
from .session import Session
from .stores._summaries import SessionInfo

__all__ = ["AsyncAgent", "AsyncAgentRun", "AsyncApprovals", "AsyncSession", "create_agent"]

T = TypeVar("T")
P = ParamSpec("P")
_Abort = Callable[[Any], None]


async def _wait(
    future: Future[T],
    stop: _Abort | None = None,
    timeout: float | None = None,
    *,
    stop_on_timeout: bool = True,
) -> T:
    """Await a worker's Future; ``stop`` (if given) stops the turn it computes.

    After ``timeout`` seconds: ``stop("timeout")`` and return what the turn ended with,
    as the sync calls do (without ``stop`` or ``stop_on_timeout``: ``TimeoutError``). Cancelled: ``stop("cancelled")``,
    then wait for the turn to end: ``CancelledError`` if nothing was saved (it never started,
    was aborted or failed), else its result — the turn was saved and retrying would repeat it.
    """
    # one asyncio view of the Future, always awaited through shield: cancelling the awaiting
    # task must not cancel the worker's job (it is stopped through ``stop`` instead)
    waiting = asyncio.wrap_future(future)
    try:
        if timeout is not None:
            await asyncio.wait({waiting}, timeout=timeout)
            if not waiting.done():
                if stop is None or not stop_on_timeout:
                    raise TimeoutError(f"no result within {timeout} s")
                stop("timeout")
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        if stop is None:
            raise
        stop("cancelled")
        kept = await _outcome(waiting)
        if kept is None:
            raise
        return kept[0]


async def _outcome(waiting: asyncio.Future[T]) -> tuple[T] | None:
    """Wait (through further cancellations) for a stopped turn; its result if it was saved."""
    while not waiting.done():
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(waiting)
    if waiting.cancelled() or waiting.exception() is not None:
        return None
    result = waiting.result()
    return (result,) if saved(result) else None


async def _drive(steps: _worker.Steps[T]) -> T:
    """Await each step of a multi-step call; ``_worker.drive`` is the sync twin."""
    value: Any = None
    error: Exception | None = None
    while True:
        try:
            step = steps.send(value) if error is None else steps.throw(error)
        except StopIteration as stop:
            result: T = stop.value
            return result
        try:
            if isinstance(step, Stoppable):  # a turn: cancelling the task stops it
                value = await _wait(*step.queued())
            elif isinstance(step, Future):
                value = await _wait(step)
            else:  # a blocking store call with no worker Future: keep it off the loop
                value = await asyncio.to_thread(step)
            error = None
        except Exception as exc:
            value, error = None, exc


class AsyncAgentRun(Generic[OutputT]):
    """A streamed turn for asyncio: ``async for event in run``, ``await run.result()``.

    Made by ``stream()`` inside a coroutine; events go to that coroutine's loop.
    Leaving the loop early, leaving ``async with``, or cancelling the task that
    iterates or awaits the result aborts the run unless it had finished.
    """

    def __init__(self, run: AgentRun[OutputT]) -> None:
        self.sync = run
        self._loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._iterated = False
        run._deliver_to(self._sink)

    def _sink(self, event: Event) -> None:
        """Called on the worker thread for each event."""
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:  # the loop is closed: nobody is left to read the run
            self.sync.abort("event loop closed")

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def done(self) -> bool:
        return self.sync.done

    def __aiter__(self) -> AsyncIterator[Event]:
        if self._iterated:
            raise RuntimeError(f"run {self.id} was iterated already; events are delivered once")
        self._iterated = True
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Event]:
        try:
            while True:
                event = await self._events.get()
                yield event
                if isinstance(event, RunDone):
                    return
        finally:
            self.sync.__exit__(None, None, None)  # aborts unless the run finished

    async def result(self, timeout: float | None = None) -> ExecutionResult[OutputT]:
        """The turn's result; raises the turn's error, or ``TimeoutError``."""
        result: ExecutionResult[OutputT] | None = await _wait(
            self.sync._future, self.sync.abort, timeout, stop_on_timeout=False
        )
        if result is None:
            raise RuntimeError(f"run {self.id} has no result")
        return result

    def abort(self, reason: Any = None) -> None:
        self.sync.abort(reason)

    def enqueue(self, input: Input) -> str:
        return self.sync.enqueue(input)

    def steer(self, input: Input) -> str:
        return self.sync.steer(input)

    async def __aenter__(self) -> AsyncAgentRun[OutputT]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.sync.__exit__(exc_type, exc, tb)

    def __repr__(self) -> str:
        return f"<AsyncAgentRun {self.id} done={self.done}>"


class AsyncSession:
    """A ``Session`` for asyncio; every member means what it does on ``Session``."""

    def __init__(self, session: Session) -> None:
        self.sync = session

    @property
    def id(self) -> str:
        return self.sync.id

    @property
    def messages(self) -> tuple[Message, ...]:
        return self.sync.messages

    @overload
    async def send(self, input: Input, *, signal: AbortSignal | None = None,
                   timeout: float | None = None, context: Any = None,
                   output_type: type[T]) -> ExecutionResult[T]: ...  # fmt: skip
    @overload
    async def send(self, input: Input, *, signal: AbortSignal | None = None,
                   timeout: float | None = None, context: Any = None,
                   output_type: Any = None) -> ExecutionResult: ...  # fmt: skip

    async def send(
        self,
        input: Input,
        *,
        signal: AbortSignal | None = None,
        timeout: float | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> ExecutionResult:
        future, stop = self.sync._send_future(input, signal, context, output_type)
        result = await _wait(future, stop, timeout)
        assert result is not None  # only resume() may have no result
        return result

    @overload
    def stream(self, input: Input, *, signal: AbortSignal | None = None, context: Any = None,
               output_type: type[T]) -> AsyncAgentRun[T]: ...  # fmt: skip
    @overload
    def stream(self, input: Input, *, signal: AbortSignal | None = None, context: Any = None,
               output_type: Any = None) -> AsyncAgentRun: ...  # fmt: skip

    def stream(
        self,
        input: Input,
        *,
        signal: AbortSignal | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> AsyncAgentRun:
        asyncio.get_running_loop()  # raises outside a coroutine, before a turn is queued
        run = self.sync.stream(input, signal=signal, context=context, output_type=output_type)
        return AsyncAgentRun(run)

    async def resume(
        self, *, signal: AbortSignal | None = None, context: Any = None, output_type: Any = None
    ) -> ExecutionResult | None:
        return await _wait(*self.sync._resume_call(signal, context, output_type).queued())

    async def load(self) -> tuple[Message, ...]:
        return await _wait(self.sync._load_future())

    async def compact(
        self, *, keep_last: int = 4, instructions: str | None = None
    ) -> CompactionResult:
        return await _wait(self.sync._compact_future(keep_last, instructions))

    async def usage(self) -> Usage:
        """``Session.usage()``: the usage totals of the saved transcript."""
        return await _wait(self.sync._usage_future())

    async def clear(self) -> None:
        await _wait(self.sync._clear_future())

    async def pending(self) -> PendingTurn | None:
        return await _wait(self.sync._pending_future())

    async def rewind(self, to: int | str) -> list[Message]:
        """``Session.rewind``: keep the messages before ``to``; the removed ones."""
        return await _wait(self.sync._rewind_future(lambda m: point_of(self.id, m, to)))

    async def regenerate(self, **options: Any) -> ExecutionResult:
        """``Session.regenerate``: rewind to the last user message and send it again."""
        future, stop, timeout = self.sync._prepared_future(self.sync._regenerating(), **options)
        result = await _wait(future, stop, timeout)
        assert result is not None
        return result

    async def regenerate_stream(self, **options: Any) -> AsyncAgentRun:
        """``Session.regenerate_stream``: ``async for`` the new turn (the rewind its first step)."""
        asyncio.get_running_loop()  # raises outside a coroutine, before a turn is queued
        return AsyncAgentRun(self.sync._prepared_stream(self.sync._regenerating(), **options))

    async def edit(self, message_id: str, input: Input, **options: Any) -> ExecutionResult:
        """``Session.edit``: rewind to the user message ``message_id`` and send ``input``."""
        prepare = self.sync._editing(message_id, input)
        future, stop, timeout = self.sync._prepared_future(prepare, **options)
        result = await _wait(future, stop, timeout)
        assert result is not None
        return result

    async def edit_stream(self, message_id: str, input: Input, **options: Any) -> AsyncAgentRun:
        """``Session.edit_stream``: ``async for`` the new turn (the rewind its first step)."""
        prepare = self.sync._editing(message_id, input)
        return AsyncAgentRun(self.sync._prepared_stream(prepare, **options))

    async def fork(self, new_id: str, at: int | str | None = None) -> AsyncSession:
        """``Session.fork``: the new session, for asyncio."""
        return AsyncSession(await _wait(self.sync._fork_future(new_id, at)))

    async def state(self) -> Mapping[str, Any]:
        """``Session.state``, awaited (``await session.state()``): a read-only view of a copy."""
        return await asyncio.to_thread(lambda: self.sync.state)

    async def update_state(self, fn: Callable[[dict[str, Any]], Any]) -> Mapping[str, Any]:
        """``Session.update_state``: ``fn`` changes a copy under the session's lease; the new state."""
        return await _wait(self.sync._update_state_future(fn))

    async def info(self) -> SessionInfo | None:
        """``Session.info``: length, last write, and a fork's parent and fork point."""
        return await asyncio.to_thread(self.sync.info)

    async def discard_pending(self) -> None:
        await _wait(self.sync._discard_pending_future())

    def on(self, listener: Callable[[SessionEvent], None]) -> Callable[[], None]:
        """Listeners are called on the worker thread, as with ``Session.on``."""
        return self.sync.on(listener)

    def close(self) -> None:
        self.sync.close()

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<AsyncSession {self.id!r} messages={len(self.messages)}>"


class AsyncApprovals:
    """``agent.approvals`` for asyncio."""

    def __init__(self, approvals: Approvals) -> None:
        self.sync = approvals

    async def resolve(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> ExecutionResult | None:
        """As ``Approvals.resolve``: ``resolve("appr-…", approved=True)`` or ``resolve(id=...)``.

        Cancelling the awaiting task aborts the continued turn (the decision stays recorded).
        """
        steps = self.sync._resolve_steps(id, approved, reason, context, output_type, arguments)
        return await _drive(steps)

    async def resolve_stream(
        self,
        id: str,
        *,
        approved: bool,
        reason: str | None = None,
        arguments: Mapping[str, Any] | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> AsyncAgentRun:
        """As ``Approvals.resolve_stream``: await the decision, then ``async for`` the run.

        ``ApprovalAlreadyResolvedError`` is raised by the ``await``, before any run exists.
        """
        self.sync._check_output(output_type)
        record = await asyncio.to_thread(self.sync._decide, id, approved, reason, arguments)
        return AsyncAgentRun(self.sync._continue_stream(record, context, output_type))

    async def get(self, id: str) -> ApprovalRequest:
        return await asyncio.to_thread(self.sync.get, id)

    async def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[ApprovalRequest]:
        return await asyncio.to_thread(self.sync.list, session_id, status)


class AsyncAgent:
    """An ``Agent`` for asyncio; ``session()`` gives ``AsyncSession`` objects."""

    def __init__(self, agent: Agent) -> None:
        self.sync = agent
        self.approvals = AsyncApprovals(agent.approvals)

    def session(self, id: str | None = None, **options: Any) -> AsyncSession:
        """``Agent.session(id, **options)``, wrapped; makes no store call, so nothing to await."""
        return AsyncSession(self.sync.session(id, **options))

    async def fork(self, session_id: str, new_id: str, at: int | str | None = None) -> AsyncSession:
        """``Agent.fork``: the new session, for asyncio."""
        source = self.sync._session_for(session_id)
        return AsyncSession(await _wait(source._fork_future(new_id, at)))

    @overload
    async def send(self, input: Input, *, signal: AbortSignal | None = None,
                   session_id: str | None = None, timeout: float | None = None,
                   context: Any = None, output_type: type[T]) -> ExecutionResult[T]: ...  # fmt: skip
    @overload
    async def send(self, input: Input, *, signal: AbortSignal | None = None,
                   session_id: str | None = None, timeout: float | None = None,
                   context: Any = None, output_type: Any = None) -> ExecutionResult: ...  # fmt: skip

    async def send(
        self,
        input: Input,
        *,
        signal: AbortSignal | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> ExecutionResult:
        """As ``Agent.send``: ``session_id`` keys this single run; no session's transcript is used."""
        future, stop = self.sync._send_future(input, signal, session_id, context, output_type)
        return await _wait(future, stop, timeout)

    @overload
    def stream(self, input: Input, *, signal: AbortSignal | None = None, context: Any = None,
               output_type: type[T]) -> AsyncAgentRun[T]: ...  # fmt: skip
    @overload
    def stream(self, input: Input, *, signal: AbortSignal | None = None, context: Any = None,
               output_type: Any = None) -> AsyncAgentRun: ...  # fmt: skip

    def stream(
        self,
        input: Input,
        *,
        signal: AbortSignal | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> AsyncAgentRun:
        asyncio.get_running_loop()  # raises outside a coroutine, before a turn is queued
        run = self.sync.stream(input, signal=signal, context=context, output_type=output_type)
        return AsyncAgentRun(run)

    async def resume(
        self, id: str, *, context: Any = None, output_type: Any = None
    ) -> ExecutionResult | None:
        return await _drive(self.sync._resume_steps(id, context, output_type))

    def close(self, timeout: float | None = None) -> None:
        """``Agent.close``: blocks until the agent's threads are joined; in a coroutine use ``aclose``."""
        self.sync.close(timeout)

    async def aclose(self, timeout: float | None = None) -> None:
        """``Agent.close``, awaited: the threads are joined off the event loop."""
        await asyncio.to_thread(self.sync.close, timeout)

    async def __aenter__(self) -> AsyncAgent:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncAgent {self.sync!r}>"


def _async_agent_of(make: Callable[P, Agent]) -> Callable[P, AsyncAgent]:
    @functools.wraps(make)
    def create(*args: P.args, **kwargs: P.kwargs) -> AsyncAgent:
        return AsyncAgent(make(*args, **kwargs))

    create.__doc__ = "``lousho_sessions.create_agent(...)`` wrapped in an ``AsyncAgent``."
    return create


create_agent = _async_agent_of(_create_agent)
