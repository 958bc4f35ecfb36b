"""Summaries of the streaming figures (TTFB, totals, per-chunk slope, relay CPU
per chunk), conversation growth, in-process parsing and memory per open stream;
called by :func:`bench.summary.summarize`."""

from __future__ import annotations

import math
from typing import Any

from bench.config import Config
from bench.records import Index, Records, agg, done, finite, get, paired, pct


def add(ix: Index, avail: list[str], cfg: Config, records: Records, s: dict[str, Any]) -> None:
    """Fill ``s``'s stream, stream_slope, relay_cpu, history, parsing and memory rows."""
    _stream(ix, [p for p in avail if ix.has("stream", p)], cfg, s)
    _relay_cpu(ix, [p for p in avail if ix.has("relay_cpu", p)], cfg, s)
    _history(ix, avail, cfg, s)
    _parsing(records, s)
    _memory(ix, avail, cfg, s)


def _stream(ix: Index, avail: list[str], cfg: Config, s: dict[str, Any]) -> None:
    lo_n, hi_n = cfg.chunk_counts
    slopes: dict[str, dict[int, float]] = {}
    for p in avail:
        t_lo = ix.series("stream", p, lambda r: pct(r, "latency_ms", "p50"), chunks=lo_n)
        t_hi = ix.series("stream", p, lambda r: pct(r, "latency_ms", "p50"), chunks=hi_n)
        slopes[p] = {r: (t_hi[r] - t_lo[r]) * 1000.0 / (hi_n - lo_n) for r in t_hi
                     if finite(t_hi[r]) and finite(t_lo.get(r))}
    for n in cfg.chunk_counts:
        d_ttfb = ix.series("stream", "direct", lambda r: pct(r, "ttfb_ms", "p50"), chunks=n)
        d_total = ix.series("stream", "direct", lambda r: pct(r, "latency_ms", "p50"), chunks=n)
        l_total = ix.series("stream", "litellm", lambda r: pct(r, "latency_ms", "p50"), chunks=n)
        for p in avail:
            ttfb = ix.series("stream", p, lambda r: pct(r, "ttfb_ms", "p50"), chunks=n)
            total = ix.series("stream", p, lambda r: pct(r, "latency_ms", "p50"), chunks=n)
            total99 = ix.series("stream", p, lambda r: pct(r, "latency_ms", "p99"), chunks=n)
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


def _relay_cpu(ix: Index, avail: list[str], cfg: Config, s: dict[str, Any]) -> None:
    """Per-chunk relay CPU (paced streams): cpu = a·chunks + b·requests, solved
    from the two stream lengths of each repeat."""
    lo_n, hi_n = cfg.chunk_counts
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
            c1, e1, r1 = get(lo[r], "cpu_s", "proxy"), lo[r].get("events", 0), done(lo[r])
            c2, e2, r2 = get(hi[r], "cpu_s", "proxy"), hi[r].get("events", 0), done(hi[r])
            if not (finite(c1) and finite(c2)) or not (e1 or e2):
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
            "upstream_us_per_chunk": agg(get(res, "cpu_s", "upstream") * 1e6 / res["events"] for res in hi_res
                                         if res.get("events") and finite(get(res, "cpu_s", "upstream"))),
            "proxy_kernel_share": agg(get(res, "system_cpu_s", "proxy") / get(res, "cpu_s", "proxy") for res in hi_res
                                      if finite(get(res, "system_cpu_s", "proxy")) and get(res, "cpu_s", "proxy")),
            "per_chunk_us": agg(v[0] for v in per.values()),
            "per_request_us": agg(v[1] for v in per.values()),
            "events_per_s": agg((res.get("events", 0) / res["wall_s"]) for res in hi_res if res.get("wall_s")),
            "cpu_util_hi": agg((get(res, "cpu_s", "proxy") or 0) / res["wall_s"]
                               for res in hi_res if res.get("wall_s")),
        })
    for row in s["relay_cpu"]:
        if row["path"] != "litellm" and "litellm" in relay:
            row["x_litellm"] = agg(paired({r: v[0] for r, v in relay[row["path"]].items()},
                                          {r: v[0] for r, v in relay["litellm"].items()}, lambda a, b: a / b))


def _history(ix: Index, avail: list[str], cfg: Config, s: dict[str, Any]) -> None:
    h_lo, h_hi = cfg.history_sizes
    hist_added: dict[int, dict[int, float]] = {}
    for n in cfg.history_sizes:
        d = ix.series("history", "direct", lambda r: pct(r, "latency_ms", "p50"), messages=n)
        for p in ("direct", "taskgate_embedded"):
            if p not in avail:
                continue
            mine = ix.series("history", p, lambda r: pct(r, "latency_ms", "p50"), messages=n)
            row = {"path": p, "messages": n, "p50": agg(mine.values()), "error": ix.error("history", p, messages=n)}
            if p != "direct":
                added = {r: mine[r] - d[r] for r in mine if finite(mine[r]) and finite(d.get(r))}
                hist_added[n] = added
                row["added_p50"] = agg(added.values())
            s["history"].append(row)
    if h_lo in hist_added and h_hi in hist_added:
        s["history_slope"] = agg(paired(hist_added[h_hi], hist_added[h_lo],
                                        lambda a, b: (a - b) * 1000.0 / (h_hi - h_lo)))


def _parsing(records: Records, s: dict[str, Any]) -> None:
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


def _memory(ix: Index, avail: list[str], cfg: Config, s: dict[str, Any]) -> None:
    mem: dict[str, dict[int, float]] = {}
    for p in avail:
        results = ix.results("memory", p, streams=cfg.open_streams)
        if not results and not ix.error("memory", p, streams=cfg.open_streams):
            continue
        per = {r: res["per_stream_bytes"] / 1024.0 for r, res in results.items() if finite(res.get("per_stream_bytes"))}
        mem[p] = per
        s["memory"].append({
            "path": p, "error": ix.error("memory", p, streams=cfg.open_streams),
            "opened": agg(get(res, "held", "open", "still_open") for res in results.values()),
            "rss_before_mib": agg(res["rss_before"] / 2**20 for res in results.values()),
            "rss_open_mib": agg(res["rss_open"] / 2**20 for res in results.values()),
            "rss_after_mib": agg(res["rss_after_close"] / 2**20 for res in results.values()),
            "per_stream_kib": agg(per.values()),
            "open_s": agg(get(res, "held", "open", "open_s") for res in results.values()),
            "failures": [(get(res, "held", "open", "failures") or {}) for res in results.values()],
        })
    for row in s["memory"]:
        if row["path"] != "litellm" and "litellm" in mem:
            row["x_litellm"] = agg(paired(mem[row["path"]], mem["litellm"], lambda a, b: a / b))
