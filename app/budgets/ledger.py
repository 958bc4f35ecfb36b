"""Budgets in the admission transaction (PostgreSQL).

**Paused** (:mod:`app.budgets.pause`): :func:`chain` refuses a task whose chain holds a
paused budget (400 ``budget_paused``), and the escrow lease statements pay for no paused
budget.

**Reserve** (:func:`reserve`, inside a task's admission transaction, after the task's own
checks passed and while its row lock is held), two ways:

- a chain **without a dollar ceiling, a model limit or a rate** spends one request from the task's escrow lease
  of each window (:mod:`app.budgets.escrow`): no window row is locked. When a lease
  cannot pay, :class:`NeedsLease` rolls the admission back and the caller takes a lease
  (:func:`take`, its own short transaction) and admits again;
- a chain **with a dollar ceiling** (or a model limit or a rate) locks each budget's
  current window (created if missing; root first, ``INSERT ... ON CONFLICT DO UPDATE ...
  RETURNING``), decides (:mod:`app.budgets.rules`, counting leased requests as admitted
  and reclaiming them when the window is short; then the globs of the request's model,
  :mod:`app.budgets.model_limits`, and the minute's rates, :mod:`app.budgets.rates`) and,
  when it admits, one statement adds the request and its worst-case dollars to every
  window: exact, one request at a time per budget. Lock order: task, windows root
  first, the globs' rows, the minute's rows (settlement follows it).

Every admission locks its chain root first, so two admissions never wait on each other
in a circle, and N gateways never admit past any budget's limit (docs/budgets.md).

**Settle**: after the exchange, a request's budget windows are settled by
:func:`app.settlement.exchange.settle_windows` (the settlement's room, above this one);
:func:`settles_apart` and :func:`noted_apart` say which budgets settle more than their
windows, as :func:`reserve` noted them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

import asyncpg

from app import events
from app.admission.ceiling import Decision
from app.budgets import escrow, model_limits, pause, rates, room, windows
from app.budgets.escrow import NeedsLease, WindowKey, budgeted, remember
from app.budgets.escrow import slot as lease_slot
from app.budgets.fast_path import fast_admit
from app.budgets.room import Room
from app.budgets.rows import BudgetRow, budget_row
from app.budgets.rules import Verdict, budget_exhausted
from app.db import sql
from app.errors import GatewayError
from app.settings import Settings

__all__ = ["NeedsLease", "Reserved", "WindowKey", "announce", "budgeted", "chain", "fast_admit", "hold_models",
           "lease_slot", "mark_exhausted", "needs_dollars", "noted_apart", "remember", "reserve", "settles_apart",
           "take"]

# The statements: app/db/sql/budgets.sql (budget_*).
_CHAIN = escrow.CHAIN
#: The locked path's count: the request and its worst-case dollars in every window.
_RESERVE = sql.statement("budget_reserve")
_MARK_EXHAUSTED = sql.statement("budget_mark_exhausted")


@dataclass(frozen=True, slots=True)
class Reserved:
    """The chain's verdict, and (when admitted) the windows the request was counted in."""

    verdict: Verdict
    windows: tuple[WindowKey, ...] = ()
    refused: WindowKey | None = None  # the window of the budget that held or refused it
    room: Room | None = None  # what the chain has left once this request is counted (app.budgets.room)
    models: tuple[model_limits.ModelKey, ...] = ()  # the model-limit rows it was counted in


async def chain(conn: asyncpg.Connection, budget_id: str, task_id: str | None = None) -> list[BudgetRow]:
    """The ``budgets`` rows of ``budget_id`` and its ancestors, root first, read in the
    caller's transaction. Raises 400 ``budget_paused`` (:func:`app.budgets.pause.budget_paused`)
    for task ``task_id`` when one of them is paused, and emits
    :data:`app.events.BUDGET_REFUSED` for it."""
    rows = [budget_row(r) for r in await conn.fetch(_CHAIN, budget_id)]
    paused = pause.paused_in(rows)
    if paused is not None:
        refusal = pause.budget_paused(task_id or "?", paused, budget_id)
        events.BUDGET_REFUSED.emit(events.BudgetRefused(paused["id"], refusal))
        raise refusal
    return rows


def needs_dollars(budgets: Sequence[BudgetRow], model: str | None = None) -> bool:
    """Whether any budget of the chain has a dollar ceiling, or a dollar limit for
    ``model`` (:mod:`app.budgets.model_limits`)."""
    return any(b["cost_limit_usd"] is not None for b in budgets) or model_limits.metered(budgets, model)


def _locked(budgets: Sequence[BudgetRow]) -> bool:
    """Whether the chain is decided on its locked windows: a dollar ceiling, a model
    limit or a rate anywhere in it (never on an escrow lease)."""
    return any(b["cost_limit_usd"] is not None or b.get("model_limits") or rates.rated(b) for b in budgets)


#: Budgets whose settlement does more than their windows', as this process last admitted
#: them: their model globs and whether they count tokens per minute.
_apart: dict[str, tuple[tuple[str, ...], bool]] = {}


def _note(budgets: Sequence[BudgetRow]) -> None:
    for b in budgets:
        globs = tuple(e["model"] for e in model_limits.entries(b))
        if globs or b.get("tokens_per_minute") is not None:
            _apart[b["id"]] = (globs, b.get("tokens_per_minute") is not None)
        else:
            _apart.pop(b["id"], None)


def settles_apart(keys: Sequence[WindowKey]) -> bool:
    """Whether a request counted in ``keys`` settles through
    :func:`app.settlement.exchange.settle_windows` (a budget of them has model limits or a
    token rate), not in the statement recording the response."""
    return bool(_apart) and any(k[0] in _apart for k in keys)


def noted_apart(keys: Sequence[WindowKey]) -> list[tuple[WindowKey, tuple[tuple[str, ...], bool]]]:
    """The windows of ``keys`` whose budgets settle more than their windows', each with
    its budget's model globs and whether it counts tokens per minute (as this process
    last admitted it); ``[]`` for none."""
    return [(k, _apart[k[0]]) for k in keys if k[0] in _apart] if _apart else []


async def reserve(conn: asyncpg.Connection, holder: str, task_id: str, budgets: Sequence[BudgetRow],
                  worst_usd: Decimal, at: datetime, model: str | None = None) -> Reserved:
    """Count the request of ``task_id`` in the current window of every budget of its
    chain (``budgets``, root first), reserving ``worst_usd`` where a dollar ceiling
    applies; or the verdict that refuses (held, exhausted). Call inside the admission
    transaction, with a lease ``holder`` checked out (:func:`lease_slot`); a refusal
    must roll it back. Raises :class:`NeedsLease` when the holder's escrow leases cannot
    pay (roll back, :func:`take`, admit again).

    A chain with a dollar ceiling, a model limit or a rate locks its windows instead; a
    glob of ``model`` that ran out refuses like an exhausted budget (its verdict), a rate
    raises 429 ``rate_limited`` (:mod:`app.budgets.rates`; roll back)."""
    keys = [(b["id"], windows.span(b["window"], b["timezone"], at).start) for b in budgets]
    if not _locked(budgets):
        left = await escrow.spend(conn, holder, task_id, budgets, at)
        return Reserved(Verdict(Decision.ADMIT), tuple(keys), room=left)
    _note(budgets)
    keys, rows = await escrow.lock_windows(conn, budgets, at)
    verdict = await escrow.decide(conn, budgets, keys, rows, worst_usd)
    counted: list[model_limits.ModelKey] = []
    if verdict.decision is Decision.ADMIT:
        verdict, counted = await model_limits.check(conn, budgets, keys, rows, model, worst_usd)
    if verdict.decision is not Decision.ADMIT:
        return Reserved(verdict, refused=next(k for k in keys if k[0] == verdict.budget_id))
    await rates.take(conn, task_id, budgets, at)
    await conn.execute(_RESERVE, [k[0] for k in keys], [k[1] for k in keys], worst_usd)
    await model_limits.count(conn, counted)
    return Reserved(verdict, tuple(keys), room=room.of_locked(budgets, rows, worst_usd), models=tuple(counted))


async def hold_models(conn: asyncpg.Connection, reservation_id: int | None, reserved: Reserved, usd: Decimal) -> None:
    """Hold the request's worst case ``usd`` in the model-limit rows it was counted in, for
    as long as its ``reservations`` row ``reservation_id`` exists (after
    :func:`app.admission.reservations.hold`, in the admission's transaction)."""
    if reservation_id is not None and reserved.models:
        await model_limits.hold(conn, reservation_id, reserved.models, usd)


async def take(conn: asyncpg.Connection, need: NeedsLease,
               settings: Settings) -> tuple[GatewayError, WindowKey, Verdict] | None:
    """Take escrow lease slices for ``need`` (on a connection outside any transaction;
    :func:`app.budgets.escrow.take`): ``None`` (admit again: the lease can pay now), or
    the exhausted budget's refusal (400 ``budget_exhausted``), its window and verdict."""
    verdict, refused = await escrow.take(conn, need, settings.budget_lease_s, settings.budget_lease_requests)
    if refused is None:
        return None
    return budget_exhausted(need.task_id, verdict), refused, verdict


async def mark_exhausted(conn: asyncpg.Connection, key: WindowKey) -> bool:
    """Record that the window ran out; ``True`` only the first time (once per window)."""
    return await conn.fetchval(_MARK_EXHAUSTED, *key) is not None


#: Budget windows whose exhaustion this process has announced (once per window).
_announced: set[WindowKey] = set()


async def announce(conn: asyncpg.Connection, key: WindowKey, verdict: Verdict, refusal: GatewayError) -> None:
    """Emit :data:`app.events.BUDGET_REFUSED` for a refusal by the window ``key``; its
    first refusal (across processes: a conditional ``UPDATE``) also emits
    :data:`app.events.BUDGET_EXHAUSTED`."""
    events.BUDGET_REFUSED.emit(events.BudgetRefused(key[0], refusal))
    if key in _announced or verdict.what == model_limits.MODEL_LIMIT:  # one glob ran out, not the window
        return
    if len(_announced) > 10_000:
        _announced.clear()
    _announced.add(key)
    if await mark_exhausted(conn, key):
        events.BUDGET_EXHAUSTED.emit(events.BudgetExhausted(key[0], key[1], verdict.what or "", verdict.resets_at,
                                                            refusal))
