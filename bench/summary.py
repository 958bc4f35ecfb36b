"""From measurement records to the figures of the non-streaming paths: latency
and throughput per concurrency, agent turns, admission, the durable reservation's
cost; :mod:`bench.summary_streams` does the streaming, history, parsing and memory
figures and :mod:`bench.targets` the targets.

Derived figures (added latency, ratios, slopes) are computed within each repeat
first, from runs of the same repeat, and only then summarised over repeats:
``median (min–max)``.
"""

from __future__ import annotations

from typing import Any

from bench import summary_streams, targets
from bench.config import Config
from bench.paths import ORDER, TASKGATE
from bench.records import Index, Records, agg, done, finite, get, paired, pct, per_1k, rate


def summarize(records: Records, cfg: Config, paths: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every figure as data (medians and spreads); :func:`bench.report.render` prints it."""
    ix = Index(records)
    avail = [k for k in ORDER if paths.get(k, {}).get("available")]
    s: dict[str, Any] = {"latency": [], "tool_turn": [], "stream": [], "stream_slope": [], "relay_cpu": [],
                         "throughput": [], "admission": [], "history": [], "history_slope": [],
                         "parsing": [], "memory": [], "durable": [], "tail": []}
    _latency(ix, avail, cfg, s)
    _tail(ix, avail, cfg, s)
    _tool_turn(ix, avail, cfg, s)
    _throughput(ix, avail, cfg, s)
    _admission(ix, avail, cfg, s)
    _durable(ix, cfg, s)
    summary_streams.add(ix, avail, cfg, records, s)
    s["other_load_cores"] = agg(
        get(r["result"], "cpu_s", "other") / r["result"]["wall_s"] for r in records
        if "result" in r and finite(get(r["result"], "cpu_s", "other")) and r["result"].get("wall_s"))
    s["targets"] = targets.targets(s, cfg)
    return s


def _latency(ix: Index, avail: list[str], cfg: Config, s: dict[str, Any]) -> None:
    """Non-streaming latency, rate and proxy CPU per path and concurrency."""
    for c in cfg.concurrencies:
        direct = {q: ix.series("latency", "direct", lambda r, q=q: pct(r, "latency_ms", q), c=c)
                  for q in ("p50", "p95", "p99")}
        lite = ix.series("latency", "litellm", lambda r: pct(r, "latency_ms", "p50"), c=c)
        lite_added = {r: lite[r] - direct["p50"][r] for r in lite if finite(lite[r]) and finite(direct["p50"].get(r))}
        pk = ix.series("latency", "portkey", lambda r: pct(r, "latency_ms", "p50"), c=c)
        pk_added = {r: pk[r] - direct["p50"][r] for r in pk if finite(pk[r]) and finite(direct["p50"].get(r))}
        pk_rps = ix.series("latency", "portkey", rate, c=c)
        for p in avail:
            row: dict[str, Any] = {"path": p, "c": c, "error": ix.error("latency", p, c=c)}
            for q in ("p50", "p95", "p99"):
                mine = ix.series("latency", p, lambda r, q=q: pct(r, "latency_ms", q), c=c)
                row[q] = agg(mine.values())
                if p != "direct":
                    row[f"added_{q}"] = agg(paired(mine, direct[q], lambda a, b: a - b))
            mine50 = ix.series("latency", p, lambda r: pct(r, "latency_ms", "p50"), c=c)
            if p != "direct":
                row["x_direct_p50"] = agg(paired(mine50, direct["p50"], lambda a, b: a / b))
                if p != "litellm":
                    added = {r: mine50[r] - direct["p50"][r] for r in mine50
                             if finite(mine50[r]) and finite(direct["p50"].get(r))}
                    row["added_vs_litellm_added"] = agg(paired(added, lite_added, lambda a, b: a / b))
                    if p != "portkey":
                        row["added_minus_portkey_added"] = agg(paired(added, pk_added, lambda a, b: a - b))
                        row["x_portkey_rps"] = agg(paired(ix.series("latency", p, rate, c=c), pk_rps,
                                                          lambda a, b: a / b))
            row["rps"] = agg(ix.series("latency", p, rate, c=c).values())
            row["proxy_cpu_ms"] = agg(ix.series("latency", p, lambda r: per_1k(r, "cpu_s", "proxy"), c=c).values())
            row["errors"] = sum(sum(res.get("errors", {}).values()) for res in ix.results("latency", p, c=c).values())
            s["latency"].append(row)


def _tail(ix: Index, avail: list[str], cfg: Config, s: dict[str, Any]) -> None:
    """The non-streaming tail from both load generators at the wrk concurrencies:
    p50, p99, p99.9, max, req/s and p99 ÷ p50 (within each run)."""
    if not cfg.use_wrk:
        return
    for c in cfg.wrk_concurrencies:
        for p in avail:
            for gen, fig in (("bench/load.py", "latency"), ("wrk", "latency_wrk")):
                if not ix.has(fig, p):
                    continue
                row: dict[str, Any] = {"path": p, "c": c, "generator": gen, "error": ix.error(fig, p, c=c)}
                for q in ("p50", "p95", "p99", "p99.9", "max"):
                    row[q] = agg(ix.series(fig, p, lambda r, q=q: pct(r, "latency_ms", q), c=c).values())
                row["p99_over_p50"] = agg(ix.series(
                    fig, p, lambda r: _ratio(pct(r, "latency_ms", "p99"), pct(r, "latency_ms", "p50")), c=c).values())
                row["rps"] = agg(ix.series(fig, p, rate, c=c).values())
                row["proxy_cpu_ms"] = agg(ix.series(fig, p, lambda r: per_1k(r, "cpu_s", "proxy"), c=c).values())
                row["errors"] = sum(sum(res.get("errors", {}).values()) for res in ix.results(fig, p, c=c).values())
                s["tail"].append(row)


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if finite(a) and finite(b) and b else None


def _tool_turn(ix: Index, avail: list[str], cfg: Config, s: dict[str, Any]) -> None:
    """Agent turns carrying a tool result (the agent-turn admission path), each a new
    conversation or all of a task's one (``conversation``; records written before the
    variant have no such parameter: one conversation per task)."""
    for c in cfg.tool_turn_concurrencies:
        direct50 = ix.series("latency", "direct", lambda r: pct(r, "latency_ms", "p50"), c=c)
        direct99 = ix.series("latency", "direct", lambda r: pct(r, "latency_ms", "p99"), c=c)
        for conversation in cfg.tool_turn_conversations:
            for p in avail:
                if p not in TASKGATE:
                    continue
                at: dict[str, Any] = {"c": c, "conversation": conversation}
                if conversation == "task" and not ix.results("tool_turn", p, **at):
                    at = {"c": c}  # an older run's records
                if not ix.results("tool_turn", p, **at) and not ix.error("tool_turn", p, **at):
                    continue
                turn_rps = ix.series("tool_turn", p, rate, **at)
                p50 = ix.series("tool_turn", p, lambda r: pct(r, "latency_ms", "p50"), **at)
                p99 = ix.series("tool_turn", p, lambda r: pct(r, "latency_ms", "p99"), **at)
                fast50 = ix.series("latency", p, lambda r: pct(r, "latency_ms", "p50"), c=c)
                s["tool_turn"].append({
                    "path": p, "c": c, "conversation": conversation, "error": ix.error("tool_turn", p, **at),
                    "p50": agg(p50.values()), "p99": agg(p99.values()),
                    "added_p50": agg(paired(p50, direct50, lambda a, b: a - b)),
                    "added_p99": agg(paired(p99, direct99, lambda a, b: a - b)),
                    "vs_fast_path_p50": agg(paired(p50, fast50, lambda a, b: a - b)),
                    "rps": agg(turn_rps.values()),
                    "x_fast_path_rps": agg(paired(turn_rps, ix.series("latency", p, rate, c=c), lambda a, b: a / b)),
                    "errors": sum(sum(res.get("errors", {}).values())
                                  for res in ix.results("tool_turn", p, **at).values()),
                })


def _throughput(ix: Index, avail: list[str], cfg: Config, s: dict[str, Any]) -> None:
    """The best non-streaming rate of each path (any c), with CPU per 1,000
    requests in that run and ratios to the other paths in the same repeat."""
    best: dict[str, dict[int, tuple[float, int, dict[str, Any]]]] = {}
    for p in avail:
        per: dict[int, tuple[float, int, dict[str, Any]]] = {}
        for c in cfg.concurrencies:
            for r, res in ix.results("latency", p, c=c).items():
                rps = rate(res)
                if finite(rps) and (r not in per or rps > per[r][0]):
                    per[r] = (rps, c, res)
        best[p] = per
    for p in avail:
        per = best[p]
        rps = {r: v[0] for r, v in per.items()}

        def per_k(group: str) -> list[float]:
            return [get(v[2], "cpu_s", group) * 1000.0 / done(v[2]) for v in per.values()
                    if done(v[2]) and finite(get(v[2], "cpu_s", group))]

        row = {"path": p, "rps": agg(rps.values()),
               "at_c": sorted({v[1] for v in per.values()}),
               "proxy_cpu_per_1k": agg(per_k("proxy")), "upstream_cpu_per_1k": agg(per_k("upstream")),
               "postgres_cpu_per_1k": agg(per_k("postgres")), "client_cpu_per_1k": agg(per_k("client")),
               "other_cpu_per_1k": agg(per_k("other")),
               "proxy_kernel_share": agg(get(v[2], "system_cpu_s", "proxy") / get(v[2], "cpu_s", "proxy")
                                         for v in per.values() if finite(get(v[2], "system_cpu_s", "proxy"))
                                         and get(v[2], "cpu_s", "proxy")),
               "upstream_conns_per_1k": agg(per_1k(v[2], "counters", "upstream_connections") for v in per.values()),
               "pg_conns_per_1k": agg(per_1k(v[2], "counters", "pg_connections_opened") for v in per.values()),
               "client_util": agg(get(v[2], "cpu_s", "client") / v[2]["wall_s"] for v in per.values()
                                  if v[2].get("wall_s") and finite(get(v[2], "cpu_s", "client"))),
               "proxy_util": agg(get(v[2], "cpu_s", "proxy") / v[2]["wall_s"] for v in per.values()
                                 if v[2].get("wall_s") and finite(get(v[2], "cpu_s", "proxy")))}
        if p != "direct":
            row["x_direct"] = agg(paired(rps, {r: v[0] for r, v in best.get("direct", {}).items()}, lambda a, b: a / b))
            for other in ("litellm", "portkey", "taskgate_embedded"):
                if p != other:
                    row[f"x_{other}"] = agg(paired(rps, {r: v[0] for r, v in best.get(other, {}).items()},
                                                   lambda a, b: a / b))
        row.update(_scaling(ix, p, cfg))
        s["throughput"].append(row)


def _scaling(ix: Index, p: str, cfg: Config) -> dict[str, Any]:
    """How ``p``'s rate holds as concurrency rises: best of c > 1 ÷ rate at c=1
    (``rise``) and rate at the highest c ÷ that best (``hold``), per repeat."""
    cs = sorted(cfg.concurrencies)
    if len(cs) < 2:
        return {}
    low = ix.series("latency", p, rate, c=cs[0])
    top = ix.series("latency", p, rate, c=cs[-1])
    best: dict[int, float] = {}
    for c in cs[1:]:
        for r, v in ix.series("latency", p, rate, c=c).items():
            if finite(v) and v > best.get(r, 0.0):
                best[r] = v
    return {"rise": agg(paired(best, low, lambda a, b: a / b)), "hold": agg(paired(top, best, lambda a, b: a / b)),
            "rise_over": cs[1:], "hold_at": cs[-1]}


def _admission(ix: Index, avail: list[str], cfg: Config, s: dict[str, Any]) -> None:
    """Admission on one hot task vs spread over many: end to end and ``admit()`` alone."""
    top = max(cfg.concurrencies)
    for p in avail:
        if p not in TASKGATE:
            continue
        spread_tasks = cfg.spread_tasks
        e2e_hot = ix.series("admission_e2e", p, rate, tasks=1, c=top)
        e2e_spread = ix.series("latency", p, rate, c=top)
        only_hot = ix.results("admission_only", p, tasks=1, c=cfg.admission_concurrency)
        only_spread = ix.results("admission_only", p, tasks=spread_tasks, c=cfg.admission_concurrency)

        def pgper_1k(results: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
            return agg(get(res, "cpu_s", "postgres") * 1000.0 / done(res) for res in results.values()
                       if done(res) and finite(get(res, "cpu_s", "postgres")))

        for label, e2e, only in (("1 hot task", e2e_hot, only_hot),
                                 (f"{spread_tasks:,} tasks", e2e_spread, only_spread)):
            s["admission"].append({
                "path": p, "tasks": label,
                "e2e_rps": agg(e2e.values()),
                "admit_rps": agg(rate(res) for res in only.values()),
                "admit_p50_ms": agg(pct(res, "latency_ms", "p50") for res in only.values()),
                "admit_p99_ms": agg(pct(res, "latency_ms", "p99") for res in only.values()),
                "admit_client_cpu_per_1k": agg(res["client_cpu_s"] * 1000.0 / res["n"]
                                               for res in only.values() if res.get("n")),
                "pg_cpu_per_1k": pgper_1k(only),
                "errors": sum(sum(res.get("errors", {}).values()) for res in only.values()),
                "error": ix.error("admission_only", p, tasks=1 if label.startswith("1 ") else spread_tasks,
                                  c=cfg.admission_concurrency),
            })


def _durable(ix: Index, cfg: Config, s: dict[str, Any]) -> None:
    """The durable reservation's cost: the same runs with fsync on and off."""
    p = "taskgate_embedded"
    for c in cfg.durable_concurrencies:
        direct = ix.series("latency", "direct", lambda r: pct(r, "latency_ms", "p50"), c=c)
        on = {q: ix.series("durable", p, lambda r, q=q: pct(r, "latency_ms", q), c=c, fsync="on")
              for q in ("p50", "p99")}
        off = {q: ix.series("durable", p, lambda r, q=q: pct(r, "latency_ms", q), c=c, fsync="off")
               for q in ("p50", "p99")}
        rps_on = ix.series("durable", p, rate, c=c, fsync="on")
        rps_off = ix.series("durable", p, rate, c=c, fsync="off")
        if not (on["p50"] or off["p50"]):
            continue
        cpu = {f: ix.series("durable", p, lambda r: per_1k(r, "cpu_s", "proxy"), c=c, fsync=f) for f in ("on", "off")}
        pg = {f: ix.series("durable", p, lambda r: per_1k(r, "cpu_s", "postgres"), c=c, fsync=f) for f in ("on", "off")}
        s["durable"].append({
            "path": p, "c": c,
            "error": ix.error("durable", p, c=c, fsync="on") or ix.error("durable", p, c=c, fsync="off"),
            "p50_on": agg(on["p50"].values()), "p50_off": agg(off["p50"].values()),
            "p99_on": agg(on["p99"].values()), "p99_off": agg(off["p99"].values()),
            "added_p50_on": agg(paired(on["p50"], direct, lambda a, b: a - b)),
            "added_p50_off": agg(paired(off["p50"], direct, lambda a, b: a - b)),
            "cost_p50_ms": agg(paired(on["p50"], off["p50"], lambda a, b: a - b)),
            "rps_on": agg(rps_on.values()), "rps_off": agg(rps_off.values()),
            "rps_on_over_off": agg(paired(rps_on, rps_off, lambda a, b: a / b)),
            "proxy_cpu_ms_on": agg(cpu["on"].values()), "proxy_cpu_ms_off": agg(cpu["off"].values()),
            "pg_cpu_ms_on": agg(pg["on"].values()), "pg_cpu_ms_off": agg(pg["off"].values()),
            "fdatasync_p50_ms": agg(ix.series("durable", p, lambda r: pct(r, "latency_ms", "p50"),
                                              probe="fdatasync").values()),
            "fdatasync_p99_ms": agg(ix.series("durable", p, lambda r: pct(r, "latency_ms", "p99"),
                                              probe="fdatasync").values()),
        })
