"""Tools (SPEC 6): schema from hints, errors to the model, parallel steps, context, max_steps."""

from __future__ import annotations

import enum
import threading
from typing import Literal

import pytest
from helpers import WAIT, calls

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    ScriptedProvider,
    ToolContext,
    create_agent,
    tool,
)
from lousho_sessions.tools import json_schema


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def test_schema_from_hints_and_docstring() -> None:
    @tool
    def search(
        query: str,
        limit: int = 5,
        kind: Literal["web", "news"] = "web",
        tags: list[str] | None = None,
    ) -> str:
        """Search the web.

        Args:
            query: What to look for.
            limit: How many results.
        """
        return query

    assert search.name == "search"
    assert search.description == "Search the web."
    props = search.parameters["properties"]
    assert props["query"] == {"type": "string", "description": "What to look for."}
    assert props["limit"] == {"type": "integer", "description": "How many results.", "default": 5}
    assert props["kind"]["enum"] == ["web", "news"]
    assert props["tags"]["anyOf"][0] == {"type": "array", "items": {"type": "string"}}
    assert search.parameters["required"] == ["query"]
    assert json_schema(Color) == {"enum": ["red", "blue"]}
    assert json_schema(dict[str, float]) == {
        "type": "object",
        "additionalProperties": {"type": "number"},
    }


def test_context_parameter_is_not_in_schema() -> None:
    @tool(name="ctx_tool", description="Uses context")
    def with_ctx(ctx: ToolContext, x: int) -> str:
        return ctx.idempotency_key

    assert with_ctx.takes_context and list(with_ctx.parameters["properties"]) == ["x"]
    assert with_ctx.description == "Uses context"


def test_unsupported_hint_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="cannot describe type"):

        @tool
        def bad(x: object) -> str:
            """Bad."""
            return ""


def test_invalid_tool_name() -> None:
    with pytest.raises(ValueError, match="invalid tool name"):
        tool(name="has space")(lambda: "x")


def test_raising_tool_gives_model_an_error_result() -> None:
    @tool
    def fails() -> str:
        """Always fails."""
        raise ValueError("no such file")

    provider = ScriptedProvider([calls(("fails", {})), "recovered"])
    session = create_agent(provider=provider, tools=[fails]).session()
    result = session.send("try")
    assert result.text == "recovered"
    tool_message = provider.calls[1].messages[-1]
    assert tool_message.role == "tool" and tool_message.is_error
    assert "no such file" in tool_message.text


def test_unknown_tool_and_bad_arguments_are_error_results() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add."""
        return a + b

    provider = ScriptedProvider([calls(("nope", {}), ("add", {"a": 1})), "ok"])
    result = create_agent(provider=provider, tools=[add]).session().send("x")
    results = [m for m in result.messages if m.role == "tool"]
    assert [m.is_error for m in results] == [True, True]
    assert "unknown tool 'nope'" in results[0].text
    assert "TypeError" in results[1].text


def test_tools_of_one_step_run_in_parallel_results_in_call_order() -> None:
    barrier = threading.Barrier(3, timeout=WAIT)

    @tool
    def work(n: int) -> str:
        """Waits for the other two calls: passes only if all three run at once."""
        barrier.wait()
        return f"done {n}"

    provider = ScriptedProvider(
        [calls(("work", {"n": 1}), ("work", {"n": 2}), ("work", {"n": 3})), "all done"]
    )
    result = create_agent(provider=provider, tools=[work]).session().send("go")
    outputs = [m.text for m in result.messages if m.role == "tool"]
    assert outputs == ["done 1", "done 2", "done 3"]
    ids = [m.tool_call_id for m in result.messages if m.role == "tool"]
    assert ids == ["c0", "c1", "c2"]


def test_tool_context_values() -> None:
    seen: list[ToolContext] = []

    @tool
    def probe(ctx: ToolContext) -> str:
        """Record the context."""
        seen.append(ctx)
        return "ok"

    provider = ScriptedProvider([calls(("probe", {})), "done"])
    session = create_agent(provider=provider, tools=[probe]).session("ctx-session")
    result = session.send("go")
    (ctx,) = seen
    assert ctx.session_id == "ctx-session" and ctx.run_id == result.run_id and ctx.call_id == "c0"
    assert ctx.idempotency_key == f"{result.run_id}:c0"
    assert not ctx.signal.aborted


def test_non_string_results_are_json() -> None:
    @tool
    def info() -> dict[str, int]:
        """Info."""
        return {"a": 1}

    provider = ScriptedProvider([calls(("info", {})), "ok"])
    result = create_agent(provider=provider, tools=[info]).session().send("x")
    assert [m.text for m in result.messages if m.role == "tool"] == ['{"a": 1}']


def test_plain_callables_become_tools() -> None:
    def shout(text: str) -> str:
        """Upper-case the text."""
        return text.upper()

    provider = ScriptedProvider([calls(("shout", {"text": "hi"})), "ok"])
    agent = create_agent(provider=provider, tools=[shout])
    assert agent.tools["shout"].description == "Upper-case the text."
    result = agent.send("x")
    assert [m.text for m in result.messages if m.role == "tool"] == ["HI"]


def test_max_steps_stops_a_tool_loop() -> None:
    @tool
    def again() -> str:
        """Loop."""
        return "more"

    model = FunctionProvider(lambda r: calls(("again", {})))
    session = create_agent(provider=model, tools=[again], max_steps=3).session()
    result = session.send("loop")
    assert result.finish_reason == "max-steps" and result.steps == 3
    stored = session.load()
    # never a tool call without its result
    assert stored[-1].role == "tool"
    assert_tool_calls_answered(stored)


def assert_tool_calls_answered(messages: tuple[Message, ...]) -> None:
    open_calls: set[str] = set()
    for m in messages:
        if m.role == "assistant":
            assert not open_calls, f"unanswered tool calls {open_calls}"
            open_calls = {c.id for c in m.tool_calls}
        elif m.role == "tool":
            open_calls.discard(m.tool_call_id or "")
        elif m.role == "user":
            assert not open_calls, f"unanswered tool calls {open_calls}"
    assert not open_calls


def test_abort_reaches_running_tool() -> None:
    started = threading.Event()
    saw_abort = threading.Event()

    @tool
    def slow(ctx: ToolContext) -> str:
        """Waits for abort."""
        started.set()
        if ctx.signal.wait(WAIT):
            saw_abort.set()
        return "late"

    provider = ScriptedProvider([calls(("slow", {})), "never"])
    session = create_agent(provider=provider, tools=[slow]).session()
    run = session.stream("go")
    assert started.wait(WAIT)
    run.abort()
    assert run.result(WAIT).finish_reason == "aborted"
    assert saw_abort.is_set()
    assert session.load() == ()


def test_duplicate_tool_names_refused() -> None:
    def a() -> str:
        """A."""
        return ""

    with pytest.raises(ValueError, match="two tools are named 'a'"):
        create_agent(tools=[a, tool(a)])


def test_request_lists_tool_specs() -> None:
    seen: list[ModelRequest] = []

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    def model(request: ModelRequest) -> str:
        seen.append(request)
        return "ok"

    create_agent(provider=FunctionProvider(model), tools=[ping]).send("x")
    assert [t.name for t in seen[0].tools] == ["ping"] and seen[0].tools[0].description == "Ping."
