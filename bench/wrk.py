"""The second load generator: `wrk <https://github.com/wg/wrk>`_ (Debian package
``wrk``), driven by a Lua script that sends the bench's chat completion POSTs.

wrk is an epoll client in C: ``connections`` keep-alive connections on one thread,
closed loop (each connection sends its next request when the previous answer is
complete), and it records every latency in microseconds in a full histogram, so
its percentiles are exact to the microsecond (HdrHistogram-like). It runs beside
:mod:`bench.load` (same paths, same bodies, same tokens round-robin) so the two
generators' tails can be compared: a Python client that is itself short of CPU
delays the requests it times, wrk much less so.

:func:`run` returns a result shaped like :mod:`bench.load`'s: ``latency_ms``
(``n``, ``mean``, ``min``, ``p50``, ``p95``, ``p99``, ``p99.9``, ``max``), ``rps``,
``completed``, ``errors``, ``wall_s``, ``client_cpu_s`` and, with a watch,
``cpu_s``. wrk's durations are whole seconds, so the window is
``ceil(duration_s)``; there is no warm-up (the suite runs wrk right after a
:mod:`bench.load` run at the same concurrency, on a warm path).
"""

from __future__ import annotations

import json
import math
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.metrics import CpuWatch, add_client

TIMEOUT_S = 30
"""wrk's per-request timeout: a request slower than this is counted as a timeout
and left out of the percentiles, so it is far above any tail we look at."""

_LUA = r"""
local requests = {}
local i = 0
init = function(args)
  for _, token in ipairs(TOKENS) do
    local headers = {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. token}
    for k, v in pairs(EXTRA) do headers[k] = v end
    requests[#requests + 1] = wrk.format("POST", PATH, headers, BODY)
  end
end
request = function()
  i = i % #requests + 1
  return requests[i]
end
done = function(summary, latency, _)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
    '"latency_us":{"min":%d,"max":%d,"mean":%.3f,"stdev":%.3f,' ..
    '"p50":%d,"p95":%d,"p99":%d,"p99.9":%d}}\n',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.max, latency.mean, latency.stdev,
    latency:percentile(50), latency:percentile(95), latency:percentile(99), latency:percentile(99.9)))
end
"""


def find() -> str | None:
    """The ``wrk`` binary on ``PATH``, or ``None`` (``apt-get install wrk``)."""
    return shutil.which("wrk")


def _lua_string(s: str) -> str:
    level = 1
    while f"]{'=' * level}]" in s:
        level += 1
    return f"[{'=' * level}[{s}]{'=' * level}]"


def script(path: str, tokens: list[str], body: dict[str, Any], headers: dict[str, str]) -> str:
    """The Lua script: one pre-formatted request per token, sent round-robin."""
    toks = ", ".join(_lua_string(t) for t in tokens)
    extra = ", ".join(f"[ {_lua_string(k)} ] = {_lua_string(v)}" for k, v in headers.items())
    return (f"PATH = {_lua_string(path)}\nBODY = {_lua_string(json.dumps(body, separators=(',', ':')))}\n"
            f"TOKENS = {{{toks}}}\nEXTRA = {{{extra}}}\n{_LUA}")


def parse(stdout: str) -> dict[str, Any]:
    """The ``WRKJSON`` line of wrk's output as a :mod:`bench.load`-shaped result."""
    for line in stdout.splitlines():
        if line.startswith("WRKJSON "):
            raw = json.loads(line[len("WRKJSON "):])
            break
    else:
        raise RuntimeError(f"wrk printed no result: {stdout[-800:]}")
    wall = raw["duration_us"] / 1e6
    n = int(raw["requests"])
    # no request finished in the window: wrk's statistics are zeros, not latencies
    lat = {k: v / 1000.0 for k, v in raw["latency_us"].items()} if n else {}
    lat["n"] = n
    errors = {k: int(v) for k, v in raw["errors"].items() if v}
    return {"n": n, "completed": n, "errors": errors, "wall_s": wall, "rps": n / wall if wall > 0 else 0.0,
            "latency_ms": lat, "generator": "wrk"}


def run(spec: dict[str, Any], body: dict[str, Any], watch: CpuWatch | None, *, threads: int = 1) -> dict[str, Any]:
    """One closed-loop wrk run at ``spec``'s host, port, concurrency, tokens and
    headers (a :meth:`bench.paths.Path.spec`), sending ``body`` (a chat completion
    request as JSON) for ``ceil(spec["duration_s"])`` seconds. Raises
    ``RuntimeError`` when wrk is missing or fails."""
    binary = find()
    if binary is None:
        raise RuntimeError("wrk not on PATH (apt-get install wrk)")
    c = int(spec["concurrency"])
    seconds = max(1, math.ceil(float(spec.get("duration_s", 3.0))))
    lua = script(str(spec.get("path", "/v1/chat/completions")), list(spec["tokens"]), body,
                 dict(spec.get("headers") or {}))
    with tempfile.NamedTemporaryFile("w", suffix=".lua", prefix="bench-wrk-", delete=False) as f:
        f.write(lua)
        lua_path = f.name
    cmd = [binary, "-t", str(min(threads, c)), "-c", str(c), "-d", f"{seconds}s", "--timeout", f"{TIMEOUT_S}s",
           "-s", lua_path, f"http://{spec['host']}:{spec['port']}/"]
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        if watch is not None:
            watch.start()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + TIMEOUT_S + 30)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"wrk did not finish: {exc}") from None
        cpu = watch.stop() if watch is not None else None
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        Path(lua_path).unlink(missing_ok=True)
    if proc.returncode != 0:
        raise RuntimeError(f"wrk exited {proc.returncode}: {proc.stderr[-800:]}")
    result = parse(proc.stdout)
    client = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    result["client_cpu_s"] = client
    if cpu is not None and watch is not None:
        # the watch spans wrk's start-up and exit too (idle, a few ms): CPU per request stays exact
        result["cpu_s"] = add_client(cpu, client)
        result["system_cpu_s"] = dict(watch.system)
    return result
