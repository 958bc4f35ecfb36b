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
    output_token_bound,
    reservation_usd,
    usd,
)
from app.config.schema import Price
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
