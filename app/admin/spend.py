"""``GET /admin/spend``: the fleet's spend to export, from the durable spend record.

Dollars, input and output tokens and requests per budget, task, run, model and UTC day
(any of them, ``group_by``), read from ``spend_daily`` (:mod:`app.db.spend`: written in
the statement that settles each response on its task, never pruned), so a budget's
figures match its own totals (``budget_windows``) to the cent over the same days. A
budget's row sums its own tasks and those of the budgets nested in it, as its totals
do (rows of nested budgets count again in their parent's: they do not add up to the
fleet's ``total``). ``run`` is the run a budget key's task was opened for (its
metadata's ``run``), ``model`` the model the client asked for (``null``: unknown).

Days are UTC; a request is dated by its settlement (its last byte). ``from`` and ``to``
(ISO dates, or date-times taken at their UTC day) are both included; default: the 30
days up to today (``from`` alone: up to today or its 366th day, whichever is first).
``format``: ``json`` (a page with ``next``), ``csv`` or ``jsonl`` (the next page in a
``Link: <...>; rel="next"`` header). Errors in the admin API's
shape: 422 ``validation_error`` for an unknown ``group_by`` key, a date that is not ISO
8601, ``from`` after ``to``, or a range longer than :data:`MAX_DAYS` days.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any, Literal

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, Field

from app.admin.errors import AdminError, responses
from app.db import sql
from app.db.sql import assemble

router = APIRouter()

MAX_DAYS = 366
DEFAULT_DAYS = 30
#: ``group_by`` keys and the SQL expression each groups on (never text from the request).
KEYS: dict[str, str] = {
    "budget": "coalesce(c.rollup, s.budget_id)",
    "task": "s.task_id",
    "run": "t.metadata->>'run'",
    "model": "nullif(s.model, '')",
    "day": "s.day",
}
#: ``group_by`` as the OpenAPI document describes it (checked by :func:`keys_of`, whose
#: message names the key at fault).
GROUP_BY = ("^[ \\t\\r\\n]*((budget|task|run|model|day)[ \\t\\r\\n]*"
            "(,[ \\t\\r\\n]*(budget|task|run|model|day)[ \\t\\r\\n]*)*)?$")
_BLANK = " \t\r\n"
METRICS = ("requests", "input_tokens", "output_tokens", "total_tokens", "cost_usd")
#: The joins a key needs (the statement's text: app/db/sql/admin.sql, ``spend_page``).
_JOINS = {"budget": " LEFT JOIN chain c ON c.budget_id = s.budget_id", "run": " LEFT JOIN tasks t ON t.id = s.task_id"}
_TOTAL = sql.statement("spend_total")


class SpendPage(BaseModel):
    """One page of ``GET /admin/spend?format=json``."""

    group_by: list[str] = Field(..., description="The keys each row is grouped by, in order.")
    from_: date = Field(..., alias="from", description="First UTC day included.")
    to: date = Field(..., description="Last UTC day included.")
    data: list[dict[str, Any]] = Field(..., description=(
        "One row per group: its keys (budget, task, run, model: text or null; day: an ISO date), requests, "
        "input_tokens, output_tokens, total_tokens and cost_usd (US dollars, an exact decimal as text)."))
    total: dict[str, Any] = Field(..., description="The fleet's sums over the days (each request once).")
    has_more: bool
    next: str | None = Field(None, description="The next page's path and query, or null.")


def _day(value: str | None, param: str) -> date | None:
    """An ISO date, or a date-time at its UTC day (UTC when it names no zone)."""
    if value is None:
        return None
    try:
        if len(value) == 10:
            return date.fromisoformat(value)
        at = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
        return (at if at.tzinfo is None else at.astimezone(timezone.utc)).date()
    except (ValueError, OverflowError):
        raise AdminError(422, "validation_error", f"query.{param}: not an ISO 8601 date or date-time in years "
                         "1 to 9999 (e.g. 2026-12-01 or 2026-12-01T00:00:00Z).", f"query.{param}") from None


def _plus(day: date, days: int) -> date:
    """``day`` moved by ``days``, held within the calendar's years 1 to 9999."""
    try:
        return day + timedelta(days=days)
    except OverflowError:
        return date.min if days < 0 else date.max


def span(from_text: str | None, to_text: str | None, today: date) -> tuple[date, date]:
    """The UTC days ``(first, last)`` of a query (both included; pure). Defaults: ``from``
    the :data:`DEFAULT_DAYS` days up to ``to``; ``to`` today, but within :data:`MAX_DAYS`
    days from ``from`` (and not before it). 422 when ``from`` is after ``to`` or the range
    is longer than :data:`MAX_DAYS` days."""
    first, last = _day(from_text, "from"), _day(to_text, "to")
    if last is None:
        last = today if first is None else max(first, min(today, _plus(first, MAX_DAYS - 1)))
    if first is None:
        first = _plus(last, 1 - DEFAULT_DAYS)
    if first > last:
        raise AdminError(422, "validation_error", f"query.from: {first} is after to ({last}).", "query.from")
    if (last - first).days + 1 > MAX_DAYS:
        raise AdminError(422, "validation_error", f"query.from: {first} to {last} is {(last - first).days + 1} "
                         f"days; export at most {MAX_DAYS} days at a time.", "query.from")
    return first, last


def keys_of(text: str) -> list[str]:
    """``group_by`` as a list of known keys, in order, each once (``""``: none, one total
    row); 422 naming the position of an unknown key (never echoing the input)."""
    if not text.strip(_BLANK):
        return []
    keys = [k.strip(_BLANK) for k in text.split(",")]
    for n, k in enumerate(keys, 1):
        if k not in KEYS:
            raise AdminError(422, "validation_error", f"query.group_by: key {n} is not a key to group by; use "
                             f"any of {', '.join(KEYS)}, separated by commas.", "query.group_by")
    return list(dict.fromkeys(keys))


def query(keys: list[str]) -> str:
    """The page's statement (``$1``, ``$2`` the days, ``$3`` limit, ``$4`` offset) for
    ``keys`` (checked by :func:`keys_of`): ``spend_page`` in app/db/sql/admin.sql filled
    in (:mod:`app.db.sql.assemble`: 325 orderings of the five keys, each its own joins)."""
    joins = "".join(join for key, join in _JOINS.items() if key in keys)
    group = (" GROUP BY " + ", ".join(KEYS[k] for k in keys)
             + " ORDER BY " + ", ".join(f"{KEYS[k]} NULLS FIRST" for k in keys)) if keys else ""
    return assemble.fill("spend_page", keys="".join(f"{KEYS[k]} AS {k}, " for k in keys), joins=joins, group=group,
                         **{"with": sql.statement("spend_chain") + " " if "budget" in keys else ""})


def _row(record: Any, keys: list[str]) -> dict[str, Any]:
    row = {k: (record[k].isoformat() if k == "day" else record[k]) for k in keys}
    row.update(requests=record["requests"], input_tokens=record["input_tokens"],
               output_tokens=record["output_tokens"], total_tokens=record["input_tokens"] + record["output_tokens"],
               cost_usd=format(Decimal(record["cost_usd"]), "f"))
    return row


def _cell(value: Any) -> Any:
    """A CSV cell: text a spreadsheet would read as a formula is quoted (``'=...``)."""
    return "'" + value if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r") else value


def _next(request: Request, offset: int) -> str:
    url = request.url.include_query_params(offset=offset)
    return f"{url.path}?{url.query}"


@router.get("/spend", response_model=SpendPage, response_model_by_alias=True, responses={
    **responses(), 200: {"content": {"text/csv": {}, "application/x-ndjson": {}},
                         "description": "A page of spend rows (json), or the rows as CSV or JSON lines."}})
async def spend(request: Request,
                group_by: str = Query("task", max_length=200, json_schema_extra={"pattern": GROUP_BY}, description=(
                    "Keys to group by, separated by commas: budget, task, run, model, day (empty: one total row).")),
                from_: str | None = Query(None, alias="from", max_length=40, json_schema_extra={"format": "date"},
                                          description=("First UTC day (ISO date, or a date-time taken at its UTC "
                                                       "day); default 29 days before to.")),
                to: str | None = Query(None, max_length=40, json_schema_extra={"format": "date"},
                                       description=("Last UTC day, included (as from); default today, or the 366th "
                                                    "day from from when that is earlier.")),
                format: Literal["json", "csv", "jsonl"] = Query("json", description="json, csv or jsonl."),
                limit: int = Query(1000, ge=1, le=10_000, description="Rows per page."),
                offset: int = Query(0, ge=0, le=10_000_000, description="Rows to skip (see next).")) -> Any:
    """Spend per budget, task, run, model and UTC day, from the durable spend record;
    a budget's rows match its own totals over the same days (see the module docstring)."""
    keys = keys_of(group_by)
    first, last = span(from_, to, datetime.now(timezone.utc).date())
    async with request.app.state.db.acquire() as conn:
        records = await conn.fetch(query(keys), first, last, limit + 1, offset)
        total = await conn.fetchrow(_TOTAL, first, last) if format == "json" else None
    rows = [_row(r, keys) for r in records[:limit]]
    more = len(records) > limit
    next_page = _next(request, offset + limit) if more else None
    if format == "json":
        return SpendPage.model_validate({"group_by": keys, "from": first, "to": last, "data": rows,
                                         "total": _row(total, []), "has_more": more, "next": next_page})
    headers = {"link": f'<{next_page}>; rel="next"'} if next_page else {}
    if format == "jsonl":
        return Response("".join(json.dumps(r) + "\n" for r in rows), media_type="application/x-ndjson",
                        headers=headers)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=[*keys, *METRICS], lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: _cell(v) for k, v in r.items()} for r in rows)
    return Response(out.getvalue(), media_type="text/csv", headers=headers)
