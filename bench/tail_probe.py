"""Where a gateway request's time goes, measured inside the gateway process (bench
only; nothing here is imported by app/).

``python -m bench.tail_probe serve ARGS…`` runs ``python -m app.cli serve ARGS…``
with probes installed first:

- **server time** per request: from the ASGI app being called to its last body
  message (wraps :func:`app.main.create_app`'s application);
- **pool wait** per request: time spent in ``asyncpg.Pool.acquire`` before a
  connection is handed over, summed over the request's acquires (a context
  variable carries the sum from admission and accounting to the request);
- **GC pauses**: every collection's duration and generation (``gc.callbacks``);
- **loop lag**: how late a 5 ms ``call_later`` tick fires (time the event loop was
  busy with something else).

``BENCH_PROBE_GC_FREEZE=1`` calls ``gc.freeze()`` at the first request;
``BENCH_PROBE_UNFAIR_POOL=1`` builds the pool with plain ``asyncpg.create_pool``
(acquirers barge, the order before :mod:`app.db.fair_pool`).

``SIGUSR2`` clears the samples (start of a window); ``SIGUSR1`` writes them as JSON
(percentiles and, for the slowest 1 % of requests, their mean pool wait) to the file
named by ``BENCH_PROBE_OUT``. :mod:`bench.tail` drives it.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import json
import os
import signal
import sys
import time
from typing import Any

from bench.stats import summarize

_pool_wait: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("bench_pool_wait", default=None)
_SAMPLES: dict[str, list[Any]] = {"requests": [], "acquire_ms": [], "gc": [], "lag_ms": []}
_gc_start = [0.0]


def _reset(*_: object) -> None:
    for v in _SAMPLES.values():
        v.clear()


def _dump(*_: object) -> None:
    reqs = sorted(_SAMPLES["requests"])  # (server_ms, pool_wait_ms)
    out: dict[str, Any] = {"requests": len(reqs)}
    out["server_ms"] = summarize(r[0] for r in reqs)
    out["pool_wait_ms"] = summarize(r[1] for r in reqs)
    out["acquire_ms"] = summarize(_SAMPLES["acquire_ms"])
    out["acquires"] = len(_SAMPLES["acquire_ms"])
    if reqs:
        slow = reqs[int(len(reqs) * 0.99):] or reqs[-1:]
        out["slowest_1pct"] = {"n": len(slow), "server_ms_mean": sum(r[0] for r in slow) / len(slow),
                               "pool_wait_ms_mean": sum(r[1] for r in slow) / len(slow)}
    pauses = _SAMPLES["gc"]
    out["gc"] = {"collections": len(pauses), "total_ms": sum(p[1] for p in pauses),
                 "by_generation": {str(g): summarize(p[1] for p in pauses if p[0] == g) for g in (0, 1, 2)}}
    out["lag_ms"] = summarize(_SAMPLES["lag_ms"])
    out["gc"]["tracked_objects"] = len(gc.get_objects())
    out["gc"]["frozen_objects"] = gc.get_freeze_count()
    path = os.environ.get("BENCH_PROBE_OUT")
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(out, f)
        os.replace(path + ".tmp", path)


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _gc_start[0] = time.perf_counter()
    else:
        _SAMPLES["gc"].append((info.get("generation"), (time.perf_counter() - _gc_start[0]) * 1000.0))


def _patch_pool(cls: Any) -> None:
    """Time ``cls.acquire`` (the fair pool's, or asyncpg's when the pool is plain:
    patching both would count the fair pool's inner acquire twice)."""
    original = cls.acquire

    class _Timed:
        def __init__(self, ctx: Any) -> None:
            self.ctx = ctx

        async def __aenter__(self) -> Any:
            t0 = time.perf_counter()
            conn = await self.ctx.__aenter__()
            waited = (time.perf_counter() - t0) * 1000.0
            _SAMPLES["acquire_ms"].append(waited)
            acc = _pool_wait.get()
            if acc is not None:
                acc[0] += waited
            return conn

        async def __aexit__(self, *exc: Any) -> Any:
            return await self.ctx.__aexit__(*exc)

        def __await__(self) -> Any:
            return self.__aenter__().__await__()

    def acquire(self: Any, *, timeout: float | None = None) -> _Timed:
        return _Timed(original(self, timeout=timeout))

    cls.acquire = acquire


def _patch_app() -> None:
    import app.main

    original = app.main.create_app

    def create_app(*args: Any, **kwargs: Any) -> Any:
        inner = original(*args, **kwargs)
        started = [False]

        async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope.get("path") != "/v1/chat/completions":
                return await inner(scope, receive, send)
            if not started[0]:
                started[0] = True
                _start_lag_sampler()
                if os.environ.get("BENCH_PROBE_GC_FREEZE"):
                    gc.freeze()
            acc = [0.0]
            _pool_wait.set(acc)
            t0 = time.perf_counter()

            async def timed_send(message: dict[str, Any]) -> None:
                await send(message)
                if message["type"] == "http.response.body" and not message.get("more_body"):
                    _SAMPLES["requests"].append(((time.perf_counter() - t0) * 1000.0, acc[0]))

            await inner(scope, receive, timed_send)

        return asgi

    app.main.create_app = create_app  # type: ignore[assignment]


def _start_lag_sampler() -> None:
    loop = asyncio.get_running_loop()

    def tick(due: float) -> None:
        now = loop.time()
        _SAMPLES["lag_ms"].append(max(0.0, (now - due) * 1000.0))
        loop.call_later(0.005, tick, now + 0.005)

    loop.call_later(0.005, tick, loop.time() + 0.005)


def main() -> None:
    gc.callbacks.append(_on_gc)
    signal.signal(signal.SIGUSR1, _dump)
    signal.signal(signal.SIGUSR2, _reset)
    _patch_app()
    if os.environ.get("BENCH_PROBE_UNFAIR_POOL"):  # A/B: asyncpg's own acquire order
        import asyncpg

        import app.db.pool

        async def unfair(dsn: str, **kwargs: Any) -> Any:
            return await asyncpg.create_pool(dsn, **kwargs)

        app.db.pool.create_fair_pool = unfair  # type: ignore[assignment]
        _patch_pool(asyncpg.Pool)
    else:
        from app.db.fair_pool import FairPool

        _patch_pool(FairPool)
    from app.cli import main as cli_main

    sys.argv = ["app.cli", *sys.argv[1:]]
    cli_main()


if __name__ == "__main__":
    main()
