"""``python -m bench.headroom``: the dollar ceiling's headroom, reservation ÷ actual cost.

Replays agent-shaped growing conversations through the reservation code taskgate runs
(:class:`app.admission.charge.Charge` with the conversation anchor of
:mod:`app.admission.anchor`, exactly as admission and accounting chain them) and prices
each turn's usage with :func:`app.admission.cost.actual_usd`. Pure: no gateway, no
network; the usage of each turn is modelled (stated per shape below), so the figure is
the reservation's, not a provider's bill.

- ``opencode``: gpt-4.1-mini, chat completions, 10 KB of system prompt and tools,
  ``max_tokens`` 4,096, ~1.5 KB of tool result a turn; usage: 3.8 bytes per token,
  the previous turn's prompt read from OpenAI's cache, 150-450 output tokens.
- ``claude-code``: claude-sonnet-4-5, Messages, 60 KB of system prompt and tools with
  ``cache_control``, ``max_tokens`` 32,000, ~8 KB of tool result a turn (a 200-400 KB
  body by turn 40); usage: 3.8 bytes per token, the previous prompt read from the cache
  and the new part written to it (5-minute TTL), 200-700 output tokens.

Prints, per shape, the median and 90th percentile of reservation ÷ actual with the byte
bound alone and with the anchor, and the output bound's share of the anchored reservation.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass

from app.admission.anchor import Anchor, anchor_after
from app.admission.charge import charge_for
from app.admission.cost import actual_usd, reservation_usd
from app.config.prices import default_max_output_tokens, default_price
from app.config.routing import Route
from app.config.schema import Provider
from app.wire.base import Usage

BYTES_PER_TOKEN = 3.8
TURNS = 40


@dataclass(frozen=True)
class Shape:
    name: str
    model: str
    path: str
    context_bytes: int
    result_bytes: int
    max_tokens: int
    output_tokens: tuple[int, int]
    anthropic: bool


SHAPES = (
    Shape("opencode", "gpt-4.1-mini", "/v1/chat/completions", 10_000, 1_500, 4_096, (150, 450), False),
    Shape("claude-code", "claude-sonnet-4-5", "/v1/messages", 60_000, 8_000, 32_000, (200, 700), True),
)


def _text(rng: random.Random, size: int) -> str:
    words = ("def", "return", "self", "import", "value", "test", "path", "error", "result", "line")
    out: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(words)
        out.append(word)
        length += len(word) + 1
    return " ".join(out)


def _body(shape: Shape, messages: list[dict], context: str) -> dict:
    if shape.anthropic:  # content as blocks; the agent moves its cache breakpoint to the last one each turn
        system = [{"type": "text", "text": context, "cache_control": {"type": "ephemeral"}}]
        blocks = [{"role": m["role"], "content": [{"type": "text", "text": m["content"]}]} for m in messages]
        blocks[-1]["content"][0]["cache_control"] = {"type": "ephemeral"}
        return {"model": shape.model, "max_tokens": shape.max_tokens, "system": system, "messages": blocks,
                "stream": True}
    return {"model": shape.model, "max_tokens": shape.max_tokens, "stream": True,
            "messages": [{"role": "system", "content": context}, *messages]}


def replay(shape: Shape, seed: int = 19) -> tuple[list[tuple[float, float, float]], int]:
    """Per turn: (byte-bound reservation, anchored reservation, output part) ÷ actual; and
    the last body's bytes."""
    rng = random.Random(seed)
    price = default_price(shape.model)
    assert price is not None
    route = Route("p", Provider(kind="anthropic" if shape.anthropic else "openai", base_url="http://x"),
                  shape.model, shape.model, price, default_max_output_tokens(shape.model))
    context = _text(rng, shape.context_bytes)
    messages: list[dict] = [{"role": "user", "content": "fix the failing test"}]
    anchor: Anchor | None = None
    previous_tokens = 0
    ratios = []
    for _ in range(TURNS):
        payload = _body(shape, messages, context)
        body = json.dumps(payload).encode()
        charge = charge_for(route, body, payload, path=shape.path)
        plain, anchored = charge.reservation_usd(None, None), charge.reservation_usd(None, anchor)
        tokens = int(len(body) / BYTES_PER_TOKEN)
        output = rng.randint(*shape.output_tokens)
        cached = min(previous_tokens, tokens)
        usage = (Usage(tokens, output, cache_read_input_tokens=cached, cache_creation_input_tokens=tokens - cached)
                 if shape.anthropic else Usage(tokens, output, cache_read_input_tokens=cached))
        actual = actual_usd(price, usage)
        output_part = reservation_usd(price, 0, shape.max_tokens)
        ratios.append((float(plain / actual), float(anchored / actual), float(output_part / anchored)))
        history = charge.history
        anchor = anchor_after(history, tokens) if history is not None else None
        previous_tokens = tokens
        messages += [{"role": "assistant", "content": _text(rng, 300)},
                     {"role": "user", "content": _text(rng, shape.result_bytes)}]
    return ratios, len(body)


def main() -> None:
    print("| shape | turns | last body | reservation ÷ actual, byte bound (median / p90) "
          "| anchored (median / p90) | output bound's share of the anchored reservation |")
    print("|---|---|---|---|---|---|")
    for shape in SHAPES:
        ratios, last = replay(shape)
        plain = sorted(r[0] for r in ratios)
        anchored = sorted(r[1] for r in ratios)
        share = statistics.median(r[2] for r in ratios)
        p90 = int(0.9 * (len(plain) - 1))
        print(f"| {shape.name} | {TURNS} | {last // 1000} KB | {statistics.median(plain):.1f}× / {plain[p90]:.1f}× "
              f"| {statistics.median(anchored):.1f}× / {anchored[p90]:.1f}× | {share:.0%} |")


if __name__ == "__main__":
    main()
