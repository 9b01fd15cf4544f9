"""A step's last tool result is written once the next model call's request has left.

Nothing with an effect comes between a step's last tool result and the next model call,
so a durable turn writes that result while the model works (``ModelRequest.on_sent``,
called by the HTTP providers once the request is sent) instead of on the way to the
call: one checkpoint write less between the model's answers. Real parts: a SQLite
file, a loopback server speaking Anthropic's wire, a second SQLite connection holding
the write lock where a test must see the order of things.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import owed_harness as harness
import pytest
from owed_harness import (
    WAIT,
    answer,
    answering_agent,
    provider,
    requests_reach,
    sent_while_locked,
    tool_use,
)
from provider_server import ProviderServer

from lousho_sessions import AbortController, FunctionProvider, Message, ToolCall, create_agent
from lousho_sessions import tool as make_tool
from lousho_sessions.errors import LeaseLostError, ProviderError
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.sqlite import SqliteStore
from lousho_sessions.stores.base import AgentStore

SESSION = "owed"


def checkpoints(path: Path) -> dict[str, dict[str, Any]]:
    return harness.checkpoints(path, SESSION)


def results_stored(path: Path) -> set[str]:
    """The names of the tools whose results the stored checkpoints hold (in a result
    record, or in the turn's checkpoint)."""
    held = []
    for data in checkpoints(path).values():
        held += [*data.get("results", {}).values(), *data.get("new", ())]
    return {m["content"][0]["text"].split(":")[0] for m in held if m["role"] == "tool"}


def wait_for(condition: Any, what: str) -> None:
    done = threading.Event()
    for _ in range(int(WAIT / 0.01)):
        if condition():
            return
        done.wait(0.01)  # a condition in another process's file: looked at again
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path / "owed.db"


def weather_and_time(db: Path, last: Any) -> tuple[list[str], list[Any]]:
    """The two tools of ``tool_use``: ``get_time`` ends last (once ``get_weather``'s result
    is stored) and calls ``last()`` just before it returns."""
    ran: list[str] = []

    @make_tool
    def get_weather(city: str) -> str:
        """The weather in ``city``."""
        ran.append("get_weather")
        return "get_weather: mild"

    @make_tool
    def get_time(zone: str) -> str:
        """The time in ``zone``."""
        wait_for(lambda: "get_weather" in results_stored(db), "get_weather's result")
        ran.append("get_time")
        last()
        return "get_time: noon"

    return ran, [get_weather, get_time]


def test_the_last_result_is_written_after_the_next_request_has_left(db: Path) -> None:
    """The second call's request reaches the server while a second connection holds
    SQLite's write lock, so the last result cannot be written yet; the earlier result of
    the step was written as it finished. Writing the last result before the call (as a
    checkpoint store did before) never lets the request leave."""
    blocker = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    ran, tools = weather_and_time(db, lambda: blocker.execute("BEGIN IMMEDIATE"))
    store = SqliteStore(db)
    with answering_agent(tools, store) as (server, agent):
        send = lambda: agent.session(SESSION).send("Weather and time?")  # noqa: E731
        with sent_while_locked(send, server, blocker, 2) as outcome:
            assert results_stored(db) == {"get_weather"}  # the last one is not written yet
        [result] = outcome
        assert result.text and result.finish_reason == "stop"
        assert sorted(ran) == ["get_time", "get_weather"]
        assert [m.role for m in store.sessions.load(SESSION) or ()] == [
            "user", "assistant", "tool", "tool", "assistant",
        ]  # fmt: skip
        assert checkpoints(db) == {}  # the commit deleted the turn's checkpoints
    blocker.close()
    store.close()


def test_a_lease_lost_before_the_last_result_is_written_stops_the_call(db: Path) -> None:
    """Another holder takes the session over while the last tool runs: writing its result
    once the request has left is refused (``LeaseLostError``), the call is dropped and the
    turn ends with that error, committing nothing."""
    store = SqliteStore(db)
    ran, tools = weather_and_time(db, lambda: store.sessions.take_over(SESSION))
    with answering_agent(tools, store) as (server, agent):
        with pytest.raises(LeaseLostError):
            agent.session(SESSION).send("Weather and time?")
        requests_reach(server, 2)  # it had left
        assert sorted(ran) == ["get_time", "get_weather"]
        assert results_stored(db) == {"get_weather"}
        assert not store.sessions.load(SESSION)  # nothing committed
    store.close()


def test_a_call_that_never_leaves_still_writes_the_last_result(db: Path) -> None:
    """The server goes away while the last tool runs (its first answer said
    ``Connection: close``): the next call fails before its request leaves, the turn keeps
    both results, and a resume in a new agent does not run either tool again."""
    store = SqliteStore(db)
    servers: list[ProviderServer] = []
    ran, tools = weather_and_time(db, lambda: servers[0].stop())
    server = ProviderServer().start()
    servers.append(server)
    server.reply(tool_use(Connection="close"))
    agent = create_agent(provider=provider(server.url), tools=tools, store=store)
    with pytest.raises(ProviderError):
        agent.session(SESSION).send("Weather and time?")
    agent.close()
    assert len(server.requests) == 1
    assert results_stored(db) == {"get_weather", "get_time"}
    with ProviderServer() as second:
        second.reply(answer())
        again = create_agent(provider=provider(second.url), tools=tools, store=store)
        result = again.session(SESSION).resume()
        assert result is not None and result.finish_reason == "stop"
        again.close()
    assert sorted(ran) == ["get_time", "get_weather"]  # each once
    store.close()


def test_an_abort_as_the_last_tool_ends_keeps_its_result(db: Path) -> None:
    """The turn is aborted as its last tool ends (no model call follows): the turn is kept
    pending with both results written, and resuming it runs no tool again."""
    controller = AbortController()
    store = SqliteStore(db)
    ran, tools = weather_and_time(db, lambda: controller.abort("enough"))
    with answering_agent(tools, store) as (server, agent):
        session = agent.session(SESSION)
        result = session.send("Weather and time?", signal=controller.signal)
        assert result.pending is not None
        assert results_stored(db) == {"get_weather", "get_time"}
        assert len(server.requests) == 1
        resumed = session.resume()
        assert resumed is not None and resumed.finish_reason == "stop"
    assert sorted(ran) == ["get_time", "get_weather"]
    store.close()


def split_store(tmp: Path) -> tuple[AgentStore, SqliteStore, SqliteStore, Path]:
    """Sessions in one SQLite file, checkpoints in another: the store cannot save a turn's
    input with its lease, so the turn saves it (the checkpoints' file, returned last)."""
    sessions, held = SqliteStore(tmp / "sessions.db"), SqliteStore(tmp / "checkpoints.db")
    return AgentStore(sessions.sessions, held.checkpoints), sessions, held, tmp / "checkpoints.db"


def test_a_turns_input_is_saved_after_its_first_request_has_left(tmp_path: Path) -> None:
    """The first call's request reaches the server while a second connection holds the
    checkpoints' write lock: the input's checkpoint is written after it left (before,
    the request waited for it and never left)."""
    store, sessions, held, path = split_store(tmp_path)
    blocker = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    with ProviderServer() as server:
        server.reply(answer())
        agent = create_agent(provider=provider(server.url), store=store)
        with sent_while_locked(
            lambda: agent.session(SESSION).send("Hi"), server, blocker, 1
        ) as out:
            assert checkpoints(path) == {}  # not written yet
        [result] = out
        assert result.finish_reason == "stop"
        assert [m.role for m in sessions.sessions.load(SESSION) or ()] == ["user", "assistant"]
        agent.close()
    blocker.close()
    sessions.close()
    held.close()


def test_a_first_call_that_never_leaves_still_saves_the_input(tmp_path: Path) -> None:
    """Nothing listens where the first call goes: the turn fails before its request leaves,
    its input is saved (pending), and a resume against a server finishes it."""
    store, sessions, held, path = split_store(tmp_path)
    gone = ProviderServer().start()
    url = gone.url
    gone.stop()
    agent = create_agent(provider=provider(url), store=store)
    with pytest.raises(ProviderError):
        agent.session(SESSION).send("Hi")
    agent.close()
    [saved] = checkpoints(path).values()
    assert saved["new"][0]["content"][0]["text"] == "Hi"
    with ProviderServer() as server:
        server.reply(answer())
        again = create_agent(provider=provider(server.url), store=store)
        result = again.session(SESSION).resume()
        assert result is not None and result.finish_reason == "stop"
        again.close()
    assert [m.role for m in sessions.sessions.load(SESSION) or ()] == ["user", "assistant"]
    sessions.close()
    held.close()


def test_a_provider_that_does_not_report_its_request_sent_gets_the_result_first(
    db: Path,
) -> None:
    """``FunctionProvider`` (``reports_sent`` false): the last result is written before the
    model is called, as every result was before."""
    stored_at_call: list[set[str]] = []

    def model(request: Any) -> Message:
        if request.messages[-1].role == "tool":
            stored_at_call.append(results_stored(db))
            return Message.assistant("done")
        return Message.assistant("", tool_calls=[ToolCall("c1", "get_weather", {"city": "P"})])

    @make_tool
    def get_weather(city: str) -> str:
        """The weather in ``city``."""
        return "get_weather: mild"

    store = SqliteStore(db)
    agent = create_agent(provider=FunctionProvider(model), tools=[get_weather], store=store)
    assert FunctionProvider.reports_sent is False and AnthropicProvider.reports_sent is True
    assert agent.session(SESSION).send("Weather?").text == "done"
    assert stored_at_call == [{"get_weather"}]
    agent.close()
    store.close()
