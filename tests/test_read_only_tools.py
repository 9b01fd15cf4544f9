"""Tools declared ``read_only``: their step's response is saved with their results, once
the next request has left.

A call that changes nothing needs no checkpoint before it runs, so a durable turn whose
step calls only ``read_only`` tools saves the model's response together with the
results, in one write after the next model request has left (while the model works),
instead of one write before the tools and one after. A crash while they run asks the
model again. Real parts: a SQLite file, a loopback server speaking Anthropic's wire, a
second SQLite connection holding the write lock where a test must see the order of
things, a real child process killed inside its tool.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import fork_server
import pytest
from owed_harness import (
    answer,
    answering_agent,
    checkpoints,
    provider,
    requests_reach,
    sent_while_locked,
)
from provider_server import ProviderServer
from read_only_child import build

from lousho_sessions import AbortController, create_agent
from lousho_sessions import tool as make_tool
from lousho_sessions.errors import LeaseLostError, ToolDefinitionError
from lousho_sessions.sqlite import SqliteStore

SESSION = "ro"
CHILD = str(Path(__file__).with_name("read_only_child.py"))


def stored(path: Path) -> dict[str, dict[str, Any]]:
    return checkpoints(path, SESSION)


def roles_stored(path: Path) -> list[list[str]]:
    """For each stored checkpoint or record, the roles of the messages it holds."""
    out = []
    for data in stored(path).values():
        held = [*data.get("new", ()), *data.get("results", {}).values()]
        out.append([m["role"] for m in held])
    return sorted(out)


def weather_tools(read_only: bool, inside: Any) -> tuple[list[str], list[Any]]:
    """``get_weather`` and ``get_time`` (what the ``tool_use`` reply asks for); each calls
    ``inside(name)`` as it runs."""
    ran: list[str] = []

    @make_tool(read_only=read_only)
    def get_weather(city: str) -> str:
        """The weather in ``city``."""
        inside("get_weather")
        ran.append("get_weather")
        return "get_weather: mild"

    @make_tool(read_only=read_only)
    def get_time(zone: str) -> str:
        """The time in ``zone``."""
        inside("get_time")
        ran.append("get_time")
        return "get_time: noon"

    return ran, [get_weather, get_time]


@pytest.mark.parametrize("read_only", [True, False])
def test_what_is_stored_while_the_tools_run(tmp_path: Path, read_only: bool) -> None:
    """While the tools run, a step of read-only calls has stored only the turn's input;
    one with a tool that is not read-only has stored the model's response first."""
    db = tmp_path / "ro.db"
    seen: list[list[list[str]]] = []
    ran, tools = weather_tools(read_only, lambda name: seen.append(roles_stored(db)))
    store = SqliteStore(db)
    with answering_agent(tools, store) as (_, agent):
        result = agent.session(SESSION).send("Weather and time?")
    assert result.finish_reason == "stop" and sorted(ran) == ["get_time", "get_weather"]
    first = seen[0]
    assert first == ([["user"]] if read_only else [["user", "assistant"]])
    assert stored(db) == {}  # the commit deleted the turn's checkpoints
    assert [m.role for m in store.sessions.load(SESSION) or ()] == [
        "user", "assistant", "tool", "tool", "assistant",
    ]  # fmt: skip
    store.close()


def test_the_response_and_results_are_written_after_the_next_request_has_left(
    tmp_path: Path,
) -> None:
    """The second call's request reaches the server while a second connection holds
    SQLite's write lock (taken by the last tool): nothing of the step is stored yet. Once
    the lock is free, one checkpoint holds the response and both results, and the turn
    ends as usual. A tool that is not read-only would have its response stored first."""
    db = tmp_path / "ro.db"
    blocker = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    taken = threading.Lock()

    def inside(name: str) -> None:
        with taken:  # the two tools may run at once: the lock is taken by one of them
            if not blocker.in_transaction:
                blocker.execute("BEGIN IMMEDIATE")

    ran, tools = weather_tools(True, inside)
    store = SqliteStore(db)
    with answering_agent(tools, store) as (server, agent):
        send = lambda: agent.session(SESSION).send("Weather and time?")  # noqa: E731
        with sent_while_locked(send, server, blocker, 2) as outcome:
            assert roles_stored(db) == [["user"]]  # the step is not written yet
            sent = server.requests[1].body
            assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "user"]
        [result] = outcome
        assert result.finish_reason == "stop" and sorted(ran) == ["get_time", "get_weather"]
        assert stored(db) == {}
        assert [m.role for m in store.sessions.load(SESSION) or ()] == [
            "user", "assistant", "tool", "tool", "assistant",
        ]  # fmt: skip
    blocker.close()
    store.close()


def test_an_abort_inside_a_read_only_step_keeps_its_response_and_results(tmp_path: Path) -> None:
    """Aborted by the step's second tool to start: the turn is kept pending with the model's
    response and every result recorded before the turn saw the abort (the two tools run at
    once, so the other one's is recorded or not), and resuming runs only a tool without a
    recorded result."""
    db = tmp_path / "ro.db"
    controller = AbortController()
    started: list[str] = []
    guard = threading.Lock()

    def inside(name: str) -> None:
        with guard:
            started.append(name)
            if len(started) == 2:
                controller.abort("enough")

    ran, tools = weather_tools(True, inside)
    store = SqliteStore(db)
    with answering_agent(tools, store) as (server, agent):
        session = agent.session(SESSION)
        result = session.send("Weather and time?", signal=controller.signal)
        assert result.pending is not None
        [roles] = roles_stored(db)
        assert roles in (["user", "assistant", "tool"], ["user", "assistant", "tool", "tool"])
        assert len(server.requests) == 1
        resumed = session.resume()
        assert resumed is not None and resumed.finish_reason == "stop"
    recorded = roles.count("tool")
    assert len(ran) == 2 + (2 - recorded)  # only a tool without a recorded result ran again
    assert set(ran) == {"get_time", "get_weather"}
    assert [m.role for m in store.sessions.load(SESSION) or ()] == [
        "user", "assistant", "tool", "tool", "assistant",
    ]  # fmt: skip
    store.close()


def test_a_lease_lost_inside_a_read_only_step_stops_the_next_call(tmp_path: Path) -> None:
    """Another holder takes the session over while the tools run: writing the step once
    the next request has left is refused (``LeaseLostError``), the call is dropped and
    nothing is committed."""
    db = tmp_path / "ro.db"
    store = SqliteStore(db)
    ran, tools = weather_tools(True, lambda name: store.sessions.take_over(SESSION))
    with answering_agent(tools, store) as (server, agent):
        with pytest.raises(LeaseLostError):
            agent.session(SESSION).send("Weather and time?")
        requests_reach(server, 2)  # it had left
    assert sorted(ran) == ["get_time", "get_weather"]
    assert roles_stored(db) == [["user"]]
    assert not store.sessions.load(SESSION)
    store.close()


@pytest.mark.parametrize("read_only", [True, False])
def test_a_process_killed_inside_the_tool(tmp_path: Path, read_only: bool) -> None:
    """A real process is killed (SIGKILL) inside its tool. Resumed in this process: a
    read-only step asks the model again (its response was not saved) and runs the tool
    again; a step with a tool that is not read-only runs the tool again on the saved
    response, without asking the model. The transcript is whole either way."""
    db, logfile = tmp_path / "ro.db", tmp_path / "log.txt"
    child = fork_server.run(
        [CHILD, str(db), str(logfile), "1" if read_only else "0"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -9, child.stderr
    agent = build(str(db), str(logfile), read_only, die=False)
    result = agent.session(SESSION).resume()
    agent.close()
    assert result is not None and result.text == "the answer"
    lines = logfile.read_text().splitlines()
    asked = "model ['user']"
    again = [asked, "tool"] if read_only else ["tool"]
    assert lines == [asked, "tool", *again, "model ['user', 'assistant', 'tool']"]
    store = SqliteStore(db)
    assert [m.role for m in store.sessions.load(SESSION) or ()] == [
        "user", "assistant", "tool", "assistant",
    ]  # fmt: skip
    store.close()


def test_read_only_with_idempotent_false_is_refused() -> None:
    with pytest.raises(ToolDefinitionError, match=r"'lookup'.*read_only=True with idempotent"):

        @make_tool(read_only=True, idempotent=False)
        def lookup(key: str) -> str:
            """Look ``key`` up."""
            return key

    @make_tool
    def plain(key: str) -> str:
        """Not declared."""
        return key

    assert plain.read_only is False


def test_a_read_only_step_that_needs_an_approval_is_saved_before_it_is_asked(
    tmp_path: Path,
) -> None:
    """One call of the step runs, the other needs an approval: the response and the first
    result are written before the approval is created (the turn pauses on it), and
    approving it in a new agent runs only the approved call."""
    db = tmp_path / "ro.db"
    ran: list[str] = []

    @make_tool(read_only=True)
    def get_weather(city: str) -> str:
        """The weather in ``city``."""
        ran.append("get_weather")
        return "get_weather: mild"

    @make_tool(read_only=True, needs_approval=True)
    def get_time(zone: str) -> str:
        """The time in ``zone``."""
        ran.append("get_time")
        return "get_time: noon"

    store = SqliteStore(db)
    with answering_agent([get_weather, get_time], store) as (_, agent):
        result = agent.session(SESSION).send("Weather and time?")
        assert result.finish_reason == "awaiting-approval" and result.approval_id
        assert ran == ["get_weather"]
        assert roles_stored(db) == [["user", "assistant", "tool"]]
        [saved] = stored(db).values()
        assert saved["status"] == "awaiting-approval"
    with ProviderServer() as server:
        server.reply(answer())
        again = create_agent(
            provider=provider(server.url), tools=[get_weather, get_time], store=store
        )
        final = again.approvals.resolve(id=result.approval_id, approved=True)
        again.close()
        assert final is not None and final.finish_reason == "stop"
        assert len(server.requests) == 1
    assert ran == ["get_weather", "get_time"]
    assert [m.role for m in store.sessions.load(SESSION) or ()] == [
        "user", "assistant", "tool", "tool", "assistant",
    ]  # fmt: skip
    store.close()
