"""Supervise the embedded PostgreSQL: when its postmaster dies, restart it.

Every gateway process using the embedded database runs one :class:`Supervisor` task.
It checks the postmaster every ``interval_s`` (a read of ``postmaster.pid`` and one
process lookup, no query). While the server is down, requests fail closed (503:
admission cannot reach the database) and ``/readyz`` reports
``{"status": "unavailable", "database": "restarting"}``. The supervisor restarts the
server (PostgreSQL replays its WAL: nothing committed is lost), expires the pool's
connections to the dead server and the gateway serves again without a restart of its
own. Several processes sharing one data directory may notice at once; the restart
itself is serialised by a file lock (:func:`app.db.embedded.restart`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import asyncpg

from app.db import embedded

logger = logging.getLogger(__name__)


class Supervisor:
    """Watches one embedded PostgreSQL data directory for this process.

    ``state`` is ``"ok"`` or ``"restarting"``; ``restarts`` counts restarts this process
    saw complete and ``last_recovery_s`` is how long the last one took (from noticing
    the dead postmaster to the server accepting connections again), in seconds.
    """

    def __init__(self, pgdata: Path, pool: asyncpg.Pool, interval_s: float = 0.25) -> None:
        self.pgdata = Path(pgdata)
        self.pool = pool
        self.interval_s = interval_s
        self.sockets = embedded.socket_dir(self.pgdata) or self.pgdata
        self.state = "ok"
        self.restarts = 0
        self.last_recovery_s: float | None = None

    async def run(self) -> None:
        """Check forever (cancel the task to stop)."""
        while True:
            await asyncio.sleep(self.interval_s)
            if not embedded.is_running(self.pgdata):
                await self.recover()

    async def recover(self) -> None:
        """Restart the server (or wait for a sibling process to), then drop the pool's
        connections to the dead one. Retries until it is up."""
        self.state = "restarting"
        started = time.monotonic()
        logger.error("embedded PostgreSQL in %s is not running; refusing requests (503) and "
                     "restarting it", self.pgdata)
        attempt = 0
        while not embedded.is_running(self.pgdata):
            attempt += 1
            try:
                await asyncio.to_thread(embedded.restart, self.pgdata, self.sockets)
            except Exception as exc:  # noqa: BLE001 - e.g. the dead server's children still exit
                if attempt == 1 or attempt % 20 == 0:
                    logger.warning("restarting the embedded PostgreSQL failed (attempt %d): %r; "
                                   "retrying", attempt, exc)
                await asyncio.sleep(0.5)
        await self.pool.expire_connections()
        self.last_recovery_s = time.monotonic() - started
        self.restarts += 1
        self.state = "ok"
        logger.warning("embedded PostgreSQL is back after %.1f s; serving again",
                       self.last_recovery_s)


def start(pgdata: Path | None, pool: asyncpg.Pool) -> tuple[Supervisor | None, asyncio.Task[None] | None]:
    """Start supervising ``pgdata`` (``None``: an external database, nothing to do)."""
    if pgdata is None:
        return None, None
    supervisor = Supervisor(pgdata, pool)
    return supervisor, asyncio.create_task(supervisor.run(), name="embedded-postgres-supervisor")
