"""The stream watchdog's clock (app.proxy.read_deadline): one timer per stream, reads
cancelled when the deadline passes, never anything else. Short deadlines, generous
bounds."""

from __future__ import annotations

import asyncio

import pytest

from app.proxy.read_deadline import ReadDeadline


def _never() -> asyncio.Future:
    return asyncio.get_running_loop().create_future()


async def test_a_silent_read_times_out_at_the_deadline() -> None:
    loop = asyncio.get_running_loop()
    watch = ReadDeadline(loop.time() + 0.05)
    with pytest.raises(TimeoutError):
        await watch.read(_never)
    assert asyncio.current_task().cancelling() == 0  # the cancellation was ours, and undone


async def test_moving_the_deadline_during_a_read_keeps_it_alive() -> None:
    loop = asyncio.get_running_loop()
    watch = ReadDeadline(loop.time() + 0.05)
    data = loop.create_future()
    loop.call_later(0.02, lambda: setattr(watch, "deadline", loop.time() + 0.3))
    loop.call_later(0.15, data.set_result, b"late but in time")
    assert await watch.read(lambda: data) == b"late but in time"
    watch.close()


async def test_a_deadline_passed_between_reads_times_out_the_next_one_without_waiting() -> None:
    loop = asyncio.get_running_loop()
    watch = ReadDeadline(loop.time() + 0.01)
    await asyncio.sleep(0.05)  # e.g. sending to a slow client: nothing is cancelled
    with pytest.raises(TimeoutError):
        await watch.read(_never)


async def test_expire_ends_the_read_in_progress() -> None:
    watch = ReadDeadline(None)
    asyncio.get_running_loop().call_later(0.02, watch.expire)
    with pytest.raises(TimeoutError):
        await watch.read(_never)


async def test_a_cancellation_from_elsewhere_is_not_taken_for_a_timeout() -> None:
    async def reader() -> bytes:
        watch = ReadDeadline(asyncio.get_running_loop().time() + 60)
        return await watch.read(_never)

    task = asyncio.ensure_future(reader())
    await asyncio.sleep(0.01)
    task.cancel()  # the client left
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_read_errors_pass_through() -> None:
    async def broken() -> bytes:
        raise ConnectionResetError

    with pytest.raises(ConnectionResetError):
        await ReadDeadline(None).read(broken)


async def test_a_deadline_brought_closer_between_reads_is_kept() -> None:
    """The terminal event's close grace is shorter than the idle timeout before it."""
    loop = asyncio.get_running_loop()
    watch = ReadDeadline(loop.time() + 60)
    data = loop.create_future()
    loop.call_soon(data.set_result, b"terminal event")
    assert await watch.read(lambda: data) == b"terminal event"
    watch.deadline = loop.time() + 0.05
    started = loop.time()
    with pytest.raises(TimeoutError):
        await watch.read(_never)
    assert loop.time() - started < 5


async def test_the_streams_of_a_loop_share_one_timer_each_read_cut_at_its_own_deadline() -> None:
    from app.proxy import read_deadline

    loop = asyncio.get_running_loop()
    ended: dict[int, float] = {}
    start = loop.time()
    watches: list[ReadDeadline] = []

    async def one(i: int) -> None:
        watch = ReadDeadline(start + 0.05 + 0.01 * (i % 5))
        watches.append(watch)
        try:
            await watch.read(_never)
        except TimeoutError:
            ended[i] = loop.time() - start
        finally:
            watch.close()

    await asyncio.gather(*(one(i) for i in range(50)))
    assert sorted(ended) == list(range(50))
    for i, at in ended.items():
        assert 0.05 + 0.01 * (i % 5) <= at + 0.002 < 0.5  # not before its own deadline
    clock = read_deadline._clock_of(loop)
    assert not any(e.watch in watches for e in clock.heap)  # nothing of theirs left armed


async def test_closed_watches_are_never_checked_and_leave_the_heap() -> None:
    from app.proxy import read_deadline

    loop = asyncio.get_running_loop()
    checked: list[int] = []

    class Counting(ReadDeadline):
        __slots__ = ()

        def _check(self) -> None:
            checked.append(1)
            super()._check()

    clock = read_deadline._clock_of(loop)
    before = len(clock.heap)
    watches = [Counting(loop.time() + 0.3) for _ in range(300)]
    for w in watches:
        w.begin()  # armed
        w.end()
    assert len(clock.heap) == before + 300 and clock.handle is not None  # one timer for all
    for w in watches:
        w.close()
    assert len(clock.heap) < 300  # rebuilt once most of it was withdrawn
    await asyncio.sleep(0.4)  # past their time
    assert checked == []
