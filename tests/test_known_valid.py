"""The memory store checks each message it is given as a persistent store would (it must
encode as stored JSON), but not again one a built-in checkpoint store already encoded in
a turn's checkpoint (``serde.remember_valid``): what a turn commits was checkpointed."""

from __future__ import annotations

from typing import Any

import pytest
from helpers import scripted

from lousho_sessions import (
    Message,
    ModelRequest,
    ToolCall,
    Usage,
    _kept_json,
    create_agent,
    memory_store,
    serde,
    tool,
)
from lousho_sessions.stores.memory import MemoryCheckpointStore, MemorySessionStore


@tool
def echo(v: str) -> str:
    """Say ``v`` back."""
    return v


def tool_then_answer(request: ModelRequest, n: int) -> Message:
    if n % 2 == 0:
        return Message.assistant("", tool_calls=[ToolCall(f"c{n}", "echo", {"v": "x"})])
    return Message.assistant("done")


class PlainCheckpoints(MemoryCheckpointStore):
    """A checkpoint store that does not say it encodes what it saves."""

    checks_json = False


def encoded(monkeypatch: pytest.MonkeyPatch) -> list[Message]:
    """The messages ``message_json`` encodes from now on (it is the memory store's check)."""
    seen: list[Message] = []
    real = serde.message_json

    def spy(message: Message) -> str:
        seen.append(message)
        return real(message)

    monkeypatch.setattr("lousho_sessions.stores.memory.message_json", spy)
    return seen


@pytest.mark.parametrize("checks_json", [True, False])
def test_a_turns_commit_encodes_only_what_no_checkpoint_held(
    monkeypatch: pytest.MonkeyPatch, checks_json: bool
) -> None:
    store = memory_store()
    if not checks_json:
        store = type(store)(store.sessions, PlainCheckpoints(), store.approvals)
    agent = create_agent(provider=scripted(tool_then_answer), tools=[echo], store=store)
    session = agent.session("s")
    seen = encoded(monkeypatch)
    result = session.send("hi")
    assert result.finish_reason == "stop"
    user, call, answer_of_tool, final = session.load()
    assert call.tool_calls and answer_of_tool.role == "tool" and final.text == "done"
    if checks_json:  # the input, the call and the tool's answer were in checkpoints
        assert seen == [final]
    else:
        assert seen == [user, call, answer_of_tool, final]


def test_the_memory_store_still_refuses_what_json_cannot_hold() -> None:
    store = MemorySessionStore()
    bad = Message.assistant("x", usage=Usage(1, 1, float("nan")))
    with pytest.raises(ValueError, match=r"usage\.cost_usd is nan"):
        store.append("s", [bad], 0)
    assert store.load("s") is None
    good = Message.user("fine")
    serde.remember_valid([good])
    store.append("s", [good], 0)  # known valid: taken without encoding it again
    assert store.load("s") == [good]


def test_known_valid_is_by_identity_and_bounded() -> None:
    first = Message.user("a")
    twin = Message.user("a")
    serde.remember_valid([first])
    assert serde.known_valid(first)
    assert not serde.known_valid(twin)  # equal is not enough: this one was never checked
    serde.remember_valid([Message.user(str(n)) for n in range(_kept_json.KEPT_LIMIT)])
    assert not serde.known_valid(first)  # the oldest went first
    held: list[Any] = list(_kept_json._kept.values())
    assert len(held) == _kept_json.KEPT_LIMIT
