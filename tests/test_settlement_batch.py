"""Settlements of many admissions in one statement (issue 39): rounds, duplicates,
one failing row, once per admission, the same rows as one settlement at a time, and
exact across processes (app.db.batch, app.db.settlements)."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import uuid
from decimal import Decimal

import asyncpg
import pytest

from app.db import commits, settlements, sql
from app.db.batch import Batcher
from app.db.settlements import UsageSettlement
from tests import settlement_rows as seed


async def test_items_arriving_while_a_round_is_in_flight_go_together_in_the_next():
    rounds: list[list[int]] = []
    gate = asyncio.Event()

    async def run(items):
        rounds.append(list(items))
        await gate.wait()
        return [i * 10 for i in items]

    batcher: Batcher[int, int] = Batcher(run, lanes=1, max_items=4)
    calls = [asyncio.create_task(batcher.submit(0))]
    await asyncio.sleep(0.01)  # in flight
    calls += [asyncio.create_task(batcher.submit(i)) for i in range(1, 7)]
    await asyncio.sleep(0.01)
    gate.set()
    assert await asyncio.gather(*calls) == [i * 10 for i in range(7)]
    assert rounds == [[0], [1, 2, 3, 4], [5, 6]]  # the first at once, alone; then at most max_items


async def test_a_failing_item_fails_alone_and_a_lost_connection_fails_its_round():
    async def run(items):
        await asyncio.sleep(0)
        if "lost" in items:
            raise ConnectionResetError("gone")
        if "bad" in items:
            raise ValueError("bad item")
        return [s.upper() for s in items]

    batcher: Batcher[str, str] = Batcher(run, lanes=1)
    first = asyncio.create_task(batcher.submit("a"))
    await asyncio.sleep(0)  # in flight: the rest go in the next round
    rest = [asyncio.create_task(batcher.submit(s)) for s in ("b", "bad", "c")]
    assert await first == "A"
    done = await asyncio.gather(*rest, return_exceptions=True)
    assert done[0] == "B" and done[2] == "C" and isinstance(done[1], ValueError)  # sent again, each alone

    first = asyncio.create_task(batcher.submit("a"))
    await asyncio.sleep(0)
    rest = [asyncio.create_task(batcher.submit(s)) for s in ("b", "lost")]
    await first
    done = await asyncio.gather(*rest, return_exceptions=True)
    assert all(isinstance(d, ConnectionResetError) for d in done)  # the round's outcome: unknown to each


async def _row(pool: asyncpg.Pool, task_id: str) -> tuple[object, ...]:
    t = await pool.fetchrow("SELECT input_tokens, output_tokens, cost_usd, reserved_usd FROM tasks WHERE id = $1",
                            task_id)
    spend = await pool.fetch("SELECT model, requests, input_tokens, output_tokens, cost_usd FROM spend_daily"
                             " WHERE task_id = $1 ORDER BY model", task_id)
    holds = await pool.fetchval("SELECT count(*) FROM reservations WHERE task_id = $1", task_id)
    return tuple(t), tuple(tuple(r) for r in spend), holds


def _one(key: uuid.UUID, task_id: str, i: int, hold: int | None = None, release: str = "0",
         model: str | None = "m") -> UsageSettlement:
    return UsageSettlement(key, task_id, 10 + i, 1 + i, Decimal("0.01") * (i + 1), Decimal(release), hold, model)


async def test_a_batch_writes_what_one_settlement_at_a_time_writes_duplicates_included(pool):
    """Task a three times in one statement (one with a hold), b once; the same
    settlements on twin tasks through settling + ledger_add_usage, one by one."""
    batched, single = {}, {}
    for name in ("a", "b"):
        batched[name], single[name] = await seed.task(pool, "sb", "0.50"), await seed.task(pool, "sb", "0.50")
    plans = [("a", None), ("a", "0.30"), ("a", None), ("b", "0.20")]
    items, alone = [], []
    for i, (name, held) in enumerate(plans):
        model = "m" if i != 2 else None  # not an admitted request's spend
        for tasks, out in ((batched, items), (single, alone)):
            hold = await seed.hold(pool, tasks[name], held) if held else None
            out.append(_one(await seed.admitted(pool, tasks[name]), tasks[name], i, hold, held or "0", model))
    rows = await pool.fetch(sql.statement("settle_batch"), *(
        [getattr(i, f) for i in items] for f in UsageSettlement.__slots__))
    assert [(r["n"], r["locked"], r["first"]) for r in rows] == [(n, True, True) for n in range(1, 5)]
    for s in alone:
        async with commits.settling(pool, s.key) as first:
            assert first
            async with pool.acquire() as conn:
                await conn.execute(sql.statement("ledger_add_usage"), s.task_id, s.input_tokens, s.output_tokens,
                                   s.cost_usd, s.release_usd, s.reservation_id, s.model, None)  # marked above
    for name in ("a", "b"):
        assert await _row(pool, batched[name]) == await _row(pool, single[name])
    task, spend, holds = await _row(pool, batched["a"])
    assert task == (10 + 11 + 12, 1 + 2 + 3, Decimal("0.06"), Decimal("0.20")) and holds == 0
    assert [s[:2] for s in spend] == [("m", 2)]
    settled = await pool.fetchval("SELECT count(*) FROM admissions WHERE key = ANY($1) AND settled_at IS NOT NULL",
                                  [i.key for i in items])
    assert settled == 4


async def test_once_per_admission_and_a_missing_task(pool):
    task_id = await seed.task(pool, "sb")
    key = await seed.admitted(pool, task_id)
    item = _one(key, task_id, 0)
    assert (await settlements.settle_usage(pool, item)).locked is True
    assert (await settlements.settle_usage(pool, item)).locked is True  # landed before: nothing written again
    assert (await _row(pool, task_id))[0][:2] == (10, 1)
    pruned = _one(commits.new_key(), task_id, 0)  # not in the log: written, unmarked
    assert (await settlements.settle_usage(pool, pruned)).locked is True
    assert (await _row(pool, task_id))[0][:2] == (20, 2)
    assert (await settlements.settle_usage(pool, _one(commits.new_key(), "no-such-task", 0))).locked is False
    twice = _one(await seed.admitted(pool, task_id), task_id, 0)  # one admission twice in a round: written once
    rows = await pool.fetch(sql.statement("settle_batch"), *(
        [getattr(i, f) for i in (twice, twice)] for f in UsageSettlement.__slots__))
    assert [(r["locked"], r["first"]) for r in rows] == [(True, True), (True, True)]
    assert (await _row(pool, task_id))[0][:2] == (30, 3)


async def test_one_failing_row_does_not_fail_the_others(pool):
    tasks = [await seed.task(pool, "sb") for _ in range(4)]
    items = [_one(await seed.admitted(pool, t), t, 0) for t in tasks]
    big = 2 ** 63 - 1  # the task's input tokens would pass bigint: that settlement alone fails
    items[2] = UsageSettlement(items[2].key, tasks[2], big, 0, Decimal(0), Decimal(0), None, None)
    await pool.execute("UPDATE tasks SET input_tokens = 1 WHERE id = $1", tasks[2])
    batcher = settlements.batcher(pool)
    rounds = batcher.rounds
    first = asyncio.create_task(settlements.settle_usage(pool, items[0]))  # goes alone; the rest queue
    await asyncio.sleep(0.001)
    others = [asyncio.create_task(settlements.settle_usage(pool, i)) for i in items[1:]]
    assert (await first).locked is True
    done = await asyncio.gather(*others, return_exceptions=True)
    assert done[0].locked is True and done[2].locked is True
    assert isinstance(done[1], asyncpg.NumericValueOutOfRangeError)
    assert batcher.rounds > rounds + 1
    for t, expected in zip(tasks, (10, 10, 1, 10)):
        assert (await _row(pool, t))[0][0] == expected


async def test_items_of_one_key_go_in_separate_rounds_in_order():
    rounds: list[list[str]] = []
    gate = asyncio.Event()

    async def run(items):
        rounds.append(list(items))
        await gate.wait()
        return list(items)

    batcher: Batcher[str, str] = Batcher(run, lanes=1, max_items=3, distinct=lambda s: s[0] if s[0] != "-" else None)
    calls = [asyncio.create_task(batcher.submit("x0"))]
    await asyncio.sleep(0.01)
    calls += [asyncio.create_task(batcher.submit(s)) for s in ("a1", "a2", "-1", "-2", "b1", "a3")]
    await asyncio.sleep(0.01)
    gate.set()
    await asyncio.gather(*calls)
    assert rounds == [["x0"], ["a1", "-1", "-2"], ["a2", "b1"], ["a3"]]  # oldest first, one "a" a round


def _answer(item: UsageSettlement, conversation: str, text: str, repeats: bool = True) -> UsageSettlement:
    return dataclasses.replace(item, conversation_key=conversation, text_sha256=text, answer_repeats=repeats)


async def test_judged_answers_in_a_round_write_what_ledger_add_answer_writes(pool):
    """Answers on twin tasks: in one round per step (two conversations of a task and one
    of another, with plain usage beside them) and one statement at a time through
    ledger_add_answer; the same counters, spend and runs of identical answers."""
    batched = [await seed.task(pool, "sa") for _ in range(2)]
    single = [await seed.task(pool, "sa") for _ in range(2)]
    steps = [[(0, "c1", "h1", True), (0, "c2", "h9", True), (1, "c1", "h1", True), (0, None, None, False)],
             [(0, "c1", "h1", True), (0, "c2", "h8", True), (1, "c1", "h1", False)],
             [(0, "c1", "h1", True), (1, "c1", "h2", True)]]
    await pool.execute("UPDATE tasks SET status = 'stopped' WHERE id = $1", batched[1])
    await pool.execute("UPDATE tasks SET status = 'stopped' WHERE id = $1", single[1])
    answered: list[tuple[object, ...]] = []
    for step in steps:
        items = []
        for i, (t, conversation, text, repeats) in enumerate(step):
            for tasks in (batched, single):
                item = _one(await seed.admitted(pool, tasks[t]), tasks[t], i)
                item = _answer(item, conversation, text, repeats) if conversation else item
                if tasks is batched:
                    items.append(item)
                    continue
                args = (item.task_id, item.input_tokens, item.output_tokens, item.cost_usd, item.release_usd,
                        item.reservation_id)
                if conversation:
                    row = await pool.fetchrow(sql.statement("ledger_add_answer"), *args, conversation, text, repeats,
                                              item.model, item.key)
                    answered.append((row["status"], row["answer_streak"]))
                else:
                    await pool.execute(sql.statement("ledger_add_usage"), *args, item.model, item.key)
        rows = await pool.fetch(sql.statement("settle_batch"), *(
            [getattr(i, f) for i in items] for f in UsageSettlement.__slots__))
        assert all(r["locked"] and r["first"] for r in rows)
        assert [(r["status"], r["answer_streak"]) for r in rows if r["answer_streak"] is not None] == answered
        assert all(r["loop_guard"] == {} for r in rows if r["answer_streak"] is not None)
        assert [r["status"] for r in rows if r["answer_streak"] is None] == [None] * (len(rows) - len(answered))
        answered.clear()
    for b, s in zip(batched, single):
        assert await _row(pool, b) == await _row(pool, s)
        conversations = "SELECT conversation_key, response_hash, response_streak FROM conversations" \
                        " WHERE task_id = $1 ORDER BY conversation_key"
        assert [tuple(r) for r in await pool.fetch(conversations, b)] == \
               [tuple(r) for r in await pool.fetch(conversations, s)]
    streaks = {r[0]: r[2] for r in await pool.fetch(conversations, batched[0])}
    assert streaks == {"c1": 3, "c2": 1}


async def test_two_answers_of_one_conversation_in_flight_are_both_counted(pool):
    """Settled at once, the second answer of a conversation waits for the next round (a
    statement may update its row once): the run counts both."""
    task_id = await seed.task(pool, "sa")
    conversations = [f"c{n % 3}" for n in range(9)]  # three answers of each of three, in turn
    items = [_answer(_one(await seed.admitted(pool, task_id), task_id, i), c, "h") for i, c in enumerate(conversations)]
    batcher = settlements.batcher(pool)
    sent, rounds = batcher.items, batcher.rounds
    done = await asyncio.gather(*(settlements.settle_usage(pool, i) for i in items))
    assert batcher.items - sent == 9  # none in a round that failed and was sent again
    assert batcher.rounds - rounds < 9  # answers of different conversations went together
    for c in ("c0", "c1", "c2"):
        assert sorted(d.answer_streak for d, k in zip(done, conversations) if k == c) == [1, 2, 3]
    assert all(d.status == "active" and d.loop_guard == {} for d in done)


_PROCESS = """
import asyncio, sys, uuid
from decimal import Decimal
from app.db import commits, settlements
from app.db.pool import create_pool
from app.settings import Settings

async def main(url, tasks, n):
    pool = await create_pool(url, Settings(database_url=url))
    async def one(i):
        task_id = tasks[i % len(tasks)]
        key = commits.new_key()
        await pool.execute("INSERT INTO admissions (key, task_id) VALUES ($1, $2)", key, task_id)
        item = settlements.UsageSettlement(key, task_id, 3, 2, Decimal("0.001"), Decimal(0), None, "m")
        assert (await settlements.settle_usage(pool, item)).locked
    await asyncio.gather(*(one(i) for i in range(n)))
    print(settlements.batcher(pool).rounds, settlements.batcher(pool).items)
    await pool.close()

asyncio.run(main(sys.argv[1], sys.argv[2].split(","), int(sys.argv[3])))
"""


async def test_exact_across_processes(pool, database_url):
    """Two processes settle 300 responses each on the same five tasks at once: every
    token counted once, each task's spend row counts every request, no deadlock."""
    tasks = [await seed.task(pool, "sb") for _ in range(5)]
    procs = [await asyncio.create_subprocess_exec(sys.executable, "-c", _PROCESS, database_url, ",".join(tasks), "300",
                                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(2)]
    outs = [await p.communicate() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1].decode()[-2000:] for o in outs]
    rounds, items = (sum(int(o[0].split()[k]) for o in outs) for k in (0, 1))
    assert items == 600 and rounds < items  # batched
    for t in tasks:
        task, spend, _ = await _row(pool, t)
        assert task[:3] == (360, 240, Decimal("0.120"))
        assert spend == (("m", 120, 360, 240, Decimal("0.120")),)


@pytest.fixture(autouse=True)
def _no_stale_batchers():
    yield
    settlements._batchers.clear()


async def test_a_round_is_planned_once_per_session_and_finds_its_rows_by_key(pool, database_url):
    """The round's statement runs the plan PostgreSQL made for the session (generic: the
    arrays appear as parameters, not as the round's values), also after the five rounds
    PostgreSQL plans for their values first; re-planned each round it cost more than it
    ran (migration 0023). That plan reads tasks and admissions through their keys, at 200
    tasks too, where a plan for ten rows would read the whole table."""
    await pool.execute("INSERT INTO tasks (id, token_hash, request_limit)"
                       " SELECT 'plan-' || n, 'plan-' || n, 100 FROM generate_series(1, 200) AS n")
    await pool.execute("ANALYZE tasks")
    notes: list[str] = []
    conn = await asyncpg.connect(database_url.replace("postgresql+asyncpg://", "postgresql://", 1))
    try:
        await conn.execute("LOAD 'auto_explain'")
        await conn.execute("SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on;"
                           " SET auto_explain.log_level = notice")
        conn.add_log_listener(lambda _conn, message: notes.append(message.message))
        for n in range(1, 8):
            task_id = f"plan-{n}"
            item = _one(await seed.admitted(pool, task_id), task_id, n, None, "0", "m")
            notes.clear()
            rows = await conn.fetch(sql.statement("settle_batch"), *(
                [getattr(item, f)] for f in UsageSettlement.__slots__))
            assert [(r["locked"], r["first"]) for r in rows] == [(True, True)]
    finally:
        await conn.close()
    plan = "\n".join(note for note in notes if "Query Text: WITH input AS" in note)
    assert plan, notes
    assert "= ANY ($" in plan and "plan-7" not in plan, plan  # generic
    config = await pool.fetchval("SELECT proconfig FROM pg_proc WHERE proname = 'taskgate_settle_batch'")
    assert "plan_cache_mode=force_generic_plan" in config, config  # not left to the plan cache's guess
    assert "Seq Scan on tasks" not in plan and "Seq Scan on admissions" not in plan, plan
