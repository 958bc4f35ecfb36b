"""Hear that a task was stopped -- by any gateway process -- and cut its open requests here.

A latch (:func:`app.db.tasks.set_latch`: any loop rule, any limit, an operator stop,
``repeated_stalls``) ``NOTIFY``s :data:`app.db.tasks.STOP_CHANNEL` with the task id
inside its own transaction, so the notification is delivered only on commit. Each
gateway process hears it in one of two ways:

- **LISTEN** (``TASKGATE_STOP_LISTEN``, default on): one dedicated connection per
  process ``LISTEN``s on the channel; reconnects with back-off when it is lost, and
  after every (re)connect reads the latches of all open requests once (a stop may
  have been missed meanwhile). ``LISTEN`` needs a session of its own, so it does not
  work through PgBouncer in transaction mode: the connection goes to
  ``TASKGATE_LISTEN_DATABASE_URL`` (a direct URL), else to the main URL, and if that
  turns out to be a pooler (the backend pid PostgreSQL reports differs from the one
  in the connection's start-up answer) LISTEN is given up with a warning.
- **Polling** (``TASKGATE_STOP_POLL_INTERVAL_S``, default 0.5 s; 0 disables): while
  LISTEN is not live *and* this process has open requests, one indexed query every
  interval reads which of their tasks are stopped. Nothing runs while nothing is open.

Either way, the task row is read (through the main pool) and, unless the reason is
in :data:`NOT_CUT` (``request_limit``, ``cost_limit``), every open request of the task is
cut with the task's stop refusal (:func:`app.admission.refusals.stop_refusal`, the one its next request would get from
admission; :meth:`RelayResponse.cut`); a
``cut_open_requests`` event records how many, which path heard it, which process,
and the seconds from ``stopped_at`` to the cut.

A budget's **pause** (:mod:`app.budgets.pause`) is heard the same two ways (its own
channel, :data:`~app.budgets.pause.PAUSE_CHANNEL`, on the same connection; the poller and
every reconnect read it too): every open request of a task under a paused budget is cut
with the ``budget_paused`` refusal its next request would get, whatever the task's own
state, and its ``cut_open_requests`` event (reason ``budget_paused``) names the budget and
the seconds from ``paused_at`` to the cut.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from collections.abc import Coroutine
from datetime import datetime, timezone
from typing import Any

import asyncpg

from app.admission.refusals import stop_refusal
from app.budgets import pause
from app.db import sql
from app.db import tasks as task_rows
from app.db.errors import database_unreachable
from app.db.pool import asyncpg_dsn
from app.fault_log import faults
from app.proxy.open_requests import OpenRequests
from app.settings import Settings
from app.task import Task

logger = logging.getLogger(__name__)

#: Stop reasons that do not cut open requests. ``request_limit`` latches when the
#: request *after* the last allowed one arrives; the requests still open were admitted
#: within the limit, and a limit of N must give N answers. ``cost_limit`` likewise: the
#: open requests hold reservations that fit under the ceiling, and cutting them would
#: only waste what they already cost.
NOT_CUT = ("request_limit", "cost_limit")
_STOPPED = sql.statement("proxy_stopped_tasks")
_KEEPALIVE_S = 10.0  # how often an idle listener connection proves it is alive
_BACKOFF_S = (0.2, 0.5, 1.0, 2.0, 5.0)  # reconnect delays, the last one repeating


class StopWatcher:
    """The LISTEN connection and the poller of one process (see module docstring)."""

    def __init__(self, pool: asyncpg.Pool, registry: OpenRequests, settings: Settings,
                 listen_url: str) -> None:
        self.pool = pool
        self.registry = registry
        self.settings = settings
        self.listen_url = listen_url
        self.live = False  # LISTEN is set up on a healthy direct connection
        self.process = f"{socket.gethostname()}:{os.getpid()}"
        self._tasks: set[asyncio.Task[Any]] = set()
        registry.on_suspect = lambda task_id: self._spawn(self.check([task_id], "recheck"))

    def start(self) -> "StopWatcher":
        if self.settings.stop_listen:
            self._spawn(self._listen_forever())
        if self.settings.stop_poll_interval_s > 0:
            self._spawn(self._poll_forever())
        return self

    async def close(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro: Coroutine[Any, Any, object]) -> None:
        t = asyncio.ensure_future(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def check(self, task_ids: list[str], path: str) -> int:
        """Cut the open requests of those of ``task_ids`` that are stopped; returns how
        many were cut. ``path`` (``listen``, ``poll``, ``recheck``) goes into the event."""
        if not task_ids:
            return 0
        rows = await self.pool.fetch(_STOPPED, task_ids, NOT_CUT)
        paused = await self.pool.fetch(pause.PAUSED_TASKS, task_ids)
        total = 0
        cuts: list[tuple[str, str | None, datetime | None, int, dict[str, Any]]] = []
        for row in rows:
            task = Task.from_row(row)
            cut = self.registry.cut(task.id, stop_refusal(task))
            total += cut
            if cut:
                cuts.append((task.id, task.stop_reason, task.stopped_at, cut, {}))
        for row in paused:  # a stopped task's requests were cut above: cut() counts each once
            cut = self.registry.cut(row["task_id"], pause.budget_paused(row["task_id"], row, row["own"]))
            total += cut
            if cut:
                cuts.append((row["task_id"], pause.BUDGET_PAUSED, row["paused_at"], cut, {"budget": row["id"]}))
        for task_id, reason, since, cut, extra in cuts:
            await self._record(task_id, reason, since, cut, path, extra)
        return total

    async def _record(self, task_id: str, reason: str | None, stopped_at: datetime | None, cut: int, path: str,
                      extra: dict[str, Any]) -> None:
        since = (datetime.now(timezone.utc) - stopped_at).total_seconds() if stopped_at else None
        detail = {"cut": cut, "path": path, "process": self.process,
                  "seconds_since_stopped": None if since is None else round(since, 3), **extra}
        logger.warning("task %s stopped (%s): cut %d open request(s) (heard by %s)",
                       task_id, reason, cut, path)
        try:
            async with self.pool.acquire() as conn:
                await task_rows.add_event(conn, task_id, "cut_open_requests", reason, detail)
        except Exception:  # the requests are cut; the record is best effort
            logger.exception("recording cut_open_requests for task %s failed", task_id)

    # -- LISTEN -------------------------------------------------------------------

    def _notified(self, conn: object, pid: int, channel: str, task_id: str) -> None:
        self.registry.heard_stop(task_id)
        if self.registry.count(task_id):
            self._spawn(self._check_logged([task_id], "listen"))

    def _paused(self, conn: object, pid: int, channel: str, budget_id: str) -> None:
        """A budget was paused: which open requests it concerns is read from its tasks."""
        self.registry.heard_pause()
        if self.registry.count():
            self._spawn(self._check_logged(self.registry.task_ids(), "listen"))

    async def _check_logged(self, task_ids: list[str], path: str) -> None:
        try:
            await self.check(task_ids, path)
        except Exception as exc:  # the poller or the next notification retries
            if not database_unreachable(exc):
                logger.exception("reading the latch of %s failed", task_ids)
            else:  # one line per outage (the fault log), not a traceback per poll
                faults.report("stop watch", "database unavailable; latches are read again when it is back",
                              exc, logging.WARNING)

    async def _listen_forever(self) -> None:
        attempt = 0
        while True:
            try:
                conn = await asyncpg.connect(asyncpg_dsn(self.listen_url),
                                             timeout=self.settings.database_timeout_s,
                                             statement_cache_size=0,  # may be PgBouncer
                                             server_settings={"application_name": "taskgate-stop-listener"})
            except Exception as exc:  # noqa: BLE001
                faults.report("stop listener", "cannot connect; polling meanwhile", exc, logging.WARNING)
            else:
                try:
                    if not await _is_direct(conn):
                        logger.warning(
                            "stop listener: the database URL goes through a pooler, where LISTEN does "
                            "not work; set TASKGATE_LISTEN_DATABASE_URL to a direct URL. Polling instead.")
                        return
                    attempt = 0
                    await self._listen(conn)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # noqa: BLE001
                    faults.report("stop listener", "lost its connection; reconnecting", exc, logging.WARNING)
                finally:
                    self.live = False
                    conn.terminate()
            await asyncio.sleep(_BACKOFF_S[min(attempt, len(_BACKOFF_S) - 1)])
            attempt += 1

    async def _listen(self, conn: asyncpg.Connection) -> None:
        lost = asyncio.Event()
        conn.add_termination_listener(lambda _conn: lost.set())
        await conn.add_listener(task_rows.STOP_CHANNEL, self._notified)
        await conn.add_listener(pause.PAUSE_CHANNEL, self._paused)
        self.live = True
        await self._check_logged(self.registry.task_ids(), "listen")  # missed while not listening
        while not lost.is_set():
            try:
                await asyncio.wait_for(lost.wait(), _KEEPALIVE_S)
            except TimeoutError:
                await conn.fetchval(sql.statement("health_probe"), timeout=self.settings.database_timeout_s)

    # -- polling ------------------------------------------------------------------

    async def _poll_forever(self) -> None:
        interval = self.settings.stop_poll_interval_s
        while True:
            ids = [] if self.live else self.registry.task_ids()
            if ids:
                await self._check_logged(ids, "poll")
                await asyncio.sleep(interval)
            elif self.live:
                await asyncio.sleep(interval)
            else:
                self.registry.changed.clear()
                await self.registry.changed.wait()


async def _is_direct(conn: asyncpg.Connection) -> bool:
    """Whether ``conn`` is a session of its own on PostgreSQL (not through a pooler):
    a pooler answers the start-up with its own backend key, so the pid differs."""
    pid: int = await conn.fetchval(sql.statement("backend_pid"))
    server_pid: int = conn.get_server_pid()
    return pid == server_pid
