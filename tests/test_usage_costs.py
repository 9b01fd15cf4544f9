"""Usage's cache and reasoning counts: read from each wire, stored, summed and priced."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from provider_server import ProviderServer, SSEReply, sse_events
from provider_wires import HttpProvider, Wire, run

import lousho_sessions.pricing as pricing_module
from lousho_sessions import Message, Pricing, Usage, register_pricing
from lousho_sessions.pricing import DEFAULT_PRICING, lookup_pricing, price_usage
from lousho_sessions.serde import message_from_dict, message_to_dict, messages_from_json_texts

FIXTURES = Path(__file__).parent / "fixtures"


def test_usage_adds_every_count() -> None:
    a = Usage(10, 5, 0.5, cache_read_tokens=3, cache_write_tokens=2, reasoning_tokens=1)
    b = Usage(1, 2, 0.25, cache_read_tokens=4, cache_write_tokens=5, reasoning_tokens=6)
    total = a + b
    assert total == Usage(
        11, 7, 0.75, cache_read_tokens=7, cache_write_tokens=7, reasoning_tokens=7
    )
    assert total.uncached_input_tokens == 11 - 7 - 7
    assert sum([a, b], Usage()) == total


def test_old_stored_usage_reads_the_new_counts_as_zero() -> None:
    old = {"input_tokens": 120, "output_tokens": 30, "cost_usd": 0.001}
    data = message_to_dict(Message.assistant("x"))
    data["usage"] = old
    for loaded in (message_from_dict(data), messages_from_json_texts([json.dumps(data)])[0]):
        assert loaded.usage == Usage(120, 30, 0.001)
        assert (loaded.usage.cache_read_tokens, loaded.usage.reasoning_tokens) == (0, 0)
        assert message_to_dict(loaded) == data  # written back as it was: no new keys


def test_counts_of_zero_are_not_written() -> None:
    data = message_to_dict(Message.assistant("x", usage=Usage(1, 2, 0.5, cache_read_tokens=1)))
    assert data["usage"] == {
        "input_tokens": 1,
        "output_tokens": 2,
        "cost_usd": 0.5,
        "cache_read_tokens": 1,
    }
    # a 0 written by someone else reads as 0 (the general path), and is written without it
    data["usage"]["reasoning_tokens"] = 0
    assert message_from_dict(data).usage == Usage(1, 2, 0.5, cache_read_tokens=1)


def test_golden_message_with_cache_and_reasoning_counts_round_trips() -> None:
    golden = json.loads((FIXTURES / "message-usage-v2.json").read_text())
    for loaded in (message_from_dict(golden), messages_from_json_texts([json.dumps(golden)])[0]):
        assert loaded.usage == Usage(
            12000,
            900,
            0.0171,
            cache_read_tokens=10000,
            cache_write_tokens=1500,
            reasoning_tokens=400,
        )
        assert message_to_dict(loaded) == golden


def test_pricing_prices_each_kind_of_token_at_its_rate() -> None:
    price = Pricing(
        3.0,
        15.0,
        cache_read_per_million=0.3,
        cache_write_per_million=3.75,
        cache_write_1h_per_million=6.0,
        reasoning_per_million=20.0,
    )
    cost = price.cost(
        1_000_000 + 2_000_000 + 3_000_000,  # plain + read + write (of which 1M for an hour)
        1_000_000 + 500_000,  # plain + reasoning
        cache_read_tokens=2_000_000,
        cache_write_tokens=3_000_000,
        cache_write_1h_tokens=1_000_000,
        reasoning_tokens=500_000,
    )
    assert cost == pytest.approx(3.0 + 2 * 0.3 + 2 * 3.75 + 6.0 + 15.0 + 0.5 * 20.0)
    # no separate prices: everything at the plain rates, as before
    plain = Pricing(3.0, 15.0)
    assert plain.cost(6_000_000, 1_500_000, cache_read_tokens=2_000_000) == pytest.approx(
        6 * 3.0 + 1.5 * 15.0
    )


def test_the_built_in_table_prices_cache_reads_below_input() -> None:
    for name, price in DEFAULT_PRICING.items():
        if price.cache_read_per_million is not None:
            assert price.cache_read_per_million < price.input_per_million, name
    sonnet = lookup_pricing("anthropic/claude-sonnet-4-5-20250929")
    assert sonnet is not None and sonnet.cache_read_per_million == pytest.approx(0.3)
    assert sonnet.cache_write_per_million == pytest.approx(3.75)
    assert lookup_pricing("o3-pro-2025-06-10") == Pricing(20.0, 80.0)  # not o3's price
    # Claude Haiku 3's cache prices are not the usual multiples of its input price
    haiku = lookup_pricing("claude-3-haiku-20240307")
    assert haiku == Pricing(
        0.25,
        1.25,
        cache_read_per_million=0.03,
        cache_write_per_million=0.30,
        cache_write_1h_per_million=0.50,
    )
    # a newer Opus has a row of its own: by prefix it would get Opus 4's three-times price
    opus = lookup_pricing("anthropic/claude-opus-4-6")
    assert opus is not None and (opus.input_per_million, opus.output_per_million) == (5.0, 25.0)
    assert opus.cache_write_1h_per_million == pytest.approx(10.0)


@pytest.fixture
def registered() -> Iterator[dict[str, Pricing]]:
    saved = dict(pricing_module._registered)
    yield pricing_module._registered
    pricing_module._registered.clear()
    pricing_module._registered.update(saved)


def test_registered_prices_win_over_built_in_and_lose_to_given(
    registered: dict[str, Pricing],
) -> None:
    usage = Usage(1_000_000, 0)
    assert price_usage(usage, "gpt-4o-mini").cost_usd == pytest.approx(0.15)
    register_pricing("gpt-4o-mini", Pricing(1.0, 1.0))
    assert price_usage(usage, "openai/gpt-4o-mini-2024-07-18").cost_usd == pytest.approx(1.0)
    given = {"gpt-4o-mini": Pricing(2.0, 2.0)}
    assert price_usage(usage, "gpt-4o-mini", given).cost_usd == pytest.approx(2.0)
    register_pricing("my-model", Pricing(4.0, 0.0))
    assert price_usage(usage, "my-model").cost_usd == pytest.approx(4.0)
    with pytest.raises(TypeError, match="my-model"):
        register_pricing("my-model", 1.0)  # type: ignore[arg-type]


def _edited(kind: str, name: str, edits: list[tuple[bytes, bytes]]) -> SSEReply:
    events = sse_events(kind, name)
    for old, new in edits:
        assert any(old in e for e in events), old
        events = [e.replace(old, new) for e in events]
    return SSEReply(events)


ANTHROPIC_CACHED = [
    (
        b'"input_tokens":1200,"cache_creation_input_tokens":0,"cache_read_input_tokens":0',
        b'"input_tokens":200,"cache_creation_input_tokens":300,"cache_read_input_tokens":700,'
        b'"cache_creation":{"ephemeral_5m_input_tokens":200,"ephemeral_1h_input_tokens":100}',
    )
]
OPENAI_CACHED = [
    (b'"cached_tokens":0', b'"cached_tokens":700'),
    (b'"reasoning_tokens":0', b'"reasoning_tokens":120'),
]


RESPONSES_CACHED = [
    (b'"cached_tokens": 1024', b'"cached_tokens": 700'),
    (b'"reasoning_tokens": 0', b'"reasoning_tokens": 120'),
]
GEMINI_CACHED = [
    (b'"cachedContentTokenCount": 1024', b'"cachedContentTokenCount": 700'),
    (b'"candidatesTokenCount": 260', b'"candidatesTokenCount": 180'),
    (b'"thoughtsTokenCount": 40', b'"thoughtsTokenCount": 120'),
]
CACHED = {
    "anthropic": ANTHROPIC_CACHED,
    "openai": OPENAI_CACHED,
    "responses": RESPONSES_CACHED,
    "gemini": GEMINI_CACHED,
}


def test_each_wire_fills_the_cache_and_reasoning_counts(
    wire: Wire, server: ProviderServer, make: Callable[..., HttpProvider]
) -> None:
    server.reply(_edited(wire.kind, "text", CACHED[wire.kind]))
    price = Pricing(
        1.0,
        2.0,
        cache_read_per_million=0.1,
        cache_write_per_million=1.25,
        cache_write_1h_per_million=2.0,
        reasoning_per_million=3.0,
    )
    _, response = run(make(pricing={"test-model": price}))
    usage = response.usage
    assert usage == response.message.usage
    assert usage.input_tokens == 1200  # every prompt token, cached or not, on both wires
    assert usage.cache_read_tokens == 700
    if wire.kind == "anthropic":
        assert (usage.cache_write_tokens, usage.reasoning_tokens) == (300, 0)
        expected = 200 * 1.0 + 700 * 0.1 + 200 * 1.25 + 100 * 2.0 + 300 * 2.0
    else:
        assert (usage.cache_write_tokens, usage.reasoning_tokens) == (0, 120)
        expected = 500 * 1.0 + 700 * 0.1 + 180 * 2.0 + 120 * 3.0
    assert usage.cost_usd == pytest.approx(expected / 1e6)
