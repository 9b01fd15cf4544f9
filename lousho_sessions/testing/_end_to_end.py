"""The kit's end-to-end section: the public API (``create_agent``, ``Session``, approvals)
run over the store under test, with ``FunctionProvider`` as the model.

What the other tests check method by method, checked here as a user meets it: two
sessions on one id taking turns, a durable turn with a tool, a turn killed in another
process and finished here, an approval resolved once.
"""

from __future__ import annotations

import multiprocessing
import pickle
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from ..agent import Agent, create_agent
from ..errors import ApprovalAlreadyResolvedError
from ..messages import Message, ToolCall
from ..providers.base import ModelRequest
from ..providers.function import FunctionProvider
from ..stores.base import AgentStore
from ..tools import Tool, tool
from ._base import KitBase, need_approvals, need_checkpoints, need_sessions
from ._leases import need_scope
from ._support import WAIT, Parts, opened, raises, skip, texts

_SPAWN = multiprocessing.get_context("spawn")
_RUNS = "kit-tool-runs"  # a file under tmp_path: one line per run of the crash test's tool


def agent_store(parts: Parts) -> AgentStore:
    """The store's parts as ``create_agent(store=)`` takes them."""
    return AgentStore(parts.sessions, parts.checkpoints, parts.approvals)


@contextmanager
def agent_over(
    parts: Parts, model: Callable[[ModelRequest], Any], tools: list[Tool] | None = None
) -> Iterator[Agent]:
    """An agent over the store under test; closed afterwards."""
    agent = create_agent(
        provider=FunctionProvider(model), tools=tools or [], store=agent_store(parts)
    )
    try:
        yield agent
    finally:
        agent.close()


def roles(messages: Any) -> list[str]:
    return [m.role for m in messages or []]


def lookup_then_answer(request: ModelRequest) -> Message:
    """Asks for ``kit_lookup`` after the user's message, answers after its result."""
    last = request.messages[-1]
    if last.role == "user":
        return Message.assistant("", tool_calls=[ToolCall("c1", "kit_lookup", {"q": last.text})])
    return Message.assistant(f"done: {last.text}")


def recording_tool(record: Callable[[str], None]) -> Tool:
    """``kit_lookup(q)``, recording each run with ``record(q)``."""

    @tool(name="kit_lookup")
    def kit_lookup(q: str) -> str:
        """Look ``q`` up."""
        record(q)
        return f"found {q}"

    return kit_lookup


def turn_killed_after_its_tool(
    kit: type[Any], location: str, session_id: str, out: Queue[Any]
) -> None:
    """A process's body: a durable turn whose tool runs (recorded in ``location/kit-tool-runs``),
    then whose next model call says so on ``out`` and waits to be killed."""
    try:
        with opened(kit().reopen_store, Path(location)) as parts:

            def model(request: ModelRequest) -> Message:
                if request.messages[-1].role == "tool":  # its result is checkpointed by now
                    out.put(("inside", "model"))
                    threading.Event().wait(WAIT * 4)  # nothing sets it: the test kills us
                return lookup_then_answer(request)

            def record(q: str) -> None:
                with (Path(location) / _RUNS).open("a", encoding="utf-8") as runs:
                    runs.write(q + "\n")

            with agent_over(parts, model, [recording_tool(record)]) as agent:
                agent.session(session_id).send("crash")
    except BaseException:
        out.put(("error", traceback.format_exc()))


class EndToEndTests(KitBase):
    """The public API over the store: what a user sees when the store keeps its contract."""

    def test_end_to_end_two_sessions_take_turns(self, tmp_path: Path) -> None:
        """Two ``Session`` objects (of two agents) on one id take three turns in turn; each
        model call sees every earlier message, in order."""
        with self.store(tmp_path) as parts:
            sessions = need_sessions(parts)
            seen: list[list[str]] = []

            def model(request: ModelRequest) -> str:
                seen.append([m.text for m in request.messages if m.role in ("user", "assistant")])
                return f"a{len(seen)}"

            with agent_over(parts, model) as first, agent_over(parts, model) as second:
                one, two = first.session("e2e-chat"), second.session("e2e-chat")
                for n, session in enumerate((one, two, one), start=1):
                    assert session.send(f"q{n}").text == f"a{n}"
                expected = ["q1", "a1", "q2", "a2", "q3", "a3"]
                assert seen == [expected[:1], expected[:3], expected[:5]], seen
                assert [m.text for m in one.load()] == expected
                assert [m.text for m in two.load()] == expected
            assert texts(sessions.load("e2e-chat")) == expected

    def test_end_to_end_durable_turn_with_a_tool(self, tmp_path: Path) -> None:
        """A durable turn calling a tool: the tool runs once, the turn joins the transcript,
        and no checkpoint is left."""
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), need_checkpoints(parts)
            runs: list[str] = []
            with agent_over(parts, lookup_then_answer, [recording_tool(runs.append)]) as agent:
                session = agent.session("e2e-tool")
                for n in (1, 2):
                    result = session.send(f"x{n}")
                    assert result.text == f"done: found x{n}"
                    assert cp.list("e2e-tool.") == [], "a finished turn left its checkpoints"
                    assert session.pending() is None
                assert runs == ["x1", "x2"]
            assert (
                roles(sessions.load("e2e-tool")) == ["user", "assistant", "tool", "assistant"] * 2
            )

    def test_end_to_end_turn_killed_in_another_process_is_resumed(self, tmp_path: Path) -> None:
        """A process is killed (``SIGKILL``) in a durable turn after its tool's result was
        checkpointed; this process finishes the turn without running the tool again."""
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), need_checkpoints(parts)
            need_scope(sessions)
            kit = self.spawnable_kit()
            out: Any = _SPAWN.Queue()
            child = _SPAWN.Process(
                target=turn_killed_after_its_tool, args=(kit, str(tmp_path), "e2e-crash", out)
            )
            child.start()
            try:
                state, detail = out.get(timeout=WAIT * 2)
                assert state == "inside", detail
            finally:
                child.kill()
                child.join(WAIT)
            assert cp.pending_turns() == ["e2e-crash.turn-0"]
            calls: list[list[str]] = []

            def model(request: ModelRequest) -> Message:
                calls.append(roles(request.messages))
                return lookup_then_answer(request)

            runs: list[str] = []
            with agent_over(parts, model, [recording_tool(runs.append)]) as agent:
                result = agent.resume("e2e-crash")
                assert result is not None and result.text == "done: found crash"
            assert runs == [], "the tool ran again"
            assert (tmp_path / _RUNS).read_text(encoding="utf-8").split() == ["crash"]
            assert calls == [["user", "assistant", "tool"]], calls
            assert roles(sessions.load("e2e-crash")) == ["user", "assistant", "tool", "assistant"]
            assert cp.list("e2e-crash.") == []

    def test_end_to_end_approval_resolved_once(self, tmp_path: Path) -> None:
        """A turn pauses for an approval; resolving it runs the tool and finishes the turn; a
        second resolve is refused and runs nothing."""
        with self.store(tmp_path) as parts:
            sessions, cp = need_sessions(parts), need_checkpoints(parts)
            need_approvals(parts)
            runs: list[str] = []

            @tool(name="kit_remove", needs_approval=True)
            def kit_remove(path: str) -> str:
                """Remove ``path``."""
                runs.append(path)
                return f"removed {path}"

            def model(request: ModelRequest) -> Message:
                if request.messages[-1].role == "user":
                    call = ToolCall("c1", "kit_remove", {"path": "/tmp/kit"})
                    return Message.assistant("", tool_calls=[call])
                return Message.assistant(f"done: {request.messages[-1].text}")

            with agent_over(parts, model, [kit_remove]) as agent:
                session = agent.session("e2e-approve")
                paused = session.send("clean up")
                assert paused.finish_reason == "awaiting-approval" and paused.approval_id
                assert runs == []
                pending = session.pending()
                assert pending is not None and pending.approval_id == paused.approval_id
                result = agent.approvals.resolve(paused.approval_id, approved=True)
                assert result is not None and result.text == "done: removed /tmp/kit"
                with raises(ApprovalAlreadyResolvedError):
                    agent.approvals.resolve(paused.approval_id, approved=False)
                assert runs == ["/tmp/kit"]
                assert session.pending() is None
            assert roles(sessions.load("e2e-approve")) == ["user", "assistant", "tool", "assistant"]
            assert cp.list("e2e-approve.") == []

    def spawnable_kit(self) -> type[Any]:
        """This test class, if another process can import it and open the store again."""
        if type(self).reopen_store is KitBase.reopen_store:
            skip(f"{type(self).__name__} defines no reopen_store: other processes cannot open it")
        try:
            pickle.dumps(type(self))
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            skip(f"{type(self).__qualname__} is not importable by another process: {exc}")
        return type(self)
