"""An agent with tools and thinking on ``GeminiProvider`` against the Gemini API's rules.

Multi-step tool turns (parallel, then sequential calls), streamed and not, sync and aio,
durable (SQLite) and not, against the enforcing loopback server; switching families
mid-session; typed output; a durable turn killed between a tool result and the next
model call, resumed in another process with the same signatures byte for byte.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import fork_server
import pytest
from gemini_rules import Call, GeminiRules, Say, Think
from provider_server import ProviderServer

from lousho_sessions import FunctionProvider, ReasoningPart, aio, create_agent, tool
from lousho_sessions.events import ReasoningDeltaEvent, TextDelta
from lousho_sessions.messages import Message
from lousho_sessions.providers import GeminiProvider, RetryPolicy
from lousho_sessions.sqlite import SqliteStore

MODEL = "gemini-3-pro-preview"
lookups: list[str] = []


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    lookups.append(city)
    return f"18°C in {city}"


@pytest.fixture
def rules() -> Iterator[GeminiRules]:
    rules = GeminiRules()
    with ProviderServer(rules=rules) as server:
        rules.server = server  # type: ignore[attr-defined]
        yield rules
    assert rules.invalid == []  # every body validated against the google-genai types


def make(rules: GeminiRules) -> GeminiProvider:
    server: ProviderServer = rules.server  # type: ignore[attr-defined]
    fast = RetryPolicy(max_retries=0)
    return GeminiProvider(MODEL, api_key="AIza-test", base_url=server.url, retry=fast)


def script(rules: GeminiRules) -> None:
    rules.reply(
        Think("Both cities at once."),
        Call("get_weather", {"city": "Paris"}),
        Call("get_weather", {"city": "Rome"}),
        usage={"input": 50, "output": 20, "thoughts": 12},
    )
    rules.reply(
        Think("Oslo too, to compare."),
        Call("get_weather", {"city": "Oslo"}),
        usage={"input": 90, "output": 20, "cached": 40},
    )
    rules.reply(
        Think("All known.", signed=True),
        Say("Paris, Rome and Oslo: 18°C."),
        text_signature="last",
        usage={"input": 130, "output": 10},
    )


@pytest.mark.parametrize("durable", [False, True], ids=["memory", "sqlite"])
@pytest.mark.parametrize("streamed", [False, True], ids=["send", "stream"])
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_agent_completes_multi_step_tool_turns(
    rules: GeminiRules, tmp_path: Path, mode: str, streamed: bool, durable: bool
) -> None:
    lookups.clear()
    script(rules)
    store = SqliteStore(tmp_path / "s.db") if durable else None
    options: dict[str, Any] = {
        "instructions": "Be brief.",
        "provider": make(rules),
        "tools": [get_weather],
        "store": store,
        "settings": {"thinking": {"thinking_level": "low"}},
    }
    events: list[Any] = []
    if mode == "sync":
        agent = create_agent(**options)
        session = agent.session("trip")
        if streamed:
            turn = session.stream("Weather in Paris, Rome and Oslo?")
            events = list(turn)
            result = turn.result()
        else:
            result = session.send("Weather in Paris, Rome and Oslo?")
        transcript = session.load()
        agent.close()
    else:

        async def main() -> tuple[Any, tuple[Message, ...]]:
            async with aio.create_agent(**options) as agent:
                session = agent.session("trip")
                if streamed:
                    turn = session.stream("Weather in Paris, Rome and Oslo?")
                    events.extend([e async for e in turn])
                    result = await turn.result()
                else:
                    result = await session.send("Weather in Paris, Rome and Oslo?")
                return result, await session.load()

        result, transcript = asyncio.run(main())
    if store is not None:
        store.close()
    assert rules.refusals == []
    assert result.text == "Paris, Rome and Oslo: 18°C."
    assert result.steps == 3 and lookups == ["Paris", "Rome", "Oslo"]
    assert result.usage.reasoning_tokens == 12 and result.usage.cache_read_tokens == 40
    if streamed:
        thought = "".join(e.text for e in events if isinstance(e, ReasoningDeltaEvent))
        assert thought == "Both cities at once.Oslo too, to compare.All known."
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == result.text
    # every signature the server sent is in the transcript, on its part
    kept = [p.signature for m in transcript for p in m.content if isinstance(p, ReasoningPart)]
    kept += [c.extra.get("thought_signature") for m in transcript for c in m.tool_calls]
    kept += [p.extra.get("thought_signature") for m in transcript for p in m.content]
    assert set(rules.issued) <= set(kept)
    # the last request carried both earlier model turns, signatures in place
    server: ProviderServer = rules.server  # type: ignore[attr-defined]
    contents = server.requests[-1].body["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user", "model", "user"]
    first_step = [p for p in contents[1]["parts"] if "functionCall" in p]
    assert ["thoughtSignature" in p for p in first_step] == [True, False]  # parallel calls


def test_a_turn_fails_on_the_enforcing_server_when_signatures_are_dropped(
    rules: GeminiRules, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent test above is not vacuous: a provider that drops the signatures (as a
    transcript without them would) is refused by the server, as by the API."""
    from lousho_sessions.providers import _gemini_contents

    monkeypatch.setattr(_gemini_contents, "_signed", lambda part, signature: part)
    script(rules)
    agent = create_agent(provider=make(rules), tools=[get_weather], settings={"thinking": True})
    with pytest.raises(Exception, match=r"missing a thought_signature|Corrupted thought signature"):
        agent.session("trip").send("Weather in Paris, Rome and Oslo?")
    agent.close()
    assert rules.refusals


def test_switching_families_mid_session_keeps_working(rules: GeminiRules) -> None:
    rules.reply(Think("Paris."), Call("get_weather", {"city": "Paris"}))
    rules.reply(Say("18°C in Paris."))
    rules.reply(Say("Still 18°C."))
    gemini = make(rules)
    other_seen: list[Any] = []

    def other_model(request: Any) -> str:
        other_seen.append(request)
        return "From the other model."

    agent = create_agent(provider=gemini, tools=[get_weather], settings={"thinking": True})
    session = agent.session("switch")
    assert session.send("Weather in Paris?").text == "18°C in Paris."
    other = create_agent(provider=FunctionProvider(other_model), store=agent.store)
    assert other.session("switch").send("And now?").text == "From the other model."
    assert session.send("And again?").text == "Still 18°C."
    assert rules.refusals == []
    [seen] = other_seen
    model_turns = [m for m in seen.messages if m.role == "assistant"]
    assert any(isinstance(p, ReasoningPart) for m in model_turns for p in m.content)
    agent.close()
    other.close()


def test_typed_output_on_gemini(rules: GeminiRules) -> None:
    @attrs.frozen
    class Forecast:
        city: str
        celsius: int

    rules.reply(Say('{"city": "Paris", "celsius": 18}'))
    agent = create_agent(provider=make(rules))
    result = agent.session("typed").send("Paris?", output_type=Forecast)
    assert result.output == Forecast("Paris", 18)
    server: ProviderServer = rules.server  # type: ignore[attr-defined]
    config = server.requests[0].body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    assert config["responseSchema"]["propertyOrdering"] == ["city", "celsius"]
    agent.close()


# --- durable: killed in the model call after a tool result ---------------------------


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_killed_turn_resumes_elsewhere_and_replays_the_signatures_byte_for_byte(
    kind: str, rules: GeminiRules, tmp_path: Path
) -> None:
    if kind == "postgres":
        from services_pg import drop_schema, require_postgres, schema_for

        require_postgres()
        where = schema_for(tmp_path)
    else:
        where = str(tmp_path)
    rules.reply(Think("Need the weather."), Call("lookup", {"city": "Paris"}))
    rules.reply(Think("It is mild."), Say("18°C in Paris."))  # lost: the child dies reading it
    rules.reply(Think("It is mild."), Say("18°C in Paris."))  # for the resumed turn
    server: ProviderServer = rules.server  # type: ignore[attr-defined]
    logfile = tmp_path / "log.txt"
    child = [str(Path(__file__).parent / "gemini_crash_child.py")]
    args = [kind, where, server.url, str(logfile)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    try:
        first = fork_server.run(
            [*child, "turn", *args], capture_output=True, text=True, env=env, timeout=120
        )
        assert first.returncode == -signal.SIGKILL, first.stderr
        assert len(server.requests) == 2  # killed in the next model call
        lost = set(rules.issued)  # with the lost answer's, which no one saw
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
    assert rules.refusals == []
    [call_signature] = [s for s in rules.issued if rules.issued[s][0] == "call"]
    assert len(server.requests) == 3
    follow_up = server.requests[2].body["contents"]  # the resumed turn's
    [sent] = [p for p in follow_up[1]["parts"] if "functionCall" in p]
    assert sent["thoughtSignature"] == call_signature  # byte for byte, from the other process
    assert {call_signature, *(set(rules.issued) - lost)} <= set(outcome["signatures"])
