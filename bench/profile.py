"""Where the gateway's CPU goes: sample it with py-spy under a benchmark load.

``python -m bench.profile [--scenario nonstream|stream|tool_turn] [-c N] [--seconds S]``
starts the fixed upstream, an embedded PostgreSQL and one gateway (as the suite
does), runs the load, records the gateway with ``py-spy record`` and prints:

- gateway and PostgreSQL CPU per request (psutil) and requests per second in the window;
- the share of the gateway's busy samples per category (admission, accounting,
  upstream call, stream relay parts, request parsing, ASGI stack, event loop) and
  that share converted to µs of CPU per request (or per relayed chunk);
- the hottest functions by own time;
- who spends it: each busy sample's own time goes to the package of its innermost
  Python frame (ours: ``app/``; uvicorn, aiohttp, asyncpg, asyncio, json, …; the event
  loop's own C code when no coroutine runs), with ``--native`` (py-spy's C and Cython
  frames) the system calls under each (``write``: a loopback socket write, whose TCP
  delivery to the reader is charged to the writer), and our functions by own time.

The collapsed stacks are written to ``bench/results/profile-SCENARIO.txt`` (feed
them to any flame-graph tool). py-spy is not a project dependency: it is looked for
on ``PATH``, beside the running interpreter (the venv's ``bin``), in
``bench/.venv-litellm/bin`` or given with ``--py-spy``
(``pip install py-spy``).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from bench.driver import run_load
from bench.metrics import PgBackends
from bench.paths import Path as BenchPath
from bench.services import create_tasks, embedded_database, start_gateway, start_upstream
from bench.upstream import model_name

RESULTS = Path(__file__).resolve().parent / "results"

#: (label, substrings that must all appear in a sample's stack); first match wins,
#: so the specific rules come first. Frames look like ``func (path/file.py:line)``.
RULES: list[tuple[str, list[str]]] = [
    ("stream relay: SSE framing (app/wire/sse.py SSEFramer.feed)", ["StreamRelay.run", "(app/wire/sse.py"]),
    ("stream relay: wire observer (app/wire/* Observer.feed)", ["StreamRelay.run", "(app/wire/"]),
    ("stream relay: reading upstream chunks (aiohttp readany)", ["StreamRelay.run", "(aiohttp/"]),
    ("stream relay: reading upstream chunks (aiohttp readany)", ["StreamRelay.run", "(app/proxy/transport.py"]),
    ("stream relay: writing to the client (uvicorn send)", ["StreamRelay.run", "(uvicorn/"]),
    ("stream relay: loop body (app/proxy/relay_stream.py StreamRelay.run)", ["StreamRelay.run"]),
    ("admission admit(): asyncpg driver + socket", ["admit (app/admission/admission.py", "(asyncpg/"]),
    ("admission admit(): pool, SQLAlchemy (if used), rest", ["admit (app/admission/admission.py"]),
    ("admission locked path: loop-guard ledger (app/guard)", ["_admit_locked", "(app/guard/"]),
    ("accounting after the response: asyncpg", ["(app/proxy/accounting.py", "(asyncpg/"]),
    ("accounting after the response: pool, SQLAlchemy (if used), ledger", ["(app/proxy/accounting.py"]),
    ("upstream request: aiohttp (connection pool, request write, response head)",
     ["_exchange (app/proxy/relay.py", "(aiohttp/"]),
    ("upstream request: transport adapter (app/proxy/transport.py)",
     ["_exchange (app/proxy/relay.py", "(app/proxy/transport.py"]),
    ("upstream response body read + response to the client (_relay_body)", ["_relay_body"]),
    ("response start to client (headers filter + uvicorn send)", ["RelayResponse._start"]),
    ("request JSON decode (json.loads in proxy_post)", ["proxy_post (app/proxy/routes.py", "(json/"]),
    ("wire parse_request + conversation key", ["proxy_post (app/proxy/routes.py", "(app/wire/"]),
    ("wire parse_request + conversation key", ["proxy_post (app/proxy/routes.py", "(app/guard/fingerprint.py"]),
    ("upstream request build (build_request + header filter)",
     ["proxy_post (app/proxy/routes.py", "(app/proxy/transport.py"]),
    ("route handler: rest of proxy_post", ["proxy_post (app/proxy/routes.py"]),
    ("relay scaffolding (RelayResponse.__call__, tasks, disconnect watch)", ["(app/proxy/relay.py"]),
    ("ASGI server + framework (uvicorn httptools, starlette, fastapi routing)", ["run_asgi"]),
    ("ASGI server: HTTP parsing/transport (uvicorn protocol callbacks)", ["(uvicorn/protocols"]),
    ("upstream request write to the socket (aiohttp writer task)", ["(aiohttp/http_writer.py"]),
    ("upstream socket reads, HTTP parsing (aiohttp protocol callbacks)", ["(aiohttp/client_proto.py"]),
    ("event loop, GC and other", []),
]


def classify(frames: list[str]) -> str:
    for label, needles in RULES:
        if all(any(n in f for f in frames) for n in needles):
            return label
    return RULES[-1][0]


#: The packages a sample's own time is counted under (its innermost Python frame's file).
PACKAGES = ("uvicorn", "aiohttp", "asyncpg", "starlette", "asyncio", "json", "httptools", "uvloop", "yarl",
            "multidict", "orjson", "re2", "prometheus_client", "sqlalchemy", "opentelemetry", "httpx", "logging")


def owner(frame: str) -> str:
    """Who a frame belongs to: ``ours`` (``app/``), a package of :data:`PACKAGES`, else ``other``."""
    if "(app/" in frame:
        return "ours"
    for name in PACKAGES:
        if f"({name}/" in frame or f"({name}.py" in frame:
            return name
    return "other"


def samples(raw: Path, pid_main_marker: str = "Runner.run") -> Iterator[tuple[list[str], int]]:
    """py-spy's collapsed stacks in ``raw`` as (frames, sample count), the event-loop
    thread's only (its stack passes ``pid_main_marker``): worker threads (thread pool,
    anyio) are not the request path."""
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        frames = stack.split(";")
        if n.isdigit() and any(pid_main_marker in f for f in frames):
            yield frames, int(n)


def split(raw: Path, pid_main_marker: str = "Runner.run") -> tuple[Counter, Counter, Counter, int]:
    """Busy samples of the event-loop thread by owner of the innermost Python frame,
    by (owner, system call) for samples whose leaf is a libc call (``--native`` only), and
    our functions by own time (the innermost frame in ``app/``, line numbers dropped)."""
    owners: Counter = Counter()
    calls: Counter = Counter()
    ours: Counter = Counter()
    total = 0
    for frames, n in samples(raw, pid_main_marker):
        total += n
        python = [f for f in frames if ".py:" in f]
        inner = python[-1] if python else ""
        who = "event loop (C), no coroutine running" if pid_main_marker in inner else owner(inner)
        owners[who] += n
        if "(libc" in frames[-1]:
            calls[(who, frames[-1].split(" ")[0])] += n
        if who == "ours":
            ours[inner.rsplit(":", 1)[0] + ")"] += n
    return owners, calls, ours, total


def print_perf(perf: str, data: Path, per_req_us: float) -> int:
    """The gateway's CPU by shared object from ``perf report`` on ``data``: the
    interpreter (all Python code: ours, uvicorn, aiohttp's Python, asyncio), the kernel
    (system calls, loopback TCP), each C extension (uvloop's loop, asyncpg's protocol,
    aiohttp's parser, orjson, re2)."""
    report = subprocess.run([perf, "report", "-i", str(data), "--sort", "dso", "--stdio"],
                            capture_output=True, text=True).stdout
    print(f"perf: {data}\n\n| share | µs/request | shared object |\n|---:|---:|---|")
    for line in report.splitlines():
        share, _, dso = line.strip().partition("%")
        if line.startswith("#") or not dso.strip() or not share.replace(".", "").isdigit():
            continue
        if float(share) >= 0.2:
            print(f"| {float(share):5.1f}% | {per_req_us * float(share) / 100:8,.0f} | {dso.strip()} |")
    return 0


def find_py_spy(explicit: str | None) -> str | None:
    for candidate in (explicit, shutil.which("py-spy"), str(Path(sys.executable).parent / "py-spy"),
                      str(Path(__file__).resolve().parent / ".venv-litellm" / "bin" / "py-spy")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def analyse(raw: Path, pid_main_marker: str = "Runner.run") -> tuple[Counter, Counter, int]:
    """Busy samples of the event-loop thread by category and by leaf function."""
    cats: Counter = Counter()
    leaves: Counter = Counter()
    total = 0
    for frames, n in samples(raw, pid_main_marker):
        total += n
        cats[classify(frames)] += n
        leaves[frames[-1]] += n
    return cats, leaves, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.profile", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=("nonstream", "stream", "tool_turn"), default="nonstream")
    parser.add_argument("--conversation", choices=("task", "new"), default="task",
                        help="tool_turn: all of a task's turns one conversation, or each turn a new one")
    parser.add_argument("-c", "--concurrency", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=10.0, help="sampling time (s)")
    parser.add_argument("--chunks", type=int, default=500, help="stream scenario: chunks per stream")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--native", action="store_true", help="py-spy --native: C and Cython frames too")
    parser.add_argument("--perf", action="store_true",
                        help="Linux perf instead of py-spy: the gateway's CPU by shared object (interpreter, kernel, "
                             "each C extension); CPU time only, where py-spy's samples are wall-clock")
    parser.add_argument("--py-spy", dest="py_spy")
    args = parser.parse_args(argv)
    py_spy = shutil.which("perf") if args.perf else find_py_spy(args.py_spy)
    if py_spy is None and args.perf:
        print("perf not found: apt-get install linux-perf", file=sys.stderr)
        return 2
    if py_spy is None:
        print("py-spy not found: pip install py-spy (or pass --py-spy PATH)", file=sys.stderr)
        return 2

    if args.scenario == "stream":
        body = {"kind": "chat", "model": model_name(args.chunks, 16, delay_ms=1), "stream": True}
    elif args.scenario == "tool_turn":
        body = {"kind": "tool_turn", "model": model_name(), "prefix": f"prof{int(time.time())}",
                "conversation": args.conversation}
    else:
        body = {"kind": "chat", "model": model_name(), "stream": False}

    tmp = Path(tempfile.mkdtemp(prefix="taskgate-profile-"))
    upstream = start_upstream(tmp)
    try:
        with embedded_database(tmp / "pg") as url:
            gw = start_gateway("gateway", url, upstream, tmp)
            try:
                tokens = create_tasks(gw, 101)
                path = BenchPath("taskgate_embedded", port=gw.port, hot_token=tokens[0], spread_tokens=tokens[1:],
                                 proxy=gw, upstream=upstream, pg=PgBackends(url), database_url=url)
                spec = path.spec(body=body, concurrency=args.concurrency, warmup_s=1.0,
                                 duration_s=args.seconds + 1.0, max_requests=50_000)
                out: dict = {}
                load = threading.Thread(target=lambda: out.update(run_load(spec, path.watch())))
                load.start()
                time.sleep(1.5)
                raw = RESULTS / f"profile-{args.scenario}.txt"
                RESULTS.mkdir(parents=True, exist_ok=True)
                if args.perf:
                    raw = RESULTS / f"profile-{args.scenario}.perf"
                    subprocess.run([py_spy, "record", "-F", "999", "-p", str(gw.pid), "-o", str(raw), "--",
                                    "sleep", str(int(args.seconds))], capture_output=True, timeout=args.seconds + 60)
                else:
                    subprocess.run([py_spy, "record", "--pid", str(gw.pid), "--duration", str(int(args.seconds)),
                                    "--rate", str(args.rate), "--format", "raw", "-o", str(raw)]
                                   + (["--native"] if args.native else []),
                                   capture_output=True, timeout=args.seconds + 60)
                load.join(args.seconds + 120)
            finally:
                gw.stop()
    finally:
        upstream.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    done = out.get("completed") or 0
    proxy_cpu = (out.get("cpu_s") or {}).get("proxy", 0.0)
    per_req_us = proxy_cpu / done * 1e6 if done else float("nan")
    pg_us = (out.get("cpu_s") or {}).get("postgres", float("nan")) / done * 1e6 if done else float("nan")
    events = out.get("events") or 0
    print(f"scenario {args.scenario}, c={args.concurrency}: {out.get('rps', 0):.0f} req/s, "
          f"gateway CPU {per_req_us:,.0f} µs per request"
          + (f", {proxy_cpu / events * 1e6:,.1f} µs per relayed chunk" if args.scenario == "stream" and events else "")
          + f", PostgreSQL CPU {pg_us:,.0f} µs per request"
          + f", p50 {((out.get('latency_ms') or {}).get('p50') or float('nan')):.2f} ms")
    if args.perf:
        return print_perf(py_spy, raw, per_req_us)
    cats, leaves, total = analyse(raw)
    print(f"py-spy: {total} busy samples of the event-loop thread ({raw})\n")
    print("| share | µs/request | category |\n|---:|---:|---|")
    for label, n in cats.most_common():
        print(f"| {100 * n / total:5.1f}% | {per_req_us * n / total:8,.0f} | {label} |")
    print("\nhottest functions (own time):")
    for frame, n in leaves.most_common(15):
        print(f"  {100 * n / total:5.1f}%  {frame}")
    owners, calls, ours, _ = split(raw)
    print("\nown time by whose code runs (innermost Python frame):\n| share | µs/request | whose |\n|---:|---:|---|")
    for who, n in owners.most_common():
        print(f"| {100 * n / total:5.1f}% | {per_req_us * n / total:8,.0f} | {who} |")
    if calls:
        print("\nsystem calls (--native), by whose code made them:")
        for (who, call), n in calls.most_common(8):
            print(f"  {100 * n / total:5.1f}%  {call} ({who})")
    print("\nour functions by own time:")
    for frame, n in ours.most_common(15):
        print(f"  {100 * n / total:5.1f}%  {frame}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
