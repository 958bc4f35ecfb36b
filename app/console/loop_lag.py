"""Event-loop probe: how long the gateway's own work held its event loop.

A task wakes every :data:`INTERVAL_S` seconds and observes, per wake-up, how late it
came (wall clock):

- ``taskgate_event_loop_lag_seconds``: the whole delay, what clients feel; on a loaded
  host it includes the time the process waited for a CPU.
- ``taskgate_event_loop_stall_seconds``: the delay less the time the loop's thread spent
  runnable but waiting for a CPU meanwhile (Linux ``/proc/thread-self/schedstat``, second
  field, read from one descriptor opened once: a few microseconds per wake-up). What is
  left is the process's own doing: callbacks running on the loop (a large JSON parse, a
  regex over a big tool result) or another thread holding the GIL for that long (the
  loop's thread then sleeps on the GIL, which is not a wait for a CPU). Where
  ``schedstat`` is missing it equals the lag.

Read-only, like every console metric; started and stopped with the console.
"""

from __future__ import annotations

import asyncio
import contextlib
import os

from prometheus_client import Histogram

#: Seconds between wake-ups.
INTERVAL_S = 0.02
_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)

LOOP_LAG_SECONDS = Histogram("taskgate_event_loop_lag_seconds",
                             f"How late the loop probe's wake-up ({INTERVAL_S} s apart) came, seconds.",
                             buckets=_BUCKETS_S)
LOOP_STALL_SECONDS = Histogram("taskgate_event_loop_stall_seconds",
                               "The loop probe's lateness less its process's threads' wait for a CPU meanwhile "
                               "(the process's own work or GIL), seconds.", buckets=_BUCKETS_S)

_task: asyncio.Task[None] | None = None


def runnable_wait_s(fd: int) -> float | None:
    """Seconds the thread whose ``schedstat`` is open as ``fd`` has spent runnable but
    waiting for a CPU, or ``None`` when the kernel does not say."""
    try:
        return int(os.pread(fd, 128, 0).split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


async def _probe(interval_s: float) -> None:
    loop = asyncio.get_running_loop()
    try:
        fd: int | None = os.open("/proc/thread-self/schedstat", os.O_RDONLY)  # the loop's thread
    except OSError:  # not Linux
        fd = None
    try:
        while True:
            woke, waited = loop.time(), None if fd is None else runnable_wait_s(fd)
            await asyncio.sleep(interval_s)
            lag = max(0.0, loop.time() - woke - interval_s)
            now_waited = None if fd is None else runnable_wait_s(fd)
            contention = now_waited - waited if waited is not None and now_waited is not None else 0.0
            LOOP_LAG_SECONDS.observe(lag)
            LOOP_STALL_SECONDS.observe(max(0.0, lag - contention))
    finally:
        if fd is not None:
            os.close(fd)


def start(interval_s: float = INTERVAL_S) -> None:
    """Start the probe on the running loop (once per process)."""
    global _task
    if _task is None or _task.done():
        _task = asyncio.get_running_loop().create_task(_probe(interval_s), name="event-loop probe")


async def stop() -> None:
    """Stop the probe."""
    global _task
    if _task is not None:
        _task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await _task
        _task = None
