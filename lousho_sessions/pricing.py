"""Prices per million tokens, to turn usage into ``cost_usd``.

The built-in table :data:`DEFAULT_PRICING` holds list prices, last checked on
:data:`DEFAULT_PRICING_DATE` against the vendors' pages (``docs/costs.md`` says,
model by model, which page confirmed each figure and which could not be
confirmed); prices change, so give the ones you pay with ``pricing=`` (on
``create_agent`` or a provider), which is looked up first, or once per process
with :func:`register_pricing`. A model in none of the tables costs ``0.0``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

import attrs

from .messages import Usage

__all__ = [
    "DEFAULT_PRICING",
    "DEFAULT_PRICING_DATE",
    "Pricing",
    "price_usage",
    "register_pricing",
    "registered_pricing",
]


@attrs.frozen
class Pricing:
    """US dollars per million tokens of each kind.

    ``input_per_million`` and ``output_per_million`` price plain input and output.
    The others default to ``None``, meaning "no separate price": cache reads and
    5-minute cache writes then cost the input price, 1-hour cache writes the 5-minute
    write price, and reasoning tokens the output price. (Anthropic bills cache reads
    at 0.1x input, 5-minute writes at 1.25x and 1-hour writes at 2x, Claude Haiku 3
    excepted; OpenAI and Gemini bill cached input at a discount and charge nothing
    extra for writing it.)
    """

    input_per_million: float
    output_per_million: float
    cache_read_per_million: float | None = attrs.field(default=None, kw_only=True)
    cache_write_per_million: float | None = attrs.field(default=None, kw_only=True)
    cache_write_1h_per_million: float | None = attrs.field(default=None, kw_only=True)
    reasoning_per_million: float | None = attrs.field(default=None, kw_only=True)

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cache_read_tokens: int = 0,
        cache_write_tokens: int = 0,
        cache_write_1h_tokens: int = 0,
        reasoning_tokens: int = 0,
    ) -> float:
        """The price of a call, in US dollars.

        ``input_tokens`` includes the cache reads and writes, ``output_tokens`` the
        reasoning tokens (as in ``Usage``); ``cache_write_1h_tokens`` is the part of
        ``cache_write_tokens`` written with a 1-hour lifetime.
        """
        read_price = _or(self.cache_read_per_million, self.input_per_million)
        write_price = _or(self.cache_write_per_million, self.input_per_million)
        write_1h_price = _or(self.cache_write_1h_per_million, write_price)
        reasoning_price = _or(self.reasoning_per_million, self.output_per_million)
        plain_input = max(input_tokens - cache_read_tokens - cache_write_tokens, 0)
        plain_output = max(output_tokens - reasoning_tokens, 0)
        write_5m = max(cache_write_tokens - cache_write_1h_tokens, 0)
        return (
            plain_input * self.input_per_million
            + cache_read_tokens * read_price
            + write_5m * write_price
            + cache_write_1h_tokens * write_1h_price
            + plain_output * self.output_per_million
            + reasoning_tokens * reasoning_price
        ) / 1e6

    def usage_cost(self, usage: Usage, *, cache_write_1h_tokens: int = 0) -> float:
        """:meth:`cost` of ``usage``'s counts."""
        return self.cost(
            usage.input_tokens,
            usage.output_tokens,
            cache_read_tokens=usage.cache_read_tokens,
            cache_write_tokens=usage.cache_write_tokens,
            cache_write_1h_tokens=cache_write_1h_tokens,
            reasoning_tokens=usage.reasoning_tokens,
        )


def _or(price: float | None, fallback: float) -> float:
    return fallback if price is None else price


def _anthropic(input: float, output: float) -> Pricing:
    """Anthropic's rates: cache reads 0.1x input, writes 1.25x (5 minutes) or 2x (1 hour)."""
    return Pricing(
        input,
        output,
        cache_read_per_million=round(input * 0.1, 6),
        cache_write_per_million=round(input * 1.25, 6),
        cache_write_1h_per_million=round(input * 2, 6),
    )


def _cached(input: float, cached: float, output: float) -> Pricing:
    """OpenAI's and Gemini's rates: cached input at its own price, writing it costs nothing extra."""
    return Pricing(input, output, cache_read_per_million=cached)


#: When :data:`DEFAULT_PRICING` was last checked against the vendors' pages (stored
#: copies, which carry no date of their own; ``docs/costs.md`` lists them).
DEFAULT_PRICING_DATE = "2026-12-04"

#: Public list prices (USD per million tokens) of common models: standard tier, no
#: batch discount, prompts under the long-context thresholds (Claude Sonnet 4 and 4.5,
#: Gemini Pro charge more above 200k input tokens). Reasoning (thinking) tokens are
#: billed as output tokens by all three vendors, so no row has a reasoning price.
#: They go stale: check them against the providers' pages, and override with
#: ``create_agent(pricing=...)``, ``Provider(pricing=...)`` or :func:`register_pricing`.
DEFAULT_PRICING: Mapping[str, Pricing] = {
    # Anthropic: every figure (input, 5m / 1h cache writes, cache hits, output) as on
    # https://platform.claude.com/docs/en/docs/about-claude/pricing ("Model pricing",
    # a copy listing Claude Opus 4.6 as the newest Opus); Opus 4.7 and 4.8 from a later
    # copy of the same page (https://platform.claude.com/docs/en/about-claude/pricing);
    # claude-3-5-sonnet from https://docs.anthropic.com/en/docs/about-claude/pricing.
    # Opus 4.6 to 4.8 have rows of their own: by prefix they would get Opus 4's price.
    "claude-opus-4-8": _anthropic(5.00, 25.00),
    "claude-opus-4-7": _anthropic(5.00, 25.00),
    "claude-opus-4-6": _anthropic(5.00, 25.00),
    "claude-opus-4-5": _anthropic(5.00, 25.00),
    "claude-opus-4-1": _anthropic(15.00, 75.00),
    "claude-opus-4": _anthropic(15.00, 75.00),
    "claude-sonnet-4-6": _anthropic(3.00, 15.00),
    "claude-sonnet-4-5": _anthropic(3.00, 15.00),
    "claude-sonnet-4": _anthropic(3.00, 15.00),
    "claude-3-7-sonnet": _anthropic(3.00, 15.00),
    "claude-3-5-sonnet": _anthropic(3.00, 15.00),
    "claude-haiku-4-5": _anthropic(1.00, 5.00),
    "claude-3-5-haiku": _anthropic(0.80, 4.00),
    # not the usual multiples: 5m writes $0.30 (1.2x), hits $0.03 (0.12x)
    "claude-3-haiku": Pricing(
        0.25,
        1.25,
        cache_read_per_million=0.03,
        cache_write_per_million=0.30,
        cache_write_1h_per_million=0.50,
    ),
    # OpenAI (cached input at its own price; reasoning tokens are output tokens). Not
    # confirmed: no copy of an OpenAI price page is stored (see docs/costs.md).
    "gpt-5.1": _cached(1.25, 0.125, 10.00),
    "gpt-5": _cached(1.25, 0.125, 10.00),
    "gpt-5-mini": _cached(0.25, 0.025, 2.00),
    "gpt-5-nano": _cached(0.05, 0.005, 0.40),
    "gpt-4.1": _cached(2.00, 0.50, 8.00),
    "gpt-4.1-mini": _cached(0.40, 0.10, 1.60),
    "gpt-4.1-nano": _cached(0.10, 0.025, 0.40),
    "gpt-4o": _cached(2.50, 1.25, 10.00),
    "gpt-4o-mini": _cached(0.15, 0.075, 0.60),
    "gpt-5-pro": Pricing(15.00, 120.00),
    "o1": _cached(15.00, 7.50, 60.00),
    "o1-mini": _cached(1.10, 0.55, 4.40),
    "o1-pro": Pricing(150.00, 600.00),
    "o3": _cached(2.00, 0.50, 8.00),
    "o3-pro": Pricing(20.00, 80.00),
    "o3-mini": _cached(1.10, 0.55, 4.40),
    "o4-mini": _cached(1.10, 0.275, 4.40),
    # Google Gemini (implicit caching; thinking tokens are billed as output). Not
    # confirmed: no copy of Google's price page is stored (see docs/costs.md).
    "gemini-3-pro": _cached(2.00, 0.20, 12.00),
    "gemini-2.5-pro": _cached(1.25, 0.125, 10.00),
    "gemini-2.5-flash": _cached(0.30, 0.03, 2.50),
    "gemini-2.5-flash-lite": _cached(0.10, 0.01, 0.40),
    "gemini-2.0-flash": _cached(0.10, 0.025, 0.40),
    "gemini-2.0-flash-lite": Pricing(0.075, 0.30),
    "demo": Pricing(0.0, 0.0),
}

_registered: dict[str, Pricing] = {}
_registered_lock = threading.Lock()


def register_pricing(model: str, pricing: Pricing) -> None:
    """Price ``model`` as ``pricing`` for every agent and provider of this process.

    Registered prices win over :data:`DEFAULT_PRICING` and lose to a ``pricing=``
    given to an agent or provider. ``model`` is matched like the built-in names
    (as given, without a ``provider/`` prefix, or as the longest prefix).
    """
    if not isinstance(pricing, Pricing):
        raise TypeError(f"register_pricing({model!r}, ...): expected a Pricing, got {pricing!r}")
    with _registered_lock:
        _registered[model] = pricing


def registered_pricing() -> Mapping[str, Pricing]:
    """A copy of the prices :func:`register_pricing` added in this process."""
    with _registered_lock:
        return dict(_registered)


def lookup_pricing(model: str, pricing: Mapping[str, Pricing] | None = None) -> Pricing | None:
    """The price of ``model``: ``pricing`` first, then registered, then built-in.

    A name is looked up as it is, then without its ``provider/`` prefix, then by its
    longest known prefix (``gpt-4o-mini-2024-07-18`` uses ``gpt-4o-mini``).
    """
    table = {**DEFAULT_PRICING, **_registered, **(pricing or {})}
    price = table.get(model)
    if price is None:
        name = model.split("/", 1)[-1]
        price = table.get(name) or next(
            (p for k, p in sorted(table.items(), key=lambda kv: -len(kv[0])) if name.startswith(k)),
            None,
        )
    return price


def price_usage(
    usage: Usage,
    model: str | None,
    pricing: Mapping[str, Pricing] | None = None,
    *,
    cache_write_1h_tokens: int = 0,
) -> Usage:
    """``usage`` with ``cost_usd`` filled from the price table when the provider gave none.

    ``pricing`` wins over :func:`register_pricing`'s prices, which win over
    :data:`DEFAULT_PRICING` (see :func:`lookup_pricing`).
    """
    if usage.cost_usd or model is None:
        return usage
    price = lookup_pricing(model, pricing)
    if price is None:
        return usage
    cost = price.usage_cost(usage, cache_write_1h_tokens=cache_write_1h_tokens)
    if type(usage) is not Usage:  # a subclass may have fields of its own
        return attrs.evolve(usage, cost_usd=cost)
    return Usage(  # what ``attrs.evolve`` makes, without its look at every field (a call a turn)
        usage.input_tokens,
        usage.output_tokens,
        cost,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
        reasoning_tokens=usage.reasoning_tokens,
        extra=usage.extra,
    )
