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
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable


class ReadDeadline:
    """Deadline (event-loop time, ``None``: none) for the reads of the task that
    created it (see the module docstring)."""

    __slots__ = ("deadline", "_loop", "_task", "_handle", "_armed_for", "_reading", "_fired")

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        self._handle: asyncio.TimerHandle | None = None
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
            if self._handle is None or deadline < self._armed_for:  # none yet, or the deadline came closer
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
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _arm(self, deadline: float) -> None:
        self.close()
        self._handle = self._loop.call_at(deadline, self._check)
        self._armed_for = deadline

    def _check(self) -> None:
        self._handle = None
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
