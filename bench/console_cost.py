"""``python -m bench.console_cost``: what the operator console adds to one request.

Times, in this process, the console's work on the hot path of one forwarded streamed
request: the request-id middleware around a trivial ASGI app, ``exchange_started`` +
``exchange_finished`` events with the console subscribed (requests, tokens, tool calls,
upstream duration, TTFT, open streams) and the admission-done event; once with prometheus-client's in-process values and
once in its multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, used by ``--workers N``),
each in a fresh interpreter. Prints microseconds per request added (median of 5
runs; the same loop without the console is subtracted).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile

_CHILD = r'''
import asyncio, time
from app import events
from app.console import listeners
from app.request_ids import RequestIdMiddleware
from app.proxy.outcome import Outcome
from app.wire.base import ResponseSummary, ToolCall, Usage

N = 20000
outcome = Outcome(detail={"endpoint": "/v1/chat/completions", "model": "m",
                          "seconds_since_first_content": 0.01},
                  summary=ResponseSummary(tool_calls=[], usage=Usage(12, 34), terminal_seen=True))

async def inner(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})

async def sink(message):
    pass

async def bare():
    return None

listeners.subscribe()

async def admit():
    t0 = time.perf_counter()
    await bare()
    events.ADMISSION_DONE.emit(events.AdmissionDone(time.perf_counter() - t0))

async def main():
    mw = RequestIdMiddleware(inner)
    scope = {"type": "http", "method": "POST", "path": "/v1/chat/completions", "headers": []}
    runs = {}
    for name in ("bare app", "middleware", "bare admit", "metrics"):
        t0 = time.perf_counter()
        for _ in range(N):
            if name == "bare app":
                await inner(scope, None, sink)
            elif name == "middleware":
                await mw(scope, None, sink)
            elif name == "bare admit":
                await bare()
                time.monotonic()
            else:
                await admit()
                events.EXCHANGE_STARTED.emit(events.ExchangeStarted("t", True))
                events.EXCHANGE_FINISHED.emit(events.ExchangeFinished("t", outcome, time.monotonic(), True))
        runs[name] = (time.perf_counter() - t0) / N * 1e6
    print(runs["middleware"] - runs["bare app"], runs["metrics"] - runs["bare admit"])

asyncio.run(main())
'''


def _run(multiprocess: bool) -> tuple[float, float]:
    env = dict(os.environ)
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with tempfile.TemporaryDirectory() as tmp:
        if multiprocess:
            env["PROMETHEUS_MULTIPROC_DIR"] = tmp
        out = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True,
                             check=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    for mode in (False, True):
        runs = [_run(mode) for _ in range(5)]
        mw = statistics.median(r[0] for r in runs)
        m = statistics.median(r[1] for r in runs)
        label = "multiprocess (--workers N)" if mode else "single process"
        print(f"{label:28s} request-id middleware {mw:6.1f} µs/request, metrics {m:6.1f} µs/request")


if __name__ == "__main__":
    main()
