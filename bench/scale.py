"""How far one PostgreSQL carries taskgate: the numbers behind ``docs/scaling.md``.

    python -m bench.scale [--quick] [--out bench/results/scale.json]

Runs on a private embedded PostgreSQL (its own cluster, so the WAL and statement
counters see only this run) with ``pg_stat_statements`` loaded, and PgBouncer
(Debian's, transaction mode, ``default_pool_size`` 20) in front of it:

1. **Admissions per second** with 1, 2 and 4 driver processes
   (:mod:`bench.scale_driver`: the gateway's pool and ``admit()``, no HTTP), on the
   fast path and the locked path, spread over 1,000 tasks, direct and through
   PgBouncer; and the **hot task** (one task, every admission on its row lock).
2. **PostgreSQL work per admission** in each run: statements
   (``pg_stat_statements`` calls, ``BEGIN``/``COMMIT``/``SET`` included), write
   transactions (transaction ids consumed), WAL bytes (``pg_current_wal_lsn()`` diff),
   PostgreSQL CPU (all its processes, ``psutil``).
3. **PostgreSQL work per proxied request**, end to end: a real gateway
   (``taskgate serve``) and the scripted upstream; N plain chat completions, then N
   agent turns each carrying a new tool result and answered with a new tool call.

Prints a JSON document (and writes it to ``--out``). The machine's load average is
recorded around every run: the numbers are only as quiet as the machine was.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import asyncpg
import httpx
import psutil

from app.admission.tokens import token_hash
from app.db.pool import asyncpg_dsn
from app.testing.upstream import UpstreamServer
from tests.databases import statements_cluster
from tests.pgbouncer import pgbouncer, pgbouncer_binary
from tests.support import Admin, GatewayProcess

REPO = Path(__file__).resolve().parent.parent
SPREAD_TASKS = 1000
PGDATA: list[Path] = []  # the private cluster's data directory, once started
_STATS = (
    "SELECT pg_current_wal_lsn() AS lsn, pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax,"
    " (SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid"
    "   WHERE d.datname = current_database() AND s.query NOT LIKE '%pg_stat_statements%'"
    "   AND s.query NOT ILIKE '%pg_catalog%' AND s.query NOT ILIKE '%alembic%')::bigint AS statements"
)


@contextmanager
def cluster() -> Iterator[str]:
    """A private embedded PostgreSQL with ``pg_stat_statements``; yields a migrated
    database's URL."""
    with statements_cluster() as (url, pgdata):
        PGDATA[:] = [pgdata]
        yield url


async def _sql(url: str, query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


def postgres_cpu_s() -> float:
    """CPU seconds used so far by the private PostgreSQL: the postmaster, its live
    children (backends, WAL writer, checkpointer) and the children it has reaped."""
    pid = int((PGDATA[0] / "postmaster.pid").read_text().split()[0])
    master = psutil.Process(pid)
    t = master.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in master.children():
        try:
            c = child.cpu_times()
            total += c.user + c.system
        except psutil.NoSuchProcess:  # reaped meanwhile: now in children_*, a few ms off
            pass
    return total


def snapshot(url: str) -> dict[str, float]:
    row = asyncio.run(_sql(url, _STATS))[0]
    return {"wal": int(row["lsn"]), "xmax": row["xmax"],  # asyncpg decodes pg_lsn to int
            "statements": row["statements"], "cpu_s": postgres_cpu_s()}


def work(before: dict[str, int], after: dict[str, int], n: int) -> dict[str, float]:
    """PostgreSQL work per unit between two snapshots."""
    if n <= 0:
        return {}
    return {"statements": round((after["statements"] - before["statements"]) / n, 2),
            "write_transactions": round((after["xmax"] - before["xmax"]) / n, 2),
            "wal_bytes": round((after["wal"] - before["wal"]) / n),
            "postgres_cpu_ms": round((after["cpu_s"] - before["cpu_s"]) * 1000 / n, 3)}


def make_tasks(url: str, prefix: str, n: int) -> list[str]:
    """``n`` tasks with effectively no limits; returns their tokens."""
    tokens = [f"tg-bench-{secrets.token_hex(12)}" for _ in range(n)]
    rows = [(f"{prefix}-{i}", token_hash(t), 10**12) for i, t in enumerate(tokens)]

    async def insert() -> None:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            await conn.executemany("INSERT INTO tasks (id, token_hash, request_limit) VALUES ($1, $2, $3)", rows)
        finally:
            await conn.close()
    asyncio.run(insert())
    return tokens


def admissions(stats_url: str, driver_url: str, tokens: list[str], path: str, procs: int,
               concurrency: int, duration_s: float, warmup_s: float) -> dict[str, Any]:
    """One run: ``procs`` driver processes for ``duration_s``; aggregate rate and work."""
    load_before = os.getloadavg()[0]
    before = snapshot(stats_url)
    children = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in range(procs):
            spec = Path(tmp) / f"spec{p}.json"
            spec.write_text(json.dumps({"database_url": driver_url, "tokens": tokens, "path": path,
                                        "concurrency": concurrency, "duration_s": duration_s}))
            children.append(subprocess.Popen([sys.executable, "-m", "bench.scale_driver", str(spec)],
                                             cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             text=True))
        for c in children:
            assert c.stdout is not None and json.loads(c.stdout.readline())["event"] == "ready"
        start_at = time.time() + warmup_s
        results = [json.loads(c.communicate(f"{start_at}\n", timeout=duration_s + warmup_s + 120)[0])
                   for c in children]
    after = snapshot(stats_url)
    n = sum(r["n"] for r in results)
    n_total = sum(r["n_total"] for r in results)
    errors: dict[str, int] = {}
    for r in results:
        for k, v in r["errors"].items():
            errors[k] = errors.get(k, 0) + v
    return {"path": path, "processes": procs, "concurrency_per_process": concurrency,
            "tasks": len(tokens), "admissions": n, "duration_s": duration_s,
            "admissions_per_s": round(n / duration_s), "errors": errors,
            "p50_ms": sorted(r["latency_ms"]["p50"] or 0 for r in results)[len(results) // 2],
            "p99_ms": max(r["latency_ms"]["p99"] or 0 for r in results),
            "per_admission": work(before, after, n_total),
            "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)]}


def per_request(url: str, n: int) -> dict[str, Any]:
    """PostgreSQL work per proxied request through a real gateway (direct URL)."""
    out: dict[str, Any] = {}
    with UpstreamServer() as upstream, GatewayProcess(url, upstream.base_url) as gw:
        task_id, token = Admin(gw.url).create_task(request_limit=10**9)
        http = httpx.Client(base_url=gw.url, headers={"authorization": f"Bearer {token}"}, timeout=30)
        chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        http.post("/v1/chat/completions", json=chat).raise_for_status()  # warm
        time.sleep(0.5)
        before = snapshot(url)
        for _ in range(n):
            http.post("/v1/chat/completions", json=chat).raise_for_status()
        time.sleep(0.5)  # post-response accounting runs after the client has its answer
        out["plain_chat_completion"] = work(before, snapshot(url), n)
        upstream.script("tool_call", name="read_file", arguments={"path": "README.md"})
        messages: list[dict[str, Any]] = [{"role": "user", "content": "work"}]
        tools = [{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}}]
        before = snapshot(url)
        for i in range(n):
            r = http.post("/v1/chat/completions", json={"model": "m", "messages": messages[-40:],
                                                          "tools": tools})
            r.raise_for_status()
            message = r.json()["choices"][0]["message"]
            messages += [message, {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"],
                                   "content": f"progress {i}"}]
        time.sleep(0.5)
        out["agent_turn_with_tool_result"] = work(before, snapshot(url), n)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short windows (smoke run)")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "scale.json"))
    args = parser.parse_args()
    duration, warmup = (2.0, 1.0) if args.quick else (6.0, 1.5)
    doc: dict[str, Any] = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                           "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg(), "runs": []}
    with cluster() as url:
        spread = make_tasks(url, "spread", SPREAD_TASKS)
        hot = make_tasks(url, "hot", 1)
        routes = {"direct": url}
        bouncer = pgbouncer(url, default_pool_size=20) if pgbouncer_binary() else None
        with bouncer or _nothing() as through:
            if through:
                routes["pgbouncer"] = through
            for route, driver_url in routes.items():
                for path, tokens in (("fast", spread), ("locked", spread), ("fast", hot)):
                    for procs in (1, 2, 4):
                        run = admissions(url, driver_url, tokens, path, procs, 16, duration, warmup)
                        run["route"] = route
                        doc["runs"].append(run)
                        print(json.dumps(run), file=sys.stderr, flush=True)
        doc["per_request"] = per_request(url, 50 if args.quick else 200)
    doc["finished"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(json.dumps(doc, indent=1))


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


if __name__ == "__main__":
    main()
