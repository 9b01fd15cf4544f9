"""Issue 10, turn side: no paused turn overwritten, no poisoned session, no self-deadlock.

Tests that depend on the store run over every kind (the ``store`` fixture:
memory, files, SQLite on disk and in memory).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from storekit import Kit

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    PropagatingToolError,
    ProviderError,
    SessionAwaitingApprovalError,
    TextPart,
    ToolCall,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.failures import is_permanent


def parts(kit: Kit) -> dict[str, Any]:
    return {"sessions": kit.sessions, "checkpoints": kit.checkpoints, "approvals": kit.approvals}


# -- 1: a paused turn continued by send() pauses again --------------------------------


def test_second_approval_during_send_raises_and_nothing_is_lost(store: Kit) -> None:
    ran: list[str] = []

    @tool(needs_approval=True)
    def step(name: str) -> str:
        """A step with a side effect."""
        ran.append(name)
        return f"did {name}"

    def model(request: ModelRequest) -> Message | str:
        done = [m.text for m in request.messages if m.role == "tool"]
        if len(done) == 0:
            return Message.assistant("", tool_calls=[ToolCall("c1", "step", {"name": "one"})])
        if len(done) == 1:
            return Message.assistant("", tool_calls=[ToolCall("c2", "step", {"name": "two"})])
        return "both done"

    agent = create_agent(provider=FunctionProvider(model), tools=[step], store=parts(store))
    session = agent.session("s1")
    first = session.send("do both")
    assert first.finish_reason == "awaiting-approval" and first.approval_id
    # resolved, but the resolving process died before it finished the turn
    store.approvals.resolve(first.approval_id, approved=True)

    with pytest.raises(SessionAwaitingApprovalError) as info:
        session.send("next question")
    second_id = info.value.approval_id
    assert second_id is not None and second_id != first.approval_id
    assert ran == ["one"]  # the first call ran once; the second waits
    pending = session.pending()
    assert pending is not None and pending.approval_id == second_id

    final = agent.approvals.resolve(id=second_id, approved=True)
    assert final is not None and final.text == "both done"
    assert ran == ["one", "two"]
    texts = [(m.role, m.text) for m in session.load()]
    assert texts == [
        ("user", "do both"),
        ("assistant", ""),
        ("tool", "did one"),
        ("assistant", ""),
        ("tool", "did two"),
        ("assistant", "both done"),
    ]
    assert session.pending() is None
    assert session.send("next question").text == "both done"


# -- 2: a deterministic failure must not poison a durable session ---------------------


def deep(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"x": value}
    return value


def encode_failure() -> ProviderError:
    try:
        "\ud800".encode("utf-8")
    except UnicodeEncodeError as exc:
        error = ProviderError(None, "cannot encode the request")
        error.__cause__ = exc
        return error
    raise AssertionError("unreachable")


FAILURES: dict[str, Callable[[], Message]] = {
    "http-400": lambda: (_ for _ in ()).throw(
        ProviderError(400, "context length exceeded", retryable=False)
    ),
    "encode": lambda: (_ for _ in ()).throw(encode_failure()),
    "nan-args": lambda: Message.assistant(
        "", tool_calls=[ToolCall("c1", "echo", {"v": float("nan")})]
    ),
    "deep-args": lambda: Message.assistant("", tool_calls=[ToolCall("c1", "echo", deep(5000))]),
}


@tool
def echo(v: Any = None) -> str:
    """Echo."""
    return str(v)


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_permanent_failure_ends_the_turn_and_the_session_goes_on(store: Kit, failure: str) -> None:
    def model(request: ModelRequest) -> Message | str:
        users = [m.text for m in request.messages if m.role == "user"]
        if users[-1] == "boom":  # a poisoned session would re-run this turn on every send
            return FAILURES[failure]()
        return "fine: " + users[-1]

    agent = create_agent(provider=FunctionProvider(model), tools=[echo], store=parts(store))
    session = agent.session("p1")
    session.send("first")
    before = session.load()
    with pytest.raises((ProviderError, ValueError, RecursionError)):
        session.send("boom")
    assert session.load() == before  # the transcript is unchanged
    assert session.pending() is None  # the checkpoint is dropped
    assert store.checkpoints.list("p1.") == []
    assert session.send("next").text == "fine: next"
    assert [m.text for m in session.load()][-2:] == ["next", "fine: next"]


@pytest.mark.parametrize(
    "error",
    [
        ProviderError(503, "overloaded"),
        ProviderError(429, "slow down"),
        ProviderError(None, "reset", retryable=True),
        ProviderError(408, "timeout"),
    ],
    ids=["503", "429", "retryable", "408"],
)
def test_transient_failure_keeps_the_turn_for_resume(error: ProviderError) -> None:
    failing = threading.Event()
    failing.set()

    def model(request: ModelRequest) -> str:
        if failing.is_set():
            raise error
        return "done"

    session = create_agent(provider=FunctionProvider(model), store=memory_store()).session("t1")
    with pytest.raises(ProviderError):
        session.send("hi")
    assert session.pending() is not None
    failing.clear()
    result = session.resume()
    assert result is not None and result.text == "done"


def test_is_permanent_rule() -> None:
    assert is_permanent(ProviderError(400, "bad"))
    assert is_permanent(ProviderError(404, "no model"))
    assert not is_permanent(ProviderError(409, "conflict"))
    assert not is_permanent(ProviderError(500, "oops"))
    assert not is_permanent(ProviderError(400, "odd", retryable=True))
    assert is_permanent(encode_failure())
    assert not is_permanent(OSError("disk full"))
    assert not is_permanent(PropagatingToolError("stop"))
    assert not is_permanent(RuntimeError("unknown: kept, so nothing that ran is lost"))
    assert is_permanent(RecursionError())
    wrapped = ProviderError(None, "model call failed")
    wrapped.__context__ = ValueError("bad JSON")
    assert is_permanent(wrapped)
    assert not is_permanent(KeyboardInterrupt())


# -- 2: bad input is refused at the door, before anything is stored -------------------


@pytest.mark.parametrize(
    ("input", "error", "match"),
    [
        ("ab\ud800c", ValueError, r"lone surrogate .* at position 2"),
        ([TextPart(42)], TypeError, r"text must be a str, got int"),  # type: ignore[arg-type]
        (Message.user("x", metadata={"score": float("inf")}), ValueError, r"\['score'\] is inf"),
        (Message.user("x", metadata=deep(150)), ValueError, r"more than 100 levels"),
        (Message.user("x", metadata={"k": {1, 2}}), TypeError, r"set is not a JSON value"),
        (
            [
                Message.user("x"),
                Message.assistant("", tool_calls=[ToolCall("c", "echo", {"v": float("nan")})]),
            ],
            ValueError,
            r"arguments of tool call 'c'.*\['v'\] is nan",
        ),
    ],
    ids=["surrogate", "non-str", "inf-metadata", "deep-metadata", "set", "nan-arguments"],
)
def test_bad_input_is_refused_before_anything_is_stored(
    store: Kit, input: Any, error: type[Exception], match: str
) -> None:
    agent = create_agent(provider=FunctionProvider(lambda r: "ok"), store=parts(store))
    session = agent.session("in1")
    with pytest.raises(error, match=match):
        session.send(input)
    with pytest.raises(error, match=match):
        session.stream(input)
    assert session.load() == ()
    assert store.checkpoints.list() == []
    assert session.send("fine").text == "ok"
