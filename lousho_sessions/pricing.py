"""Prices per million tokens, to turn usage into ``cost_usd``.

The built-in table :data:`DEFAULT_PRICING` holds list prices as they were
published on :data:`DEFAULT_PRICING_DATE`; prices change, so give the ones you
pay with ``pricing=`` (on ``create_agent`` or a provider), which is looked up
first. A model in neither table costs ``0.0``.
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from .messages import Usage

__all__ = ["DEFAULT_PRICING", "DEFAULT_PRICING_DATE", "Pricing", "price_usage"]


@attrs.frozen
class Pricing:
    """US dollars per million input and output tokens."""

    input_per_million: float
    output_per_million: float

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return (
            input_tokens * self.input_per_million + output_tokens * self.output_per_million
        ) / 1e6


#: When the prices of :data:`DEFAULT_PRICING` were copied from the providers' price pages.
DEFAULT_PRICING_DATE = "2025-05-22"

#: Public list prices (USD per million tokens) of common models as of
#: :data:`DEFAULT_PRICING_DATE`, standard tier, no caching or batch discounts;
#: possibly stale. Override with ``create_agent(pricing=...)`` or ``Provider(pricing=...)``.
DEFAULT_PRICING: Mapping[str, Pricing] = {
    "gpt-4o": Pricing(2.50, 10.00),
    "gpt-4o-mini": Pricing(0.15, 0.60),
    "gpt-4.1": Pricing(2.00, 8.00),
    "gpt-4.1-mini": Pricing(0.40, 1.60),
    "gpt-4.1-nano": Pricing(0.10, 0.40),
    "o3-mini": Pricing(1.10, 4.40),
    "claude-3-5-haiku-latest": Pricing(0.80, 4.00),
    "claude-3-5-sonnet-latest": Pricing(3.00, 15.00),
    "claude-3-7-sonnet-latest": Pricing(3.00, 15.00),
    "claude-sonnet-4-0": Pricing(3.00, 15.00),
    "claude-opus-4-0": Pricing(15.00, 75.00),
    "demo": Pricing(0.0, 0.0),
}


def price_usage(
    usage: Usage, model: str | None, pricing: Mapping[str, Pricing] | None = None
) -> Usage:
    """``usage`` with ``cost_usd`` filled from the price table when the provider gave none.

    ``pricing`` wins over :data:`DEFAULT_PRICING`. A name is looked up as it
    is, then without its ``provider/`` prefix, then by its longest known
    prefix (``gpt-4o-mini-2024-07-18`` uses ``gpt-4o-mini``).
    """
    if usage.cost_usd or model is None:
        return usage
    table = {**DEFAULT_PRICING, **(pricing or {})}
    price = table.get(model)
    if price is None:
        # "openai/gpt-4o-mini" and dated names such as "gpt-4o-mini-2024-07-18"
        name = model.split("/", 1)[-1]
        price = table.get(name) or next(
            (p for k, p in sorted(table.items(), key=lambda kv: -len(kv[0])) if name.startswith(k)),
            None,
        )
    if price is None:
        return usage
    return attrs.evolve(usage, cost_usd=price.cost(usage.input_tokens, usage.output_tokens))
