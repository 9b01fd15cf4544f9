"""``create_agent`` and ``Agent``: instructions, a model, tools and stores.

An ``Agent`` is configuration (``agent.config``, an ``AgentConfig``) and the runtime
that owns its threads (``agent.runtime``); every turn runs through its
``TurnRunner``. ``close()`` stops and joins the threads and closes the provider.
"""

from __future__ import annotations

import os
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, overload

from ._random import uuid4_hex
from ._session_state import StateScope
from .abort import AbortSignal
from .approvals import ApprovalRequest, Approvals, TurnKey
from .compaction import Compaction
from .engine._config import AgentConfig, AgentOptions
from .engine._runner import TurnRunner
from .engine._session_core import SessionCore
from .engine._single import AgentExecutor, SingleTurns
from .inputs import Input, to_messages
from .pricing import Pricing
from .providers.base import Provider, ProviderBase
from .results import ExecutionResult, Limits
from .results import OutputT as _T
from .run import AgentRun
from .runtime._calls import Stop, Stoppable, linked
from .runtime._runtime import Runtime
from .runtime._worker import Steps, drive
from .session import Session, TurnPolicy
from .stores.adapters import store_parts
from .stores.base import CheckpointStore, validate_session_id
from .stores.memory import MemorySessionStore
from .tools import Tool

__all__ = [
    "Agent",
    "AgentConfig",
    "AgentExecutor",
    "AgentOptions",
    "Approvals",
    "create_agent",
]


def create_agent(
    instructions: str | None = None,
    provider: Provider | None = None,
    model: str | None = None,
    tools: Sequence[Tool | Callable[..., Any]] = (),
    store: Any = None,
    limits: Limits | None = None,
    approve: Callable[[ApprovalRequest], bool | None] | None = None,
    project_instructions: bool | str | os.PathLike[str] = False,
    compaction: Compaction | None = None,
    pricing: Mapping[str, Pricing] | None = None,
    max_steps: int = 20,
    settings: Mapping[str, Any] | None = None,
    check_key: bool = True,
    name: str | None = None,
    tracer_provider: Any = None,
    meter_provider: Any = None,
    trace_content: bool = False,
    output_type: Any = None,
    output_retries: int = 1,
) -> Agent:
    """Make an ``Agent``. With neither ``provider`` nor ``model``: ``$LOUSHO_MODEL``, else ``"demo"``.

    A provider made from a model string (``model=`` or ``$LOUSHO_MODEL``) that has no
    API key for its public endpoint raises ``ProviderConfigError`` here, naming the
    environment variable; ``check_key=False`` leaves that to the first model call (for
    code that makes an agent but never calls the model, such as tests that replace
    the provider).

    Tracing (docs/operations.md): with the ``otel`` extra installed, turns are traced
    to ``tracer_provider`` and measured on ``meter_provider`` (None: the global ones,
    as set when the agent is made); ``name`` names the agent in its spans;
    ``trace_content=True`` puts messages and tool arguments and results in the spans.

    ``store`` is an ``AgentStore`` (or its parts), or a URL for ``open_store``
    (``"sqlite:///app.db"``); with none, ``$LOUSHO_STORE`` names one, else the agent
    keeps transcripts in memory. A store opened from a URL is closed by ``close()``.

    ``output_type`` (docs/output.md): every final answer is JSON of that type, parsed
    into ``result.output``; a reply that does not fit is sent back to the model
    ``output_retries`` times, then ``OutputValidationError``. ``send``/``stream`` take
    an ``output_type`` of their own.
    """
    return Agent(AgentOptions(**locals()))  # the keywords, written out once


class Agent:
    """Instructions, a model, tools and stores; makes sessions and runs single turns.

    Its configuration is ``agent.config`` (``provider``, ``system``, ``tools``, ``store``
    and ``model_name`` are also attributes). It owns threads: ``close()`` (or leaving
    ``with``) stops and joins them.
    """

    def __init__(self, options: AgentOptions | None = None, /, **keywords: Any) -> None:
        """``Agent(AgentOptions(...))`` or ``Agent(**keywords)``: ``create_agent``'s keywords."""
        if options is not None and keywords:
            raise TypeError("Agent() takes an AgentOptions or keywords, not both")
        self.config = AgentConfig.build(options or AgentOptions(**keywords))
        self.runtime = Runtime()
        self.runner = TurnRunner(self.config, self.runtime)
        self.approvals = Approvals(
            self.config.approvals,
            self._resume_turn,
            self._resume_stream,
            self.config.output_for,
            tools=self.config.tools,
        )
        self._singles = SingleTurns(self.runner)
        #: the core of each live session (the one ``session(id)`` made last): approvals and
        #: recovery continue its turns on its lane and transcript
        self._cores: weakref.WeakValueDictionary[str, SessionCore] = weakref.WeakValueDictionary()
        # a forgotten agent: its worker threads end when idle, its tool loop stops now
        weakref.finalize(self, self.runtime.tool_loop.close, 0)

    @property
    def provider(self) -> Provider:
        return self.config.provider

    @property
    def tools(self) -> Mapping[str, Tool]:
        return self.config.tools

    @property
    def system(self) -> str | None:
        return self.config.system

    @property
    def store(self) -> Any:
        return self.config.store

    @property
    def model_name(self) -> str | None:
        return self.config.model_name

    # -- sessions -------------------------------------------------------------

    def session(
        self,
        id: str | None = None,
        *,
        store: Any = None,
        checkpoint_store: CheckpointStore | None = None,
        turn_policy: TurnPolicy = "wait",
        limits: Limits | None = None,
    ) -> Session:
        """A session; ``id`` generated (a uuid4) when omitted. ``store`` wins over the agent's, part by part.

        An agent made without a store keeps transcripts in one memory store of its own
        (``agent.store.sessions``): ``session("u1")`` called twice is one conversation.
        """
        return Session(self._new_core(id, store, checkpoint_store, turn_policy, limits))

    def _new_core(
        self,
        id: str | None,
        store: Any = None,
        checkpoint_store: CheckpointStore | None = None,
        turn_policy: TurnPolicy = "wait",
        limits: Limits | None = None,
    ) -> SessionCore:
        """The core of a new session (``session()``), kept as the live one of its id."""
        session_id = validate_session_id(id) if id is not None else str(uuid.uuid4())
        parts = store_parts(store)
        own = self.config.store
        core = SessionCore(
            self.runner,
            session_id,
            store=parts.sessions or own.sessions or MemorySessionStore(),
            checkpoint_store=checkpoint_store or parts.checkpoints or own.checkpoints,
            turn_policy=turn_policy,
            limits=limits,
        )
        self._cores[session_id] = core
        return core

    def fork(self, session_id: str, new_id: str, at: int | str | None = None) -> Session:
        """``session(session_id).fork(new_id, at)``: a new session holding the messages of
        ``session_id`` before ``at`` (``None``: all); see ``Session.fork``."""
        return self._session_for(validate_session_id(session_id)).fork(new_id, at)

    def state_scope(self, id: str) -> StateScope:
        """State shared by many sessions, e.g. a user's (``agent.state_scope("user-42")``),
        kept in the agent's store: ``.state`` and ``.update_state(fn)`` as on a session."""
        own = self.config.store
        return StateScope(id, own.sessions or MemorySessionStore(), own.checkpoints)

    def _session_for(self, session_id: str) -> Session:
        """The live session ``session_id`` (one more face of its core), else a new one."""
        return Session(self._core_for(session_id))

    def _core_for(self, session_id: str) -> SessionCore:
        """The core of the live session ``session_id``, else of a new one (``session(id)``)."""
        live = self._cores.get(session_id)
        return live if live is not None else self._new_core(session_id)

    # -- single turns ---------------------------------------------------------

    @overload
    def send(self, input: Input, *, signal: AbortSignal | None = None, session_id: str | None = None,
             timeout: float | None = None, context: Any = None,
             output_type: type[_T]) -> ExecutionResult[_T]: ...  # fmt: skip
    @overload
    def send(self, input: Input, *, signal: AbortSignal | None = None, session_id: str | None = None,
             timeout: float | None = None, context: Any = None,
             output_type: Any = None) -> ExecutionResult: ...  # fmt: skip

    def send(
        self,
        input: Input,
        *,
        signal: AbortSignal | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
        context: Any = None,
        output_type: Any = None,
    ) -> ExecutionResult:
        """One turn from an empty history. With ``session_id`` and a checkpoint store it is durable.

        ``session_id`` is the durable key of this single run (``resume(session_id)``
        finishes it after a crash), nothing more: the turn neither reads nor writes the
        transcript of the session with that id. To continue a conversation, use
        ``agent.session(id).send(...)``. ``context`` is given to tools as
        ``ToolContext.context``; aborts and Ctrl-C behave as for ``Session.send``.
        ``output_type`` (else the agent's): the answer is parsed into ``result.output``.
        """
        call = self._send_call(input, signal, session_id, context, output_type)
        result: ExecutionResult = call.wait(timeout)  # queues it: Ctrl-C stops it at any point
        return result

    def _send_future(
        self,
        input: Input,
        signal: AbortSignal | None,
        session_id: str | None,
        context: Any = None,
        output_type: Any = None,
    ) -> tuple[Future[ExecutionResult], Stop | None]:
        return self._send_call(input, signal, session_id, context, output_type).queued()

    def _send_call(
        self,
        input: Input,
        signal: AbortSignal | None,
        session_id: str | None,
        context: Any = None,
        output_type: Any = None,
    ) -> Stoppable:
        return self._singles.submit(
            to_messages(input),
            linked(signal),
            session_id,
            emit=None,
            approve=self.config.approve,
            context=context,
            output=self.config.output_for(output_type),
            queue=False,
        )

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
        """One turn from an empty history, streamed; ``context``, ``output_type`` as for ``send``."""
        output = self.config.output_for(output_type)
        controller = linked(signal)
        holder: list[AgentRun] = []
        run_id = "run-" + uuid4_hex()

        def wire(future: Future[Any], stop: Stop | None) -> None:
            holder.append(AgentRun(run_id, future, controller, stop=stop))  # before any event

        self._singles.submit(
            to_messages(input),
            controller,
            None,
            emit=lambda e: holder[0]._push(e),
            approve=None,
            run_id=run_id,
            wire=wire,
            context=context,
            output=output,
        )
        return holder[0]

    def resume(
        self, id: str, *, context: Any = None, output_type: Any = None
    ) -> ExecutionResult | None:
        """Finish a run started with ``send(..., session_id=id)``, then the session's pending turn.

        ``context`` is given to their tools as ``ToolContext.context``, ``output_type``
        is what their answers are parsed into (else the agent's); neither is saved.
        """
        return drive(self._resume_steps(id, context, output_type))

    def _resume_steps(
        self, id: str, context: Any = None, output_type: Any = None
    ) -> Steps[ExecutionResult | None]:
        validate_session_id(id)
        output = self.config.output_for(output_type)
        first: ExecutionResult | None = yield self._singles.resume(
            id, context, output=output, queue=False
        )
        second: ExecutionResult | None = yield self._core_for(id).resume_call(
            None, context, output_type
        )
        return second if second is not None else first

    def _resume_turn(self, turn: TurnKey, context: Any, output_type: Any = None) -> Stoppable:
        """Continue ``turn`` after its approval was resolved (``agent.approvals``)."""
        if turn.kind == "single":
            output = self.config.output_for(output_type)
            return self._singles.resume(turn.key, context, output=output, queue=False)
        return self._core_for(turn.key).resume_call(None, context, output_type)

    def _resume_stream(
        self, turn: TurnKey, context: Any, run_id: str, output_type: Any = None
    ) -> AgentRun:
        """Continue ``turn`` after its approval was resolved, streamed (``resolve_stream``)."""
        if turn.kind == "single":
            output = self.config.output_for(output_type)
            return self._singles.resume_stream(turn.key, context, run_id, output)
        return self._core_for(turn.key).resume_stream(context, run_id, output_type)

    # -- lifecycle ------------------------------------------------------------

    def close(self, timeout: float | None = None) -> None:
        """Let queued turns finish, then stop and join this agent's threads and close its provider.

        The threads are the session workers, the tool pool and the loop of async tools.
        The provider is closed if it derives from ``ProviderBase`` (the built-in ones do);
        stores are never closed, except one the agent opened from a URL (``store="..."``
        or ``LOUSHO_STORE``): that one is closed, and an agent whose store needs a
        connection (SQLite, PostgreSQL, Redis) cannot be used after that. With ``timeout`` it waits at most that long; threads
        still busy then end by themselves when their work is done. The agent stays
        usable: its next call starts threads again.
        """
        self.runtime.close(timeout)
        provider = self.config.provider
        if isinstance(provider, ProviderBase):
            provider.close()
        if self.config.opened_store is not None:
            self.config.opened_store.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Agent provider={self.provider.name!r} tools={sorted(self.tools)}>"
