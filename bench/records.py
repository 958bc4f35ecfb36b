"""Measurement records as the report reads them: an index by figure, path and
parameters, per-repeat series, and the summary statistics (``median (min–max)``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from bench.stats import median, spread

Records = list[dict[str, Any]]


def finite(x: Any) -> bool:
    """A real number (not NaN or infinite)."""
    return isinstance(x, (int, float)) and not math.isnan(x) and not math.isinf(x)


def agg(values: Iterable[float | None]) -> dict[str, Any] | None:
    """``{"median", "min", "max", "n"}`` of the finite values, ``None`` if none."""
    v = [x for x in values if finite(x)]
    if not v:
        return None
    lo, hi = spread(v)
    return {"median": median(v), "min": lo, "max": hi, "n": len(v)}


def get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


class Index:
    """Records by (figure, path, params) and repeat."""

    def __init__(self, records: Records) -> None:
        self.by: dict[tuple[str, str, tuple], dict[int, dict[str, Any]]] = {}
        self.errors: dict[tuple[str, str, tuple], str] = {}
        self.repeats = sorted({r["repeat"] for r in records}) or [0]
        for r in records:
            key = (r["figure"], r["path"], tuple(sorted(r["params"].items())))
            if "result" in r:
                self.by.setdefault(key, {})[r["repeat"]] = r["result"]
            else:
                self.errors[key] = r.get("error", "?")

    def results(self, figure: str, path: str, **params: Any) -> dict[int, dict[str, Any]]:
        return self.by.get((figure, path, tuple(sorted(params.items()))), {})

    def has(self, figure: str, path: str) -> bool:
        """Whether ``path`` has any record (result or error) of ``figure``."""
        return any(k[0] == figure and k[1] == path for k in (*self.by, *self.errors))

    def error(self, figure: str, path: str, **params: Any) -> str | None:
        return self.errors.get((figure, path, tuple(sorted(params.items()))))

    def series(self, figure: str, path: str, fn: Callable[[dict[str, Any]], Any], **params: Any) -> dict[int, Any]:
        """``{repeat: fn(result)}``."""
        return {rep: fn(res) for rep, res in self.results(figure, path, **params).items()}


def paired(a: dict[int, Any], b: dict[int, Any], op: Callable[[float, float], float]) -> list[float]:
    """``op(a[r], b[r])`` for every repeat ``r`` present and finite in both."""
    out = []
    for r, x in a.items():
        y = b.get(r)
        if finite(x) and finite(y):
            try:
                out.append(op(x, y))
            except ZeroDivisionError:
                pass
    return out


def rate(res: dict[str, Any]) -> float | None:
    return res.get("rps") if res.get("completed", res.get("n")) else None


def per_1k(res: dict[str, Any], *keys: str) -> float | None:
    """The counter at ``keys`` per 1,000 finished requests."""
    v = get(res, *keys)
    return v * 1000.0 / done(res) if finite(v) and done(res) else None


def done(res: dict[str, Any]) -> int:
    """Requests that finished inside the measured window."""
    return int(res.get("completed", res.get("n", 0)) or 0)


def pct(res: dict[str, Any], key: str, q: str) -> float | None:
    return get(res, key, q)
