"""An agent with tools and reasoning on ``OpenAIResponsesProvider`` against OpenAI's rules.

Multi-step tool turns, streamed and not, sync and aio, durable (SQLite) and not;
``store=True`` continuations and their fallbacks; a durable turn killed between a
tool result and the next model call, resumed in another process.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import fork_server
import pytest
from provider_server import FIXTURES, JSONReply, ProviderServer
from responses_client import ask, make, rules, run
from responses_server import Call, ResponsesRules, Say, Think

from lousho_sessions import ReasoningPart, aio, create_agent, tool
from lousho_sessions.events import ReasoningDeltaEvent, TextDelta
from lousho_sessions.messages import Message
from lousho_sessions.sqlite import SqliteStore

__all__ = ["make", "rules"]  # fixtures, used by name


# --- an agent with tools and reasoning ---------------------------------------------

lookups: list[str] = []


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    lookups.append(city)
    return f"18°C in {city}"


def _script(rules: ResponsesRules) -> None:
    rules.reply(
        Think(["Weather first."]),
        Call("get_weather", {"city": "Paris"}),
        usage={"input": 50, "output": 20, "reasoning": 12},
    )
    rules.reply(
        Think(["Then Rome.", "Compare."]),
        Call("get_weather", {"city": "Rome"}),
        usage={"input": 90, "output": 20, "cached": 40},
    )
    rules.reply(
        Think(["Both known."]), Say("Paris 18°C, Rome 18°C."), usage={"input": 130, "output": 10}
    )


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "sqlite"])
@pytest.mark.parametrize("streamed", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_agent_completes_multi_step_tool_turns(
    rules: ResponsesRules, make: Any, tmp_path: Path, mode: str, streamed: bool, durable: bool
) -> None:
    lookups.clear()
    _script(rules)
    store = SqliteStore(tmp_path / "s.db") if durable else None
    provider = make()
    events: list[Any] = []
    try:
        if mode == "sync":
            agent = create_agent(
                instructions="Be brief.", provider=provider, tools=[get_weather], store=store
            )
            session = agent.session("trip")
            if streamed:
                turn = session.stream("Weather in Paris and Rome?")
                events = list(turn)
                result = turn.result()
            else:
                result = session.send("Weather in Paris and Rome?")
            transcript = session.load()
            agent.close()
        else:

            async def main() -> Any:
                agent = aio.create_agent(
                    instructions="Be brief.", provider=provider, tools=[get_weather], store=store
                )
                session = agent.session("trip")
                if streamed:
                    turn = session.stream("Weather in Paris and Rome?")
                    events.extend([e async for e in turn])
                    out = await turn.result()
                else:
                    out = await session.send("Weather in Paris and Rome?")
                loaded = await session.load()
                agent.close()
                return out, loaded

            result, transcript = asyncio.run(main())
    finally:
        if store is not None:
            store.close()
    assert rules.refused == []
    assert result.text == "Paris 18°C, Rome 18°C."
    assert lookups == ["Paris", "Rome"]
    assert [m.role for m in transcript] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    reasoning = [p for m in transcript for p in m.content if isinstance(p, ReasoningPart)]
    assert [p.id in rules.encrypted and p.data == rules.encrypted[p.id] for p in reasoning] == [
        True
    ] * 3
    assert transcript[3].reasoning == "Then Rome.\n\nCompare."
    assert result.usage.reasoning_tokens == 12 and result.usage.cache_read_tokens == 40
    # the last call carried both earlier reasoning items before their calls
    types = [i["type"] for i in rules.server.requests[2].body["input"]]
    assert types == ["message", "reasoning", "function_call", "function_call_output"] * 1 + [
        "reasoning", "function_call", "function_call_output"
    ]  # fmt: skip
    if streamed:
        shown = "".join(e.text for e in events if isinstance(e, ReasoningDeltaEvent))
        assert shown == "Weather first.Then Rome.\n\nCompare.Both known."
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == result.text


# --- store=True: continuing a stored response -----------------------------------------


def test_stored_responses_are_continued_with_only_the_new_items(
    rules: ResponsesRules, make: Any
) -> None:
    lookups.clear()
    _script(rules)
    provider = make(store=True)
    agent = create_agent(provider=provider, tools=[get_weather])
    result = agent.session("s").send("Weather in Paris and Rome?")
    agent.close()
    assert result.text == "Paris 18°C, Rome 18°C." and rules.refused == []
    first, second, third = (r.body for r in rules.server.requests)
    assert "previous_response_id" not in first and first["store"] is True
    assert second["previous_response_id"] in rules.stored
    assert [i["type"] for i in second["input"]] == ["function_call_output"]
    assert [i["type"] for i in third["input"]] == ["function_call_output"]
    assert second["instructions"] == first["instructions"] if "instructions" in first else True


def test_an_expired_stored_response_falls_back_to_the_whole_transcript(
    rules: ResponsesRules, make: Any
) -> None:
    lookups.clear()
    _script(rules)
    provider = make(store=True)
    agent = create_agent(provider=provider, tools=[get_weather])
    session = agent.session("s")
    original = rules.route

    def expire_then_route(recorded: Any) -> Any:
        previous = recorded.body.get("previous_response_id")
        if previous:
            rules.forget(previous)
        return original(recorded)

    rules.server.route = expire_then_route
    result = session.send("Weather in Paris and Rome?")
    agent.close()
    assert result.text == "Paris 18°C, Rome 18°C."
    bodies = [r.body for r in rules.server.requests]
    assert [("previous_response_id" in b) for b in bodies] == [False, True, False, True, False]
    assert [s for s, _ in rules.refused] == [400, 400]
    assert [i["type"] for i in bodies[2]["input"]] == [
        "message",
        "reasoning",
        "function_call",
        "function_call_output",
    ]


def test_a_changed_transcript_is_sent_whole(rules: ResponsesRules, make: Any) -> None:
    provider = make(store=True)
    rules.reply(Think(["a"]), Say("first"))
    rules.reply(Say("second"))
    rules.reply(Say("third"))
    user = Message.user("one")
    _, first = run(provider, ask(user))
    body = provider.build_body(ask(user, first.message, Message.user("two")))
    assert body["previous_response_id"] and [i["role"] for i in body["input"]] == ["user"]
    edited = Message.user("ONE")  # an edit before the stored response: it no longer matches
    body = provider.build_body(ask(edited, first.message, Message.user("two")))
    assert "previous_response_id" not in body and len(body["input"]) == 4
    plain = make()  # store=False never continues
    assert "previous_response_id" not in plain.build_body(
        ask(user, first.message, Message.user("two"))
    )


def test_not_found_error_fixture_is_what_fallback_reads(server: ProviderServer, make: Any) -> None:
    text = (FIXTURES / "responses" / "previous_not_found.json").read_text()
    provider = make(store=True)
    rules = ResponsesRules(server)
    rules.reply(Say("first"))
    user = Message.user("one")
    _, first = run(provider, ask(user))
    rules.reply_raw(JSONReply(400, text))
    rules.reply(Say("again"))
    _, second = run(provider, ask(user, first.message, Message.user("two")))
    assert second.message.text == "again"
    assert [("previous_response_id" in r.body) for r in server.requests] == [False, True, False]


# --- durable: killed in the model call after a tool result ---------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_killed_turn_resumes_elsewhere_and_replays_the_reasoning_byte_for_byte(
    kind: str, rules: ResponsesRules, tmp_path: Path
) -> None:
    if kind == "postgres":
        from services_pg import drop_schema, require_postgres, schema_for

        require_postgres()
        where = schema_for(tmp_path)
    else:
        where = str(tmp_path)
    rules.reply(Think(["Need the weather."]), Call("lookup", {"city": "Paris"}))
    rules.reply(Think(["It is mild."]), Say("18°C in Paris."))  # lost: the child dies reading it
    rules.reply(Think(["It is mild."]), Say("18°C in Paris."))  # for the resumed turn
    logfile = tmp_path / "log.txt"
    child = [str(Path(__file__).parent / "responses_crash_child.py")]
    args = [kind, where, rules.server.url + "/v1", str(logfile)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        first = fork_server.run(
            [*child, "turn", *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert first.returncode == -signal.SIGKILL, first.stderr
        assert len(rules.server.requests) == 2  # killed in the next model call
        second = fork_server.run(
            [*child, "resume", *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert second.returncode == 0, second.stderr
    finally:
        if kind == "postgres":
            drop_schema(where)
    outcome = json.loads(second.stdout)
    assert outcome["text"] == "18°C in Paris."
    assert logfile.read_text().splitlines() == ["lookup Paris"]  # the tool ran once
    assert rules.refused == []
    assert len(rules.server.requests) == 3
    follow_up = rules.server.requests[2].body  # the resumed turn's
    [sent] = [i for i in follow_up["input"] if i["type"] == "reasoning"]
    issued = outcome["reasoning"][0]
    assert sent["id"] == issued["id"] and sent["encrypted_content"] == rules.encrypted[issued["id"]]
    assert [r["data"] == rules.encrypted[r["id"]] for r in outcome["reasoning"]] == [True, True]
