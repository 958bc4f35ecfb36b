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
from app.admission.limits import ADMISSIBLE, COUNT_REQUEST
from app.budgets import room, slices, windows
from app.budgets.rows import BudgetRow, WindowRow, window_row
from app.budgets.rules import Verdict, chain_verdict, window_verdict
from app.db.pool import relaxed

#: A budget's window: ``(budget_id, window_start)``.
WindowKey = tuple[str, datetime]

#: The window of lease ``l`` is still under the token limit of its budget ``b`` (SQL):
#: tokens are reported after the fact, so a token limit admits while the window is under
#: it. The window row is read only for a budget with a token limit.
_UNDER_TOKENS = ("(b.token_limit IS NULL OR (SELECT w.input_tokens + w.output_tokens FROM budget_windows w"
                 " WHERE w.budget_id = l.budget_id AND w.window_start = l.window_start) < b.token_limit)")
#: Lease ``l`` of budget ``b`` can pay one request: some of it unspent, unexpired, granted under the budget's
#: request limit, no dollars, model limits or rates (the locked path decides those), not paused (read here,
#: never cached: :mod:`app.budgets.pause`), its window under its token limit (SQL).
_PAYS = ("l.spent < l.granted AND l.expires_at > now() AND l.request_limit IS NOT DISTINCT FROM b.request_limit"
         " AND b.cost_limit_usd IS NULL AND b.paused_at IS NULL AND b.model_limits IS NULL"
         " AND b.requests_per_minute IS NULL AND b.tokens_per_minute IS NULL AND " + _UNDER_TOKENS)
#: Spend one request from the holder's lease of each budget ``$3`` whose window holds
#: ``$2`` (the gateway's window clock) and that can pay (:data:`_PAYS`), locked root
#: first. The window rows are read, never locked.
SPEND = """
    WITH mine AS (
        SELECT l.budget_id, l.window_start FROM budget_leases l JOIN budgets b ON b.id = l.budget_id
         WHERE l.holder = $1 AND l.budget_id = ANY($3::text[])
           AND l.window_start <= $2 AND (l.window_end IS NULL OR $2 < l.window_end)
           AND l.expires_at > now()
         ORDER BY b.depth FOR UPDATE OF l)
    UPDATE budget_leases l SET spent = l.spent + 1
      FROM mine, budgets b, budget_windows w
     WHERE l.holder = $1 AND l.budget_id = mine.budget_id AND l.window_start = mine.window_start
       AND b.id = l.budget_id AND w.budget_id = l.budget_id AND w.window_start = l.window_start AND {PAYS}
    RETURNING l.budget_id{ROOM}
""".format(PAYS=_PAYS, ROOM=room.ROOM_RETURNING)
LOCK_WINDOW = (
    "INSERT INTO budget_windows (budget_id, window_start, window_end) VALUES ($1, $2, $3)"
    " ON CONFLICT (budget_id, window_start) DO UPDATE SET window_end = EXCLUDED.window_end RETURNING *"
)
#: Cut every lease of a window to what it spent (after locking them: a lease being spent
#: right now is waited for); the window's ``leased_requests`` loses what they held unspent.
_RECLAIM = """
    WITH cut AS (
        SELECT holder, granted - spent AS back FROM budget_leases
         WHERE budget_id = $1 AND window_start = $2 AND granted > spent FOR UPDATE),
    done AS (
        UPDATE budget_leases l SET granted = l.spent FROM cut
         WHERE l.holder = cut.holder AND l.budget_id = $1 AND l.window_start = $2 RETURNING cut.back)
    UPDATE budget_windows SET leased_requests = leased_requests - COALESCE((SELECT sum(back) FROM done), 0)
     WHERE budget_id = $1 AND window_start = $2 RETURNING *
"""
#: The task's lease of one window gets ``$5`` more requests; what it spent so far is
#: folded into the window's ``admitted_requests`` (and out of its ``leased_requests``).
_GRANT = """
    WITH old AS (
        SELECT spent FROM budget_leases WHERE holder = $1 AND budget_id = $2 AND window_start = $3 FOR UPDATE),
    lease AS (
        INSERT INTO budget_leases AS l (holder, budget_id, window_start, window_end, granted, spent,
                                        request_limit, expires_at)
        VALUES ($1, $2, $3, $4, $5, 0, $6, now() + $7 * interval '1 second')
        ON CONFLICT (holder, budget_id, window_start) DO UPDATE
           SET granted = l.granted - l.spent + EXCLUDED.granted, spent = 0,
               request_limit = EXCLUDED.request_limit, expires_at = EXCLUDED.expires_at
        RETURNING 1)
    UPDATE budget_windows
       SET admitted_requests = admitted_requests + COALESCE((SELECT spent FROM old), 0),
           leased_requests = leased_requests - COALESCE((SELECT spent FROM old), 0) + $5
     WHERE budget_id = $2 AND window_start = $3
"""
#: The windows holding expired leases, locked in the one order (root first).
_LOCK_EXPIRED = """
    SELECT w.budget_id, w.window_start FROM budget_windows w JOIN budgets b ON b.id = w.budget_id
     WHERE (w.budget_id, w.window_start) IN (
           SELECT budget_id, window_start FROM budget_leases WHERE expires_at < now() LIMIT $1)
     ORDER BY b.depth, w.budget_id, w.window_start FOR UPDATE OF w
"""
_FOLD_EXPIRED = """
    WITH doomed AS (
        SELECT l.holder, l.budget_id, l.window_start
          FROM budget_leases l JOIN budgets b ON b.id = l.budget_id
               JOIN unnest($1::text[], $2::timestamptz[]) AS k(budget_id, window_start)
               ON l.budget_id = k.budget_id AND l.window_start = k.window_start
         WHERE l.expires_at < now() ORDER BY b.depth, l.budget_id, l.holder FOR UPDATE OF l),
    gone AS (
        DELETE FROM budget_leases l USING doomed d
         WHERE l.holder = d.holder AND l.budget_id = d.budget_id AND l.window_start = d.window_start
           AND l.expires_at < now()
        RETURNING l.budget_id, l.window_start, l.granted, l.spent),
    per_window AS (
        SELECT budget_id, window_start, sum(granted) AS granted, sum(spent) AS spent, count(*) AS n
          FROM gone GROUP BY budget_id, window_start),
    folded AS (
        UPDATE budget_windows w SET admitted_requests = w.admitted_requests + p.spent,
               leased_requests = w.leased_requests - p.granted
          FROM per_window p WHERE w.budget_id = p.budget_id AND w.window_start = p.window_start RETURNING p.n)
    SELECT COALESCE(sum(n), 0) FROM folded
"""
#: The requests the open leases of window ``w`` (a ``budget_windows`` alias) spent: part of
#: what it admitted, not folded into ``w.admitted_requests`` yet (a SQL expression).
LEASE_SPENT = ("(SELECT COALESCE(sum(l.spent), 0)::bigint FROM budget_leases l"
               " WHERE l.budget_id = w.budget_id AND l.window_start = w.window_start)")
#: The fast path of a task with a budget (one statement, its own transaction): the request
#: counted on the task under the fast path's conditions (:data:`FAST_ADMIT
#: <app.admission.admission.FAST_ADMIT>`, but with the budget ``$4`` whose chain is
#: ``$5``, root first), and one request spent from the holder's lease of each budget of
#: the chain as :data:`SPEND` does (for chains without a dollar ceiling, each window under
#: its budget's token limit; each budget of ``$5`` must still have the one before it as
#: its parent). When the task was counted
#: but a lease could not pay, the statement aborts (``taskgate_abort``, migration 0010):
#: nothing is written, and the locked path decides. So does a task whose budget is not
#: ``$4``: the budget is checked on the counted row, not in the ``UPDATE``'s ``WHERE``,
#: where the planner could pick the budget's index and scan every task of the budget
#: (it did, on tables not analysed yet) instead of the unique token or id.
#:
#: ``$6`` (the admission key) and ``$7`` (the request id) write the request's ``admissions``
#: row with the windows it was counted in (:mod:`app.db.commits`).
#:
#: ``{leases}`` picks the lease rows: a chain of one budget updates its one lease row
#: directly; a longer chain first locks its leases root first (``mine``). The budget rows
#: are joined by id, each checked against its place in ``$5`` with ``array_position``:
#: joining ``unnest($5) WITH ORDINALITY`` instead cost the statement as much PostgreSQL
#: CPU as the whole plain fast path.
_FAST = """
    WITH counted AS (
        UPDATE tasks SET {COUNT_REQUEST}
         WHERE {column} = $1 AND {ADMISSIBLE}
        RETURNING *),{leases}
    paid AS (
        UPDATE budget_leases l SET spent = l.spent + 1
          FROM {source}budgets b, budget_windows w
         WHERE l.holder = $2 AND {which} AND w.budget_id = l.budget_id AND w.window_start = l.window_start
           AND b.id = l.budget_id
           AND b.parent_id IS NOT DISTINCT FROM ($5::text[])[array_position($5::text[], b.id) - 1]
           AND {PAYS}
        RETURNING l.budget_id, l.window_start{ROOM_RETURNING}),
    logged AS (
        INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
        SELECT $6, c.id, $7, $5::text[],
               (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) FROM paid)
          FROM counted c)
    SELECT c.*, p.*
      FROM counted c,
           (SELECT array_agg(window_start ORDER BY array_position($5::text[], budget_id)) AS lease_window_starts{ROOM}
              FROM paid) p
     WHERE CASE WHEN c.budget_id IS DISTINCT FROM $4 OR coalesce(cardinality(p.lease_window_starts), 0)
                                                       < cardinality($5::text[])
                THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END
"""
#: The lease of the only budget of the chain, in the window of ``$3``.
_ONE_LEASE = {"leases": "", "source": "", "which": """l.budget_id = $4 AND EXISTS (SELECT 1 FROM counted)
           AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)"""}
#: The leases of a longer chain, locked root first.
_CHAIN_LEASES = {"leases": """
    mine AS (
        SELECT l.budget_id, l.window_start FROM budget_leases l
         WHERE l.holder = $2 AND l.budget_id = ANY($5::text[]) AND EXISTS (SELECT 1 FROM counted)
           AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)
           AND l.expires_at > now()
         ORDER BY array_position($5::text[], l.budget_id) FOR UPDATE),""",
                 "source": "mine, ", "which": "l.budget_id = mine.budget_id AND l.window_start = mine.window_start"}
#: The fast path of a task this process has not seen yet, with or without a budget: as
#: :data:`_FAST`, the chain read from the counted task's budget (none: the plain fast
#: path). Returns the chain's ids too, for :func:`remember`. ``$4``/``$5``: the admission
#: key and request id, as ``$6``/``$7`` of :data:`_FAST`.
_FIRST_SIGHT = """
    WITH RECURSIVE counted AS (
        UPDATE tasks SET {COUNT_REQUEST}
         WHERE {column} = $1 AND {ADMISSIBLE}
        RETURNING *),
    up AS (
        SELECT b.id, b.parent_id, b.depth, b.request_limit, b.token_limit, b.cost_limit_usd, b.paused_at,
               b.model_limits, b.requests_per_minute, b.tokens_per_minute
          FROM budgets b JOIN counted ON b.id = counted.budget_id
        UNION ALL
        SELECT b.id, b.parent_id, b.depth, b.request_limit, b.token_limit, b.cost_limit_usd, b.paused_at,
               b.model_limits, b.requests_per_minute, b.tokens_per_minute
          FROM budgets b JOIN up ON b.id = up.parent_id),
    mine AS (
        SELECT l.budget_id, l.window_start FROM budget_leases l JOIN up b ON b.id = l.budget_id
         WHERE l.holder = $2 AND l.window_start <= $3 AND (l.window_end IS NULL OR $3 < l.window_end)
           AND l.expires_at > now()
         ORDER BY b.depth FOR UPDATE OF l),
    paid AS (
        UPDATE budget_leases l SET spent = l.spent + 1 FROM mine, up b, budget_windows w
         WHERE l.holder = $2 AND l.budget_id = b.id AND w.budget_id = l.budget_id AND w.window_start = l.window_start
           AND l.budget_id = mine.budget_id AND l.window_start = mine.window_start
           AND {PAYS}
        RETURNING l.budget_id, l.window_start{ROOM_RETURNING}),
    logged AS (
        INSERT INTO admissions (key, task_id, request_id, budget_ids, window_starts)
        SELECT $4, c.id, $5, (SELECT array_agg(id ORDER BY depth) FROM up),
               (SELECT array_agg(p.window_start ORDER BY u.depth) FROM paid p JOIN up u ON u.id = p.budget_id)
          FROM counted c)
    SELECT c.*, (SELECT array_agg(id ORDER BY depth) FROM up) AS lease_chain, r.*
      FROM counted c,
           (SELECT array_agg(window_start ORDER BY room_depth) AS lease_window_starts{ROOM_DEPTH} FROM paid) r
     WHERE CASE WHEN (SELECT count(*) FROM paid) < (SELECT count(*) FROM up)
                THEN taskgate_abort('a budget lease of the chain cannot pay') ELSE true END
"""
_RULE = {"ADMISSIBLE": ADMISSIBLE, "COUNT_REQUEST": COUNT_REQUEST, "PAYS": _PAYS, "ROOM_RETURNING": room.ROOM_RETURNING,
         "ROOM": room.ROOM_ARRAYS.format(order="array_position($5::text[], budget_id)"),
         "ROOM_DEPTH": room.ROOM_ARRAYS.format(order="room_depth")}
FIRST_BY_TOKEN = _FIRST_SIGHT.format(column="token_hash", **_RULE)
FIRST_BY_ID = _FIRST_SIGHT.format(column="id", **_RULE)
#: :data:`_FAST` by token and by id, for a chain of one budget and for a longer one.
FAST_BY_TOKEN = _FAST.format(column="token_hash", **_RULE, **_CHAIN_LEASES)
FAST_BY_ID = _FAST.format(column="id", **_RULE, **_CHAIN_LEASES)
FAST_ONE_BY_TOKEN = _FAST.format(column="token_hash", **_RULE, **_ONE_LEASE)
FAST_ONE_BY_ID = _FAST.format(column="id", **_RULE, **_ONE_LEASE)
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
CHAIN = """
    WITH RECURSIVE up AS (
        SELECT * FROM budgets WHERE id = $1
        UNION ALL
        SELECT b.* FROM budgets b JOIN up ON b.id = up.parent_id
    ) SELECT * FROM up ORDER BY depth
"""


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

