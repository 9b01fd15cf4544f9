"""One session core (issue 30 item 4): every caller of a lane shares its key, its re-entry
check, how a queued or running turn is stopped, and how a turn's stream ends.

The callers are a session's turns (sync and async), single sends, resumes and recovery's
sweep; each test below runs one rule through several of them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest
from helpers import WAIT

from lousho_sessions import (
    Message,
    ScriptedProvider,
    SessionBusyError,
    ToolCall,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.agent import Agent
from lousho_sessions.events import RunDone
from lousho_sessions.recovery import sweep
from lousho_sessions.stores.base import AgentStore

FIXTURES = Path(__file__).parent / "fixtures"

#: What a tool of a turn calls on the lane it runs on: each would wait for itself.
REENTRY: dict[str, tuple[str, Callable[[Agent], object]]] = {
    "session.send from its own turn": ("session", lambda a: a.session("u").send("again")),
    "session.resume from its own turn": ("session", lambda a: a.session("u").resume()),
    "a durable agent.send of that session": ("session", lambda a: a.send("x", session_id="u")),
    "agent.send of the same single run": ("single", lambda a: a.send("x", session_id="u")),
    "agent.resume of the same single run": ("single", lambda a: a.resume("u")),
}


@pytest.mark.parametrize("case", sorted(REENTRY))
def test_a_call_from_a_lanes_own_work_is_refused_not_deadlocked(case: str) -> None:
    kind, call = REENTRY[case]
    errors: list[BaseException] = []

    @tool
    def nested() -> str:
        """Call the lane this turn runs on."""
        try:
            call(agent)
        except SessionBusyError as exc:
            errors.append(exc)
        return "ok"

    provider = ScriptedProvider(
        [Message.assistant("", tool_calls=[ToolCall("c1", "nested", {})]), "done"]
    )
    agent = create_agent(provider=provider, tools=[nested], store=memory_store())
    result = (
        agent.session("u").send("go") if kind == "session" else agent.send("go", session_id="u")
    )
    assert result.text == "done"
    [error] = errors
    assert "would wait for itself" in str(error) and "'u'" in str(error)


def test_a_turn_stopped_in_the_queue_ends_its_stream_once_and_answers_its_joiners() -> None:
    """Withdrawn before it ran: one ``run.done`` "aborted", the same result for the stream
    and its Future, nothing saved; input that joined it (``turn_policy="queue"``) and was
    never taken runs as the next turn after all."""
    entered, release = threading.Event(), threading.Event()

    def hold(state: dict[str, object]) -> None:
        entered.set()
        release.wait(WAIT)

    agent = create_agent(provider=ScriptedProvider(["never"]))
    session = agent.session("q")
    holder = threading.Thread(target=lambda: session.update_state(hold))
    holder.start()  # the lane is busy with work that is not a turn
    try:
        assert entered.wait(WAIT)
        queued = session.stream("queued")
        joiner = agent.session("q", turn_policy="queue")  # the same lane
        joined = joiner._send_future("joined", None)[0]  # joins the queued turn
        queued.abort("changed my mind")
        events = list(queued)
    finally:
        release.set()
        holder.join(WAIT)
    assert [type(e) for e in events] == [RunDone]
    done = events[0]
    assert isinstance(done, RunDone) and done.finish_reason == "aborted"
    assert queued.result() is done.result
    after = joined.result(WAIT)
    assert after is not None and after.text == "never"
    assert [m.text for m in session.load()] == ["joined", "never"]


def crashed_turn(store: AgentStore) -> None:
    """The checkpoint a process that died in a tool call leaves (tests/test_recovery.py)."""
    data = json.loads((FIXTURES / "checkpoint-v2.json").read_text())
    data.update(attempts=0, fence=1, started=[])
    data["updated_at"] = datetime.now(timezone.utc).isoformat()
    assert store.checkpoints is not None
    store.checkpoints.save("golden.turn-0", data)


def test_a_sweep_finishes_a_turn_through_the_live_session_it_belongs_to() -> None:
    """Recovery runs the turn on the core of the session this process holds: its lane and
    its transcript, which shows the recovered turn without being read again."""
    store = memory_store()
    crashed_turn(store)

    @tool
    def lookup(city: str) -> str:
        """Look up."""
        return "sunny"

    agent = create_agent(provider=ScriptedProvider(["It is sunny."]), tools=[lookup], store=store)
    session = agent.session("golden")
    [swept] = sweep(store, agent=agent)
    assert swept.outcome == "finished"
    assert [m.role for m in session.messages][-2:] == ["tool", "assistant"]
    assert session.messages[-1].text == "It is sunny."
