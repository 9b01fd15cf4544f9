"""``approvals.resolve_stream`` (issue 11.7): decide, then stream the continued turn.

The decision is the same compare-and-set as ``resolve()``, made before the call returns:
a losing resolver gets ``ApprovalAlreadyResolvedError`` from the call and no run.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from helpers import WAIT

from lousho_sessions import (
    Agent,
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    FunctionProvider,
    Message,
    ModelRequest,
    ToolCall,
    aio,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.events import Event, RunDone
from lousho_sessions.results import ExecutionResult

deleted: list[str] = []


@tool(needs_approval=True)
def delete(path: str) -> str:
    """Delete a file."""
    deleted.append(path)
    return f"deleted {path}"


def model(request: ModelRequest) -> Any:
    last = request.messages[-1]
    if last.role == "user":
        paths = last.text.split()  # one call per step, one step per path
        return Message.assistant("", tool_calls=[ToolCall("d0", "delete", {"path": paths[0]})])
    users = [m for m in request.messages if m.role == "user"]
    paths = users[-1].text.split()
    done = [m for m in request.messages[request.messages.index(users[-1]) :] if m.role == "tool"]
    if len(done) < len(paths):
        call = ToolCall(f"d{len(done)}", "delete", {"path": paths[len(done)]})
        return Message.assistant("", tool_calls=[call])
    return iter(["Result: ", last.text])  # streamed in two deltas


def make_agent(store: Any = None) -> Agent:
    return create_agent(provider=FunctionProvider(model), tools=[delete], store=store)


def stream_resolve(mode: str, agent: Agent, approval_id: str, **kw: Any) -> list[Event]:
    """The events of ``resolve_stream`` through the sync API or awaited through ``aio``."""
    if mode == "sync":
        return list(agent.approvals.resolve_stream(approval_id, **kw))

    async def main() -> list[Event]:
        run = await aio.AsyncAgent(agent).approvals.resolve_stream(approval_id, **kw)
        return [event async for event in run]

    return asyncio.run(main())


def outcome(events: list[Event]) -> ExecutionResult:
    """The result on the last event, a ``run.done``."""
    done = events[-1]
    assert isinstance(done, RunDone) and done.result is not None, done
    return done.result


@pytest.fixture(autouse=True)
def _reset() -> None:
    deleted.clear()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_resolve_stream_streams_the_continued_turn(mode: str) -> None:
    agent = make_agent(memory_store())
    session = agent.session("ops")
    paused = session.send("a.log")
    assert paused.approval_id is not None
    events = stream_resolve(mode, agent, paused.approval_id, approved=True)
    types = [e.type for e in events]
    assert types[0] == "run.start" and types[-1] == "run.done"
    assert "tool.result" in types and types.count("text.delta") == 2
    assert {getattr(e, "run_id", None) for e in events} == {paused.run_id}
    assert outcome(events).text == "Result: deleted a.log"
    assert deleted == ["a.log"]
    assert [m.role for m in session.load()] == ["user", "assistant", "tool", "assistant"]
    assert session.pending() is None
    agent.close()


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_losing_resolver_gets_the_error_before_any_run(mode: str) -> None:
    agent = make_agent(memory_store())
    paused = agent.session("ops").send("a.log")
    assert paused.approval_id is not None
    agent.approvals.resolve(paused.approval_id, approved=True)
    with pytest.raises(ApprovalAlreadyResolvedError):
        stream_resolve(mode, agent, paused.approval_id, approved=False)
    with pytest.raises(ApprovalNotFoundError):
        stream_resolve(mode, agent, "appr-unknown", approved=True)
    assert deleted == ["a.log"]
    agent.close()


def test_racing_resolvers_one_stream_wins() -> None:
    """Four agents on one store race resolve_stream/resolve: one continues, the tool runs once."""
    store = memory_store()
    paused = make_agent(store).session("ops").send("a.log")
    approval_id = paused.approval_id
    assert approval_id is not None
    barrier = threading.Barrier(4, timeout=WAIT)
    texts: list[str] = []
    losers: list[int] = []

    def click(n: int) -> None:
        other = make_agent(store)
        barrier.wait()
        try:
            if n % 2:
                run = other.approvals.resolve_stream(approval_id, approved=True)
                texts.append(run.result(WAIT).text)
            else:
                result = other.approvals.resolve(approval_id, approved=True)
                assert result is not None
                texts.append(result.text)
        except ApprovalAlreadyResolvedError:
            losers.append(n)

    threads = [threading.Thread(target=click, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert texts == ["Result: deleted a.log"] and len(losers) == 3
    assert deleted == ["a.log"]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_second_approval_pauses_the_stream_again(mode: str) -> None:
    agent = make_agent(memory_store())
    session = agent.session("ops")
    paused = session.send("a.log b.log")
    assert paused.approval_id is not None
    events = stream_resolve(mode, agent, paused.approval_id, approved=True)
    assert [e.type for e in events][-2:] == ["approval.requested", "run.done"]
    again = outcome(events)
    assert again.approval_id is not None
    assert again.finish_reason == "awaiting-approval"
    assert again.approval_id not in (None, paused.approval_id)
    events = stream_resolve(mode, agent, again.approval_id, approved=True)
    assert outcome(events).text == "Result: deleted b.log"
    assert deleted == ["a.log", "b.log"]
    agent.close()


def test_an_approve_callback_does_not_apply_to_the_stream() -> None:
    """Streams always pause, as for ``stream()``: a second approval is left to a human."""
    store = memory_store()
    paused = make_agent(store).session("ops").send("a.log b.log")
    assert paused.approval_id is not None
    agent = create_agent(
        provider=FunctionProvider(model), tools=[delete], store=store, approve=lambda r: True
    )
    run = agent.approvals.resolve_stream(paused.approval_id, approved=True)
    assert run.result(WAIT).finish_reason == "awaiting-approval"
    agent.close()


def test_a_single_send_streams_its_continuation() -> None:
    agent = make_agent(memory_store())
    paused = agent.send("a.log", session_id="job-1")
    assert paused.approval_id is not None
    run = agent.approvals.resolve_stream(paused.approval_id, approved=False, reason="no")
    events = list(run)
    assert events[-1].type == "run.done"
    assert run.result().text == "Result: The user denied this tool call: no"
    assert deleted == []
    agent.close()


def test_with_no_paused_turn_left_the_stream_is_only_run_done() -> None:
    """A single send without session_id paused in another agent's memory: nothing to continue."""
    store = memory_store()
    first = make_agent(store)
    paused = first.send("a.log")
    assert paused.approval_id is not None
    other = make_agent(store)
    run = other.approvals.resolve_stream(paused.approval_id, approved=True)
    events = list(run)
    assert events == [RunDone(paused.run_id, "none", None)]
    assert other.approvals.get(paused.approval_id).status == "approved"
    first.close()
    other.close()


def test_leaving_the_stream_early_aborts_the_continued_turn() -> None:
    release = threading.Event()

    def slow(request: ModelRequest) -> Any:
        if request.messages[-1].role == "tool":
            request.signal.add_callback(lambda s: release.set())
            release.wait(WAIT)
            return "late"
        return model(request)

    agent = create_agent(provider=FunctionProvider(slow), tools=[delete], store=memory_store())
    session = agent.session("ops")
    paused = session.send("a.log")
    assert paused.approval_id is not None
    with agent.approvals.resolve_stream(paused.approval_id, approved=True) as run:
        for event in run:
            if event.type == "tool.result":
                break  # aborts the turn (the model call below ends on the abort)
    result = run.result(WAIT)
    assert result.finish_reason == "aborted"
    # its tool ran: the turn stays pending with the result recorded, and says so
    pending = session.pending()
    assert session.load() == () and pending is not None and result.pending == pending
    assert deleted == ["a.log"]  # the approved call ran before the stream was left
    release.clear()
    release.set()  # the model answers at once now
    finished = session.resume()
    assert finished is not None and finished.text == "late"
    assert deleted == ["a.log"]  # the recorded call did not run again
    agent.close()


def test_cancelling_an_awaited_resolve_aborts_the_continued_turn() -> None:
    entered = threading.Event()

    def slow(request: ModelRequest) -> Any:
        if request.messages[-1].role == "tool":
            if entered.is_set():
                return "late"
            released = threading.Event()
            request.signal.add_callback(lambda s: released.set())
            entered.set()
            released.wait(30)  # ends only when the turn is aborted (or far past WAIT)
            return "late"
        return model(request)

    agent = create_agent(provider=FunctionProvider(slow), tools=[delete], store=memory_store())
    session = agent.session("ops")
    paused = session.send("a.log")
    approval_id = paused.approval_id
    assert approval_id is not None

    async def main() -> None:
        approvals = aio.AsyncAgent(agent).approvals
        task = asyncio.create_task(approvals.resolve(approval_id, approved=True))
        assert await asyncio.to_thread(entered.wait, WAIT)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    # the approved call ran: the turn stays pending with its result recorded
    assert session.load() == () and session.pending() is not None
    assert agent.approvals.get(approval_id).status == "approved"
    # the session is free (with the turn still running this would wait up to 30 s): the
    # next send finishes the kept turn without deleting again, then pauses on its own call
    assert session.send("b.log", timeout=WAIT).finish_reason == "awaiting-approval"
    assert [m.role for m in session.load()] == ["user", "assistant", "tool", "assistant"]
    agent.close()
