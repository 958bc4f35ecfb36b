"""Which limit a refusal names, and the admission rule for the one-statement paths.

The rule is one SQL function, ``taskgate_admissible()`` (``app/db/sql/functions/``),
which every statement and function that counts a request asks (``taskgate_agent_turn()``
calls it; :data:`ADMISSIBLE`, the fast path's of :mod:`app.admission.admission` and the
budget lease paths' of :mod:`app.budgets.escrow`, is its text; the locked path's lock and
count statements call it, ``app/db/sql/admission.sql``). :func:`limit_breach` only explains
a refusal (which limit, its numbers); ``tests/test_admission_rule.py`` keeps it in step
with the function over a grid of task states, and the locked path with both."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Mapping

from app.admission.cost import dollars
from app.db import sql
from app.stop_reasons import CostLimitDetail, MaxDurationDetail, RequestLimitDetail, StopReason, TokenLimitDetail
from app.task import Task

#: The rule of a one-statement admission, on the task row it counts (the table
#: unaliased, as ``tasks``): the admission rule ``taskgate_admissible()`` (active, under
#: its request, token and duration limits: :func:`limit_breach` without dollars, which
#: only explains a refusal) on a task ``taskgate_one_statement()`` may decide (none of
#: the settings only the locked path decides: a dollar ceiling, allowed models, the
#: conversation ceilings). The functions' own text (``app/db/sql/functions/``), as
#: PostgreSQL would inline them, without planning the inlining at every execution
#: (:func:`app.db.sql.inline`). SQL, for a ``WHERE`` clause.
ADMISSIBLE = sql.inline("taskgate_admissible(tasks) AND taskgate_one_statement(tasks)")
#: The ``SET`` of a counted request (its first admission starts ``max_duration_s``).
COUNT_REQUEST = ("admitted_requests = admitted_requests + 1,"
                 " first_admitted_at = COALESCE(first_admitted_at, now()), updated_at = now()")
#: The ``stop_detail`` of a limit's stop (:mod:`app.stop_reasons`).
LimitDetail = RequestLimitDetail | TokenLimitDetail | MaxDurationDetail | CostLimitDetail


def limit_breach(task: Task, now: datetime,
                 reservation_usd: Decimal | None = None) -> tuple[StopReason, LimitDetail] | None:
    """Which limit admitting one more request would break, or ``None``.

    Returns ``(stop_reason, stop_detail)`` with
    ``stop_reason`` one of ``request_limit`` (``admitted_requests >= request_limit``),
    ``token_limit`` (input + output tokens reported by upstream ``>= token_limit``)
    or ``max_duration`` (``now`` is ``max_duration_s`` seconds or more after the first
    admitted request), or ``cost_limit`` (settled dollars + this request's
    ``reservation_usd`` would pass ``cost_limit_usd``, as if nothing else were in
    flight: :func:`app.admission.ceiling.decide`; dollars merely reserved by requests in
    flight hold a request, they never latch; an unpriced request never gets here,
    :func:`app.admission.charge.charge_refusal` refused it).
    """
    if task.admitted_requests >= task.request_limit:
        return "request_limit", RequestLimitDetail(admitted_requests=task.admitted_requests,
                                                   request_limit=task.request_limit)
    tokens = task.total_tokens
    if task.token_limit is not None and tokens >= task.token_limit:
        return "token_limit", TokenLimitDetail(total_tokens=tokens, token_limit=task.token_limit)
    first = task.first_admitted_at
    if task.max_duration_s is not None and first is not None:
        elapsed = (now - first).total_seconds()
        if now >= first + timedelta(seconds=task.max_duration_s):
            return "max_duration", MaxDurationDetail(elapsed_s=round(elapsed, 3), max_duration_s=task.max_duration_s)
    limit = task.cost_limit_usd
    if limit is not None and reservation_usd is not None:
        if task.cost_usd + reservation_usd > limit:  # settled alone: holds never latch
            return "cost_limit", CostLimitDetail(cost_usd=str(task.cost_usd), reserved_usd=str(task.reserved_usd),
                                                 request_reservation_usd=str(reservation_usd),
                                                 cost_limit_usd=str(limit))
    return None


def counters_sentence(task: Task) -> str:
    """Human summary of a task's counters for refusal messages, e.g.
    ``"5 of 5 requests admitted, 1200 tokens, 14 tool calls"``."""
    tokens = task.total_tokens
    token_part = f"{tokens} tokens" + (f" of {task.token_limit}" if task.token_limit else "")
    sentence = (f"{task.admitted_requests} of {task.request_limit} requests admitted, "
                f"{token_part}, {task.tool_calls} tool calls")
    limit = task.cost_limit_usd
    if limit is not None or task.cost_usd:
        sentence += (f", {dollars(task.cost_usd)}" + (f" of {dollars(limit)}" if limit is not None else "")
                     + f" spent, {dollars(task.reserved_usd)} reserved")
    return sentence


#: The limit each limit stop names in its ``stop_detail``, and the task's field holding it now.
_STOP_LIMITS = {"request_limit": "request_limit", "token_limit": "token_limit", "max_duration": "max_duration_s",
                "cost_limit": "cost_limit_usd", "repeated_stalls": "max_stalls"}


def limit_since_stop(task: Task, reason: str | None, detail: Mapping[str, Any] | None) -> str | None:
    """``"3 when it stopped; 10 now"`` when the limit that stopped ``task`` was changed
    since (the counters beside the sentence are against today's limit), else ``None``."""
    name = _STOP_LIMITS.get(reason or "")
    if name is None or not detail or detail.get(name) is None:
        return None
    then, now = detail[name], getattr(task, name, None)
    if now is not None and Decimal(str(then)) == Decimal(str(now)):
        return None
    if name == "cost_limit_usd":
        since = dollars(now) if now is not None else "none"
        return f"{dollars(Decimal(str(then)))} when it stopped; {since} now"
    def number(v: Any) -> str:  # 120.0 -> 120
        return str(int(v)) if isinstance(v, float) and v.is_integer() else str(v)
    return f"{number(then)} when it stopped; {'none' if now is None else number(now)} now"

