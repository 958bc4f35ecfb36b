"""A budget and its window as the statements read them: ``budgets`` and ``budget_windows``
rows (``SELECT *``, app/db/schema.py), typed where they enter the budget code.

asyncpg gives untyped records; :func:`budget_row` and :func:`window_row` say once what a
row holds (``tests/test_db.py`` keeps the schema and the migrated database the same), so
what reads a row is checked by mypy: a column misspelt or a limit read as a number when
it may be ``NULL``. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal
from typing import Any, TypedDict, cast

from app.budgets.windows import Window


class BudgetRow(TypedDict):
    """One ``budgets`` row: the ceilings (``NULL``: none), the calendar ``window``
    (``day``, ``week``, ``month``; ``NULL``: lifetime) in ``timezone``, the kill switch
    (``paused_*``), warning ``thresholds`` (percents), per-model limits (a JSON list of
    ``{"model": glob, ...}``, :mod:`app.budgets.model_limits`) and rates per minute."""

    id: str
    parent_id: str | None
    depth: int
    request_limit: int | None
    token_limit: int | None
    cost_limit_usd: Decimal | None
    window: Window | None
    timezone: str
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    paused_at: datetime | None
    paused_by: str | None
    paused_reason: str | None
    thresholds: list[float] | None
    model_limits: list[dict[str, Any]] | None
    requests_per_minute: int | None
    tokens_per_minute: int | None


class WindowRow(TypedDict):
    """One ``budget_windows`` row: the spend of a budget in the window starting at
    ``window_start`` (``window_end`` ``NULL``: the lifetime window), dollars settled
    (``cost_usd``) and reserved by requests in flight, requests granted to escrow leases."""

    budget_id: str
    window_start: datetime
    window_end: datetime | None
    admitted_requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal
    reserved_usd: Decimal
    exhausted_at: datetime | None
    leased_requests: int


def budget_row(record: Mapping[str, Any]) -> BudgetRow:
    """A ``budgets`` record (``SELECT *``) as its typed row (a copy)."""
    return cast(BudgetRow, dict(record))


def window_row(record: Mapping[str, Any]) -> WindowRow:
    """A ``budget_windows`` record (``SELECT *`` or ``RETURNING *``) as its typed row (a copy)."""
    return cast(WindowRow, dict(record))
