"""The performance targets (issue 11, and issue 23 where it is stricter or new), each
measured from one run: goal, measured value (median (min–max) over repeats, ratios taken
within a repeat unless said) and whether it is met. Never asserted in tests: the report
states them.

| figure | target |
|---|---|
| proxy CPU per request, non-streaming | ≤ 0.7 ms at every c, ≤ 0.5 ms at c=16 (issue 23); c=128 ≤ 1.2 × c=1 |
| throughput as concurrency rises | best of c ∈ {16, 64, 128} ≥ 1.5 × c=1, and c=128 ≥ 0.9 × the best |
| throughput vs Portkey gateway | ≥ 1.5 × at c=16, 64 and 128 |
| the tail (issue 23) | p99 ≤ Portkey's p99 at c=64 and c=128; p99 ÷ p50 ≤ 4 at c=128 |
| agent turn carrying a tool result (issue 23) | req/s ≥ 0.85 × the fast path's at c=16 |
| throughput vs LiteLLM | ≥ 20 × |
| added latency p50, c=1, with a durable reservation | ≤ 0.8 ms, and ≤ Portkey's added p50 |
| relay CPU per streamed chunk | ≤ 20 µs (issue 23; issue 11 asked 15) |
| memory per open stream | ≤ 28 KiB (issue 23) |
| 2 workers vs 1 (client on the same 2 cores) | ≥ 1.4 × |
"""

from __future__ import annotations

from typing import Any

from bench.config import Config

MAIN = "taskgate_embedded"
"""The path the targets are stated for: one worker, embedded PostgreSQL."""


def find_row(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any] | None:
    """Ratio of two medians (for figures measured in different runs)."""
    if not a or not b or not b["median"]:
        return None
    return {"median": a["median"] / b["median"], "n": 1}


def targets(s: dict[str, Any], cfg: Config) -> list[dict[str, Any]]:
    """Every target of the module docstring, for :data:`MAIN` (and its
    multi-worker variant)."""
    out: list[dict[str, Any]] = []

    def add(name: str, value: dict[str, Any] | None, goal: float, unit: str, higher: bool, how: str,
            path: str = MAIN) -> None:
        med = value["median"] if value else None
        met = None if med is None else (med >= goal if higher else med <= goal)
        out.append({"target": name, "path": path, "goal": goal, "unit": unit, "higher_is_better": higher,
                    "measured": value, "met": met, "how": how})

    if not find_row(s["latency"], path=MAIN):
        return out
    cs = sorted(cfg.concurrencies)
    for c in cs:
        row = find_row(s["latency"], path=MAIN, c=c)
        add(f"proxy CPU per request, non-streaming, c={c}", row and row.get("proxy_cpu_ms"), 0.5 if c == 16 else 0.7,
            "ms", False, "gateway process CPU (psutil) ÷ requests finished in the window")
    low, top = find_row(s["latency"], path=MAIN, c=cs[0]), find_row(s["latency"], path=MAIN, c=cs[-1])
    add(f"proxy CPU per request, c={cs[-1]} ÷ c={cs[0]}",
        _ratio(top and top.get("proxy_cpu_ms"), low and low.get("proxy_cpu_ms")), 1.2, "×", False,
        "medians of the two rows above")
    thr = find_row(s["throughput"], path=MAIN) or {}
    add(f"throughput: best of c ∈ {{{', '.join(map(str, cs[1:]))}}} ÷ c={cs[0]}", thr.get("rise"), 1.5, "×", True,
        "req/s, same repeat")
    add(f"throughput: c={cs[-1]} ÷ best of c > {cs[0]}", thr.get("hold"), 0.9, "×", True, "req/s, same repeat")
    for c in (16, 64, 128):
        row = find_row(s["latency"], path=MAIN, c=c)
        add(f"throughput vs Portkey gateway, c={c}", row and row.get("x_portkey_rps"), 1.5, "×", True,
            "req/s taskgate ÷ req/s Portkey at the same c, same repeat")
    for c in (64, 128):
        row, peer = find_row(s["latency"], path=MAIN, c=c), find_row(s["latency"], path="portkey", c=c)
        add(f"p99 ÷ Portkey's p99, c={c}", _ratio(row and row.get("p99"), peer and peer.get("p99")), 1.0, "×",
            False, "medians over repeats of the client's p99 (bench.load)")
    top_row = find_row(s["latency"], path=MAIN, c=cs[-1])
    add(f"p99 ÷ p50, c={cs[-1]}", _ratio(top_row and top_row.get("p99"), top_row and top_row.get("p50")), 4.0, "×",
        False, "medians over repeats of the client's p99 and p50 (bench.load)")
    turn = find_row(s["tool_turn"], path=MAIN, c=16, conversation="new") or {}
    add("agent turn with a tool result ÷ fast path, req/s, c=16", turn.get("x_fast_path_rps"), 0.85, "×", True,
        "tool_turn req/s ÷ latency req/s at c=16, same repeat (both closed loops on the same gateway); each turn "
        "a new conversation's")
    long_turn = find_row(s["tool_turn"], path=MAIN, c=16, conversation="task") or {}
    add("agent turn, one conversation per task (window at its cap) ÷ fast path, c=16",
        long_turn.get("x_fast_path_rps"), 0.85, "×", True,
        "as above, all of a task's turns in one conversation: the guard's window of 64 calls read and judged")
    add("throughput vs LiteLLM", thr.get("x_litellm"), 20.0, "×", True,
        "best req/s (any c) taskgate ÷ LiteLLM, same repeat")
    dur = find_row(s["durable"], path=MAIN, c=1)
    row1 = find_row(s["latency"], path=MAIN, c=1) or {}
    added = (dur and dur.get("added_p50_on")) or row1.get("added_p50")
    add("added latency p50, c=1, durable reservation", added, 0.8, "ms", False,
        "p50 − direct p50, non-streaming, fsync on (durable figure; latency figure if absent)")
    add("added latency p50, c=1: taskgate − Portkey", row1.get("added_minus_portkey_added"), 0.0, "ms", False,
        "taskgate's added p50 − Portkey's added p50, same repeat")
    relay = find_row(s["relay_cpu"], path=MAIN) or {}
    add("relay CPU per streamed chunk", relay.get("per_chunk_us"), 20.0, "µs", False,
        "gateway CPU per relayed chunk, chunks arriving one by one")
    mem = find_row(s["memory"], path=MAIN) or {}
    add("memory per open stream", mem.get("per_stream_kib"), 28.0, "KiB", False,
        f"(RSS with {cfg.open_streams:,} open streams − RSS before) ÷ streams")
    workers = find_row(s["throughput"], path="taskgate_workers") or {}
    add(f"{cfg.workers} workers vs 1", workers.get("x_taskgate_embedded"), 1.4, "×", True,
        "best req/s (any c), same repeat; client on the same cores", path="taskgate_workers")
    return out
