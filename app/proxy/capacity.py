"""Upstream capacity, honest: a request takes one of the process's upstream connection
slots *before* admission, or is refused uncounted.

The transport has ``upstream_max_connections`` connections per process
(:mod:`app.proxy.transport`); a request beyond them used to be admitted, counted, then
wait without response headers. Now each relayed request first takes a slot
(:meth:`UpstreamSlots.take`), waiting at most ``upstream_slot_wait_s``; when none frees
in time it is answered 503 ``upstream_busy`` with ``retry-after`` and nothing was
forwarded or counted. The slot is given back as soon as the relay is done with upstream
(:meth:`UpstreamSlots.releasing` wraps the relay's ``on_finish``), or at once when
admission refuses the request. With as many slots as connections, a request holding a
slot never waits for a connection.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from app.errors import GatewayError

T = TypeVar("T")


def busy(retry_after_s: float) -> GatewayError:
    """503 ``upstream_busy``: every upstream connection of this process is in use."""
    return GatewayError(503, "gateway_unavailable", "upstream_busy",
                        "Every upstream connection of this gateway is in use; retry shortly. Nothing was "
                        "forwarded or counted.", {"retry-after": str(max(1, math.ceil(retry_after_s)))})


class Slot:
    """One taken slot; :meth:`release` is idempotent."""

    __slots__ = ("_slots", "_held")

    def __init__(self, slots: UpstreamSlots) -> None:
        self._slots, self._held = slots, True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._slots._semaphore.release()

    async def around(self, step: Awaitable[T]) -> T:
        """Await ``step`` (admission); give the slot back if it raises (a refusal)."""
        try:
            return await step
        except BaseException:
            self.release()
            raise

    def releasing(self, on_finish: Callable[[T], Awaitable[None]]) -> Callable[[T], Awaitable[None]]:
        """``on_finish`` that first gives the slot back (the relay is done with upstream)."""
        return _Releasing(self, on_finish)


class _Releasing(Generic[T]):
    """:meth:`Slot.releasing`'s callable: an object of two slots rather than a closure
    (function, cell and tuple: ~200 B held per open stream)."""

    __slots__ = ("_slot", "_on_finish")

    def __init__(self, slot: Slot, on_finish: Callable[[T], Awaitable[None]]) -> None:
        self._slot, self._on_finish = slot, on_finish

    async def __call__(self, outcome: T) -> None:
        self._slot.release()
        await self._on_finish(outcome)


class UpstreamSlots:
    """``limit`` slots; :meth:`take` waits up to ``wait_s`` seconds for one."""

    def __init__(self, limit: int, wait_s: float) -> None:
        self.limit, self.wait_s = limit, wait_s
        self._semaphore = asyncio.Semaphore(limit)

    async def take(self) -> Slot:
        """A slot, or raise 503 :func:`busy` after ``wait_s`` seconds without one."""
        if not self._semaphore.locked():  # one is free: taken at once, no timer to arm and cancel
            await self._semaphore.acquire()
            return Slot(self)
        try:
            async with asyncio.timeout(self.wait_s):
                await self._semaphore.acquire()
        except TimeoutError:
            raise busy(self.wait_s) from None
        return Slot(self)
