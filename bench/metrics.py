"""CPU and memory of the processes under test (psutil), and the machine's description.

CPU is user + system seconds. A :class:`CpuWatch` groups processes (a proxy, the
upstream, PostgreSQL backends) and reads their counters at two instants; the
difference over a load window is what each group spent on that window's requests.
``other`` is everything else the machine did in the window (other users' work):
a noise indicator printed next to the figures.
"""

from __future__ import annotations

import asyncio
import math
import os
import platform
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable

import psutil


def _tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.Error:
        return []


def cpu_by_pid(pids: list[int], recursive: bool = True, system_only: bool = False) -> dict[int, float]:
    """``{pid: user+system seconds}`` (or system seconds only) for ``pids`` and
    their descendants."""
    out: dict[int, float] = {}
    for pid in pids:
        procs = _tree(pid) if recursive else [psutil.Process(pid)]
        for p in procs:
            try:
                t = p.cpu_times()
                out[p.pid] = t.system if system_only else t.user + t.system
            except psutil.Error:
                pass
    return out


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` and its descendants, in bytes."""
    total = 0
    for p in _tree(pid):
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def busy_cpu_s() -> float:
    """Machine-wide non-idle CPU seconds since boot (all cores)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0)


@dataclass
class PgBackends:
    """The PostgreSQL backends serving one database: children of its postmaster
    whose ``pg_stat_activity.datname`` is that database."""

    url: str
    postmaster: int | None = None
    database: str = ""

    def __post_init__(self) -> None:
        self.postmaster, self.database = asyncio.run(self._probe())

    async def _probe(self) -> tuple[int | None, str]:
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(self.url, connect_args={"timeout": 3})
        try:
            async with engine.connect() as conn:
                pid, db = (await conn.execute(text("SELECT pg_backend_pid(), current_database()"))).one()
                try:  # while this backend still exists: its parent is the postmaster
                    return psutil.Process(int(pid)).ppid(), str(db)
                except psutil.Error:
                    return None, str(db)
        finally:
            await engine.dispose()

    async def _state(self) -> tuple[set[int], int]:
        from sqlalchemy import text
        from sqlalchemy.ext.asyncio import create_async_engine

        engine = create_async_engine(self.url, connect_args={"timeout": 3})
        try:
            async with engine.connect() as conn:
                rows = (await conn.execute(text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
                    " AND pid <> pg_backend_pid()"))).all()
                sessions = (await conn.execute(text(
                    "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"))).scalar()
        finally:
            await engine.dispose()
        return {int(r[0]) for r in rows}, int(sessions or 0)

    def children_cpu(self) -> dict[int, float]:
        if self.postmaster is None:
            return {}
        return {pid: s for pid, s in cpu_by_pid([self.postmaster]).items() if pid != self.postmaster}

    def state(self) -> tuple[set[int], int]:
        """Pids of the backends connected to this database now, and the database's
        ``pg_stat_database.sessions`` counter (connections ever opened, +1 for
        this probe)."""
        return asyncio.run(self._state())


@dataclass
class CpuWatch:
    """CPU seconds of named process groups between :meth:`start` and :meth:`stop`.

    ``groups`` maps a name to a callable returning pids (trees are followed).
    ``pg`` adds a ``postgres`` group (backends of that database)."""

    groups: dict[str, Callable[[], list[int]]]
    pg: PgBackends | None = None
    counters: dict[str, Callable[[], float]] = field(default_factory=dict)
    """Monotonic counters read at both instants; their differences land in
    :attr:`counted` (e.g. upstream connections accepted)."""
    pg_sessions_opened: int | None = None
    """PostgreSQL connections the database accepted in the window (after :meth:`stop`)."""
    counted: dict[str, float] = field(default_factory=dict)
    system: dict[str, float] = field(default_factory=dict)
    """Kernel (system) CPU seconds per group in the window (part of the totals)."""
    _c0: dict[str, float] = field(default_factory=dict)
    _sys0: dict[str, dict[int, float]] = field(default_factory=dict)
    _start: dict[str, dict[int, float]] = field(default_factory=dict)
    _busy0: float = 0.0
    _pg0: dict[int, float] = field(default_factory=dict)
    _pg_ours: set[int] = field(default_factory=set)
    _pg_sessions: int = 0

    def start(self) -> None:
        if self.pg is not None:
            try:
                self._pg_ours, self._pg_sessions = self.pg.state()
            except Exception:  # noqa: BLE001
                self._pg_ours, self._pg_sessions = set(), 0
            self._pg0 = self.pg.children_cpu()
        self._c0 = {name: _safe(fn) for name, fn in self.counters.items()}
        self._start = {name: cpu_by_pid(fn()) for name, fn in self.groups.items()}
        self._sys0 = {name: cpu_by_pid(fn(), system_only=True) for name, fn in self.groups.items()}
        self._busy0 = busy_cpu_s()

    def stop(self) -> dict[str, float]:
        """CPU seconds per group and ``postgres`` since :meth:`start`, plus
        ``machine_busy`` (all cores); see :func:`add_client`."""
        busy = busy_cpu_s() - self._busy0
        out: dict[str, float] = {}
        for name, fn in self.groups.items():
            now = cpu_by_pid(fn())
            before = self._start.get(name, {})
            out[name] = sum(max(0.0, s - before.get(pid, 0.0)) for pid, s in now.items())
            sys_now, sys_before = cpu_by_pid(fn(), system_only=True), self._sys0.get(name, {})
            self.system[name] = sum(max(0.0, s - sys_before.get(pid, 0.0)) for pid, s in sys_now.items())
        if self.pg is not None:
            now = self.pg.children_cpu()
            try:
                ours, sessions = self.pg.state()
            except Exception:  # noqa: BLE001
                ours, sessions = set(now), self._pg_sessions + 1
            ours |= self._pg_ours
            out["postgres"] = sum(max(0.0, s - self._pg0.get(pid, 0.0)) for pid, s in now.items() if pid in ours)
            self.pg_sessions_opened = max(0, sessions - self._pg_sessions - 1)
        out["machine_busy"] = busy
        self.counted = {name: _safe(fn) - self._c0.get(name, 0.0) for name, fn in self.counters.items()}
        return out


def _safe(fn: Callable[[], float]) -> float:
    try:
        return float(fn())
    except Exception:  # noqa: BLE001
        return math.nan


def add_client(cpu: dict[str, float], client_cpu_s: float) -> dict[str, float]:
    """Add the load client's CPU seconds and ``other``: what the rest of the machine
    used in the window (``machine_busy`` minus every measured group)."""
    out = dict(cpu)
    out["client"] = client_cpu_s
    busy = out.pop("machine_busy", 0.0)
    out["other"] = max(0.0, busy - sum(out.values()))
    return out


def machine() -> dict[str, object]:
    """Cores, CPU model, memory, OS and Python of this machine."""
    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    freq = psutil.cpu_freq()
    return {
        "cpu_model": model,
        "logical_cpus": psutil.cpu_count(logical=True),
        "physical_cores": psutil.cpu_count(logical=False),
        "cpu_mhz": round(freq.current) if freq else None,
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "executable": sys.executable,
        "load_avg_1m_at_start": round(os.getloadavg()[0], 2),
    }


def fdatasync_ms(directory: str, n: int = 30) -> list[float]:
    """Milliseconds each of ``n`` 8 KiB write + ``fdatasync`` pairs took in a scratch
    file under ``directory``: what a commit waiting for its WAL waits for here."""
    out = []
    fd, path = tempfile.mkstemp(dir=directory, prefix="bench-fsync-")
    try:
        block = b"\0" * 8192
        for _ in range(n):
            t0 = time.perf_counter()
            os.write(fd, block)
            os.fdatasync(fd)
            out.append((time.perf_counter() - t0) * 1000.0)
    finally:
        os.close(fd)
        os.unlink(path)
    return out
