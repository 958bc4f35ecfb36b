"""One "gateway process" worth of admissions, for :mod:`bench.scale`.

Run as ``python -m bench.scale_driver SPEC.json``. Builds the gateway's own pool
(:func:`app.db.pool.create_pool`, the gateway's default settings) and runs
``concurrency`` coroutines calling :func:`app.admission.admission.admit` back to
back. Each driver prints ``{"event": "ready"}`` once its pool is open; the parent
then sends every driver the same wall-clock ``start_at`` (epoch seconds) on stdin:
they warm up until then and count admissions for ``duration_s`` after it, so their
counts add up to one window.

- ``path = "fast"``: no tool results: the single ``UPDATE ... RETURNING``.
- ``path = "locked"``: every admission carries one new tool call and its result
  (unique id, arguments and output: never a loop), so it takes the locked path:
  ``SELECT ... FOR UPDATE``, ledger insert and completion, history read, verdict,
  counter update, in one transaction.

Tokens are cycled per coroutine (``tokens`` of one task: the hot task). Prints one
JSON line: ``{"n", "n_total", "errors", "latency_ms": {p50, p99}}``.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from app.admission.admission import admit
from app.admission.tokens import token_hash
from app.db.pool import create_pool
from app.guard.judge import GuardRequest
from app.settings import Settings
from app.wire.base import ToolCall, ToolResult


async def drive(spec: dict[str, Any]) -> dict[str, Any]:
    settings = Settings(database_url=spec["database_url"], _env_file=None)  # type: ignore[call-arg]
    pool = await create_pool(spec["database_url"], settings)
    hashes = [token_hash(t) for t in spec["tokens"]]
    print(json.dumps({"event": "ready"}), flush=True)  # the parent answers with start_at
    start_at = float(await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline))
    end_at = start_at + spec["duration_s"]
    locked = spec["path"] == "locked"
    counted: list[float] = []
    errors: dict[str, int] = {}
    total = 0
    tag = f"{os.getpid()}"

    async def worker(w: int) -> None:
        nonlocal total
        i = w
        while (now := time.time()) < end_at:
            guard = None
            if locked:
                call_id = f"call_{tag}_{w}_{i}"
                guard = GuardRequest(f"bench-{tag}-{w}", [ToolCall(call_id, "read_file", {"i": i})],
                                     [ToolResult(call_id, f"result {i}")])
            t0 = time.perf_counter()
            try:
                await admit(pool, hashes[i % len(hashes)], settings, guard)
            except Exception as exc:  # noqa: BLE001 - counted, reported
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                await asyncio.sleep(0.01)
            else:
                total += 1
                if now >= start_at:
                    counted.append(time.perf_counter() - t0)
            i += spec["concurrency"]

    try:
        await asyncio.gather(*(worker(w) for w in range(spec["concurrency"])))
    finally:
        await pool.close()
    lat = sorted(counted)

    def pct(q: float) -> float | None:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 2) if lat else None

    return {"n": len(lat), "n_total": total, "errors": errors,
            "latency_ms": {"p50": pct(0.5), "p99": pct(0.99)}}


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    print(json.dumps(asyncio.run(drive(spec))), flush=True)


if __name__ == "__main__":
    main()
