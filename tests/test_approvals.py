"""Approvals (SPEC 3, 6, 7): pause, resolve once, deny, approve callback, durable restart."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from helpers import WAIT, calls

from lousho_sessions import (
    ApprovalAlreadyResolvedError,
    ApprovalNotFoundError,
    ApprovalRequest,
    Message,
    ScriptedProvider,
    SessionAwaitingApprovalError,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.approvals import TurnKey
from lousho_sessions.events import ApprovalRequested

ran: list[str] = []


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    ran.append(path)
    return f"deleted {path}"


def script() -> ScriptedProvider:
    return ScriptedProvider([calls(("delete_file", {"path": "/tmp/x"})), "Done."])


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


def test_pause_then_resolve_continues_as_next_turn() -> None:
    agent = create_agent(provider=script(), tools=[delete_file])
    session = agent.session()
    result = session.send("delete /tmp/x")
    assert result.finish_reason == "awaiting-approval" and result.approval_id
    assert ran == []
    assert session.messages == ()  # the paused turn stays in its checkpoint
    pending = session.pending()
    assert pending is not None and pending.status == "awaiting-approval"
    assert pending.approval_id == result.approval_id
    request = agent.approvals.get(result.approval_id)
    assert request.tool == "delete_file" and request.call.arguments == {"path": "/tmp/x"}
    assert [a.id for a in agent.approvals.list(session_id=session.id)] == [result.approval_id]

    final = agent.approvals.resolve(id=result.approval_id, approved=True)
    assert final is not None and final.text == "Done." and final.finish_reason == "stop"
    assert ran == ["/tmp/x"]
    roles = [m.role for m in session.load()]
    assert roles == ["user", "assistant", "tool", "assistant"]
    assert session.pending() is None
    assert agent.approvals.list(session_id=session.id) == []


def test_while_waiting_send_stream_resume_clear_raise() -> None:
    agent = create_agent(provider=script(), tools=[delete_file])
    session = agent.session()
    approval_id = session.send("delete").approval_id
    attempts: list[Callable[[], object]] = [
        lambda: session.send("more"),
        session.resume,
        session.clear,
    ]
    for attempt in attempts:
        with pytest.raises(SessionAwaitingApprovalError) as info:
            attempt()
        assert info.value.approval_id == approval_id
        assert info.value.code == "LOUSHO_SESSION_AWAITING_APPROVAL"
    run = session.stream("more")
    assert [e.type for e in run] == ["error", "run.done"]
    with pytest.raises(SessionAwaitingApprovalError):
        run.result()


def test_denied_call_tells_the_model() -> None:
    provider = script()
    agent = create_agent(provider=provider, tools=[delete_file])
    session = agent.session()
    approval_id = session.send("delete").approval_id
    assert approval_id is not None
    final = agent.approvals.resolve(id=approval_id, approved=False, reason="not today")
    assert final is not None and final.text == "Done."
    assert ran == []
    tool_message = provider.calls[1].messages[-1]
    assert (
        tool_message.is_error and "denied" in tool_message.text and "not today" in tool_message.text
    )


def test_resolve_twice_and_unknown() -> None:
    agent = create_agent(provider=script(), tools=[delete_file])
    approval_id = agent.session().send("delete").approval_id
    assert approval_id is not None
    agent.approvals.resolve(id=approval_id, approved=True)
    with pytest.raises(ApprovalAlreadyResolvedError):
        agent.approvals.resolve(id=approval_id, approved=True)
    with pytest.raises(ApprovalNotFoundError):
        agent.approvals.resolve(id="appr-missing", approved=True)
    with pytest.raises(ApprovalNotFoundError):
        agent.approvals.get("appr-missing")
    assert ran == ["/tmp/x"]


def test_concurrent_resolves_one_winner_tool_runs_once() -> None:
    agent = create_agent(provider=script(), tools=[delete_file])
    approval_id = agent.session().send("delete").approval_id
    assert approval_id is not None
    barrier = threading.Barrier(8, timeout=WAIT)
    outcomes: list[str] = []
    lock = threading.Lock()

    def race() -> None:
        barrier.wait()
        try:
            agent.approvals.resolve(id=approval_id, approved=True)
            outcome = "won"
        except ApprovalAlreadyResolvedError:
            outcome = "lost"
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=race) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert sorted(outcomes) == ["lost"] * 7 + ["won"]
    assert ran == ["/tmp/x"]


def test_approve_callback_decides_for_send_not_for_stream() -> None:
    asked: list[ApprovalRequest] = []

    def approve(request: ApprovalRequest) -> bool:
        asked.append(request)
        return True

    agent = create_agent(provider=script(), tools=[delete_file], approve=approve)
    result = agent.session().send("delete")
    assert result.finish_reason == "stop" and ran == ["/tmp/x"]
    assert asked[0].call.name == "delete_file"

    agent2 = create_agent(provider=script(), tools=[delete_file], approve=approve)
    run = agent2.session().stream("delete")
    events = list(run)
    assert any(isinstance(e, ApprovalRequested) for e in events)
    assert events[-1].type == "run.done" and run.result().finish_reason == "awaiting-approval"
    assert len(asked) == 1


def test_approve_callback_none_pauses() -> None:
    agent = create_agent(provider=script(), tools=[delete_file], approve=lambda r: None)
    assert agent.session().send("delete").finish_reason == "awaiting-approval"


def test_callable_needs_approval() -> None:
    @tool(needs_approval=lambda args: str(args.get("path", "")).startswith("/etc"))
    def remove(path: str) -> str:
        """Remove."""
        ran.append(path)
        return "ok"

    provider = ScriptedProvider(
        [
            calls(("remove", {"path": "/tmp/a"})),
            "first",
            calls(("remove", {"path": "/etc/b"})),
            "second",
        ]
    )
    session = create_agent(provider=provider, tools=[remove]).session()
    assert session.send("a").finish_reason == "stop"
    assert session.send("b").finish_reason == "awaiting-approval"
    assert ran == ["/tmp/a"]


def test_durable_restart_resolve_directly() -> None:
    store = memory_store()
    first = create_agent(provider=script(), tools=[delete_file], store=store)
    approval_id = first.session("u1").send("delete").approval_id
    assert approval_id is not None
    # "a new process": a new agent over the same store, no session opened first
    second = create_agent(
        provider=ScriptedProvider(["Done again."]), tools=[delete_file], store=store
    )
    final = second.approvals.resolve(id=approval_id, approved=True)
    assert final is not None and final.text == "Done again."
    assert ran == ["/tmp/x"]
    assert [m.role for m in second.session("u1").load()] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


def test_durable_restart_resume_first_then_resolve() -> None:
    store = memory_store()
    first = create_agent(provider=script(), tools=[delete_file], store=store)
    approval_id = first.session("u2").send("delete").approval_id
    second = create_agent(provider=ScriptedProvider(["ok"]), tools=[delete_file], store=store)
    session = second.session("u2")
    with pytest.raises(SessionAwaitingApprovalError):
        session.resume()
    assert approval_id is not None
    assert second.approvals.resolve(id=approval_id, approved=True) is not None
    assert len(session.messages) == 4


def test_discard_pending_drops_turn_and_approval() -> None:
    agent = create_agent(provider=script(), tools=[delete_file])
    session = agent.session()
    approval_id = session.send("delete").approval_id
    assert approval_id is not None
    session.discard_pending()
    assert session.pending() is None
    with pytest.raises(ApprovalNotFoundError):
        agent.approvals.resolve(id=approval_id, approved=True)
    session.clear()
    assert session.messages == ()


def test_single_turn_agent_send_pauses_and_resolves() -> None:
    agent = create_agent(provider=script(), tools=[delete_file])
    result = agent.send("delete")
    assert result.finish_reason == "awaiting-approval" and result.approval_id
    final = agent.approvals.resolve(id=result.approval_id, approved=True)
    assert final is not None and final.text == "Done." and ran == ["/tmp/x"]


def test_two_calls_needing_approval_pause_twice() -> None:
    provider = ScriptedProvider(
        [
            calls(("delete_file", {"path": "a"}), ("delete_file", {"path": "b"})),
            Message.assistant("both"),
        ]
    )
    agent = create_agent(provider=provider, tools=[delete_file])
    session = agent.session()
    first = session.send("delete a and b").approval_id
    assert first is not None
    second = agent.approvals.resolve(id=first, approved=True)
    assert second is not None and second.finish_reason == "awaiting-approval"
    assert second.approval_id is not None and second.approval_id != first
    final = agent.approvals.resolve(id=second.approval_id, approved=False)
    assert final is not None and final.text == "both"
    assert ran == ["a"]


@pytest.mark.parametrize("kind", ["session", "single"])
def test_records_name_their_turn_and_old_records_with_only_a_turn_id_still_resolve(
    kind: str,
) -> None:
    store = memory_store()
    agent = create_agent(provider=script(), tools=[delete_file], store=store)
    if kind == "session":
        paused = agent.session("s-1").send("delete")
        turn = {"kind": "session", "key": "s-1", "n": 0}
    else:
        paused = agent.send("delete", session_id="s-1")
        turn = {"kind": "single", "key": "s-1", "n": None}
    assert paused.approval_id and store.approvals is not None
    record = store.approvals.get(paused.approval_id)
    assert record is not None and record["turn"] == turn
    expected = TurnKey("session", "s-1", 0) if kind == "session" else TurnKey("single", "s-1")
    assert TurnKey.of_record(record) == expected
    # a record written before "turn" existed: the turn id alone says which turn it is
    del record["turn"]
    store.approvals.delete(paused.approval_id)
    store.approvals.create(record)
    final = agent.approvals.resolve(id=paused.approval_id, approved=True)
    assert final is not None and final.text == "Done." and ran == ["/tmp/x"]


def test_turn_keys_of_records() -> None:
    assert TurnKey("session", "a", 3).turn_id == "a.turn-3"
    assert TurnKey("single", "a").turn_id == "a.send"
    assert TurnKey.of_record({"turn_id": "a.turn-3"}) == TurnKey("session", "a", 3)
    assert TurnKey.of_record({"turn_id": "a.send"}) == TurnKey("single", "a")
    assert TurnKey.of_record({"turn_id": None, "session_id": "a"}) == TurnKey("session", "a")
    assert TurnKey.of_record({"turn": {"kind": "single", "key": "k"}}) == TurnKey("single", "k")
    assert TurnKey.of_record({"turn": "junk", "turn_id": None}) is None
