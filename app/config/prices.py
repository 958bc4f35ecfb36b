"""The built-in price table (``prices.json`` beside this module): list prices of commonly
used OpenAI and Anthropic models in US dollars per million tokens, with the source pages
and the date they were read in the file itself. A ``price`` in the configuration file
always wins over this table.
"""

from __future__ import annotations

import fnmatch
import json
from functools import lru_cache
from pathlib import Path
from typing import Any

from app.config.schema import Price

PRICES_FILE = Path(__file__).with_name("prices.json")


@lru_cache(maxsize=1)
def price_table() -> dict[str, Any]:
    """The parsed ``prices.json``: ``{"sources": [...], "retrieved": "YYYY-MM-DD",
    "models": [{"match": glob, "input_per_mtok": ..., ...}, ...]}``, most specific first."""
    table: dict[str, Any] = json.loads(PRICES_FILE.read_text(encoding="utf-8"))
    return table


@lru_cache(maxsize=1024)
def _entry(model: str) -> dict[str, Any] | None:
    entries: list[dict[str, Any]] = price_table()["models"]
    for entry in entries:
        if fnmatch.fnmatchcase(model, entry["match"]):
            return entry
    return None


def default_price(model: str) -> Price | None:
    """The built-in price of ``model`` (the name sent upstream): the first entry whose
    ``match`` glob matches it (dated snapshots such as ``gpt-4.1-mini-2025-04-14`` match
    their family), or ``None`` when the table has no such model."""
    entry = _entry(model)
    if entry is None:
        return None
    return Price(**{k: v for k, v in entry.items() if k not in ("match", "max_output_tokens")})


def default_max_output_tokens(model: str) -> int | None:
    """The model's own output ceiling from the built-in table (``None`` when unknown)."""
    entry = _entry(model)
    return None if entry is None else entry.get("max_output_tokens")
