"""Tool-call arguments that are not JSON go back to the model, through both wire formats.

A real local server plays the model: its first reply calls ``get_weather`` with
arguments cut off mid-string (``{"city": "Par``). The turn does not run the tool,
answers the call with an error result naming the JSON problem, and asks the model
again; the stored transcript keeps the malformed call and reads back equal. More
malformed calls in one turn than ``MAX_MALFORMED_TOOL_CALLS`` end it with a
``ProviderError`` and leave the transcript as it was.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from provider_server import ProviderServer, SSEReply, sse_events
from provider_wires import FAST, KEY, WIRES, HttpProvider

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    ProviderError,
    ToolCall,
    create_agent,
    tool,
)
from lousho_sessions.engine._turn import MAX_MALFORMED_TOOL_CALLS
from lousho_sessions.events import ToolResultEvent
from lousho_sessions.sqlite import SqliteStore

ran: list[str] = []


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    ran.append(city)
    return f"sunny in {city}"


@pytest.fixture(autouse=True)
def _reset() -> None:
    ran.clear()


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as running:
        yield running


@pytest.fixture
def db(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "sessions.db")
    yield store
    store.close()


def _provider(kind: str, server: ProviderServer) -> HttpProvider:
    base = server.url + ("/v1" if kind == "openai" else "")
    return WIRES[kind].make_provider(
        "test-model", api_key=KEY, base_url=base, retry=FAST, timeout=(2.0, 2.0)
    )


def _sent_back(kind: str, body: dict[str, Any]) -> tuple[Any, str]:
    """The arguments of the call and the tool result the next request carries."""
    messages = body["messages"]
    if kind == "openai":
        (call,) = next(m for m in messages if m.get("tool_calls"))["tool_calls"]
        (result,) = [m for m in messages if m["role"] == "tool"]
        return call["function"]["arguments"], result["content"]
    blocks = [b for m in messages for b in m["content"] if isinstance(b, dict)]
    (call,) = [b for b in blocks if b["type"] == "tool_use"]
    (result,) = [b for b in blocks if b["type"] == "tool_result"]
    assert result["is_error"] is True
    return call["input"], result["content"][0]["text"]


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_malformed_arguments_go_back_to_the_model(
    kind: str, server: ProviderServer, db: SqliteStore
) -> None:
    server.reply(SSEReply(sse_events(kind, "bad_arguments")), SSEReply(sse_events(kind, "text")))
    model = _provider(kind, server)
    agent = create_agent(provider=model, tools=[get_weather], store=db)
    session = agent.session("s-1")
    events = list(session.stream("Weather in Paris?"))
    assert ran == []  # the tool never ran
    transcript = session.load()
    assert transcript is not None
    assert [m.role for m in transcript] == ["user", "assistant", "tool", "assistant"]
    (call,) = transcript[1].tool_calls
    assert (call.name, call.arguments, call.raw_arguments) == ("get_weather", {}, '{"city": "Par')
    error = transcript[2]
    assert error.is_error and error.tool_call_id == call.id
    assert "not valid JSON" in error.text and "Unterminated string" in error.text
    assert '{"city": "Par' in error.text and "The tool was not run" in error.text
    assert transcript[3].text == "Hello, Ali! ☀️ How can I help?"
    (tool_event,) = [e for e in events if isinstance(e, ToolResultEvent)]
    assert tool_event.is_error and tool_event.output == error.text

    assert len(server.requests) == 2
    arguments, sent = _sent_back(kind, server.requests[1].body)
    assert arguments == ("{}" if kind == "openai" else {})
    assert sent == error.text
    agent.close()
    model.close()

    reopened = SqliteStore(db.path)  # what was stored reads back equal
    try:
        assert reopened.sessions.load("s-1") == list(transcript)
    finally:
        reopened.close()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_the_model_may_retry_up_to_the_limit(
    kind: str, server: ProviderServer, db: SqliteStore
) -> None:
    bad = [SSEReply(sse_events(kind, "bad_arguments")) for _ in range(MAX_MALFORMED_TOOL_CALLS)]
    server.reply(*bad, SSEReply(sse_events(kind, "text")))
    model = _provider(kind, server)
    agent = create_agent(provider=model, tools=[get_weather], store=db)
    result = agent.session("s-1").send("Weather in Paris?")
    assert result.finish_reason == "stop"
    errors = [m for m in result.messages if m.role == "tool"]
    assert len(errors) == MAX_MALFORMED_TOOL_CALLS and all(m.is_error for m in errors)
    assert len(server.requests) == MAX_MALFORMED_TOOL_CALLS + 1
    agent.close()
    model.close()


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_one_malformed_call_too_many_ends_the_turn(
    kind: str, server: ProviderServer, db: SqliteStore
) -> None:
    server.reply(SSEReply(sse_events(kind, "text")))
    model = _provider(kind, server)
    agent = create_agent(provider=model, tools=[get_weather], store=db)
    session = agent.session("s-1")
    session.send("Hi")
    before = session.load()
    bad = [SSEReply(sse_events(kind, "bad_arguments"))] * (MAX_MALFORMED_TOOL_CALLS + 1)
    server.reply(*bad)
    with pytest.raises(ProviderError) as caught:
        session.send("Weather in Paris?")
    message = caught.value.message
    assert f"{MAX_MALFORMED_TOOL_CALLS + 1} tool calls with malformed arguments" in message
    assert "'get_weather'" in message and "not valid JSON" in message
    assert '{"city": "Par' in message
    assert caught.value.retryable is False
    assert len(server.requests) == 1 + MAX_MALFORMED_TOOL_CALLS + 1
    assert session.load() == before  # nothing of the failed turn is in the transcript
    assert ran == []

    # the checkpoint keeps the turn up to the last answered call: resuming asks again
    assert session.pending() is not None
    server.reply(SSEReply(sse_events(kind, "text")))
    resumed = session.resume()
    assert resumed is not None and resumed.finish_reason == "stop"
    errors = [m for m in resumed.messages if m.role == "tool"]
    assert len(errors) == MAX_MALFORMED_TOOL_CALLS and all(m.is_error for m in errors)
    agent.close()
    model.close()


@pytest.mark.parametrize(
    ("raw", "problem"),
    [('["Paris"]', 'not a JSON object (got array ["Paris"])'), ("{'city': 1}", "not valid JSON")],
)
def test_a_function_provider_can_send_a_malformed_call(raw: str, problem: str) -> None:
    def model(request: ModelRequest) -> Message:
        if request.messages[-1].role == "tool":
            return Message.assistant(request.messages[-1].text)
        return Message.assistant(tool_calls=[ToolCall("c1", "get_weather", raw_arguments=raw)])

    agent = create_agent(provider=FunctionProvider(model), tools=[get_weather])
    result = agent.send("Weather?")
    assert problem in result.text and repr(raw) in result.text
    assert ran == []
    agent.close()
