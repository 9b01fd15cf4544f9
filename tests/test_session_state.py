"""Session state (``Session.state``, ``update_state``, ``ToolContext.state``) and state scopes,
on every store, through the public API."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fork_server
import pytest
from helpers import WAIT, calls, echo_provider
from history_stores import KINDS, SHARED, cleanup, open_store, require

from lousho_sessions import (
    AbortController,
    FunctionProvider,
    Message,
    ModelRequest,
    ScriptedProvider,
    StateTooLargeError,
    ToolContext,
    create_agent,
    tool,
)
from lousho_sessions.errors import LeaseLostError, StoreConflictError
from lousho_sessions.stores.adapters import adapt_checkpoints, adapt_sessions, store_parts
from lousho_sessions.stores.base import SaveState

HERE = Path(__file__).parent


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    require(request.param)
    yield request.param
    cleanup(request.param, tmp_path)


@pytest.fixture
def store(kind: str, tmp_path: Path) -> Iterator[Any]:
    made = open_store(kind, tmp_path)
    yield made
    close = getattr(made, "close", None)
    if callable(close):
        close()


def remember(ctx: ToolContext, key: str, value: str) -> str:
    """Remember a value in the session's state."""
    ctx.state[key] = value
    return f"remembered {key}"


def test_update_state_in_place_or_by_returning_and_a_read_only_view(store: Any) -> None:
    agent = create_agent(provider=echo_provider(), store=store)
    session = agent.session("s1")
    assert dict(session.state) == {}
    assert dict(session.update_state(lambda s: s.update(plan="pro"))) == {"plan": "pro"}
    assert dict(session.update_state(lambda s: {**s, "n": 1})) == {"plan": "pro", "n": 1}
    view = session.state
    with pytest.raises(TypeError):
        view["plan"] = "free"  # type: ignore[index]
    # another agent (another session object) reads what was stored
    other = create_agent(provider=echo_provider(), store=store)
    assert dict(other.session("s1").state) == {"plan": "pro", "n": 1}
    assert dict(other.session("s2").state) == {}
    other.close()
    agent.close()


def test_a_tool_changes_state_committed_with_the_turn(store: Any) -> None:
    model = ScriptedProvider(
        [calls(("remember", {"key": "city", "value": "Lyon"})), Message.assistant("noted")]
    )
    agent = create_agent(provider=model, tools=[tool(remember)], store=store)
    session = agent.session("s1")
    session.update_state(lambda s: s.update(plan="pro"))
    seen: list[dict[str, Any]] = []

    def look(ctx: ToolContext) -> str:
        """Look at the state."""
        seen.append(dict(ctx.state))
        return "ok"

    assert session.send("I live in Lyon").text == "noted"
    assert dict(session.state) == {"plan": "pro", "city": "Lyon"}
    # the next turn's tools see it, from another agent too
    other = create_agent(
        provider=ScriptedProvider([calls(("look", {})), Message.assistant("done")]),
        tools=[tool(look)],
        store=store,
    )
    assert other.session("s1").send("what do you know?").text == "done"
    assert seen == [{"plan": "pro", "city": "Lyon"}]
    other.close()
    agent.close()


def test_an_aborted_turn_drops_its_state_and_a_resumed_one_commits_it(store: Any) -> None:
    controller = AbortController()

    def change(ctx: ToolContext) -> str:
        """Change the state, then the caller aborts."""
        ctx.state["draft"] = "yes"
        controller.abort()
        return "changed"

    def model(request: ModelRequest) -> Message:
        if request.messages[-1].role == "user":
            return calls(("change", {}))
        return Message.assistant("finished")

    agent = create_agent(provider=FunctionProvider(model), tools=[tool(change)], store=store)
    session = agent.session("s1")
    result = session.send("go", signal=controller.signal)
    assert result.finish_reason == "aborted"
    assert dict(session.state) == {}  # not committed
    assert session.pending() is not None  # the tool ran: the turn is kept, with its state
    finished = session.resume()
    assert finished is not None and finished.text == "finished"
    assert dict(session.state) == {"draft": "yes"}  # the checkpoint held it

    controller2 = AbortController()
    controller = controller2
    session.send("go", signal=controller2.signal)
    assert dict(session.state) == {"draft": "yes"}
    session.update_state(lambda s: s.update(draft="no"))
    session.discard_pending()  # the aborted turn is dropped, its change with it
    assert dict(session.state) == {"draft": "no"}
    agent.close()


def test_a_state_too_large_is_refused_naming_the_session_and_size(store: Any) -> None:
    agent = create_agent(provider=echo_provider(), store=store)
    session = agent.session("big-one")
    session.update_state(lambda s: s.update(a=1))
    with pytest.raises(StateTooLargeError, match=r"session 'big-one'.* bytes of JSON") as info:
        session.update_state(lambda s: s.update(blob="x" * 300_000))
    assert "300" in str(info.value)
    with pytest.raises(TypeError, match="JSON"):
        session.update_state(lambda s: s.update(bad=object()))
    assert dict(session.state) == {"a": 1}  # nothing written
    agent.close()


def test_state_survives_a_rewind_and_a_fork_copies_it(store: Any) -> None:
    agent = create_agent(provider=echo_provider(), store=store)
    session = agent.session("s1")
    session.send("one")
    session.update_state(lambda s: s.update(name="Ada"))
    session.send("two")
    session.rewind(0)
    assert dict(session.state) == {"name": "Ada"}
    fork = session.fork("s1-fork")
    assert dict(fork.state) == {"name": "Ada"}
    fork.update_state(lambda s: s.update(name="Bob"))
    assert dict(session.state) == {"name": "Ada"}  # a copy, not shared
    agent.close()


def test_a_state_scope_is_shared_by_sessions(store: Any) -> None:
    agent = create_agent(provider=echo_provider(), store=store)
    scope = agent.state_scope("user-42")
    assert dict(scope.state) == {}
    scope.update_state(lambda s: s.update(lang="fr"))
    again = create_agent(provider=echo_provider(), store=store)
    assert dict(again.state_scope("user-42").state) == {"lang": "fr"}
    assert dict(again.state_scope("user-7").state) == {}
    assert dict(agent.session("s1").state) == {}  # not a session's state
    again.close()
    agent.close()


def test_save_state_is_a_compare_and_set_and_fenced(store: Any) -> None:
    parts = store_parts(store)
    sessions, checkpoints = adapt_sessions(parts.sessions), parts.checkpoints
    assert sessions.load_state("s1", checkpoints) == ({}, 0)
    with sessions.turn_lock("s1") as lease:
        fence = lease.fence
        assert sessions.save_state(SaveState("s1", {"a": 1}, 0, fence, checkpoints)) == 1
        with pytest.raises(StoreConflictError, match="'s1'"):
            sessions.save_state(SaveState("s1", {"a": 2}, 0, fence, checkpoints))
    assert sessions.load_state("s1", checkpoints) == ({"a": 1}, 1)
    with sessions.turn_lock("s1") as newer:
        assert newer.fence is not None
    if getattr(checkpoints, "fenced_writes", False) and fence is not None:
        with pytest.raises(LeaseLostError):
            sessions.save_state(SaveState("s1", {"a": 3}, 1, fence, checkpoints))
    assert sessions.load_state("s1", checkpoints) == ({"a": 1}, 1)


@pytest.mark.parametrize("what", ["session", "scope"])
@pytest.mark.parametrize("shared", SHARED)
def test_two_processes_lose_no_update(shared: str, what: str, tmp_path: Path) -> None:
    require(shared)
    count = 15
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    children: list[subprocess.Popen[str]] = []
    try:
        children = [
            fork_server.Popen(
                [
                    str(HERE / "state_child.py"),
                    shared,
                    str(tmp_path),
                    str(count),
                    what,
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            for _ in range(2)
        ]
        for child in children:
            assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, _ = child.communicate(timeout=WAIT * 6)
            assert child.returncode == 0 and out.strip() == "done", out
        store = open_store(shared, tmp_path)
        agent = create_agent(provider=echo_provider(), store=store)
        target: Any = agent.session("s1") if what == "session" else agent.state_scope("user-42")
        assert dict(target.state) == {"n": 2 * count}
        agent.close()
        close = getattr(store, "close", None)
        if callable(close):
            close()
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
            child.communicate()
        cleanup(shared, tmp_path)


def test_a_checkpoint_prune_keeps_the_state(store: Any) -> None:
    agent = create_agent(provider=echo_provider(), store=store)
    session = agent.session("s1")
    session.update_state(lambda s: s.update(kept=True))
    agent.state_scope("user-42").update_state(lambda s: s.update(kept=True))
    checkpoints = adapt_checkpoints(store_parts(store).checkpoints)
    until_later = 0.0  # everything written before now is "old"
    checkpoints.prune(until_later)
    assert dict(session.state) == {"kept": True}
    assert dict(agent.state_scope("user-42").state) == {"kept": True}
    agent.close()


def test_an_agent_without_a_checkpoint_store_keeps_state_too() -> None:
    model = ScriptedProvider(
        [calls(("remember", {"key": "city", "value": "Oslo"})), Message.assistant("noted")]
    )
    agent = create_agent(provider=model, tools=[tool(remember)])  # no store at all
    session = agent.session("s1")
    session.send("I live in Oslo")
    assert dict(session.state) == {"city": "Oslo"}
    session.update_state(lambda s: s.update(n=1))
    assert dict(agent.session("s1").state) == {"city": "Oslo", "n": 1}
    agent.close()


@pytest.mark.parametrize("kind", ["sqlite", "files"])
def test_state_is_sealed_when_the_store_encrypts(kind: str, tmp_path: Path) -> None:
    from lousho_sessions import file_store
    from lousho_sessions.sqlite import SqliteStore

    keys = {"k1": bytes(range(32))}
    path = tmp_path / kind
    store: Any = (
        SqliteStore(path, encryption=keys)
        if kind == "sqlite"
        else file_store(path, encryption=keys)
    )
    agent = create_agent(provider=echo_provider(), store=store)
    agent.session("s1").update_state(lambda s: s.update(secret="hunter2-swordfish"))
    agent.close()
    getattr(store, "close", lambda: None)()
    files = [path] if kind == "sqlite" else [p for p in path.rglob("*") if p.is_file()]
    for file in files:
        assert b"hunter2-swordfish" not in file.read_bytes(), file
    reopened: Any = (
        SqliteStore(path, encryption=keys)
        if kind == "sqlite"
        else file_store(path, encryption=keys)
    )
    again = create_agent(provider=echo_provider(), store=reopened)
    assert dict(again.session("s1").state) == {"secret": "hunter2-swordfish"}
    again.close()
    getattr(reopened, "close", lambda: None)()


def test_state_for_asyncio() -> None:
    from lousho_sessions.aio import create_agent as create_async_agent

    async def main() -> None:
        agent = create_async_agent(provider=echo_provider())
        session = agent.session("s1")
        assert dict(await session.state()) == {}
        new = await session.update_state(lambda s: s.update(n=1))
        assert dict(new) == {"n": 1} and dict(await session.state()) == {"n": 1}
        agent.close()

    asyncio.run(main())


@pytest.mark.parametrize("shared", SHARED)
def test_a_turn_killed_after_its_tool_resumes_with_its_state(shared: str, tmp_path: Path) -> None:
    """SIGKILL after a tool changed ``ctx.state``: the change is in the turn's checkpoint, not
    the store; ``resume()`` in this process commits it without running the tool again."""
    require(shared)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    try:
        child = fork_server.run(
            [str(HERE / "state_kill_child.py"), "model", shared, str(tmp_path)],
            capture_output=True,
            text=True,
            env=env,
            timeout=WAIT * 6,
        )
        assert child.returncode == -9 and "dying" in child.stdout, child.stderr
        store = open_store(shared, tmp_path)

        @tool
        def bump(ctx: ToolContext) -> str:
            """Count a visit (must not run again)."""
            raise AssertionError("the tool ran again")

        agent = create_agent(
            provider=ScriptedProvider([Message.assistant("done")]), tools=[bump], store=store
        )
        session = agent.session("s1")
        assert dict(session.state) == {}  # not committed
        result = session.resume()
        assert result is not None and result.text == "done"
        assert dict(session.state) == {"visits": 1}
        agent.close()
        getattr(store, "close", lambda: None)()
    finally:
        cleanup(shared, tmp_path)
