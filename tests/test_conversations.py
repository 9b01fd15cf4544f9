"""Rewind, regenerate, edit and fork on every store, through the public API."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
from helpers import WAIT, Gate, calls, echo_provider, gated, until
from history_stores import KINDS, cleanup, open_store, require

from lousho_sessions import Message, ScriptedProvider, create_agent, tool
from lousho_sessions.aio import create_agent as create_async_agent
from lousho_sessions.errors import (
    ApprovalCancelledError,
    MessageNotFoundError,
    SessionExistsError,
)


@pytest.fixture(params=KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    require(request.param)
    made = open_store(request.param, tmp_path)
    yield made
    close = getattr(made, "close", None)
    if callable(close):
        close()
    cleanup(request.param, tmp_path)


def texts(messages: Any) -> list[str]:
    return [m.text for m in messages]


def three_turns(store: Any) -> Any:
    agent = create_agent(provider=echo_provider(), store=store)
    session = agent.session("s1")
    for word in ("one", "two", "three"):
        session.send(word)
    return agent, session


def test_rewind_by_index_and_by_id_returns_what_it_removed(store: Any) -> None:
    agent, session = three_turns(store)
    assert texts(session.messages) == ["one", "1:one", "two", "3:two", "three", "5:three"]
    removed = session.rewind(4)
    assert texts(removed) == ["three", "5:three"]
    assert texts(session.messages) == ["one", "1:one", "two", "3:two"]
    second_user = session.messages[2]
    assert texts(session.rewind(second_user.id)) == ["two", "3:two"]
    assert texts(session.load()) == ["one", "1:one"]
    assert texts(session.rewind(-2)) == ["one", "1:one"]  # counted from the end
    assert session.load() == ()
    result = session.send("again")  # the model sees the rewound transcript
    assert result.text == "1:again"
    agent.close()


def test_another_session_object_sees_a_rewind_at_its_next_turn(store: Any) -> None:
    agent, session = three_turns(store)
    other_agent = create_agent(provider=echo_provider(), store=store)
    other = other_agent.session("s1")
    assert other.send("four").text == "7:four"  # read everything once
    session.rewind(2)
    assert other.send("five").text == "3:five"  # 2 kept + its input: no stale read-ahead (else 9)
    assert texts(session.load()) == ["one", "1:one", "five", "3:five"]
    agent.close()
    other_agent.close()


def test_rewind_refuses_unknown_points_and_changes_nothing(store: Any) -> None:
    agent, session = three_turns(store)
    with pytest.raises(MessageNotFoundError, match="msg-nope"):
        session.rewind("msg-nope")
    with pytest.raises(MessageNotFoundError, match="index 7"):
        session.rewind(7)
    with pytest.raises(TypeError):
        session.rewind(True)
    assert len(session.load()) == 6
    with pytest.raises(MessageNotFoundError, match="assistant"):
        session.edit(session.messages[1].id, "x")
    assert len(session.load()) == 6
    agent.close()


def test_regenerate_sends_the_last_user_message_again(store: Any) -> None:
    answers = iter(["first", "second", "third"])
    agent = create_agent(provider=ScriptedProvider(list(answers)), store=store)
    session = agent.session("s1")
    session.send("hello")
    first = session.messages[0]
    result = session.regenerate()
    assert result.text == "second"
    assert texts(session.load()) == ["hello", "second"]
    assert session.messages[0].id != first.id  # sent again, as a new message
    run = session.regenerate_stream()
    assert run.result().text == "third"
    assert texts(session.load()) == ["hello", "third"]
    agent.close()


def test_edit_replaces_a_user_message_and_what_followed(store: Any) -> None:
    agent, session = three_turns(store)
    two = session.messages[2]
    result = session.edit(two.id, "TWO")
    assert result.text == "3:TWO"
    assert texts(session.load()) == ["one", "1:one", "TWO", "3:TWO"]
    run = session.edit_stream(session.messages[0].id, "ONE")
    assert run.result().text == "1:ONE"
    assert texts(session.load()) == ["ONE", "1:ONE"]
    agent.close()


def test_stream_variants_report_a_bad_point_from_the_run(store: Any) -> None:
    """The rewind is the streamed turn's first step: its error ends the run, changing nothing."""
    agent, session = three_turns(store)
    run = session.edit_stream(session.messages[1].id, "x")  # an assistant message
    with pytest.raises(MessageNotFoundError, match="assistant"):
        run.result()
    with pytest.raises(MessageNotFoundError, match="msg-nope"):
        session.edit_stream("msg-nope", "x").result()
    assert len(session.load()) == 6
    session.rewind(0)
    with pytest.raises(MessageNotFoundError, match="no user message"):
        session.regenerate_stream().result()
    with pytest.raises(MessageNotFoundError, match="no user message"):
        session.regenerate()
    assert session.send("still works").text == "1:still works"
    agent.close()


def test_fork_holds_the_prefix_and_names_its_parent(store: Any) -> None:
    agent, session = three_turns(store)
    fork = session.fork("s2", at=2)
    assert texts(fork.load()) == ["one", "1:one"]
    assert fork.send("other").text == "3:other"
    assert len(session.load()) == 6  # the parent goes on unchanged
    info = fork.info()
    assert info is not None and info.messages == 4
    assert (info.parent, info.fork_point) == ("s1", 2)
    whole = agent.fork("s1", "s3")
    assert texts(whole.load()) == texts(session.load())
    with pytest.raises(SessionExistsError, match="s2"):
        session.fork("s2")
    with pytest.raises(MessageNotFoundError):
        session.fork("s4", at="msg-nope")
    assert texts(fork.load()) == ["one", "1:one", "other", "3:other"]
    agent.close()


ran: list[str] = []


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    ran.append(path)
    return f"deleted {path}"


def test_rewind_cancels_the_pending_turns_approval(store: Any) -> None:
    ran.clear()
    provider = ScriptedProvider(["ok", calls(("delete_file", {"path": "/tmp/x"})), "Done."])
    agent = create_agent(provider=provider, tools=[delete_file], store=store)
    session = agent.session("s1")
    session.send("hi")
    paused = session.send("delete /tmp/x")
    assert paused.finish_reason == "awaiting-approval" and paused.approval_id
    assert texts(session.rewind(0)) == ["hi", "ok"]
    assert session.pending() is None
    request = agent.approvals.get(paused.approval_id)
    assert request.status == "cancelled" and "rewound" in (request.reason or "")
    assert agent.approvals.list(session_id="s1") == []
    with pytest.raises(ApprovalCancelledError, match="rewound"):
        agent.approvals.resolve(paused.approval_id, approved=True)
    assert ran == []
    assert session.send("fresh").text == "Done."
    assert texts(session.load()) == ["fresh", "Done."]
    agent.close()


def test_rewind_waits_for_a_running_turn(tmp_path: Path) -> None:
    gate = Gate()
    agent = create_agent(provider=gated(gate), store=open_store("sqlite", tmp_path))
    session = agent.session("s1")
    running = session.stream("block")
    assert gate.entered.wait(WAIT)
    removed: list[list[Message]] = []
    rewinding = threading.Thread(target=lambda: removed.append(session.rewind(0)))
    rewinding.start()
    until(lambda: len(session._core.lane.jobs()) == 2, "the rewind queued")
    assert not removed  # it waits for the turn
    gate.open()
    running.result()
    rewinding.join(WAIT)
    assert [m.role for m in removed[0]] == ["user", "assistant"]  # the turn, then the rewind
    assert session.load() == ()
    agent.close()


def test_aio_rewind_regenerate_edit_fork(store: Any) -> None:
    async def main() -> None:
        agent = create_async_agent(provider=echo_provider(), store=store)
        session = agent.session("s1")
        await session.send("one")
        await session.send("two")
        assert texts(await session.rewind(2)) == ["two", "3:two"]
        assert (await session.regenerate()).text == "1:one"
        run = await session.regenerate_stream()
        assert (await run.result()).text == "1:one"
        result = await session.edit(session.messages[0].id, "ONE")
        assert result.text == "1:ONE"
        run = await session.edit_stream(session.messages[0].id, "uno")
        assert (await run.result()).text == "1:uno"
        fork = await session.fork("s2", at=0)
        assert await fork.load() == ()
        info = await fork.info()
        assert info is not None and (info.parent, info.fork_point) == ("s1", 0)
        other = await agent.fork("s1", "s3")
        assert texts(await other.load()) == ["uno", "1:uno"]
        agent.sync.close()

    asyncio.run(main())


def test_lousho_sessions_fork(tmp_path: Path) -> None:
    store = open_store("sqlite", tmp_path)
    agent = create_agent(provider=echo_provider(), store=store)
    session = agent.session("s1")
    session.send("one")
    session.send("two")
    session.update_state(lambda s: s.update(plan="pro"))
    agent.close()
    store.close()
    url = f"sqlite:///{tmp_path / 'agent.db'}"

    def lousho(*args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "LOUSHO_STORE"}
        return fork_server.run(
            ["-m", "lousho_sessions", *args, "--store", url, "--json"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip

    done = lousho("sessions", "fork", "s1", "s2", "--at", "2")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"id": "s2", "parent": "s1", "fork_point": 2, "messages": 2}
    again = lousho("sessions", "fork", "s1", "s2")
    assert again.returncode != 0 and "'s2' " in again.stderr and "already exists" in again.stderr
    with open_store("sqlite", tmp_path) as reopened:
        assert texts(reopened.sessions.load("s2")) == ["one", "1:one"]
        info = reopened.sessions.info("s2")
        assert (info.parent, info.fork_point) == ("s1", 2)
        assert reopened.sessions.load_state("s2", reopened.checkpoints) == ({"plan": "pro"}, 1)
