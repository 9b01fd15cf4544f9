"""Model strings: ``provider_for`` and ``create_agent(model=...)``."""

from __future__ import annotations

import pytest
from provider_server import ProviderServer, SSEReply, sse_events

from lousho_sessions import DemoProvider, create_agent
from lousho_sessions.providers.anthropic import AnthropicProvider
from lousho_sessions.providers.base import ModelRequest
from lousho_sessions.providers.gemini import GeminiProvider
from lousho_sessions.providers.openai import OpenAIProvider
from lousho_sessions.providers.openai_responses import OpenAIResponsesProvider
from lousho_sessions.providers.registry import UnknownModelError, provider_for


def test_openai_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    provider = provider_for("openai/gpt-4o-mini")
    assert isinstance(provider, OpenAIResponsesProvider)  # the Responses API
    assert provider.store is False
    assert (provider.model, provider.name) == ("gpt-4o-mini", "openai/gpt-4o-mini")
    assert provider.base_url == "https://api.openai.com/v1"
    chat = provider_for("openai-chat/gpt-4o-mini")
    assert type(chat) is OpenAIProvider
    assert (chat.model, chat.name) == ("gpt-4o-mini", "openai/gpt-4o-mini")


def test_openai_at_a_compatible_server_keeps_chat_completions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:8000/v1")
    provider = provider_for("openai/meta-llama/Llama-3.1-8B-Instruct")
    assert type(provider) is OpenAIProvider  # vLLM, llama.cpp, LiteLLM speak Chat Completions
    assert provider.base_url == "http://127.0.0.1:8000/v1"
    responses = provider_for("openai-responses/gpt-5")
    assert isinstance(responses, OpenAIResponsesProvider)  # asked for by name
    assert responses.base_url == "http://127.0.0.1:8000/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "https://api.openai.com/v1/")
    assert isinstance(provider_for("openai/gpt-5"), OpenAIResponsesProvider)


def test_anthropic_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_BASE_URL", raising=False)
    provider = provider_for("anthropic/claude-3-5-haiku-latest")
    assert isinstance(provider, AnthropicProvider)
    assert provider.model == "claude-3-5-haiku-latest"
    assert provider.base_url == "https://api.anthropic.com"


def test_gemini_models(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_GEMINI_BASE_URL", raising=False)
    provider = provider_for("gemini/gemini-2.5-flash")
    assert isinstance(provider, GeminiProvider)
    assert (provider.model, provider.name) == ("gemini-2.5-flash", "gemini/gemini-2.5-flash")
    assert provider.base_url == "https://generativelanguage.googleapis.com"


def test_a_model_name_may_hold_slashes() -> None:
    provider = provider_for("openai-chat/meta-llama/Llama-3.1-8B-Instruct")
    assert isinstance(provider, OpenAIProvider)
    assert provider.model == "meta-llama/Llama-3.1-8B-Instruct"


def test_ollama_defaults_to_the_local_server(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OLLAMA_HOST", raising=False)
    provider = provider_for("ollama/llama3.2")
    assert isinstance(provider, OpenAIProvider)
    assert provider.base_url == "http://127.0.0.1:11434/v1"
    assert (provider.model, provider.name) == ("llama3.2", "ollama/llama3.2")


def test_ollama_needs_no_key_and_honours_ollama_host(
    server: ProviderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OLLAMA_HOST", server.url.removeprefix("http://"))
    server.reply(SSEReply(sse_events("openai", "text")))
    provider = provider_for("ollama/llama3.2")
    assert isinstance(provider, OpenAIProvider)
    request = ModelRequest(system=None, messages=())
    try:
        events = list(provider.stream(request, request.signal))
    finally:
        provider.close()
    assert events[-1].type == "response"
    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.body["model"] == "llama3.2"
    assert "authorization" not in sent.headers


def test_demo() -> None:
    assert isinstance(provider_for("demo"), DemoProvider)


@pytest.mark.parametrize("model", ["mistral/large", "openai", "openai/", "gpt-4o", "", "demo/x"])
def test_unknown_models_name_the_known_forms(model: str) -> None:
    with pytest.raises(UnknownModelError) as caught:
        provider_for(model)
    assert isinstance(caught.value, ValueError)
    message = str(caught.value)
    assert repr(model) in message
    for known in ("openai/<name>", "anthropic/<name>", "gemini/<name>", "ollama/<name>", "demo"):
        assert known in message


def test_create_agent_resolves_model_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with create_agent(model="anthropic/claude-sonnet-4-0") as agent:
        assert isinstance(agent.provider, AnthropicProvider)
    monkeypatch.setenv("LOUSHO_MODEL", "openai/gpt-4.1-mini")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with create_agent() as agent:
        assert isinstance(agent.provider, OpenAIResponsesProvider)
        assert agent.provider.model == "gpt-4.1-mini"
    with pytest.raises(ValueError, match="ollama/<name>"):
        create_agent(model="mistral/large")
