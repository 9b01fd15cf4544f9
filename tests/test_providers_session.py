"""A durable session turn through each HTTP provider against the local server.

The model asks for a tool that needs approval; the turn pauses; a new agent on
the same SQLite file resolves the approval; the tool runs and the final answer
arrives. A provider that fails leaves the transcript as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from provider_server import JSONReply, ProviderServer, SSEReply, sse_events

from lousho_sessions import ProviderError, create_agent, tool
from lousho_sessions.pricing import Pricing
from lousho_sessions.providers import RetryPolicy
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.openai import OpenAIProvider
from lousho_sessions.sqlite import SqliteStore

KEY = "sk-session-test-key"
FAST = RetryPolicy(max_retries=1, initial_delay=0.001, max_delay=0.002, jitter=0.0)
TOOLS_FIXTURE = {"openai": "tool_calls", "anthropic": "tool_use"}

weather_calls: list[str] = []


@tool(needs_approval=True)
def get_weather(city: str) -> str:
    """The weather in a city."""
    weather_calls.append(city)
    return f"18°C and sunny in {city}"


@tool
def get_time(zone: str) -> str:
    """The time in a time zone."""
    return f"12:00 in {zone}"


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "sessions.db")
    yield store
    store.close()


@pytest.fixture(autouse=True)
def _reset() -> None:
    weather_calls.clear()


def provider(kind: str, server: ProviderServer) -> OpenAIProvider | AnthropicProvider:
    options: dict[str, Any] = {
        "api_key": KEY,
        "retry": FAST,
        "timeout": (2.0, 2.0),
        "pricing": {"test-model": Pricing(1.0, 2.0)},
    }
    if kind == "openai":
        return OpenAIProvider("test-model", base_url=server.url + "/v1", **options)
    return AnthropicProvider("test-model", base_url=server.url, **options)


def tool_results_sent(kind: str, body: dict[str, Any]) -> dict[str, str]:
    """The tool results in a request body, by call id."""
    if kind == "openai":
        return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}
    return {
        block["tool_use_id"]: block["content"][0]["text"]
        for message in body["messages"]
        if message["role"] == "user"
        for block in message["content"]
        if block["type"] == "tool_result"
    }


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_tool_call_approval_and_resume_through_the_provider(
    kind: str, server: ProviderServer, db: SqliteStore
) -> None:
    server.reply(
        SSEReply(sse_events(kind, TOOLS_FIXTURE[kind])), SSEReply(sse_events(kind, "text"))
    )
    first_provider = provider(kind, server)
    first = create_agent(
        instructions="Be brief.", provider=first_provider, tools=[get_weather, get_time], store=db
    )
    session = first.session("trip-1")
    paused = session.send("What is the weather and time in Paris?")
    assert paused.finish_reason == "awaiting-approval"
    assert paused.approval_id
    assert weather_calls == []
    assert session.messages == ()  # the paused turn lives in its checkpoint
    assert len(server.requests) == 1
    first.close()
    first_provider.close()

    # "after a restart": a new agent on the same database resolves the approval
    second_provider = provider(kind, server)
    second = create_agent(
        instructions="Be brief.", provider=second_provider, tools=[get_weather, get_time], store=db
    )
    final = second.approvals.resolve(id=paused.approval_id, approved=True)
    assert final is not None
    assert final.finish_reason == "stop"
    assert final.text == "Hello, Ali! ☀️ How can I help?"
    assert weather_calls == ["Paris"]
    assert final.usage.input_tokens >= 1200 and final.usage.cost_usd > 0

    transcript = second.session("trip-1").load()
    assert [m.role for m in transcript] == ["user", "assistant", "tool", "tool", "assistant"]
    assert [c.name for c in transcript[1].tool_calls] == ["get_weather", "get_time"]
    assert transcript[-1].text == final.text

    assert len(server.requests) == 2
    results = tool_results_sent(kind, server.requests[1].body)
    weather_id, time_id = (c.id for c in transcript[1].tool_calls)
    assert results == {weather_id: "18°C and sunny in Paris", time_id: "12:00 in Europe/Paris"}
    second.close()
    second_provider.close()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("failure", ["401", "cut-off", "malformed"])
def test_a_failing_provider_leaves_the_transcript_unchanged(
    kind: str, failure: str, server: ProviderServer, db: SqliteStore
) -> None:
    model = provider(kind, server)
    agent = create_agent(provider=model, store=db)
    session = agent.session("s-1")
    server.reply(SSEReply(sse_events(kind, "text")))
    session.send("Hi, I am Ali.")
    before = session.load()
    assert before is not None and len(before) == 2

    if failure == "401":
        server.reply(JSONReply.fixture(kind, "error_401", 401))
    elif failure == "cut-off":
        server.reply(SSEReply(sse_events(kind, "text"), cut_after=3))
    else:
        server.reply(SSEReply(sse_events(kind, "malformed_json")))
    with pytest.raises(ProviderError) as caught:
        session.send("And again?")
    assert caught.value.retryable is (failure == "cut-off")
    assert session.load() == before
    assert session.messages == before
    agent.close()
    model.close()
