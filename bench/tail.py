"""Where taskgate's non-streaming p99 comes from, and A/B runs of settings that
might remove it.

``python -m bench.tail`` starts the bench upstream, an embedded PostgreSQL and one
gateway per *variant* under :mod:`bench.tail_probe` (pool wait, server time, GC
pauses, loop lag measured inside the gateway), then for each round and
concurrency runs wrk (:mod:`bench.wrk`) against every variant back to back
(variants in a different order each round), and prints per run: client
p50/p99/p99.9 (wrk), server-side p50/p99, pool wait (p99 over requests, and the
mean over the slowest 1 % of requests), GC pauses and loop lag; and the machine's
load average.

Variants (``--variants``, comma-separated): ``base`` (defaults), ``pool=N``
(``TASKGATE_DATABASE_POOL_SIZE``), ``freeze`` (``gc.freeze()`` after start-up,
probe-side), ``unfair`` (asyncpg's own acquire order, before
:mod:`app.db.fair_pool`), ``env:NAME=VALUE``; combinable with ``+``
(``unfair+pool=64``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench import wrk
from bench.load import chat_body
from bench.services import create_tasks, embedded_database, start_gateway, start_upstream
from bench.upstream import model_name


def _variant_env(name: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for part in name.split("+"):
        if part.startswith("pool="):
            env["TASKGATE_DATABASE_POOL_SIZE"] = part[5:]
        elif part == "freeze":
            env["BENCH_PROBE_GC_FREEZE"] = "1"
        elif part == "unfair":
            env["BENCH_PROBE_UNFAIR_POOL"] = "1"
        elif part.startswith("env:"):
            k, _, v = part[4:].partition("=")
            env[k] = v
        elif part != "base":
            raise SystemExit(f"unknown variant part {part!r}")
    return env


def _probe(pid: int, sig: int, out: Path | None = None, timeout_s: float = 5.0) -> dict[str, Any] | None:
    if out is not None:
        out.unlink(missing_ok=True)
    os.kill(pid, sig)
    if out is None:
        time.sleep(0.05)
        return None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if out.exists():
            return json.loads(out.read_text())
        time.sleep(0.05)
    return None


def _row(variant: str, c: int, res: dict[str, Any], probe: dict[str, Any] | None) -> str:
    lat = res["latency_ms"]
    cells = [variant, str(c), f"{res['rps']:.0f}", f"{lat['p50']:.1f}", f"{lat['p99']:.1f}", f"{lat['p99.9']:.1f}",
             f"{lat['max']:.0f}"]
    if probe:
        sv, pw, slow = probe["server_ms"], probe["pool_wait_ms"], probe.get("slowest_1pct", {})
        g, lag = probe["gc"], probe["lag_ms"]
        g2 = g["by_generation"]["2"]
        cells += [f"{sv.get('p50', 0):.1f}", f"{sv.get('p99', 0):.1f}",
                  f"{pw.get('p50', 0):.2f}", f"{pw.get('p99', 0):.1f}",
                  f"{slow.get('pool_wait_ms_mean', 0):.1f} / {slow.get('server_ms_mean', 0):.1f}",
                  f"{g['collections']} / {g['total_ms']:.0f}", f"{g2.get('n', 0)} / {g2.get('max', 0):.0f}",
                  f"{g.get('tracked_objects', 0) / 1000:.0f}k / {g.get('frozen_objects', 0) / 1000:.0f}k",
                  f"{lag.get('p99', 0):.1f} / {lag.get('max', 0):.0f}"]
    return "| " + " | ".join(cells) + " |"


HEADER = ("| variant | c | req/s | p50 | p99 | p99.9 | max | server p50 | server p99 | pool wait p50 | pool wait p99 "
          "| slowest 1 %: pool wait / server (mean) | GC runs / ms | gen-2 runs / max ms | objects tracked / frozen "
          "| loop lag p99 / max |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tail", description=__doc__.split("\n\n")[0])
    ap.add_argument("--variants", default="unfair,base")
    ap.add_argument("--concurrencies", default="64,128")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per wrk run")
    ap.add_argument("--tasks", type=int, default=200)
    args = ap.parse_args(argv)
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    cs = [int(x) for x in args.concurrencies.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="taskgate-tail-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # stop the services on SIGTERM too
    body = chat_body(model_name(chunks=1, size=16), False)
    stack = ExitStack()
    stack.callback(shutil.rmtree, tmp, True)
    with stack:
        upstream = start_upstream(tmp)
        stack.callback(upstream.stop)
        url = stack.enter_context(embedded_database(tmp / "pg"))
        gws = {}
        tokens: list[str] = []
        for i, v in enumerate(variants):
            env = {"BENCH_PROBE_OUT": str(tmp / f"probe-{i}.json"), **_variant_env(v)}
            gw = start_gateway(f"tail-{i}", url, upstream, tmp, module="bench.tail_probe", extra_env=env)
            stack.callback(gw.stop)
            gws[v] = (gw, tmp / f"probe-{i}.json")
            if not tokens:
                tokens = create_tasks(gw, args.tasks)
        for v, (gw, _) in gws.items():  # warm every variant
            wrk.run({"host": "127.0.0.1", "port": gw.port, "concurrency": 16, "duration_s": 1, "tokens": tokens},
                    body, None)
        print(HEADER)
        for rnd in range(args.rounds):
            print(f"| *round {rnd + 1}, load average {os.getloadavg()[0]:.2f}* |" + " |" * 15, flush=True)
            for c in cs:
                order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
                for v in order:
                    gw, out = gws[v]
                    _probe(gw.pid, signal.SIGUSR2)
                    res = wrk.run({"host": "127.0.0.1", "port": gw.port, "concurrency": c,
                                   "duration_s": args.duration, "tokens": tokens}, body, None)
                    print(_row(v, c, res, _probe(gw.pid, signal.SIGUSR1, out)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
