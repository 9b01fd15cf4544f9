"""A blocking ``send()`` whose session has nothing running or waiting runs its turn on the
calling thread (``Workers.run_here``): no handoff to a worker thread and back.

What must not change with it: a send while another turn of the session runs waits in line
behind it (on a worker thread); a streamed turn still runs on a worker; ``agent.close()``
waits for a turn running on a caller's thread; and a Ctrl-C on the main thread stops the
turn as before (the turn ends "aborted", the call raises ``KeyboardInterrupt``, a further
``send()`` works), checked with a real SIGINT in a child process whose handler is Python's
default one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from helpers import WAIT, Gate, gated

from lousho_sessions import FunctionProvider, Message, ModelRequest, ToolCall, create_agent, tool

CHILD = str(Path(__file__).with_name("run_here_child.py"))


def test_a_send_runs_on_the_calling_thread_when_its_session_is_idle() -> None:
    seen: list[threading.Thread] = []

    @tool
    def where() -> str:
        """Where the turn runs."""
        seen.append(threading.current_thread())
        return "here"

    def model(request: ModelRequest) -> Any:
        if request.messages[-1].role == "user":
            return Message.assistant("", tool_calls=[ToolCall("w", "where", {})])
        return "done"

    agent = create_agent(provider=FunctionProvider(model), tools=[where])
    assert agent.session("main").send("go").text == "done"
    other: list[Any] = []
    thread = threading.Thread(target=lambda: other.append(agent.session("t").send("go")))
    thread.start()
    thread.join(WAIT)
    assert other[0].text == "done"
    agent.close()
    # the model ran where the turn ran; a tool of one call runs there too
    assert seen == [threading.main_thread(), thread]


def test_a_send_while_the_session_is_busy_waits_in_line_on_a_worker() -> None:
    gate = Gate()
    agent = create_agent(provider=gated(gate))
    session = agent.session("s")
    results: list[Any] = []
    first = threading.Thread(target=lambda: results.append(session.send("block")))
    first.start()
    assert gate.entered.wait(WAIT)
    assert session._core.lane.workers.thread_of(session._core.lane.key) is first  # on its caller
    second = threading.Thread(target=lambda: results.append(session.send("after")))
    second.start()
    lane = session._core.lane
    looked = threading.Event()  # no hook tells when the second is queued: looked at again
    for _ in range(int(WAIT / 0.01)):
        if len(lane.jobs()) == 2:
            break
        looked.wait(0.01)
    assert len(lane.jobs()) == 2
    gate.open()
    first.join(WAIT)
    second.join(WAIT)
    assert [r.text for r in results] == ["one two", "one two"]
    assert [m.text for m in session.load()] == ["block", "one two", "after", "one two"]
    agent.close()


def test_close_waits_for_a_turn_running_on_its_callers_thread() -> None:
    gate = Gate()
    agent = create_agent(provider=gated(gate))
    results: list[Any] = []
    sender = threading.Thread(target=lambda: results.append(agent.session("s").send("block")))
    sender.start()
    assert gate.entered.wait(WAIT)
    assert agent.runtime.workers.close(timeout=0.05) is False  # still running: not closed
    gate.open()
    assert agent.runtime.workers.close(timeout=WAIT) is True
    sender.join(WAIT)
    assert results[0].text == "one two"
    agent.close()


def child(mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, CHILD, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def lines_of(process: subprocess.Popen[str], until: str) -> list[dict[str, Any]]:
    assert process.stdout is not None
    out = []
    for line in process.stdout:
        out.append(json.loads(line))
        if out[-1]["at"] == until:
            break
    return out


def test_ctrl_c_on_the_main_thread_stops_the_turn_and_raises() -> None:
    process = child("block")
    try:
        assert lines_of(process, "blocked")[-1]["thread"] == "main"
        process.send_signal(signal.SIGINT)
        rest = lines_of(process, "next")
    finally:
        process.kill()
        process.communicate(timeout=WAIT)  # reaps it and closes its pipes
    interrupted, nxt = rest[-2], rest[-1]
    assert interrupted == {"at": "interrupted", "transcript": ["hello", "answer to hello"]}
    assert nxt["model_saw_abort"] is True and nxt["text"] == "answer to next"
    assert nxt["handler_restored"] is True


def test_a_second_ctrl_c_raises_at_once() -> None:
    process = child("stubborn")  # the model call ignores the abort
    try:
        lines_of(process, "blocked")
        process.send_signal(signal.SIGINT)
        lines_of(process, "stopping")
        process.send_signal(signal.SIGINT)
        rest = lines_of(process, "interrupted")
    finally:
        process.kill()
        process.communicate(timeout=WAIT)  # reaps it and closes its pipes
    assert rest[-1]["at"] == "interrupted"
