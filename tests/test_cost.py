"""Worst-case reservations and actual costs for the dollar ceiling (pure)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from app.admission.cost import (
    MEDIA_PART_TOKENS,
    REQUEST_OVERHEAD_TOKENS,
    actual_usd,
    dollars,
    input_token_bound,
    one_hour_cache,
    output_token_bound,
    reservation_usd,
    usd,
)
from app.config.schema import Price
from app.wire import ANTHROPIC_MESSAGES
from app.wire.base import Usage

PRICE = Price(input_per_mtok=2.0, output_per_mtok=8.0, cached_input_per_mtok=0.5)
ANTHROPIC = Price(input_per_mtok=3.0, output_per_mtok=15.0, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75)


def test_input_bound_is_bytes_plus_overhead_plus_media_parts() -> None:
    body = json.dumps({"messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is in these?"},
        {"type": "image_url", "image_url": {"url": "https://x/a.png"}},
        {"type": "input_image", "image_url": "https://x/b.png"},
    ]}]}).encode()
    assert input_token_bound(body) == len(body) + REQUEST_OVERHEAD_TOKENS + 2 * MEDIA_PART_TOKENS


def test_input_bound_is_at_least_the_prompt_in_utf8_bytes() -> None:
    text = "naïve 日本語 🙂 " * 50
    body = json.dumps({"messages": [{"role": "user", "content": text}]}).encode()  # ensure_ascii escapes
    assert input_token_bound(body) >= len(text.encode("utf-8"))


@pytest.mark.parametrize(("payload", "model_max", "expected"), [
    ({"max_completion_tokens": 100}, 5000, 100),
    ({"max_tokens": 100, "n": 3}, None, 300),
    ({"max_output_tokens": 64}, None, 64),
    ({}, 16384, 16384),
    ({}, None, None),
    ({"max_tokens": "100"}, 7, 7),  # not an integer: ignored
    ({"max_tokens": True}, None, None),
])
def test_output_bound(payload: dict, model_max: int | None, expected: int | None) -> None:
    assert output_token_bound(payload, model_max) == expected


def test_embeddings_have_no_output() -> None:
    assert output_token_bound({}, None, embeddings=True) == 0


def test_reservation_prices_all_input_at_the_highest_input_price() -> None:
    assert reservation_usd(PRICE, 1_000_000, 1_000_000) == Decimal("10")
    assert reservation_usd(ANTHROPIC, 1_000_000, 0) == Decimal("3.75")  # cache write is dearer


def test_actual_cost_prices_cache_reads_and_writes() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000, cache_read_input_tokens=400_000,
                  cache_creation_input_tokens=100_000)
    assert actual_usd(ANTHROPIC, usage) == Decimal("1.5") + Decimal("0.12") + Decimal("0.375") + Decimal("15")


def test_actual_cost_never_exceeds_the_reservation_for_usage_within_the_bounds() -> None:
    usage = Usage(input_tokens=900, output_tokens=50, cache_read_input_tokens=300)
    assert actual_usd(PRICE, usage) <= reservation_usd(PRICE, 900, 50)


def test_amounts_round_up_to_the_stored_quantum() -> None:
    assert usd("0.00000000001") == Decimal("1E-10")
    assert actual_usd(Price(input_per_mtok=0.005, output_per_mtok=0), Usage(input_tokens=1)) == Decimal("5E-9")
    assert actual_usd(Price(input_per_mtok=0.00005, output_per_mtok=0), Usage(input_tokens=1)) == Decimal("1E-10")


@pytest.mark.parametrize(("amount", "text"), [
    (Decimal("4.87"), "$4.87"), (0, "$0.00"), (None, "$0.00"), (Decimal("0.0012"), "$0.0012"), (5, "$5.00"),
])
def test_dollars(amount: object, text: str) -> None:
    assert dollars(amount) == text  # type: ignore[arg-type]


def test_one_hour_cache_writes_cost_twice_input_and_five_minute_writes_the_cache_write_price() -> None:
    usage = Usage(input_tokens=10_000, output_tokens=0, cache_creation_input_tokens=10_000,
                  cache_creation_1h_input_tokens=4_000)
    # 6,000 at $3.75 (5 minutes) + 4,000 at $6.00 (1 hour, 2 x $3.00)
    assert actual_usd(ANTHROPIC, usage) == usd("0.0225") + usd("0.024")
    own = Price(input_per_mtok=3.0, output_per_mtok=15.0, cache_write_1h_per_mtok=7.0)
    assert actual_usd(own, Usage(input_tokens=1_000_000, cache_creation_input_tokens=1_000_000,
                                 cache_creation_1h_input_tokens=1_000_000)) == usd(7)


def test_a_request_that_may_write_one_hour_cache_is_reserved_at_that_price() -> None:
    five = {"system": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}]}
    hour = {"system": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
    assert not one_hour_cache(json.dumps(five).encode(), five)
    assert one_hour_cache(json.dumps(hour).encode(), hour)
    assert one_hour_cache(b'{"system": [{"cache_control": {"\\u0074tl": "1h"}}]}', hour)  # an escape spells it
    explicit = {"messages": [{"content": [{"cache_control": {"type": "ephemeral", "ttl": "5m"}}]}]}
    assert not one_hour_cache(json.dumps(explicit).encode(), explicit)
    assert reservation_usd(ANTHROPIC, 1_000_000, 0) == usd("3.75")
    assert reservation_usd(ANTHROPIC, 1_000_000, 0, one_hour=True) == usd(6)


def test_anthropic_cache_writes_are_broken_down_by_ttl() -> None:
    body = {"type": "message", "content": [], "usage": {
        "input_tokens": 50, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 3000, "output_tokens": 9,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000}}}
    usage = ANTHROPIC_MESSAGES.parse_response(body).usage
    assert usage == Usage(3050, 9, cache_creation_input_tokens=3000, cache_creation_1h_input_tokens=2000)
