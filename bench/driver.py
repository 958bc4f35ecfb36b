"""Run one load process (:mod:`bench.load`) and read server CPU at the instants it
starts and ends its measured window."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench.metrics import CpuWatch, add_client
from bench.services import child_env


class LoadError(RuntimeError):
    pass


class _Lines:
    """Lines from a pipe, with a deadline per read."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        self.fd = proc.stdout.fileno()  # type: ignore[union-attr]
        self.buf = b""

    def next(self, deadline: float) -> dict[str, Any] | None:
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise LoadError("load process timed out")
            ready, _, _ = select.select([self.fd], [], [], min(left, 1.0))
            if ready:
                data = os.read(self.fd, 65536)
                if not data:
                    return None
                self.buf += data
        line, _, self.buf = self.buf.partition(b"\n")
        return json.loads(line)


def _ack(proc: subprocess.Popen) -> None:
    """Tell the child its window's counters are read (it may then let go of its
    database connections)."""
    try:
        proc.stdin.write(b"read\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
    except OSError:
        pass


def run_load(spec: dict[str, Any], watch: CpuWatch | None, *,
             on_open: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
             timeout_s: float | None = None, module: str = "bench.load") -> dict[str, Any]:
    """Run ``python -m MODULE SPEC`` (:mod:`bench.load` or :mod:`bench.admission`) and return its result, with
    ``cpu_s`` (per watched group, ``client`` and ``other``) when ``watch`` is given.

    In hold mode ``on_open`` is called with the ``open`` event while the streams
    are held; its return value is stored as ``held`` and the streams are then
    closed."""
    if timeout_s is None:
        timeout_s = (spec.get("warmup_s", 0.5) + max(spec.get("duration_s", 3.0), spec.get("max_duration_s", 15.0))
                     + spec.get("open_timeout_s", 0) + 60)
    with tempfile.NamedTemporaryFile("w", suffix=".json", prefix="bench-spec-", delete=False) as f:
        json.dump(spec, f)
        path = f.name
    proc = subprocess.Popen([sys.executable, "-m", module, path], env=child_env(),
                            stdout=subprocess.PIPE, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + timeout_s
    lines = _Lines(proc)
    cpu: dict[str, float] | None = None
    held: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    try:
        while True:
            msg = lines.next(deadline)
            if msg is None:
                break
            event = msg.get("event")
            if event == "start" and watch is not None:
                watch.start()
            elif event == "end":
                if watch is not None:
                    cpu = watch.stop()
                _ack(proc)
            elif event == "open":
                held = {"open": msg}
                if on_open is not None:
                    held.update(on_open(msg))
                proc.stdin.write(b"close\n")  # type: ignore[union-attr]
                proc.stdin.flush()  # type: ignore[union-attr]
            elif event == "result":
                result = msg
                break
        proc.wait(max(1.0, deadline - time.monotonic()))
    except (LoadError, subprocess.TimeoutExpired) as exc:
        proc.kill()
        proc.wait()
        raise LoadError(f"{exc}; stderr: {proc.stderr.read().decode(errors='replace')[-1000:]}") from None  # type: ignore[union-attr]
    finally:
        Path(path).unlink(missing_ok=True)
    if result is None:
        raise LoadError(f"load process gave no result (exit {proc.returncode}): "
                        f"{proc.stderr.read().decode(errors='replace')[-1500:]}")  # type: ignore[union-attr]
    result.pop("event", None)
    if cpu is not None and watch is not None:
        result["cpu_s"] = add_client(cpu, result.get("client_cpu_s", 0.0))
        result["counters"] = dict(watch.counted)
        result["system_cpu_s"] = dict(watch.system)
        if watch.pg_sessions_opened is not None:
            result["counters"]["pg_connections_opened"] = watch.pg_sessions_opened
    if held is not None:
        result["held"] = held
    return result
