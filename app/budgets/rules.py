"""What a budget window admits, and the refusals of a budget. Pure: no I/O, no clock.

A request of a task with a budget is decided against the current window of every budget
of the chain (the task's budget and each ancestor), each by the rules of a task's own
limits (:mod:`app.admission.limits`, :mod:`app.admission.ceiling`):

- ``request_limit``: the window's admitted requests ``>= request_limit``: exhausted;
- ``token_limit``: input + output tokens upstream reported in the window ``>= token_limit``;
- ``cost_limit``: ``cost + worst > cost_limit_usd`` (settled dollars alone): exhausted;
  ``cost + reserved + worst > cost_limit_usd``: held (it fits once the reservations in
  flight settle: the request waits, like a task's own); else admitted.

Exhausted wins over held anywhere in the chain. An exhausted budget refuses with 400
``budget_exhausted`` (:func:`budget_exhausted`): the task is **not** latched (it is not
running away; the budget ran out) and nothing is counted; it goes on when the window
rolls over or an operator raises the limit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from app.admission.ceiling import Decision, decide, retry_after_s
from app.admission.cost import dollars
from app.errors import STOP_STATUS, GatewayError

if TYPE_CHECKING:
    from app.budgets.rows import BudgetRow, WindowRow

#: ``error.type`` and ``error.code`` of a refusal by an exhausted budget.
BUDGET_EXHAUSTED = "budget_exhausted"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The chain's decision: :data:`Decision.ADMIT`, ``HOLD`` (``budget_id`` holds it) or
    ``LATCH`` (read: exhausted; ``budget_id`` ran out of ``what``, with ``detail``)."""

    decision: Decision
    budget_id: str | None = None
    what: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)
    resets_at: datetime | None = None


def window_verdict(budget: BudgetRow, window: WindowRow, worst_usd: Decimal) -> Verdict:
    """One budget (a ``budgets`` row) in its current window (a ``budget_windows`` row)."""
    resets_at = window.get("window_end")
    request_limit = budget.get("request_limit")
    if request_limit is not None and window["admitted_requests"] >= request_limit:
        return Verdict(Decision.LATCH, budget["id"], "request_limit",
                       {"admitted_requests": window["admitted_requests"], "request_limit": request_limit}, resets_at)
    token_limit = budget.get("token_limit")
    tokens = window["input_tokens"] + window["output_tokens"]
    if token_limit is not None and tokens >= token_limit:
        return Verdict(Decision.LATCH, budget["id"], "token_limit",
                       {"total_tokens": tokens, "token_limit": token_limit}, resets_at)
    limit = budget.get("cost_limit_usd")
    decision = decide(window["cost_usd"], window["reserved_usd"], worst_usd, limit)
    if decision is Decision.ADMIT:
        return Verdict(Decision.ADMIT)
    detail = {"cost_usd": str(window["cost_usd"]), "reserved_usd": str(window["reserved_usd"]),
              "request_reservation_usd": str(worst_usd), "cost_limit_usd": str(limit)}
    return Verdict(decision, budget["id"], "cost_limit", detail, resets_at)


def chain_verdict(verdicts: Sequence[Verdict]) -> Verdict:
    """The first exhausted verdict of the chain, else the first held one, else admit."""
    for wanted in (Decision.LATCH, Decision.HOLD):
        for verdict in verdicts:
            if verdict.decision is wanted:
                return verdict
    return Verdict(Decision.ADMIT)


def exhausted_sentence(verdict: Verdict) -> str:
    """What ran out, in words, e.g. ``"all 250 requests of its request_limit"``."""
    d = verdict.detail
    if verdict.what == "model_limit":  # app.budgets.model_limits: one glob ran out, other models go on
        spent = exhausted_sentence(Verdict(verdict.decision, verdict.budget_id, d["limit"], d))
        return (f"its limit for models '{d['model']}' (this request's model '{d['requested_model']}'): {spent}; "
                "requests to other models are still admitted")
    if verdict.what == "request_limit":
        return f"all {d['request_limit']} requests of its request_limit are used"
    if verdict.what == "token_limit":
        return f"{d['total_tokens']} tokens reported, at or over its token_limit of {d['token_limit']}"
    return (f"{dollars(Decimal(d['cost_usd']))} settled; this request could cost up to "
            f"{dollars(Decimal(d['request_reservation_usd']))}, which would pass its cost_limit_usd of "
            f"{dollars(Decimal(d['cost_limit_usd']))}")


def budget_exhausted(task_id: str, verdict: Verdict) -> GatewayError:
    """400 (:data:`app.errors.STOP_STATUS`) ``budget_exhausted``: the budget ``verdict.budget_id`` ran out of
    ``verdict.what``; names ``resets_at`` for a windowed budget (also in the headers
    ``x-taskgate-budget`` and ``x-taskgate-budget-resets-at``). Not retried."""
    resets = verdict.resets_at
    when = (f" It resets at {resets.isoformat().replace('+00:00', 'Z')}." if resets is not None
            else " It has no window: an operator must raise the limit.")
    headers = {"x-should-retry": "false", "x-taskgate-budget": str(verdict.budget_id)}
    if resets is not None:
        headers["x-taskgate-budget-resets-at"] = resets.isoformat().replace("+00:00", "Z")
    return GatewayError(
        STOP_STATUS, BUDGET_EXHAUSTED, BUDGET_EXHAUSTED,
        f"Budget '{verdict.budget_id}' of task '{task_id}' is exhausted ({verdict.what}): "
        f"{exhausted_sentence(verdict)}.{when} The task is not stopped; nothing was forwarded or counted.",
        headers)


def budget_reserved(task_id: str, verdict: Verdict, waited_s: float, wait_s: float) -> GatewayError:
    """429 ``cost_reserved``: the budget ``verdict.budget_id`` held the request for its
    whole wait (its dollars are held by requests in flight). Not counted; retry later."""
    d = verdict.detail
    for_models = f" for models '{d['model']}'" if verdict.what == "model_limit" else ""
    return GatewayError(
        429, "rate_limit_error", "cost_reserved",
        f"Budget '{verdict.budget_id}' of task '{task_id}' has {dollars(Decimal(d['cost_usd']))} spent and "
        f"{dollars(Decimal(d['reserved_usd']))} held by requests in flight; this request could cost up to "
        f"{dollars(Decimal(d['request_reservation_usd']))}, which fits under its cost_limit_usd of "
        f"{dollars(Decimal(d['cost_limit_usd']))}{for_models} only once they settle. Waited {waited_s:.1f} s. "
        "Nothing was forwarded or counted; retry later.",
        {"retry-after": str(retry_after_s(wait_s)), "x-should-retry": "true",
         "x-taskgate-budget": str(verdict.budget_id)})
