"""Per-request context for tools (issue 11.5): the caller's contextvars and ``context=``.

The caller's context variables are copied into the turn when it is queued, so a tool
(inline, on the tool pool, or async on the tool loop) and the model call see what the
caller's middleware set. ``send(..., context=obj)`` hands ``obj`` to tools as
``ToolContext.context``; it is never saved, so a resumed turn sees the resuming call's.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from helpers import WAIT, calls

from lousho_sessions import (
    ExecutionResult,
    FunctionProvider,
    Message,
    ModelRequest,
    ProviderError,
    ScriptedProvider,
    ToolContext,
    aio,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.tools import Tool

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)


@attrs.frozen
class Deps:
    user: str


def recording_tools(seen: list[tuple[str, Any]]) -> list[Tool]:
    """Two sync tools and an async one that record the request id they see."""

    @tool
    def first(n: int) -> str:
        """A sync tool."""
        seen.append(("first", request_id.get()))
        return "1"

    @tool
    def second(n: int) -> str:
        """Another sync tool."""
        seen.append(("second", request_id.get()))
        return "2"

    @tool
    async def third(n: int) -> str:
        """An async tool."""
        await asyncio.sleep(0)
        seen.append(("third", request_id.get()))
        return "3"

    return [first, second, third]


def two_steps(seen: list[tuple[str, Any]]) -> Callable[[ModelRequest], str | Message]:
    """Step 1: three calls at once (pool + tool loop); step 2: one call (inline); then text."""

    def model(request: ModelRequest) -> str | Message:
        seen.append(("model", request_id.get()))
        tool_messages = [m for m in request.messages if m.role == "tool"]
        if not tool_messages:
            return calls(("first", {"n": 1}), ("second", {"n": 2}), ("third", {"n": 3}))
        if len(tool_messages) == 3:
            return Message.assistant("", tool_calls=[calls(("third", {"n": 4})).tool_calls[0]])
        return "done"

    return model


@pytest.mark.parametrize("api", ["session.send", "session.stream", "agent.send", "agent.stream"])
def test_tools_and_model_see_the_callers_contextvars(api: str) -> None:
    seen: list[tuple[str, Any]] = []
    agent = create_agent(provider=FunctionProvider(two_steps(seen)), tools=recording_tools(seen))
    token = request_id.set("req-1")
    try:
        session = agent.session()
        if api == "session.send":
            result = session.send("go")
        elif api == "agent.send":
            result = agent.send("go")
        else:
            run = session.stream("go") if api == "session.stream" else agent.stream("go")
            assert [e.type for e in run][-1] == "run.done"
            result = run.result()
    finally:
        request_id.reset(token)
        agent.close()
    assert result.text == "done"
    names = sorted(name for name, _ in seen)
    assert names == ["first", "model", "model", "model", "second", "third", "third"]
    assert {value for _, value in seen} == {"req-1"}


def test_each_caller_sees_its_own_values_in_concurrent_turns() -> None:
    """Two requests at once, on two threads and two sessions: no value crosses over."""
    seen: dict[str, list[Any]] = {"a": [], "b": []}
    both_in_tool = threading.Barrier(2, timeout=WAIT)

    @tool
    def whoami(session: str) -> str:
        """Say who asks."""
        both_in_tool.wait()  # both turns are in their tool at once
        seen[session].append(request_id.get())
        return "ok"

    def model(request: ModelRequest) -> str | Message:
        last = request.messages[-1]
        if last.role == "user":
            return calls(("whoami", {"session": last.text}))
        return "done"

    agent = create_agent(provider=FunctionProvider(model), tools=[whoami])

    def user(name: str) -> None:
        request_id.set(f"req-{name}")  # this thread's own context
        agent.session(name).send(name)

    threads = [threading.Thread(target=user, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    agent.close()
    assert seen == {"a": ["req-a"], "b": ["req-b"]}


def test_aio_tasks_pass_their_own_contextvars() -> None:
    seen: list[tuple[str, Any]] = []

    async def request(agent: aio.AsyncAgent, name: str) -> ExecutionResult:
        request_id.set(f"req-{name}")  # the task's own context
        return await agent.session(name).send("go")

    async def main() -> list[ExecutionResult]:
        provider = FunctionProvider(two_steps(seen))
        async with aio.create_agent(provider=provider, tools=recording_tools(seen)) as agent:
            return list(await asyncio.gather(request(agent, "a"), request(agent, "b")))

    results = asyncio.run(main())
    assert [r.text for r in results] == ["done", "done"]
    values = [value for _, value in seen]
    assert sorted(set(values)) == ["req-a", "req-b"]
    assert values.count("req-a") == values.count("req-b") == 7


def context_tool(seen: list[Any]) -> Tool:
    @tool
    def whoami(ctx: ToolContext[Deps], n: int) -> str:
        """Say who asks."""
        seen.append(ctx.context)
        return ctx.context.user if ctx.context is not None else "nobody"

    return whoami


def test_a_typed_tool_context_is_not_part_of_the_schema() -> None:
    whoami = context_tool([])
    assert whoami.takes_context
    assert list(whoami.parameters["properties"]) == ["n"]


@pytest.mark.parametrize(
    "api",
    ["session.send", "session.stream", "agent.send", "agent.stream", "aio.send", "aio.stream"],
)
def test_context_object_reaches_tool_context(api: str) -> None:
    seen: list[Any] = []
    deps = Deps("ali")
    provider = ScriptedProvider([calls(("whoami", {"n": 1})), "done"])
    agent = create_agent(provider=provider, tools=[context_tool(seen)])
    if api == "session.send":
        agent.session().send("go", context=deps)
    elif api == "agent.send":
        agent.send("go", context=deps)
    elif api in ("session.stream", "agent.stream"):
        target = agent.session() if api == "session.stream" else agent
        assert target.stream("go", context=deps).result(WAIT).text == "done"
    else:

        async def main() -> None:
            session = aio.AsyncSession(agent.session())
            if api == "aio.send":
                await session.send("go", context=deps)
            else:
                run = session.stream("go", context=deps)
                assert (await run.result()).text == "done"

        asyncio.run(main())
    agent.close()
    assert seen == [deps]


def test_without_context_a_tool_sees_none() -> None:
    seen: list[Any] = []
    provider = ScriptedProvider([calls(("whoami", {"n": 1})), "done"])
    with create_agent(provider=provider, tools=[context_tool(seen)]) as agent:
        agent.session().send("go")
    assert seen == [None]


def test_a_resumed_turn_sees_the_resuming_calls_context() -> None:
    """Not saved: after a failed model call, ``resume(context=)`` gives the context anew."""
    seen: list[Any] = []
    failed: list[int] = []

    def model(request: ModelRequest) -> str | Message:
        tool_messages = [m for m in request.messages if m.role == "tool"]
        if not tool_messages:
            return calls(("whoami", {"n": 1}))
        if len(tool_messages) == 1:
            if not failed:  # a transient failure: the turn stays pending
                failed.append(1)
                raise ConnectionError("model went away")
            return Message.assistant("", tool_calls=[calls(("whoami", {"n": 2})).tool_calls[0]])
        return "done"

    store = memory_store()
    with create_agent(
        provider=FunctionProvider(model), tools=[context_tool(seen)], store=store
    ) as a:
        session = a.session("s")
        with pytest.raises(ProviderError):
            session.send("go", context=Deps("first"))
        assert session.pending() is not None
    with create_agent(
        provider=FunctionProvider(model), tools=[context_tool(seen)], store=store
    ) as b:
        result = b.session("s").resume(context=Deps("second"))
    assert result is not None and result.text == "done"
    assert seen == [Deps("first"), Deps("second")]


@pytest.mark.parametrize("how", ["resolve", "resolve-none", "resolve_stream", "aio.resolve"])
def test_an_approved_turn_sees_the_resolving_calls_context(how: str) -> None:
    seen: list[Any] = []

    @tool(needs_approval=True)
    def pay(ctx: ToolContext[Deps], amount: int) -> str:
        """Pay."""
        seen.append(ctx.context)
        return "paid"

    provider = ScriptedProvider([calls(("pay", {"amount": 5})), "done"])
    with create_agent(provider=provider, tools=[pay], store=memory_store()) as agent:
        paused = agent.session("s").send("pay", context=Deps("sender"))
        assert paused.approval_id is not None
        approval_id = paused.approval_id
        if how == "resolve":
            agent.approvals.resolve(approval_id, approved=True, context=Deps("approver"))
        elif how == "resolve-none":
            agent.approvals.resolve(approval_id, approved=True)
        elif how == "resolve_stream":
            run = agent.approvals.resolve_stream(
                approval_id, approved=True, context=Deps("approver")
            )
            assert run.result(WAIT).text == "done"
        else:

            async def main() -> None:
                approvals = aio.AsyncAgent(agent).approvals
                await approvals.resolve(approval_id, approved=True, context=Deps("approver"))

            asyncio.run(main())
    assert seen == [None if how == "resolve-none" else Deps("approver")]


def test_a_value_a_tool_sets_stays_in_that_call() -> None:
    seen: list[Any] = []

    @tool
    def setter(n: int) -> str:
        """Set the request id."""
        seen.append(("tool", request_id.get()))
        request_id.set("set-by-tool")
        return "ok"

    def model(request: ModelRequest) -> str | Message:
        seen.append(("model", request_id.get()))
        if request.messages[-1].role == "user":
            return calls(("setter", {"n": 1}))
        return "done"

    token = request_id.set("req-1")
    try:
        with create_agent(provider=FunctionProvider(model), tools=[setter]) as agent:
            agent.session().send("go")
        assert request_id.get() == "req-1"
    finally:
        request_id.reset(token)
    assert seen == [("model", "req-1"), ("tool", "req-1"), ("model", "req-1")]
