"""Admission alone: ``app.admission.admission.admit`` against PostgreSQL, no HTTP.

Run as ``python -m bench.admission SPEC.json`` (a separate process, like the load
generator). ``concurrency`` coroutines call ``admit()`` back to back on the
gateway's own database pool settings (``database_pool_size``) for
``duration_s`` seconds after ``warmup_s``:

- ``tokens`` of one task: every admission waits for the same row lock (hot task);
- ``tokens`` of many tasks, cycled: admissions spread over rows.

Prints ``{"event": "start"}`` / ``{"event": "end"}`` around the window and then
``{"event": "result", "n", "rps", "latency_ms": {...}, "client_cpu_s", "errors"}``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from bench.aio import run
from bench.load import emit
from bench.stats import summarize


async def bench(spec: dict[str, Any]) -> dict[str, Any]:
    from app.admission.admission import admit
    from app.admission.tokens import token_hash
    from app.db.pool import create_pool
    from app.settings import Settings

    settings = Settings(database_url=spec["database_url"], _env_file=None)  # type: ignore[call-arg]
    # every bench database is a direct connection: the statement cache the gateway has on
    # the embedded PostgreSQL (without it every statement is parsed and planned again,
    # which was 65 % of PostgreSQL's time per fast-path admission)
    pool = await create_pool(spec["database_url"], settings, direct=True)
    hashes = [token_hash(t) for t in spec["tokens"]]
    loop = asyncio.get_running_loop()
    lat: list[float] = []
    errors: dict[str, int] = {}
    counter = 0
    phase = {"measuring": False, "until": loop.time() + spec.get("warmup_s", 0.5)}
    started = [0.0, 0.0]

    async def worker() -> None:
        nonlocal counter
        while True:
            now = loop.time()
            if now >= phase["until"]:
                if phase["measuring"]:
                    return
                phase["measuring"] = True
                phase["until"] = now + spec.get("duration_s", 2.0)
                started[0], started[1] = time.perf_counter(), time.process_time()
                emit({"event": "start"})
            measuring = phase["measuring"]
            h = hashes[counter % len(hashes)]
            counter += 1
            t0 = time.perf_counter()
            try:
                await admit(pool, h, settings)
            except Exception as exc:  # noqa: BLE001
                if measuring:
                    errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.01)
                continue
            if measuring:
                lat.append((time.perf_counter() - t0) * 1000.0)

    try:
        await asyncio.gather(*(worker() for _ in range(spec.get("concurrency", 16))))
        wall = time.perf_counter() - started[0]
        cpu = time.process_time() - started[1]
        emit({"event": "end"})
        # keep the connections (PostgreSQL backends) until the parent has read their CPU
        try:
            await asyncio.wait_for(loop.run_in_executor(None, sys.stdin.readline), 5.0)
        except asyncio.TimeoutError:
            pass
    finally:
        await pool.close()
    return {"n": len(lat), "rps": len(lat) / wall if wall > 0 else 0.0, "wall_s": wall,
            "latency_ms": summarize(lat), "client_cpu_s": cpu, "errors": errors}


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m bench.admission SPEC.json")
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    emit({"event": "result", **run(bench(spec))})


if __name__ == "__main__":
    main()
