"""Memory per open stream, taskgate beside the bare relay, in alternating rounds.

``python -m bench.stream_memory`` measures what the suite's ``memory`` figure measures
(:func:`bench.scenarios.memory`: a *fresh* proxy process, warmed, ``--streams`` streams
opened at once and held by the upstream after their first content delta; per stream =
(RSS with them open − RSS before) ÷ streams still open), for taskgate on an embedded
PostgreSQL and for the bare relay (:mod:`bench.bare_relay`) in the same run, with one
fresh process of each per round, in a rotating order (the machine's noise falls on
both). Prints each round's KiB per stream and, at the end, the medians and the ratio
taskgate ÷ bare relay.

Options:

- ``--baseline REV``: also measure the gateway of git revision ``REV`` (exported with
  ``git archive`` into the scratch directory, the working tree untouched; on a database
  of its own that its gateway migrates, so an older migration chain is no obstacle)
  as a third path in every round: before/after of a change in one run.
- ``--tracemalloc``: instead of RSS, the Python allocations per stream in the gateway
  (``tracemalloc``, 1 frame, started before ``app`` is imported): the sites whose
  allocated size grew most between the warmed process and the process holding the
  streams, in bytes per open stream (``--top`` lines; ``--group traceback`` for 6-frame
  sites, slower), for each gateway and the bare relay, then what each gateway allocates
  per stream beyond the bare relay, by site. tracemalloc's own overhead is not in these
  figures.

The gateway runs as ``python -m bench.stream_memory serve ARGS…`` (``app.cli serve``
with the tracemalloc hook installed when ``BENCH_TRACEMALLOC_OUT`` is set; ``SIGUSR1``
writes a snapshot to that path). About 20 s of set-up, then ~10 s per path and round.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path as FsPath
from typing import Any

from bench import bare_relay, scenarios
from bench.config import quick
from bench.metrics import rss_bytes
from bench.paths import Path
from bench.services import (
    REPO,
    Service,
    child_env,
    create_tasks,
    embedded_database,
    free_port,
    spawn,
    start_gateway,
    start_upstream,
    wait_http,
)
from bench.upstream import model_name


def _serve(command: str) -> None:
    """``serve ARGS…``: ``app.cli serve ARGS…`` (``uvicorn ARGS…``: ``uvicorn ARGS…``), with
    a tracemalloc snapshot on SIGUSR1 when ``BENCH_TRACEMALLOC_OUT`` names a file."""
    out = os.environ.get("BENCH_TRACEMALLOC_OUT")
    if out:
        import tracemalloc

        tracemalloc.start(int(os.environ.get("BENCH_TRACEMALLOC_FRAMES", "1")))

        def dump(*_: object) -> None:
            tracemalloc.take_snapshot().dump(out + ".tmp")
            os.replace(out + ".tmp", out)

        signal.signal(signal.SIGUSR1, dump)
    if command == "uvicorn":
        import uvicorn

        sys.argv = ["uvicorn", *sys.argv[2:]]
        uvicorn.main()
        return
    from app.cli import main as cli_main

    sys.argv = ["app.cli", *sys.argv[1:]]
    cli_main()


def _start_bare_traced(upstream: Service, tmp: FsPath, out: FsPath) -> Service:
    """The bare relay (:mod:`bench.bare_relay`, same command) with the tracemalloc hook."""
    port = free_port()
    svc = spawn("bare_relay-tm", [sys.executable, "-m", "bench.stream_memory", "uvicorn", "bench.bare_relay:app",
                                  "--port", str(port), "--loop", "uvloop", "--http", "httptools",
                                  "--no-access-log", "--log-level", "warning"],
                port, tmp, child_env(BENCH_UPSTREAM=upstream.url, BENCH_TRACEMALLOC_OUT=str(out)))
    wait_http(svc, "/healthz", 20)
    return svc


def _snapshot(svc: Service, out: FsPath, timeout_s: float = 60.0) -> Any:
    """Ask the gateway ``svc`` for a tracemalloc snapshot and load it."""
    import tracemalloc

    out.unlink(missing_ok=True)
    os.kill(svc.pid, signal.SIGUSR1)
    deadline = time.monotonic() + timeout_s
    while not out.exists():
        if time.monotonic() > deadline:
            raise TimeoutError("no tracemalloc snapshot from the gateway")
        time.sleep(0.1)
    return tracemalloc.Snapshot.load(str(out))


def hold(port: int, tokens: list[str], streams: int, *, on_open: Any = None,
         settle_s: float = 1.0, open_timeout_s: float = 25.0) -> dict[str, Any]:
    """Open ``streams`` held streams on the proxy at ``port`` (``tokens`` spread over
    them), call ``on_open()`` after ``settle_s`` and close them. Returns ``open`` (streams
    still open when ``on_open`` ran) and ``on_open``'s result as ``held``."""
    from bench.driver import run_load

    cfg = quick()
    spec = Path("probe", port=port, hot_token=tokens[0], spread_tokens=tokens).spec(
        mode="hold", streams=streams, connect_concurrency=100,
        body={"kind": "chat", "model": model_name(2, cfg.chunk_size, hold_s=90.0), "stream": True},
        open_timeout_s=open_timeout_s, hold_timeout_s=30.0)

    def opened(msg: dict[str, Any]) -> dict[str, Any]:
        time.sleep(settle_s)
        return {"value": on_open() if on_open else None, "open": msg}

    result = run_load(spec, None, on_open=opened, timeout_s=open_timeout_s + 60)
    held = result.get("held", {})
    return {"open": held.get("open", {}).get("still_open", 0), "held": held.get("value"), "result": result}


def per_stream_kib(svc: Service, tokens: list[str], streams: int) -> tuple[float | None, int]:
    """(RSS with ``streams`` open − RSS before) ÷ streams open, KiB; and streams open."""
    cfg = quick()
    scenarios.warm(svc.port, tokens[0], cfg)
    time.sleep(0.5)
    before = rss_bytes(svc.pid)
    got = hold(svc.port, tokens, streams, on_open=lambda: rss_bytes(svc.pid))
    n = got["open"]
    return ((got["held"] - before) / n / 1024 if n and got["held"] else None), n


@dataclass
class Gateway:
    """A path measured: the environment its processes add, its database URL, its tasks' tokens."""

    env: dict[str, str]
    url: str
    tokens: list[str]


def _tasks(url: str, upstream: Service, tmp: FsPath, n: int, env: dict[str, str]) -> list[str]:
    """``n`` tasks made through a gateway with ``env`` on ``url`` (migrating it first)."""
    setup = start_gateway("setup", url, upstream, tmp, extra_env=env)
    try:
        return create_tasks(setup, n)
    finally:
        setup.stop()


def _export(rev: str, into: FsPath) -> FsPath:
    """Git revision ``rev`` in ``into`` (``git archive``; nothing in the repo changes), with
    this checkout's ``bench`` (``bench.stream_memory serve`` runs the revision's app)."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    shutil.rmtree(into / "bench")
    os.symlink(REPO / "bench", into / "bench")
    return into


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] in (["serve"], ["uvicorn"]):
        sys.argv = [sys.argv[0], *args_in]
        _serve(args_in[0])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.stream_memory", description=__doc__.split("\n")[0])
    parser.add_argument("--streams", type=int, default=1000, help="streams held at once (default 1,000)")
    parser.add_argument("--rounds", type=int, default=3, help="fresh processes per path (default 3)")
    parser.add_argument("--tasks", type=int, default=200, help="tasks the streams are spread over (default 200)")
    parser.add_argument("--baseline", metavar="REV", help="also measure the gateway of this git revision")
    parser.add_argument("--no-bare", action="store_true", help="skip the bare relay")
    parser.add_argument("--tracemalloc", action="store_true", help="Python allocations per stream instead of RSS")
    parser.add_argument("--group", default="lineno", choices=("lineno", "traceback", "filename"))
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(args_in)

    with ExitStack() as stack:
        tmp = FsPath(stack.enter_context(tempfile.TemporaryDirectory(prefix="taskgate-streammem-")))
        upstream = start_upstream(tmp)
        stack.callback(upstream.stop)
        url = stack.enter_context(embedded_database(tmp / "pg"))
        paths: dict[str, Gateway] = {"taskgate": Gateway({}, url, _tasks(url, upstream, tmp, args.tasks, {}))}
        if args.baseline:
            # the revision's own database, migrated by the revision's gateway (its chain may be older)
            from app.db import embedded

            old = {"PYTHONPATH": str(_export(args.baseline, tmp / "baseline"))}
            old_url = embedded.start(tmp / "pg-base")
            stack.callback(embedded.stop, tmp / "pg-base")
            paths[f"taskgate@{args.baseline}"] = Gateway(old, old_url, _tasks(old_url, upstream, tmp, args.tasks, old))
        if not args.no_bare:
            paths["bare relay"] = Gateway({}, "", ["x"])
        if args.tracemalloc:
            return _tracemalloc(paths, upstream, tmp, args)
        figures: dict[str, list[float]] = {k: [] for k in paths}
        keys = list(paths)
        for r in range(args.rounds):
            order = keys[r % len(keys):] + keys[:r % len(keys)]
            for key in order:
                gw = paths[key]
                if key == "bare relay":
                    svc = bare_relay.start(upstream, tmp)
                else:
                    svc = start_gateway("gateway", gw.url, upstream, tmp, module="bench.stream_memory",
                                        extra_env=gw.env)
                try:
                    kib, n = per_stream_kib(svc, gw.tokens, args.streams)
                finally:
                    svc.stop()
                if kib is not None:
                    figures[key].append(kib)
                print(f"round {r + 1} {key}: {kib if kib is None else round(kib, 2)} KiB/stream ({n} open)",
                      flush=True)
        medians = {k: statistics.median(v) for k, v in figures.items() if v}
        for k, v in medians.items():
            print(f"{k}: median {v:.2f} KiB/stream over {len(figures[k])} rounds "
                  f"({', '.join(f'{x:.2f}' for x in figures[k])})")
        if "bare relay" in medians:
            for k in paths:
                if k != "bare relay" and k in medians:
                    print(f"{k} ÷ bare relay: {medians[k] / medians['bare relay']:.3f}")
    return 0


def _tracemalloc(paths: dict[str, Gateway], upstream: Service, tmp: FsPath, args: argparse.Namespace) -> int:
    frames = "6" if args.group == "traceback" else "1"
    per_stream: dict[str, dict[Any, float]] = {}
    for key, gw in paths.items():
        out = tmp / f"{key.replace('@', '-').replace(' ', '-')}.snapshot"
        tokens = gw.tokens
        if key == "bare relay":
            svc = _start_bare_traced(upstream, tmp, out)
        else:
            svc = start_gateway("gateway-tm", gw.url, upstream, tmp, module="bench.stream_memory",
                                extra_env={**gw.env, "BENCH_TRACEMALLOC_OUT": str(out),
                                           "BENCH_TRACEMALLOC_FRAMES": frames})
        try:
            scenarios.warm(svc.port, tokens[0], quick())
            time.sleep(0.5)
            before = _snapshot(svc, out)
            got = hold(svc.port, tokens, args.streams, on_open=lambda: _snapshot(svc, out))
            during = got["held"]
        finally:
            svc.stop()
        n = got["open"]
        if during is None or not n:
            print(f"{key}: no streams held")
            continue
        stats = during.compare_to(before, args.group)
        per_stream[key] = {s.traceback: s.size_diff / n for s in stats}
        total = sum(s.size_diff for s in stats)
        print(f"\n{key}: {n} streams open, {total / n:.0f} B of Python allocations per stream")
        for s in stats[:args.top]:
            where = s.traceback.format(limit=6 if args.group == "traceback" else 1)
            print(f"{s.size_diff / n:8.0f} B  {s.count_diff / n:6.2f} blocks  " + " <- ".join(
                line.strip() for line in where if not line.startswith("    ")))
    bare = per_stream.pop("bare relay", None)
    for key, sites in per_stream.items() if bare is not None else ():
        print(f"\n{key} - bare relay: {sum(sites.values()) - sum(bare.values()):.0f} B per stream; by site:")
        extra = sorted(((size - bare.get(tb, 0.0), tb) for tb, size in {**dict.fromkeys(bare, 0.0), **sites}.items()),
                       key=lambda x: -abs(x[0]))
        for size, tb in extra[:args.top]:
            print(f"{size:8.0f} B  {tb[0].filename}:{tb[0].lineno}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
