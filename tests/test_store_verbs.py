"""The store contract's turn verbs: methods of earlier releases are warned about or refused,
and a user's plain Protocol store still takes turns through the defaults."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import pytest

from lousho_sessions import FunctionProvider, Message, create_agent
from lousho_sessions.errors import StoreError
from lousho_sessions.stores.base import CommitTurn
from lousho_sessions.stores.memory import MemorySessionStore


def test_a_method_a_turn_no_longer_calls_is_warned_about() -> None:
    with pytest.warns(DeprecationWarning, match=r"Old\.append_and_delete\(\).*commit_turn"):

        class Old(MemorySessionStore):
            def append_and_delete(self, *args: object, **kwargs: object) -> None:
                raise AssertionError("never called")

    agent = create_agent(provider=FunctionProvider(lambda r: "answer"), store=Old())
    assert agent.session("s").send("hi").text == "answer"  # the default commit_turn
    agent.close()


def test_a_commit_turn_of_the_earlier_form_is_refused_when_defined() -> None:
    with pytest.raises(StoreError, match=r"commit_turn takes one request"):

        class Old(MemorySessionStore):
            def commit_turn(  # type: ignore[override]
                self, id: str, messages: Sequence[Message], expected_length: int
            ) -> object:
                return None


def test_a_commit_turn_of_the_request_form_is_accepted() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class New(MemorySessionStore):
            def commit_turn(self, request: CommitTurn) -> object | None:
                return super().commit_turn(request)

    agent = create_agent(provider=FunctionProvider(lambda r: "answer"), store=New())
    session = agent.session("s")
    session.send("one")
    assert [m.text for m in session.load()] == ["one", "answer"]
    agent.close()


class PlainStore:
    """A user's store: the three Protocol methods, nothing else."""

    def __init__(self) -> None:
        self.data: dict[str, list[Message]] = {}

    def load(self, id: str) -> list[Message] | None:
        return list(self.data[id]) if id in self.data else None

    def save(self, id: str, messages: Sequence[Message]) -> None:
        self.data[id] = list(messages)

    def delete(self, id: str) -> None:
        self.data.pop(id, None)


def test_a_plain_protocol_store_takes_turns_through_the_defaults() -> None:
    store = PlainStore()
    agents = [create_agent(provider=FunctionProvider(lambda r: f"{len(r.messages)}"), store=store)
              for _ in range(2)]  # fmt: skip
    first, second = (agent.session("s") for agent in agents)
    assert first.send("a").text == "1"
    assert second.send("b").text == "3"  # it read the first one's turn
    assert first.send("c").text == "5"
    assert [m.text for m in store.data["s"]] == ["a", "1", "b", "3", "c", "5"]
    for agent in agents:
        agent.close()
