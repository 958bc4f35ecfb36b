"""Helpers for the console tests: scraping /metrics."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def scrape(base_url: str, token: str | None = None) -> dict[tuple[str, frozenset], float]:
    """``{(sample name, frozenset(labels.items())): value}`` from ``GET /metrics``."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    r = httpx.get(base_url + "/metrics", headers=headers, timeout=10)
    assert r.status_code == 200, r.text
    out: dict[tuple[str, frozenset], float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def sample(samples: dict, name: str, **labels: str) -> float:
    """The sum of the ``name`` samples whose labels include ``labels`` (a label not named
    is summed over)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)
