"""After the exchange: one admitted request settled, once per admission.

:func:`settle` is the one place a relayed exchange's numbers land, after its last byte
(or, for an answer the loop guard judges, just before it: :mod:`app.proxy.verdict`).
The request's dollars were settled in Python (:func:`app.admission.cost.settle`); here
they are written, with its usage:

- **the budget windows** (:func:`settle_windows`, before the task's; one row per
  statement): the tokens upstream reported and the dollars settled go into the windows
  the request was reserved in (also when a window rolled over meanwhile), and its
  reservation is released. A request counted in one window with no hold to release (the
  escrow lease path) settles that window in the statement that records it on the task
  instead (:mod:`app.settlement.response`, the ``*_in_window`` statements). Without a
  hold to release, a window's settlement commits without waiting for the disk, as the
  task's usage does (a PostgreSQL crash may lose its last ~0.6 s of usage); a released
  hold commits durably. A dollar hold's budget windows are recorded on its
  ``reservations`` row, so a gateway killed with holds in flight loses no allowance past
  the hold's deadline: the sweeper (:func:`app.admission.reservations.sweep`) releases
  them from the windows too, and settlement and sweeper never both release one hold;
- **the task** (:func:`app.settlement.response.record_response`): usage and dollars into
  its counters, its tool calls into the ledger, the loop guard's stop latched; an
  admitted request (``counted``) also in the spend record (:mod:`app.db.spend`), with
  its model, also when upstream reported no usage.

Both in one unit of work that runs once per admission (:func:`app.db.commits.settling`):
retried after a lost commit, it writes nothing again when the first one landed. Without
budget windows settled apart the unit is one statement, which marks the admission
settled itself (a response's tool calls: 1 round trip, was 4), or a round of
:mod:`app.db.settlements`' batcher (usage, and a text answer the loop guard judges). A
database that cannot be reached leaves the unit to the backlog (:func:`retried`).
Nothing is refunded.
"""

from __future__ import annotations

import fnmatch
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from decimal import Decimal
from typing import Any

import asyncpg

from app import events
from app.admission.cost import Settlement
from app.budgets import ledger as budget_ledger
from app.budgets import model_limits, rates, windows
from app.budgets.ledger import WindowKey
from app.db import commits, settlements, sql
from app.db import tasks as task_rows
from app.db.errors import write_again
from app.db.retry import backlog
from app.guard.conversation_rules import answer_repeats
from app.guard.detector import Verdict
from app.settings import Settings
from app.settlement.response import LatchPending, judge_answer, latch_recorded, record_response
from app.wire.base import ResponseSummary, Usage

# The statements: app/db/sql/budgets.sql (budget_*).
#: The request's ``reservations`` row gives up its budget windows: only the first of
#: settlement and the sweeper gets them.
_TAKE_HOLD = sql.statement("budget_take_hold")
#: One window at a time: settlement never holds two window locks, so it can never close a
#: circle with an admission (which locks the chain root first). Durable when it releases
#: a hold; without one (the escrow lease path) committed relaxed, like the task's own
#: usage. Their twin for a one-window chain without a hold is the ``settled`` part of the
#: guard's ``ledger_*_in_window`` statements (app/db/sql/ledger.sql), which records the
#: response on the task in the same statement; ``tests/test_sql_budgets.py`` keeps the
#: columns they add the same.
_SETTLE_HOLD = sql.statement("budget_settle_hold")
_SETTLE_USAGE = sql.statement("budget_settle_usage")


async def retried(write: Callable[[], Awaitable[object]], what: str, retry_s: float) -> None:
    """Run ``write``; if the database is unreachable, or ``write`` was rolled back whole
    (a deadlock victim: :func:`app.db.errors.write_again`), leave it to the backlog
    (retried every ``retry_s`` seconds; ``what`` names it in the log). Other errors
    propagate."""
    try:
        await write()
    except Exception as exc:
        if not write_again(exc):
            raise
        backlog.submit(write, what, retry_s, exc)


async def settle(pool: asyncpg.Pool, settings: Settings, task_id: str, conversation_key: str,
                 summary: ResponseSummary, settlement: Settlement | None, *,
                 budget_windows: Sequence[WindowKey] = (), reservation_id: int | None = None,
                 admission_key: uuid.UUID | None = None, request_id: str | None = None,
                 seen_answer_sha256: str | None = None, model: str | None = None,
                 counted: bool = False) -> tuple[bool, Verdict | None]:
    """Settle one exchange (see the module docstring): its ``budget_windows`` (where the
    request was counted), then its record on the task (``summary``'s usage, tool calls
    and answer, ``settlement``'s dollars; ``reservation_id``: the hold's row, deleted as
    it settles), in one unit once per ``admission_key``. ``model``: the request's model;
    ``counted``: an admitted request, into the spend record. Returns whether there was
    anything to settle (then it was written, or left to the backlog when the database
    could not be reached) and the ledger's verdict (``None``: nothing judged). A stop
    whose latch failed after the response was recorded is latched again on its own
    (retried like any write), never by recording the response twice. Errors other than
    an unreachable database propagate."""
    usage = summary.usage
    # one window and no hold to release (the escrow lease path): settled with the task's
    # usage, in its statement; else first, on its own: it releases the budget windows
    # only while the hold's row is there
    in_window = (budget_windows[0] if len(budget_windows) == 1 and not budget_ledger.settles_apart(
        budget_windows) and not (settlement is not None and settlement.release_usd) else None)
    in_budgets = bool(budget_windows and in_window is None and (usage is not None or settlement is not None))
    recorded = bool(summary.tool_calls or usage is not None or settlement is not None
                    or summary.text_sha256 is not None or counted)
    if not (in_budgets or recorded):
        return False, None
    verdict: Verdict | None = None
    retry_s = settings.accounting_retry_s

    async def latch(reason: str, detail: dict[str, Any]) -> None:
        async with pool.acquire() as conn, conn.transaction():
            await task_rows.set_latch(conn, task_id, reason, detail, request_id=request_id)

    async def latch_again(stop: Verdict) -> None:
        """A stop whose latch failed after its response was recorded: latched on its own
        (retried like any write), never by recording the response twice."""
        nonlocal verdict
        reason, detail = stop.reason or "stopped", dict(stop.detail)
        verdict = None
        await retried(lambda: latch(reason, detail), f"the {reason} stop of task {task_id}", retry_s)

    batched = None  # usage, dollars and a judged answer: in one statement with others' (app.db.settlements)
    if admission_key is not None and not budget_windows and not summary.tool_calls:
        text_sha256 = summary.text_sha256 if settings.loop_guard_enabled else None
        batched = settlements.UsageSettlement(
            admission_key, task_id, usage.input_tokens if usage else 0, usage.output_tokens if usage else 0,
            settlement.cost_usd if settlement else Decimal(0), settlement.release_usd if settlement else Decimal(0),
            reservation_id, (model or "") if counted else None, conversation_key if text_sha256 else None,
            text_sha256, text_sha256 is not None and answer_repeats(seen_answer_sha256, text_sha256))

    async def on_batch(item: settlements.UsageSettlement) -> bool:
        """The response's record in a round of the batcher; ``False``: its task is not
        there (nothing written). A judged answer written now is judged, and latched."""
        nonlocal verdict
        settled = await settlements.settle_usage(pool, item)
        if settled.status is None or settled.answer_streak is None or item.text_sha256 is None:
            return settled.locked
        judged = judge_answer(settled.status, settled.loop_guard, settled.answer_streak, settings, conversation_key,
                              item.text_sha256)
        if judged is not None:
            verdict, latches = judged
            if latches:
                try:
                    async with pool.acquire() as conn:
                        await latch_recorded(conn, task_id, verdict, request_id)
                except LatchPending as pending:
                    await latch_again(pending.verdict)
        return True

    async def on_task(key: uuid.UUID | None) -> None:
        """The response's record on its task (marked settled in its own statement when
        ``key`` is given); a stop whose latch failed is latched again on its own."""
        nonlocal verdict
        try:
            verdict = await record_response(pool, task_id, conversation_key, summary, settings, settlement,
                                            request_id=request_id, seen_answer_sha256=seen_answer_sha256,
                                            reservation_id=reservation_id, budget_window=in_window,
                                            model=(model or "") if counted else None, admission_key=key)
        except LatchPending as pending:
            await latch_again(pending.verdict)

    async def record() -> None:
        """The budget windows' settlement, then the response's record, once per
        admission: retried after a lost commit, it writes nothing again when the first
        one landed. Budget windows settled apart: one transaction that marks the
        admission first (app.db.commits.settling); else the response's one statement
        carries the mark (``marked`` in app/db/sql/ledger.sql: no BEGIN, mark, COMMIT
        round trips), or a round of the batcher does (app.db.settlements)."""
        if batched is not None and await on_batch(batched):
            return
        if not in_budgets:
            if recorded:
                await on_task(admission_key)
            return
        async with commits.settling(pool, admission_key, task_id) as first:
            if not first:
                return
            await _settle_budgets(pool, budget_windows, usage, settlement, reservation_id, model)
            if recorded:
                await on_task(None)
    await retried(record, f"the budget settlement, usage ({usage.input_tokens if usage else 0} input, "
                  f"{usage.output_tokens if usage else 0} output tokens), cost and "
                  f"{len(summary.tool_calls)} tool calls of a response of task {task_id}", retry_s)
    return True, verdict


async def _settle_budgets(pool: asyncpg.Pool, keys: Sequence[WindowKey], usage: Usage | None,
                          settlement: Settlement | None, reservation_id: int | None, model: str | None) -> None:
    async with pool.acquire() as conn:
        spent = await settle_windows(
            conn, keys, usage.input_tokens if usage else 0, usage.output_tokens if usage else 0,
            settlement.cost_usd if settlement else Decimal(0), settlement.release_usd if settlement else Decimal(0),
            reservation_id, model)
    for budget_id, cost_usd in spent:
        events.BUDGET_SPENT.emit(events.BudgetSpent(budget_id, cost_usd))


async def settle_windows(conn: asyncpg.Connection, keys: Sequence[WindowKey], input_tokens: int, output_tokens: int,
                         cost_usd: Decimal, release_usd: Decimal, reservation_id: int | None,
                         model: str | None = None, at: datetime | None = None) -> list[tuple[str, Decimal]]:
    """Add a finished request's tokens and dollars to the windows it was reserved in and
    release its reservation, unless the sweeper released it (a gateway that was taken for
    dead; :mod:`app.admission.reservations`): exactly once either way. Runs before the
    task's own settlement deletes the ``reservations`` row. Returns each budget's settled
    dollars in that window now. A budget with model limits also settles the rows of the
    globs matching ``model``, one with ``tokens_per_minute`` the tokens into the minute of
    ``at`` (default: now; :func:`app.budgets.ledger.settles_apart`), after the windows: the
    order admission locks in (windows, then the globs' rows, then the minute's)."""
    if reservation_id is not None and release_usd:
        if await conn.fetchval(_TAKE_HOLD, reservation_id) is None:
            release_usd = Decimal(0)  # the sweeper released it: the gateway was taken for dead
    statement = _SETTLE_HOLD if release_usd else _SETTLE_USAGE
    spent = []
    for budget_id, window_start in keys:  # each its own statement, root first
        row = await conn.fetchrow(statement, budget_id, window_start, input_tokens, output_tokens, cost_usd,
                                  release_usd)
        if row is not None:
            spent.append((row["budget_id"], row["cost_usd"]))
    notes = budget_ledger.noted_apart(keys)
    if notes:
        await _settle_apart(conn, notes, input_tokens + output_tokens, input_tokens, output_tokens, cost_usd, model, at)
    return spent


async def _settle_apart(conn: asyncpg.Connection, notes: list[tuple[WindowKey, tuple[tuple[str, ...], bool]]],
                        tokens: int, input_tokens: int, output_tokens: int, cost_usd: Decimal, model: str | None,
                        at: datetime | None) -> None:
    rows = [(b, s, g) for (b, s), (globs, _) in notes for g in globs
            if model is not None and fnmatch.fnmatchcase(model, g)]
    await model_limits.settle(conn, rows, input_tokens, output_tokens, cost_usd)
    await rates.settle(conn, [b for (b, _), (_, tpm) in notes if tpm], tokens, at or windows.now())
