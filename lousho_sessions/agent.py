"""``create_agent`` and ``Agent``: instructions, a model, tools and stores."""

from __future__ import annotations

import os
import threading
import uuid
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

from . import _worker
from ._turn import ToolOutcome, Turn, TurnConfig, TurnState
from .abort import AbortController, AbortSignal
from .approvals import ApprovalRequest
from .compaction import Compaction
from .errors import ApprovalNotFoundError, SessionAwaitingApprovalError
from .events import ErrorEvent, Event, RunDone
from .inputs import to_messages
from .messages import Message
from .pricing import Pricing
from .providers.base import Provider
from .results import ExecutionResult, Limits
from .run import AgentRun
from .session import Session, TurnPolicy, _linked, _wait
from .stores.base import (
    AgentStore,
    ApprovalStore,
    CheckpointStore,
    store_parts,
    validate_session_id,
)
from .stores.memory import MemoryApprovalStore, MemoryCheckpointStore, MemorySessionStore
from .tools import Tool, ToolLoop, as_tool

__all__ = ["Agent", "AgentExecutor", "Approvals", "create_agent"]


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
) -> Agent:
    """Make an ``Agent``. With neither ``provider`` nor ``model``: ``$LOUSHO_MODEL``, else ``"demo"``.

    A provider made from a model string (``model=`` or ``$LOUSHO_MODEL``) that has no
    API key for its public endpoint raises ``ProviderConfigError`` here, naming the
    environment variable; ``check_key=False`` leaves that to the first model call (for
    code that makes an agent but never calls the model, such as tests that replace
    the provider).
    """
    return Agent(
        instructions=instructions,
        provider=provider,
        model=model,
        tools=tools,
        store=store,
        limits=limits,
        approve=approve,
        project_instructions=project_instructions,
        compaction=compaction,
        pricing=pricing,
        max_steps=max_steps,
        settings=settings,
        check_key=check_key,
    )


def resolve_provider(
    model: str, pricing: Mapping[str, Pricing] | None = None, *, check_key: bool = False
) -> Provider:
    """The provider a model string names ("demo", "openai/…", "anthropic/…", "ollama/…")."""
    from .providers import registry

    return registry.provider_for(model, pricing=pricing, check_key=check_key)


def find_project_instructions(
    value: bool | str | os.PathLike[str], start: Path | None = None
) -> str | None:
    """The text of ``AGENTS.md``: the given file, or the nearest one upward from ``start``/cwd."""
    if value is False:
        return None
    if value is True:
        here = (start or Path.cwd()).resolve()
        for folder in (here, *here.parents):
            candidate = folder / "AGENTS.md"
            if candidate.is_file():
                return candidate.read_text(encoding="utf-8")
        return None
    path = Path(value)
    if not path.is_file():
        raise FileNotFoundError(f"project_instructions: no file at {str(path)!r}")
    return path.read_text(encoding="utf-8")


class Agent:
    """Instructions, a model, tools and stores; makes sessions and runs single turns."""

    def __init__(
        self,
        *,
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
    ) -> None:
        if max_steps < 1:
            raise ValueError(f"max_steps must be at least 1, got {max_steps}")
        if provider is None:
            model = model or os.environ.get("LOUSHO_MODEL") or "demo"
            provider = resolve_provider(model, pricing, check_key=check_key)
        self.provider = provider
        self.model_name: str | None = getattr(provider, "model", None) or model
        self.instructions = instructions
        project = find_project_instructions(project_instructions)
        parts = [p for p in (instructions, project) if p]
        self.system: str | None = "\n\n".join(parts) if parts else None
        self.tools: dict[str, Tool] = {}
        for t in tools:
            built = as_tool(t)
            if built.name in self.tools:
                raise ValueError(f"two tools are named {built.name!r}")
            self.tools[built.name] = built
        self.store = store_parts(store)
        if self.store.sessions is None:  # one per agent: session("u1") twice is one conversation
            self.store = AgentStore(
                MemorySessionStore(), self.store.checkpoints, self.store.approvals
            )
        self.limits = limits
        self.approve = approve
        self.compaction = compaction
        self.pricing = pricing
        self.max_steps = max_steps
        self.settings: Mapping[str, Any] = dict(settings or {})
        self._approval_store: ApprovalStore = self.store.approvals or MemoryApprovalStore()
        self._pause_store: CheckpointStore = MemoryCheckpointStore()
        self._sessions: weakref.WeakValueDictionary[str, Session] = weakref.WeakValueDictionary()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._tool_loop = ToolLoop()  # async tools; started on first use
        weakref.finalize(self, self._tool_loop.close, 0)
        self.approvals = Approvals(self)

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
        session_id = validate_session_id(id) if id is not None else str(uuid.uuid4())
        parts = store_parts(store)
        sessions = parts.sessions or self.store.sessions or MemorySessionStore()
        checkpoints = checkpoint_store or parts.checkpoints or self.store.checkpoints
        session = Session(
            self,
            session_id,
            store=sessions,
            checkpoint_store=checkpoints,
            turn_policy=turn_policy,
            limits=limits,
        )
        self._sessions[session_id] = session
        return session

    # -- single turns ---------------------------------------------------------

    def send(
        self,
        input: Any,
        *,
        signal: AbortSignal | None = None,
        session_id: str | None = None,
        timeout: float | None = None,
    ) -> ExecutionResult:
        """One turn from an empty history. With ``session_id`` and a checkpoint store it is durable.

        ``session_id`` is the durable key of this single run (``resume(session_id)``
        finishes it after a crash), nothing more: the turn neither reads nor writes the
        transcript of the session with that id. To continue a conversation, use
        ``agent.session(id).send(...)``.
        """
        result: ExecutionResult = _wait(*self._send_future(input, signal, session_id), timeout)
        return result

    def _send_future(
        self, input: Any, signal: AbortSignal | None, session_id: str | None
    ) -> tuple[Future[ExecutionResult], AbortController]:
        controller = _linked(signal)
        job = self._single(
            to_messages(input), controller, session_id, emit=None, approve=self.approve
        )
        _worker.submit(job.state, job)
        return job.future, controller

    def stream(self, input: Any, *, signal: AbortSignal | None = None) -> AgentRun:
        """One turn from an empty history, streamed."""
        controller = _linked(signal)
        holder: list[AgentRun] = []
        run_id = "run-" + uuid.uuid4().hex
        job = self._single(
            to_messages(input),
            controller,
            None,
            emit=lambda e: holder[0]._push(e),
            approve=None,
            run_id=run_id,
        )
        run = AgentRun(run_id, job.future, controller)
        holder.append(run)
        _worker.submit(job.state, job)
        return run

    def resume(self, id: str) -> ExecutionResult | None:
        """Finish a run started with ``send(..., session_id=id)``, then the session's pending turn."""
        return _worker.drive(self._resume_steps(id))

    def _resume_steps(self, id: str) -> _worker.Steps[ExecutionResult | None]:
        validate_session_id(id)
        first: ExecutionResult | None = yield self._resume_single_future(id)
        second: ExecutionResult | None = yield self._session_for(id)._resume_future(None)[0]
        return second if second is not None else first

    def _session_for(self, session_id: str) -> Session:
        live = self._sessions.get(session_id)
        return live if live is not None else self.session(session_id)

    def _single(
        self,
        messages: list[Message],
        controller: AbortController,
        session_id: str | None,
        *,
        emit: Callable[[Event], None] | None,
        approve: Any,
        run_id: str | None = None,
    ) -> _worker.Job:
        """The job of one single turn (not yet submitted; ``job.state`` is its worker key)."""
        run_id = run_id or "run-" + uuid.uuid4().hex
        if session_id is not None:
            validate_session_id(session_id)
        durable = session_id is not None and self.store.checkpoints is not None
        key = session_id or run_id
        checkpoints = self.store.checkpoints if durable else self._pause_store
        assert checkpoints is not None

        def work(job: _worker.Job) -> ExecutionResult:
            try:
                if durable:
                    self._finish_single(key, checkpoints, None)
                state = TurnState.start(
                    messages, session_id=session_id, turn_id=f"{key}.send", run_id=run_id
                )
                result = AgentExecutor.run_state(
                    self,
                    state,
                    controller,
                    checkpoints,
                    durable=durable,
                    emit=emit,
                    approve=approve,
                )
            except BaseException as exc:
                if emit is not None:
                    emit(ErrorEvent(run_id, exc))
                    emit(RunDone(run_id, "error", None))
                raise
            if emit is not None:
                emit(RunDone(run_id, result.finish_reason, result))
            return result

        return _worker.Job(work, "single", ("single", id(checkpoints), key))

    def _resume_single_future(self, key: str) -> Future[ExecutionResult | None]:
        checkpoints = self.store.checkpoints or self._pause_store
        job = _worker.Job(lambda j: self._finish_single(key, checkpoints, None), "single")
        _worker.submit(("single", id(checkpoints), key), job, owner=checkpoints)
        return job.future

    def _finish_single(
        self, key: str, checkpoints: CheckpointStore, signal: AbortSignal | None
    ) -> ExecutionResult | None:
        turn_id = f"{key}.send"
        data = checkpoints.load(turn_id)
        if data is None:
            return None
        state = TurnState.from_checkpoint(data, (), source=f"checkpoint {turn_id!r}")
        if state.status == "awaiting-approval":
            record = self._approval_store.get(state.approval_id or "")
            if record is None or record.get("status") == "pending":
                raise SessionAwaitingApprovalError(
                    f"run {turn_id!r} waits on approval {state.approval_id!r}",
                    approval_id=state.approval_id,
                )
            state.status, state.approval_id = "running", None
        return AgentExecutor.run_state(
            self, state, _linked(signal), checkpoints, durable=True, emit=None, approve=self.approve
        )

    # -- tools ----------------------------------------------------------------

    def _run_tools(
        self, fns: Sequence[Callable[[], ToolOutcome]]
    ) -> Iterator[tuple[int, ToolOutcome | BaseException]]:
        """Run a step's tools: one inline, several on a thread pool; yields as each ends."""
        if len(fns) == 1:
            try:
                outcome: ToolOutcome | BaseException = fns[0]()
            except Exception as exc:
                outcome = exc
            yield 0, outcome
            return
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="lousho-tool")
            pool = self._pool
        futures = {pool.submit(fn): index for index, fn in enumerate(fns)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in sorted(done, key=lambda f: futures[f]):
                error = f.exception()
                yield futures[f], (error if error is not None else f.result())

    def close(self) -> None:
        """Stop idle workers of this agent's sessions; user-owned stores stay open."""
        for session in list(self._sessions.values()):
            session.close()
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None
        self._tool_loop.close()

    def __enter__(self) -> Agent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Agent provider={self.provider.name!r} tools={sorted(self.tools)}>"


class AgentExecutor:
    """Runs one turn directly, on the calling thread, with explicit stores."""

    @staticmethod
    def execute(
        agent: Agent,
        input: Any,
        *,
        session_id: str | None = None,
        history: Sequence[Message] = (),
        checkpoint_store: CheckpointStore | None = None,
        approval_store: ApprovalStore | None = None,
        signal: AbortSignal | None = None,
        emit: Callable[[Event], None] | None = None,
    ) -> ExecutionResult:
        """One turn of ``agent`` after ``history``; checkpointed under ``<session_id>.send`` when a
        checkpoint store is given. The transcript is yours to keep: see ``result.messages``."""
        key = (
            validate_session_id(session_id) if session_id is not None else "run-" + uuid.uuid4().hex
        )
        state = TurnState.start(
            to_messages(input), history=history, session_id=session_id, turn_id=f"{key}.send"
        )
        store = checkpoint_store or agent._pause_store
        return AgentExecutor.run_state(
            agent, state, _linked(signal), store, durable=checkpoint_store is not None, emit=emit,
            approve=agent.approve, approvals=approval_store,
        )  # fmt: skip

    @staticmethod
    def run_state(
        agent: Agent,
        state: TurnState,
        controller: AbortController,
        checkpoints: CheckpointStore,
        *,
        durable: bool,
        emit: Callable[[Event], None] | None,
        approve: Any,
        approvals: ApprovalStore | None = None,
    ) -> ExecutionResult:
        turn_id = state.turn_id or ""

        def save(s: TurnState) -> None:
            if durable or s.status == "awaiting-approval":
                checkpoints.save(turn_id, s.to_checkpoint())

        config = TurnConfig(
            provider=agent.provider,
            system=agent.system,
            tools=agent.tools,
            signal=controller.signal,
            approvals=approvals or agent._approval_store,
            settings=agent.settings,
            max_steps=agent.max_steps,
            limits=agent.limits,
            model_name=agent.model_name,
            pricing=agent.pricing,
            approve=approve,
            checkpoint=save,
            emit=emit,
            run_tools=agent._run_tools,
            tool_loop=agent._tool_loop,
        )
        result = Turn(state, config).run()
        if result.finish_reason != "awaiting-approval":
            checkpoints.delete(turn_id)
        return result


class Approvals:
    """``agent.approvals``: look up and resolve tool calls waiting for a human."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def get(self, id: str) -> ApprovalRequest:
        record = self._agent._approval_store.get(id)
        if record is None:
            raise ApprovalNotFoundError(f"no approval with id {id!r}")
        return ApprovalRequest.from_record(record)

    def list(
        self, session_id: str | None = None, status: str | None = "pending"
    ) -> list[ApprovalRequest]:
        records = self._agent._approval_store.list(session_id=session_id, status=status)
        return [ApprovalRequest.from_record(r) for r in records]

    def resolve(
        self, id: str, *, approved: bool, reason: str | None = None
    ) -> ExecutionResult | None:
        """Decide, then continue the paused turn as the session's next turn and return its result.

        ``id`` may be given by position or by name: ``resolve("appr-…", approved=True)``.
        ``None`` when no paused turn is left to continue (a single run without
        ``session_id`` paused in another agent's memory); the decision is recorded all
        the same. Exactly one ``resolve()`` of an approval wins, across processes; the others
        raise ``ApprovalAlreadyResolvedError``.
        """
        return _worker.drive(self._resolve_steps(id, approved, reason))

    def _resolve_steps(
        self, id: str, approved: bool, reason: str | None
    ) -> _worker.Steps[ExecutionResult | None]:
        agent = self._agent
        record = yield lambda: agent._approval_store.resolve(id, approved=approved, reason=reason)
        turn_id = str(record.get("turn_id") or "")
        key, _, kind = turn_id.rpartition(".")
        if kind == "send":
            result: ExecutionResult | None = yield agent._resume_single_future(key)
            return result
        session_id = record.get("session_id")
        if not session_id:
            return None
        result = yield agent._session_for(str(session_id))._resume_future(None)[0]
        return result
