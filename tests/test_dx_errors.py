"""Errors that say what to do: a bare model name, a missing API key, resolve() by position."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from lousho_sessions import (
    FunctionProvider,
    Message,
    ModelRequest,
    OpenAIProvider,
    ProviderConfigError,
    ProviderError,
    ToolCall,
    create_agent,
    memory_store,
    tool,
)
from lousho_sessions import aio as lousho_aio
from lousho_sessions.providers.registry import UnknownModelError, provider_for

KEY_ENV = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")


@pytest.fixture
def no_keys(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in (*KEY_ENV, "LOUSHO_MODEL"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


@pytest.mark.parametrize(
    ("model", "meant"),
    [
        ("gpt-4o-mini", "openai/gpt-4o-mini"),
        ("o3-mini", "openai/o3-mini"),
        ("claude-3-5-haiku-latest", "anthropic/claude-3-5-haiku-latest"),
        ("llama3.2", "ollama/llama3.2"),
        ("OpenAI/gpt-4o", "openai/gpt-4o"),
        ("openai:gpt-4o", "openai/gpt-4o"),
        ("Demo", "demo"),
    ],
)
def test_a_bare_or_misspelt_model_name_suggests_the_form_it_meant(model: str, meant: str) -> None:
    with pytest.raises(UnknownModelError) as caught:
        create_agent(model=model)
    message = str(caught.value)
    assert f"did you mean {meant!r}?" in message
    assert "openai/<name>" in message  # the known forms are still listed


@pytest.mark.parametrize("model", ["cohere/command", "mistral/large", "", "x" * 500])
def test_no_suggestion_without_a_likely_one(model: str) -> None:
    with pytest.raises(UnknownModelError) as caught:
        provider_for(model)
    assert "did you mean" not in str(caught.value)
    assert len(str(caught.value)) < 300  # a long string is not echoed in full


@pytest.mark.parametrize(
    ("model", "env"),
    [
        ("openai/gpt-4o-mini", "OPENAI_API_KEY"),
        ("anthropic/claude-sonnet-4-0", "ANTHROPIC_API_KEY"),
    ],
)
def test_a_missing_key_is_found_when_the_agent_is_made(
    no_keys: pytest.MonkeyPatch, model: str, env: str
) -> None:
    with pytest.raises(ProviderConfigError) as caught:
        create_agent(model=model)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert env in message and repr(model) in message and "check_key=False" in message
    no_keys.setenv("LOUSHO_MODEL", model)  # the same for a model named by the environment
    with pytest.raises(ProviderConfigError, match=env):
        create_agent()


def test_check_key_false_leaves_it_to_the_first_call(no_keys: pytest.MonkeyPatch) -> None:
    agent = create_agent(model="openai/gpt-4o-mini", check_key=False)
    with agent, pytest.raises(ProviderError, match="OPENAI_API_KEY"):
        agent.send("hi")  # refused before any request is made


def test_a_key_a_base_url_or_a_keyless_model_pass(no_keys: pytest.MonkeyPatch) -> None:
    with create_agent(model="ollama/llama3.2"):
        pass
    with create_agent(provider=OpenAIProvider("gpt-4o-mini")):  # an object you made: not checked
        pass
    no_keys.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")  # a local server needs no key
    with create_agent(model="openai/local"):
        pass
    no_keys.delenv("OPENAI_BASE_URL")
    no_keys.setenv("OPENAI_API_KEY", "sk-test")
    with create_agent(model="openai/gpt-4o-mini"):
        pass


@tool(needs_approval=True)
def delete_file(path: str) -> str:
    """Delete a file."""
    return f"deleted {path}"


def _model(request: ModelRequest) -> Message:
    messages = request.messages
    if messages[-1].role == "user":
        return Message.assistant("", tool_calls=[ToolCall("c1", "delete_file", {"path": "/a"})])
    return Message.assistant(f"ok: {messages[-1].text}")


def test_resolve_takes_the_id_by_position_or_by_name() -> None:
    agent = create_agent(
        provider=FunctionProvider(_model), tools=[delete_file], store=memory_store()
    )
    session = agent.session("ops")
    first = session.send("clean")
    assert first.approval_id is not None
    done = agent.approvals.resolve(first.approval_id, approved=True)
    assert done is not None and done.text == "ok: deleted /a"
    second = session.send("again")
    assert second.approval_id is not None
    denied = agent.approvals.resolve(id=second.approval_id, approved=False)
    assert denied is not None and "denied" in denied.text
    agent.close()


def test_async_resolve_takes_the_id_by_position_or_by_name() -> None:
    async def main() -> None:
        agent = lousho_aio.create_agent(
            provider=FunctionProvider(_model), tools=[delete_file], store=memory_store()
        )
        session = agent.session("ops")
        first = await session.send("clean")
        assert first.approval_id is not None
        done = await agent.approvals.resolve(first.approval_id, approved=True)
        assert done is not None and done.text == "ok: deleted /a"
        second = await session.send("again")
        assert second.approval_id is not None
        denied = await agent.approvals.resolve(id=second.approval_id, approved=False)
        assert denied is not None and "denied" in denied.text
        agent.close()

    asyncio.run(main())


def test_message_content_given_as_a_string_is_one_text_part(tmp_path: Path) -> None:
    """``Message(role=, content="…")`` holds one ``TextPart`` (it used to hold one "part"
    per character, which a store saved and could then never read back)."""
    from lousho_sessions.messages import Message, TextPart
    from lousho_sessions.sqlite import SqliteStore

    message = Message(role="user", content="hi")
    assert message.content == (TextPart("hi"),)
    with SqliteStore(tmp_path / "a.db") as store:
        store.sessions.save("s1", [message])
        assert store.sessions.load("s1") == [message]


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"content": ["hi"]}, "content[0]: expected TextPart, ImagePart or ReasoningPart, got str"),
        ({"tool_calls": [{"id": "c1"}]}, "tool_calls[0]: expected ToolCall, got dict"),
    ],
)
def test_a_message_of_other_things_than_parts_is_refused_naming_the_index(
    fields: dict[str, Any], where: str
) -> None:
    from lousho_sessions.messages import Message

    with pytest.raises(TypeError, match=re.escape(where)):
        Message(role="assistant", **fields)
