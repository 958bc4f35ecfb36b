"""The CPU calibration figure: a fixed pure-Python workload timed on this machine,
so that runs on different machines compare.

The workload (:func:`workload`) is a loop of what a gateway's Python does per
request in miniature: dict look-ups and updates, string formatting and joins,
bytes searches, small-int arithmetic, a short list sort. It allocates little and
touches no I/O, so its time is the interpreter's speed on one core. One *pass*
takes about a millisecond on a 2020s server core; the figure is the **best of**
``runs`` passes (the least disturbed by other processes), measured before the
services start and again after they stop.

*cal* is that best time in milliseconds. Every absolute CPU or latency figure ``x``
(ms, µs) is also reported as ``x ÷ cal`` ("cal units": how many passes of the
workload the same time holds), which is roughly machine-independent for CPU-bound
figures. Latencies that wait on the disk or the network do not scale this way; the
report says which figures those are.

``python -m bench.calibrate`` prints the figure alone.
"""

from __future__ import annotations

import gc
import statistics
import sys
import time

ITERATIONS = 2_000
"""Loop iterations of one pass (fixed: changing it changes the unit)."""

_WORDS = tuple(f"w{i:03d}" for i in range(64))
_HAYSTACK = b'{"model":"bench","messages":[{"role":"user","content":"' + b"x" * 200 + b'"}],"stream":false}'


def workload(iterations: int = ITERATIONS) -> int:
    """One pass; returns a checksum (so nothing is optimised away)."""
    counts: dict[str, int] = {}
    total = 0
    for i in range(iterations):
        word = _WORDS[i & 63]
        counts[word] = counts.get(word, 0) + i
        line = f"{word}:{i}:{i * 7 % 13}"
        total += len(line) + _HAYSTACK.find(b'"stream"') + (i ^ (i >> 3))
        if i % 50 == 0:
            total += sum(sorted((v & 1023 for v in counts.values()), reverse=True)[:8])
            total += len("".join(_WORDS[:16]))
    return total


def measure(runs: int = 200) -> dict[str, float | int | str]:
    """Time ``runs`` passes (GC off during each); ``cal_ms`` is the best,
    ``median_ms`` the median (their gap shows how busy the machine was)."""
    workload(ITERATIONS // 4)  # warm caches and the specialising interpreter
    times = []
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(runs):
            t0 = time.perf_counter()
            workload()
            times.append((time.perf_counter() - t0) * 1000.0)
    finally:
        if enabled:
            gc.enable()
    return {"cal_ms": min(times), "median_ms": statistics.median(times), "runs": runs,
            "iterations": ITERATIONS, "python": sys.version.split()[0]}


def combine(before: dict[str, float | int | str], after: dict[str, float | int | str] | None) -> dict[str, object]:
    """The run's calibration: the best of the two measurements, with both kept."""
    best = min(float(before["cal_ms"]), float(after["cal_ms"])) if after else float(before["cal_ms"])
    return {"cal_ms": best, "before": before, "after": after}


def per_cal(value: float | None, cal_ms: float | None, unit_ms: float = 1.0) -> float | None:
    """``value`` (in units of ``unit_ms`` milliseconds: 1 for ms, 0.001 for µs,
    1000 for s) divided by the calibration time: cal units."""
    if value is None or not cal_ms:
        return None
    return value * unit_ms / cal_ms


_MS_KEYS = {"p50", "p95", "p99", "p99.9", "max", "ttfb_p50", "total_p50", "total_p99", "vs_fast_path_p50",
            "added_minus_portkey_added"}


def unit_ms(key: str) -> float | None:
    """Milliseconds per unit of a summary key (``None``: not a time). Keys ending
    ``_us`` are µs; ``*_cpu_per_1k`` are CPU seconds per 1,000 requests (= ms per
    request); the percentile, ``added_*``, ``*_ms`` and ``*_ms_*`` keys are ms."""
    if key.endswith("_us") or "_us_" in key:
        return 0.001
    if key.endswith("cpu_per_1k") or key.endswith("_ms") or "_ms_" in key or key in _MS_KEYS:
        return 1.0
    if key.startswith("added_") and not key.startswith("added_vs_"):
        return 1.0
    if key.startswith("p") and key.rsplit("_", 1)[-1] in ("on", "off"):
        return 1.0
    return None


def calibrated(summary: dict[str, object], cal_ms: float) -> dict[str, object]:
    """Every time figure of a :func:`bench.summary.summarize` result divided by
    ``cal_ms`` (cal units), rows keyed as in the summary (``path`` and the other
    non-figure fields kept); medians, minima and maxima each divided."""
    out: dict[str, object] = {"cal_ms": cal_ms}
    for section, rows in summary.items():
        if section == "targets" or not isinstance(rows, list):
            continue
        conv = []
        for row in rows:
            if not isinstance(row, dict):
                continue
            new = {k: v for k, v in row.items() if not isinstance(v, dict) and k != "error"}
            for k, v in row.items():
                unit = unit_ms(k)
                if unit is not None and isinstance(v, dict) and "median" in v:
                    new[k] = {q: v[q] * unit / cal_ms for q in ("median", "min", "max") if q in v} | {"n": v.get("n")}
            conv.append(new)
        out[section] = conv
    for key in ("history_slope",):
        v = summary.get(key)
        if isinstance(v, dict) and "median" in v:
            out[key] = {q: v[q] * 0.001 / cal_ms for q in ("median", "min", "max")}
    return out


if __name__ == "__main__":
    m = measure()
    print(f"cal = {m['cal_ms']:.3f} ms (best of {m['runs']} passes; median {m['median_ms']:.3f} ms), "
          f"Python {m['python']}")
