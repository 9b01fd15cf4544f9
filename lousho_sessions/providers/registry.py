"""``provider_for(model)``: turn a model string such as ``"openai/gpt-4o-mini"`` into a provider.

Known forms: ``"openai/<name>"``, ``"anthropic/<name>"``, ``"ollama/<name>"``
(the OpenAI format at ``http://127.0.0.1:11434/v1``, or ``$OLLAMA_HOST``; no
key needed) and ``"demo"`` (the offline ``DemoProvider``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping

from ..errors import LoushoError
from ..pricing import Pricing
from ._wire import env
from .base import Provider

__all__ = ["KNOWN_PREFIXES", "UnknownModelError", "ollama_base_url", "provider_for"]

OLLAMA_BASE_URL = "http://127.0.0.1:11434/v1"


class UnknownModelError(LoushoError, ValueError):
    """A model string that names no known provider."""

    code = "LOUSHO_UNKNOWN_MODEL"


def _openai(name: str, pricing: Mapping[str, Pricing] | None) -> Provider:
    from .openai import OpenAIProvider

    return OpenAIProvider(name, pricing=pricing)


def _anthropic(name: str, pricing: Mapping[str, Pricing] | None) -> Provider:
    from .anthropic import AnthropicProvider

    return AnthropicProvider(name, pricing=pricing)


def _ollama(name: str, pricing: Mapping[str, Pricing] | None) -> Provider:
    from .openai import OpenAIProvider

    return OpenAIProvider(
        name, api_key="", base_url=ollama_base_url(), pricing=pricing, name=f"ollama/{name}"
    )


_FACTORIES: Mapping[str, Callable[[str, Mapping[str, Pricing] | None], Provider]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "ollama": _ollama,
}

#: Every form ``provider_for`` accepts, as shown in its error message.
KNOWN_PREFIXES = ("openai/<name>", "anthropic/<name>", "ollama/<name>", "demo")


def ollama_base_url() -> str:
    """``$OLLAMA_HOST`` (``host:port`` or a URL) plus ``/v1``, else the local default."""
    host = env("OLLAMA_HOST")
    if host is None:
        return OLLAMA_BASE_URL
    if "://" not in host:
        host = f"http://{host}"
    return f"{host.rstrip('/')}/v1"


def provider_for(model: str, *, pricing: Mapping[str, Pricing] | None = None) -> Provider:
    """The provider a model string names; ``UnknownModelError`` (a ``ValueError``) otherwise.

    The providers are made lazily and their keys read from the environment
    (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``) when they are called.
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
        raise UnknownModelError(f"unknown model {model!r}: use one of {known}")
    return factory(name, pricing)
