"""Everyday defaults that must not surprise: one memory store per agent, what ``send(session_id=)`` is."""

from __future__ import annotations

from helpers import echo_provider

from lousho_sessions import create_agent, memory_store


def test_one_agent_without_a_store_keeps_one_conversation_per_id() -> None:
    agent = create_agent(provider=echo_provider())
    agent.session("u1").send("a")  # the Session object is dropped at once, as in a handler
    assert agent.session("u1").send("b").text == "3:b"  # it saw a, its answer, and b
    first, second = agent.session("u1"), agent.session("u1")
    first.send("c")
    assert second.send("d").text == "7:d"
    assert [m.text for m in second.load() if m.role == "user"] == ["a", "b", "c", "d"]
    assert agent.session("u2").send("x").text == "1:x"  # other ids stay apart
    assert create_agent(provider=echo_provider()).session("u1").load() == ()  # so do agents
    agent.close()


def test_a_store_given_to_the_session_still_wins() -> None:
    agent = create_agent(provider=echo_provider())
    agent.session("u1").send("a")
    own = memory_store()
    assert agent.session("u1", store=own).send("b").text == "1:b"
    kept = agent.store.sessions
    assert kept is not None and len(kept.load("u1") or []) == 2
    agent.close()


def test_send_with_a_session_id_neither_reads_nor_writes_that_session() -> None:
    for store in (None, memory_store()):
        agent = create_agent(provider=echo_provider(), store=store)
        session = agent.session("u1")
        session.send("a")
        before = session.load()
        assert agent.send("b", session_id="u1").text == "1:b"  # an empty history
        assert session.load() == before
        assert agent.session("u1").load() == before
        agent.close()
