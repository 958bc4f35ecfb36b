"""Admission of MCP ``tools/call`` requests, on the same task, ledger and latch as the
task's model calls.

A ``tools/call`` takes two transactions, each holding the task's row lock:

1. :func:`admit_call`, before anything reaches the MCP server: a stopped task is refused
   (``refused_requests`` + 1); the call enters the tool-call ledger as pending and counts
   as one of the task's ``tool_calls`` (and of its conversation's), and the loop guard
   judges the conversation with it (:func:`app.ledger.tool_calls.record_request`). A stop
   verdict (``tool_call_limit``, ``conversation_tool_call_limit``, a loop) rolls the
   call back, sets the latch in a transaction of its own and refuses the call: under
   the row lock, N concurrent calls against ``tool_call_limit`` L reach the server L
   times, across processes. A tool's ``price_usd`` is added to ``cost_usd`` in the same
   transaction, unless it would pass ``cost_limit_usd`` (refused, nothing counted).
2. :func:`record_result`, once the server answered and before the answer is released to
   the client: the result enters the ledger (fingerprinted like a model turn's tool
   result: ``isError`` is a failure) and the loop guard judges again; a stop verdict
   latches the task there and then, so the next call, MCP or model, is refused whatever
   the client's timing.

Nothing is refunded: a call admitted and then lost (the server down, a timeout) stays
counted, without a result.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from decimal import Decimal

import asyncpg

from app.admission.refusals import count_refusal, log_refusal, stop_refusal
from app.budgets import ledger as budget_ledger
from app.db import sql
from app.db import tasks as task_rows
from app.errors import GatewayError, fail_closed, unauthorized
from app.guard.detector import Action, Verdict
from app.guard.judge import GuardRequest
from app.guard.policy import Policy
from app.guard.result_prints import config_for, fingerprints_off_loop
from app.ledger.tool_calls import record_request
from app.settings import Settings
from app.task import Task
from app.wire.base import ToolCall, ToolResult

logger = logging.getLogger(__name__)

_CHARGE = sql.statement("mcp_charge")


@dataclass(frozen=True, slots=True)
class AdmittedCall:
    """A ``tools/call`` admitted for ``task_id`` (the task as admission locked it)."""

    task_id: str
    task: Task


class _Stop(Exception):
    """A stop verdict inside the admission transaction: rolled back, then latched."""

    def __init__(self, task: Task, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.task, self.verdict = task, verdict


def _cost_refusal(task: Task, price: Decimal) -> GatewayError | None:
    """The refusal of a call priced ``price`` dollars that would pass the task's dollar
    ceiling (spent plus reserved plus the price), or ``None``."""
    limit = task.cost_limit_usd
    if limit is None or not price or task.cost_usd + task.reserved_usd + price <= limit:
        return None
    left = limit - task.cost_usd - task.reserved_usd
    return GatewayError(402, "insufficient_quota", "cost_limit",
                        f"This tool call costs ${price} and task {task.id} has ${left} left of its "
                        f"cost_limit_usd ${limit}. Nothing was forwarded or counted.")


async def _locked(conn: asyncpg.Connection, token_hash: str, task_id: str | None) -> Task:
    task = await task_rows.lock_task(conn, task_id=task_id) if task_id is not None else \
        await task_rows.lock_task(conn, token_hash=token_hash)
    if task is None:
        raise unauthorized("Unknown task token. Use the token returned by POST /admin/tasks.")
    return task




async def admit_call(pool: asyncpg.Pool, token_hash: str, server: str, call: ToolCall, conversation_key: str,
                     settings: Settings, *, task_id: str | None = None, price_usd: Decimal = Decimal(0),
                     request_id: str | None = None) -> AdmittedCall:
    """Admit one ``tools/call`` to MCP server ``server`` of the task with token hash
    ``token_hash`` (or id ``task_id``, a budget key's run). Raises :class:`~app.errors.GatewayError`: 401 for an
    unknown token, ``task_stopped`` for a stopped task or a stop this call trips (the
    latch is set first), 400 ``budget_paused`` under a paused budget (not counted), 402
    ``cost_limit`` for a price past the dollar ceiling, 503 when the database cannot answer."""
    with fail_closed("MCP tool call admission"):
        async with pool.acquire() as conn:
            stopped: GatewayError | None = None
            try:
                async with conn.transaction():
                    task = await _locked(conn, token_hash, task_id)
                    if task.status != "active":  # the refusal is counted (committed), then raised
                        refused = await count_refusal(conn, task.id)
                        log_refusal(task.id, task.stop_reason or "stopped", refused)
                        stopped = stop_refusal(task)
                    else:
                        if task.budget_id is not None:  # 400 budget_paused under a paused budget
                            await budget_ledger.chain(conn, task.budget_id, task.id)
                        await _take(conn, task, call, conversation_key, settings, price_usd, request_id)
            except _Stop as stop:
                async with conn.transaction():
                    task = await _locked(conn, token_hash, stop.task.id)
                    reason = stop.verdict.reason or "loop_detected"
                    detail = {**stop.verdict.detail, "mcp_server": server}
                    await task_rows.set_latch(conn, task.id, reason, detail, request_id=request_id)
                    await count_refusal(conn, task.id)
                raise stop_refusal(task, reason, detail) from None
    if stopped is not None:
        raise stopped
    return AdmittedCall(task.id, task)


async def _take(conn: asyncpg.Connection, task: Task, call: ToolCall, conversation_key: str, settings: Settings,
                price_usd: Decimal, request_id: str | None) -> None:
    """Count the call on the locked, active task and judge it; raises the cost refusal
    (nothing written) or :class:`_Stop` (to be rolled back and latched)."""
    if (refusal := _cost_refusal(task, price_usd)) is not None:
        raise refusal
    verdict = await record_request(conn, task, GuardRequest(conversation_key, [call], []),
                                   Policy(task, settings), request_id=request_id)
    if verdict.action is Action.STOP:
        raise _Stop(task, verdict)
    if price_usd:
        await conn.execute(_CHARGE, task.id, price_usd)


async def record_result(pool: asyncpg.Pool, admitted: AdmittedCall, server: str, call: ToolCall, result: ToolResult,
                        conversation_key: str, settings: Settings, *, request_id: str | None = None) -> Verdict:
    """Record the server's result of an admitted call and judge the conversation; a stop
    verdict sets the latch in the same transaction. Returns the verdict. Raises 503 when
    the database cannot answer (the caller answers the client with an error then: the
    result is not released unjudged)."""
    prints = await fingerprints_off_loop([call], [result], config_for(admitted.task, settings))
    with fail_closed("MCP tool result"):
        async with pool.acquire() as conn, conn.transaction():
            task = await _locked(conn, "", admitted.task_id)
            guard = GuardRequest(conversation_key, [call], [result], prints)
            verdict = await record_request(conn, task, guard, Policy(task, settings), request_id=request_id)
            if verdict.action is Action.STOP:
                await task_rows.set_latch(conn, task.id, verdict.reason or "loop_detected",
                                          {**verdict.detail, "mcp_server": server}, request_id=request_id)
    return verdict
