"""Who owns what (issue 12): the agent owns its threads and closes them; no import cycle."""

from __future__ import annotations

import ast
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import WAIT, Gate, calls, echo_provider, gated

import lousho_sessions
from lousho_sessions import (
    AbortSignal,
    FunctionProvider,
    Message,
    ModelRequest,
    ModelResponse,
    ScriptedProvider,
    create_agent,
    file_store,
    tool,
)
from lousho_sessions.providers.base import ModelEvent

PACKAGE = Path(lousho_sessions.__file__).parent

#: Import cycles still tolerated (none now). The test fails when one of these is gone,
#: so the set only shrinks.
KNOWN_CYCLES: set[frozenset[str]] = set()


def ours() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("lousho-")}


# -- imports -----------------------------------------------------------------


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The package modules ``path`` imports anywhere (functions and TYPE_CHECKING too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in modules)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for alias in node.names:
                full = f"{target}.{alias.name}"
                found.add(full if full in modules else target)
    return {m for m in found if m in modules and m != name}


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_in_the_package() -> None:
    paths = list(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): imports_of(p, modules) for p in paths}
    assert "lousho_sessions.session" in graph["lousho_sessions.agent"]  # the walk sees imports
    found = set(cycles(graph))
    assert found - KNOWN_CYCLES == set()
    assert KNOWN_CYCLES - found == set(), "a known cycle is gone: remove it from KNOWN_CYCLES"


def test_no_module_is_over_500_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > 500
    }
    assert long == {}


# -- threads -----------------------------------------------------------------


def test_agent_close_leaves_no_thread_of_ours() -> None:
    before = ours()

    @tool
    async def pause() -> str:
        """Runs on the tool loop."""
        return "paused"

    @tool
    def look(n: int) -> str:
        """Runs on the tool pool (two calls in one step)."""
        return f"looked {n}"

    provider = ScriptedProvider(
        [calls(("pause", {})), "one", calls(("look", {"n": 1}), ("look", {"n": 2})), "two", "three"]
    )
    agent = create_agent(provider=provider, tools=[pause, look])
    session = agent.session()
    assert session.send("a").text == "one"
    assert session.stream("b").result(WAIT).text == "two"  # on a worker thread
    assert agent.send("c").text == "three"
    started = ours() - before
    names = {t.name.split("_")[0] for t in started}
    assert {"lousho-tool", "lousho-tool-loop"} <= names and any(
        n.startswith("lousho-session") for n in names
    )
    agent.close()
    assert [t.name for t in ours() - before] == []
    assert not any(t.is_alive() for t in started)


def test_a_thousand_stateless_sends_leave_a_bounded_number_of_threads() -> None:
    before = ours()
    agent = create_agent(provider=FunctionProvider(lambda request: "ok"))
    for _ in range(1000):
        assert agent.send("hi").text == "ok"
    assert len(ours() - before) <= 8  # idle threads are reused, not one left per call
    agent.close()
    assert ours() - before == set()


def test_worker_threads_are_started_off_the_callers_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    starts: list[tuple[str, str]] = []  # (started, starting thread)
    real_start = threading.Thread.start

    def start(self: threading.Thread) -> None:
        starts.append((self.name, threading.current_thread().name))
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    gate = Gate()
    agent = create_agent(provider=gated(gate))
    futures = [agent.session(f"cold-{i}")._send_future("block", None)[0] for i in range(20)]
    gate.open()
    assert all(f.result(WAIT) is not None for f in futures)
    agent.close()
    caller = threading.current_thread().name
    from_caller = [started for started, by in starts if by == caller]
    assert from_caller and all(name.endswith("-starter") for name in from_caller)
    assert sum(1 for started, _ in starts if started.startswith("lousho-session")) >= 2


def test_close_with_a_timeout_returns_while_a_turn_runs_and_the_agent_works_after() -> None:
    gate = Gate()
    agent = create_agent(provider=gated(gate))
    session = agent.session()
    future, _ = session._send_future("block", None)
    assert gate.entered.wait(WAIT)
    running = agent.runtime.workers.threads()
    agent.close(timeout=0.01)  # gives up waiting; the turn goes on
    assert any(t.is_alive() for t in running) and not future.done()
    gate.open()
    result = future.result(WAIT)
    assert result is not None and result.text == "one two"
    assert session.send("again").text == "one two"  # threads start again on use
    agent.close()
    assert not any(t.is_alive() for t in agent.runtime.workers.threads())


class Counting(FunctionProvider):
    closed = 0

    def close(self) -> None:
        self.closed += 1


class Bare:
    """A provider that follows the Protocol without ProviderBase, and has no close()."""

    name = "bare"

    def stream(self, request: ModelRequest, signal: AbortSignal) -> Iterator[ModelEvent]:
        yield ModelResponse(Message.assistant("bare"))


def test_close_closes_a_provider_base_and_leaves_a_bare_provider_alone() -> None:
    counting = Counting(lambda request: "ok")
    with create_agent(provider=counting) as agent:
        assert agent.send("hi").text == "ok"
    assert counting.closed == 1
    bare: Any = Bare()
    with create_agent(provider=bare) as other:
        assert other.session().send("hi").text == "bare"


def test_sessions_of_two_agents_on_one_file_store_never_interleave(tmp_path: Path) -> None:
    store = file_store(tmp_path)
    one = create_agent(provider=echo_provider(), store=store).session("shared")
    two = create_agent(provider=echo_provider(), store=store).session("shared")
    barrier = threading.Barrier(10, timeout=WAIT)

    def send(i: int) -> None:
        barrier.wait()
        (one if i % 2 else two).send(f"m{i}")

    threads = [threading.Thread(target=send, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    loaded = one.load()
    assert [m.role for m in loaded] == ["user", "assistant"] * 10
    # each turn saw the one before it: the store's turn lock kept them one at a time
    assert sorted(int(m.text.split(":")[0]) for m in loaded[1::2]) == list(range(1, 20, 2))


def test_a_tool_that_closes_its_agent_does_not_wait_for_itself() -> None:
    before = ours()
    holder: list[Any] = []

    @tool
    def shut() -> str:
        """Closes the agent it runs in."""
        holder[0].close()
        return "closed"

    agent = create_agent(provider=ScriptedProvider([calls(("shut", {})), "done"]), tools=[shut])
    holder.append(agent)
    assert agent.session().send("go").text == "done"
    agent.close()
    assert ours() - before == set()
