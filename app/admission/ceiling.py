"""The dollar ceiling's admission rule: admit, hold (wait for reservations in flight to
settle) or latch. Pure: no I/O, no clock.

A reservation is a hold, not a spend. With ``cost`` the task's settled dollars,
``reserved`` the worst-case dollars of its requests in flight and ``worst`` this
request's worst case, against the ceiling ``limit``:

- ``cost + worst > limit``: the ceiling is truly reached (even if nothing else were in
  flight this request might pass it): :data:`LATCH`, the task stops with ``cost_limit``;
- else ``cost + reserved + worst > limit``: it fits once requests in flight settle:
  :data:`HOLD`, the request waits (:mod:`app.admission.holds`) and is decided again;
- else :data:`ADMIT`, and ``worst`` is added to ``reserved`` in the statement that
  counts the request, so the sum of admitted worst cases never passes the ceiling.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from decimal import Decimal

from app.admission.cost import dollars
from app.errors import GatewayError
from app.task import Task

#: ``retry-after`` of a ``cost_reserved`` refusal is the wait, in whole seconds, within these.
RETRY_AFTER_MIN_S, RETRY_AFTER_MAX_S = 1, 60


class Decision(enum.Enum):
    ADMIT = "admit"
    HOLD = "hold"
    LATCH = "latch"


def decide(cost_usd: Decimal, reserved_usd: Decimal, worst_usd: Decimal, limit_usd: Decimal | None) -> Decision:
    """The rule of the module docstring; no ceiling (``limit_usd`` ``None``) admits."""
    if limit_usd is None:
        return Decision.ADMIT
    if cost_usd + worst_usd > limit_usd:
        return Decision.LATCH
    if cost_usd + reserved_usd + worst_usd > limit_usd:
        return Decision.HOLD
    return Decision.ADMIT


def task_decision(task: Task, worst_usd: Decimal) -> Decision:
    """:func:`decide` on a task's ``cost_usd``, ``reserved_usd`` and ``cost_limit_usd``."""
    return decide(task.cost_usd, task.reserved_usd, worst_usd, task.cost_limit_usd)


def wake_order(task: Task, waiting: Sequence[Decimal]) -> list[int]:
    """Which of the ``waiting`` worst cases (in arrival order) to wake for another try,
    given the task ``task`` just read: every one a stop, a resume or a changed ceiling
    may have decided (the task is no longer active, or has no ceiling), else, in order,
    each that fits in the headroom left by those woken before it (greedy: a large request
    does not block smaller ones behind it), and each that now latches (to be refused)."""
    limit = task.cost_limit_usd
    if task.status != "active" or limit is None:
        return list(range(len(waiting)))
    room = limit - task.cost_usd - task.reserved_usd
    woken = []
    for i, worst in enumerate(waiting):
        if task.cost_usd + worst > limit:
            woken.append(i)
        elif worst <= room:
            room -= worst
            woken.append(i)
    return woken


def retry_after_s(wait_s: float) -> int:
    """``retry-after`` seconds of a ``cost_reserved`` refusal after waiting ``wait_s``."""
    return max(RETRY_AFTER_MIN_S, min(RETRY_AFTER_MAX_S, math.ceil(wait_s)))


def cost_reserved(task: Task, worst_usd: Decimal, waited_s: float, wait_s: float) -> GatewayError:
    """429 ``cost_reserved``: the request was held for its whole wait (``task`` is the row
    as it was last decided on). Not counted, no latch; the client may retry (``retry-after``)."""
    return GatewayError(
        429, "rate_limit_error", "cost_reserved",
        f"Task '{task.id}' has {dollars(task.cost_usd)} spent and {dollars(task.reserved_usd)} "
        f"held by requests in flight; this request could cost up to {dollars(worst_usd)}, which fits under "
        f"its cost_limit_usd of {dollars(task.cost_limit_usd)} only once they settle. Waited "
        f"{waited_s:.1f} s (cost_wait_s {wait_s:g}). Nothing was forwarded or counted; retry later.",
        {"retry-after": str(retry_after_s(wait_s)), "x-should-retry": "true"})
