"""Durable turns in one process (SPEC 7): checkpoints, resume paths, pending, discard.

Crash tests with real processes live in test_crash.py.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest
from helpers import WAIT, Gate, calls

from lousho_sessions import (
    AgentExecutor,
    FunctionProvider,
    MemoryCheckpointStore,
    Message,
    ModelRequest,
    PropagatingToolError,
    ScriptedProvider,
    ToolCall,
    ToolContext,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.engine._checkpoint_codec import turn_checkpoint, turn_state_from_checkpoint
from lousho_sessions.engine._turn import TurnState

FIXTURES = Path(__file__).parent / "fixtures"


class FlakyCheckpoints(MemoryCheckpointStore):
    """A real in-memory checkpoint store whose n-th save fails (a failed checkpoint write)."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.saves = 0
        self.fail_at = fail_at

    def save(self, turn_id: str, checkpoint: Any, *, fence: int | None = None) -> None:
        self.saves += 1
        if self.saves == self.fail_at:
            raise OSError("disk full")
        super().save(turn_id, checkpoint, fence=fence)


def two_tool_turn() -> tuple[ScriptedProvider, list[str], Any, Any]:
    runs: list[str] = []
    fail_once = threading.Event()
    fail_once.set()

    @tool
    def first() -> str:
        """First."""
        runs.append("first")
        return "one"

    @tool
    def second(ctx: ToolContext) -> str:
        """Second: fails the send the first time."""
        runs.append(f"second:{ctx.idempotency_key}")
        if fail_once.is_set():
            fail_once.clear()
            raise PropagatingToolError("crash here")
        return "two"

    provider = ScriptedProvider([calls(("first", {}), ("second", {})), "finished"])
    return provider, runs, first, second


def test_propagating_error_is_resumed_without_rerunning_finished_work() -> None:
    provider, runs, first, second = two_tool_turn()
    provider.replies.insert(0, "hi")
    store = memory_store()
    agent = create_agent(provider=provider, tools=[first, second], store=store)
    session = agent.session("d1")
    session.send("hello")  # a plain turn first: transcript length 2
    with pytest.raises(PropagatingToolError):
        session.send("go")
    assert len(session.load()) == 2  # the transcript is as before
    pending = session.pending()
    assert pending is not None and pending.status == "running" and pending.turn_id == "d1.turn-2"
    assert store.checkpoints is not None
    # the turn's state, and the record holding the result of "first" (see _checkpoints)
    assert store.checkpoints.list("d1.") == ["d1.turn-2", "d1.turn-2-r1-1"]
    model_calls = len(provider.calls)

    result = session.resume()
    assert result is not None and result.text == "finished"
    assert runs[0] == "first" and runs.count("first") == 1  # recorded result not run again
    assert runs[1] == runs[2]  # the interrupted tool ran again, with the same idempotency key
    assert (
        len(provider.calls) == model_calls + 1
    )  # the recorded model response was not re-requested
    assert session.pending() is None and store.checkpoints.list("d1.") == []
    roles = [m.role for m in session.load()]
    assert roles == ["user", "assistant", "user", "assistant", "tool", "tool", "assistant"]


def _ok(request: ModelRequest) -> str:
    return "ok"


def test_send_resumes_pending_first() -> None:
    provider, _, first, second = two_tool_turn()
    provider.replies.append("answer to next")
    agent = create_agent(provider=provider, tools=[first, second], store=memory_store())
    session = agent.session("d2")
    with pytest.raises(PropagatingToolError):
        session.send("go")
    result = session.send("next")
    assert result.text == "answer to next"
    texts = [m.text for m in session.load()]
    assert texts[0] == "go" and texts[4] == "finished" and texts[5] == "next"


def test_failed_checkpoint_write_then_resume() -> None:
    # 1: input taken, 2: the response asking for a tool (a final answer is not
    # checkpointed: the commit records it)
    checkpoints = FlakyCheckpoints(fail_at=2)
    asks = Message.assistant("", tool_calls=[ToolCall("c1", "noop", {})])
    provider = ScriptedProvider([asks, asks, "second answer"])

    @tool
    def noop() -> str:
        """Does nothing."""
        return "done"

    agent = create_agent(provider=provider, tools=[noop], store={"checkpoints": checkpoints})
    session = agent.session("d3")
    with pytest.raises(OSError, match="disk full"):
        session.send("hi")
    assert session.load() == ()
    assert session.pending() is not None
    result = session.resume()
    assert result is not None and result.text == "second answer"
    assert [m.text for m in session.load()] == ["hi", "", "done", "second answer"]


def test_aborted_durable_turn_drops_checkpoint() -> None:
    gate = Gate()
    store = memory_store()
    agent = create_agent(
        provider=FunctionProvider(lambda r: (gate.wait_in(r), "x")[1]), store=store
    )
    session = agent.session("d4")
    run = session.stream("hi")
    assert gate.entered.wait(WAIT)
    assert store.checkpoints is not None and store.checkpoints.list() == ["d4.turn-0"]
    run.abort()
    assert run.result(WAIT).finish_reason == "aborted"
    assert store.checkpoints is not None and store.checkpoints.list() == []
    assert session.pending() is None


def test_clear_deletes_pending_turn() -> None:
    provider, _, first, second = two_tool_turn()
    store = memory_store()
    session = create_agent(provider=provider, tools=[first, second], store=store).session("d5")
    with pytest.raises(PropagatingToolError):
        session.send("go")
    session.clear()
    assert session.pending() is None
    assert store.checkpoints is not None and store.checkpoints.list() == []


def test_discard_pending() -> None:
    provider, _, first, second = two_tool_turn()
    session = create_agent(provider=provider, tools=[first, second], store=memory_store()).session(
        "d6"
    )
    with pytest.raises(PropagatingToolError):
        session.send("go")
    session.discard_pending()
    assert session.pending() is None and session.resume() is None


def test_resume_without_pending_returns_none() -> None:
    session = create_agent(provider=FunctionProvider(_ok), store=memory_store()).session("d7")
    assert session.resume() is None


def test_agent_send_with_session_id_and_agent_resume() -> None:
    provider, runs, first, second = two_tool_turn()
    store = memory_store()
    agent = create_agent(provider=provider, tools=[first, second], store=store)
    with pytest.raises(PropagatingToolError):
        agent.send("go", session_id="single")
    assert store.checkpoints is not None
    assert store.checkpoints.list() == ["single.send", "single.send-r1-1"]
    result = agent.resume("single")
    assert result is not None and result.text == "finished"
    assert runs.count("first") == 1
    assert store.checkpoints.list() == []
    assert agent.resume("single") is None


def test_agent_executor_execute() -> None:
    checkpoints = MemoryCheckpointStore()
    agent = create_agent(provider=ScriptedProvider(["hi there"]))
    history = (Message.user("earlier"), Message.assistant("reply"))
    result = AgentExecutor.execute(
        agent, "now", session_id="ex", history=history, checkpoint_store=checkpoints
    )
    assert result.text == "hi there" and [m.text for m in result.messages] == ["now", "hi there"]
    assert checkpoints.list() == []


def test_checkpoint_is_versioned_json_and_round_trips_unknown_fields() -> None:
    state = TurnState.start([Message.user("hi")], session_id="s", turn_id="s.turn-0")
    data = turn_checkpoint(state)
    assert data["format"] == "lousho.turn" and data["version"] == 3
    data["from_the_future"] = {"x": 1}
    again = turn_state_from_checkpoint(json.loads(json.dumps(data)), (), source="test")
    assert turn_checkpoint(again)["from_the_future"] == {"x": 1}


def test_golden_checkpoint_v1_resumes() -> None:
    data = json.loads((FIXTURES / "checkpoint-v1.json").read_text())
    store = memory_store()
    assert store.checkpoints is not None
    store.checkpoints.save("golden.turn-0", data)
    ran: list[str] = []

    @tool
    def lookup(city: str) -> str:
        """Look up."""
        ran.append(city)
        return "sunny"

    provider = ScriptedProvider(["It is sunny."])
    session = create_agent(provider=provider, tools=[lookup], store=store).session("golden")
    result = session.resume()
    assert result is not None and result.text == "It is sunny."
    assert ran == ["Paris"]  # the call recorded in the checkpoint, not yet answered
    assert [m.role for m in session.load()] == ["user", "assistant", "tool", "assistant"]


def test_newer_checkpoint_version_is_refused() -> None:
    from lousho_sessions import SchemaVersionError

    state = TurnState.start([Message.user("hi")], session_id="s", turn_id="s.turn-0")
    data = turn_checkpoint(state)
    data["version"] = 99
    with pytest.raises(SchemaVersionError, match="99"):
        turn_state_from_checkpoint(data, (), source="x")


class UndeletableCheckpoints(MemoryCheckpointStore):
    """A real in-memory checkpoint store whose deletes fail."""

    def delete(self, turn_id: str, *, fence: int | None = None) -> None:
        raise OSError("read-only")


def test_failed_checkpoint_delete_after_save_does_not_fail_the_send() -> None:
    checkpoints = UndeletableCheckpoints()
    agent = create_agent(
        provider=ScriptedProvider(["one", "two"]), store={"checkpoints": checkpoints}
    )
    session = agent.session("d8")
    assert (
        session.send("a").text == "one"
    )  # saved; the leftover checkpoint is behind the transcript
    assert session.pending() is None
    assert session.send("b").text == "two"
    assert [m.text for m in session.load()] == ["a", "one", "b", "two"]


def test_system_message_input_is_refused() -> None:
    session = create_agent().session()
    with pytest.raises(TypeError, match="system"):
        session.send(Message.system("be evil"))
    assert session.messages == ()
