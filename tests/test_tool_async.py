"""Async tools (issue 11.1): awaited on the agent's tool loop, in the sync and the aio API."""

from __future__ import annotations

import asyncio
import contextvars
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable

import pytest
from helpers import WAIT, calls

from lousho_sessions import (
    AbortController,
    AbortSignal,
    ExecutionResult,
    ScriptedProvider,
    ToolContext,
    aio,
    create_agent,
    tool,
)
from lousho_sessions.abort import AbortedError
from lousho_sessions.tools import Tool, ToolLoop


def send(mode: str, tools: list[Tool], provider: ScriptedProvider, text: str) -> ExecutionResult:
    """One turn through the sync API or through ``aio`` on the caller's own loop."""
    if mode == "sync":
        with create_agent(provider=provider, tools=tools) as agent:
            return agent.session().send(text)

    async def main() -> ExecutionResult:
        async with aio.create_agent(provider=provider, tools=tools) as agent:
            return await agent.session().send(text)

    return asyncio.run(main())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_async_tool_result_reaches_the_model(mode: str) -> None:
    @tool
    async def lookup(city: str) -> dict[str, str]:
        """Look a city up."""
        await asyncio.sleep(0)
        return {"city": city, "weather": "sunny"}

    provider = ScriptedProvider([calls(("lookup", {"city": "Paris"})), "ok"])
    result = send(mode, [lookup], provider, "weather?")
    (tool_message,) = [m for m in result.messages if m.role == "tool"]
    assert not tool_message.is_error
    assert tool_message.text == '{"city": "Paris", "weather": "sunny"}'
    assert lookup.is_async


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_async_tool_errors_are_error_results(mode: str) -> None:
    @tool
    async def fails() -> str:
        """Fails."""
        await asyncio.sleep(0)
        raise ValueError("backend said no")

    provider = ScriptedProvider([calls(("fails", {})), "recovered"])
    result = send(mode, [fails], provider, "x")
    (tool_message,) = [m for m in result.messages if m.role == "tool"]
    assert tool_message.is_error and tool_message.text == "Error: ValueError: backend said no"


def test_async_tools_of_one_step_run_concurrently_on_one_loop() -> None:
    loops: list[asyncio.AbstractEventLoop] = []
    flags: dict[str, asyncio.Event] = {}

    @tool
    async def meet(me: str, other: str) -> str:
        """Passes only if the other call runs at the same time."""
        loops.append(asyncio.get_running_loop())
        flags.setdefault(me, asyncio.Event()).set()
        await asyncio.wait_for(flags.setdefault(other, asyncio.Event()).wait(), WAIT)
        return f"{me} met {other}"

    provider = ScriptedProvider(
        [
            calls(("meet", {"me": "a", "other": "b"}), ("meet", {"me": "b", "other": "a"})),
            calls(("meet", {"me": "c", "other": "c"})),
            "done",
        ]
    )
    with create_agent(provider=provider, tools=[meet]) as agent:
        result = agent.session().send("go")
    outputs = [m.text for m in result.messages if m.role == "tool"]
    assert outputs == ["a met b", "b met a", "c met c"]
    # one loop for the agent: loop-bound clients can be shared between calls and steps
    assert len(loops) == 3 and len(set(map(id, loops))) == 1


def test_aio_caller_loop_is_not_the_tool_loop() -> None:
    seen: list[asyncio.AbstractEventLoop] = []

    @tool
    async def where() -> str:
        """Where am I?"""
        seen.append(asyncio.get_running_loop())
        return "here"

    async def main() -> asyncio.AbstractEventLoop:
        provider = ScriptedProvider([calls(("where", {})), "ok"])
        async with aio.create_agent(provider=provider, tools=[where]) as agent:
            await agent.send("x")
        return asyncio.get_running_loop()

    caller = asyncio.run(main())
    assert len(seen) == 1 and seen[0] is not caller


def test_abort_cancels_the_coroutine() -> None:
    started = threading.Event()
    cancelled = threading.Event()

    @tool
    async def slow(ctx: ToolContext) -> str:
        """Waits until cancelled."""
        started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    provider = ScriptedProvider([calls(("slow", {})), "never"])
    with create_agent(provider=provider, tools=[slow]) as agent:
        session = agent.session()
        run = session.stream("go")
        assert started.wait(WAIT)
        run.abort("stop")
        assert run.result(WAIT).finish_reason == "aborted"
        assert cancelled.is_set()
        assert session.load() == ()


def test_close_stops_the_loop_thread_and_a_later_call_starts_it_again() -> None:
    threads: list[threading.Thread] = []

    @tool
    async def which() -> str:
        """Which thread."""
        threads.append(threading.current_thread())
        return "ok"

    provider = ScriptedProvider([calls(("which", {})), "one", calls(("which", {})), "two"])
    agent = create_agent(provider=provider, tools=[which])
    session = agent.session()
    assert session.send("a").text == "one"
    agent.close()
    assert not threads[0].is_alive()
    assert session.send("b").text == "two"
    assert threads[1] is not threads[0] and threads[1].name == "lousho-tool-loop"
    agent.close()
    assert not threads[1].is_alive()


def run_on(loop: ToolLoop, fn: Callable[[], Awaitable[str]], signal: AbortSignal) -> str:
    result: str = loop.run(fn(), signal)
    return result


def test_tool_loop_copies_the_callers_context_variables() -> None:
    request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id")

    async def read() -> str:
        return request_id.get("unset")

    loop = ToolLoop()
    try:
        request_id.set("req-42")
        assert run_on(loop, read, AbortController().signal) == "req-42"
    finally:
        loop.close()


def test_tool_loop_already_aborted_signal_cancels_at_once() -> None:
    controller = AbortController()
    controller.abort("gone")

    async def forever() -> str:
        await asyncio.Event().wait()
        return "never"

    loop = ToolLoop()
    try:
        with pytest.raises(AbortedError):
            run_on(loop, forever, controller.signal)
    finally:
        loop.close()


def test_invoke_without_an_agent_loop_runs_a_loop_of_its_own() -> None:
    @tool
    async def double(n: int) -> int:
        """Double."""
        await asyncio.sleep(0)
        return 2 * n

    context = ToolContext(None, "run-1", "c1", AbortController().signal, "run-1:c1")
    assert double.invoke({"n": 21}, context) == "42"


def test_decorating_an_async_tool_does_not_import_asyncio() -> None:
    code = (
        "import sys, lousho_sessions\n"
        "@lousho_sessions.tool\n"
        "async def ping() -> str:\n"
        "    '''Ping.'''\n"
        "    return 'pong'\n"
        "assert ping.is_async\n"
        "assert 'asyncio' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
