"""The markdown report of a run: targets, then one section per figure; and the
the Performance table of docs/performance.md (:func:`readme_table`). Data comes from
:func:`bench.summary.summarize`."""

from __future__ import annotations

from typing import Any

from bench.config import Config
from bench.paths import LABELS, ORDER

_LABELS: dict[str, str] = dict(LABELS)
"""Path labels of the report being rendered (``taskgate_workers`` names its N)."""
_CAL: dict[str, float] = {"ms": 0.0}
"""The calibration time of the report being rendered (ms; 0: none)."""
_CONVERSATION = {"new": "new", "task": "one per task"}
"""The agent-turn table's conversation column (:func:`bench.scenarios.tool_turn`)."""


def cal(v: dict[str, Any] | None, unit_ms: float = 1.0) -> str:
    """The median of ``v`` (in units of ``unit_ms`` ms) in cal units
    (:mod:`bench.calibrate`); ``—`` when missing or uncalibrated."""
    if not v or not _CAL["ms"]:
        return "—"
    x = v["median"] * unit_ms / _CAL["ms"]
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


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
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _versions(meta: dict[str, Any]) -> list[str]:
    """``name version`` of each component (the name once, when the version already starts with it)."""
    return [v if str(v).lower().startswith(k.lower()) else f"{k} {v}" for k, v in meta.get("versions", {}).items()]


def _label(p: str) -> str:
    return _LABELS.get(p, p)


def render(s: dict[str, Any], meta: dict[str, Any], cfg: Config, paths: dict[str, dict[str, Any]]) -> str:
    """The markdown report."""
    _LABELS.update({k: v["label"] for k, v in paths.items() if v.get("label")})
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
    calib = meta.get("calibration") or {}
    _CAL["ms"] = float(calib.get("cal_ms") or 0.0)
    if _CAL["ms"]:
        b, a = calib.get("before") or {}, calib.get("after") or {}
        out.append(f"**CPU calibration:** cal = **{_CAL['ms']:.3f} ms**, the best of {b.get('runs', '?')} passes of a "
                   f"fixed pure-Python loop (`bench/calibrate.py`, Python {b.get('python', '?')}), timed before the "
                   f"services started ({b.get('cal_ms', 0):.3f} ms, median {b.get('median_ms', 0):.3f}) and after they "
                   f"stopped ({a.get('cal_ms', 0):.3f} ms, median {a.get('median_ms', 0):.3f}). Columns marked "
                   "*÷ cal* give a time in cal units (time ÷ cal), to compare runs on other machines; CPU times scale "
                   "with it, waits on the disk do not. Every time figure in cal units is in the JSON "
                   "(`summary_per_cal`).")
    vers = ", ".join(_versions(meta))
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
            rows.append([_label(r["path"]), str(r["c"]), f"error: {r['error'][:80]}"] + [""] * 12)
            continue
        rows.append([_label(r["path"]), str(r["c"]), fmt(r["p50"]), fmt(r["p95"]), fmt(r["p99"]),
                     fmt(r.get("added_p50")), fmt(r.get("added_p99")),
                     fmt(r.get("added_minus_portkey_added")), fmt(r.get("added_vs_litellm_added")),
                     fmt(r.get("rps"), 0), fmt(r.get("x_portkey_rps")), fmt(r.get("proxy_cpu_ms")),
                     cal(r.get("added_p50")), cal(r.get("p99")), cal(r.get("proxy_cpu_ms"))])
    out += _table(["path", "c", "p50", "p95", "p99", "added p50", "added p99", "added p50 − Portkey's",
                   "added ÷ LiteLLM's added (p50)", "req/s", "req/s × Portkey", "proxy CPU ms/request",
                   "added p50 ÷ cal", "p99 ÷ cal", "proxy CPU ÷ cal"], rows) + [""]
    out += _tail(s)
    out += _durable(s, cfg)

    if s["tool_turn"]:
        out += ["### Agent turns carrying a tool result (the agent-turn admission path)", "",
                "Each request carries a new tool call + result (unique ids), tokens spread over the tasks: the "
                "loop guard judges the conversation's window and the ledger, counters and verdict go in one "
                "statement when the window is known in the gateway (`taskgate_known_turn()`; a task's first "
                "turn: `BEGIN`, `taskgate_agent_turn()`, `COMMIT`). *new*: each turn a new conversation's "
                "first; *one per task*: all of a task's turns in one conversation, whose window (64 calls) "
                "is read and judged on every turn. ms.", ""]
        rows = [[_label(r["path"]), str(r["c"]), _CONVERSATION.get(r.get("conversation", "task"), "?"),
                 fmt(r["p50"]), fmt(r["p99"]), fmt(r["added_p50"]), fmt(r["added_p99"]), fmt(r["vs_fast_path_p50"]),
                 fmt(r["rps"], 0), fmt(r.get("x_fast_path_rps"))] for r in s["tool_turn"]]
        header = ["path", "c", "conversation", "p50", "p99", "added p50", "added p99", "p50 − fast path p50",
                  "req/s", "÷ fast path req/s"]
        out += _table(header, rows) + [""]

    # streaming
    out += ["## Streaming", "", f"c=1; the upstream writes each stream at once ({cfg.chunk_size}-character deltas, "
            "~170-byte SSE events, `include_usage` on). TTFB = first body byte. ms.", ""]
    rows = [[_label(r["path"]), str(r["chunks"]), fmt(r["ttfb_p50"]), fmt(r["total_p50"]), fmt(r["total_p99"]),
             fmt(r.get("added_ttfb_p50")), fmt(r.get("added_total_p50")), fmt(r.get("x_direct_total")),
             fmt(r.get("x_litellm_total")), cal(r.get("added_total_p50"))] for r in s["stream"]]
    out += _table(["path", "chunks", "TTFB p50", "total p50", "total p99", "added TTFB", "added total",
                   "× direct (total)", "× LiteLLM (total)", "added total ÷ cal"], rows) + [""]
    lo_n, hi_n = cfg.chunk_counts
    rows = [[_label(r["path"]), fmt(r["slope_us"]), fmt(r.get("relay_us")), cal(r.get("relay_us"), 0.001)]
            for r in s["stream_slope"]]
    out += [f"Wall-clock cost per chunk = (total p50 at {hi_n} − at {lo_n}) ÷ {hi_n - lo_n}, µs; "
            "relay = path − direct:", ""]
    out += _table(["path", "µs per chunk", "relay µs per chunk (− direct)", "relay ÷ cal"], rows) + [""]
    if s["relay_cpu"]:
        out += [f"**Relay CPU per chunk** — chunks arrive one by one ({cfg.paced_delay_ms:g} ms apart, "
                f"{cfg.paced_concurrency} concurrent streams); proxy CPU = a·chunks + b·requests solved from the "
                f"{lo_n}- and {hi_n}-chunk runs. µs.", ""]
        rows = [[_label(r["path"]), fmt(r["per_chunk_us"]), fmt(r["per_request_us"], 0), fmt(r.get("x_litellm")),
                 fmt(r["events_per_s"], 0), fmt(r["cpu_util_hi"]), fmt(r["proxy_kernel_share"]),
                 fmt(r["upstream_us_per_chunk"]), cal(r["per_chunk_us"], 0.001)] for r in s["relay_cpu"]]
        out += _table(["path", "CPU µs per chunk (a)", "CPU µs per stream (b)", "× LiteLLM (a)",
                       f"chunks/s ({hi_n}-chunk run)", "proxy CPU (cores)", "kernel share of proxy CPU",
                       "upstream µs per chunk (floor: one write each)", "a ÷ cal"], rows) + [""]

    # throughput
    out += ["## Throughput at saturation", "",
            "Best req/s of the non-streaming runs (any c), and CPU seconds per 1,000 requests in that run "
            "(psutil on the server pids; client = the load process; other = the rest of the machine).", ""]
    rows = [[_label(r["path"]), fmt(r["rps"], 0), ",".join(map(str, r["at_c"])), fmt(r.get("rise")),
             fmt(r.get("hold")), fmt(r.get("x_portkey")), fmt(r.get("x_litellm")), fmt(r.get("x_taskgate_embedded")),
             fmt(r["proxy_cpu_per_1k"]), fmt(r["upstream_cpu_per_1k"]),
             fmt(r["postgres_cpu_per_1k"]), fmt(r["client_cpu_per_1k"]), fmt(r["other_cpu_per_1k"]),
             fmt(r["proxy_util"]), fmt(r["proxy_kernel_share"]), fmt(r["upstream_conns_per_1k"], 1),
             fmt(r["pg_conns_per_1k"], 1), cal(r["proxy_cpu_per_1k"]), cal(r["postgres_cpu_per_1k"])]
            for r in s["throughput"]]
    cs = sorted(cfg.concurrencies)
    out += [f"*rise* = best req/s at c > {cs[0]} ÷ req/s at c={cs[0]}; *hold* = req/s at c={cs[-1]} ÷ that best.", ""]
    out += _table(["path", "req/s", "at c", "rise", "hold", "× Portkey", "× LiteLLM", "× taskgate 1 worker",
                   "proxy CPU s/1k", "upstream CPU s/1k",
                   "PostgreSQL CPU s/1k", "client CPU s/1k", "other CPU s/1k", "proxy CPU (cores)",
                   "kernel share of proxy CPU", "new upstream conns /1k", "new PG conns /1k",
                   "proxy CPU per request ÷ cal", "PostgreSQL CPU per request ÷ cal"], rows) + [""]

    # admission
    if s["admission"]:
        out += [f"## Admission: one hot task vs {cfg.spread_tasks:,} tasks", "",
                f"*End to end*: non-streaming through the gateway at c={max(cfg.concurrencies)}. *admit() alone*: "
                f"`app.admission.admission.admit` in a separate process, {cfg.admission_concurrency} concurrent, "
                "no HTTP (one `UPDATE … RETURNING` transaction each).", ""]
        rows = [[_label(r["path"]), r["tasks"], fmt(r["e2e_rps"], 0), fmt(r["admit_rps"], 0), fmt(r["admit_p50_ms"]),
                 fmt(r["admit_p99_ms"]), fmt(r["admit_client_cpu_per_1k"]), fmt(r["pg_cpu_per_1k"]),
                 cal(r["admit_client_cpu_per_1k"]), cal(r["pg_cpu_per_1k"])]
                for r in s["admission"]]
        out += _table(["path", "tasks", "end-to-end req/s", "admit() /s", "admit p50 ms", "admit p99 ms",
                       "caller CPU s/1k", "PostgreSQL CPU s/1k", "caller CPU per admit ÷ cal",
                       "PostgreSQL CPU per admit ÷ cal"], rows) + [""]

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
                 f"{r['parse_x_smallest']:.2f}×" if r.get("parse_x_smallest") else "—",
                 cal(r["parse_us"], 0.001)] for r in s["parsing"]]
        out += _table(["format", "messages", "body KiB", "json.loads µs", "parse_request µs", "conversation key µs",
                       "json.loads vs smallest", "parse_request vs smallest", "parse_request ÷ cal"], rows) + [""]

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
            "answer is complete; a warm-up is discarded. The tail table repeats the non-streaming runs with wrk "
            "(`bench/wrk.py`, a Lua script sending the same bodies and tokens).",
            "- Upstream: `bench/upstream.py`, bare asyncio HTTP server with cached responses; response shape chosen "
            "by model name, so every path gets byte-identical upstream answers.",
            "- CPU: user+system seconds from psutil on the proxy, upstream and PostgreSQL backend pids, read when the "
            "load process starts and ends its measured window.",
            f"- Run with `python -m bench{' --quick' if meta['mode'] == 'quick' else ''}`; raw records are in "
            "`bench/results/latest.json`.", ""]
    return "\n".join(out)


def _tail(s: dict[str, Any]) -> list[str]:
    if not s.get("tail"):
        return []
    out = ["### The tail, two load generators", "",
           "The same non-streaming load from `bench/load.py` (asyncio + uvloop, one Python process) and, right "
           "after it, from [wrk](https://github.com/wg/wrk) (C, epoll, one thread, latencies in µs): c keep-alive "
           "connections, closed loop. ms; *p99 ÷ p50* within each run.", ""]
    rows = []
    for r in s["tail"]:
        if r.get("error") and not r.get("p50"):
            rows.append([_label(r["path"]), str(r["c"]), r["generator"], f"error: {r['error'][:80]}"] + [""] * 8)
            continue
        rows.append([_label(r["path"]), str(r["c"]), r["generator"], fmt(r["p50"]), fmt(r["p99"]), fmt(r["p99.9"]),
                     fmt(r["max"]), fmt(r["p99_over_p50"], 1), fmt(r["rps"], 0), fmt(r["proxy_cpu_ms"]),
                     cal(r["p99"]), str(r["errors"] or "")])
    return out + _table(["path", "c", "load generator", "p50", "p99", "p99.9", "max", "p99 ÷ p50", "req/s",
                         "proxy CPU ms/request", "p99 ÷ cal", "errors"], rows) + [""]


def _durable(s: dict[str, Any], cfg: Config) -> list[str]:
    if not s.get("durable"):
        return []
    out = ["### The durable reservation's cost", "",
           "taskgate, embedded PG, non-streaming, back-to-back runs with the server's `fsync` on (each admission "
           "commit waits for the disk) and off (it does not); cost = p50(on) − p50(off), same repeat. ms, except "
           "CPU (ms per request). *fdatasync* = an 8 KiB write + `fdatasync` timed alone on the same disk just "
           "before (p50 / p99): what each durable commit waits for at least.", ""]
    rows = [[str(r["c"]), fmt(r["p50_on"]), fmt(r["p50_off"]), fmt(r["cost_p50_ms"]), fmt(r["added_p50_on"]),
             fmt(r["added_p50_off"]), fmt(r["p99_on"]), fmt(r["p99_off"]), fmt(r["rps_on"], 0), fmt(r["rps_off"], 0),
             fmt(r["rps_on_over_off"]), fmt(r["proxy_cpu_ms_on"]), fmt(r["proxy_cpu_ms_off"]),
             fmt(r["pg_cpu_ms_on"]), fmt(r["pg_cpu_ms_off"]),
             f"{fmt(r.get('fdatasync_p50_ms'))} / {fmt(r.get('fdatasync_p99_ms'))}",
             cal(r["proxy_cpu_ms_on"])] for r in s["durable"]]
    return out + _table(["c", "p50 fsync on", "p50 off", "cost p50", "added p50 on", "added p50 off", "p99 on",
                         "p99 off", "req/s on", "req/s off", "req/s on ÷ off", "proxy CPU on", "proxy CPU off",
                         "PostgreSQL CPU on", "PostgreSQL CPU off", "fdatasync p50 / p99", "proxy CPU on ÷ cal"],
                         rows) + [""]


README_START = "<!-- bench:performance:start -->"
README_END = "<!-- bench:performance:end -->"


def readme_table(s: dict[str, Any], meta: dict[str, Any], cfg: Config) -> str:
    """The Performance table (docs/performance.md): the targets with the Portkey and LiteLLM
    figures beside taskgate's, and the run they come from (machine, versions,
    date, load)."""
    from bench.targets import MAIN, find_row

    def lat(path: str, c: int, key: str, digits: int = 2) -> str:
        row = find_row(s["latency"], path=path, c=c)
        return fmt(row and row.get(key), digits, spread_shown=False)

    m = meta["machine"]
    vers = "; ".join(_versions(meta))
    cal_ms = (meta.get("calibration") or {}).get("cal_ms")
    calib = f"CPU calibration (`bench/calibrate.py`): cal = {cal_ms:.3f} ms. " if cal_ms else ""
    out = [f"Run {meta['started']} ({meta['mode']}, {meta.get('repeats_done', 0)} repeats, commit "
           f"`{meta.get('commit', '?')}`) on {m['cpu_model']}, {m['logical_cpus']} logical CPUs, {m['python']}; "
           f"{vers}. Load average at start {m['load_avg_1m_at_start']}; other processes used "
           f"{fmt(s.get('other_load_cores'), spread_shown=False)} cores during the measured windows (median). "
           f"{calib}One gateway worker unless stated; client, upstream, gateways and PostgreSQL share the cores. "
           "Medians over repeats; ratios within a repeat.", ""]
    rows = []
    for c in sorted(cfg.concurrencies):
        rows.append([f"req/s, non-streaming, c={c}", lat(MAIN, c, "rps", 0), lat("portkey", c, "rps", 0),
                     lat("litellm", c, "rps", 0), "", ""])
    for c in sorted(cfg.concurrencies):
        rows.append([f"proxy CPU per request, c={c} (ms)", lat(MAIN, c, "proxy_cpu_ms"),
                     lat("portkey", c, "proxy_cpu_ms"), lat("litellm", c, "proxy_cpu_ms"), "", ""])
    rows.append(["added latency p50, c=1 (ms)", lat(MAIN, 1, "added_p50"), lat("portkey", 1, "added_p50"),
                 lat("litellm", 1, "added_p50"), "", ""])
    for t in s["targets"]:
        met = "—" if t["met"] is None else ("met" if t["met"] else "**missed**")
        cmp_ = "≥" if t["higher_is_better"] else "≤"
        rows.append([t["target"], f"{fmt(t['measured'], spread_shown=False)} {t['unit']}" if t["measured"] else "—",
                     "", "", f"{cmp_} {t['goal']:g} {t['unit']}", met])
    dur = find_row(s.get("durable", []), path=MAIN, c=1)
    if dur:
        rows.append(["durable reservation's cost, p50 at c=1 (fsync on − off, ms)",
                     fmt(dur.get("cost_p50_ms"), spread_shown=False), "", "", "", ""])
    return "\n".join(out + _table(["figure", "taskgate", "Portkey", "LiteLLM", "target", ""], rows))


def update_readme(readme: str, table: str) -> str:
    """``readme`` with the text between :data:`README_START` and
    :data:`README_END` replaced by ``table``."""
    head, sep, rest = readme.partition(README_START)
    _, sep2, tail = rest.partition(README_END)
    if not sep or not sep2:
        raise ValueError(f"README has no {README_START} … {README_END} block")
    return f"{head}{README_START}\n{table}\n{README_END}{tail}"
