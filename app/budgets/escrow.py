"""Escrow leases of budget windows (issue 24 §2: no hot row), in PostgreSQL.

An admission of a task with a budget (and no dollar ceiling anywhere in its chain) does
not lock its budgets' window rows. The gateway process holds **leases**: a
``budget_leases`` row per *holder* and budget window, ``granted`` requests of the
window's allowance and ``spent`` of them. A holder is one of the process's lease slots
(:func:`slot`: ``host:pid:random:n``); an admission checks a free slot out for its
transaction, so no two admissions of a process ever wait on one lease row, and the
process needs about as many slots as admissions it runs at once (its pool size). The
admission spends one request from the slot's lease of every window of the chain
(:func:`spend`), in its transaction, under the task's row lock; the window rows are only
read. When a lease cannot pay (none yet, used up, expired, the window rolled over, the
limit changed, or the window's tokens ran out) the admission rolls back and the gateway
**takes** (:func:`take`, its own short transaction on the same connection): it locks the
chain's windows root first, decides by :mod:`app.budgets.slices` (grant a slice of the
free remainder; when nothing is free, reclaim what every lease holds unspent; else
exhausted) and folds what the slot's lease spent back into the window.

Durability: a take commits without waiting for the disk (it holds the window locks
only for its few statements). That is safe because nothing goes upstream on a lease
before an admission that spent it commits, durably, and WAL is flushed in order: an
admission's commit makes every take before it durable too; a take lost in a crash
takes its lease row and its window's ``leased_requests`` with it, consistently.

Lock order, everywhere: task row, then budget windows by ``(depth, budget_id)``
(root first), then lease rows, root first too. Admission spends lease rows under the
task lock and never waits for a window; takes, reclaims and the sweep lock windows
before leases. Each statement that locks several lease rows locks them root first
(``ORDER BY depth … FOR UPDATE``), not in whatever order its plan visits them: an
admission spending a project's lease first would wait for the team's lease that a take
reclaiming both windows holds, and the take for the project's lease (``deadlock
detected``).

A gateway killed with ``kill -9`` loses nothing a budget needs: its leases are rows,
reclaimed by the first take that finds the window short, and folded back by the sweep
(:func:`sweep`, every ``TASKGATE_RESERVATION_SWEEP_S``, a job of every process) once past ``expires_at``
(``TASKGATE_BUDGET_LEASE_S`` after the slot's last take). A spent request is in
``spent`` (durable with its admission), so nothing is ever admitted twice.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import socket
from collections.abc import Iterator, Sequence
from datetime import datetime
from decimal import Decimal

import asyncpg

from app.admission.ceiling import Decision
from app.budgets import room, slices, windows
from app.budgets.rows import BudgetRow, WindowRow, window_row
from app.budgets.rules import Verdict, chain_verdict, window_verdict
from app.db import sql
from app.db.pool import relaxed

#: A budget's window: ``(budget_id, window_start)``.
WindowKey = tuple[str, datetime]

# The statements: app/db/sql/budget_leases.sql (each written out whole; its header says
# what they share: when a lease can pay, the room it returns, the counted request).
#: Spend one request from the holder's lease of each budget of the chain that can pay.
SPEND = sql.statement("lease_spend")
#: Create (if missing) and lock a budget's window.
LOCK_WINDOW = sql.statement("lease_lock_window")
_RECLAIM = sql.statement("lease_reclaim")
_GRANT = sql.statement("lease_grant")
_LOCK_EXPIRED = sql.statement("lease_lock_expired")
_FOLD_EXPIRED = sql.statement("lease_fold_expired")
#: The requests the open leases of window ``w`` (a ``budget_windows`` alias) spent: part of
#: what it admitted, not folded into ``w.admitted_requests`` yet (a SQL expression, for the
#: admin API's window statements; written out in ``budget_thresholds_current``).
LEASE_SPENT = ("(SELECT COALESCE(sum(l.spent), 0)::bigint FROM budget_leases l"
               " WHERE l.budget_id = w.budget_id AND l.window_start = w.window_start)")
#: The fast path of a task with a budget (:func:`app.budgets.fast_path.fast_admit`): the
#: request counted on the task and paid from the holder's lease of each budget of its
#: chain in one statement, which aborts (nothing written) when a lease cannot pay. By
#: token and by id, for a chain of one budget and for a longer one.
FAST_BY_TOKEN = sql.statement("lease_fast_by_token")
FAST_BY_ID = sql.statement("lease_fast_by_id")
FAST_ONE_BY_TOKEN = sql.statement("lease_fast_one_by_token")
FAST_ONE_BY_ID = sql.statement("lease_fast_one_by_id")
#: The fast path of a task this process has not seen yet, with or without a budget: its
#: chain read from the counted task (returned as ``lease_chain``, for :func:`remember`).
FIRST_BY_TOKEN = sql.statement("lease_first_by_token")
FIRST_BY_ID = sql.statement("lease_first_by_id")
#: Lease rows examined per sweep.
SWEEP_BATCH = 500


_free_slots: list[int] = []
_new_slots = itertools.count()
_process: tuple[int, str] | None = None


def _prefix() -> str:
    """``host:pid:random``: this process's holder names (new after a fork)."""
    global _process
    if _process is None or _process[0] != os.getpid():
        _process = (os.getpid(), f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}")
        _free_slots.clear()
    return _process[1]


@contextlib.contextmanager
def slot() -> Iterator[str]:
    """Check one of this process's lease slots out (a holder name) for one admission;
    back when the block ends (after its transaction). Never waits."""
    prefix = _prefix()
    n = _free_slots.pop() if _free_slots else next(_new_slots)
    try:
        yield f"{prefix}:{n}"
    finally:
        _free_slots.append(n)


class NeedsLease(Exception):
    """A lease of the holder cannot pay for a request of ``task_id``: the admission
    transaction rolls back, the gateway takes (:func:`take`) and admits again."""

    def __init__(self, holder: str, task_id: str, budgets: Sequence[BudgetRow], at: datetime) -> None:
        super().__init__(task_id)
        self.holder, self.task_id, self.budgets, self.at = holder, task_id, budgets, at


async def spend(conn: asyncpg.Connection, holder: str, task_id: str, budgets: Sequence[BudgetRow],
                at: datetime) -> room.Room | None:
    """Spend one request (of ``task_id``) from the holder's lease of each window of the
    chain; the chain's room after it (:mod:`app.budgets.room`). Raises :class:`NeedsLease`
    when one cannot pay (the caller's transaction must roll back: the leases that did pay
    were charged in it)."""
    paid = await conn.fetch(SPEND, holder, at, [b["id"] for b in budgets])
    if len(paid) != len(budgets):
        raise NeedsLease(holder, task_id, budgets, at)
    return room.of_spend_rows(paid)


_chains: dict[str, tuple[str, ...]] = {}
#: A budget and its ancestors, root first.
CHAIN = sql.statement("budget_chain")


def budgeted(key: str) -> bool | None:
    """Whether the task of ``key`` (its token hash or id) was last seen with a budget
    (``None``: not seen by this process). A hint for which fast path to try first."""
    chain = _chains.get(key)
    return None if chain is None else bool(chain)


def chain_of(key: str) -> tuple[str, ...] | None:
    """The budget chain last noted for the task of ``key`` (:func:`remember`), or ``None``."""
    return _chains.get(key)


def remember(key: str, chain: Sequence[str]) -> None:
    """Note the budget chain (ids, root first; empty: none) of the task of ``key``. A
    task's budget and a budget's parent never change, so this is a hint that stays
    true; the fast path re-checks everything it relies on."""
    if len(_chains) > 100_000:
        _chains.clear()
    _chains[key] = tuple(chain)


async def lock_windows(conn: asyncpg.Connection, budgets: Sequence[BudgetRow],
                       at: datetime) -> tuple[list[WindowKey], list[WindowRow]]:
    """Create (if missing) and lock the current window of every budget of the chain,
    root first; their keys and rows."""
    keys: list[WindowKey] = []
    rows: list[WindowRow] = []
    for budget in budgets:
        span = windows.span(budget["window"], budget["timezone"], at)
        rows.append(window_row(await conn.fetchrow(LOCK_WINDOW, budget["id"], span.start, span.end)))
        keys.append((budget["id"], span.start))
    return keys, rows


async def decide(conn: asyncpg.Connection, budgets: Sequence[BudgetRow], keys: Sequence[WindowKey],
                 rows: list[WindowRow], worst_usd: Decimal) -> Verdict:
    """The chain's verdict on locked windows, counting leased requests as admitted; a
    window with nothing free while leases hold requests reclaims them first
    (:func:`app.budgets.slices.needs_reclaim`). Updates ``rows`` in place."""
    for i, budget in enumerate(budgets):
        if slices.needs_reclaim(slices.free_requests(budget, rows[i]), rows[i]["leased_requests"]):
            rows[i] = window_row(await conn.fetchrow(_RECLAIM, *keys[i]))
    return chain_verdict([window_verdict(b, slices.committed_view(r), worst_usd) for b, r in zip(budgets, rows)])


async def take(conn: asyncpg.Connection, need: NeedsLease, lease_s: float,
               cap: int) -> tuple[Verdict, WindowKey | None]:
    """Take a lease slice of every window of ``need``'s chain in one short transaction
    (committed without waiting for the disk; see the module's notes). Returns the
    chain's verdict (admit, or exhausted) and, when refused, the refusing window."""
    async with conn.transaction():
        await relaxed(conn)
        keys, rows = await lock_windows(conn, need.budgets, need.at)
        verdict = await decide(conn, need.budgets, keys, rows, Decimal(0))
        if verdict.decision is not Decision.ADMIT:
            return verdict, next(k for k in keys if k[0] == verdict.budget_id)
        size = min(slices.slice_size(slices.free_requests(b, r), cap) for b, r in zip(need.budgets, rows))
        for budget, (budget_id, start), row in zip(need.budgets, keys, rows):
            await conn.execute(_GRANT, need.holder, budget_id, start, row["window_end"], size,
                               budget["request_limit"], lease_s)
        return verdict, None


async def sweep(pool: asyncpg.Pool) -> int:
    """Fold leases past their expiry back into their windows (one batch, one
    transaction, windows locked root first); the number of leases folded."""
    async with pool.acquire() as conn, conn.transaction():
        await relaxed(conn)
        locked = await conn.fetch(_LOCK_EXPIRED, SWEEP_BATCH)
        if not locked:
            return 0
        folded: int = await conn.fetchval(_FOLD_EXPIRED, [r["budget_id"] for r in locked],
                                          [r["window_start"] for r in locked])
        return folded

