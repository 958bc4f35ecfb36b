"""Dollar costs for the per-task ceiling (``cost_limit_usd``): worst-case reservations
before dispatch and actual costs after. Pure: no I/O.

Amounts are :class:`~decimal.Decimal` US dollars rounded *up* to :data:`USD_QUANTUM`
(what the ``NUMERIC(20, 10)`` columns hold), so a sum of reservations never falls below
the true worst case.

**Input bound.** Providers tokenize with byte-level BPE (OpenAI's ``o200k``/``cl100k``,
Anthropic's tokenizer): every token covers at least one byte of UTF-8 text, so a prompt
of N bytes is at most N tokens, and the JSON body holding the prompt is longer than the
prompt (quotes, keys, escapes). Two things are not in the body's bytes and are added:
:data:`REQUEST_OVERHEAD_TOKENS` for what the provider adds itself (chat-template role
tokens, the tool-use system prompt), and :data:`MEDIA_PART_TOKENS` per image, audio,
file or document part (an image URL of 60 bytes can cost over 1,000 tokens).

**Output bound.** The request's own maximum (``max_completion_tokens``, ``max_tokens``,
``max_output_tokens``) times ``n`` (chat choices), else the model's
``max_output_tokens`` from the configuration or the built-in table. Embeddings have no
output. No bound at all: :func:`output_token_bound` returns ``None`` and the caller
refuses the request (it cannot be reserved).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Any, Mapping

from app.config.schema import Price
from app.wire.base import Usage

#: Smallest amount the database stores (10 decimal places of a dollar).
USD_QUANTUM = Decimal("1e-10")
#: Tokens a provider may add to a request beyond its bytes (role/template tokens, the
#: tool-use system prompt: Anthropic documents up to ~350 tokens for tool use).
REQUEST_OVERHEAD_TOKENS = 1_000
#: Tokens reserved per media part. OpenAI's largest image costs about 1,500 tokens (high
#: detail) to 2,500 (patch-based models); Anthropic's about 1,600. Multi-page documents
#: referenced by URL or file id can cost more: see docs/cost-ceiling.md (the one hole in the bound).
MEDIA_PART_TOKENS = 8_000
#: ``"type": "<media>"`` in any request body shape (chat, Responses, Messages).
_MEDIA_PART = re.compile(
    rb'"type"\s*:\s*"(?:image|image_url|input_image|input_audio|audio|input_file|file|document)"')
#: Substrings one of which every media part holds: a cheap test before the regex scan.
_MEDIA_HINTS = (b'"image', b'"input_image"', b'audio"', b'"input_file"', b'"file"', b'"document"')
#: Request fields bounding the output, by precedence.
OUTPUT_FIELDS = ("max_completion_tokens", "max_output_tokens", "max_tokens")
_PER_MTOK = Decimal(1_000_000)


def usd(value: Decimal | float | int | str) -> Decimal:
    """``value`` in dollars, rounded up to :data:`USD_QUANTUM`."""
    return Decimal(str(value)).quantize(USD_QUANTUM, rounding=ROUND_CEILING)


def input_token_bound(body: bytes) -> int:
    """An upper bound of the input tokens of a request whose JSON body is ``body``."""
    media = len(_MEDIA_PART.findall(body)) if any(hint in body for hint in _MEDIA_HINTS) else 0
    return len(body) + REQUEST_OVERHEAD_TOKENS + MEDIA_PART_TOKENS * media


def own_output_max(payload: Mapping[str, Any]) -> int | None:
    """The request's own output maximum (the first of :data:`OUTPUT_FIELDS` it sets), or ``None``."""
    for name in OUTPUT_FIELDS:
        value = payload.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def output_token_bound(payload: Mapping[str, Any], model_max_output_tokens: int | None,
                       *, embeddings: bool = False, default_max: int | None = None) -> int | None:
    """An upper bound of the output tokens: the request's own maximum, else the
    ``default_max`` taskgate adds to it, else the model's maximum, times ``n`` (chat
    choices); ``None`` when there is none (unbounded). ``0`` for embeddings."""
    if embeddings:
        return 0
    per_choice = own_output_max(payload)
    if per_choice is None:
        per_choice = default_max if default_max is not None else model_max_output_tokens
    if per_choice is None:
        return None
    n = payload.get("n")
    return per_choice * (n if isinstance(n, int) and not isinstance(n, bool) and n > 1 else 1)


def one_hour_cache(body: bytes, payload: Any) -> bool:
    """Whether a request may write to Anthropic's prompt cache with the 1-hour TTL: some
    ``cache_control`` in it sets a ``ttl`` other than ``"5m"`` (the default). The parsed
    ``payload`` is walked only when the bytes hold ``ttl`` or a ``\\u`` escape (which
    could spell it), so the check is exact and costs a byte scan otherwise."""
    if b"ttl" not in body and b"\\u" not in body:
        return False
    stack = [payload]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if "ttl" in item and item["ttl"] != "5m":
                return True
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def reservation_usd(price: Price, input_tokens: int, output_tokens: int, *, one_hour: bool = False) -> Decimal:
    """The worst-case cost of a request: every input token at the highest input price
    (uncached, cache write; the 1-hour cache write when ``one_hour``,
    :func:`one_hour_cache`) and every output token at the output price."""
    input_price = max(price.input_per_mtok, price.cache_write, price.cache_write_1h if one_hour else 0)
    return usd((Decimal(str(input_price)) * input_tokens
                + Decimal(str(price.output_per_mtok)) * output_tokens) / _PER_MTOK)


def actual_usd(price: Price, usage: Usage) -> Decimal:
    """What upstream's ``usage`` costs: uncached input, cache reads and cache writes at
    their prices (1-hour writes at ``cache_write_1h``, 5-minute ones at ``cache_write``),
    plus output. Cache fields are part of ``input_tokens`` (see
    :class:`~app.wire.base.Usage`)."""
    cache_read, cache_write = usage.cache_read_input_tokens, usage.cache_creation_input_tokens
    one_hour = min(usage.cache_creation_1h_input_tokens, cache_write)
    uncached = max(usage.input_tokens - cache_read - cache_write, 0)
    total = (Decimal(str(price.input_per_mtok)) * uncached
             + Decimal(str(price.cached_input)) * cache_read
             + Decimal(str(price.cache_write)) * (cache_write - one_hour)
             + Decimal(str(price.cache_write_1h)) * one_hour
             + Decimal(str(price.output_per_mtok)) * usage.output_tokens)
    return usd(total / _PER_MTOK)


def dollars(amount: Decimal | float | None) -> str:
    """``$4.87`` (cents; ``$0.0012`` below a cent so small amounts stay visible)."""
    value = Decimal(str(amount or 0))
    return f"${value:.2f}" if value == 0 or abs(value) >= Decimal("0.01") else f"${value.normalize():f}"


@dataclass(frozen=True, slots=True)
class Settlement:
    """A finished request's dollars: ``cost_usd`` added to the task's settled cost,
    ``release_usd`` (its reservation) taken off ``reserved_usd``."""

    cost_usd: Decimal
    release_usd: Decimal


def settle(price: Price | None, usage: Usage | None, reservation: Decimal) -> Settlement | None:
    """What a finished request costs the task.

    With a reservation (the task has a ceiling): the actual cost from ``usage``, or the
    whole reservation when upstream reported none (failed attempts included); the
    reservation is released. Without one: the actual cost when it can be priced (for the
    record), else ``None``. Never below the actual cost, never refunded."""
    actual = actual_usd(price, usage) if price is not None and usage is not None else None
    if reservation:
        return Settlement(reservation if actual is None else actual, reservation)
    return Settlement(actual, Decimal(0)) if actual else None
