"""Responses of a task whose accounting has not finished yet, in this process.

A relayed response is *open* from the moment it is admitted until its usage, cost and
tool calls are recorded (:class:`app.proxy.accounting.Accounting` calls :func:`opened`
and :func:`closed`). The client has the last byte before that record is written, so an
agent's next request can be judged while it is still being written: a refusal built
then would quote the counters one response short (``4 tool calls`` beside
``tool_calls=5``). A refusal therefore first waits, a bounded time, for the task's open
responses to close (:func:`drained`) and reads the counters again.

Only this process's responses are seen; one answered by another gateway process may
still be missing from a refusal's sentence (never from the counters themselves).
"""

from __future__ import annotations

import asyncio

#: The longest a refusal waits for the task's open responses, seconds.
WAIT_S = 1.0

_open: dict[str, int] = {}  # task id -> responses not yet accounted
_idle: dict[str, asyncio.Event] = {}  # task id -> set when its count drops to 0 (only while awaited)


def opened(task_id: str) -> None:
    """A response of ``task_id`` was admitted; its accounting is to come."""
    _open[task_id] = _open.get(task_id, 0) + 1


def closed(task_id: str) -> None:
    """The accounting of one response of ``task_id`` is done (or given up)."""
    left = _open.get(task_id, 0) - 1
    if left > 0:
        _open[task_id] = left
        return
    _open.pop(task_id, None)
    event = _idle.pop(task_id, None)
    if event is not None:
        event.set()


def pending(task_id: str) -> int:
    """How many responses of ``task_id`` are still being accounted here."""
    return _open.get(task_id, 0)


async def drained(task_id: str, timeout_s: float = WAIT_S) -> bool:
    """Wait until no response of ``task_id`` is being accounted here, at most
    ``timeout_s`` seconds; returns whether that happened."""
    if not _open.get(task_id):
        return True
    event = _idle.setdefault(task_id, asyncio.Event())
    try:
        await asyncio.wait_for(event.wait(), timeout_s)
        return True
    except asyncio.TimeoutError:
        return False
