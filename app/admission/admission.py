"""Admission: reserve one unit of a task's allowance before anything goes upstream.

Every admitted POST runs one PostgreSQL transaction that holds the task's row lock:

- **Fast path** (no new tool results to judge): a single ``UPDATE ... RETURNING``
  (its own transaction, in autocommit mode: one round trip) that increments
  ``admitted_requests`` only while the task is active and under every limit. PostgreSQL
  re-checks the ``WHERE`` clause on the locked row version, so N concurrent requests
  against a limit L admit exactly L, across processes.
- **Agent-turn path** (tool results, no dollar ceiling, ``allowed_models``, budget or
  conversation request/duration ceiling: :mod:`app.admission.turn`): ``BEGIN``, one
  ``SELECT`` that locks the row, writes the ledger, counts and returns the history window,
  the detector in Python, ``COMMIT``. A loop-guard stop rolls back and takes the locked path.
  With the conversation's window known here (the last statement on it returned it),
  one autocommit statement instead: the detector judges the predicted window first and
  the statement checks the prediction under the row lock (:mod:`app.admission.known_turn`).
- **Locked path** (the fast path refused, or the task has a dollar ceiling or
  ``allowed_models``, or the agent-turn path left it): ``SELECT ... FOR UPDATE``, which
  also returns the admission rule on the row (``taskgate_admissible(t)``), then the
  pricing checks (:func:`charge_refusal`: not counted, no latch), then the loop guard
  records the results and judges the conversation, then the rule decides: a refusal sets
  the durable stop latch in the same transaction, :func:`limit_breach` only naming the
  limit and its numbers. The rule's dollar clause needs the request's worst case, known
  only once the row is read (its output default, the conversation's anchor): the dollar
  ceiling (:func:`app.admission.ceiling.decide`, the same comparison) latches on it, and
  the statement that counts the request of a task with a dollar ceiling asks
  ``taskgate_admissible(t, dollars)`` again (no row: :class:`RuleMismatch`, rolled back),
  so the function decides with no round trip added. With a ``cost_limit_usd`` the
  request's worst-case cost is added to ``reserved_usd`` in the same statement that
  counts it, so N concurrent requests never
  reserve past the ceiling (settled in :mod:`app.proxy.accounting`). A request that
  would fit once the reservations in flight settle is *held*
  (:mod:`app.admission.ceiling`): its transaction rolls back before the loop guard runs,
  it waits without a lock or a connection (:mod:`app.admission.holds`) up to
  ``cost_wait_s`` (the task's, else ``TASKGATE_COST_WAIT_S``) and is decided again; still
  held then: 429 ``cost_reserved``, not counted, no latch. Between the loop
  guard and the task's limits come the conversation's ceilings
  (:func:`app.guard.conversation_rules.conversation_breach`); a task with a conversation
  request or duration ceiling never takes the fast path (its ``WHERE`` requires none).

A task with a ``budget_id`` spends its budgets' escrow leases (one statement when its
chain has no dollar ceiling: :mod:`app.budgets.escrow`), else is reserved against its
chain once its own checks pass (:func:`app.budgets.ledger.reserve`); an exhausted budget
refuses with 400 ``budget_exhausted`` (rolled back: not counted, no latch), a budget whose dollars are
held by requests in flight holds the request like the task's own ceiling (it polls, then
429 ``cost_reserved`` naming the budget).

Every refusal of a stopped task (including the one that sets the latch) adds one to
``refused_requests`` and is logged, one line per task at most every 10 s
(:mod:`app.admission.refusals`).

Whatever counts a request writes its ``admissions`` row under a key chosen first
(:mod:`app.db.commits`); an attempt that lost its connection after sending is
reconciled, never retried blindly (:mod:`app.admission.reconcile`).

Nothing is ever refunded. A database that cannot be reached refuses the request with
503 (fail closed); any other error propagates (a bug: 500 with a request id, see
:func:`app.db.errors.database_unreachable`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any, NoReturn

import asyncpg

from app import events
from app.admission import anchor_rows, ceiling, in_flight, known_turn, reconcile, reservations
from app.admission import turn as agent_turn
from app.admission.charge import Charge, charge_refusal
from app.admission.holds import POLL_INTERVAL_S, holds
from app.admission.limits import limit_breach
from app.admission.outcomes import Admission
from app.admission.outcomes import Exhausted as _Exhausted
from app.admission.outcomes import Held as _Held
from app.admission.outcomes import NeedsHistory as _NeedsHistory
from app.admission.refusals import count_refusal, log_refusal, stop_refusal
from app.admission.request import AdmissionRequest
from app.budgets import ledger as budget_ledger
from app.budgets import room, windows
from app.budgets.rules import budget_exhausted, budget_reserved
from app.db import commits, sql
from app.db import tasks as task_rows
from app.db.errors import database_unreachable
from app.errors import GatewayError, fail_closed, unauthorized, unavailable
from app.guard.conversation_rules import conversation_breach
from app.guard.detector import Action, Verdict
from app.guard.judge import GuardRequest
from app.guard.policy import Policy
from app.guard.strike_rules import STRIKE
from app.ledger import conversations, strikes
from app.ledger.tool_calls import record_request
from app.settings import Settings
from app.task import Task

logger = logging.getLogger(__name__)

#: The fast path: one statement, its own transaction (app/db/sql/admission.sql).
FAST_ADMIT = sql.statement("admission_fast")
_READ_TASK = sql.statement("task_by_id")
#: The locked path's lock, with the admission rule's verdict on the row, and its count;
#: a task with a dollar ceiling's asks the rule with the request's dollars (app/db/sql/admission.sql).
_LOCK_BY_ID = sql.statement("admission_lock_by_id")
_LOCK_BY_TOKEN = sql.statement("admission_lock_by_token")
_COUNT = sql.statement("admission_count")
_COUNT_DOLLARS = sql.statement("admission_count_dollars")


class RuleMismatch(RuntimeError):
    """The admission rule (``taskgate_admissible``) and its explanation
    (:func:`limit_breach`) or the dollar ceiling (:mod:`app.admission.ceiling`) disagree
    on a locked row: a bug (``tests/test_admission_rule.py`` keeps them in step). Raised
    in the admission transaction, which rolls back: nothing counted, no latch (500)."""


@dataclass(frozen=True, slots=True)
class _Rule:
    """The admission rule on the locked path's row. ``admissible``: the lock statement's
    ``taskgate_admissible(t)`` and, for the rule's dollar clause, the dollar ceiling's
    decision at ``reservation_usd`` (USD) not :data:`~ceiling.Decision.LATCH` (a task
    with a ceiling is counted by ``admission_count_dollars``, which asks the function with
    them); ``now``: the transaction's clock the rule read, for :func:`limit_breach`."""

    admissible: bool
    now: datetime
    reservation_usd: Decimal


async def admit(pool: asyncpg.Pool, token_hash: str, settings: Settings,
                guard: GuardRequest | None = None, charge: Charge | None = None,
                conversation_key: str = "", request_id: str | None = None,
                task_id: str | None = None) -> Admission:
    """:func:`admit_request` of the :class:`AdmissionRequest` these arguments make
    (``charge`` ``None``: ``Charge(None)``, unpriced); the same result and errors."""
    return await admit_request(pool, AdmissionRequest(token_hash, task_id, guard, charge or Charge(None),
                                                      conversation_key, request_id), settings)


async def admit_request(pool: asyncpg.Pool, request: AdmissionRequest, settings: Settings) -> Admission:
    """Reserve one request for the task whose token hashes to ``request.token_hash`` (or,
    for the task of a budget key's run, whose id is ``request.task_id``).

    Emits :data:`app.events.ADMISSION_DONE` with each attempt's duration and, for a
    request the dollar ceiling held, :data:`app.events.COST_HELD` with how it ended.

    Raises :class:`GatewayError`: 401 unknown token; 400 ``task_stopped`` with the
    stop reason as ``code`` (``request_limit``, ``token_limit``, ``max_duration``, a
    loop-guard reason, or whatever latched the task earlier); 429 ``cost_reserved``
    when the dollar ceiling (the task's or a budget's) held the request for its whole
    wait; 400 ``budget_exhausted`` when a budget of its chain ran out; 503 when the database
    cannot be reached. Any other error propagates (nothing was admitted: the
    transaction rolled back).
    """
    loop = asyncio.get_running_loop()
    started = loop.time()
    deadline: float | None = None
    held_id: str | None = None  # the task, once the dollar ceiling held this request

    def waited(outcome: str) -> None:
        if held_id is not None:
            events.COST_HELD.emit(events.CostHeld(held_id, outcome, loop.time() - started))

    voids = 0
    while True:
        try:
            admitted = await _attempt(pool, request, settings)
        except reconcile.Void:
            voids += 1
            if voids >= reconcile.VOID_ATTEMPTS:
                raise unavailable() from None
            continue
        except _NeedsHistory:
            charge = request.charge  # hashed off the row lock and the event loop, then decided again
            await asyncio.to_thread(lambda: charge.history)
            continue
        except _Held as held:
            held_id = held.task.id
            wait_s = held.policy.cost_wait_s
            deadline = started + wait_s if deadline is None else deadline
            left = deadline - loop.time()
            if left <= 0:
                waited("timed_out")
                if held.budget is not None:
                    raise budget_reserved(held.task.id, held.budget, loop.time() - started, wait_s) from None
                raise ceiling.cost_reserved(held.task, held.worst_usd, loop.time() - started, wait_s) from None
            if held.budget is not None:  # a budget's window: poll (settlements anywhere free it)
                await asyncio.sleep(min(left, POLL_INTERVAL_S))
            elif not await holds.wait(pool, held.task.id, held.worst_usd, left):
                deadline = loop.time()  # one last try, decided by the same rule
            continue
        except GatewayError:
            waited("refused")  # stopped meanwhile, or latched: the ceiling is truly reached
            raise
        waited("admitted")
        return admitted


async def _attempt(pool: asyncpg.Pool, request: AdmissionRequest, settings: Settings) -> Admission:
    """One admission transaction (:func:`admit`) under a new admission key; raises
    :class:`_Held` when held, :class:`reconcile.Void` when its outcome was unknown and nothing
    landed."""
    started = time.perf_counter()
    admission_key = commits.new_key()
    sent = False
    try:
        with fail_closed("admission"):
            try:
                async with pool.acquire() as conn:
                    sent = True  # from here on a statement may have committed
                    global_ceiling = (settings.conversation_request_limit is not None
                                      or settings.conversation_max_duration_s is not None)
                    fast = request.guard is None and not global_ceiling
                    hint = budget_ledger.budgeted(request.who)  # None: not seen yet
                    if fast and request.task_id is None and hint is False:
                        row = await conn.fetchrow(FAST_ADMIT, request.token_hash, admission_key,
                                                  request.request_id)  # its own transaction
                        if row is not None:
                            task = Task.from_row(row)
                            return Admission(task, Policy(task, settings), key=admission_key)
                    with budget_ledger.lease_slot() as holder:
                        now = windows.now(settings.clock_offset_s)
                        if fast and hint is not False and (  # one statement: a budget's escrow lease pays
                                leased := await budget_ledger.fast_admit(conn, holder, now, request.token_hash,
                                                                         request.task_id, admission_key,
                                                                         request.request_id)):
                            return Admission(task := Task.from_row(leased[0]), Policy(task, settings),
                                            budget_windows=leased[1], key=admission_key,
                                            budget_room=room.of_fast_row(leased[0]))
                        while True:
                            try:
                                admitted = await _admit_locked(conn, holder, request, settings, admission_key)
                                budget_ledger.remember(request.who, [k[0] for k in admitted.budget_windows])
                                return admitted
                            except budget_ledger.NeedsLease as need:  # rolled back: take a slice, admit again
                                if (taken := await budget_ledger.take(conn, need, settings)) is None:
                                    continue
                                exhausted = _Exhausted(*taken)
                            except _Exhausted as refused:
                                exhausted = refused
                            await budget_ledger.announce(conn, exhausted.key, exhausted.verdict, exhausted.refusal)
                            raise exhausted.refusal from None
            except Exception as exc:
                if not sent or not database_unreachable(exc):
                    raise  # nothing was sent (503), or not a lost connection
                return await reconcile.reconciled(pool, admission_key, settings, request.charge)
    finally:
        events.ADMISSION_DONE.emit(events.AdmissionDone(time.perf_counter() - started))


async def _admit_locked(conn: asyncpg.Connection, holder: str, request: AdmissionRequest, settings: Settings,
                        admission_key: uuid.UUID) -> Admission:
    token_hash, guard, charge, task_id = request.token_hash, request.guard, request.charge, request.task_id
    if task_id is None and guard is not None and agent_turn.may_take(token_hash, settings):
        known = await known_turn.admit_known(conn, token_hash, guard, settings, admission_key, request.request_id)
        if known is not None:
            return Admission(known.task, known.policy, known.verdict, output_max=charge.added_output_max(known.task),
                            key=admission_key)
        turned = await _admit_turn(conn, request, settings, admission_key)
        if turned is not None:
            return turned
    async with conn.transaction():
        if task_id is not None:
            locked = await conn.fetchrow(_LOCK_BY_ID, task_id)
        else:
            locked = await conn.fetchrow(_LOCK_BY_TOKEN, token_hash)
        if locked is None:
            raise unauthorized("Unknown task token. Use the token returned by POST /admin/tasks.")
        task = Task.from_row(locked)
        if guard is not None and task_id is None:
            agent_turn.remember(token_hash, task)
        active = task.active
        budgets = await budget_ledger.chain(conn, task.budget_id, task.id) if active and task.budget_id else []
        metered = task.cost_limit_usd is not None or budget_ledger.needs_dollars(budgets, charge.model)
        if active:
            priced = charge_refusal(task, charge, metered=metered)
            if priced is not None:
                raise priced  # nothing written: not counted, no latch
        policy = Policy(task, settings)
        reservation = Decimal(0)
        if active and metered:
            anchor = await anchor_rows.anchor(conn, task.id, request.conversation)
            if anchor is not None and not charge.history_known:
                raise _NeedsHistory()  # rolls back: nothing written yet
            reservation = charge.reservation_usd(task, anchor, metered)
        dollars = ceiling.task_decision(task, reservation) if active else ceiling.Decision.ADMIT
        if dollars is ceiling.Decision.HOLD:
            raise _Held(task, policy, reservation)  # rolls back: nothing written, the lock released
        rule = _Rule(locked["admissible"] and dollars is not ceiling.Decision.LATCH, locked["rule_now"], reservation)
        refusal, verdict = await _judge(conn, task, policy, request, rule)
        if refusal is None:
            keys: tuple[budget_ledger.WindowKey, ...] = ()
            reserved = None
            if budgets:
                reserved = await budget_ledger.reserve(conn, holder, task.id, budgets, reservation,
                                                       windows.now(settings.clock_offset_s), charge.model)
                if reserved.verdict.decision is ceiling.Decision.HOLD:
                    raise _Held(task, policy, reservation, reserved.verdict)  # rolls back
                if reserved.verdict.decision is ceiling.Decision.LATCH:
                    assert reserved.refused is not None
                    raise _Exhausted(budget_exhausted(task.id, reserved.verdict), reserved.refused,
                                    reserved.verdict)
                keys = reserved.windows
            count = _COUNT if task.cost_limit_usd is None else _COUNT_DOLLARS
            counted = await conn.fetchrow(count, task.id, reservation, admission_key, request.request_id,
                                          [b for b, _ in keys], [w for _, w in keys])
            if counted is None:  # the rule with the dollars refused what the lock's verdict admitted: rolls back
                raise RuleMismatch(f"taskgate_admissible refused task {task.id!r} at count ({reservation} USD)")
            admitted = Task.from_row(counted)
            held = await reservations.hold(conn, task.id, reservation, reservations.deadline_s(policy),
                                           keys, admission_key) if reservation else None
            if reserved is not None and reserved.models:  # model limits' dollars in flight (app.budgets.model_limits)
                await budget_ledger.hold_models(conn, held, reserved, reservation)
            return Admission(admitted, Policy(admitted, settings), verdict, reservation,
                            charge.added_output_max(task, metered), held, keys, key=admission_key,
                            budget_room=reserved.room if reserved is not None else None)
        log_refusal(task.id, refusal.code or "stopped", await count_refusal(conn, task.id))
    await _refuse(conn, task, refusal)


async def _refuse(conn: asyncpg.Connection, task: Task, refusal: GatewayError) -> NoReturn:
    """Raise ``refusal``, its latch and refusal count committed. A stop set just now
    quotes the counters as they are once this judgement (which may have counted the
    request's tool calls) and the responses this process is still recording (usually
    the one whose tool call led here) are in; later refusals read a settled row anyway."""
    if task.active and refusal.type == "task_stopped":
        await in_flight.drained(task.id)
        row = await conn.fetchrow(_READ_TASK, task.id)
        if row is not None and row["status"] == "stopped":
            refusal = stop_refusal(Task.from_row(row))
    raise refusal


async def _admit_turn(conn: asyncpg.Connection, request: AdmissionRequest, settings: Settings,
                      admission_key: uuid.UUID) -> Admission | None:
    """The agent-turn path (:mod:`app.admission.turn`) of a request with a ``guard``:
    ``BEGIN``, one ``SELECT``, ``COMMIT`` for an admitted turn. ``None``: nothing was
    written (the task may not take this path, or the loop guard stops it: rolled back),
    decide the usual way."""
    assert request.guard is not None
    request_id = request.request_id
    try:
        async with conn.transaction():
            turn = await agent_turn.open_turn(conn, request.token_hash, request.guard, settings, admission_key,
                                              request_id)
            if turn is None:
                raise unauthorized("Unknown task token. Use the token returned by POST /admin/tasks.")
            if not turn.recorded:
                return None  # only the lock was taken: released at this commit
            task, policy = turn.task, Policy(turn.task, settings)
            verdict, breach = agent_turn.judge(turn, policy, request.conversation)  # raises Rerun on a stop
            if verdict.action is Action.WARN:
                await task_rows.add_event(conn, task.id, "loop_warning", verdict.reason, dict(verdict.detail),
                                          request_id=request_id)
            if breach is None:
                return Admission(task, policy, verdict, output_max=request.charge.added_output_max(task),
                                key=admission_key)
            refusal = await _latch(conn, task, *breach, request_id)
            log_refusal(task.id, refusal.code or "stopped", await count_refusal(conn, task.id))
    except agent_turn.Rerun:
        return None
    await _refuse(conn, task, refusal)


async def _judge(conn: asyncpg.Connection, task: Task, policy: Policy, request: AdmissionRequest,
                 rule: _Rule) -> tuple[GatewayError | None, Verdict | None]:
    """The refusal for this request (``None``: admit, with the conversation counted)
    and the loop guard's verdict; latches the task on a new stop. In order: the latch,
    the loop guard, the conversation's ceilings, then the admission rule (``rule``,
    decided in SQL: :func:`limit_breach` only names the limit and its numbers)."""
    if not task.active:
        return stop_refusal(task), None
    verdict = None
    conversation_key, request_id = request.conversation, request.request_id
    if request.guard is not None:
        verdict = await record_request(conn, task, request.guard, policy, request_id=request_id)
        if verdict.action is Action.STOP and policy.rule_action(verdict.reason or "") == STRIKE:  # no_progress
            judged = await strikes.apply_locked(conn, task.id, conversation_key, verdict.reason or "", STRIKE,
                                                verdict.detail, policy.settings, request_id=request_id,
                                                pending_note=False)  # noted in this request
            if judged.applied is strikes.Applied.LATCHED:
                return stop_refusal(task, verdict.reason, verdict.detail), verdict
            verdict = Verdict(Action.WARN, verdict.reason, verdict.count, verdict.detail)
        if verdict.action is Action.STOP:
            return await _latch(conn, task, verdict.reason or "stopped", dict(verdict.detail), request_id), verdict
    limits = policy.conversation
    if limits.active:
        conversation = await conversations.get(conn, task.id, conversation_key)
        breach = conversation_breach(conversation, limits, datetime.now(timezone.utc))
        if breach is not None:
            reason, detail = breach
            return await _latch(conn, task, reason, {**detail, "conversation_key": conversation_key},
                                request_id), verdict
    if not rule.admissible:
        limit = limit_breach(task, rule.now, rule.reservation_usd)
        if limit is None:  # tests/test_admission_rule.py keeps the two in step
            raise RuleMismatch(f"taskgate_admissible refused task {task.id!r}; limit_breach names no limit")
        return await _latch(conn, task, *limit, request_id), verdict
    if limits.active:
        await conversations.count_request(conn, task.id, conversation_key)
    return None, verdict


async def _latch(conn: asyncpg.Connection, task: Task, reason: str,
                 detail: Mapping[str, Any], request_id: str | None) -> GatewayError:
    """Set the latch for a stop; the refusal to answer with."""
    await task_rows.set_latch(conn, task.id, reason, dict(detail), request_id=request_id)
    return stop_refusal(task, reason, detail)


async def authenticate(pool: asyncpg.Pool, token_hash: str, task_id: str | None = None) -> Task:
    """Look up a task by token (or by ``task_id``, a budget key's run) without consuming
    allowance (GETs, token counting).

    Raises 401 for an unknown token and 503 when the database cannot be reached
    (other errors propagate). A stopped task still authenticates: GETs are free and
    harmless.
    """
    with fail_closed("task lookup"):
        async with pool.acquire() as conn:
            if task_id is not None:
                row = await conn.fetchrow(_READ_TASK, task_id)
            else:
                row = await conn.fetchrow(sql.statement("task_by_token"), token_hash)
    if row is None:
        raise unauthorized("Unknown task token. Use the token returned by POST /admin/tasks.")
    return Task.from_row(row)
