"""One test body, two APIs: each test runs through the sync API and through ``lousho_sessions.aio``.

``Driver`` makes the same call either way; in "async" mode every call is awaited
on one event loop (per test) through the async facade.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest
from helpers import WAIT, Gate, calls, gated

from lousho_sessions import (
    AbortController,
    Agent,
    ApprovalNotFoundError,
    ApprovalRequest,
    Event,
    ExecutionResult,
    FunctionProvider,
    Message,
    ModelRequest,
    PendingTurn,
    ProviderError,
    Session,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.aio import AsyncAgent, AsyncAgentRun, AsyncSession
from lousho_sessions.run import AgentRun

T = TypeVar("T")
Stop = Callable[[Any, Event], bool]


class Driver:
    """The sync API or the async facade behind the same blocking calls."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.loop = asyncio.new_event_loop() if mode == "async" else None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        assert self.loop is not None
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    def send(self, session: Session, input: str, **kw: Any) -> ExecutionResult:
        if self.mode == "sync":
            return session.send(input, **kw)
        return self.run(AsyncSession(session).send(input, **kw))

    def agent_send(self, agent: Agent, input: str, **kw: Any) -> ExecutionResult:
        if self.mode == "sync":
            return agent.send(input, **kw)
        return self.run(AsyncAgent(agent).send(input, **kw))

    def stream(
        self, session: Session | Agent, input: str, stop: Stop | None = None, **kw: Any
    ) -> tuple[list[Event], ExecutionResult]:
        """Iterate a streamed turn (``stop(run, event)`` True leaves the loop); its events and result."""
        events: list[Event] = []
        if self.mode == "sync":
            run: AgentRun
            with session.stream(input, **kw) as run:
                for event in run:
                    events.append(event)
                    if stop is not None and stop(run, event):
                        break
            return events, run.result(WAIT)

        async def iterate() -> ExecutionResult:
            run: AsyncAgentRun
            wrapped = AsyncSession(session) if isinstance(session, Session) else AsyncAgent(session)
            async with wrapped.stream(input, **kw) as run:
                async for event in run:
                    events.append(event)
                    if stop is not None and stop(run, event):
                        break
            return await run.result(WAIT)

        return events, self.run(iterate())

    def resume(self, session: Session) -> ExecutionResult | None:
        if self.mode == "sync":
            return session.resume()
        return self.run(AsyncSession(session).resume())

    def agent_resume(self, agent: Agent, id: str) -> ExecutionResult | None:
        if self.mode == "sync":
            return agent.resume(id)
        return self.run(AsyncAgent(agent).resume(id))

    def load(self, session: Session) -> tuple[Message, ...]:
        if self.mode == "sync":
            return session.load()
        return self.run(AsyncSession(session).load())

    def pending(self, session: Session) -> PendingTurn | None:
        if self.mode == "sync":
            return session.pending()
        return self.run(AsyncSession(session).pending())

    def resolve(self, agent: Agent, id: str, approved: bool) -> ExecutionResult | None:
        if self.mode == "sync":
            return agent.approvals.resolve(id=id, approved=approved)
        return self.run(AsyncAgent(agent).approvals.resolve(id=id, approved=approved))

    def approvals(self, agent: Agent, session_id: str) -> list[ApprovalRequest]:
        if self.mode == "sync":
            return agent.approvals.list(session_id)
        return self.run(AsyncAgent(agent).approvals.list(session_id))

    def approval(self, agent: Agent, id: str) -> ApprovalRequest:
        if self.mode == "sync":
            return agent.approvals.get(id)
        return self.run(AsyncAgent(agent).approvals.get(id))


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest) -> Iterator[Driver]:
    driver = Driver(request.param)
    yield driver
    driver.close()


# -- send -------------------------------------------------------------------------


def test_send_keeps_the_conversation(api: Driver) -> None:
    session = create_agent().session()
    api.send(session, "My name is Ali.")
    result = api.send(session, "What is my name?")
    assert "Ali" in result.text
    assert result.session_id == session.id
    assert [m.role for m in api.load(session)] == ["user", "assistant"] * 2


def test_single_turn_agent_send(api: Driver) -> None:
    agent = create_agent(provider=FunctionProvider(lambda r: f"{len(r.messages)} message"))
    assert api.agent_send(agent, "hi").text == "1 message"
    assert api.agent_send(agent, "again").text == "1 message"


def test_failed_send_raises_and_keeps_transcript(api: Driver) -> None:
    def model(request: ModelRequest) -> str:
        if request.messages[-1].text == "fail":
            raise ProviderError(503, "overloaded", retryable=True)
        return "fine"

    session = create_agent(provider=FunctionProvider(model)).session()
    api.send(session, "first")
    before = api.load(session)
    with pytest.raises(ProviderError, match="overloaded"):
        api.send(session, "fail")
    assert api.load(session) == before


# -- stream -------------------------------------------------------------------------


def test_stream_delivers_events_in_order_and_saves_before_done(api: Driver) -> None:
    session = create_agent(provider=FunctionProvider(lambda r: iter(["Hel", "lo"]))).session()
    seen_at_done: list[int] = []

    def stop(run: Any, event: Event) -> bool:
        if event.type == "run.done":
            seen_at_done.append(len(session.messages))
        return False

    events, result = api.stream(session, "hi", stop)
    types = [e.type for e in events]
    assert types[:2] == ["run.start", "step.start"] and types[-1] == "run.done"
    assert "".join(e.text for e in events if e.type == "text.delta") == "Hello" == result.text
    assert {e.run_id for e in events} == {result.run_id}
    assert seen_at_done == [2]


def test_agent_stream(api: Driver) -> None:
    agent = create_agent(provider=FunctionProvider(lambda r: iter(["a", "b"])))
    events, result = api.stream(agent, "x")
    assert [e.text for e in events if e.type == "text.delta"] == ["a", "b"]
    assert result.text == "ab"


def test_stream_error_ends_with_error_then_done(api: Driver) -> None:
    def model(request: ModelRequest) -> str:
        raise ProviderError(500, "broken", retryable=False)

    session = create_agent(provider=FunctionProvider(model)).session()
    with pytest.raises(ProviderError, match="broken"):
        api.stream(session, "x")
    assert api.load(session) == ()


def test_enqueue_joins_the_running_turn(api: Driver) -> None:
    gate = Gate()

    def model(request: ModelRequest) -> str:
        if len(request.messages) == 1:
            gate.wait_in(request)
        return "saw " + ",".join(m.text for m in request.messages if m.role == "user")

    session = create_agent(provider=FunctionProvider(model)).session()

    def stop(run: Any, event: Event) -> bool:
        if event.type == "run.start":
            assert gate.entered.wait(WAIT)
            run.enqueue("b")
            gate.open()
        return False

    events, result = api.stream(session, "a", stop)
    assert "input.applied" in [e.type for e in events]
    assert result.text == "saw a,b"
    assert [m.text for m in api.load(session)] == ["a", "saw a", "b", "saw a,b"]


# -- abort --------------------------------------------------------------------------


def test_abort_by_signal_returns_aborted_and_keeps_transcript(api: Driver) -> None:
    gate = Gate()
    session = create_agent(provider=gated(gate)).session()
    api.send(session, "hello")
    before = api.load(session)
    controller = AbortController()

    def abort_when_blocked() -> None:
        assert gate.entered.wait(WAIT)
        controller.abort("user")

    threading.Thread(target=abort_when_blocked).start()
    result = api.send(session, "block", signal=controller.signal)
    assert result.finish_reason == "aborted"
    assert api.load(session) == before


def test_timeout_aborts_the_turn(api: Driver) -> None:
    gate = Gate()
    session = create_agent(provider=gated(gate)).session()
    result = api.send(session, "block", timeout=0.05)
    assert result.finish_reason == "aborted"
    assert api.load(session) == ()


def test_leaving_the_stream_early_aborts(api: Driver) -> None:
    gate = Gate()
    session = create_agent(provider=gated(gate)).session()
    api.send(session, "hello")
    before = api.load(session)
    events, result = api.stream(session, "block", lambda run, e: e.type == "text.delta")
    assert events[-1].type == "text.delta"
    assert result.finish_reason == "aborted"
    assert api.load(session) == before


def test_run_abort_mid_stream(api: Driver) -> None:
    gate = Gate()
    session = create_agent(provider=gated(gate)).session()

    def stop(run: Any, event: Event) -> bool:
        if event.type == "text.delta":
            run.abort("enough")
        return False

    events, result = api.stream(session, "block", stop)
    assert events[-1].type == "run.done"
    assert result.finish_reason == "aborted"
    assert api.load(session) == ()


# -- approvals and resume -----------------------------------------------------------


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def approval_agent() -> Agent:
    def model(request: ModelRequest) -> Message | str:
        last = request.messages[-1]
        if last.role == "user":
            return calls(("delete_file", {"path": "/tmp/x"}))
        return f"tool said: {last.text}"

    return create_agent(provider=FunctionProvider(model), tools=[delete_file], store=memory_store())


@pytest.mark.parametrize("approved", [True, False])
def test_approval_pauses_then_resolve_continues(api: Driver, approved: bool) -> None:
    agent = approval_agent()
    session = agent.session("approve-me")
    paused = api.send(session, "delete it")
    assert paused.finish_reason == "awaiting-approval" and paused.approval_id
    pending = api.pending(session)
    assert pending is not None and pending.status == "awaiting-approval"
    assert [a.id for a in api.approvals(agent, session.id)] == [paused.approval_id]
    assert api.approval(agent, paused.approval_id).call.name == "delete_file"
    assert api.load(session) == ()  # the paused turn lives in its checkpoint

    result = api.resolve(agent, paused.approval_id, approved)
    assert result is not None and result.finish_reason == "stop"
    if approved:
        assert result.text == "tool said: deleted /tmp/x"
    else:
        assert "denied" in result.text
    assert [m.role for m in api.load(session)] == ["user", "assistant", "tool", "assistant"]
    assert api.approval(agent, paused.approval_id).status == ("approved" if approved else "denied")
    assert api.pending(session) is None


def test_streamed_approval_ends_with_approval_requested(api: Driver) -> None:
    agent = approval_agent()
    session = agent.session("stream-approve")
    events, result = api.stream(session, "delete it")
    assert [e.type for e in events][-2:] == ["approval.requested", "run.done"]
    assert result.finish_reason == "awaiting-approval"


def test_unknown_approval_raises(api: Driver) -> None:
    with pytest.raises(ApprovalNotFoundError):
        api.resolve(approval_agent(), "appr-nope", True)


def resumable_agent(tool_runs: list[int], failing: threading.Event) -> Agent:
    @tool
    def add(a: int, b: int) -> str:
        """Add two numbers."""
        tool_runs.append(a + b)
        return str(a + b)

    def model(request: ModelRequest) -> Message | str:
        last = request.messages[-1]
        if last.role == "user":
            return calls(("add", {"a": 1, "b": 2}))
        if failing.is_set():
            raise ProviderError(503, "down", retryable=True)
        return f"the sum is {last.text}"

    return create_agent(provider=FunctionProvider(model), tools=[add], store=memory_store())


@pytest.mark.parametrize("via", ["session", "agent"])
def test_resume_finishes_an_interrupted_turn_without_rerunning_tools(api: Driver, via: str) -> None:
    tool_runs: list[int] = []
    failing = threading.Event()
    failing.set()
    agent = resumable_agent(tool_runs, failing)
    session = agent.session("resume-me")
    with pytest.raises(ProviderError):
        api.send(session, "add 1 and 2")
    pending = api.pending(session)
    assert pending is not None and pending.status == "running"
    assert pending.turn_id == "resume-me.turn-0"

    failing.clear()
    result = api.resume(session) if via == "session" else api.agent_resume(agent, session.id)
    assert result is not None and result.text == "the sum is 3"
    assert tool_runs == [3]  # the recorded tool result was not run again
    assert [m.role for m in api.load(session)] == ["user", "assistant", "tool", "assistant"]
    assert api.resume(session) is None
    assert api.agent_resume(agent, session.id) is None
