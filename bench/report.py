"""From measurement records to figures: medians and spreads over repeats, ratios
to direct and to LiteLLM, targets met or missed, and the markdown report.

Derived figures (added latency, ratios, slopes) are computed within each repeat
first, from runs of the same repeat, and only then summarised over repeats:
``median (min–max)``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

from bench.config import Config
from bench.paths import LABELS, ORDER, TASKGATE
from bench.stats import median, spread

Records = list[dict[str, Any]]


# ------------------------------------------------------------------ helpers


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not math.isnan(x) and not math.isinf(x)


def agg(values: Iterable[float | None]) -> dict[str, Any] | None:
    """``{"median", "min", "max", "n"}`` of the finite values, ``None`` if none."""
    v = [x for x in values if _finite(x)]
    if not v:
        return None
    lo, hi = spread(v)
    return {"median": median(v), "min": lo, "max": hi, "n": len(v)}


def _get(d: Any, *keys: str) -> Any:
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
        if _finite(x) and _finite(y):
            try:
                out.append(op(x, y))
            except ZeroDivisionError:
                pass
    return out


def _rps(res: dict[str, Any]) -> float | None:
    return res.get("rps") if res.get("completed", res.get("n")) else None


def _per_1k(res: dict[str, Any], *keys: str) -> float | None:
    """The counter at ``keys`` per 1,000 finished requests."""
    v = _get(res, *keys)
    return v * 1000.0 / _done(res) if _finite(v) and _done(res) else None


def _done(res: dict[str, Any]) -> int:
    """Requests that finished inside the measured window."""
    return int(res.get("completed", res.get("n", 0)) or 0)


def _pct(res: dict[str, Any], key: str, q: str) -> float | None:
    return _get(res, key, q)


# ------------------------------------------------------------------ summary


def summarize(records: Records, cfg: Config, paths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every figure as data (medians and spreads); :func:`render` prints it."""
    ix = Index(records)
    avail = [k for k in ORDER if paths.get(k, {}).get("available")]
    s: dict[str, Any] = {"latency": [], "tool_turn": [], "stream": [], "stream_slope": [], "relay_cpu": [],
                         "throughput": [], "admission": [], "history": [], "history_slope": [],
                         "parsing": [], "memory": []}

    # non-streaming latency
    for c in cfg.concurrencies:
        direct = {q: ix.series("latency", "direct", lambda r, q=q: _pct(r, "latency_ms", q), c=c)
                  for q in ("p50", "p95", "p99")}
        lite = ix.series("latency", "litellm", lambda r: _pct(r, "latency_ms", "p50"), c=c)
        lite_added = {r: lite[r] - direct["p50"][r] for r in lite if _finite(lite[r]) and _finite(direct["p50"].get(r))}
        for p in avail:
            row: dict[str, Any] = {"path": p, "c": c, "error": ix.error("latency", p, c=c)}
            for q in ("p50", "p95", "p99"):
                mine = ix.series("latency", p, lambda r, q=q: _pct(r, "latency_ms", q), c=c)
                row[q] = agg(mine.values())
                if p != "direct":
                    row[f"added_{q}"] = agg(paired(mine, direct[q], lambda a, b: a - b))
            mine50 = ix.series("latency", p, lambda r: _pct(r, "latency_ms", "p50"), c=c)
            if p != "direct":
                row["x_direct_p50"] = agg(paired(mine50, direct["p50"], lambda a, b: a / b))
                if p != "litellm":
                    added = {r: mine50[r] - direct["p50"][r] for r in mine50
                             if _finite(mine50[r]) and _finite(direct["p50"].get(r))}
                    row["added_vs_litellm_added"] = agg(paired(added, lite_added, lambda a, b: a / b))
            row["rps"] = agg(ix.series("latency", p, _rps, c=c).values())
            row["proxy_cpu_ms"] = agg(ix.series("latency", p, lambda r: _per_1k(r, "cpu_s", "proxy"), c=c).values())
            row["errors"] = sum(sum(res.get("errors", {}).values()) for res in ix.results("latency", p, c=c).values())
            s["latency"].append(row)

    # agent turns with a tool result (locked admission path)
    for c in cfg.tool_turn_concurrencies:
        direct50 = ix.series("latency", "direct", lambda r: _pct(r, "latency_ms", "p50"), c=c)
        direct99 = ix.series("latency", "direct", lambda r: _pct(r, "latency_ms", "p99"), c=c)
        for p in avail:
            if p not in TASKGATE:
                continue
            p50 = ix.series("tool_turn", p, lambda r: _pct(r, "latency_ms", "p50"), c=c)
            p99 = ix.series("tool_turn", p, lambda r: _pct(r, "latency_ms", "p99"), c=c)
            fast50 = ix.series("latency", p, lambda r: _pct(r, "latency_ms", "p50"), c=c)
            s["tool_turn"].append({
                "path": p, "c": c, "error": ix.error("tool_turn", p, c=c),
                "p50": agg(p50.values()), "p99": agg(p99.values()),
                "added_p50": agg(paired(p50, direct50, lambda a, b: a - b)),
                "added_p99": agg(paired(p99, direct99, lambda a, b: a - b)),
                "vs_fast_path_p50": agg(paired(p50, fast50, lambda a, b: a - b)),
                "rps": agg(ix.series("tool_turn", p, _rps, c=c).values()),
                "errors": sum(sum(res.get("errors", {}).values()) for res in ix.results("tool_turn", p, c=c).values()),
            })

    # streaming: TTFB and total, c=1
    lo_n, hi_n = cfg.chunk_counts
    slopes: dict[str, dict[int, float]] = {}
    for p in avail:
        t_lo = ix.series("stream", p, lambda r: _pct(r, "latency_ms", "p50"), chunks=lo_n)
        t_hi = ix.series("stream", p, lambda r: _pct(r, "latency_ms", "p50"), chunks=hi_n)
        slopes[p] = {r: (t_hi[r] - t_lo[r]) * 1000.0 / (hi_n - lo_n) for r in t_hi
                     if _finite(t_hi[r]) and _finite(t_lo.get(r))}
    for n in cfg.chunk_counts:
        d_ttfb = ix.series("stream", "direct", lambda r: _pct(r, "ttfb_ms", "p50"), chunks=n)
        d_total = ix.series("stream", "direct", lambda r: _pct(r, "latency_ms", "p50"), chunks=n)
        l_total = ix.series("stream", "litellm", lambda r: _pct(r, "latency_ms", "p50"), chunks=n)
        for p in avail:
            ttfb = ix.series("stream", p, lambda r: _pct(r, "ttfb_ms", "p50"), chunks=n)
            total = ix.series("stream", p, lambda r: _pct(r, "latency_ms", "p50"), chunks=n)
            total99 = ix.series("stream", p, lambda r: _pct(r, "latency_ms", "p99"), chunks=n)
            incomplete = sum(res.get("incomplete_streams", 0) for res in ix.results("stream", p, chunks=n).values())
            row = {"path": p, "chunks": n, "error": ix.error("stream", p, chunks=n),
                   "ttfb_p50": agg(ttfb.values()), "total_p50": agg(total.values()), "total_p99": agg(total99.values()),
                   "incomplete": incomplete}
            if p != "direct":
                row["added_ttfb_p50"] = agg(paired(ttfb, d_ttfb, lambda a, b: a - b))
                row["added_total_p50"] = agg(paired(total, d_total, lambda a, b: a - b))
                row["x_direct_total"] = agg(paired(total, d_total, lambda a, b: a / b))
                if p != "litellm":
                    row["x_litellm_total"] = agg(paired(total, l_total, lambda a, b: a / b))
            s["stream"].append(row)
    for p in avail:
        row = {"path": p, "slope_us": agg(slopes[p].values())}
        if p != "direct":
            row["relay_us"] = agg(paired(slopes[p], slopes.get("direct", {}), lambda a, b: a - b))
        s["stream_slope"].append(row)

    # per-chunk relay CPU (paced streams): solve cpu = a*events + b*requests
    relay: dict[str, dict[int, tuple[float, float]]] = {}
    for p in avail:
        if p == "direct":
            continue
        lo = ix.results("relay_cpu", p, chunks=lo_n)
        hi = ix.results("relay_cpu", p, chunks=hi_n)
        per: dict[int, tuple[float, float]] = {}
        for r in lo:
            if r not in hi:
                continue
            c1, e1, r1 = _get(lo[r], "cpu_s", "proxy"), lo[r].get("events", 0), _done(lo[r])
            c2, e2, r2 = _get(hi[r], "cpu_s", "proxy"), hi[r].get("events", 0), _done(hi[r])
            if not (_finite(c1) and _finite(c2)) or not (e1 or e2):
                continue
            det = e1 * r2 - e2 * r1
            if r1 and r2 and det:
                a = (c1 * r2 - c2 * r1) / det
                b = (c1 - a * e1) / r1
            else:  # streams too slow to finish in the window: CPU per chunk, request cost included
                a, b = (c1 + c2) / (e1 + e2), math.nan
            per[r] = (a * 1e6, b * 1e6)
        relay[p] = per
        hi_res = list(hi.values())
        s["relay_cpu"].append({
            "path": p, "error": ix.error("relay_cpu", p, chunks=hi_n) or ix.error("relay_cpu", p, chunks=lo_n),
            "upstream_us_per_chunk": agg(_get(res, "cpu_s", "upstream") * 1e6 / res["events"] for res in hi_res
                                         if res.get("events") and _finite(_get(res, "cpu_s", "upstream"))),
            "proxy_kernel_share": agg(_get(res, "system_cpu_s", "proxy") / _get(res, "cpu_s", "proxy") for res in hi_res
                                      if _finite(_get(res, "system_cpu_s", "proxy")) and _get(res, "cpu_s", "proxy")),
            "per_chunk_us": agg(v[0] for v in per.values()),
            "per_request_us": agg(v[1] for v in per.values()),
            "events_per_s": agg((res.get("events", 0) / res["wall_s"]) for res in hi_res if res.get("wall_s")),
            "cpu_util_hi": agg((_get(res, "cpu_s", "proxy") or 0) / res["wall_s"] for res in hi_res if res.get("wall_s")),
        })
    for row in s["relay_cpu"]:
        if row["path"] != "litellm" and "litellm" in relay:
            row["x_litellm"] = agg(paired({r: v[0] for r, v in relay[row["path"]].items()},
                                          {r: v[0] for r, v in relay["litellm"].items()}, lambda a, b: a / b))

    # throughput at saturation: the best of the non-streaming latency runs, per repeat
    # (a single-worker gateway is CPU-bound already at c=1 on a small machine)
    best: dict[str, dict[int, tuple[float, int, dict[str, Any]]]] = {}
    for p in avail:
        per: dict[int, tuple[float, int, dict[str, Any]]] = {}
        for c in cfg.concurrencies:
            for r, res in ix.results("latency", p, c=c).items():
                rps = _rps(res)
                if _finite(rps) and (r not in per or rps > per[r][0]):
                    per[r] = (rps, c, res)
        best[p] = per
    for p in avail:
        per = best[p]
        rps = {r: v[0] for r, v in per.items()}

        def per_k(group: str) -> list[float]:
            return [_get(v[2], "cpu_s", group) * 1000.0 / _done(v[2]) for v in per.values()
                    if _done(v[2]) and _finite(_get(v[2], "cpu_s", group))]

        row = {"path": p, "rps": agg(rps.values()),
               "at_c": sorted({v[1] for v in per.values()}),
               "proxy_cpu_per_1k": agg(per_k("proxy")), "upstream_cpu_per_1k": agg(per_k("upstream")),
               "postgres_cpu_per_1k": agg(per_k("postgres")), "client_cpu_per_1k": agg(per_k("client")),
               "other_cpu_per_1k": agg(per_k("other")),
               "proxy_kernel_share": agg(_get(v[2], "system_cpu_s", "proxy") / _get(v[2], "cpu_s", "proxy")
                                         for v in per.values() if _finite(_get(v[2], "system_cpu_s", "proxy"))
                                         and _get(v[2], "cpu_s", "proxy")),
               "upstream_conns_per_1k": agg(_per_1k(v[2], "counters", "upstream_connections") for v in per.values()),
               "pg_conns_per_1k": agg(_per_1k(v[2], "counters", "pg_connections_opened") for v in per.values()),
               "client_util": agg(_get(v[2], "cpu_s", "client") / v[2]["wall_s"] for v in per.values()
                                  if v[2].get("wall_s") and _finite(_get(v[2], "cpu_s", "client"))),
               "proxy_util": agg(_get(v[2], "cpu_s", "proxy") / v[2]["wall_s"] for v in per.values()
                                 if v[2].get("wall_s") and _finite(_get(v[2], "cpu_s", "proxy")))}
        if p != "direct":
            row["x_direct"] = agg(paired(rps, {r: v[0] for r, v in best.get("direct", {}).items()}, lambda a, b: a / b))
            if p != "litellm":
                row["x_litellm"] = agg(paired(rps, {r: v[0] for r, v in best.get("litellm", {}).items()},
                                              lambda a, b: a / b))
        s["throughput"].append(row)

    # admission: hot vs spread
    top = max(cfg.concurrencies)
    for p in avail:
        if p not in TASKGATE:
            continue
        spread_tasks = cfg.spread_tasks
        e2e_hot = ix.series("admission_e2e", p, _rps, tasks=1, c=top)
        e2e_spread = ix.series("latency", p, _rps, c=top)
        only_hot = ix.results("admission_only", p, tasks=1, c=cfg.admission_concurrency)
        only_spread = ix.results("admission_only", p, tasks=spread_tasks, c=cfg.admission_concurrency)

        def pg_per_1k(results: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
            return agg(_get(res, "cpu_s", "postgres") * 1000.0 / _done(res) for res in results.values()
                       if _done(res) and _finite(_get(res, "cpu_s", "postgres")))

        for label, e2e, only in (("1 hot task", e2e_hot, only_hot), (f"{spread_tasks:,} tasks", e2e_spread, only_spread)):
            s["admission"].append({
                "path": p, "tasks": label,
                "e2e_rps": agg(e2e.values()),
                "admit_rps": agg(_rps(res) for res in only.values()),
                "admit_p50_ms": agg(_pct(res, "latency_ms", "p50") for res in only.values()),
                "admit_p99_ms": agg(_pct(res, "latency_ms", "p99") for res in only.values()),
                "admit_client_cpu_per_1k": agg(res["client_cpu_s"] * 1000.0 / res["n"] for res in only.values() if res.get("n")),
                "pg_cpu_per_1k": pg_per_1k(only),
                "errors": sum(sum(res.get("errors", {}).values()) for res in only.values()),
                "error": ix.error("admission_only", p, tasks=1 if label.startswith("1 ") else spread_tasks,
                                  c=cfg.admission_concurrency),
            })

    # history growth through the gateway
    h_lo, h_hi = cfg.history_sizes
    hist_added: dict[int, dict[int, float]] = {}
    for n in cfg.history_sizes:
        d = ix.series("history", "direct", lambda r: _pct(r, "latency_ms", "p50"), messages=n)
        for p in ("direct", "taskgate_embedded"):
            if p not in avail:
                continue
            mine = ix.series("history", p, lambda r: _pct(r, "latency_ms", "p50"), messages=n)
            row = {"path": p, "messages": n, "p50": agg(mine.values()), "error": ix.error("history", p, messages=n)}
            if p != "direct":
                added = {r: mine[r] - d[r] for r in mine if _finite(mine[r]) and _finite(d.get(r))}
                hist_added[n] = added
                row["added_p50"] = agg(added.values())
            s["history"].append(row)
    if h_lo in hist_added and h_hi in hist_added:
        s["history_slope"] = agg(paired(hist_added[h_hi], hist_added[h_lo],
                                        lambda a, b: (a - b) * 1000.0 / (h_hi - h_lo)))

    # parsing (in-process)
    base: dict[tuple[str, int], dict[str, float]] = {}
    rows: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for rec in records:
        if rec["figure"] == "parsing" and "result" in rec:
            res = rec["result"]
            rows.setdefault((res["format"], res["messages"]), []).append(res)
    for (fmt, n), results in sorted(rows.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        entry = {"format": fmt, "messages": n, "actual_messages": results[0].get("actual_messages", n),
                 "body_kib": results[0]["body_kib"],
                 **{k: agg(r[k] for r in results) for k in ("json_loads_us", "parse_us", "conversation_key_us")}}
        base.setdefault((fmt, 0), entry)  # first (smallest) size per format
        entry["parse_x_smallest"] = (entry["parse_us"]["median"] / base[(fmt, 0)]["parse_us"]["median"]
                                     if entry["parse_us"] and base[(fmt, 0)]["parse_us"] else None)
        entry["loads_x_smallest"] = (entry["json_loads_us"]["median"] / base[(fmt, 0)]["json_loads_us"]["median"]
                                     if entry["json_loads_us"] and base[(fmt, 0)]["json_loads_us"] else None)
        s["parsing"].append(entry)

    # memory with many open streams
    mem: dict[str, dict[int, float]] = {}
    for p in avail:
        results = ix.results("memory", p, streams=cfg.open_streams)
        if not results and not ix.error("memory", p, streams=cfg.open_streams):
            continue
        per = {r: res["per_stream_bytes"] / 1024.0 for r, res in results.items() if _finite(res.get("per_stream_bytes"))}
        mem[p] = per
        s["memory"].append({
            "path": p, "error": ix.error("memory", p, streams=cfg.open_streams),
            "opened": agg(_get(res, "held", "open", "still_open") for res in results.values()),
            "rss_before_mib": agg(res["rss_before"] / 2**20 for res in results.values()),
            "rss_open_mib": agg(res["rss_open"] / 2**20 for res in results.values()),
            "rss_after_mib": agg(res["rss_after_close"] / 2**20 for res in results.values()),
            "per_stream_kib": agg(per.values()),
            "open_s": agg(_get(res, "held", "open", "open_s") for res in results.values()),
            "failures": [(_get(res, "held", "open", "failures") or {}) for res in results.values()],
        })
    for row in s["memory"]:
        if row["path"] != "litellm" and "litellm" in mem:
            row["x_litellm"] = agg(paired(mem[row["path"]], mem["litellm"], lambda a, b: a / b))

    s["other_load_cores"] = agg(
        _get(r["result"], "cpu_s", "other") / r["result"]["wall_s"] for r in records
        if "result" in r and _finite(_get(r["result"], "cpu_s", "other")) and r["result"].get("wall_s"))
    s["targets"] = targets(s, cfg)
    return s


# ------------------------------------------------------------------ targets


def _find(rows: list[dict[str, Any]], **match: Any) -> dict[str, Any] | None:
    for row in rows:
        if all(row.get(k) == v for k, v in match.items()):
            return row
    return None


def targets(s: dict[str, Any], cfg: Config) -> list[dict[str, Any]]:
    """The issue's targets, per taskgate path: goal, measured (median), met."""
    out = []
    tg = [p for p in TASKGATE if _find(s["latency"], path=p)]

    def add(name: str, path: str, value: dict[str, Any] | None, goal: float, unit: str, higher: bool,
            how: str) -> None:
        med = value["median"] if value else None
        met = None if med is None else (med >= goal if higher else med <= goal)
        out.append({"target": name, "path": path, "goal": goal, "unit": unit, "higher_is_better": higher,
                    "measured": value, "met": met, "how": how})

    for p in tg:
        row = _find(s["latency"], path=p, c=1)
        add("p50 added latency, c=1, incl. admission", p, row and row.get("added_p50"), 1.5, "ms", False,
            "p50(taskgate) − p50(direct), non-streaming, c=1")
        row = _find(s["latency"], path=p, c=16)
        add("p99 added latency, c=16", p, row and row.get("added_p99"), 5.0, "ms", False,
            "p99(taskgate) − p99(direct), non-streaming, c=16")
        row = _find(s["throughput"], path=p)
        add("throughput vs LiteLLM", p, row and row.get("x_litellm"), 10.0, "×", True,
            "best non-streaming req/s (any c), taskgate ÷ LiteLLM, same repeat")
        row = _find(s["relay_cpu"], path=p)
        add("per-chunk relay cost", p, row and row.get("per_chunk_us"), 30.0, "µs", False,
            "gateway CPU per relayed chunk, chunks arriving one by one")
        row = _find(s["admission"], path=p, tasks="1 hot task")
        add("hot-task admission rate", p, row and row.get("admit_rps"), 2000.0, "/s", True,
            f"admit() alone, one task, {cfg.admission_concurrency} concurrent")
    row = _find(s["memory"], path="taskgate_embedded")
    if row:
        add("RSS per open stream", "taskgate_embedded", row.get("per_stream_kib"), 64.0, "KiB", False,
            f"(RSS with {cfg.open_streams:,} open streams − RSS before) ÷ streams")
    return out


# ------------------------------------------------------------------ markdown


def fmt(v: dict[str, Any] | None, digits: int = 2, spread_shown: bool = True) -> str:
    """``median (min–max)``; ``—`` when missing."""
    if not v:
        return "—"
    m = v["median"]

    def num(x: float) -> str:
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        if abs(x) >= 100:
            return f"{x:.0f}"
        return f"{x:.{digits}f}"

    if spread_shown and v.get("n", 1) > 1:
        return f"{num(m)} ({num(v['min'])}–{num(v['max'])})"
    return num(m)


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _label(p: str) -> str:
    return LABELS.get(p, p)


def render(s: dict[str, Any], meta: dict[str, Any], cfg: Config, paths: dict[str, dict[str, Any]]) -> str:
    """The markdown report."""
    m = meta["machine"]
    out: list[str] = ["# taskgate benchmark", ""]
    out.append(f"Run {meta['started']} · {meta['mode']} · {meta.get('repeats_done', 0)} repeat(s) · "
               f"{meta.get('elapsed_s', 0):.0f} s of measurement · commit `{meta.get('commit', '?')}` · "
               f"app/ digest `{meta.get('app_digest', '?')}`.")
    if meta.get("app_digest_end", meta.get("app_digest")) != meta.get("app_digest"):
        out.append(f"**Warning: app/ changed during the run** (digest `{meta['app_digest_end']}` at the end): "
                   "processes started later (the memory figure's fresh proxies, `admit()` runs) measured other code.")
    out.append("Figures are **median (min–max) over repeats**; every path measured in the same run against the "
               "same local upstream (`bench/upstream.py`, answers at once).")
    out.append("")
    out.append(f"**Machine:** {m['cpu_model']}, {m['logical_cpus']} logical CPUs ({m['physical_cores']} cores), "
               f"{m['memory_gib']} GiB RAM, {m['os']}, {m['python']}. Load average at start: "
               f"{m['load_avg_1m_at_start']}; CPU used by other processes during the measured windows: "
               f"{fmt(s.get('other_load_cores'))} cores (median, min–max over windows). "
               "Client, upstream, proxy and PostgreSQL all share these cores.")
    vers = ", ".join(f"{k} {v}" for k, v in meta.get("versions", {}).items())
    if vers:
        out.append(f"**Versions:** {vers}.")
    out.append("")
    out.append("**Paths:** " + "; ".join(
        f"{_label(k)}: " + ("measured" if paths[k]["available"] else f"**unavailable** — {paths[k]['reason']}")
        for k in ORDER if k in paths) + ".")
    for k in ORDER:
        for note in paths.get(k, {}).get("notes", []):
            out.append(f"\n*{_label(k)}:* {note}")
    out.append("")

    # targets
    out += ["## Targets", ""]
    rows = []
    for t in s["targets"]:
        met = "—" if t["met"] is None else ("**met**" if t["met"] else "**missed**")
        cmp_ = "≥" if t["higher_is_better"] else "≤"
        measured = f"{fmt(t['measured'])} {t['unit']}" if t["measured"] else "—"
        rows.append([t["target"], _label(t["path"]), f"{cmp_} {t['goal']:g} {t['unit']}", measured, met, t["how"]])
    out += _table(["target", "path", "goal", "measured", "met?", "how"], rows) + [""]

    # latency
    out += ["## Added latency, non-streaming chat completions", "",
            "Client latency in ms (p50 / p95 / p99); *added* = path − direct in the same repeat. "
            "taskgate: admission on every request (fast path, no tool results) + usage accounting after it. "
            f"Tokens spread over {cfg.spread_tasks:,} tasks.", ""]
    rows = []
    for r in s["latency"]:
        if r.get("error") and not r.get("p50"):
            rows.append([_label(r["path"]), str(r["c"]), f"error: {r['error'][:80]}"] + [""] * 7)
            continue
        rows.append([_label(r["path"]), str(r["c"]), fmt(r["p50"]), fmt(r["p95"]), fmt(r["p99"]),
                     fmt(r.get("added_p50")), fmt(r.get("added_p95")), fmt(r.get("added_p99")),
                     fmt(r.get("x_direct_p50")), fmt(r.get("added_vs_litellm_added")), fmt(r.get("rps"), 0),
                     fmt(r.get("proxy_cpu_ms"))])
    out += _table(["path", "c", "p50", "p95", "p99", "added p50", "added p95", "added p99", "× direct (p50)",
                   "added ÷ LiteLLM's added (p50)", "req/s", "proxy CPU ms/request"], rows) + [""]

    if s["tool_turn"]:
        out += ["### Agent turns carrying a tool result (locked admission path)", "",
                "Each request carries a new tool call + result (unique ids): `SELECT … FOR UPDATE`, ledger insert, "
                "loop-guard verdict, then the counter update. ms.", ""]
        rows = [[_label(r["path"]), str(r["c"]), fmt(r["p50"]), fmt(r["p99"]), fmt(r["added_p50"]),
                 fmt(r["added_p99"]), fmt(r["vs_fast_path_p50"]), fmt(r["rps"], 0)] for r in s["tool_turn"]]
        out += _table(["path", "c", "p50", "p99", "added p50", "added p99", "p50 − fast path p50", "req/s"], rows) + [""]

    # streaming
    out += ["## Streaming", "", f"c=1; the upstream writes each stream at once ({cfg.chunk_size}-character deltas, "
            "~170-byte SSE events, `include_usage` on). TTFB = first body byte. ms.", ""]
    rows = [[_label(r["path"]), str(r["chunks"]), fmt(r["ttfb_p50"]), fmt(r["total_p50"]), fmt(r["total_p99"]),
             fmt(r.get("added_ttfb_p50")), fmt(r.get("added_total_p50")), fmt(r.get("x_direct_total")),
             fmt(r.get("x_litellm_total"))] for r in s["stream"]]
    out += _table(["path", "chunks", "TTFB p50", "total p50", "total p99", "added TTFB", "added total",
                   "× direct (total)", "× LiteLLM (total)"], rows) + [""]
    lo_n, hi_n = cfg.chunk_counts
    rows = [[_label(r["path"]), fmt(r["slope_us"]), fmt(r.get("relay_us"))] for r in s["stream_slope"]]
    out += [f"Wall-clock cost per chunk = (total p50 at {hi_n} − at {lo_n}) ÷ {hi_n - lo_n}, µs; relay = path − direct:", ""]
    out += _table(["path", "µs per chunk", "relay µs per chunk (− direct)"], rows) + [""]
    if s["relay_cpu"]:
        out += [f"**Relay CPU per chunk** — chunks arrive one by one ({cfg.paced_delay_ms:g} ms apart, "
                f"{cfg.paced_concurrency} concurrent streams); proxy CPU = a·chunks + b·requests solved from the "
                f"{lo_n}- and {hi_n}-chunk runs. µs.", ""]
        rows = [[_label(r["path"]), fmt(r["per_chunk_us"]), fmt(r["per_request_us"], 0), fmt(r.get("x_litellm")),
                 fmt(r["events_per_s"], 0), fmt(r["cpu_util_hi"]), fmt(r["proxy_kernel_share"]),
                 fmt(r["upstream_us_per_chunk"])] for r in s["relay_cpu"]]
        out += _table(["path", "CPU µs per chunk (a)", "CPU µs per stream (b)", "× LiteLLM (a)",
                       f"chunks/s ({hi_n}-chunk run)", "proxy CPU (cores)", "kernel share of proxy CPU",
                       "upstream µs per chunk (floor: one write each)"], rows) + [""]

    # throughput
    out += ["## Throughput at saturation", "",
            "Best req/s of the non-streaming runs (any c), and CPU seconds per 1,000 requests in that run "
            "(psutil on the server pids; client = the load process; other = the rest of the machine).", ""]
    rows = [[_label(r["path"]), fmt(r["rps"], 0), ",".join(map(str, r["at_c"])), fmt(r.get("x_direct")),
             fmt(r.get("x_litellm")), fmt(r["proxy_cpu_per_1k"]), fmt(r["upstream_cpu_per_1k"]),
             fmt(r["postgres_cpu_per_1k"]), fmt(r["client_cpu_per_1k"]), fmt(r["other_cpu_per_1k"]),
             fmt(r["proxy_util"]), fmt(r["proxy_kernel_share"]), fmt(r["upstream_conns_per_1k"], 1),
             fmt(r["pg_conns_per_1k"], 1)]
            for r in s["throughput"]]
    out += _table(["path", "req/s", "at c", "× direct", "× LiteLLM", "proxy CPU s/1k", "upstream CPU s/1k",
                   "PostgreSQL CPU s/1k", "client CPU s/1k", "other CPU s/1k", "proxy CPU (cores)",
                   "kernel share of proxy CPU", "new upstream conns /1k", "new PG conns /1k"], rows) + [""]

    # admission
    if s["admission"]:
        out += [f"## Admission: one hot task vs {cfg.spread_tasks:,} tasks", "",
                f"*End to end*: non-streaming through the gateway at c={max(cfg.concurrencies)}. *admit() alone*: "
                f"`app.admission.admission.admit` in a separate process, {cfg.admission_concurrency} concurrent, "
                "no HTTP (one `UPDATE … RETURNING` transaction each).", ""]
        rows = [[_label(r["path"]), r["tasks"], fmt(r["e2e_rps"], 0), fmt(r["admit_rps"], 0), fmt(r["admit_p50_ms"]),
                 fmt(r["admit_p99_ms"]), fmt(r["admit_client_cpu_per_1k"]), fmt(r["pg_cpu_per_1k"])]
                for r in s["admission"]]
        out += _table(["path", "tasks", "end-to-end req/s", "admit() /s", "admit p50 ms", "admit p99 ms",
                       "caller CPU s/1k", "PostgreSQL CPU s/1k"], rows) + [""]

    # history & parsing
    out += ["## Cost as the conversation grows", ""]
    if s["history"]:
        rows = [[_label(r["path"]), str(r["messages"]), fmt(r["p50"]), fmt(r.get("added_p50"))] for r in s["history"]]
        out += ["Through the gateway, c=1, chat bodies resending the whole history (tool call + ~400-byte result per "
                "turn; last turn's result takes the locked path). ms.", ""]
        out += _table(["path", "messages", "p50", "added p50"], rows) + [""]
        if s["history_slope"]:
            out += [f"Added latency per extra history message: **{fmt(s['history_slope'])} µs** "
                    "(json.loads, body read and forward: O(history)).", ""]
    if s["parsing"]:
        out += ["In-process, µs per request: `json.loads` of the body (O(history)) vs the format's "
                "`parse_request` (reads only the trailing new messages) and the conversation key.", ""]
        rows = [[r["format"], str(r["actual_messages"]), f"{r['body_kib']:.0f}", fmt(r["json_loads_us"], 1),
                 fmt(r["parse_us"], 1), fmt(r["conversation_key_us"], 1),
                 f"{r['loads_x_smallest']:.1f}×" if r.get("loads_x_smallest") else "—",
                 f"{r['parse_x_smallest']:.2f}×" if r.get("parse_x_smallest") else "—"] for r in s["parsing"]]
        out += _table(["format", "messages", "body KiB", "json.loads µs", "parse_request µs", "conversation key µs",
                       "json.loads vs smallest", "parse_request vs smallest"], rows) + [""]

    # memory
    if s["memory"]:
        out += [f"## Memory with {cfg.open_streams:,} concurrent open streams", "",
                "Proxy RSS (psutil, process tree) before opening, with all streams open (each has its first content "
                "delta; the upstream then holds it), and after they close.", ""]
        rows = []
        for r in s["memory"]:
            notes = [f"error: {r['error'][:80]}"] if r.get("error") else []
            notes += [", ".join(f"{k}: {v}" for k, v in f.items()) for f in r["failures"] if f]
            rows.append([_label(r["path"]), fmt(r["opened"], 0), fmt(r["rss_before_mib"], 1), fmt(r["rss_open_mib"], 1),
                         fmt(r["rss_after_mib"], 1), fmt(r["per_stream_kib"], 1), fmt(r.get("x_litellm")),
                         fmt(r["open_s"], 1), "; ".join(notes) or ""])
        out += _table(["path", "streams open when read", "RSS before MiB", "RSS open MiB", "RSS after MiB",
                       "KiB per stream", "× LiteLLM", "seconds to open", "not opened"], rows) + [""]

    out += ["## Method", "",
            "- Load: `bench/load.py`, a separate process with a bare asyncio HTTP/1.1 client (uvloop, keep-alive, "
            "requests pre-rendered), closed loop: each of c connections sends its next request when the previous "
            "answer is complete; a warm-up is discarded.",
            "- Upstream: `bench/upstream.py`, bare asyncio HTTP server with cached responses; response shape chosen "
            "by model name, so every path gets byte-identical upstream answers.",
            "- CPU: user+system seconds from psutil on the proxy, upstream and PostgreSQL backend pids, read when the "
            "load process starts and ends its measured window.",
            f"- Run with `python -m bench{' --quick' if meta['mode'] == 'quick' else ''}`; raw records are in "
            "`bench/results/latest.json`.", ""]
    return "\n".join(out)
