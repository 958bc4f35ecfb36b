"""Fleet budgets' cost (issue 24 §2): the same load on 1,000 tasks without a budget and
on 1,000 tasks under one budget, from two processes, and the ratio. Two loads:

- admission alone (the default): two ``bench.admission`` processes, ``admit()`` against
  PostgreSQL, no HTTP: the budget's whole cost, with nothing around it to hide it;
- ``--http``: two gateways (``taskgate serve``, one worker each) relaying non-streamed
  chat completions to the bench upstream, one ``bench.load`` process per gateway: the
  cost as the agents see it, per request through a gateway.

Run as ``python -m bench.budgets [--http] [--concurrency 64] [--duration 8] [--rounds 5]``: a private embedded
PostgreSQL, migrated; prints one JSON line per group and round (the groups alternate,
``--rounds`` times) and one with the ratios (throughput with a budget / without, p99
with / without: the median over rounds, and each round's). The budget has a request limit
far above the load, so every admission is paid by its process's escrow lease of the
budget's window (docs/budgets.md, "Escrow leases"): the window row is locked only when a
lease is taken or returned, about once per ``TASKGATE_BUDGET_LEASE_REQUESTS`` requests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.scenarios import NONSTREAM_MODEL
from bench.services import Service, embedded_database, start_gateway, start_upstream

TASKS = 1000


async def _seed(url: str) -> tuple[list[str], list[str]]:
    import asyncpg

    from app.admission.tokens import new_token, token_hash
    from app.db.pool import asyncpg_dsn

    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        await conn.execute("INSERT INTO budgets (id, request_limit) VALUES ('bench-team', 1000000000)")
        groups: tuple[list[str], list[str]] = ([], [])
        for group, budget in ((groups[0], None), (groups[1], "bench-team")):
            rows = []
            for i in range(TASKS):
                token = new_token()
                group.append(token)
                rows.append((f"bench-{budget or 'none'}-{i}", token_hash(token), 10**12, budget))
            await conn.executemany(
                "INSERT INTO tasks (id, token_hash, request_limit, budget_id) VALUES ($1, $2, $3, $4)", rows)
        return groups
    finally:
        await conn.close()


def _run_group(url: str, tokens: list[str], concurrency: int, duration_s: float, processes: int,
               gateways: Sequence[Service] = ()) -> dict[str, Any]:
    """One load process per ``processes`` (``bench.admission``), or per gateway
    (``bench.load``), at once, each with its share of ``tokens`` and ``concurrency``."""
    procs = []
    with tempfile.TemporaryDirectory(prefix="taskgate-bench-budgets-") as tmp:
        loads = len(gateways) or processes
        for p in range(loads):
            spec = Path(tmp) / f"spec{p}.json"
            shared = {"tokens": tokens[p::loads], "duration_s": duration_s, "warmup_s": 1.0,
                      "concurrency": concurrency // loads}
            if gateways:
                shared.update(host="127.0.0.1", port=gateways[p].port,
                              body={"kind": "chat", "model": NONSTREAM_MODEL, "stream": False})
            else:
                shared["database_url"] = url
            spec.write_text(json.dumps(shared))
            procs.append(subprocess.Popen([sys.executable, "-m", "bench.load" if gateways else "bench.admission",
                                           str(spec)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        results = []
        for proc in procs:
            lines = []
            assert proc.stdout is not None and proc.stdin is not None
            for line in proc.stdout:
                lines.append(json.loads(line))
                if lines[-1].get("event") == "end" and not gateways:  # bench.admission waits for it
                    proc.stdin.write("\n")
                    proc.stdin.flush()
            proc.wait()
            results.append(next(r for r in lines if r.get("event") == "result"))
    lat = sorted(v for r in results for v in [r["latency_ms"].get("p99", 0.0)])
    return {"rps": sum(r["rps"] for r in results), "p99_ms": max(lat),
            "p50_ms": max(r["latency_ms"].get("p50", 0.0) for r in results),
            "errors": {k: v for r in results for k, v in r["errors"].items()},
            **({"statuses": {k: v for r in results for k, v in r["statuses"].items()}} if gateways else {})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per group and round")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of both groups, alternating (the ratios are per round; single rounds"
                             " of --http ranged 0.70-0.98x on a 2-core machine, so fewer can land either"
                             " side of a target)")
    parser.add_argument("--http", action="store_true",
                        help="through --processes gateways (one worker each) and the bench upstream")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="taskgate-bench-pg-") as tmp, \
            embedded_database(Path(tmp) / "db") as url, contextlib.ExitStack() as stack:
        gateways: list[Service] = []
        if args.http:
            upstream = start_upstream(Path(tmp))
            stack.callback(upstream.stop)
            for p in range(args.processes):
                gateways.append(start_gateway(f"gateway{p}", url, upstream, Path(tmp)))
                stack.callback(gateways[-1].stop)
        plain, budgeted = asyncio.run(_seed(url))
        ratios = []
        for n in range(args.rounds):  # alternating, so a busy moment weighs on both groups alike
            without = _run_group(url, plain, args.concurrency, args.duration, args.processes, gateways)
            print(json.dumps({"round": n + 1, "group": "1000 tasks, no budget", **without}), flush=True)
            with_budget = _run_group(url, budgeted, args.concurrency, args.duration, args.processes, gateways)
            print(json.dumps({"round": n + 1, "group": "1000 tasks, one budget", **with_budget}), flush=True)
            ratios.append((with_budget["rps"] / without["rps"], with_budget["p99_ms"] / without["p99_ms"]))
        print(json.dumps({"load": "http, gateways" if args.http else "admission alone",
                          "throughput_ratio": round(statistics.median(r[0] for r in ratios), 3),
                          "p99_ratio": round(statistics.median(r[1] for r in ratios), 3),
                          "per_round": [[round(a, 3), round(b, 3)] for a, b in ratios]}), flush=True)


if __name__ == "__main__":
    main()
