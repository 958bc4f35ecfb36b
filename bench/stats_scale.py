"""How long ``GET /admin/stats`` takes on a big fleet: ``python -m bench.stats_scale``.

Starts ``taskgate serve`` on a fresh embedded PostgreSQL, fills it with ``--tasks`` tasks
(default 50,000; a tenth of them stopped), ``--rows`` request log rows spread over the last
7 days (default 500,000) and one ``stopped`` event per stopped task, then times the
overview's three periods (median of 5 calls each) and prints one line per period."""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time

import asyncpg
import httpx

FILL = """
INSERT INTO tasks (id, token_hash, request_limit, status, stop_reason, stopped_at, cost_usd)
SELECT 'bench-' || i, md5(i::text), 1000,
       CASE WHEN i % 10 = 0 THEN 'stopped' ELSE 'active' END,
       CASE WHEN i % 10 = 0 THEN (ARRAY['repeated_tool_call','request_limit','cost_limit'])[1 + i % 3] END,
       CASE WHEN i % 10 = 0 THEN now() - (i % 604800) * interval '1 second' END, 0
FROM generate_series(1, $1) i;
"""
FILL_EVENTS = """
INSERT INTO task_events (task_id, kind, reason, detail, created_at)
SELECT id, 'stopped', stop_reason, '{}'::jsonb, stopped_at FROM tasks WHERE status = 'stopped';
"""
FILL_LOG = """
INSERT INTO request_log (task_id, finished_at, endpoint, model, provider, status, outcome, stream,
                         input_tokens, output_tokens, cost_usd, duration_ms, request_id)
SELECT 'bench-' || (1 + (i::bigint * 7919) % $2), now() - (i % 604800) * interval '1 second', '/v1/chat/completions',
       (ARRAY['gpt-4.1-mini','gpt-4o-mini','claude-sonnet-4-5','coder'])[1 + i % 4], 'openai', 200,
       'completed', true, 1500, 200, 0.0009, 850.0, 'req_' || i
FROM generate_series(1, $1) i;
"""


async def fill(socket_dir: str, port: int, tasks: int, rows: int) -> None:
    conn = await asyncpg.connect(host=socket_dir, port=port, user="postgres", database="postgres")
    try:
        await conn.execute(FILL, tasks)
        await conn.execute(FILL_EVENTS)
        await conn.execute(FILL_LOG, rows, tasks)
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stats_scale")
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--rows", type=int, default=500_000)
    args = parser.parse_args()
    from tests.support import free_port

    data = tempfile.mkdtemp(prefix="taskgate-stats-")
    port = free_port()
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("TASKGATE_")},
           "TASKGATE_DATA_DIR": data, "TASKGATE_ADMIN_TOKEN": "bench-admin", "TASKGATE_PORT": str(port)}
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve", "--log-level", "warning"], env=env,
                            stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            line = proc.stderr.readline()
            if "listening on" in line:
                break
        base = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(base + "/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        pid = open(os.path.join(data, "pgdata", "postmaster.pid")).read().splitlines()
        asyncio.run(fill(pid[4], int(pid[3]), args.tasks, args.rows))  # socket directory, port
        headers = {"authorization": "Bearer bench-admin"}
        for name, span, step in (("1h", 3600, 60), ("24h", 86400, 1800), ("7d", 7 * 86400, 10800)):
            times = []
            for _ in range(5):
                now = time.time()
                params = {"since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now - span)), "step": step}
                t0 = time.perf_counter()
                r = httpx.get(base + "/admin/stats", params=params, headers=headers, timeout=120)
                times.append((time.perf_counter() - t0) * 1000)
                assert r.status_code == 200, r.text
            print(f"{name}: {statistics.median(times):.0f} ms median of 5 "
                  f"({r.json()['totals']['requests']:,} requests in the period, {args.tasks:,} tasks)")
    finally:
        proc.terminate()
        proc.wait(30)


if __name__ == "__main__":
    main()
