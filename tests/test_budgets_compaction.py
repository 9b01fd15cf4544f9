"""Budgets, pricing, compaction, multimodal input and project instructions (issue 5)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import calls, priced

from lousho_sessions import (
    Compaction,
    FunctionProvider,
    ImagePart,
    Limits,
    Message,
    ModelRequest,
    Pricing,
    ScriptedProvider,
    TextPart,
    Usage,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions.compaction import estimate_tokens, split_point


def test_session_budget_stops_before_model_call() -> None:
    provider = FunctionProvider(lambda r: priced("reply", 0.40))
    agent = create_agent(provider=provider)
    session = agent.session(limits=Limits(max_cost_usd=1))
    reasons = [session.send(f"q{i}").finish_reason for i in range(3)]
    assert reasons == ["stop", "stop", "stop"]  # spent 1.20 after the third
    calls_before = len(session.messages)
    result = session.send("q4")
    assert result.finish_reason == "limit" and result.limit == "max_cost_usd"
    assert result.steps == 0  # the model was not called
    assert len(session.load()) == calls_before + 1  # what it completed (the input) is kept


def test_session_budget_holds_after_reopening_from_store() -> None:
    store = memory_store()
    agent = create_agent(provider=FunctionProvider(lambda r: priced("r", 0.40)), store=store)
    session = agent.session("budget", limits=Limits(max_cost_usd=1))
    for i in range(3):
        session.send(f"q{i}")
    called: list[int] = []

    def model(request: ModelRequest) -> Message:
        called.append(1)
        return priced("r", 0.4)

    fresh = create_agent(provider=FunctionProvider(model), store=store)
    result = fresh.session("budget", limits=Limits(max_cost_usd=1)).send("again")
    assert result.finish_reason == "limit" and called == []


def test_per_turn_limits() -> None:
    @tool
    def step() -> str:
        """Step."""
        return "ok"

    loop = FunctionProvider(
        lambda r: Message.assistant(
            "", tool_calls=calls(("step", {})).tool_calls, usage=Usage(100, 100, 0.01)
        )
    )
    agent = create_agent(provider=loop, tools=[step], limits=Limits(max_tool_calls=2))
    result = agent.session().send("go")
    assert result.finish_reason == "limit" and result.limit == "max_tool_calls"
    agent = create_agent(provider=loop, tools=[step], limits=Limits(max_tokens=500))
    result = agent.session().send("go")
    assert result.limit == "max_tokens" and result.usage.total_tokens >= 500
    agent = create_agent(provider=loop, tools=[step], limits=Limits(max_steps=2))
    result = agent.session().send("go")
    assert result.limit == "max_steps" and result.steps == 2
    # per-turn limits reset every turn
    agent = create_agent(
        provider=FunctionProvider(lambda r: priced("x", 0.6)), limits=Limits(max_cost_usd=1)
    )
    session = agent.session()
    assert [session.send("a").finish_reason, session.send("b").finish_reason] == ["stop", "stop"]


def test_pricing_fills_cost() -> None:
    provider = FunctionProvider(lambda r: Message.assistant("x", usage=Usage(1_000_000, 1_000_000)))
    provider.model = "my-model"  # type: ignore[attr-defined]
    agent = create_agent(provider=provider, pricing={"my-model": Pricing(1.0, 2.0)})
    assert agent.send("hi").usage.cost_usd == pytest.approx(3.0)
    assert create_agent(provider=provider).send("hi").usage.cost_usd == 0.0


def fifty_messages() -> list[Message]:
    out: list[Message] = []
    for i in range(10):
        call = calls(("lookup", {"i": i}))
        out += [
            Message.user(f"question {i}"),
            call,
            Message.tool(call.tool_calls[0].id, f"result {i}"),
            Message.assistant(f"answer {i}", usage=Usage(5, 5, 0.01)),
            Message.user(f"thanks {i}"),
        ]
    return out


def test_compaction_keeps_tail_and_one_summary() -> None:
    store = memory_store()
    assert store.sessions is not None
    store.sessions.save("long", fifty_messages())
    summarised: list[ModelRequest] = []

    def model(request: ModelRequest) -> str:
        summarised.append(request)
        return "They asked ten questions."

    agent = create_agent(provider=FunctionProvider(model), store=store)
    session = agent.session("long")
    events: list[str] = []
    session.on(lambda e: events.append(e.type))
    result = session.compact(keep_last=4)
    messages = session.load()
    assert len(messages) == 5 and result.messages_before == 50 and result.messages_after == 5
    assert "They asked ten questions." in messages[0].text
    assert events == ["compaction.start", "compaction.done"]
    assert "question 0" in summarised[0].messages[0].text
    # valid: no tool result without its call
    assert messages[1].role != "tool"


def test_split_never_separates_calls_from_results() -> None:
    messages = fifty_messages()
    for keep in range(0, 12):
        cut = split_point(messages, keep)
        assert cut in (0, len(messages)) or messages[cut].role != "tool"


def test_compaction_preserves_budget_spend() -> None:
    store = memory_store()
    assert store.sessions is not None
    store.sessions.save("b", fifty_messages())
    agent = create_agent(provider=FunctionProvider(lambda r: "summary"), store=store)
    session = agent.session("b", limits=Limits(max_cost_usd=0.05))
    session.compact(keep_last=2)
    assert session.send("more").finish_reason == "limit"  # 10 x $0.01 spent before compaction


def test_automatic_compaction() -> None:
    store = memory_store()
    assert store.sessions is not None
    store.sessions.save("auto", fifty_messages())
    seen: list[int] = []

    def model(request: ModelRequest) -> str:
        seen.append(len(request.messages))
        return "ok"

    agent = create_agent(
        provider=FunctionProvider(model),
        store=store,
        compaction=Compaction(max_tokens=100, keep_last=4),
    )
    session = agent.session("auto")
    session.send("next")
    assert seen == [1, 6]  # the summary call, then the turn: summary + 4 kept + the new message
    assert estimate_tokens(session.messages) < estimate_tokens(fifty_messages())


def test_compact_short_transcript_does_nothing() -> None:
    session = create_agent(provider=ScriptedProvider(["hi"])).session()
    session.send("x")
    result = session.compact(keep_last=4)
    assert not result.compacted and len(session.messages) == 2


def test_multimodal_parts_reach_provider_and_store() -> None:
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> str:
        seen.append(request)
        return "a cat"

    store = memory_store()
    session = create_agent(provider=FunctionProvider(model), store=store).session("img")
    image = ImagePart(data=b"\x89PNG\r\n", media_type="image/png")
    session.send([TextPart("What is this?"), image, ImagePart(url="https://example.com/c.png")])
    parts = seen[0].messages[0].content
    assert parts[1] == image and isinstance(parts[2], ImagePart)
    assert store.sessions is not None
    stored = store.sessions.load("img")
    assert stored is not None and stored[0].content == parts
    session.send([Message.user("one"), Message.user("two")])
    assert [m.text for m in seen[1].messages][-2:] == ["one", "two"]


def test_bad_input_is_a_clear_error() -> None:
    session = create_agent().session()
    with pytest.raises(TypeError, match="unsupported input int"):
        session.send(42)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="exactly one of url= or data="):
        ImagePart()


def test_project_instructions(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "AGENTS.md").write_text("Use British spelling.")
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    seen: list[ModelRequest] = []

    def model(request: ModelRequest) -> str:
        seen.append(request)
        return "ok"

    provider = FunctionProvider(model)
    session = create_agent(
        instructions="Be brief.", provider=provider, project_instructions=True
    ).session()
    session.send("hi")
    assert seen[0].system == "Be brief.\n\nUse British spelling."
    assert all("British" not in m.text for m in session.messages)
    other = tmp_path / "OTHER.md"
    other.write_text("Other rules.")
    agent = create_agent(provider=provider, project_instructions=other)
    agent.send("x")
    assert seen[-1].system == "Other rules."
    with pytest.raises(FileNotFoundError, match="no file at"):
        create_agent(project_instructions=tmp_path / "missing.md")
