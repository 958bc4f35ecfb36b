"""The dollar ceiling's pure admission rule (app/admission/ceiling.py): hold, latch, wake."""

from __future__ import annotations

from decimal import Decimal as D

from app.admission.ceiling import Decision, cost_reserved, decide, retry_after_s, wake_order
from app.guard.policy import Policy
from app.settings import Settings
from app.task import Task
from tests.task_values import task_value


def test_only_settled_dollars_and_the_worst_case_latch() -> None:
    assert decide(D(0), D(0), D("1.2"), D(5)) is Decision.ADMIT
    assert decide(D(0), D("4.8"), D("1.2"), D(5)) is Decision.HOLD  # held dollars are not spent
    assert decide(D("3.9"), D(0), D("1.2"), D(5)) is Decision.LATCH
    assert decide(D("3.8"), D("1.2"), D("1.2"), D(5)) is Decision.HOLD  # fits once the other settles
    assert decide(D("3.8"), D(0), D("1.2"), D(5)) is Decision.ADMIT  # exactly at the ceiling fits
    assert decide(D(100), D(100), D(100), None) is Decision.ADMIT


def _task(cost: str, reserved: str, limit: str | None = "5", status: str = "active") -> Task:
    return task_value(id="t", status=status, cost_usd=D(cost), reserved_usd=D(reserved),
                      cost_limit_usd=None if limit is None else D(limit))


def test_waiters_are_woken_in_order_while_the_headroom_lasts() -> None:
    waiting = [D(2), D(3), D(1), D(1)]
    assert wake_order(_task("0", "2"), waiting) == [0, 2]  # 3 left: 2 fits, 3 does not, 1 does
    assert wake_order(_task("0", "5"), waiting) == []
    assert wake_order(_task("4.5", "0"), waiting) == [0, 1, 2, 3]  # all four now latch: decided at once
    assert wake_order(_task("0", "5", status="stopped"), waiting) == [0, 1, 2, 3]
    assert wake_order(_task("0", "5", limit=None), waiting) == [0, 1, 2, 3]


def test_the_wait_and_its_retry_after() -> None:
    settings = Settings(database_url="postgresql+asyncpg://unused/x", cost_wait_s=30.0)
    assert Policy(task_value(cost_wait_s=None), settings).cost_wait_s == 30.0
    assert Policy(task_value(cost_wait_s=0.5), settings).cost_wait_s == 0.5
    assert (retry_after_s(0), retry_after_s(0.5), retry_after_s(30), retry_after_s(600)) == (1, 1, 30, 60)
    err = cost_reserved(_task("0.5", "4"), D("1.2"), 30.02, 30)
    assert (err.status, err.type, err.code) == (429, "rate_limit_error", "cost_reserved")
    assert err.headers == {"retry-after": "30", "x-should-retry": "true"}
    assert "$0.50 spent and $4.00 held" in err.message and "$1.20" in err.message and "$5.00" in err.message
