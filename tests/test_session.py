"""Sessions (SPEC 3): ordered turns, transcripts, clear, listeners, failures."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest
from helpers import WAIT, Gate, calls, echo_provider, gated

from lousho_sessions import (
    AbortController,
    FunctionProvider,
    InvalidSessionIdError,
    MemorySessionStore,
    Message,
    ModelRequest,
    PropagatingToolError,
    ProviderError,
    SessionBusyError,
    create_agent,
    tool,
)
from lousho_sessions.runtime import _worker


def strict_pairs(messages: tuple[Message, ...]) -> bool:
    roles = [m.role for m in messages]
    return roles == ["user", "assistant"] * (len(roles) // 2)


def test_session_remembers_across_turns() -> None:
    agent = create_agent()
    session = agent.session()
    session.send("My name is Ali.")
    result = session.send("What is my name?")
    assert "Ali" in result.text
    assert len(session.messages) == 4
    assert result.session_id == session.id
    assert [m.role for m in result.messages] == ["user", "assistant"]


def test_model_sees_whole_transcript_without_system_prompt() -> None:
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> str:
        seen.append(request)
        return "ok"

    agent = create_agent(instructions="Be brief.", provider=FunctionProvider(model))
    session = agent.session()
    session.send("one")
    session.send("two")
    assert seen[1].system == "Be brief."
    assert [m.text for m in seen[1].messages] == ["one", "ok", "two"]
    assert all(m.role != "system" for m in session.messages)


def test_messages_is_a_frozen_snapshot() -> None:
    session = create_agent(provider=echo_provider()).session()
    session.send("hi")
    snapshot = session.messages
    assert isinstance(snapshot, tuple)
    with pytest.raises(AttributeError):
        snapshot[0].role = "assistant"  # type: ignore[misc]
    session.send("again")
    assert len(snapshot) == 2 and len(session.messages) == 4


def test_twenty_threads_give_forty_messages_in_strict_pairs() -> None:
    session = create_agent(provider=echo_provider()).session()
    barrier = threading.Barrier(20, timeout=WAIT)
    errors: list[BaseException] = []

    def send(i: int) -> None:
        try:
            barrier.wait()
            session.send(f"message {i}")
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert not errors
    messages = session.load()
    assert len(messages) == 40
    assert strict_pairs(messages)
    # each reply answers the message just before it: the turns did not interleave
    for user, reply in zip(messages[::2], messages[1::2], strict=True):
        assert reply.text.endswith(user.text)


def test_calls_run_in_call_order() -> None:
    gate = Gate()
    first = threading.Event()

    def model(request: ModelRequest) -> str:
        if not first.is_set():
            first.set()
            gate.wait_in(request)
        return request.messages[-1].text

    session = create_agent(provider=FunctionProvider(model)).session()
    runs = [session.stream("a")]
    assert gate.entered.wait(WAIT)
    runs += [session.stream(x) for x in ("b", "c", "d")]  # queued behind "a", in this order
    gate.open()
    assert [r.result(WAIT).text for r in runs] == ["a", "b", "c", "d"]
    assert [m.text for m in session.messages] == ["a", "a", "b", "b", "c", "c", "d", "d"]


def test_two_session_objects_with_same_id_and_store_share_order() -> None:
    store = MemorySessionStore()
    agent = create_agent(provider=echo_provider())
    one = agent.session("shared", store=store)
    two = agent.session("shared", store=store)
    barrier = threading.Barrier(10, timeout=WAIT)

    def send(session: Any, i: int) -> None:
        barrier.wait()
        session.send(f"m{i}")

    threads = [threading.Thread(target=send, args=(one if i % 2 else two, i)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    loaded = one.load()
    assert len(loaded) == 20 and strict_pairs(loaded)
    assert two.load() == loaded


def test_new_session_object_sees_saved_transcript() -> None:
    store = MemorySessionStore()
    create_agent().session("user-42", store=store).send("My name is Ali.")
    again = create_agent().session("user-42", store=store)
    assert "Ali" in again.send("What is my name?").text


def test_provider_error_leaves_transcript_unchanged() -> None:
    fail = threading.Event()

    def model(request: ModelRequest) -> str:
        if fail.is_set():
            raise ProviderError(503, "overloaded", retryable=True)
        return "fine"

    session = create_agent(provider=FunctionProvider(model)).session()
    session.send("first")
    before = session.load()
    fail.set()
    with pytest.raises(ProviderError):
        session.send("second")
    assert session.load() == before


def test_foreign_provider_exception_is_wrapped() -> None:
    def model(request: ModelRequest) -> str:
        raise RuntimeError("boom")

    session = create_agent(provider=FunctionProvider(model)).session()
    with pytest.raises(ProviderError, match="boom"):
        session.send("x")
    assert session.load() == ()


def test_propagating_tool_error_leaves_transcript_unchanged() -> None:
    @tool
    def explode() -> str:
        """Fails loudly."""
        raise PropagatingToolError("stop everything")

    replies = iter([calls(("explode", {})), Message.assistant("never")])
    agent = create_agent(provider=FunctionProvider(lambda r: next(replies)), tools=[explode])
    session = agent.session()
    with pytest.raises(PropagatingToolError, match="stop everything"):
        session.send("go")
    assert session.load() == ()


def test_abort_from_another_thread_returns_promptly_and_keeps_transcript() -> None:
    gate = Gate()

    def model(request: ModelRequest) -> str:
        if request.messages[-1].text == "block":
            gate.wait_in(request)
        return "answer"

    session = create_agent(provider=FunctionProvider(model)).session()
    session.send("hello")
    before = session.load()
    controller = AbortController()

    def abort_when_blocked() -> None:
        assert gate.entered.wait(WAIT)
        controller.abort("user")

    threading.Thread(target=abort_when_blocked).start()
    result = session.send("block", signal=controller.signal)
    assert result.finish_reason == "aborted"
    assert result.messages == ()
    assert session.load() == before
    assert session.send("after").text == "answer"


def test_timeout_aborts_the_turn() -> None:
    gate = Gate()
    session = create_agent(
        provider=FunctionProvider(lambda r: (gate.wait_in(r), "late")[1])
    ).session()
    result = session.send("x", timeout=0.05)
    assert result.finish_reason == "aborted"
    assert session.load() == ()


def test_signal_aborted_before_start_runs_nothing() -> None:
    called = threading.Event()

    def model(request: ModelRequest) -> str:
        called.set()
        return "x"

    session = create_agent(provider=FunctionProvider(model)).session()
    controller = AbortController()
    controller.abort()
    assert session.send("x", signal=controller.signal).finish_reason == "aborted"
    assert not called.is_set()


def test_clear_empties_and_notifies() -> None:
    store = MemorySessionStore()
    session = create_agent(provider=echo_provider()).session("c1", store=store)
    events: list[str] = []
    remove = session.on(lambda e: events.append(e.type))
    session.send("hi")
    session.clear()
    assert session.messages == () and store.load("c1") == []
    assert events == ["context.cleared"]
    remove()
    session.clear()
    assert events == ["context.cleared"]
    assert session.send("again").text == "1:again"


def test_clear_while_turn_runs_raises_busy() -> None:
    gate = Gate()
    session = create_agent(provider=FunctionProvider(lambda r: (gate.wait_in(r), "x")[1])).session()
    run = session.stream("slow")
    assert gate.entered.wait(WAIT)
    with pytest.raises(SessionBusyError) as info:
        session.clear()
    assert info.value.code == "LOUSHO_SESSION_BUSY"
    gate.open()
    run.result(WAIT)
    session.clear()
    assert session.messages == ()


@pytest.mark.parametrize("bad", ["../x", "a/b", "", "x" * 129, "a.b", "é"])
def test_invalid_session_ids_are_refused_quoting_the_pattern(bad: str) -> None:
    with pytest.raises(InvalidSessionIdError, match=r"\^\[A-Za-z0-9_-\]\{1,128\}\$"):
        create_agent().session(bad)
    with pytest.raises(ValueError):
        MemorySessionStore().load(bad)


def test_generated_ids_are_uuid4() -> None:
    import uuid

    session = create_agent().session()
    assert uuid.UUID(session.id).version == 4


def test_idle_workers_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_worker, "IDLE_SECONDS", 0.01)
    agent = create_agent(provider=echo_provider())
    sessions = [agent.session() for _ in range(50)]
    threads: set[threading.Thread] = set()
    for s in sessions:  # streamed: the turn runs on a worker thread
        s.stream("hi").result(WAIT)
        threads.update(agent.runtime.workers.threads())
    for t in threads:
        t.join(WAIT)
    assert threads and not any(t.is_alive() for t in threads)
    assert agent.runtime.workers.threads() == []
    assert sessions[0].stream("back").result(WAIT).text == "3:back"  # a new worker on demand


def test_close_ends_the_thread_running_the_session_once_its_work_is_done() -> None:
    gate = Gate()
    session = create_agent(provider=gated(gate)).session()
    future, _ = session._send_future("block", None)
    assert gate.entered.wait(WAIT)
    lane = session._core.lane
    thread = lane.workers.thread_of(lane.key)
    assert thread is not None and thread.is_alive()
    session.close()
    gate.open()
    assert future.result(WAIT) is not None
    thread.join(WAIT)
    assert not thread.is_alive()


def test_root_import_does_not_import_sqlite3() -> None:
    import subprocess

    code = "import sys, lousho_sessions; assert 'sqlite3' not in sys.modules, 'sqlite3 imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
