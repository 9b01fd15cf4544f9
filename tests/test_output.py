"""Typed output (``output_type``): every supported type on every wire, sync and aio,
streamed and not; repair rounds; the final failure; what each wire is asked.

The wires: a ``FunctionProvider`` (the model boundary), and the OpenAI, Anthropic and
Gemini providers against the loopback server (tests/provider_server.py), which answers with
the events each vendor streams for a structured answer (tests/output_cases.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from typing import Any, Literal

import pytest
from gemini_rules import check_request
from output_cases import (
    BAD_BILL,
    BAD_PROBLEM,
    CASES,
    GOOD_BILL,
    REPLIES,
    Bill,
    Case,
    Contact,
    Item,
    scripted,
)
from provider_server import ProviderServer
from provider_wires import WIRES, provider_factory
from typing_extensions import assert_type

from lousho_sessions import (
    Agent,
    AgentRun,
    ExecutionResult,
    ModelRequest,
    OutputValidationError,
    Provider,
    ToolDefinitionError,
    create_agent,
)
from lousho_sessions.aio import AsyncAgent
from lousho_sessions.events import RunDone, StepStart, TextDelta
from lousho_sessions.providers import GeminiProvider

WIRE_NAMES = ["function", "openai", "anthropic", "gemini"]
MODES = ["sync-send", "sync-stream", "aio-send", "aio-stream"]


@contextlib.contextmanager
def agent_on(
    wire: str, server: ProviderServer, *texts: str, **options: Any
) -> Iterator[tuple[Agent, list[ModelRequest]]]:
    """An agent whose model answers ``texts`` in order on ``wire``."""
    seen: list[ModelRequest] = []
    with contextlib.ExitStack() as stack:
        provider: Provider
        if wire == "function":
            provider = scripted(*texts, seen=seen)
        elif wire == "gemini":  # not in provider_wires.WIRES: its own provider here
            server.reply(*(REPLIES[wire](t) for t in texts))
            stack.callback(_check_gemini_bodies, server)
            provider = stack.enter_context(
                GeminiProvider("test-model", api_key="AIza-test", base_url=server.url)
            )
        else:
            server.reply(*(REPLIES[wire](t) for t in texts))
            provider = stack.enter_context(provider_factory(WIRES[wire], server))()
        agent = create_agent(provider=provider, **options)
        stack.callback(agent.close)
        yield agent, seen


def _check_gemini_bodies(server: ProviderServer) -> None:
    for recorded in server.requests:
        check_request(recorded.body)  # against the google-genai types


def turn(agent: Agent, mode: str, text: str, **options: Any) -> tuple[ExecutionResult, str]:
    """One session turn in ``mode``; its result and, when streamed, the text deltas joined."""
    session = agent.session("s1")
    if mode == "sync-send":
        return session.send(text, **options), ""
    if mode == "sync-stream":
        run = session.stream(text, **options)
        events = list(run)
        assert isinstance(events[-1], RunDone)
        return run.result(), "".join(e.text for e in events if isinstance(e, TextDelta))

    async def main() -> tuple[ExecutionResult, str]:
        asession = AsyncAgent(agent).session("s1")
        if mode == "aio-send":
            return await asession.send(text, **options), ""
        arun = asession.stream(text, **options)
        deltas = [e.text async for e in arun if isinstance(e, TextDelta)]
        return await arun.result(), "".join(deltas)

    return asyncio.run(main())


def fails(agent: Agent, mode: str, text: str, **options: Any) -> OutputValidationError:
    with pytest.raises(OutputValidationError) as caught:
        turn(agent, mode, text, **options)
    return caught.value


# -- every type, every wire, every mode ---------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wire", WIRE_NAMES)
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_every_type_on_every_wire(case: Case, wire: str, mode: str, server: ProviderServer) -> None:
    answer = json.dumps(case.answer)
    with agent_on(wire, server, answer) as (agent, _):
        result, streamed = turn(agent, mode, "answer please", output_type=case.type)
    assert result.output == case.expected
    assert type(result.output) is type(case.expected)
    assert result.text == answer  # the raw text is kept
    assert result.finish_reason == "stop"
    if mode.endswith("stream"):
        assert streamed == answer  # the answer streams as text, on every wire


def test_the_agents_output_type_is_the_default(server: ProviderServer) -> None:
    texts = ('{"value": 3}', '{"value": "free"}')
    with agent_on("function", server, *texts, output_type=int) as (agent, _):
        assert agent.session("a").send("n?").output == 3
        assert agent.session("b").send("n?", output_type=str).output == "free"  # the call's wins


def test_without_output_type_output_is_none_and_nothing_is_asked() -> None:
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> str:
        seen.append(request)
        return "hello"

    from lousho_sessions import FunctionProvider

    with create_agent(provider=FunctionProvider(model)) as agent:
        result = agent.session().send("hi")
    assert result.output is None and result.text == "hello"
    assert seen[0].output_schema is None


# -- what each wire is asked --------------------------------------------------------


def test_openai_is_asked_for_strict_json_schema(server: ProviderServer) -> None:
    with agent_on("openai", server, json.dumps(GOOD_BILL)) as (agent, _):
        agent.session().send("bill", output_type=Bill)
    body = server.requests[0].body
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema"
    spec = fmt["json_schema"]
    assert spec["name"] == "Bill" and spec["strict"] is True
    item = spec["schema"]["properties"]["items"]["items"]
    # strict mode: every property required, optional ones nullable, no defaults
    assert item["required"] == ["name", "price", "note", "qty"]
    assert item["additionalProperties"] is False
    assert item["properties"]["qty"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert "default" not in json.dumps(spec["schema"])
    assert spec["schema"]["required"] == ["items", "total", "paid"]


def test_openai_gets_a_schema_strict_mode_cannot_take_as_not_strict(
    server: ProviderServer,
) -> None:
    with agent_on("openai", server, '{"value": {"a": 1}}') as (agent, _):
        result = agent.session().send("map", output_type=dict[str, int])
    assert result.output == {"a": 1}
    spec = server.requests[0].body["response_format"]["json_schema"]
    assert spec["strict"] is False
    assert spec["schema"]["properties"]["value"]["additionalProperties"] == {"type": "integer"}


def test_a_response_format_in_settings_wins(server: ProviderServer) -> None:
    mine = {"type": "json_object"}
    with agent_on("openai", server, '{"value": 1}', settings={"response_format": mine}) as (
        agent,
        _,
    ):
        assert agent.session().send("n", output_type=int).output == 1
    assert server.requests[0].body["response_format"] == mine


def test_anthropic_is_made_to_call_the_final_output_tool(server: ProviderServer) -> None:
    with agent_on("anthropic", server, json.dumps(GOOD_BILL)) as (agent, _):
        result = agent.session().send("bill", output_type=Bill)
    assert result.output == Bill([Item("a", 1.0)], 1.0)
    body = server.requests[0].body
    assert body["tool_choice"] == {"type": "tool", "name": "final_output"}
    [output_tool] = body["tools"]
    assert output_tool["name"] == "final_output"
    assert output_tool["input_schema"]["required"] == ["items", "total"]
    assert result.messages[-1].tool_calls == ()  # the tool's input is the answer's text


def test_anthropic_with_tools_of_its_own_must_call_some_tool(server: ProviderServer) -> None:
    from lousho_sessions import tool

    @tool
    def price(name: str) -> float:
        """The price of a thing."""
        return 1.0

    with agent_on("anthropic", server, '{"value": 1.5}', tools=[price]) as (agent, _):
        agent.session().send("n", output_type=float)
    body = server.requests[0].body
    assert body["tool_choice"] == {"type": "any"}
    assert [t["name"] for t in body["tools"]] == ["price", "final_output"]


def test_anthropic_with_thinking_is_not_forced(server: ProviderServer) -> None:
    thinking = {"type": "enabled", "budget_tokens": 1024}
    with agent_on("anthropic", server, '{"value": 2}', settings={"thinking": thinking}) as (
        agent,
        _,
    ):
        assert agent.session().send("n", output_type=int).output == 2
    assert "tool_choice" not in server.requests[0].body


def test_anthropic_refuses_a_tool_named_like_the_output_tool(server: ProviderServer) -> None:
    from lousho_sessions import ProviderError, tool

    @tool
    def final_output(x: int) -> int:
        """Clashes."""
        return x

    with (
        agent_on("anthropic", server, tools=[final_output]) as (agent, _),
        pytest.raises(ProviderError, match="final_output"),
    ):
        agent.session().send("n", output_type=int)
    assert server.requests == []


def test_the_function_provider_gets_the_schema() -> None:
    seen: list[ModelRequest] = []
    with create_agent(provider=scripted('{"value": ["a"]}', seen=seen)) as agent:
        agent.session().send("x", output_type=list[Literal["a", "b"]])
    schema = seen[0].output_schema
    assert schema is not None and schema.name == "output" and schema.strict
    assert schema.schema["properties"]["value"] == {"type": "array", "items": {"enum": ["a", "b"]}}


def test_a_records_docstring_describes_the_output() -> None:
    seen: list[ModelRequest] = []
    with create_agent(provider=scripted('{"name": "a", "price": 1}', seen=seen)) as agent:
        agent.session().send("x", output_type=Item)
    assert seen[0].output_schema is not None
    assert seen[0].output_schema.description == "A line of a bill."


# -- repair rounds and the final failure ----------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wire", WIRE_NAMES)
def test_a_bad_reply_gets_a_repair_round(wire: str, mode: str, server: ProviderServer) -> None:
    bad, good = json.dumps(BAD_BILL), json.dumps(GOOD_BILL)
    with agent_on(wire, server, bad, good) as (agent, seen):
        result, _ = turn(agent, mode, "bill", output_type=Bill)
        stored = agent.session("s1").load()
    assert result.output == Bill([Item("a", 1.0)], 1.0)
    assert result.text == good
    assert result.steps == 2
    # the repair is part of the transcript: input, bad answer, repair, good answer
    roles = [(m.role, m.text[:20]) for m in result.messages]
    assert roles == [
        ("user", "bill"),
        ("assistant", bad[:20]),
        ("user", roles[2][1]),
        ("assistant", good[:20]),
    ]
    repair = result.messages[2]
    assert BAD_PROBLEM in repair.text and repair.metadata == {"output_repair": True}
    assert [m.id for m in stored] == [m.id for m in result.messages]
    # the model saw the problem, with its path
    if wire == "function":
        assert BAD_PROBLEM in seen[1].messages[-1].text
    elif wire == "gemini":
        parts = server.requests[1].body["contents"][-1]["parts"]
        assert any(BAD_PROBLEM in p.get("text", "") for p in parts)
    else:
        content = server.requests[1].body["messages"][-1]["content"]
        texts = [content] if isinstance(content, str) else [b["text"] for b in content]
        assert any(BAD_PROBLEM in t for t in texts)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("wire", WIRE_NAMES)
def test_a_reply_that_never_fits_fails_naming_the_path(
    wire: str, mode: str, server: ProviderServer
) -> None:
    bad = json.dumps(BAD_BILL)
    with agent_on(wire, server, bad, "not json at all") as (agent, _):
        error = fails(agent, mode, "bill", output_type=Bill)
        assert agent.session("s1").load() == ()  # a failed turn leaves the transcript alone
    assert error.path == "$"
    assert "not valid JSON" in str(error) and error.text == "not json at all"
    assert error.code == "LOUSHO_OUTPUT_INVALID"
    assert isinstance(error, ValueError)


def test_the_final_failure_names_the_failing_path() -> None:
    bad = json.dumps(BAD_BILL)
    with (
        create_agent(provider=scripted(bad, bad), output_retries=1) as agent,
        pytest.raises(OutputValidationError) as caught,
    ):
        agent.session().send("bill", output_type=Bill)
    assert caught.value.path == "$.items[2].price"
    assert caught.value.problems == (BAD_PROBLEM,)
    assert BAD_PROBLEM in str(caught.value)


@pytest.mark.parametrize("retries", [0, 2])
def test_output_retries_bounds_the_repair_rounds(retries: int) -> None:
    bad = json.dumps(BAD_BILL)
    seen: list[ModelRequest] = []
    provider = scripted(*[bad] * (retries + 1), seen=seen)
    with (
        create_agent(provider=provider, output_retries=retries) as agent,
        pytest.raises(OutputValidationError),
    ):
        agent.session().send("bill", output_type=Bill)
    assert len(seen) == retries + 1


def test_a_wrapped_type_needs_its_wrapper() -> None:
    with create_agent(provider=scripted("[1, 2]", '{"value": [1, 2]}')) as agent:
        result = agent.session().send("n", output_type=list[int])
    assert result.output == [1, 2]
    assert '$: expected an object {"value": ...}' in result.messages[2].text


def test_a_fenced_answer_is_read() -> None:
    with create_agent(provider=scripted('```json\n{"value": 4}\n```')) as agent:
        assert agent.session().send("n", output_type=int).output == 4


def test_unknown_fields_and_wrong_types_are_each_named() -> None:
    reply = '{"name": 3, "price": 1, "colour": "red"}'
    with (
        create_agent(provider=scripted(reply), output_retries=0) as agent,
        pytest.raises(OutputValidationError) as caught,
    ):
        agent.session().send("n", output_type=Item)
    assert "$.name: expected string, got integer 3" in caught.value.problems
    assert any("unknown fields: colour" in p for p in caught.value.problems)


def test_a_repair_round_is_a_model_step_and_counts_against_max_steps() -> None:
    with create_agent(provider=scripted(json.dumps(BAD_BILL)), max_steps=1) as agent:
        result = agent.session().send("bill", output_type=Bill)
    assert result.finish_reason == "max-steps" and result.output is None


def test_streamed_repair_rounds_are_steps() -> None:
    with create_agent(provider=scripted(json.dumps(BAD_BILL), json.dumps(GOOD_BILL))) as agent:
        events = list(agent.session().stream("bill", output_type=Bill))
    assert [e.step for e in events if isinstance(e, StepStart)] == [1, 2]
    done = events[-1]
    assert isinstance(done, RunDone) and done.result is not None
    assert done.result.output == Bill([Item("a", 1.0)], 1.0)


# -- single turns, approvals, bad types ------------------------------------------------


@pytest.mark.parametrize("how", ["send", "stream"])
def test_single_turns_take_an_output_type(how: str) -> None:
    with create_agent(provider=scripted('{"value": "no"}')) as agent:
        if how == "send":
            result = agent.send("ok?", output_type=Literal["yes", "no"])
        else:
            result = agent.stream("ok?", output_type=Literal["yes", "no"]).result()
    assert result.output == "no"


@pytest.mark.parametrize("mode", ["sync", "sync-stream", "aio", "aio-stream"])
def test_a_resolved_approval_continues_with_its_output_type(mode: str) -> None:
    from lousho_sessions import Message, ToolCall, tool

    @tool(needs_approval=True)
    def charge(amount: float) -> str:
        """Charge the card."""
        return "charged"

    answers: Iterator[Message | str] = iter(
        [
            Message.assistant("", tool_calls=[ToolCall("c1", "charge", {"amount": 2})]),
            json.dumps(GOOD_BILL),
        ]
    )
    from lousho_sessions import FunctionProvider

    with create_agent(provider=FunctionProvider(lambda r: next(answers)), tools=[charge]) as agent:
        paused = agent.session("s").send("pay", output_type=Bill)
        assert paused.finish_reason == "awaiting-approval" and paused.output is None
        assert paused.approval_id is not None
        approval = paused.approval_id

        if mode == "sync":
            result = agent.approvals.resolve(approval, approved=True, output_type=Bill)
        elif mode == "sync-stream":
            result = agent.approvals.resolve_stream(
                approval, approved=True, output_type=Bill
            ).result()
        else:

            async def main() -> ExecutionResult | None:
                approvals = AsyncAgent(agent).approvals
                if mode == "aio":
                    return await approvals.resolve(approval, approved=True, output_type=Bill)
                run = await approvals.resolve_stream(approval, approved=True, output_type=Bill)
                return await run.result()

            result = asyncio.run(main())
    assert result is not None and result.output == Bill([Item("a", 1.0)], 1.0)


def test_a_type_without_a_schema_is_refused_before_anything_runs() -> None:
    with (
        create_agent(provider=scripted()) as agent,
        pytest.raises(ToolDefinitionError, match="output_type"),
    ):
        agent.session().send("x", output_type=object)
        with pytest.raises(ToolDefinitionError):
            agent.approvals.resolve("appr-none", approved=True, output_type=object)
    with pytest.raises(ToolDefinitionError):
        create_agent(provider=scripted(), output_type=complex)


def test_output_retries_must_be_a_count() -> None:
    with pytest.raises(ValueError, match="output_retries"):
        create_agent(provider=scripted(), output_retries=-1)


def test_the_demo_provider_answers_a_schema() -> None:
    with create_agent(model="demo", output_type=Contact) as agent:
        result = agent.session().send("My name is Ali. My age is 31.")
    assert result.output == {"name": "Ali", "age": 31}


def test_the_output_is_typed_for_type_checkers() -> None:
    # checked by mypy (tests are type-checked): the overloads carry the type through
    with create_agent(provider=scripted('{"name": "a", "price": 1}', '{"value": 2}')) as agent:
        session = agent.session()
        result = session.send("x", output_type=Item)
        assert_type(result, ExecutionResult[Item])
        assert_type(result.output, Item | None)
        run = session.stream("y", output_type=int)
        assert_type(run, AgentRun[int])
        assert run.result().output == 2
