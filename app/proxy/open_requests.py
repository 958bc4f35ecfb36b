"""The requests this process is relaying right now, by task id, so a stop can cut them.

Pure bookkeeping, no I/O: :mod:`app.proxy.stop_watch` decides *when* a task was
stopped (``LISTEN``/``NOTIFY`` or polling) and calls :meth:`OpenRequests.cut`; the
relay (:class:`app.proxy.relay.RelayResponse`) decides *how* one exchange ends.

A request is tracked from right after its admission until its response is finished
(:meth:`OpenRequests.track` / :meth:`OpenRequests.untrack`). The gap between the
admission's read of the task row and :meth:`track` is covered by remembering, for
``recent_s`` seconds, which tasks a stop was heard for: a request tracked for such a
task is reported through ``on_suspect`` so its task's latch is read once more. A budget's
pause (:mod:`app.budgets.pause`) may concern any task, so for ``recent_s`` seconds after
one was heard every request tracked is reported.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable, Protocol

from app.errors import GatewayError


class Cuttable(Protocol):
    """What the registry needs from an open request (a ``RelayResponse``)."""

    def cut(self, refusal: GatewayError) -> bool:
        """End the exchange with ``refusal``'s reason; ``False`` when it had already
        ended or been cut."""
        ...


class OpenRequests:
    """Open requests of this process, grouped by task id.

    ``changed`` is set whenever a request is tracked (the poller waits on it while
    nothing is open). ``on_suspect(task_id)`` is called when a request is tracked for
    a task a stop was heard for in the last ``recent_s`` seconds.
    """

    def __init__(self, recent_s: float = 10.0) -> None:
        self._by_task: dict[str, set[Cuttable]] = {}
        self._recent: dict[str, float] = {}  # task id -> time.monotonic() of the stop heard
        self._pause_heard: float | None = None  # time.monotonic() of the last budget pause heard
        self.recent_s = recent_s
        self.changed = asyncio.Event()
        self.on_suspect: Callable[[str], None] | None = None

    def track(self, task_id: str, request: Cuttable) -> None:
        """Start tracking ``request`` of ``task_id`` (call right after admission)."""
        self._by_task.setdefault(task_id, set()).add(request)
        self.changed.set()
        heard = self._recent.get(task_id)
        now = time.monotonic()
        if self.on_suspect is not None and self._pause_heard is not None and now - self._pause_heard < self.recent_s:
            self.on_suspect(task_id)
        elif heard is not None and self.on_suspect is not None:
            if now - heard < self.recent_s:
                self.on_suspect(task_id)
            else:
                del self._recent[task_id]

    def untrack(self, task_id: str, request: Cuttable) -> None:
        """Stop tracking ``request`` (its response is finished). Idempotent."""
        open_ = self._by_task.get(task_id)
        if open_ is None:
            return
        open_.discard(request)
        if not open_:
            del self._by_task[task_id]

    def task_ids(self) -> list[str]:
        """Ids of the tasks with at least one open request here."""
        return list(self._by_task)

    def count(self, task_id: str | None = None) -> int:
        """Open requests of ``task_id``, or of all tasks."""
        if task_id is not None:
            return len(self._by_task.get(task_id, ()))
        return sum(len(s) for s in self._by_task.values())

    def heard_stop(self, task_id: str) -> None:
        """Remember that a stop of ``task_id`` was heard (see the module docstring)."""
        now = time.monotonic()
        self._recent[task_id] = now
        if len(self._recent) > 10_000:  # forget the old ones; bounded memory
            self._recent = {t: at for t, at in self._recent.items() if now - at < self.recent_s}

    def heard_pause(self) -> None:
        """Remember that a budget's pause was heard (see the module docstring)."""
        self._pause_heard = time.monotonic()

    def cut(self, task_id: str, refusal: GatewayError) -> int:
        """Cut every open request of ``task_id`` with ``refusal``; returns how many
        were cut (requests that already ended are not counted)."""
        return sum(1 for request in list(self._by_task.get(task_id, ())) if request.cut(refusal))
