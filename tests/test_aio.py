"""The asyncio facade (SPEC 9): the loop never blocks, cancelling a task aborts its turn."""

from __future__ import annotations

import ast
import asyncio
import gc
import pathlib
import subprocess
import sys
import threading
import time

import pytest
from helpers import WAIT, Gate, echo_provider, gated

from lousho_sessions import (
    Agent,
    ApprovalAlreadyResolvedError,
    FunctionProvider,
    Message,
    ModelRequest,
    Session,
    SessionBusyError,
    aio,
)
from lousho_sessions.aio import AsyncAgent, AsyncAgentRun, AsyncSession


async def entered(gate: Gate) -> None:
    """Wait, off the loop, until a model call blocks in ``gate``."""
    assert await asyncio.to_thread(gate.entered.wait, WAIT)


def test_wrappers_give_back_the_sync_objects() -> None:
    agent = aio.create_agent(provider=echo_provider())
    assert isinstance(agent, AsyncAgent) and isinstance(agent.sync, Agent)
    session = agent.session("abc")
    assert isinstance(session, AsyncSession) and isinstance(session.sync, Session)
    assert session.id == "abc" and AsyncSession(session.sync).sync is session.sync

    async def main() -> None:
        run = session.stream("x")
        assert isinstance(run, AsyncAgentRun) and run.sync.id == run.id
        assert (await run.result()).text == "1:x"
        assert run.done

    asyncio.run(main())


def test_turns_run_on_the_session_worker_thread_not_the_loop() -> None:
    threads: list[str] = []

    def model(request: ModelRequest) -> str:
        threads.append(threading.current_thread().name)
        return "ok"

    async def main() -> str:
        session = aio.create_agent(provider=FunctionProvider(model)).session()
        await session.send("a")
        async for _ in session.stream("b"):
            pass
        return threading.current_thread().name

    loop_thread = asyncio.run(main())
    assert len(threads) == 2 and loop_thread not in threads
    assert all(name.startswith("lousho-session") for name in threads)


def _imports_asyncio_at_import_time(path: pathlib.Path) -> bool:
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Import) and any(a.name == "asyncio" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == "asyncio":
            return True
    return False


def test_only_aio_imports_asyncio() -> None:
    package = pathlib.Path(aio.__file__).parent
    importers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if _imports_asyncio_at_import_time(path)
    )
    assert importers == ["aio.py"]  # _tool_loop.py imports it only when an async tool runs
    # (asyncio itself may come in through a dependency, e.g. filelock, so check the facade)
    code = "import sys, lousho_sessions; print('lousho_sessions.aio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_ticker_keeps_cadence_while_twenty_sessions_block_in_their_models() -> None:
    """20 sessions x 2 turns whose model blocks a while; the loop never waits on a model.

    Bounds are ratios of the model's time, so a loaded machine does not fail them:
    the turns overlap (far less than one after another), and no tick waits as long
    as a model call.
    """
    model_seconds = 0.3
    never = threading.Event()
    model_calls: list[float] = []

    def slow(request: ModelRequest) -> str:
        never.wait(model_seconds)  # a slow model (not a sleep to synchronise anything)
        model_calls.append(time.perf_counter())
        return "slow answer"

    agent = aio.create_agent(provider=FunctionProvider(slow))

    async def chat(session: AsyncSession) -> int:
        await session.send("one")
        run = session.stream("two")
        async for _ in run:
            pass
        await run.result()
        return len(await session.load())

    async def main() -> tuple[list[int], list[float]]:
        stop = asyncio.Event()
        gaps: list[float] = []

        async def ticker() -> None:
            last = time.perf_counter()
            while not stop.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        tick = asyncio.create_task(ticker())
        started = time.perf_counter()
        lengths = await asyncio.gather(*(chat(agent.session()) for _ in range(20)))
        elapsed = time.perf_counter() - started
        stop.set()
        await tick
        one_after_another = 40 * model_seconds
        assert elapsed < one_after_another / 4, f"the sessions did not overlap: {elapsed:.2f} s"
        return list(lengths), gaps

    # a full collection of this test process's heap (thousands of tests' objects) once
    # stalled the loop 378 ms in CI: not what this test is about
    collecting = gc.isenabled()
    gc.disable()
    try:
        lengths, gaps = asyncio.run(main())
    finally:
        if collecting:
            gc.enable()
    assert lengths == [4] * 20 and len(model_calls) == 40
    # the ticker ran throughout: the turns take at least two model calls (0.6 s), and no
    # gap reaches model_seconds / 2, so at least four ticks (a count, not a rate: load-proof)
    assert len(gaps) >= 4
    assert max(gaps) < model_seconds / 2, f"event loop stalled {max(gaps) * 1000:.1f} ms"


def test_cancelling_an_awaited_send_aborts_the_turn() -> None:
    gate = Gate()
    session = aio.create_agent(provider=gated(gate)).session()

    async def main() -> None:
        await session.send("hello")
        before = await session.load()
        task = asyncio.create_task(session.send("block"))
        await entered(gate)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await session.load() == before  # queued behind the aborted turn: sees its end
        assert (await session.send("after")).text == "one two"

    asyncio.run(main())
    assert [m.text for m in session.messages] == ["hello", "one two", "after", "one two"]


def test_cancelling_a_send_still_queued_drops_it() -> None:
    gate = Gate()
    session = aio.create_agent(provider=gated(gate)).session()

    async def main() -> None:
        first = asyncio.create_task(session.send("block"))
        await entered(gate)
        second = asyncio.create_task(session.send("queued"))
        await asyncio.sleep(0)  # let it queue its turn
        second.cancel()
        with pytest.raises(asyncio.CancelledError):
            await second
        gate.open()
        assert (await first).text == "one two"
        assert [m.text for m in await session.load()] == ["block", "one two"]

    asyncio.run(main())


def test_cancelling_the_task_iterating_a_stream_aborts_it() -> None:
    gate = Gate()
    session = aio.create_agent(provider=gated(gate)).session()

    async def main() -> None:
        run = session.stream("block")
        deltas: list[str] = []

        async def consume() -> None:
            async for event in run:
                if event.type == "text.delta":
                    deltas.append(event.text)

        task = asyncio.create_task(consume())
        await entered(gate)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        result = await run.result(WAIT)
        assert result.finish_reason == "aborted"
        assert await session.load() == ()

    asyncio.run(main())


def test_cancelling_await_result_aborts_the_run() -> None:
    gate = Gate()
    session = aio.create_agent(provider=gated(gate)).session()

    async def main() -> None:
        run = session.stream("block")
        task = asyncio.create_task(run.result())
        await entered(gate)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await run.result(WAIT)).finish_reason == "aborted"
        assert [e.type async for e in run][-1] == "run.done"
        assert await session.load() == ()

    asyncio.run(main())


def test_break_without_async_with_aborts_the_run() -> None:
    gate = Gate()
    session = aio.create_agent(provider=gated(gate)).session()

    async def main() -> None:
        run = session.stream("block")
        async for event in run:
            if event.type == "text.delta":
                break
        assert (await run.result(WAIT)).finish_reason == "aborted"
        assert await session.load() == ()

    asyncio.run(main())


def test_finished_run_is_kept_when_the_loop_is_left_after_done() -> None:
    session = aio.create_agent(provider=echo_provider()).session()

    async def main() -> None:
        async with session.stream("hi") as run:
            async for event in run:
                if event.type == "run.done":
                    break
        assert (await run.result()).text == "1:hi"
        assert len(await session.load()) == 2

    asyncio.run(main())


def test_result_timeout_raises_without_aborting() -> None:
    gate = Gate()
    session = aio.create_agent(provider=gated(gate)).session()

    async def main() -> None:
        run = session.stream("block")
        with pytest.raises(TimeoutError):
            await run.result(timeout=0.01)
        assert not run.done
        gate.open()
        assert (await run.result(WAIT)).text == "one two"

    asyncio.run(main())


def test_a_closed_loop_aborts_the_runs_it_was_reading() -> None:
    gate = Gate()
    session = aio.create_agent(provider=gated(gate)).session()

    async def start() -> AsyncAgentRun:
        run = session.stream("block")
        await entered(gate)
        return run

    loop = asyncio.new_event_loop()
    run = loop.run_until_complete(start())
    loop.close()
    gate.open()  # the next event finds the loop closed
    assert run.sync.result(WAIT).finish_reason == "aborted"
    assert session.sync.load() == ()


def test_iterating_twice_is_an_error() -> None:
    session = aio.create_agent(provider=echo_provider()).session()

    async def main() -> None:
        run = session.stream("hi")
        assert [e.type async for e in run][-1] == "run.done"
        with pytest.raises(RuntimeError, match="iterated already"):
            run.__aiter__()
        with pytest.raises(RuntimeError, match="iterated already"):
            iter(run.sync)

    asyncio.run(main())


def test_transcript_calls_are_awaitable() -> None:
    def model(request: ModelRequest) -> str:
        return "summary" if request.system and "summar" in request.system.lower() else "ok"

    agent = aio.create_agent(provider=FunctionProvider(model))
    session = agent.session()
    cleared: list[str] = []
    session.on(lambda event: cleared.append(event.type))

    async def main() -> None:
        for i in range(4):
            await session.send(f"m{i}")
        assert len(await session.load()) == 8
        compacted = await session.compact(keep_last=2)
        assert compacted.compacted and compacted.messages_after == 3
        assert len(session.messages) == 3
        assert await session.pending() is None
        await session.discard_pending()
        await session.clear()
        assert await session.load() == ()

    asyncio.run(main())
    assert "context.cleared" in cleared


def test_clear_right_after_an_awaited_call_is_not_busy() -> None:
    # the worker may not have marked itself idle yet when the loop resumes the caller
    session = aio.create_agent(provider=echo_provider()).session()

    async def main() -> None:
        for _ in range(50):
            await session.send("x")
            await session.clear()
            await session.load()
            await session.clear()

    asyncio.run(main())


def test_clear_while_a_turn_runs_raises_busy() -> None:
    gate = Gate()
    session = aio.create_agent(provider=gated(gate)).session()

    async def main() -> None:
        task = asyncio.create_task(session.send("block"))
        await entered(gate)
        with pytest.raises(SessionBusyError):
            await session.clear()
        gate.open()
        await task

    asyncio.run(main())


def test_approval_resolved_twice_raises_and_agent_resume_is_awaitable() -> None:
    from test_modes import approval_agent

    agent = AsyncAgent(approval_agent())

    async def main() -> None:
        paused = await agent.send("delete it", session_id="single-run")
        assert paused.finish_reason == "awaiting-approval" and paused.approval_id
        request = await agent.approvals.get(paused.approval_id)
        assert request.tool == "delete_file"
        result = await agent.approvals.resolve(id=paused.approval_id, approved=True)
        assert result is not None and result.text == "tool said: deleted /tmp/x"
        with pytest.raises(ApprovalAlreadyResolvedError):
            await agent.approvals.resolve(id=paused.approval_id, approved=False)
        assert await agent.resume("single-run") is None

    asyncio.run(main())


def test_many_concurrent_sends_to_one_session_never_interleave() -> None:
    session = aio.create_agent(provider=echo_provider()).session()

    async def main() -> tuple[Message, ...]:
        await asyncio.gather(*(session.send(f"m{i}") for i in range(30)))
        return await session.load()

    messages = asyncio.run(main())
    assert [m.role for m in messages] == ["user", "assistant"] * 30
    for user, reply in zip(messages[::2], messages[1::2], strict=True):
        assert reply.text.endswith(user.text)


def test_stream_outside_a_coroutine_raises_before_queuing_a_turn() -> None:
    calls: list[ModelRequest] = []

    def model(request: ModelRequest) -> str:
        calls.append(request)
        return "ok"

    session = aio.create_agent(provider=FunctionProvider(model)).session()
    with pytest.raises(RuntimeError, match="no running event loop"):
        session.stream("hi")
    assert session.sync.load() == () and calls == []
