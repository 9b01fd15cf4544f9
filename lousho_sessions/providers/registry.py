"""``provider_for(model)``: turn a model string such as ``"openai/gpt-4o-mini"`` into a provider.

Known forms: ``"openai/<name>"`` (the Responses API; Chat Completions when
``$OPENAI_BASE_URL`` points at another server), ``"openai-chat/<name>"`` (Chat
Completions always), ``"openai-responses/<name>"`` (the Responses API always),
``"anthropic/<name>"``, ``"gemini/<name>"`` (the Gemini API), ``"ollama/<name>"`` (Chat Completions at
``http://127.0.0.1:11434/v1``, or ``$OLLAMA_HOST``; no key needed) and
``"demo"`` (the offline ``DemoProvider``). An unknown string's
error suggests the form it probably meant (``"gpt-4o-mini"``: did you mean
``'openai/gpt-4o-mini'``?).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from ..errors import LoushoError, ProviderConfigError
from ..pricing import Pricing
from ._wire import env
from .base import Provider

__all__ = ["KNOWN_PREFIXES", "UnknownModelError", "ollama_base_url", "provider_for", "suggest"]

OLLAMA_BASE_URL = "http://127.0.0.1:11434/v1"


class UnknownModelError(LoushoError, ValueError):
    """A model string that names no known provider."""

    code = "LOUSHO_UNKNOWN_MODEL"


def _openai(name: str, pricing: Mapping[str, Pricing] | None) -> Provider:
    from .openai_responses import DEFAULT_BASE_URL

    base_url = env("OPENAI_BASE_URL")
    if base_url is not None and base_url.rstrip("/") != DEFAULT_BASE_URL:
        # a compatible server (vLLM, llama.cpp, LiteLLM...): they speak Chat Completions
        return _openai_chat(name, pricing)
    return _openai_responses(name, pricing)


def _openai_responses(name: str, pricing: Mapping[str, Pricing] | None) -> Provider:
    from .openai_responses import OpenAIResponsesProvider

    return OpenAIResponsesProvider(name, pricing=pricing)


def _openai_chat(name: str, pricing: Mapping[str, Pricing] | None) -> Provider:
    from .openai import OpenAIProvider

    return OpenAIProvider(name, pricing=pricing)


def _anthropic(name: str, pricing: Mapping[str, Pricing] | None) -> Provider:
    from .anthropic import AnthropicProvider

    return AnthropicProvider(name, pricing=pricing)


def _gemini(name: str, pricing: Mapping[str, Pricing] | None) -> Provider:
    from .gemini import GeminiProvider

    return GeminiProvider(name, pricing=pricing)


def _ollama(name: str, pricing: Mapping[str, Pricing] | None) -> Provider:
    from .openai import OpenAIProvider

    return OpenAIProvider(
        name, api_key="", base_url=ollama_base_url(), pricing=pricing, name=f"ollama/{name}"
    )


_FACTORIES: Mapping[str, Callable[[str, Mapping[str, Pricing] | None], Provider]] = {
    "openai": _openai,
    "openai-chat": _openai_chat,
    "openai-responses": _openai_responses,
    "anthropic": _anthropic,
    "gemini": _gemini,
    "ollama": _ollama,
}

#: Every form ``provider_for`` accepts, as shown in its error message.
KNOWN_PREFIXES = (
    "openai/<name>",
    "openai-chat/<name>",
    "openai-responses/<name>",
    "anthropic/<name>",
    "gemini/<name>",
    "ollama/<name>",
    "demo",
)


def ollama_base_url() -> str:
    """``$OLLAMA_HOST`` (``host:port`` or a URL) plus ``/v1``, else the local default."""
    host = env("OLLAMA_HOST")
    if host is None:
        return OLLAMA_BASE_URL
    if "://" not in host:
        host = f"http://{host}"
    return f"{host.rstrip('/')}/v1"


def provider_for(
    model: str, *, pricing: Mapping[str, Pricing] | None = None, check_key: bool = False
) -> Provider:
    """The provider a model string names; ``UnknownModelError`` (a ``ValueError``) otherwise.

    The providers read their keys from the environment (``OPENAI_API_KEY``,
    ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``) when they are made. With ``check_key``, a provider
    for the public endpoint without a key raises ``ProviderConfigError`` (a
    ``ValueError``) naming the variable; otherwise that is found at the first call.
    """
    if model == "demo":
        # imported by name so that the module is loaded only when asked for
        demo = importlib.import_module(f"{__package__}.demo")
        provider: Provider = demo.DemoProvider()
        return provider
    prefix, slash, name = model.partition("/")
    factory = _FACTORIES.get(prefix)
    if factory is None or not slash or not name:
        known = ", ".join(repr(form) for form in KNOWN_PREFIXES)
        guess = suggest(model)
        hint = f" (did you mean {guess!r}?)" if guess else ""
        shown = model if len(model) <= 100 else model[:100] + "..."
        raise UnknownModelError(f"unknown model {shown!r}{hint}; use one of {known}")
    provider = factory(name, pricing)
    if check_key:
        from ._http_provider import HttpProvider

        if isinstance(provider, HttpProvider) and provider.needs_key:
            raise ProviderConfigError(
                None,
                f"model {model!r} needs an API key: set the environment variable "
                f"{provider.KEY_ENV} (or {provider.BASE_URL_ENV} for a server that needs "
                f"none), or pass provider={type(provider).__name__}(..., api_key=...); "
                "create_agent(check_key=False) leaves the check to the first model call",
            )
    return provider


#: Bare model names and the prefix they most likely go with.
_FAMILIES = (
    (("gpt-", "gpt4", "o1", "o3", "o4-", "chatgpt-", "text-embedding-", "davinci"), "openai"),
    (("claude",), "anthropic"),
    (("gemini-",), "gemini"),
    (("llama", "qwen", "mistral", "mixtral", "gemma", "phi", "deepseek", "codellama"), "ollama"),
)


def suggest(model: str) -> str | None:
    """The known form a mistyped model string most likely meant, or ``None``.

    A bare name of a known family gets its prefix (``"claude-3-5-haiku-latest"``
    -> ``"anthropic/claude-3-5-haiku-latest"``); a prefix in the wrong case or
    with ``:`` for ``/`` (as some other libraries write it) is corrected.
    """
    text = model.strip()
    for sep in (":", "/"):
        prefix, found, name = text.partition(sep)
        if found and name and prefix.lower() in _FACTORIES:
            return f"{prefix.lower()}/{name}"
    if not text or "/" in text or len(text) > 100:
        return None
    lowered = text.lower()
    if lowered == "demo":
        return "demo"
    for starts, prefix in _FAMILIES:
        if lowered.startswith(starts):
            return f"{prefix}/{text}"
    return None
