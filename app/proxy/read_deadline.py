"""The stream-silence watchdog's clock: one deadline for a relay's upstream reads.

``asyncio.timeout_at`` around every read of a stream schedules and cancels a timer per
chunk (about a tenth of the relay's CPU per chunk, measured). :class:`ReadDeadline`
keeps one timer per stream instead: the deadline moves by assignment between reads
(each content event pushes it forward); the timer, when it fires before the
deadline, re-arms itself for the deadline's new value, and a read re-arms it when the
deadline came closer (the terminal event's close grace). When the deadline has passed during a read, that
read is cancelled and :meth:`ReadDeadline.read` raises ``TimeoutError``; a deadline
that passes between reads (while a chunk is being sent to a slow client) is noticed
at the next read. Only a read is ever cancelled, never a write to the client.

The streams' timers are entries in one heap per event loop (:class:`_Clock`), under one
event-loop timer for the earliest: an event-loop timer per stream held ~590 B for the
life of each stream (uvloop's handle, its libuv timer, a context copy, the bound
method), an entry ~150 B. A closed stream's entry is dropped lazily: marked, popped
at its time, and the heap rebuilt once most of it is such entries.
"""

from __future__ import annotations

import asyncio
import heapq
from typing import Awaitable, Callable


class _Entry:
    """A watch's time in the clock's heap; ``watch`` ``None`` once withdrawn."""

    __slots__ = ("when", "watch")

    def __init__(self, when: float, watch: ReadDeadline) -> None:
        self.when = when
        self.watch: ReadDeadline | None = watch

    def __lt__(self, other: _Entry) -> bool:
        return self.when < other.when


class _Clock:
    """The timers of the :class:`ReadDeadline` s of one event loop: a heap of entries
    and one event-loop timer for the earliest; at its time every due entry's watch is
    checked (:meth:`ReadDeadline._check`)."""

    __slots__ = ("loop", "heap", "handle", "armed_for", "withdrawn", "firing")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.heap: list[_Entry] = []
        self.handle: asyncio.TimerHandle | None = None
        self.armed_for = float("inf")
        self.withdrawn = 0  # entries in the heap whose watch is gone
        self.firing = False

    def add(self, when: float, watch: ReadDeadline) -> _Entry:
        """``watch._check()`` at event-loop time ``when`` (unless withdrawn first)."""
        entry = _Entry(when, watch)
        heapq.heappush(self.heap, entry)
        if when < self.armed_for and not self.firing:
            self._arm(when)
        return entry

    def withdraw(self, entry: _Entry) -> None:
        """The entry's watch is not checked; the heap is rebuilt once most of it is withdrawn."""
        entry.watch = None
        self.withdrawn += 1
        if self.withdrawn > 64 and self.withdrawn * 2 > len(self.heap):
            self.heap = [e for e in self.heap if e.watch is not None]
            heapq.heapify(self.heap)
            self.withdrawn = 0

    def _arm(self, when: float) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.handle = self.loop.call_at(when, self._fire)
        self.armed_for = when

    def _fire(self) -> None:
        self.handle, self.armed_for, self.firing = None, float("inf"), True
        heap, now = self.heap, self.loop.time()
        try:
            while heap and heap[0].when <= now:
                watch = heapq.heappop(heap).watch
                if watch is None:
                    self.withdrawn -= 1
                else:
                    watch._entry = None
                    watch._check()
        finally:
            self.firing = False
            if heap:
                self._arm(heap[0].when)


_clock: _Clock | None = None


def _clock_of(loop: asyncio.AbstractEventLoop) -> _Clock:
    """The clock of ``loop`` (the process's one loop; another loop gets a new one)."""
    global _clock
    if _clock is None or _clock.loop is not loop:
        _clock = _Clock(loop)
    return _clock


class ReadDeadline:
    """Deadline (event-loop time, ``None``: none) for the reads of the task that
    created it (see the module docstring)."""

    __slots__ = ("deadline", "_loop", "_task", "_clock", "_entry", "_armed_for", "_reading", "_fired")

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._clock = _clock_of(self._loop)
        self._entry: _Entry | None = None  # in the clock's heap
        self._armed_for = 0.0  # when the timer fires
        self._reading = False
        self._fired = False

    async def read(self, read: Callable[[], Awaitable[bytes]]) -> bytes:
        """``await read()``; ``TimeoutError`` instead when the deadline passes first
        (or has passed already, or :meth:`expire` was called during the read).
        Other errors of ``read`` propagate. (The same as :meth:`begin`, the read,
        :meth:`end` and, when it was cancelled, :meth:`timed_out`: how the stream relay
        calls it, without a coroutine of this method held per open stream.)"""
        self.begin()
        try:
            return await read()
        except asyncio.CancelledError:
            if not self.timed_out():
                raise
            raise TimeoutError from None
        finally:
            self._reading = False

    def begin(self) -> None:
        """A read starts now (it may be cancelled until :meth:`end`): ``TimeoutError``
        when the deadline has passed already; else the timer is armed for it."""
        deadline = self.deadline
        if deadline is not None:
            if self._loop.time() >= deadline:
                raise TimeoutError
            if self._entry is None or deadline < self._armed_for:  # none yet, or the deadline came closer
                self._arm(deadline)
        self._reading = True

    def end(self) -> None:
        """The read begun by :meth:`begin` is over (however it ended)."""
        self._reading = False

    def timed_out(self) -> bool:
        """The read was cancelled: whether by the deadline alone (the read timed out);
        ``False``: the cancellation is someone else's (the client left) and propagates."""
        if not self._fired:
            return False
        self._fired = False
        return self._task is None or self._task.uncancel() == 0

    def expire(self) -> None:
        """End the read in progress now (``TimeoutError``), as if the deadline had
        passed; between reads, the next read times out."""
        self.deadline = self._loop.time()
        self._fire()

    def close(self) -> None:
        """Cancel the timer (the stream is over)."""
        if self._entry is not None:
            self._clock.withdraw(self._entry)
            self._entry = None

    def _arm(self, deadline: float) -> None:
        self.close()
        self._entry = self._clock.add(deadline, self)
        self._armed_for = deadline

    def _check(self) -> None:
        """The timer's time came (the clock took the entry out)."""
        deadline = self.deadline
        if deadline is None:
            return
        if self._loop.time() < deadline:  # moved on since the timer was armed
            self._arm(deadline)
        else:
            self._fire()

    def _fire(self) -> None:
        if self._reading and not self._fired and self._task is not None:
            self._fired = True
            self._task.cancel()
