"""Streaming (SPEC 4): typed events, saved before run.done, early exit aborts, errors."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers import WAIT, Gate, calls, echo_provider

from lousho_sessions import (
    AbortController,
    FunctionProvider,
    Message,
    ModelRequest,
    ProviderError,
    create_agent,
    tool,
)
from lousho_sessions.events import ErrorEvent, RunDone, TextDelta, ToolResultEvent


def chunks(request: ModelRequest) -> list[str]:
    return ["Hel", "lo ", "there"]


def test_stream_events_in_order_and_text_concatenates() -> None:
    session = create_agent(provider=FunctionProvider(chunks)).session()
    run = session.stream("hi")
    events = list(run)
    types = [e.type for e in events]
    assert types[0] == "run.start" and types[1] == "step.start" and types[-1] == "run.done"
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello there"
    assert all(getattr(e, "run_id", run.id) == run.id for e in events)
    assert run.result().text == "Hello there"
    assert run.done


def test_transcript_complete_when_loop_ends() -> None:
    session = create_agent(provider=echo_provider()).session()
    seen_at_done: list[int] = []
    for event in session.stream("hi"):
        if isinstance(event, RunDone):
            seen_at_done.append(len(session.store.load(session.id) or []))
    assert seen_at_done == [2]
    assert len(session.messages) == 2


def test_stream_queues_when_called_not_when_iterated() -> None:
    session = create_agent(provider=echo_provider()).session()
    run = session.stream("first")
    result = session.send("second")  # queued after the stream's turn
    assert result.text == "3:second"
    assert run.result(WAIT).text == "1:first"


def test_break_out_of_stream_leaves_transcript_unchanged() -> None:
    gate = Gate()

    def slow_chunks(request: ModelRequest) -> Iterator[str]:
        yield "partial "
        gate.wait_in(request)
        yield "rest"

    session = create_agent(provider=FunctionProvider(slow_chunks)).session()
    run = session.stream("hi")
    for event in run:
        if isinstance(event, TextDelta):
            break
    result = run.result(WAIT)
    assert result.finish_reason == "aborted"
    assert session.load() == ()


def test_leaving_with_block_aborts() -> None:
    gate = Gate()
    session = create_agent(provider=FunctionProvider(lambda r: (gate.wait_in(r), "x")[1])).session()
    with session.stream("hi") as run:
        assert gate.entered.wait(WAIT)
    assert run.result(WAIT).finish_reason == "aborted"
    assert session.load() == ()


def test_exception_in_loop_aborts() -> None:
    gate = Gate()
    session = create_agent(provider=FunctionProvider(lambda r: (gate.wait_in(r), "x")[1])).session()
    run = session.stream("hi")
    with pytest.raises(KeyError):
        for _ in run:
            raise KeyError("user code failed")
    assert run.result(WAIT).finish_reason == "aborted"
    assert session.load() == ()


def test_break_after_run_finished_keeps_turn() -> None:
    session = create_agent(provider=echo_provider()).session()
    run = session.stream("hi")
    run.result(WAIT)  # the turn is over and saved
    for _ in run:
        break
    assert len(session.load()) == 2


def test_abort_method_and_signal() -> None:
    gate = Gate()
    session = create_agent(provider=FunctionProvider(lambda r: (gate.wait_in(r), "x")[1])).session()
    run = session.stream("hi")
    assert gate.entered.wait(WAIT)
    run.abort("stop")
    assert [e.type for e in run][-1] == "run.done"
    assert run.result().finish_reason == "aborted"

    controller = AbortController()
    gate2 = Gate()
    session2 = create_agent(
        provider=FunctionProvider(lambda r: (gate2.wait_in(r), "x")[1])
    ).session()
    run2 = session2.stream("hi", signal=controller.signal)
    assert gate2.entered.wait(WAIT)
    controller.abort()
    assert run2.result(WAIT).finish_reason == "aborted"


def test_failed_run_ends_with_error_then_done_and_result_raises() -> None:
    def model(request: ModelRequest) -> str:
        raise ProviderError(500, "server error")

    session = create_agent(provider=FunctionProvider(model)).session()
    run = session.stream("hi")
    events = list(run)
    assert [e.type for e in events][-2:] == ["error", "run.done"]
    assert isinstance(events[-2], ErrorEvent) and isinstance(events[-2].error, ProviderError)
    assert isinstance(events[-1], RunDone) and events[-1].finish_reason == "error"
    with pytest.raises(ProviderError):
        run.result()
    assert session.load() == ()


class BrokenStore:
    def load(self, id: str) -> list[Message] | None:
        raise OSError("disk on fire")

    def save(self, id: str, messages: object) -> None:
        raise OSError("disk on fire")

    def delete(self, id: str) -> None:
        raise OSError("disk on fire")


def test_store_failure_on_load_has_no_run_start() -> None:
    session = create_agent(provider=echo_provider()).session("s", store=BrokenStore())
    run = session.stream("hi")
    types = [e.type for e in run]
    assert types == ["error", "run.done"]
    with pytest.raises(OSError, match="disk on fire"):
        run.result()


def test_tool_events_in_stream() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    replies = iter([calls(("add", {"a": 2, "b": 3})), Message.assistant("5")])
    session = create_agent(
        provider=FunctionProvider(lambda r: next(replies)), tools=[add]
    ).session()
    events = list(session.stream("add 2 and 3"))
    types = [e.type for e in events]
    assert types == [
        "run.start",
        "step.start",
        "tool.call",
        "tool.result",
        "step.start",
        "text.delta",
        "run.done",
    ]
    result_event = events[3]
    assert isinstance(result_event, ToolResultEvent)
    assert result_event.output == "5" and not result_event.is_error


def test_agent_stream_single_turn() -> None:
    agent = create_agent(provider=FunctionProvider(chunks))
    run = agent.stream("hi")
    assert "".join(e.text for e in run if isinstance(e, TextDelta)) == "Hello there"
    assert run.result().finish_reason == "stop"


def test_run_iterates_once() -> None:
    run = create_agent(provider=echo_provider()).session().stream("x")
    list(run)
    with pytest.raises(RuntimeError, match="iterated already"):
        list(run)


def test_events_are_frozen() -> None:
    run = create_agent(provider=echo_provider()).session().stream("x")
    event = next(iter(run))
    with pytest.raises(AttributeError):
        event.run_id = "other"  # type: ignore[misc]
    run.result(WAIT)
