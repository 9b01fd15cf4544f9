"""Turn policies (SPEC 3 "turn_policy"): queue and steer join the running turn."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor

import pytest
from helpers import WAIT, Gate, calls

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    ProviderError,
    ScriptedProvider,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.events import Event, InputApplied, InputQueued


def blocked_first_call(gate: Gate, seen: list[list[str]]) -> FunctionProvider:
    first = threading.Event()

    def model(request: ModelRequest) -> str:
        seen.append([m.text for m in request.messages])
        if not first.is_set():
            first.set()
            gate.wait_in(request)
        return f"reply to {request.messages[-1].text}"

    return FunctionProvider(model)


def test_queue_joins_running_turn_one_result() -> None:
    gate = Gate()
    seen: list[list[str]] = []
    session = create_agent(provider=blocked_first_call(gate, seen)).session(turn_policy="queue")
    run = session.stream("Find flights to Rome.")
    events = iter(run)
    assert gate.entered.wait(WAIT)
    with ThreadPoolExecutor(1) as pool:
        second = pool.submit(session.send, "Only direct ones, please.")
        until_queued(events)
        gate.open()
        a, b = run.result(WAIT), second.result(WAIT)
    assert a is b  # one turn, one result
    assert a.text == "reply to Only direct ones, please."
    # the next model call saw the queued message after the first reply
    assert seen[-1] == [
        "Find flights to Rome.",
        "reply to Find flights to Rome.",
        "Only direct ones, please.",
    ]
    texts = [m.text for m in session.load()]
    assert texts == [
        "Find flights to Rome.",
        "reply to Find flights to Rome.",
        "Only direct ones, please.",
        "reply to Only direct ones, please.",
    ]


def until_queued(events: Iterator[Event]) -> list[Event]:
    """Consume the starting run's events up to ``input.queued``: the joining input is in the turn."""
    seen = []
    for event in events:
        seen.append(event)
        if isinstance(event, InputQueued):
            return seen
    raise AssertionError(f"no input.queued event in {[e.type for e in seen]}")


def test_queue_input_goes_after_tool_results() -> None:
    gate = Gate()
    seen: list[list[str]] = []

    @tool
    def slow() -> str:
        """Blocks until the test lets it go."""
        gate.entered.set()
        gate.wait_in(ModelRequest(None, ()))
        return "tool output"

    replies: Iterator[str | Message] = iter([calls(("slow", {})), "after tools"])

    def model(request: ModelRequest) -> str | Message:
        seen.append([f"{m.role}:{m.text}" for m in request.messages])
        return next(replies)

    session = create_agent(provider=FunctionProvider(model), tools=[slow]).session(
        turn_policy="queue"
    )
    run = session.stream("start")
    stream = iter(run)
    assert gate.entered.wait(WAIT)
    joined: Future[object] = Future()
    threading.Thread(target=lambda: joined.set_result(session.send("also this"))).start()
    events = until_queued(stream)
    gate.open()
    events += list(stream)
    assert joined.result(WAIT) is run.result()
    assert seen[-1] == ["user:start", "assistant:", "tool:tool output", "user:also this"]
    types = [e.type for e in events]
    assert "input.queued" in types and "input.applied" in types
    assert types.index("input.queued") < types.index("input.applied")
    queued = next(e for e in events if isinstance(e, InputQueued))
    applied = next(e for e in events if isinstance(e, InputApplied))
    assert queued.input_id == applied.input_id


def test_steer_remakes_silent_model_call() -> None:
    gate = Gate()
    calls_seen: list[list[str]] = []
    first = threading.Event()

    def model(request: ModelRequest) -> str:
        calls_seen.append([m.text for m in request.messages])
        if not first.is_set():
            first.set()
            gate.wait_in(request)  # returns when steering aborts this call
            return "stale answer"
        return "fresh answer"

    session = create_agent(provider=FunctionProvider(model)).session(turn_policy="steer")
    run = session.stream("Find flights to Rome.")
    assert gate.entered.wait(WAIT)
    steered = session.send("Actually, Paris.")
    assert steered.text == "fresh answer" and steered is run.result()
    assert calls_seen[-1] == ["Find flights to Rome.", "Actually, Paris."]
    assert [m.text for m in session.load()] == [
        "Find flights to Rome.",
        "Actually, Paris.",
        "fresh answer",
    ]


def test_steer_after_model_spoke_waits_like_queue() -> None:
    gate = Gate()
    first = threading.Event()

    def model(request: ModelRequest) -> Iterator[str]:
        if not first.is_set():
            first.set()
            yield "spoke "
            gate.wait_in(request)
            yield "first"
            return
        yield f"then {request.messages[-1].text}"

    session = create_agent(provider=FunctionProvider(model)).session(turn_policy="steer")
    run = session.stream("a")
    stream = iter(run)
    assert gate.entered.wait(WAIT)
    joined: Future[object] = Future()
    threading.Thread(target=lambda: joined.set_result(session.send("b"))).start()
    until_queued(stream)
    gate.open()
    assert run.result(WAIT).text == "then b"
    assert [m.text for m in session.load()] == ["a", "spoke first", "b", "then b"]


def test_joining_call_after_turn_ended_runs_as_next_turn() -> None:
    session = create_agent(provider=ScriptedProvider(["one", "two"])).session(turn_policy="queue")
    assert session.send("a").text == "one"
    assert session.send("b").text == "two"  # nothing running: its own turn
    assert len(session.load()) == 4


def test_joined_call_raises_the_turns_error() -> None:
    gate = Gate()

    def model(request: ModelRequest) -> str:
        gate.wait_in(request)
        raise ProviderError(500, "down")

    session = create_agent(provider=FunctionProvider(model)).session(turn_policy="queue")
    run = session.stream("a")
    stream = iter(run)
    assert gate.entered.wait(WAIT)
    joined: Future[object] = Future()

    def join() -> None:
        try:
            session.send("b")
        except BaseException as exc:
            joined.set_exception(exc)

    threading.Thread(target=join).start()
    until_queued(stream)
    gate.open()
    with pytest.raises(ProviderError):
        run.result(WAIT)
    with pytest.raises(ProviderError):
        joined.result(WAIT)


def test_durable_failed_turn_keeps_queued_input_for_resume() -> None:
    gate = Gate()
    fail = threading.Event()
    fail.set()
    seen: list[list[str]] = []

    def model(request: ModelRequest) -> str:
        seen.append([m.text for m in request.messages])
        if fail.is_set():
            fail.clear()
            gate.wait_in(request)
            raise ProviderError(503, "busy")
        return "recovered"

    session = create_agent(provider=FunctionProvider(model), store=memory_store()).session(
        "q1", turn_policy="queue"
    )
    run = session.stream("a")
    stream = iter(run)
    assert gate.entered.wait(WAIT)
    errors: list[BaseException] = []
    t = threading.Thread(target=lambda: _capture(errors, lambda: session.send("b")))
    t.start()
    until_queued(stream)
    gate.open()
    t.join(WAIT)
    assert isinstance(errors[0], ProviderError)
    with pytest.raises(ProviderError):
        run.result(WAIT)
    result = session.resume()
    assert result is not None and result.text == "recovered"
    assert seen[-1] == ["a", "b"]


def _capture(errors: list[BaseException], fn: object) -> None:
    try:
        fn()  # type: ignore[operator]
    except BaseException as exc:
        errors.append(exc)


def test_run_enqueue_and_joining_stream_yields_only_done() -> None:
    gate = Gate()
    seen: list[list[str]] = []
    session = create_agent(provider=blocked_first_call(gate, seen)).session(turn_policy="queue")
    run = session.stream("a")
    assert gate.entered.wait(WAIT)
    input_id = run.enqueue("b")
    assert input_id.startswith("in-")
    joining = session.stream("c")
    gate.open()
    assert [e.type for e in joining] == ["run.done"]
    assert joining.result(WAIT) is run.result(WAIT)
    assert seen[-1][-1] == "c" and "b" in seen[-1]


def test_invalid_policy() -> None:
    with pytest.raises(ValueError, match="turn_policy"):
        create_agent().session(turn_policy="shout")  # type: ignore[arg-type]
