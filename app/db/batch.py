"""Many callers' statements sent as one (issue 39): a round trip and a commit shared.

A :class:`Batcher` takes items from concurrent callers and hands them to its ``run``
function in rounds: an item that arrives while a lane is free goes at once, alone (no
wait added when the gateway is idle); items that arrive while every lane has a
statement in flight queue, and the next lane to finish sends them together (at most
``max_items``). ``run`` sends one statement for the whole round (arrays in, one result
per item out, in order). With ``distinct``, a round holds at most one item of each key it
gives (``None``: no key): a later item of a key already in the round waits for the next
(a statement may not update one row twice).

Failure, as each caller's own statement would have failed: a round whose statement
raises a lost-connection error (:func:`app.db.errors.database_unreachable`) fails every
caller of the round with it (each one's own statement was on that connection too: its
outcome unknown, the caller's retry decides); any other error of a round of several
items sends each item again alone, so only the item that fails gets its error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from app.db.errors import database_unreachable

Item = TypeVar("Item")
Result = TypeVar("Result")


class Batcher(Generic[Item, Result]):
    """Rounds of items into one call of ``run`` (``lanes`` rounds in flight at most,
    ``max_items`` items each, one of each ``distinct`` key). Belongs to the event loop it
    is first used on."""

    def __init__(self, run: Callable[[Sequence[Item]], Awaitable[Sequence[Result]]], *, lanes: int = 2,
                 max_items: int = 64, distinct: Callable[[Item], Hashable | None] | None = None) -> None:
        self._run, self._lanes, self._max, self._distinct = run, lanes, max_items, distinct
        self._pending: list[tuple[Item, asyncio.Future[Result]]] = []
        self._running = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: Rounds sent and items sent in them (for the figures: items ÷ rounds).
        self.rounds = 0
        self.items = 0

    async def submit(self, item: Item) -> Result:
        """``item``'s result from ``run`` (in a round with whatever else is queued);
        raises what its round raised (see the module docstring)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Result] = loop.create_future()
        future.add_done_callback(_retrieved)  # a cancelled caller's error is not reported as lost
        self._pending.append((item, future))
        if self._running < self._lanes:
            self._running += 1
            task = loop.create_task(self._drain())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(future)  # a cancelled caller leaves its item to its round

    async def _drain(self) -> None:
        try:
            while self._pending:
                await self._send(self._take())
        finally:
            self._running -= 1

    def _take(self) -> list[tuple[Item, asyncio.Future[Result]]]:
        """The next round, out of the queue: the oldest items, at most ``max_items``, one
        of each ``distinct`` key."""
        if self._distinct is None:
            round_ = self._pending[:self._max]
            del self._pending[:self._max]
            return round_
        round_, rest, keys = [], [], set()
        for entry in self._pending:
            key = self._distinct(entry[0])
            if len(round_) < self._max and (key is None or key not in keys):
                round_.append(entry)
                keys.add(key)
            else:
                rest.append(entry)
        self._pending = rest
        return round_

    async def _send(self, round_: list[tuple[Item, asyncio.Future[Result]]]) -> None:
        self.rounds += 1
        self.items += len(round_)
        try:
            results = await self._run([item for item, _ in round_])
            if len(results) != len(round_):
                raise RuntimeError(f"a batch of {len(round_)} items returned {len(results)} results")
        except BaseException as exc:
            if len(round_) > 1 and isinstance(exc, Exception) and not database_unreachable(exc):
                for one in round_:  # each alone: only the failing item gets its error
                    await self._send([one])
                return
            for _, future in round_:
                if not future.done():
                    future.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        for (_, future), result in zip(round_, results):
            if not future.done():
                future.set_result(result)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
